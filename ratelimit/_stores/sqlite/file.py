"""The file of a :class:`~.sqlite.SQLiteBackend`: opening it, its schema, its time
base, and the write transactions every decision runs in (internal).

One connection per backend and process (a forked child opens its own), in WAL mode.
The threads of a process take turns on a lock of their own before ``BEGIN
IMMEDIATE``; processes take turns on SQLite's write lock. A transaction that finds
it held waits for it (in short sleeps, counted in ``lock_waits``) up to
``busy_timeout`` seconds, and past that the store is unavailable
(``BackendUnavailable``, and the backend's ``on_unavailable`` applies); a decision
whose caller has a shorter timeout waits no longer than that (``LockTimeout``: the
caller is refused, the store is busy, not unavailable). Every
``sqlite3`` error becomes one of ours, naming the file: at opening a
``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError`` or ``ValueError``;
once open a ``BackendUnavailable`` chaining the ``sqlite3`` error.

Called by ``sqlite/backend.py`` (its rows and sweeps); the time base is ``sqlite/clock.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..._errors import BackendUnavailable
from .clock import boot_id, boot_seconds, rebased_offset
from .top import TOP_TABLE

__all__ = [
    "CODE_TABLE",
    "FORMAT",
    "LOCK_GRACE",
    "STEP_FUNCTION",
    "WAITED_LEAST",
    "Busy",
    "LockTimeout",
    "Step",
    "StoreFile",
    "Waited",
    "in_thread_within",
]

#: A decision on a row's number at a time: the row's new number.
Step = Callable[[float, float], float]

#: The SQL function each connection has that runs the decision of the fast path.
STEP_FUNCTION = "ratelimit_step"

logger = logging.getLogger("ratelimit")

#: What the meta table's ``format`` says: a file whose tables say otherwise is not ours.
FORMAT = "ratelimit-fleet sqlite store"
VERSION = 3

#: The index of the rows a sweep may forget, partial: rows on a test clock are never
#: swept.
_INDEX = "CREATE INDEX IF NOT EXISTS ratelimit_forget ON ratelimit_state (forget) WHERE test = 0"

#: Format 2's config table (compatibility: see the store's note).
_CONFIG_2 = (
    "CREATE TABLE IF NOT EXISTS ratelimit_config (name TEXT PRIMARY KEY, rate REAL, burst REAL, until REAL,"
    " at REAL NOT NULL) WITHOUT ROWID"
)
#: Format 3: a change also keeps the changes it replaced that no decision has read
#: yet (``past``), and the state row's ``updated`` they were stored against (``seen``).
_CONFIG = (
    "CREATE TABLE IF NOT EXISTS ratelimit_config (name TEXT PRIMARY KEY, rate REAL, burst REAL, until REAL,"
    " at REAL NOT NULL, past TEXT, seen REAL) WITHOUT ROWID"
)

#: What the code of each process configured for a single limiter's name (see
#: ``sqlite/code.py``): a table beside the format's, created in any file of format 3
#: that lacks it; processes that do not read it share the file unchanged (the
#: file's version stays 3).
CODE_TABLE = (
    "CREATE TABLE IF NOT EXISTS ratelimit_code (name TEXT PRIMARY KEY, kind TEXT NOT NULL, p1 REAL NOT NULL,"
    " p2 REAL NOT NULL, slack REAL NOT NULL, shadow INTEGER NOT NULL) WITHOUT ROWID"
)

#: Format 1 (no ``forget`` column) to 2, in the set-up's write transaction
#: (compatibility: see the store's note). A format-1 process writes no ``forget``: its
#: default 0 is never later than ``idle``, as a sweep needs.
_MIGRATE_1 = (
    "ALTER TABLE ratelimit_state ADD COLUMN forget REAL NOT NULL DEFAULT 0",
    "ALTER TABLE ratelimit_state ADD COLUMN rate REAL",
    "ALTER TABLE ratelimit_state ADD COLUMN burst REAL",
    "UPDATE ratelimit_state SET forget = idle",
    _INDEX,
    _CONFIG_2,
    TOP_TABLE,
    "UPDATE ratelimit_meta SET value = 2 WHERE key = 'version'",
)

#: Format 2 to 3 (after ``_MIGRATE_1`` for a file of format 1), in the set-up's write
#: transaction: two columns of ``ratelimit_config``, NULL in the rows already there
#: (compatibility: see the store's note).
_MIGRATE_2 = (
    "ALTER TABLE ratelimit_config ADD COLUMN past TEXT",
    "ALTER TABLE ratelimit_config ADD COLUMN seen REAL",
    "UPDATE ratelimit_meta SET value = 3 WHERE key = 'version'",
)

#: Seconds between two checks that the path still names the file this process has
#: open (deleted or replaced under a running fleet: this process then moves to it).
CHECK_EVERY = 1.0

#: The longest sleep between two tries for a held write lock.
_MOST_SLEEP = 0.002

#: The least a caller with a timeout waits for another process's write lock (seconds),
#: ``try_acquire`` too: a transaction lasts tens of microseconds, and its process may
#: be preempted for a few milliseconds while it holds the lock; a lock held longer is
#: a transaction of another kind (an operator's shell, a process stopped).
LOCK_GRACE = 0.02

#: How often a thread waiting for its process's turn, with a timeout, looks whether
#: the thread holding the turn waits for another process's lock.
_TURN_LOOK = 0.005

#: A caller with a timeout that waited longer than this for its transaction decides
#: with what is left of its timeout (:class:`Waited`); a shorter wait is left out.
WAITED_LEAST = 0.001

#: SQLite's own size of the WAL (pages) past which a commit checks it into the file.
_WAL_PAGES = 1000
#: The fewest pages the WAL is checked in at, however little room the disk has.
_WAL_FEWEST = 16

_SCHEMA = (
    "CREATE TABLE ratelimit_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    # One row per limiter (member: its place in a composite, -1 for none; kind: its
    # algorithm, or two lanes'): its state in `number` or `blob` (sqlite/codec.py),
    # the store time from which it is as good as new (`idle`), when it was last
    # written (`updated`), and whether its time is a test clock's (never swept).
    # `forget` is never later than `idle` (equal after any write but the fast
    # path's, which only moves `idle` on): a sweep looks through its index at the
    # rows whose `forget` has passed, never at the whole table.
    # `rate` and `burst`: the change at run time the state was last decided under
    # (NULL: the code's values; see sqlite/config.py).
    "CREATE TABLE ratelimit_state (name TEXT NOT NULL, member INTEGER NOT NULL, kind TEXT NOT NULL,"
    " number REAL, blob BLOB, idle REAL NOT NULL, updated REAL NOT NULL, test INTEGER NOT NULL,"
    " forget REAL NOT NULL DEFAULT 0, rate REAL, burst REAL, PRIMARY KEY (name, member, kind)) WITHOUT ROWID",
    _INDEX,
    _CONFIG,
    TOP_TABLE,
    CODE_TABLE,
)

# SQLite's primary result codes (stable across versions; sqlite3 names them only from 3.11).
_BUSY, _LOCKED, _READONLY, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 11, 13, 14, 26


def _code(exc: sqlite3.Error) -> int:
    """The primary result code of a ``sqlite3`` error (0 when unknown)."""
    return int(getattr(exc, "sqlite_errorcode", 0)) & 0xFF


def _busy(exc: sqlite3.Error) -> bool:
    if _code(exc) in (_BUSY, _LOCKED):
        return True
    return "database is locked" in str(exc)


def describe(path: str, exc: BaseException) -> str:
    """What went wrong with the store's file, in words that name it."""
    if isinstance(exc, sqlite3.Error):
        code = _code(exc)
        if code == _FULL:
            return f"the disk holding the SQLite store {path!r} is full ({exc})"
        if code == _READONLY:
            return f"the SQLite store {path!r} cannot be written: it (or its folder) is read-only ({exc})"
        if code in (_NOTADB, _CORRUPT):
            return f"the SQLite store {path!r} is damaged or no longer a database ({exc})"
        if code == _CANTOPEN:
            return f"the SQLite store {path!r} cannot be opened ({exc})"
    return f"the SQLite store {path!r} failed: {exc!r}"


R = TypeVar("R")


class _Dropped(Exception):
    """A call dropped before a thread began it (:func:`in_thread_within`)."""


async def in_thread_within(call: Callable[[], R], bound: float, otherwise: Callable[[], R]) -> R:
    """``call()`` in a thread of the default executor, or ``otherwise()`` if no thread
    has begun it within ``bound`` seconds (or its caller is cancelled before): then it
    is dropped, never run. The executor's threads are few, and callers waiting for a
    busy file's lock without a timeout can hold them all, so a caller with a timeout
    would otherwise wait for one of those waits to end. A call begun runs to its end."""
    gate = threading.Lock()
    begun = dropped = False

    def run() -> R:
        nonlocal begun
        with gate:
            if dropped:
                raise _Dropped
            begun = True
        return call()

    def drop() -> bool:
        nonlocal dropped
        with gate:
            dropped = not begun
        return dropped

    task = asyncio.ensure_future(asyncio.to_thread(run))
    try:
        done, _ = await asyncio.wait({task}, timeout=bound)
    except asyncio.CancelledError:
        drop()
        task.add_done_callback(_seen)
        raise
    if not done and drop():
        task.add_done_callback(_seen)
        return otherwise()
    return await task


def _seen(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # looked at: a dropped call's end is no error to report


class Busy(Exception):
    """Raised, in a thread that said it will not wait (:meth:`StoreFile.not_waiting`),
    where a transaction would have to wait: for this process's turn or the file's
    write lock, or to open the file. Nothing was decided: the caller tries again
    where waiting harms no one (an event loop's thread, off the loop)."""


class LockTimeout(Exception):
    """Raised where a transaction would wait for another process's write lock longer
    than its caller's timeout (:attr:`StoreFile.calls` ``.patience``, at least
    :data:`LOCK_GRACE`) and less than ``busy_timeout``: the store is busy, not
    unavailable. Nothing was decided; ``waited``: the seconds waited."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"another process held the write lock for the {waited:.3g} s waited")
        self.waited = waited


class Waited(Exception):
    """Raised by :meth:`StoreFile.begin` for a caller with a timeout (neither 0 nor
    infinite) once it has the write lock after waiting ``waited`` seconds for it: the
    transaction is open, kept for this thread's next :meth:`~StoreFile.begin`, so that
    the caller decides in it with what is left of its timeout. A caller that does not
    begin again lets it go (:meth:`~StoreFile.let_go`)."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"the write lock was had after {waited:.3g} s")
        self.waited = waited


class _Calls(threading.local):
    """What a thread's transactions may wait for."""

    #: Never wait (:meth:`StoreFile.not_waiting`): raise :class:`Busy` instead.
    on = False
    #: The caller's timeout (seconds) that bounds the waits for the file's lock;
    #: ``None``: ``busy_timeout`` alone.
    patience: float | None = None
    #: A transaction open for this thread's next begin (see :class:`Waited`).
    held: sqlite3.Connection | None = None


class StoreFile:
    """The store's file, opened (and checked) at construction.

    Raises ``FileNotFoundError`` (no such folder), ``IsADirectoryError``,
    ``PermissionError`` (a file or folder this process may not write) or
    ``ValueError`` (a file that is not a SQLite database, or one that is not a store
    of ours: it is never written to).
    """

    #: The errors a transaction maps to ``BackendUnavailable`` (:meth:`unavailable`).
    errors = (sqlite3.Error,)

    def __init__(self, path: str | os.PathLike[str], busy_timeout: float) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.busy_timeout = busy_timeout
        #: Decisions that waited for another process's write lock, and for how long.
        self.lock_waits = 0
        self.lock_wait_seconds = 0.0
        #: Connections opened so far, and commits of this process that wrote rows
        #: (with SQLite's ``data_version``, they tell a transaction whether the rows
        #: it last saw have changed since; counted under the process's lock).
        self.generation = 0
        self.writes = 0
        #: Store time is ``boot_seconds() + offset`` (see ``sqlite/clock.py``).
        self.offset = 0.0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._identity: tuple[int, int] | None = None
        self._check_at = 0.0
        # Connections inherited through a fork: never used, and never closed either
        # (closing one would checkpoint and could delete the parent's WAL).
        self._inherited: list[sqlite3.Connection] = []
        self._stepper = _Stepper()
        #: Each thread's waits (see :class:`_Calls`): a handle sets its ``patience``
        #: for the decision it makes.
        self.calls = _Calls()
        #: Since when the thread holding this process's turn waits for another
        #: process's write lock (``inf``: none waits).
        self._locked_since = math.inf
        #: A write found the disk full: the next transaction first checks the WAL into
        #: the file and truncates it, at the connection's check (:meth:`_make_room`).
        self._room = False
        #: The WAL is checked in sooner than SQLite's default, to fit the room left on
        #: the disk (looked at again once a second while so).
        self._tight = False
        self._conn = self._open()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forked(ref))

    # -- opening ------------------------------------------------------------------

    def _refuse_path(self) -> None:
        path = self.path
        target = Path(path)
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a SQLite store must be a file, not a folder", path)
        folder = target.parent
        if not folder.is_dir():
            raise FileNotFoundError(
                errno.ENOENT, f"the folder {str(folder)!r} of the SQLite store does not exist", path
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(
                errno.EACCES,
                f"the folder {str(folder)!r} is not writable: the SQLite store keeps its -wal and -shm files beside it",
                path,
            )
        # Never opened here (nor anywhere but through SQLite): closing any descriptor
        # of the file drops every POSIX lock this process holds on it, its other
        # connections' too (another SQLiteBackend on the same path). Another process
        # closing its last connection would then take the file for its own, check the
        # WAL in and delete it under this one's feet: its decisions since, lost. A
        # file that is not a database is refused by SQLite's first read (NOTADB).
        if target.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise PermissionError(
                errno.EACCES,
                "the SQLite store must be readable and writable by this process: each decision writes it",
                path,
            )

    def _open(self) -> sqlite3.Connection:
        self.generation += 1
        self._refuse_path()
        try:
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise PermissionError(errno.EACCES, describe(self.path, exc), self.path) from exc
        try:
            self._set_up(conn)
            conn.create_function(STEP_FUNCTION, 2, self._stepper.step, deterministic=True)
        except BaseException:
            conn.close()
            raise
        stat = os.stat(self.path)
        self._identity = (stat.st_dev, stat.st_ino)
        self._check_at = time.monotonic() + CHECK_EVERY
        return conn

    def _retrying(self, conn: sqlite3.Connection, sql: str) -> Any:
        """``sql`` tried until the file's lock lets it through (at most ``busy_timeout``)."""
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.0001
        while True:
            try:
                return conn.execute(sql).fetchall()
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, _MOST_SLEEP)

    def _set_up(self, conn: sqlite3.Connection) -> None:
        """WAL, the schema of a new file (or the check that a file is ours), and this
        boot's time base: the file's first transaction of this connection."""
        path = self.path
        try:
            # Read before anything is written: a database that is not ours is left
            # exactly as it was (switching it to WAL would change its header).
            self._check_schema(conn, self._retrying(conn, "SELECT name FROM sqlite_master WHERE type = 'table'"))
            mode = self._retrying(conn, "PRAGMA journal_mode=WAL")
            if not mode or str(mode[0][0]).lower() != "wal":
                raise ValueError(f"the SQLite store {path!r} cannot use WAL (journal mode stays {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._retrying(conn, "BEGIN IMMEDIATE")
            try:
                tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
                self._check_schema(conn, tables, create=True)
                self._time_base(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            if _code(exc) == _NOTADB:
                raise ValueError(f"{path!r} is not a SQLite database: SQLiteBackend leaves it untouched") from exc
            if _code(exc) == _CORRUPT:
                raise ValueError(f"{path!r} is not a SQLite database we can use ({exc}): left untouched") from exc
            if _code(exc) == _READONLY:
                raise PermissionError(errno.EACCES, describe(path, exc), path) from exc
            if _busy(exc):
                raise BackendUnavailable(
                    f"the SQLite store {path!r} stayed locked by another process for "
                    f"{self.busy_timeout:g} s (busy_timeout)"
                ) from exc
            raise OSError(describe(path, exc)) from exc

    def _check_schema(self, conn: sqlite3.Connection, rows: list[tuple[str]], *, create: bool = False) -> None:
        """Refuse a database that is not a store of ours; make the tables of an empty
        one when ``create`` (inside the set-up's write transaction)."""
        tables = {row[0] for row in rows}
        if not tables:
            if not create:
                return
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.executemany(
                "INSERT INTO ratelimit_meta (key, value) VALUES (?, ?)", [("format", FORMAT), ("version", VERSION)]
            )
            return
        meta = {}
        if "ratelimit_meta" in tables:
            meta = dict(conn.execute("SELECT key, value FROM ratelimit_meta"))
        if meta.get("format") != FORMAT or "ratelimit_state" not in tables:
            raise ValueError(
                f"{self.path!r} is a SQLite database but not a ratelimit store (tables {sorted(tables)!r}): "
                "SQLiteBackend leaves it untouched; give it a file of its own"
            )
        version = meta.get("version")
        # Formats 1 and 2 (compatibility: see the store's note).
        if version in (1, 2) and not create:
            return  # made format 3 in the set-up's write transaction, which checks again
        if version == 1:
            for statement in _MIGRATE_1:
                conn.execute(statement)
            logger.info("the SQLite store %r was of format 1: made format 2 (an index of idle rows)", self.path)
            version = 2
        if version == 2:
            for statement in _MIGRATE_2:
                conn.execute(statement)
            logger.info("the SQLite store %r was of format 2: made format 3 (replaced changes kept)", self.path)
            version = VERSION
        if version != VERSION:
            raise ValueError(
                f"{self.path!r} is a ratelimit store of format version {version!r}; "
                f"this release reads versions 1 and 2 (which it makes {VERSION}) and {VERSION}"
            )
        if create:
            conn.execute(CODE_TABLE)  # (a file made by a release before the table)

    def _time_base(self, conn: sqlite3.Connection) -> None:
        """Read the offset of store time, or set it for this boot (see ``sqlite/clock.py``)."""
        meta = dict(
            conn.execute("SELECT key, value FROM ratelimit_meta WHERE key IN ('boot', 'offset', 'wall', 'base')")
        )
        boot = boot_id()
        if meta.get("boot") == boot:
            self.offset = float(meta["offset"])
            return
        latest = conn.execute("SELECT max(updated) FROM ratelimit_state WHERE test = 0").fetchone()[0]
        if "base" in meta and (latest is None or float(meta["base"]) > latest):
            latest = meta["base"]  # no row written since the last rebase: time went on from there
        last_wall = None
        if latest is not None and "wall" in meta and "base" in meta:
            # The wall time when the latest row was written, as this boot's base said.
            last_wall = float(meta["wall"]) + (float(latest) - float(meta["base"]))
        self.offset = rebased_offset(None if latest is None else float(latest), last_wall)
        now = boot_seconds() + self.offset
        conn.executemany(
            "INSERT OR REPLACE INTO ratelimit_meta (key, value) VALUES (?, ?)",
            [("boot", boot), ("offset", self.offset), ("wall", time.time()), ("base", now)],
        )
        if meta.get("boot") is not None:
            logger.info(
                "the SQLite store %r was last used during another boot: its time continues from %r", self.path, now
            )

    # -- the connection of this process ------------------------------------------

    def _forked(self) -> None:
        # In the child: the parent's connection and lock are not ours to use.
        self._lock = threading.Lock()
        self._locked_since = math.inf
        if self._conn is not None:
            self._inherited.append(self._conn)
        self._conn = None
        self._pid = os.getpid()

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is not None and time.monotonic() < self._check_at:
            return conn
        try:
            if conn is not None and self._same_file():
                self._check_at = time.monotonic() + CHECK_EVERY
                if self._room:
                    self._make_room(conn)
                elif self._tight:
                    self._fit_wal(conn)
                return conn
            if conn is not None:
                logger.warning(
                    "the SQLite store %r was deleted or replaced: this process moves to the new file", self.path
                )
                self._conn = None
                conn.close()
            conn = self._conn = self._open()
        except (OSError, ValueError, sqlite3.Error) as exc:
            raise BackendUnavailable(describe(self.path, exc)) from exc
        return conn

    def _same_file(self) -> bool:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (stat.st_dev, stat.st_ino) == self._identity

    # -- transactions -------------------------------------------------------------

    def now(self) -> float:
        """Store time now (see ``sqlite/clock.py``)."""
        return boot_seconds() + self.offset

    def begin(self) -> sqlite3.Connection:
        """Take this process's turn and the file's write lock (``BEGIN IMMEDIATE``):
        the connection, in a transaction that :meth:`commit` or :meth:`rollback` ends.

        A thread with a ``patience`` (its caller's timeout) waits for another process's
        lock no longer than that (at least :data:`LOCK_GRACE`), then raises
        :class:`LockTimeout`; one that waited and has time left raises :class:`Waited`
        with the transaction open for its next begin."""
        calls = self.calls
        held = calls.held
        if held is not None:
            calls.held = None
            return held
        came = None
        if not self._lock.acquire(blocking=False):
            came = self._take_turn(calls, calls.patience)
        try:
            if calls.on and self._conn is None:
                raise Busy("the file is to be opened")
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise BackendUnavailable(describe(self.path, exc)) from exc
                if calls.on:
                    raise Busy("another process holds the write lock") from exc
                came = self._wait_for_lock(conn, calls.patience, came)
            if came is not None:
                patience = calls.patience
                waited = time.monotonic() - came
                if patience is not None and 0.0 < patience < math.inf and waited > WAITED_LEAST:
                    calls.held = conn
                    raise Waited(waited)
        except Waited:
            raise  # the turn and the transaction stay this thread's
        except BaseException:
            kept = calls.held
            if kept is not None:  # interrupted as it raised Waited
                calls.held = None
                self._abandon(kept)
            self._lock.release()
            raise
        return conn

    def _take_turn(self, calls: _Calls, patience: float | None) -> float:
        """Wait for this process's turn, taken by another thread: as long as it takes,
        unless the caller has a ``patience``, has waited longer than that, and the
        thread holding the turn waits for another process's lock. Returns when this
        thread came (monotonic)."""
        if calls.on:
            raise Busy("this process's turn is taken")
        came = time.monotonic()
        lock = self._lock
        if patience is None or patience >= self.busy_timeout:
            lock.acquire()
            return came
        bound = max(patience, LOCK_GRACE)
        while not lock.acquire(timeout=_TURN_LOOK):
            now = time.monotonic()
            if now - came > bound and self._locked_since != math.inf:
                raise LockTimeout(now - came)
        return came

    def let_go(self) -> None:
        """End the transaction :class:`Waited` kept open for this thread, if it is
        still kept (nothing written)."""
        calls = self.calls
        held = calls.held
        if held is not None:
            calls.held = None
            self.rollback(held)

    @contextlib.contextmanager
    def not_waiting(self) -> Iterator[None]:
        """In this block, this thread's transactions raise :class:`Busy` rather than wait."""
        flag = self.calls
        flag.on = True
        try:
            yield
        finally:
            flag.on = False

    async def off_loop(self, call: Callable[[], R]) -> R:
        """``call()`` at once if the file is free, else in a thread: an event loop never
        waits for the file's lock (up to ``busy_timeout``). A task cancelled meanwhile
        leaves the thread to finish, so what it decides is made all the same."""
        try:
            with self.not_waiting():
                return call()
        except Busy:
            pass
        return await asyncio.to_thread(call)

    def turn(self, step: Step, patience: float) -> sqlite3.Connection | None:
        """This process's turn for one statement that commits by itself (the fast
        path, ``sqlite/fast_path.py``), with :data:`STEP_FUNCTION` calling ``step``: the
        connection, until :meth:`end_turn`. ``None`` (and no turn taken) while the
        connection is due for its check or not open: the caller then decides in a
        full transaction (:meth:`begin`). ``patience``: the caller's timeout, as for
        :meth:`begin` (:class:`LockTimeout`)."""
        if not self._lock.acquire(blocking=False):
            try:
                self._take_turn(self.calls, patience)
            except Busy:
                return None
        conn = self._conn
        if conn is None or time.monotonic() >= self._check_at:
            self._lock.release()
            return None
        self._stepper.call = step
        return conn

    def end_turn(self, wrote: bool) -> None:
        """End the turn :meth:`turn` gave; ``wrote``: the statement changed a row."""
        self._stepper.call = None
        if wrote:
            self.writes += 1
        self._lock.release()

    def _wait_for_lock(self, conn: sqlite3.Connection, patience: float | None, came: float | None) -> float:
        """Another process holds the write lock: try again after short sleeps, which
        grow to ``_MOST_SLEEP``, until ``busy_timeout`` (``BackendUnavailable``) or,
        sooner, the caller's ``patience`` from when it ``came`` (:class:`LockTimeout`).
        Returns when the caller came (``came``, or when this wait began)."""
        started = self._locked_since = time.monotonic()
        since, limit, busy = started, self.busy_timeout, True
        if patience is not None and max(patience, LOCK_GRACE) < limit:
            since, limit, busy = started if came is None else came, max(patience, LOCK_GRACE), False
        delay = 0.00005
        try:
            while True:
                time.sleep(delay * random.uniform(0.5, 1.5))
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return started if came is None else came
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        raise BackendUnavailable(describe(self.path, exc)) from exc
                    waited = time.monotonic() - since
                    if waited > limit:
                        if not busy:
                            raise LockTimeout(waited) from exc
                        raise BackendUnavailable(
                            f"the SQLite store {self.path!r} stayed locked by another process for "
                            f"{self.busy_timeout:g} s (busy_timeout)"
                        ) from exc
                delay = min(delay * 2, _MOST_SLEEP, max(limit - (time.monotonic() - since), 0.0) + 0.0001)
        finally:
            self._locked_since = math.inf
            self.lock_waits += 1
            self.lock_wait_seconds += time.monotonic() - started

    def commit(self, conn: sqlite3.Connection) -> None:
        """End the transaction, written; ``BackendUnavailable`` if it could not be."""
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._abandon(conn)
            raise self.unavailable(exc) from exc
        finally:
            self._lock.release()

    def rollback(self, conn: sqlite3.Connection) -> None:
        """End the transaction, nothing written."""
        try:
            self._abandon(conn)
        finally:
            self._lock.release()

    @staticmethod
    def _abandon(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            # SQLite may have rolled back already (a full disk, an I/O error).
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        """A ``sqlite3`` error met inside a transaction, as the store's."""
        if isinstance(exc, sqlite3.Error) and _code(exc) == _FULL:
            # The next transaction makes room first: a check of the connection is due
            # now, which also keeps the one-statement path away until it has run.
            self._room = True
            self._check_at = 0.0
        error = BackendUnavailable(describe(self.path, exc))
        error.__cause__ = exc
        return error

    # -- a full disk --------------------------------------------------------------

    def _make_room(self, conn: sqlite3.Connection) -> None:
        """The disk filled under a write: check the WAL into the file and truncate it
        (in this process's turn, outside any transaction), and check it in from now on
        before it outgrows the room left.

        SQLite checks the WAL in only once it holds ``_WAL_PAGES`` pages (4 MB), and
        only after a commit: with less room than that on the disk, the WAL fills it
        again before any commit checks it in, and every write fails from then on, however
        much room is made, up to those 4 MB. Truncated, the WAL gives its room back;
        checked in within the room left, it never fills the disk again.
        """
        self._room = False
        with contextlib.suppress(sqlite3.Error):
            self._fit_wal(conn)
            # Returns (busy, frames, checked in) rather than raising when another
            # process reads or writes meanwhile: that process's own failure tries again.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _fit_wal(self, conn: sqlite3.Connection) -> None:
        """Check the WAL in once it holds half the room left on the disk (at most
        SQLite's default): tight only while the disk has little room."""
        try:
            room = os.statvfs(os.path.dirname(self.path))
            free = room.f_bavail * room.f_frsize
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        except (OSError, AttributeError, sqlite3.Error):
            return  # no statvfs (Windows), or the file cannot be read now: as it was
        pages = max(_WAL_FEWEST, min(_WAL_PAGES, free // (2 * page)))
        conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
        self._tight = pages < _WAL_PAGES

    def close(self) -> None:
        """Close this process's connection (the next transaction opens it again)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


class _Stepper:
    """What :data:`STEP_FUNCTION` calls: the fast path's step of the statement running."""

    __slots__ = ("call",)

    def __init__(self) -> None:
        self.call: Step | None = None

    def step(self, number: float, now: float) -> float:
        call = self.call
        if call is None:
            raise RuntimeError(f"{STEP_FUNCTION}() is called only by this store's own statements")
        return call(number, now)


def _forked(ref: weakref.ref[StoreFile]) -> None:
    store = ref()
    if store is not None:
        store._forked()
