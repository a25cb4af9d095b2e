"""The ``ratelimit`` command line.

``ratelimit demo``: several threads share one in-process limiter for a few seconds,
and the achieved rate is printed against the configured one. (``bench`` and ``size``
come with the benchmark CLI.)
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Sequence

from ._errors import AcquireTimeout
from ._limiter import Limiter
from ._limiters import LeakyBucket, SlidingWindow, TokenBucket

__all__ = ["main"]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


def _build(algorithm: str, rate: float, burst: float) -> Limiter[float]:
    if algorithm == "token-bucket":
        return TokenBucket(capacity=burst, refill_per_sec=rate)
    if algorithm == "leaky-bucket":
        # The queue must hold every thread's request, or the demo would just overflow.
        return LeakyBucket(capacity=max(burst, 1_000), leak_per_sec=rate)
    return SlidingWindow(limit=burst, window_seconds=burst / rate)


def demo(args: argparse.Namespace) -> int:
    limiter = _build(args.algorithm, args.rate, args.burst)
    grants = [0] * args.threads
    waited = [0.0] * args.threads
    stop = time.monotonic() + args.seconds

    def worker(index: int) -> None:
        while True:
            try:
                # A grant due after the end of the run is not taken (nor consumed).
                wait = limiter.acquire(timeout=max(0.0, stop - time.monotonic()))
            except AcquireTimeout:
                return
            grants[index] += 1
            waited[index] += wait

    print(f"{args.threads} threads share {limiter!r} for {args.seconds:g} s ...", flush=True)
    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    elapsed = time.monotonic() - started
    total = sum(grants)
    # What a perfect limiter lets through in the run: the free burst plus the rate.
    seconds, rate, burst = args.seconds, args.rate, args.burst
    if args.algorithm == "token-bucket":
        allowed = math.floor(burst + rate * seconds)
    elif args.algorithm == "sliding-window":
        allowed = math.floor(burst * math.ceil(seconds / (burst / rate)))
    else:
        allowed = math.floor(rate * seconds) + 1
    print(f"granted        {total} in {elapsed:.2f} s; the configured limit allows {allowed} ({total / allowed:.1%})")
    print(f"per thread     {min(grants)} to {max(grants)} grants")
    print(f"mean wait      {sum(waited) / max(total, 1) * 1000:.1f} ms per acquire")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratelimit", description="Rate limiting for API-calling pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="threads sharing one in-process limiter; prints the achieved rate")
    run.add_argument("--algorithm", choices=["token-bucket", "leaky-bucket", "sliding-window"], default="token-bucket")
    run.add_argument("--rate", type=_positive_float, default=50.0, help="grants per second (default 50)")
    run.add_argument("--burst", type=_positive_float, default=10.0, help="capacity / window limit (default 10)")
    run.add_argument("--threads", type=_positive_int, default=8, help="worker threads (default 8)")
    run.add_argument("--seconds", type=_positive_float, default=3.0, help="how long to run (default 3)")
    run.set_defaults(func=demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ratelimit`` and ``python -m ratelimit``."""
    args = _parser().parse_args(argv)
    result: int = args.func(args)
    return result
