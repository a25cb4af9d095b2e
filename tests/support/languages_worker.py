"""A Python worker for the tests of one budget across languages, the twin of
``node_worker.mjs``: threads acquiring from one Redis budget.

Run as ``python languages_worker.py URL NAME bucket CAPACITY RATE THREADS SECONDS`` or
``... window LIMIT WINDOW THREADS SECONDS``. Prints one JSON object: ``grants``, for
each grant the earliest and the latest time it can have been granted at (the time
before the call plus the wait it was told, and the time after its sleep: the store's
grant lies between, whatever the process's scheduling), and the acquire calls made.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import AcquireTimeout, RedisBackend, SlidingWindow, TokenBucket


def main() -> None:
    url, name, mode, a, b, threads, seconds = sys.argv[1:8]
    backend = RedisBackend.from_url(url)
    limiter = (
        SlidingWindow(float(a), float(b), backend=backend, name=name)
        if mode == "window"
        else TokenBucket(float(a), float(b), backend=backend, name=name)
    )
    stop = time.time() + float(seconds)
    grants: list[tuple[float, float]] = []
    calls = [0]
    lock = threading.Lock()

    def work() -> None:
        while (left := stop - time.time()) > 0:
            with lock:
                calls[0] += 1
            sent = time.time()
            try:
                waited = limiter.acquire(timeout=left)
            except AcquireTimeout:
                return
            went = time.time()
            with lock:
                grants.append((sent + waited, went))

    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    backend.close()
    print(json.dumps({"grants": grants, "calls": calls[0]}))


if __name__ == "__main__":
    main()
