"""A worker process for the approximate window's multi-process test.

Run as ``python counter_worker.py URL NAME LIMIT WINDOW THREADS SECONDS``: threads
acquiring from one ``SlidingWindow(approximate=True)`` in Redis until the run ends.
Prints one JSON object: the wall-clock time each grant returned at, and the most any
return came after its scheduled moment (the time asked plus the wait given).
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
    limiter = SlidingWindow(float(limit), float(window), approximate=True, backend=backend, name=name)
    stop = time.time() + float(seconds)
    grants: list[float] = []
    late = [0.0]
    lock = threading.Lock()

    def work() -> None:
        while True:
            asked = time.time()
            if asked >= stop:
                return
            try:
                wait = limiter.acquire(timeout=stop - asked)
            except AcquireTimeout:
                return
            now = time.time()
            with lock:
                grants.append(now)
                late[0] = max(late[0], now - asked - wait)

    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps({"grants": grants, "lateness": late[0], "guard": limiter.guard}))


if __name__ == "__main__":
    main()
