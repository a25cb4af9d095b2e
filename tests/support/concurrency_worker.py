"""A worker process for the ConcurrencyLimit tests.

``python concurrency_worker.py URL NAME MAX LEASE hold THREADS SECONDS`` holds slots
from threads in a loop and prints one JSON object: each hold's (start, end) wall-clock
times, taken just inside the slot, and the script calls made.

``python concurrency_worker.py URL NAME MAX LEASE grab N`` takes N slots, prints
``held`` and sleeps until killed (the crash test kills it with SIGKILL).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ratelimit import ConcurrencyLimit, RedisBackend


def main() -> None:
    url, name, most, lease, mode = sys.argv[1:6]
    backend = RedisBackend.from_url(url)
    limit = ConcurrencyLimit(int(most), lease_seconds=float(lease), backend=backend, name=name)
    if mode == "grab":
        leases = [limit.take() for _ in range(int(sys.argv[6]))]
        print("held", len(leases), flush=True)
        time.sleep(3600)
        return
    threads, seconds = int(sys.argv[6]), float(sys.argv[7])
    calls = [0]
    run = backend.run

    def counted(*args: object) -> object:
        calls[0] += 1
        return run(*args)  # type: ignore[arg-type]

    backend.run = counted  # type: ignore[method-assign,assignment]
    stop = time.time() + seconds
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def work() -> None:
        while time.time() < stop:
            with limit.hold():
                start = time.time()
                time.sleep(0.002)
                end = time.time()
            with lock:
                spans.append((start, end))

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(json.dumps({"spans": spans, "calls": calls[0]}))


if __name__ == "__main__":
    main()
