"""What the code configured for a single limiter, kept in a :class:`~.sqlite.SQLiteBackend`
file (internal): the Redis store's ``ratelimit:{<name>}:code`` hash, as a row.

``ratelimit_code`` holds one row per name (a keyed budget's name is its own): the
kind, the two parameters as the algorithm gives them (``Algorithm.params``, the
guard already kept back), the seconds of guard kept back (``slack``) and whether the
latest process to record it runs the limiter in shadow mode. A single limiter's
handle writes it in its first full transaction (``Rows``, which the fast path leaves
that first decision to), and again in any transaction that finds no state row (a
name swept, or reset, since): not at each decision. The latest process to write it
is the one shown, as on Redis. The sweep that forgets a name's idle state rows
forgets its code row with the last of them (``forget``), where Redis lets the hash
expire a day after its last write (a keyed budget's, a minute after its state).
Composites, lanes and ConcurrencyLimits write none, as on Redis.

``SQLiteBackend.inspect`` reads it (``sqlite/inspection.py``) and rebuilds the
algorithm (:func:`algorithm`) to say what the limiter could grant now.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

from ..._algorithms.algorithm import Algorithm
from ..._algorithms.leaky_bucket import LeakyQueue
from ..._algorithms.quota import Calendar, CalendarQuota
from ..._algorithms.sliding_window import WindowLog
from ..._algorithms.sliding_window_counter import WindowCounter
from ..._algorithms.token_bucket import Allowance, Gcra

__all__ = ["EVERY", "FORGET", "WRITE", "Record", "algorithm", "kind_of", "parsed", "read", "record_of"]

#: ``(kind, p1, p2, slack, shadow)``, as a row holds it.
Record = tuple[str, float, float, float, int]

WRITE = "REPLACE INTO ratelimit_code (name, kind, p1, p2, slack, shadow) VALUES (?, ?, ?, ?, ?, ?)"
#: The code row of a name none of whose state rows is left (after a sweep).
FORGET = "DELETE FROM ratelimit_code WHERE name = ?1 AND NOT EXISTS (SELECT 1 FROM ratelimit_state WHERE name = ?1)"
_READ = "SELECT kind, p1, p2, slack, shadow FROM ratelimit_code WHERE name IN (CAST(?1 AS TEXT), ?1)"
#: Every code row, its name as bytes first.
EVERY = "SELECT CAST(name AS BLOB), kind, p1, p2, slack, shadow FROM ratelimit_code"


def record_of(alg: Algorithm[Any], shadow: bool) -> Record:
    """What a single limiter's code configured, as its row holds it. A quota's kind
    names its calendar too, ``"quota <per> <tz>"`` (:func:`kind_of` reads the kind back)."""
    p1, p2 = alg.params()
    kind = f"quota {alg.calendar.per} {alg.calendar.tz}" if isinstance(alg, CalendarQuota) else alg.kind
    return (kind, float(p1), float(p2), float(getattr(alg, "slack", 0.0)), 1 if shadow else 0)


def kind_of(recorded: str) -> str:
    """The algorithm's kind a code row's kind names (a quota's names its calendar too)."""
    return recorded.partition(" ")[0]


def read(conn: sqlite3.Connection, name: bytes) -> Record | None:
    """The code row of ``name`` (as bytes, matching a name kept as text or a BLOB);
    ``None``: none, or one that is not what this release writes (by hand)."""
    row = conn.execute(_READ, (name,)).fetchone()
    return None if row is None else parsed(row)


def parsed(row: tuple[Any, ...]) -> Record | None:
    """A code row's ``(kind, p1, p2, slack, shadow)`` as :func:`read` gives it."""
    kind, p1, p2, slack, shadow = row
    numbers = (p1, p2, slack)
    if not isinstance(kind, str) or not all(each.__class__ in (int, float) for each in numbers):
        return None
    return kind, float(p1), float(p2), float(slack), 1 if shadow == 1 else 0


def algorithm(record: Record) -> Algorithm[Any] | None:
    """The algorithm a code row describes, as the limiter built it; ``None`` for a row
    no limiter of this release could have written (a kind it does not know, numbers
    out of range: written by hand)."""
    kind, p1, p2, slack, _ = record
    if not (math.isfinite(p1) and p1 > 0 and p2 >= 0 and math.isfinite(slack) and slack >= 0):
        return None
    try:
        if kind == "token_bucket":
            return Allowance(p1, slack=slack) if p2 == 0 else Gcra(p1, p2, slack=slack)
        if p2 == 0 or not math.isfinite(p2):
            return None
        if kind == "leaky_bucket":
            return LeakyQueue(p1, p2, slack=slack)
        if kind == "sliding_window":
            return WindowLog(p1, p2, slack=slack)
        if kind == "sliding_window_counter":
            return WindowCounter(p1, p2, slack=slack)
        if kind_of(kind) == "quota":
            _, per, tz = kind.split(" ", 2)
            return CalendarQuota(p1, Calendar(per, tz), slack)
    except (ValueError, ArithmeticError, TypeError):
        return None
    return None
