"""A ConcurrencyLimit's slots in a :class:`~.sqlite.SQLiteBackend` file (internal).

The SQL twin of ``_algorithms/semaphore.py``, transition for transition, as
``lua/concurrency.lua`` is its Redis twin. A semaphore's state is not kept in the
limiter's row as a pickle (a queue of ten thousand waiters would be read and
written whole at every take): each holder and each waiter is a row of its own in
``ratelimit_slots``, so a transition touches only the rows it changes, found by
index (the queue in arrival order, the leases by expiry).

Every transition is one write transaction of the file (``sqlite/file.py``). Beside
each waiter the row keeps its wake socket (the ``door`` column): where its process listens
for the news that a release or an expiry promoted it (``sqlite/wake_sockets.py``). A
transition returns the waiters it promoted with their wake sockets; the caller sends
them a wake message after the commit.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..._algorithms.semaphore import FULL, HELD, QUEUED
from ..._clock import Clock, SystemClock
from ..keys import bytes_of, text_of
from .file import StoreFile

__all__ = ["TIDY_SECONDS", "Promoted", "SlotRows"]

T = TypeVar("T")
R = TypeVar("R")

#: A waiter that a transition made a holder: its lease id and its wake socket (or ``None``).
Promoted = tuple[str, "str | None"]

# One row per holder (held = 1) or waiter (held = 0) of a limit (name, member); a
# waiter's place in the queue is its seq; until: when its lease (or place) runs out;
# test: 1 when its times are a test clock's (never tidied away with real time).
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ratelimit_slots (name TEXT NOT NULL, member INTEGER NOT NULL,"
    " lease TEXT NOT NULL, held INTEGER NOT NULL, until REAL NOT NULL, seq INTEGER NOT NULL, door TEXT,"
    " test INTEGER NOT NULL, PRIMARY KEY (name, member, lease)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS ratelimit_slots_queue ON ratelimit_slots (name, member, held, seq)",
    "CREATE INDEX IF NOT EXISTS ratelimit_slots_until ON ratelimit_slots (name, member, until)",
)

_WHERE = "name = ? AND member = ?"
_COLUMNS = "(name, member, lease, held, until, seq, door, test)"

#: Each process drops the rows of every limit whose leases ran out at most this often
#: (seconds): a limit no process uses again keeps no row of a holder that died.
TIDY_SECONDS = 60.0

#: When each file is next tidied by this process (monotonic), by its path.
_tidy_at: dict[str, float] = {}


def survey(conn: sqlite3.Connection, tags: Sequence[str]) -> list[tuple[str, int, int, int, float, int]]:
    """Each limit's slots as ``inspect`` shows them, read in the caller's transaction:
    ``(name's tag, member, held, waiting, until, test)``, ``until`` the latest lease or
    place to run out; every limit when ``tags`` is empty. Nothing when no
    ``ConcurrencyLimit`` ever used the file (the table is made at its first use)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ratelimit_slots'").fetchone() is None:
        return []
    # The name read as bytes, made text by `text_of`: one written by hand may not be UTF-8.
    query = "SELECT CAST(name AS BLOB), member, SUM(held), SUM(1 - held), MAX(until), MAX(test) FROM ratelimit_slots"
    grouped = " GROUP BY name, member ORDER BY name, member"
    if not tags:
        return [(text_of(name), *rest) for name, *rest in conn.execute(query + grouped)]
    return [
        (text_of(found), *rest)
        for name in tags
        for found, *rest in conn.execute(query + " WHERE name IN (CAST(?1 AS TEXT), ?1)" + grouped, (bytes_of(name),))
    ]


class SlotRows:
    """The slots of one limit (``name``, ``member``) in ``file``: at most ``most``
    holders, leases of ``lease`` seconds. Each method is one transaction and raises
    ``BackendUnavailable`` when the file cannot be used."""

    def __init__(self, file: StoreFile, name: str, member: int, most: int, lease: float, clock: Clock | None) -> None:
        self._file = file
        self._key = (name, member)
        self.most = most
        self.lease = lease
        test = not (clock is None or isinstance(clock, SystemClock))
        self._test = 1 if test else 0
        self._now: Callable[[], float] = clock.now if clock is not None and test else file.now
        #: The connection generation the tables were last made sure of.
        self._ready = -1
        #: Seconds from the latest transition that left a waiter queued until the
        #: first holder's lease runs out (``inf``: none held, or nobody queued).
        self.first_expiry = math.inf

    @property
    def path(self) -> str:
        """The file's absolute path."""
        return self._file.path

    async def off_loop(self, call: Callable[[], R]) -> R:
        """``call()`` without making an event loop wait for the file (see
        :meth:`~.file.StoreFile.off_loop`)."""
        return await self._file.off_loop(call)

    def at_once(self) -> contextlib.AbstractContextManager[None]:
        """In this block, a transition that would wait for the file's lock raises
        :class:`~.file.Busy` instead (an asyncio caller then waits in a thread)."""
        return self._file.not_waiting()

    # -- the transaction ------------------------------------------------------------

    def _run(self, decide: Callable[[sqlite3.Connection, float], T]) -> T:
        file = self._file
        conn = file.begin()
        try:
            if self._ready != file.generation:
                # A new file (or one made before ConcurrencyLimit lived in it): the
                # tables are made in the transaction of the first decision.
                for statement in _SCHEMA:
                    conn.execute(statement)
                self._ready = file.generation
            now = self._now()
            result = decide(conn, now)
            if not self._test and time.monotonic() >= _tidy_at.get(file.path, 0.0):
                # Rows of other limits too, without promoting their waiters: those look
                # at the file by themselves (sqlite/wake_sockets.py), and every step of their
                # limit promotes whom a freed slot allows.
                _tidy_at[file.path] = time.monotonic() + TIDY_SECONDS
                conn.execute("DELETE FROM ratelimit_slots WHERE test = 0 AND until <= ?", (now,))
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        file.commit(conn)
        return result

    # -- the semaphore's steps, in SQL ------------------------------------------------

    def _expire(self, conn: sqlite3.Connection, now: float) -> list[Promoted]:
        if self.lease == math.inf:
            return []
        conn.execute(f"DELETE FROM ratelimit_slots WHERE {_WHERE} AND until <= ?", (*self._key, now))
        return self._promote(conn)

    def _holders(self, conn: sqlite3.Connection) -> int:
        # Counted in the index, among the holders only (a long queue costs nothing).
        held = conn.execute(f"SELECT count(*) FROM ratelimit_slots WHERE {_WHERE} AND held = 1", self._key)
        return int(held.fetchone()[0])

    def _queue_ahead(self, conn: sqlite3.Connection) -> bool:
        head = conn.execute(f"SELECT 1 FROM ratelimit_slots WHERE {_WHERE} AND held = 0 LIMIT 1", self._key)
        return head.fetchone() is not None

    def _promote(self, conn: sqlite3.Connection) -> list[Promoted]:
        room = self.most - self._holders(conn)
        if room <= 0:
            return []
        heads: list[tuple[str, str | None]] = conn.execute(
            f"SELECT lease, door FROM ratelimit_slots WHERE {_WHERE} AND held = 0 ORDER BY seq LIMIT ?",
            (*self._key, room),
        ).fetchall()
        if heads:
            # A waiter's place becomes its lease, expiring when the place would have.
            conn.executemany(
                f"UPDATE ratelimit_slots SET held = 1, door = NULL WHERE {_WHERE} AND lease = ?",
                [(*self._key, lease) for lease, _ in heads],
            )
        return [(lease, wake_socket) for lease, wake_socket in heads]

    def _first_expiry(self, conn: sqlite3.Connection, now: float) -> None:
        first: Any = conn.execute(
            f"SELECT min(until) FROM ratelimit_slots WHERE {_WHERE} AND held = 1", self._key
        ).fetchone()[0]
        self.first_expiry = math.inf if first is None else max(0.0, float(first) - now)

    def _held(self, conn: sqlite3.Connection, lease: str) -> int | None:
        """1 for a holder, 0 for a waiter, ``None`` for a lease not there."""
        row = conn.execute(f"SELECT held FROM ratelimit_slots WHERE {_WHERE} AND lease = ?", (*self._key, lease))
        found = row.fetchone()
        return None if found is None else int(found[0])

    # -- transitions --------------------------------------------------------------------

    def take(self, lease: str, wait: bool, wake_socket: str | None = None) -> tuple[str, list[Promoted]]:
        """``Semaphore.take``: ``(outcome, promoted)``; a queued waiter's row names ``wake_socket``."""

        def decide(conn: sqlite3.Connection, now: float) -> tuple[str, list[Promoted]]:
            promoted = self._expire(conn, now)
            there = self._held(conn, lease)
            if there is not None:
                return (HELD if there else QUEUED), promoted
            if not self._queue_ahead(conn) and self._holders(conn) < self.most:
                conn.execute(
                    f"INSERT INTO ratelimit_slots {_COLUMNS} VALUES (?, ?, ?, 1, ?, 0, NULL, ?)",
                    (*self._key, lease, now + self.lease, self._test),
                )
                return HELD, promoted
            if not wait:
                return FULL, promoted
            last = conn.execute(
                f"SELECT max(seq) FROM ratelimit_slots WHERE {_WHERE} AND held = 0", self._key
            ).fetchone()[0]
            conn.execute(
                f"INSERT INTO ratelimit_slots {_COLUMNS} VALUES (?, ?, ?, 0, ?, ?, ?, ?)",
                (*self._key, lease, now + self.lease, (last or 0) + 1, wake_socket, self._test),
            )
            self._first_expiry(conn, now)
            return QUEUED, promoted

        return self._run(decide)

    def release(self, lease: str) -> list[Promoted]:
        """``Semaphore.release``: whom freeing ``lease``'s slot (or place) promoted."""

        def decide(conn: sqlite3.Connection, now: float) -> list[Promoted]:
            promoted = self._expire(conn, now)
            gone = conn.execute(f"DELETE FROM ratelimit_slots WHERE {_WHERE} AND lease = ?", (*self._key, lease))
            if gone.rowcount:
                promoted += self._promote(conn)
            return promoted

        return self._run(decide)

    def renew(self, leases: Sequence[str]) -> tuple[list[str], list[str], list[Promoted]]:
        """``Semaphore.renew``: ``(held, lost, promoted)``."""

        def decide(conn: sqlite3.Connection, now: float) -> tuple[list[str], list[str], list[Promoted]]:
            promoted = self._expire(conn, now)
            held: list[str] = []
            lost: list[str] = []
            queued = False
            for lease in leases:
                there = self._held(conn, lease)
                if there is None:
                    lost.append(lease)
                    continue
                conn.execute(
                    f"UPDATE ratelimit_slots SET until = ? WHERE {_WHERE} AND lease = ?",
                    (now + self.lease, *self._key, lease),
                )
                if there:
                    held.append(lease)
                else:
                    queued = True
            if queued:
                self._first_expiry(conn, now)
            return held, lost, promoted

        return self._run(decide)

    def keep(self, leases: Sequence[str]) -> tuple[list[str], list[Promoted]]:
        """``Semaphore.keep``, the heartbeat: ``(lost, promoted)``."""

        def decide(conn: sqlite3.Connection, now: float) -> tuple[list[str], list[Promoted]]:
            promoted = self._expire(conn, now)
            lost = [lease for lease in leases if self._held(conn, lease) != 1]
            conn.executemany(
                f"REPLACE INTO ratelimit_slots {_COLUMNS} VALUES (?, ?, ?, 1, ?, 0, NULL, ?)",
                [(*self._key, lease, now + self.lease, self._test) for lease in leases],
            )
            return lost, promoted

        return self._run(decide)

    def holding(self, leases: Sequence[str]) -> list[str]:
        """Which of ``leases`` hold a slot now (a look, no transition: nothing expires)."""

        def decide(conn: sqlite3.Connection, now: float) -> list[str]:
            return [lease for lease in leases if self._held(conn, lease) == 1]

        return self._run(decide)

    def counts(self) -> tuple[int, int]:
        """``(held, queued)`` as the rows say now (expired leases included)."""

        def decide(conn: sqlite3.Connection, now: float) -> tuple[int, int]:
            rows = dict(
                conn.execute(
                    f"SELECT held, count(*) FROM ratelimit_slots WHERE {_WHERE} GROUP BY held", self._key
                ).fetchall()
            )
            return int(rows.get(1, 0)), int(rows.get(0, 0))

        return self._run(decide)

    def expire(self) -> tuple[list[Promoted], bool]:
        """Drop the leases that ran out: whom that promoted (``Semaphore.expire``), and
        whether anyone still waits."""

        def decide(conn: sqlite3.Connection, now: float) -> tuple[list[Promoted], bool]:
            promoted = self._expire(conn, now)
            self._first_expiry(conn, now)
            return promoted, self._queue_ahead(conn)

        return self._run(decide)
