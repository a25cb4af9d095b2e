"""How soon a release wakes the waiter it hands its slot to, through a SQLite file.

Two players take turns on ``ConcurrencyLimit(1)`` through one ``SQLiteBackend`` file:
each takes the slot, holds it a few milliseconds and releases it, ``--rounds`` times,
while the other waits. A handoff is the time from a release to the return of the
other player's take (``time.monotonic()``, one clock for every process of a Linux
box). Measured twice in one run, the two players being:

- two threads of one process (the floor: the release wakes the waiter directly), and
- two processes (the release sends a wake message to the waiter's wake socket, a Unix
  datagram socket; the waiter's process checks its grant in the file and wakes it).

Printed: the median and 95th percentile of each, and the processes' over the threads'.

    python benchmarks/sqlite_handoff.py [--rounds 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ratelimit import ConcurrencyLimit, SQLiteBackend

#: How long a player holds the slot each time (seconds).
HOLD = 0.003


def _play(path: str, rounds: int, start: float, out: Any) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=60, backend=SQLiteBackend(path), name="handoff")
    got: list[float] = []
    released: list[float] = []
    while time.time() < start:
        time.sleep(0.001)
    for _ in range(rounds):
        lease = limit.take(timeout=30)
        got.append(time.monotonic())
        time.sleep(HOLD)
        released.append(time.monotonic())
        lease.release()
    out.put((got, released))


def _handoffs(results: list[tuple[list[float], list[float]]]) -> list[float]:
    """Each grant's delay after the release just before it."""
    events = sorted(
        [(t, "got") for got, _ in results for t in got] + [(t, "released") for _, rel in results for t in rel]
    )
    delays: list[float] = []
    last: float | None = None
    for t, kind in events:
        if kind == "released":
            last = t
        elif last is not None:
            delays.append(t - last)
            last = None
    return delays


def measure(kind: str, rounds: int) -> tuple[float, float]:
    """(median, 95th percentile) of the handoffs between two threads or two processes."""
    path = str(Path(tempfile.mkdtemp()) / "handoff.db")
    SQLiteBackend(path)
    start = time.time() + 1.0
    results: list[tuple[list[float], list[float]]]
    if kind == "processes":
        context = multiprocessing.get_context("spawn")
        out: Any = context.Queue()
        players: list[Any] = [context.Process(target=_play, args=(path, rounds, start, out)) for _ in range(2)]
    else:
        out = queue.Queue()
        players = [threading.Thread(target=_play, args=(path, rounds, start, out)) for _ in range(2)]
    for player in players:
        player.start()
    results = [out.get(timeout=300) for _ in players]
    for player in players:
        player.join()
    delays = sorted(_handoffs(results))
    return statistics.median(delays), delays[int(len(delays) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for run in range(args.repeat):
        threads = measure("threads", args.rounds)
        processes = measure("processes", args.rounds)
        print(
            f"run {run + 1}: threads median {threads[0] * 1e6:.0f} us, p95 {threads[1] * 1e6:.0f} us; "
            f"processes median {processes[0] * 1e6:.0f} us, p95 {processes[1] * 1e6:.0f} us; "
            f"processes / threads: median {processes[0] / threads[0]:.2f}x, p95 {processes[1] / threads[1]:.2f}x"
        )


if __name__ == "__main__":
    main()
