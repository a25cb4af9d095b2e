"""A worker process for the shared-breaker tests.

Run as ``python breaker_worker.py URL NAME NOW THREADS TRIES [OUTCOME]``: builds a
``CircuitBreaker`` on the Redis at URL, at the fixed time NOW (so that several
processes agree on the time without sleeping), and has THREADS threads ask it TRIES
times each. With OUTCOME (``fail``/``ok``), each admitted call reports it. Prints one
JSON object: how many calls were admitted, how many of them as probes, and how many
were refused.
"""

from __future__ import annotations

import json
import sys
import threading

from ratelimit import CircuitBreaker, CircuitOpen, ManualClock, RedisBackend


def main() -> None:
    url, name, now, threads, tries = sys.argv[1:6]
    outcome = sys.argv[6] if len(sys.argv) > 6 else None
    breaker = CircuitBreaker(
        min_calls=4,
        cooldown=30,
        half_open_probes=2,
        probe_timeout=60,
        backend=RedisBackend.from_url(url),
        name=name,
        clock=ManualClock(float(now)),
    )
    counts = {"admitted": 0, "probes": 0, "refused": 0}
    lock = threading.Lock()
    start = threading.Barrier(int(threads))

    def work() -> None:
        start.wait()
        for _ in range(int(tries)):
            try:
                ticket = breaker.allow()
            except CircuitOpen:
                with lock:
                    counts["refused"] += 1
                continue
            with lock:
                counts["admitted"] += 1
                counts["probes"] += ticket.probe
            if outcome is not None:
                breaker.record(ticket, outcome == "ok")

    workers = [threading.Thread(target=work) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
