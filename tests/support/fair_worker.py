"""A worker process for the fair-share tests: threads of one tenant acquiring on a
Redis budget shared fairly.

Run as ``python fair_worker.py URL NAME RATE TENANT WEIGHT THREADS SECONDS``: once
ready it prints ``ready`` and reads a line from stdin, the wall-clock time ``START``
(a loaded machine starts processes slowly: the test starts them all first); the
threads start then and acquire back to back for ``SECONDS``. Prints one JSON object:
the wall-clock time of every grant, and the seconds the first one waited.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import AcquireTimeout, FairShare, RedisBackend, TokenBucket


def main() -> None:
    url, name, rate, tenant, weight, threads, seconds = sys.argv[1:8]
    backend = RedisBackend.from_url(url)
    share = FairShare(TokenBucket(1, float(rate), backend=backend, name=name), weights={tenant: float(weight)})
    view = share.for_key(tenant)
    view.peek()  # connected
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    stop = start + float(seconds)
    grants: list[float] = []
    first: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            left = stop - time.time()
            if left <= 0:
                return
            try:
                waited = view.acquire(timeout=left)
            except AcquireTimeout:
                return
            with lock:
                if not first:
                    first.append(waited)
                grants.append(time.time())

    time.sleep(max(0.0, start - time.time()))
    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    backend.close()
    print(json.dumps({"grants": grants, "first": first[0] if first else None}))


if __name__ == "__main__":
    main()
