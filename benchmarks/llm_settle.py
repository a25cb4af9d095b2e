"""How much of an LLM token budget a fleet of threads uses when its estimates run high.

The ``ask()`` pattern of docs/costs.md: each call acquires ``[1, estimate]`` on a composite of
requests and tokens per minute, "calls the API" (sleeps a latency) and settles with
the real use, a quarter to a third of the estimate. With several threads the tokens
limit is contended, and a settle that cannot name its grant gives nothing back, so
most of the budget idles; one that names it hands the unused tokens on at once.

    python benchmarks/llm_settle.py --threads 8 --seconds 20 [--redis redis://127.0.0.1:6379/0]

Prints the tokens used per second against the tokens limit's rate (its budget, after
the burst), the requests per second, and the largest use in any window of the
tokens limit's own length against what the limit allows there.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import uuid

from ratelimit import Composite, RedisBackend, TokenBucket


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--redis", default=None, help="a Redis URL (default: in process)")
    parser.add_argument("--tokens-per-sec", type=float, default=2_000.0)
    args = parser.parse_args()

    rate = args.tokens_per_sec
    backend = None if args.redis is None else RedisBackend.from_url(args.redis)
    name = None if backend is None else f"llm-{uuid.uuid4().hex[:8]}"
    # Per-minute limits scaled to seconds: a burst of two seconds' worth, as a
    # provider's minute window holds a minute's.
    llm = Composite([TokenBucket(100, 50), TokenBucket(2 * rate, rate)], backend=backend, name=name)
    used: list[tuple[float, float]] = []
    lock = threading.Lock()
    stop = time.monotonic() + args.seconds

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            estimate = [1, 400]
            llm.acquire(estimate)
            start = time.monotonic()
            time.sleep(rng.uniform(0.05, 0.2))  # the API's latency
            actual = rng.randint(100, 133)  # a quarter to a third of the estimate
            llm.settle(estimate, [1, actual])
            with lock:
                used.append((start, float(actual)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    span = time.monotonic() - began
    total = sum(n for _, n in used)
    budget = 2 * rate + rate * span
    times = sorted(used)
    most = 0.0
    j = 0
    inside = 0.0
    for t, n in times:
        inside += n
        while times[j][0] < t - 2.0:
            inside -= times[j][1]
            j += 1
        most = max(most, inside)
    allowed = 2 * rate + 2 * rate
    print(
        f"threads={args.threads} store={'redis' if backend else 'memory'}: "
        f"tokens used {total / span:,.0f}/s of a {rate:,.0f}/s limit ({total / budget:.0%} of the budget "
        f"incl. burst), {len(used) / span:.1f} calls/s; most in any 2 s: {most:,.0f} (allowed {allowed:,.0f})"
    )
    if backend is not None:
        backend.close()


if __name__ == "__main__":
    main()
