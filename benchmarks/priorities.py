"""Priorities: a person's wait while batch work saturates the same budget.

Low-priority callers acquire back to back from ``limiter.low`` and keep the budget
saturated; a few high-priority callers acquire from the limiter itself at a modest
rate (each once per ``--high-every`` seconds). Printed, for each priority: grants,
their rate and share of the budget (counted after the first second, once the burst
is spent), the wait the limiter decided (p50, p99, max) and how long ``acquire()``
took as the caller saw it (p99: the sleep's lateness and any round trip included).
The same load then runs on one queue (no ``low_share``), for comparison: there a
person waits behind every low request queued before them.

In-process state by default, all callers threads of this process. With ``--redis
URL`` the budget lives in Redis and the low callers run in ``--processes`` processes
of their own (``--low-threads`` threads each), as batch workers would::

    python benchmarks/priorities.py
    python benchmarks/priorities.py --redis redis://127.0.0.1:6379/0 --seconds 10
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ratelimit import Acquirer, AcquireTimeout, RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import percentile

#: (planned grant time: the call's start plus the decided wait, decided wait, seconds
#: the call took), wall-clock seconds.
Grant = tuple[float, float, float]


def _callers(acquirer: Acquirer, threads: int, gap: float, stop: float) -> list[Grant]:
    grants: list[Grant] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            left = stop - time.time()
            if left <= 0:
                return
            began, started = time.time(), time.monotonic()
            try:
                wait = acquirer.acquire(timeout=left)
            except AcquireTimeout:
                return
            took = time.monotonic() - started
            with lock:
                grants.append((began + wait, wait, took))
            if gap:
                time.sleep(gap)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return grants


def _build(args: argparse.Namespace, name: str, priorities: bool) -> TokenBucket:
    backend = None if args.redis is None else RedisBackend.from_url(args.redis)
    extra: dict[str, Any] = {}
    if priorities:
        extra = {"low_share": args.low_share, "borrow": not args.no_borrow}
    return TokenBucket(args.capacity, args.rate, backend=backend, name=name if backend else None, **extra)


def _low_process(args: argparse.Namespace, name: str, priorities: bool, stop: float, out: Any) -> None:
    limiter = _build(args, name, priorities)
    out.put(_callers(limiter.low if priorities else limiter, args.low_threads, 0.0, stop))


@dataclass(frozen=True)
class Run:
    high: list[Grant]
    low: list[Grant]
    begin: float
    stop: float


def run(args: argparse.Namespace, priorities: bool) -> Run:
    name = f"priorities-{uuid.uuid4().hex[:8]}"
    limiter = _build(args, name, priorities)
    begin = time.time()
    stop = begin + args.seconds
    lows: list[Grant] = []
    if args.redis is None:
        low_acquirer: Acquirer = limiter.low if priorities else limiter
        low = threading.Thread(target=lambda: lows.extend(_callers(low_acquirer, args.low_threads, 0.0, stop)))
        low.start()
        highs = _callers(limiter, args.high_threads, args.high_every, stop)
        low.join()
        return Run(highs, lows, begin, stop)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    # The low processes start first and fill the queue; the clock starts for all at once.
    begin = time.time() + 2.0
    stop = begin + args.seconds
    workers = [
        context.Process(target=_low_process, args=(args, name, priorities, stop, out), daemon=True)
        for _ in range(args.processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, begin - time.time()))
    highs = _callers(limiter, args.high_threads, args.high_every, stop)
    for _ in workers:
        lows.extend(out.get(timeout=60))
    for worker in workers:
        worker.join(10)
    return Run(highs, lows, begin, stop)


def _row(label: str, grants: list[Grant], run: Run, budget: float, waits: bool = True) -> str:
    # After the first second: the burst is spent and every caller is running.
    counted = [g for g in grants if run.begin + 1.0 <= g[0] <= run.stop]
    per_s = len(counted) / (run.stop - run.begin - 1.0)
    figures = f"{len(grants):>7}  {per_s:>7.1f}  {per_s / budget:>6.1%}"
    if not waits or not grants:
        return f"{label:<16}{figures}"
    decided = [wait for _, wait, _ in grants]
    took = [t for _, _, t in grants]
    ms = [1000 * x for x in (percentile(decided, 0.5), percentile(decided, 0.99), max(decided), percentile(took, 0.99))]
    return f"{label:<16}{figures}  {ms[0]:>8.1f}  {ms[1]:>8.1f}  {ms[2]:>8.1f}  {ms[3]:>8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=float, default=10.0, help="the bucket's burst (default 10)")
    parser.add_argument("--rate", type=float, default=200.0, help="the budget, grants per second (default 200)")
    parser.add_argument("--low-share", type=float, default=0.8, help="low priority's share (default 0.8)")
    parser.add_argument("--no-borrow", action="store_true", help="cap low priority at its share")
    parser.add_argument("--low-threads", type=int, default=16, help="low callers' threads (per process; default 16)")
    parser.add_argument("--processes", type=int, default=3, help="low processes with --redis (default 3)")
    parser.add_argument("--high-threads", type=int, default=2, help="high callers (default 2)")
    parser.add_argument("--high-every", type=float, default=0.1, help="each high caller's gap, s (default 0.1)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (default 10)")
    parser.add_argument("--redis", default=None, help="keep the budget in Redis at this URL (default: in-process)")
    args = parser.parse_args()

    limiter = _build(args, "priorities-describe", True)
    store = "in-process" if args.redis is None else args.redis
    lanes = f"{args.processes} processes x {args.low_threads}" if args.redis else f"{args.low_threads}"
    high_rate = args.rate - args.rate * args.low_share
    print(f"{limiter!r}, store {store}, {args.seconds:g} s a run")
    every = f"one acquire per {args.high_every:g} s"
    print(f"low: {lanes} threads back to back; high: {args.high_threads} threads, {every} each")
    print(f"one grant interval: {1000 / high_rate:.1f} ms in the high lane, {1000 / args.rate:.1f} ms for the budget")
    print()
    columns = ["wait p50", "wait p99", "wait max", "took p99"]
    print(f"{'':<16}{'grants':>7}  {'per s':>7}  {'share':>6}  " + "  ".join(f"{c:>8}" for c in columns))
    print(f"{'':<16}{'':>7}  {'':>7}  {'':>6}  {'ms':>8}  {'ms':>8}  {'ms':>8}  {'ms':>8}")
    for label, priorities in (("two lanes", True), ("one queue", False)):
        result = run(args, priorities)
        print(_row(f"{label}  high", result.high, result, args.rate))
        print(_row("           low", result.low, result, args.rate))
        print(_row("           total", result.high + result.low, result, args.rate, waits=False))


if __name__ == "__main__":
    main()
