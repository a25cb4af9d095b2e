"""A worker process: threads acquiring from one Redis sliding window.

Run as ``python window_worker.py URL NAME LIMIT WINDOW THREADS SECONDS``. Prints one
JSON object: the wall-clock time of every grant and the number of acquire calls made.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import AcquireTimeout, RedisBackend, SlidingWindow


def main() -> None:
    url, name, limit, window, threads, seconds = sys.argv[1:7]
    backend = RedisBackend.from_url(url)
    limiter = SlidingWindow(float(limit), float(window), backend=backend, name=name)
    stop = time.time() + float(seconds)
    grants: list[float] = []
    calls = [0]
    lock = threading.Lock()

    def work() -> None:
        while (left := stop - time.time()) > 0:
            with lock:
                calls[0] += 1
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
    backend.close()
    print(json.dumps({"grants": grants, "calls": calls[0]}))


if __name__ == "__main__":
    main()
