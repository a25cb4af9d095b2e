"""The SQLite store's figures, each a ratio measured in one run (issue 27).

``uncontended``: decisions per second of ``try_acquire()`` in one process and thread
through a ``SQLiteBackend`` file (counting for ``top`` unless ``--no-counters``),
against a bare ``BEGIN IMMEDIATE; UPDATE; COMMIT`` loop on a file beside it with the
same settings (WAL, ``synchronous=NORMAL``), the
two taking turns round after round (the ratio is the median of each round's); and,
for information, the same ``try_acquire()`` through the Redis store when a server
answers at ``--redis``.

``fleet``: ``--processes`` processes of ``--threads`` threads each call ``acquire()``
on ``TokenBucket(B, R)`` through one file for ``--seconds``. Each grant's time (store
time, when it is due) is recorded; from them: the most grants in any 1 s window
(the promise: at most R + B), the rate over the run once the burst is spent (at least
0.95 R), fairness (the smallest process's grants over the largest's), and whether the
grants went in arrival order (each thread's waits are checked against the order
their reservations were made in the file).

    python benchmarks/sqlite_store.py [uncontended|fleet|all] [--calls 5000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from ratelimit import RedisBackend, SQLiteBackend, TokenBucket

#: A budget so large that no call is ever refused: this measures the decision.
HUGE = 1e15

#: The figures' targets (issue 27).
UNCONTENDED_TARGET = 0.7
RATE_TARGET = 0.95
FAIRNESS_TARGET = 0.9


def _bare(path: str) -> Callable[[], None]:
    """One ``BEGIN IMMEDIATE; UPDATE; COMMIT`` on a one-row table, as the store sets its file up."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v REAL) WITHOUT ROWID")
    conn.execute("REPLACE INTO t VALUES ('a', 0)")
    lock = threading.Lock()
    execute = conn.execute
    clock = time.monotonic

    def bare() -> None:
        # The store takes a lock of its process before the file's, and reads the time.
        with lock:
            execute("BEGIN IMMEDIATE")
            execute("UPDATE t SET v = ? WHERE k = 'a'", (clock(),))
            execute("COMMIT")

    return bare


def _per_second(call: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return calls / (time.perf_counter() - started)


def uncontended(calls: int, rounds: int, redis_url: str | None, counters: bool = True) -> dict[str, float]:
    """The median ratio of the store's decisions per second over the bare loop's."""
    with tempfile.TemporaryDirectory() as folder:
        bare = _bare(os.path.join(folder, "bare.db"))
        store = SQLiteBackend(os.path.join(folder, "store.db"), counters=counters)
        limiter = TokenBucket(HUGE, HUGE, backend=store, name="bench")
        candidates: dict[str, Callable[[], object]] = {"sqlite": limiter.try_acquire}
        if redis_url is not None:
            try:
                backend = RedisBackend.from_url(redis_url)
                redis_limiter = TokenBucket(HUGE, HUGE, backend=backend, name=f"bench-sqlite-{os.getpid()}")
                redis_limiter.try_acquire()
                candidates["redis"] = redis_limiter.try_acquire
            except Exception as exc:
                print(f"(no Redis store beside it: {exc!r})", file=sys.stderr)
        ratios: dict[str, list[float]] = {name: [] for name in candidates}
        rates: dict[str, list[float]] = {"bare": [], **{name: [] for name in candidates}}
        for call in (bare, *candidates.values()):
            _per_second(call, calls // 10)  # warm up
        for _ in range(rounds):
            floor = _per_second(bare, calls)
            rates["bare"].append(floor)
            for name, call in candidates.items():
                rate = _per_second(call, calls)
                rates[name].append(rate)
                ratios[name].append(rate / floor)
        result = {f"{name} /s": statistics.median(values) for name, values in rates.items()}
        result.update({f"{name} / bare": statistics.median(values) for name, values in ratios.items()})
        return result


# -- the fleet -----------------------------------------------------------------------


class _Recording:
    """A limiter's handle that records each grant's decision time and due time (store
    time), so that the figures are those the store decided."""

    def __init__(self, inner: Any, out: list[tuple[float, float]]) -> None:
        self._inner = inner
        self._out = out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def reserve(self, tokens: Any, max_wait: float) -> tuple[float, float]:
        wait, at = self._inner.reserve(tokens, max_wait)
        if wait >= 0:
            self._out.append((at - wait, at))  # list.append: atomic under the GIL
        return wait, at


def _worker(
    path: str, index: int, threads: int, seconds: float, capacity: float, rate: float, begin: Any, out: Any
) -> None:
    backend = SQLiteBackend(path)
    limiter = TokenBucket(capacity, rate, backend=backend, name="fleet")
    grants: list[tuple[float, float]] = []
    limiter._handle = _Recording(limiter._handle, grants)
    out.put(("ready", index))
    start = begin.get()  # every process starts at once

    def run() -> None:
        while time.time() < start + seconds:
            limiter.acquire()

    while time.time() < start:
        time.sleep(0.001)
    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    out.put((index, grants, backend.stats().lock_waits))


def fleet(processes: int, threads: int, seconds: float, capacity: float, rate: float) -> dict[str, float]:
    """Run the fleet and compute its figures (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fleet.db")
        SQLiteBackend(path)  # made once, before the fleet
        context = multiprocessing.get_context("spawn")
        begins = [context.Queue() for _ in range(processes)]
        out = context.Queue()
        workers = [
            context.Process(target=_worker, args=(path, i, threads, seconds, capacity, rate, begins[i], out))
            for i in range(processes)
        ]
        for worker in workers:
            worker.start()
        for _ in workers:
            out.get(timeout=120)  # each process ready
        start = time.time() + 0.5
        for begin in begins:
            begin.put(start)
        results = [out.get(timeout=seconds + 120) for _ in workers]
        for worker in workers:
            worker.join()
    per_process = [len(grants) for _, grants, _ in results]
    times = sorted(due for _, grants, _ in results for _, due in grants)
    most = _most_in_window(times, 1.0)
    # The rate once the first burst is spent: grants after the first second, over the rest.
    first = times[0]
    later = [t for t in times if t >= first + 1.0]
    sustained = (len(later) - 1) / (later[-1] - later[0]) if len(later) > 1 else 0.0
    ordered = _in_arrival_order([grants for _, grants, _ in results])
    return {
        "grants": float(len(times)),
        "most in any 1 s": float(most),
        "R + B": rate + capacity,
        "rate / R": sustained / rate,
        "fairness (min/max per process)": min(per_process) / max(per_process),
        "arrival order kept (share of grants)": ordered,
        "lock waits": float(sum(waits for _, _, waits in results)),
    }


def _most_in_window(times: list[float], window: float) -> int:
    most = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        most = max(most, i - j + 1)
    return most


def _in_arrival_order(per_process: list[list[tuple[float, float]]]) -> float:
    """The share of grants whose due time is no earlier than that of every grant
    decided before them (in the file's order of decisions)."""
    decisions = sorted(grant for grants in per_process for grant in grants)
    latest = -float("inf")
    kept = 0
    for _, due in decisions:
        if due >= latest - 1e-9:
            kept += 1
        latest = max(latest, due)
    return kept / len(decisions) if decisions else 1.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=["uncontended", "fleet", "all"], default="all")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="'' for no Redis beside it")
    parser.add_argument(
        "--no-counters", action="store_true", help="SQLiteBackend(counters=False): nothing counted for `top`"
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--capacity", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args(argv)
    if args.what in ("uncontended", "all"):
        for name, value in uncontended(args.calls, args.rounds, args.redis or None, not args.no_counters).items():
            print(f"{name:>30}: {value:,.3f}")
        print(f"{'target sqlite / bare':>30}: >= {UNCONTENDED_TARGET}")
    if args.what in ("fleet", "all"):
        for name, value in fleet(args.processes, args.threads, args.seconds, args.capacity, args.rate).items():
            print(f"{name:>38}: {value:,.3f}")
        print(f"{'targets':>38}: most <= R + B, rate/R >= {RATE_TARGET}, fairness >= {FAIRNESS_TARGET}, order 1.0")


if __name__ == "__main__":
    main()
