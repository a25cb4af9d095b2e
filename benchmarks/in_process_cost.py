"""What one uncontended in-process decision costs, as a multiple of a floor.

The floor is the least any thread-safe limiter must do per decision: ``with Lock():
monotonic()``. Against it, in the same run: ``try_acquire()`` and ``acquire()`` (which
never waits here) of each algorithm built the plain way (``TokenBucket(capacity, rate)``
and so on: the default in-process store, no name, the default guard), with a budget
too large ever to refuse. Beside them, as information: a composite of two limits, a
budget with priorities (the limiter and its ``low`` view), a learned rate
(``adaptive=``), and a token bucket after its first refund (from then on every grant
is remembered for the refund that may name it, off the quickest path).

The candidates and the floor take turns, round after round, so that whatever else the
machine does falls on all of them alike; each ratio is the median over the rounds of
that round's cost over that round's floor. Every candidate, the floor included, is one
Python call per iteration of the same loop::

    python benchmarks/in_process_cost.py [--calls 20000] [--rounds 15] [--window 1]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
from collections.abc import Callable
from itertools import repeat

from ratelimit import Adaptive, Composite, LeakyBucket, Quota, SlidingWindow, TokenBucket

#: A budget so large that no call is ever refused: this measures the decision, not waiting.
HUGE = 1e15

#: The figure each algorithm must keep within (issue 25).
TARGET = 3.0

Call = Callable[[], object]


def _floor() -> Call:
    lock = threading.Lock()
    monotonic = time.monotonic

    def floor() -> None:
        with lock:
            monotonic()

    return floor


def _algorithms(window: float) -> dict[str, Callable[[], TokenBucket | LeakyBucket | SlidingWindow]]:
    return {
        "token bucket": lambda: TokenBucket(HUGE, HUGE),
        "leaky bucket": lambda: LeakyBucket(HUGE, HUGE),
        # The plain way: the default guard widens the window, and the log holds every
        # grant of it (one entry per call at this pace).
        "exact window": lambda: SlidingWindow(HUGE, window),
        "approximate window": lambda: SlidingWindow(HUGE, window, approximate=True),
    }


def _candidates(window: float) -> tuple[dict[str, Call], dict[str, Call]]:
    """The algorithms' calls (held to the target) and the others (information)."""
    held: dict[str, Call] = {}
    for label, build in _algorithms(window).items():
        held[f"{label}: try_acquire"] = build().try_acquire
        held[f"{label}: acquire"] = build().acquire
    shown: dict[str, Call] = {}
    composite = Composite([TokenBucket(HUGE, HUGE), SlidingWindow(HUGE, window, approximate=True)])
    shown["composite (bucket + approximate window): try_acquire"] = composite.try_acquire
    shown["composite (bucket + approximate window): acquire"] = composite.acquire
    lanes = TokenBucket(HUGE, HUGE, low_share=0.5)
    shown["priorities, high (the limiter): try_acquire"] = lanes.try_acquire
    shown["priorities, low (limiter.low): try_acquire"] = lanes.low.try_acquire
    shown["adaptive token bucket: try_acquire"] = TokenBucket(HUGE, HUGE, adaptive=Adaptive()).try_acquire
    shown["quota (a day, New York): try_acquire"] = Quota(HUGE, "day", tz="America/New_York").try_acquire
    refunded = TokenBucket(HUGE, HUGE)
    refunded.acquire()
    refunded.refund()
    shown["token bucket after a refund: try_acquire"] = refunded.try_acquire
    shown["token bucket after a refund: acquire"] = refunded.acquire
    return held, shown


def _seconds(call: Call, calls: int) -> float:
    """Seconds per call of ``calls`` calls in a row."""
    began = time.perf_counter()
    for _ in repeat(None, calls):
        call()
    return (time.perf_counter() - began) / calls


def measure(calls: int, rounds: int, window: float) -> tuple[list[float], dict[str, list[float]], dict[str, Call]]:
    """Each round's floor, and each candidate's cost over that round's floor."""
    held, shown = _candidates(window)
    candidates = {**held, **shown}
    floor = _floor()
    floors: list[float] = []
    ratios: dict[str, list[float]] = {label: [] for label in candidates}
    # A warm-up round, not counted: the first calls fill caches and grow the logs.
    for call in (floor, *candidates.values()):
        _seconds(call, calls)
    for _ in range(rounds):
        before = _seconds(floor, calls)
        costs = {label: _seconds(call, calls) for label, call in candidates.items()}
        # The floor on both sides of the candidates: a disturbance in mid-round falls
        # on it too.
        base = (before + _seconds(floor, calls)) / 2
        floors.append(base)
        for label, cost in costs.items():
            ratios[label].append(cost / base)
    return floors, ratios, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per candidate per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds, the median reported (default 15)")
    parser.add_argument("--window", type=float, default=1.0, help="the windows' length, seconds (default 1)")
    parser.add_argument("--no-gc", action="store_true", help="disable the garbage collector while measuring")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    floors, ratios, held = measure(args.calls, args.rounds, args.window)
    floor = statistics.median(floors)
    print(f"floor `with Lock(): monotonic()`: median {floor * 1e9:.0f} ns a call, {args.rounds} rounds")
    print(f"{'':<56} {'median':>8} {'min':>7} {'max':>7} {'ns':>7}")
    worst = 0.0
    for label, values in ratios.items():
        median = statistics.median(values)
        mark = ""
        if label in held:
            worst = max(worst, median)
            mark = "  over" if median > TARGET else ""
        print(
            f"{label:<56} {median:>7.2f}x {min(values):>6.2f}x {max(values):>6.2f}x {median * floor * 1e9:>7.0f}{mark}"
        )
    print(f"worst algorithm: {worst:.2f}x the floor (target: at most {TARGET:g}x)")


if __name__ == "__main__":
    main()
