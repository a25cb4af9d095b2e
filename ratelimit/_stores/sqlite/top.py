"""The counters of ``ratelimit top --store sqlite:///PATH`` (internal).

Each process counts its decisions in memory, per limiter name and second of store
time (grants, with their waits in the histogram of ``fleet.WAIT_BOUNDS``; refusals;
pauses fed back), and adds them into the file's ``ratelimit_top`` table at most
once a second, in a short write transaction of their own, after a decision: a
decision pays a few additions, never a statement. The table keeps the last
``fleet.ACTIVE_SECONDS`` seconds; ``top`` reads the sums over every process, so it
lags the decisions by up to a second.

As on Redis (``redis/fleet.py``): a composite is counted as one limiter of kind
``composite``, a budget with priorities as one of kind ``priorities``, and a keyed
budget (``for_key``) in its limiter's row. ``SQLiteBackend(counters=False)`` counts
nothing.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import defaultdict
from typing import Any

from ..keys import text_of
from ..records import ACTIVE_SECONDS, WAIT_BOUNDS, FleetRow, p99_wait

__all__ = ["FLUSH_SECONDS", "TOP_TABLE", "Cell", "Counts", "read_top", "write"]

_BUCKETS = len(WAIT_BOUNDS) + 1
_W = [f"w{i}" for i in range(1, _BUCKETS + 1)]

TOP_TABLE = (
    "CREATE TABLE IF NOT EXISTS ratelimit_top (name TEXT NOT NULL, kind TEXT NOT NULL, shadow INTEGER NOT NULL,"
    " second INTEGER NOT NULL, refused INTEGER NOT NULL DEFAULT 0, pauses INTEGER NOT NULL DEFAULT 0, "
    + ", ".join(f"{w} INTEGER NOT NULL DEFAULT 0" for w in _W)
    + ", PRIMARY KEY (second, name, kind, shadow)) WITHOUT ROWID"
)

_ADD = (
    f"INSERT INTO ratelimit_top (name, kind, shadow, second, refused, pauses, {', '.join(_W)})"
    f" VALUES ({', '.join('?' * (6 + _BUCKETS))})"
    " ON CONFLICT (second, name, kind, shadow) DO UPDATE SET refused = refused + excluded.refused,"
    " pauses = pauses + excluded.pauses, " + ", ".join(f"{w} = {w} + excluded.{w}" for w in _W)
)

#: Seconds between two writes of one process's counts.
FLUSH_SECONDS = 1.0

_Key = tuple[str, str, int, int]  # name, kind, shadow, second
_REFUSED, _PAUSES = 0, 1


class Cell:
    """Where one handle counts: its ``(name, kind, shadow)`` and its row of the
    current second (one attribute check per decision, no key to build)."""

    __slots__ = ("epoch", "key", "row", "second")

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.second = -1
        self.epoch = -1
        self.row: list[int] = []


class Counts:
    """This process's counts not yet in the file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[_Key, list[int]] = {}
        # Counted since the last take: a cell's row of an older epoch is written already.
        self._epoch = 0
        self.flush_at = time.monotonic() + FLUSH_SECONDS

    def forked(self) -> None:
        """In a forked child: the parent's counts are the parent's to write (else each
        child of a pool would add them again), and its lock may have been held by a
        thread that did not come along. The epoch moves on, so that no cell of the
        parent's counts into a row no longer here."""
        self._lock = threading.Lock()
        self._counts = {}
        self._epoch += 1

    def _row(self, key: _Key) -> list[int]:
        row = self._counts.get(key)
        if row is None:
            row = self._counts[key] = [0] * (2 + _BUCKETS)
        return row

    def decided(self, cell: Cell, now: float, wait: float) -> None:
        """One decision: granted after ``wait`` seconds, or refused (``wait < 0``)."""
        second = int(now)
        with self._lock:
            if cell.second != second or cell.epoch != self._epoch:
                cell.row = self._row((*cell.key, second))
                cell.second = second
                cell.epoch = self._epoch
            if wait == 0.0:
                cell.row[2] += 1  # the usual grant: the first bucket (WAIT_BOUNDS[0] is 0)
            elif wait < 0:
                cell.row[_REFUSED] += 1
            else:
                cell.row[2 + bisect.bisect_left(WAIT_BOUNDS, wait)] += 1

    def paused(self, cell: Cell, now: float) -> None:
        """A pause fed back (a 429 with ``Retry-After``)."""
        with self._lock:
            self._row((*cell.key, int(now)))[_PAUSES] += 1

    def take(self) -> list[tuple[Any, ...]]:
        """The counts to write (and forget here), as rows of :data:`_ADD`."""
        with self._lock:
            counts, self._counts = self._counts, {}
            self._epoch += 1
            self.flush_at = time.monotonic() + FLUSH_SECONDS
        return [(*key, *row) for key, row in counts.items()]

    def give_back(self, rows: list[tuple[Any, ...]]) -> None:
        """Counts that could not be written: kept for the next try."""
        with self._lock:
            for name, kind, shadow, second, *values in rows:
                row = self._row((name, kind, shadow, second))
                for i, value in enumerate(values):
                    row[i] += value


def write(conn: Any, rows: list[tuple[Any, ...]], now: float) -> None:
    """Add ``rows`` (:meth:`Counts.take`) and forget seconds past keeping."""
    if rows:
        conn.executemany(_ADD, rows)
    conn.execute("DELETE FROM ratelimit_top WHERE second < ?", (math.floor(now) - ACTIVE_SECONDS,))


def read_top(conn: Any, now: float, window: float, display: Any) -> list[FleetRow]:
    """Every limiter counted in the last minute, busiest first: its rates over the last
    ``window`` whole seconds (the current one is still filling) and pauses over the
    minute. ``display(name)``: the limiter's name for a row's (its key dropped)."""
    current = math.floor(now)
    span = max(1, round(window))
    sums: dict[tuple[str, str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    latest: dict[tuple[str, str, int], int] = {}
    # Names and kinds read as bytes, made text by `text_of`: a row written by hand may
    # hold a BLOB, or text that is not UTF-8.
    for name, kind, shadow, second, refused, pauses, *waits in conn.execute(
        f"SELECT CAST(name AS BLOB), CAST(kind AS BLOB), shadow, second, refused, pauses, {', '.join(_W)}"
        " FROM ratelimit_top WHERE second >= ?",
        (current - ACTIVE_SECONDS,),
    ):
        key = (display(text_of(name)), text_of(kind), shadow)
        total = sums[key]
        total["pauses"] += pauses
        latest[key] = max(latest.get(key, second), second)
        if current - span <= second < current:
            total["refused"] += refused
            for i, count in enumerate(waits, start=1):
                total[f"w{i}"] += count
    rows = []
    for (name, kind, shadow), total in sums.items():
        buckets = {i: total[f"w{i}"] for i in range(1, _BUCKETS + 1) if total[f"w{i}"]}
        rows.append(
            FleetRow(
                name=name,
                kind=kind,
                shadow=bool(shadow),
                grants_per_sec=sum(buckets.values()) / span,
                withdrawn_per_sec=None,
                refusals_per_sec=total["refused"] / span,
                leased_per_sec=0.0,
                p99_wait=p99_wait(buckets),
                pauses=int(total["pauses"]),
                paused_for=None,
                breaker=None,
                idle=max(0.0, now - (latest[(name, kind, shadow)] + 1)),
            )
        )
    rows.sort(key=lambda row: (-(row.grants_per_sec or 0.0), row.name))
    return rows
