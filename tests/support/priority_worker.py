"""A worker process for the priority tests: threads acquiring at one priority from one
Redis budget with priorities.

Run as ``python priority_worker.py URL NAME CAPACITY RATE LOW_SHARE PRIORITY THREADS
SECONDS GAP``: ``PRIORITY`` is ``high`` or ``low``; each thread acquires, then sleeps
``GAP`` seconds (0: back to back, saturating). Prints one JSON object: for every
grant, the wall-clock time it was planned for (when the call began, plus the wait
the store decided: within a round trip of the store's own time), that wait, and
the seconds the acquire call took.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import AcquireTimeout, RedisBackend, TokenBucket


def main() -> None:
    url, name, capacity, rate, low_share, priority, threads, seconds, gap = sys.argv[1:10]
    backend = RedisBackend.from_url(url)
    limiter = TokenBucket(float(capacity), float(rate), low_share=float(low_share), backend=backend, name=name)
    acquirer = limiter.low if priority == "low" else limiter
    stop = time.time() + float(seconds)
    grants: list[tuple[float, float, float]] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            left = stop - time.time()
            if left <= 0:
                return
            began, started = time.time(), time.monotonic()
            try:
                wait = acquirer.acquire(timeout=left)
            except AcquireTimeout:
                return
            took = time.monotonic() - started
            with lock:
                grants.append((began + wait, wait, took))
            if float(gap):
                time.sleep(float(gap))

    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps({"grants": grants}))


if __name__ == "__main__":
    main()
