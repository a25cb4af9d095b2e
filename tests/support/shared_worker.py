"""A worker process for the multi-process tests: threads acquiring from one Redis budget.

Run as ``python shared_worker.py URL NAME CAPACITY RATE THREADS SECONDS [LEASE]``.
Prints one JSON object: the wall-clock time of every grant and the number of acquire
calls made. With ``LEASE`` (seconds) the limiter leases, with a guard of 0.05 s for
send jitter, and each thread calls ``try_acquire`` as fast as it can, pausing 1 ms
after a refusal: the hardest case for a lease's bound, a budget emptied the moment
it refills. ``LEASE`` 0: no lease, the same guard and the same tries, for a fleet
mixing the two.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import AcquireTimeout, RedisBackend, TokenBucket


def main() -> None:
    url, name, capacity, rate, threads, seconds = sys.argv[1:7]
    trying = len(sys.argv) > 7
    lease = float(sys.argv[7]) or None if trying else None
    backend = RedisBackend.from_url(url)
    guard = 0.05 if trying else None
    limiter = TokenBucket(float(capacity), float(rate), backend=backend, name=name, lease=lease, guard=guard)
    stop = time.time() + float(seconds)
    grants: list[float] = []
    calls = [0]
    lock = threading.Lock()

    def work() -> None:
        while True:
            left = stop - time.time()
            if left <= 0:
                return
            with lock:
                calls[0] += 1
            if trying:
                if not limiter.try_acquire():
                    time.sleep(0.001)
                    continue
            else:
                try:
                    limiter.acquire(timeout=left)
                except AcquireTimeout:
                    return
            now = time.time()
            with lock:
                grants.append(now)

    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    backend.close()  # gives back what is left of a lease
    print(json.dumps({"grants": grants, "calls": calls[0]}))


if __name__ == "__main__":
    main()
