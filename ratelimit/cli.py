"""The ``ratelimit`` command line.

- ``ratelimit demo``: several threads share one in-process limiter for a few seconds,
  and the achieved rate is printed against the configured one.
- ``ratelimit size``: recommended settings for every algorithm from a provider's
  documented limits, the static per-worker split beside them, and the expected wait
  at a given demand (the arithmetic is in ``ratelimit._sizing``).

Bad arguments end the command with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from typing import NoReturn

from ._errors import AcquireTimeout
from ._limiter import Limiter
from ._limiters import LeakyBucket, SlidingWindow, TokenBucket
from ._rates import Rate, parse_rate
from ._size_report import size_json, size_text
from ._sizing import DEFAULT_HEADROOM, size

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


def _rate(text: str) -> Rate:
    try:
        return parse_rate(text, argument=None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _headroom(text: str) -> float:
    # "5%" or "0.05"; a bare "5" is refused rather than guessed (5 % or 500 %?).
    percent = text.strip().endswith("%")
    try:
        value = float(text.strip().rstrip("%")) / (100 if percent else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction or a percentage (0.05 or 5%), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 1 (0.05) or a percentage, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: no usage block above them."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _workers(args: argparse.Namespace) -> tuple[int, int]:
    """(workers in all, boxes) from --workers, --boxes and --workers-per-box."""
    boxes: int = args.boxes or 1
    if args.workers_per_box is None:
        return args.workers or 1, boxes
    total: int = boxes * args.workers_per_box
    if args.workers is not None and args.workers != total:
        raise _UsageError(
            f"--workers {args.workers} disagrees with --boxes {boxes} x --workers-per-box {args.workers_per_box}"
        )
    return total, boxes


class _UsageError(Exception):
    """Arguments that parse one by one but not together."""


def size_command(args: argparse.Namespace) -> int:
    workers, boxes = _workers(args)
    demand = None if args.demand is None else args.demand.per_second
    sizing = size(args.limit, args.burst, workers, boxes, args.headroom, demand)
    print(json.dumps(size_json(sizing), indent=2) if args.json else size_text(sizing))
    return 0


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


def _add_provider(command: argparse.ArgumentParser, limit_default: Rate | None) -> None:
    command.add_argument(
        "--limit",
        type=_rate,
        required=limit_default is None,
        default=limit_default,
        help="the provider's documented rate: N/s, N/min, N/hour, N/day (e.g. 1000/min)"
        + ("" if limit_default is None else f"; default {limit_default}"),
    )
    command.add_argument("--burst", type=_positive_float, help="the provider's documented burst, if any")
    command.add_argument(
        "--headroom",
        type=_headroom,
        default=DEFAULT_HEADROOM,
        help=f"fraction of the provider's rate left unused, e.g. 0.05 or 5%% (default {DEFAULT_HEADROOM:g})",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ratelimit", description="Rate limiting for API-calling pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="threads sharing one in-process limiter; prints the achieved rate")
    run.add_argument("--algorithm", choices=["token-bucket", "leaky-bucket", "sliding-window"], default="token-bucket")
    run.add_argument("--rate", type=_positive_float, default=50.0, help="grants per second (default 50)")
    run.add_argument("--burst", type=_positive_float, default=10.0, help="capacity / window limit (default 10)")
    run.add_argument("--threads", type=_positive_int, default=8, help="worker threads (default 8)")
    run.add_argument("--seconds", type=_positive_float, default=3.0, help="how long to run (default 3)")
    run.set_defaults(func=demo)

    sizing = commands.add_parser(
        "size",
        help="recommended limiter settings from a provider's documented limits",
        description="Recommended capacity and rate for each algorithm from the provider's documented limits, "
        "the static per-worker split beside them, and the expected wait at a demand. "
        "Token bucket: refill = limit x (1 - headroom), capacity = the burst (without one: "
        "floor(limit x headroom), so that no provider window sees more than its limit). "
        "Expected wait (Poisson arrivals at demand L, refill M, capacity C, r = L/M): "
        "Wq x exp(-theta (C - 1) / M) with Wq = r / (2M(1 - r)) and theta solving L(exp(theta/M) - 1) = theta; "
        "at or above the rate the wait grows without bound.",
    )
    _add_provider(sizing, None)
    sizing.add_argument("--workers", type=_positive_int, help="workers sharing the budget, all boxes together")
    sizing.add_argument("--boxes", type=_positive_int, help="machines the workers run on (default 1)")
    sizing.add_argument("--workers-per-box", type=_positive_int, help="workers on each box (with --boxes)")
    sizing.add_argument("--demand", type=_rate, help="requests the workers would send, all together (e.g. 12/s)")
    sizing.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of text")
    sizing.set_defaults(func=size_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ratelimit`` and ``python -m ratelimit``."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
    except _UsageError as exc:
        parser.exit(2, f"ratelimit {args.command}: error: {exc}\n")
    return result
