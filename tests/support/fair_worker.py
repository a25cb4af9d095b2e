"""A worker process for the fair-share tests: threads of one tenant acquiring on a
Redis budget shared fairly.

Run as ``python fair_worker.py URL NAME RATE TENANT WEIGHT THREADS SECONDS``: once
ready it prints ``ready`` and reads a line from stdin, the wall-clock time ``START``
(a loaded machine starts processes slowly: the test starts them all first); the
threads start then and acquire back to back for ``SECONDS``. Prints one JSON object:
the wall-clock time of every grant, the seconds the first one waited, and the store
calls made.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from ratelimit import AcquireTimeout, FairShare, RedisBackend, SQLiteBackend, TokenBucket


def main() -> None:
    url, name, rate, tenant, weight, threads, seconds = sys.argv[1:8]
    backend: RedisBackend | SQLiteBackend
    backend = SQLiteBackend(url[len("sqlite:") :]) if url.startswith("sqlite:") else RedisBackend.from_url(url)
    share = FairShare(TokenBucket(1, float(rate), backend=backend, name=name), weights={tenant: float(weight)})
    view = share.for_key(tenant)
    view.peek()  # connected
    # Every store call a decision makes, counted (what "one call per grant" is held to).
    calls = [0]
    ask = share._handle.ask

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return ask(*args)

    share._handle.ask = counted  # type: ignore[method-assign, assignment]
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
    print(json.dumps({"grants": grants, "first": first[0] if first else None, "calls": calls[0]}))


if __name__ == "__main__":
    main()
