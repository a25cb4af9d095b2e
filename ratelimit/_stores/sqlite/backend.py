"""One budget for many processes on one box, with no server: state in a SQLite file.

Every decision is one short write transaction (``BEGIN IMMEDIATE`` in WAL mode) that
loads the limiter's row, runs exactly what the in-process store runs (the handles of
``memory/backend.py``, whose lock here is the transaction: ``rows.py``; the handles
this backend binds are ``handles.py``'s) and writes the row
back. So the decisions are the memory store's, and so the Redis scripts' (the
conformance suite holds all three to them), whichever process makes them. A token
bucket whose row is one number, the usual case, decides in one self-committing
``UPDATE`` running the same step (``sqlite/fast_path.py``); a limit changed at run time
is ``sqlite/config.py``'s, the counters of ``ratelimit top`` ``sqlite/top.py``'s.
An asyncio call decides at once when the file is free and otherwise waits for its
lock in a thread (``reserve_async``), never on the event loop.

Times are store time (``sqlite/clock.py``), one clock for the whole box; a waiter
sleeps its exact wait, as with Redis, since a grant's time is decided when it is
reserved. The file, its locking and its errors are ``sqlite/file.py``'s, a row's
encoding ``sqlite/codec.py``'s. When the file cannot be used (locked past
``busy_timeout``, read-only, a full disk, deleted and not re-creatable) the
backend's ``on_unavailable`` applies as for :class:`~.redis.RedisBackend`
(``unavailable.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar, cast

from ... import _validate
from ..._algorithms import lanes as _lanes
from ..._algorithms.algorithm import Algorithm
from ..._algorithms.breaker import Policy
from ..._algorithms.fair import Fair
from ..._algorithms.token_bucket import Gcra
from ..._clock import Clock, SystemClock, checked_clock
from ..._errors import BackendUnavailable
from ..._redact import redact_url
from ..keys import Keyed, tag, untag
from ..memory.backend import MemoryBackend, MemoryGroupHandle, MemoryHandle, MemoryLaneHandle, Slot
from ..memory.breaker import MemoryStore
from ..memory.fair import MemoryFairHandle
from ..memory.fallback import Fallback, checked_local_share, group_share, lanes_shares, single_share
from ..records import FleetRow, Inspection, Override, checked_override
from ..store import Views
from ..unavailable import BackendStats, FailurePolicy, OnUnavailable, checked_on_unavailable
from .breaker import Kept, SQLiteStore
from .code import FORGET as FORGET_CODE
from .code import record_of
from .config import NAMES, Changeable, keys_in_use, refuse_unchangeable
from .config import read as read_change
from .config import write as write_change
from .fast_path import FastPath
from .file import Busy, StoreFile
from .handles import Followed, SQLiteGroupHandle, SQLiteHandle
from .holders import SQLiteSlots
from .inspection import fair_rows, holds, inspect_all, inspect_names
from .rows import Rows
from .slots import SlotRows
from .top import Cell, Counts, read_top
from .top import write as write_top

__all__ = ["DEFAULT_BUSY_TIMEOUT", "SWEEP_SECONDS", "SQLiteBackend"]

#: Seconds a decision waits for the file's write lock before the store counts as
#: unavailable. Transactions last tens of microseconds: only a process stopped while
#: holding the lock (or a disk that stalls) makes a wait this long.
DEFAULT_BUSY_TIMEOUT = 5.0

#: Each process looks for idle names at most this often (seconds).
SWEEP_SECONDS = 60.0

R = TypeVar("R")

#: The schemes of a Redis URL, which from_url points to the other backend.
_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")

# A sweep visits only the rows its index says may be idle (`forget` is never later than
# `idle`; see sqlite/file.py): never the whole table.
_SWEEP = "DELETE FROM ratelimit_state WHERE test = 0 AND forget <= ?1 AND idle <= ?1"
_SWEPT = "SELECT DISTINCT name FROM ratelimit_state WHERE test = 0 AND forget <= ?1 AND idle <= ?1"
_CATCH_UP = "UPDATE ratelimit_state SET forget = idle WHERE test = 0 AND forget <= ?1 AND idle > ?1"


def _limiter_name(text: str) -> str:
    """The limiter's name of a row's (a keyed budget's row counts in its limiter's)."""
    return untag(text)[0]


def _counted_as(name: str | Keyed | None, named: str) -> str:
    """What a handle's counters of ``ratelimit top`` are kept under (``named``: its
    rows' name): a keyed budget's, its limiter's name, so that keys that come and go
    leave no rows of their own in ``ratelimit_top`` (``top`` shows one row per limiter
    name whatever its keys)."""
    if isinstance(name, Keyed) and name.name is not None:
        return tag(name.name)
    return named


def _forked(ref: weakref.ref[SQLiteBackend]) -> None:
    backend = ref()
    if backend is not None:
        backend._forked()


class SQLiteBackend(FailurePolicy):
    """State in a SQLite file: one budget for every process of one box, no server.

    ``SQLiteBackend("/var/tmp/limits.db")`` makes the file (and its ``-wal`` and
    ``-shm`` beside it) if need be; every process and thread that makes limiters on
    it with the same ``name`` shares one budget. The decisions are those of the
    in-process store and of Redis, made one at a time under the file's lock: each
    acquire is one short write transaction, and a waiter sleeps its exact wait.

    Args:
        path: the file. Its folder must exist and be writable (SQLite keeps the
            ``-wal`` and ``-shm`` files beside it); processes of several users can
            share it where the file's and folder's permissions let them all write.
            A file that is not a SQLite database, or a database that is not a store
            of ours, is refused (``ValueError``) and never written to.
        on_unavailable: when the file cannot be used (locked past ``busy_timeout``,
            read-only, a full disk): ``"raise"`` (``BackendUnavailable``), ``"allow"``
            (grant without it) or ``"local"`` (decide in this process at
            ``local_share`` of the budget), as for :class:`RedisBackend`.
        local_share: the fraction of each limit the local fallback keeps (0 < share <= 1).
        busy_timeout: the seconds a decision may wait for another process's write
            lock; past it the store counts as unavailable. A caller's shorter
            ``timeout`` bounds that wait too (at least 20 ms, ``try_acquire``'s):
            past it the request is refused (``AcquireTimeout``, ``False``) as one
            whose grant would wait too long, for a busy file is not an unavailable
            one; and what it waited for the lock counts in its timeout. Waits are
            counted in :meth:`stats`.
        counters: whether decisions are counted for ``ratelimit top`` (a few
            additions each, written into the file once a second per process).

    Raises ``FileNotFoundError`` (no such folder), ``IsADirectoryError``,
    ``PermissionError`` (a file or folder this process may not write) or
    ``ValueError`` (not a SQLite database, or not ours; or ``":memory:"``, which would be a
    file of that name in the working folder), each naming the path.
    """

    shared = True
    #: A change is a single limiter's (and its keys'): a composite's members keep the code's values.
    changes_members = False
    #: A key's decision reads its name's change when it has none of its own.
    later_keys_follow = True
    later_keys_after = 0.0

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_unavailable: OnUnavailable = "raise",
        local_share: float = 1.0,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        counters: bool = True,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or a path, got {type(path).__name__} {path!r}")
        if not os.fspath(path):
            raise ValueError("path must name a file, got ''")
        if os.fspath(path) == ":memory:":
            # SQLite's name for a private database: here it would be a file of that
            # name in the working folder, which no other process finds.
            raise ValueError(
                "path ':memory:' would be a file of that name in the working folder: a SQLiteBackend shares "
                "a budget among processes through a file they all name; in one process use MemoryBackend()"
            )
        share = checked_local_share(local_share)
        if share == "auto":
            raise ValueError("local_share='auto' counts live processes through Redis; give SQLiteBackend a fraction")
        self.local_share: float = share
        self.busy_timeout = _validate.duration("busy_timeout", busy_timeout)
        super().__init__(checked_on_unavailable(on_unavailable))
        self._file = StoreFile(path, self.busy_timeout)
        #: The file's connection and transactions (``sqlite/file.py``).
        self.file = self._file
        #: The file, as an absolute path.
        self.path = self._file.path
        if not isinstance(counters, bool):
            raise TypeError(f"counters must be a bool, got {counters!r}")
        self._counters = counters
        #: This process's counts for ``ratelimit top``, written once a second.
        self.counts = Counts()
        self._local = MemoryBackend()
        self._sweep_at = time.monotonic() + SWEEP_SECONDS
        self._sweep_lock = threading.Lock()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forked(ref))

    def _forked(self) -> None:
        # In a forked child (a multiprocessing.Pool's worker): its own counts, and
        # locks no thread of the parent holds.
        self.counts.forked()
        self._sweep_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteBackend:
        """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` (as SQLAlchemy
        writes them), ``options`` as for the constructor.

        A URL of another store is refused naming it (a Redis URL pointing to
        ``RedisBackend.from_url``), its password shown as ``***``."""
        if not isinstance(url, str) or not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            shown = redact_url(url) if isinstance(url, str) else url
            redis = isinstance(url, str) and url.partition("://")[0].lower() in _REDIS_SCHEMES
            hint = ": that is a Redis URL, for RedisBackend.from_url" if redis else ""
            raise ValueError(
                f"url must be sqlite:///PATH (sqlite:////tmp/x.db for an absolute path), got {shown!r}{hint}"
            )
        return cls(url[len("sqlite:///") :], **options)

    # -- binding -----------------------------------------------------------------

    def _named(self, name: str | Keyed | None) -> str:
        if name is None:
            raise ValueError(f"name is required with a shared backend ({self!r}): it names the shared budget")
        # A row is named as a Redis key's hash tag is: escaped, so that a keyed budget
        # (name and key) never shares a row with another pair or with a plain name.
        return tag(name)

    @staticmethod
    def _no_lease(lease: float | None) -> None:
        if lease is not None:
            raise ValueError(
                f"lease={lease!r}: a SQLiteBackend decides every request in its file, in microseconds; "
                "there is nothing to lease (drop lease=)"
            )

    def bind(
        self,
        name: str | Keyed | None,
        alg: Algorithm[Any],
        clock: Clock | None,
        *,
        lease: float | None = None,
        shadow: bool = False,
    ) -> SQLiteHandle:
        # shadow: the front never enforces a shadow's decisions; the store keeps them as any.
        self._no_lease(lease)
        named = self._named(name)
        # A single limiter follows a change at run time (set_limit): it decides with
        # the algorithm in force, which each transaction reads (sqlite/config.py).
        changeable = Changeable(alg) if alg.kind in NAMES else None
        slot = Slot(alg if changeable is None else changeable, clock)
        # What the code configured, for inspect (sqlite/code.py): written by the first
        # decision of this handle that writes, as Redis's by a process's first.
        code = None if changeable is None else record_of(alg, shadow)
        rows = Rows(self._file, [(named, -1, alg.kind)], [slot], clock, changeable, code)
        slot.lock = rows
        if changeable is None:
            inner = MemoryHandle(alg, slot, rows)
        else:
            inner = Followed(cast(Algorithm[Any], changeable), slot, rows)
        inner.level_in_decision = True  # (a transaction each time the lock is taken)
        local = None
        if self.on_unavailable == "local":
            local = single_share(self._local, alg, clock, self.local_share)
        fast_path = None
        if type(alg) is Gcra and changeable is not None:
            fast_path = FastPath(self._file, named, alg, slot, rows.clock, rows.test, changeable)
            fast_path.on = False  # (the first decision writes the code's row: a full transaction)
        handle = SQLiteHandle(self, named, inner, local, fast_path)
        if rows.test == 0 and self._counters:
            handle.top = Cell((_counted_as(name, named), alg.kind, int(shadow)))
        return handle

    def bind_group(
        self, name: str | Keyed | None, algs: Sequence[Algorithm[Any]], clock: Clock | None
    ) -> SQLiteGroupHandle:
        named = self._named(name)
        slots = [Slot(alg, clock) for alg in algs]
        rows = Rows(self._file, [(named, i, alg.kind) for i, alg in enumerate(algs)], slots, clock)
        for slot in slots:
            slot.lock = rows
        inner = MemoryGroupHandle(algs, slots, rows)
        inner.level_in_decision = True  # (a transaction each time the lock is taken)
        local = None
        if self.on_unavailable == "local":
            local = group_share(self._local, algs, clock, self.local_share)
        handle = SQLiteGroupHandle(self, named, inner, local)
        if rows.test == 0 and self._counters:
            handle.top = Cell((_counted_as(name, named), "composite", 0))
        return handle

    # -- what a front asks of any store (store.Backend) ------------------------------

    def keep_views(self, views: Views) -> None:
        return None  # its keys expire by themselves: nothing to sweep here

    def idle(self, handle: object) -> bool:
        return False  # its keys expire by themselves

    def calls_from_threads(self) -> bool:
        return True

    def bind_lanes(
        self, name: str | Keyed | None, lanes: _lanes.Lanes, clock: Clock | None, keep: float | None
    ) -> tuple[SQLiteHandle, SQLiteHandle]:
        """Both lanes of a budget with priorities in one row: the handle that acquires
        at high priority, and the one at low."""
        named = self._named(name)
        slot = Slot(lanes, clock)
        rows = Rows(self._file, [(named, -1, lanes.kind)], [slot], clock)
        slot.lock = rows
        inner = [MemoryLaneHandle(lanes, slot, rows, lane, keep) for lane in (_lanes.HIGH, _lanes.LOW)]
        locals_: Sequence[Fallback[float] | None] = (None, None)
        if self.on_unavailable == "local":
            locals_ = lanes_shares(self._local, lanes, clock, keep, self.local_share)
        handles = SQLiteHandle(self, named, inner[0], locals_[0]), SQLiteHandle(self, named, inner[1], locals_[1])
        if rows.test == 0 and self._counters:
            cell = Cell((_counted_as(name, named), "priorities", 0))  # both lanes in one row
            for handle in handles:
                handle.top = cell
        return handles

    def bind_fair(self, name: str | Keyed | None, fair: Fair, clock: Clock | None) -> MemoryFairHandle:
        """A budget shared fairly among tenants in one row: each decision one
        transaction of ``memory/fair.py``'s. A file that cannot be used raises
        ``BackendUnavailable`` (no failure policy: a fair share is one budget)."""
        named = self._named(name)
        slot = Slot(fair, clock)
        rows = Rows(self._file, [(named, -1, fair.kind)], [slot], clock)
        slot.lock = rows
        return MemoryFairHandle(fair, slot, rows)

    def bind_breaker(self, name: str | None, policy: Policy, clock: Clock | None) -> SQLiteStore:
        """A circuit breaker's state in one row (``sqlite/breaker.py``), loaded into a
        slot whose lock and clock are a transaction, and the state in this process it
        goes on with while the file cannot be used."""
        assert name is not None  # a shared store: CircuitBreaker required it
        kept = Kept(policy)
        slot = Slot(kept, clock)
        rows = Rows(self._file, [(tag(name), -1, kept.kind)], [slot], clock)
        slot.lock = rows
        here = clock or SystemClock()
        return SQLiteStore(self, self._file, name, (slot, rows), policy, here, MemoryStore(policy, here))

    def slot_rows(
        self, name: str | Keyed | None, member: int | None, most: int, lease: float, clock: Clock | None
    ) -> SlotRows:
        """The slots of a ConcurrencyLimit (``member`` of a composite), each holder and
        waiter a row of its own (``sqlite/slots.py``)."""
        return SlotRows(self._file, self._named(name), -1 if member is None else member, most, lease, clock)

    def bind_slots(
        self, name: str | Keyed | None, most: int, lease: float, clock: Clock | None, *, member: int | None = None
    ) -> SQLiteSlots:
        """A ConcurrencyLimit's slots (``member`` of a composite), shared by every
        process that opens the file (``sqlite/holders.py``)."""
        assert name is not None  # the front requires a name for a shared backend
        rows = self.slot_rows(name, member, most, lease, clock)
        return SQLiteSlots(self, rows, name, most, lease, clock)

    # -- idle names ----------------------------------------------------------------

    def sweep_if_due(self) -> None:
        """Sweep when this process has not for ``SWEEP_SECONDS``, and write its counts
        for ``ratelimit top`` once a second (after a decision)."""
        now = time.monotonic()
        if now >= self.counts.flush_at and self._counters:
            with contextlib.suppress(BackendUnavailable, Busy):
                self.write_counts()
        if now >= self._sweep_at and self._sweep_lock.acquire(blocking=False):
            try:
                self._sweep_at = time.monotonic() + SWEEP_SECONDS
                # The decision was made: a sweep that cannot run (or not at once, in
                # an event loop's thread) waits for the next.
                with contextlib.suppress(BackendUnavailable, Busy):
                    self.sweep()
            finally:
                self._sweep_lock.release()

    def sweep(self) -> int:
        """Forget every name whose state is as good as new (a fresh state would
        decide the same); return how many rows went.

        Each process runs it by itself every ``SWEEP_SECONDS`` after a decision; call
        it to shrink the file's content at a moment of your choosing. State kept on a
        test clock (``ManualClock``) is never swept.
        """
        file = self._file
        conn = file.begin()
        try:
            now = (file.now(),)
            names = conn.execute(_SWEPT, now).fetchall()
            gone = conn.execute(_SWEEP, now).rowcount
            # What the code configured goes with the last state row of its name.
            conn.executemany(FORGET_CODE, names)
            # The rows whose `forget` has passed but not their `idle` (moved on by the
            # fast path): their `forget` catches up, so the next sweep skips them.
            kept = conn.execute(_CATCH_UP, now).rowcount
            if gone or kept:
                file.writes += 1
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        file.commit(conn)
        return int(gone)

    def write_counts(self) -> None:
        """Add this process's counts for ``ratelimit top`` into the file (sqlite/top.py)."""
        counts = self.counts
        rows = counts.take()
        file = self._file
        try:
            conn = file.begin()
        except BaseException:
            counts.give_back(rows)
            raise
        try:
            write_top(conn, rows, file.now())
        except BaseException as exc:
            file.rollback(conn)
            counts.give_back(rows)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        file.commit(conn)

    def top(self, window: float = 5.0, *, now: float | None = None) -> list[FleetRow]:
        """Every limiter counted in the last minute, as ``ratelimit top --store
        sqlite:///PATH`` shows it (every process's counts, up to a second late): the
        rates over the last ``window`` whole seconds of store time before ``now``
        (``None``: now); then every FairShare's budget, by its tenants."""
        if self._counters:
            with contextlib.suppress(BackendUnavailable):
                self.write_counts()

        def read(conn: Any, at: float) -> list[FleetRow]:
            when = at if now is None else now
            return read_top(conn, when, window, _limiter_name) + fair_rows(conn, when)

        return self._read(read)

    def __len__(self) -> int:
        """How many named states the file keeps (a composite's limits count one each)."""
        file = self._file
        conn = file.begin()
        try:
            count = conn.execute("SELECT count(*) FROM ratelimit_state").fetchone()[0]
        finally:
            file.rollback(conn)
        return int(count)

    # -- what operators read -------------------------------------------------------

    def without_store(
        self,
        exc: BackendUnavailable,
        key: str,
        *,
        local: Callable[[], R] | None,
        otherwise: Callable[[], R],
        says: tuple[str, str],
        decision: bool = False,
    ) -> R:
        """``FailurePolicy.without_store``, each call counted as a failure in :meth:`stats`."""
        with self._lock:
            self._failures += 1
        return super().without_store(exc, key, local=local, otherwise=otherwise, says=says, decision=decision)

    def stats(self) -> BackendStats:
        """How often the file could not be used and what was done instead, and how
        often (and how long) decisions waited for another process's lock."""
        base = super().stats()
        return BackendStats(
            base.failures, base.failed_open, base.fell_back, self._file.lock_waits, self._file.lock_wait_seconds
        )

    def inspect(self, name: str, *, key: str | None = None) -> Inspection:
        """What the file holds of limiter ``name`` (``key``: of its budget for that key,
        ``limiter.for_key(key)``), as ``ratelimit inspect --store sqlite:///PATH``
        prints it: the record of ``RedisBackend.inspect``, with what the file cannot
        know ``None`` (see ``sqlite/inspection.py``). Read in one short transaction,
        nothing written."""
        return self.inspect_many([name], key=key)[0]

    def inspect_many(self, names: Sequence[str], *, key: str | None = None) -> list[Inspection]:
        """:meth:`inspect` of each of ``names``, in one transaction."""
        checked = [_validate.name(name, self, shared=True, found=True) or "" for name in names]
        targets: list[str | Keyed] = list(checked)
        if key is not None:
            targets = [Keyed(name, _validate.key(key)) for name in checked]
        return self._read(lambda conn, now: inspect_names(conn, targets, now))

    def holds(self, name: str) -> bool:
        """Whether the file holds anything of limiter ``name`` itself: a state (a
        single limiter's, a member's, a lane's, a breaker's), what its code
        configured, a change in force, a ConcurrencyLimit's slots. A keyed budget's
        rows are its key's, not the name's."""
        checked = _validate.name(name, self, shared=True, found=True) or ""
        return self._read(lambda conn, now: holds(conn, checked))

    def keys_in_use(self, name: str) -> int:
        """How many keys of limiter ``name`` (``for_key``) have a budget in the file."""
        checked = _validate.name(name, self, shared=True, found=True) or ""
        return int(self._read(lambda conn, now: keys_in_use(conn, tag(checked))))

    def inspect_all(self) -> list[Inspection]:
        """:meth:`inspect` of every name the file holds something of, sorted (a
        limiter's keyed budgets are not names of their own)."""
        return self._read(inspect_all)

    def _read(self, call: Callable[[Any, float], R]) -> R:
        """``call(connection, store time)`` in a transaction that writes nothing."""
        file = self._file
        conn = file.begin()
        try:
            return call(conn, file.now())
        except file.errors as exc:
            raise file.unavailable(exc) from exc
        finally:
            file.rollback(conn)

    # -- limits changed at run time ------------------------------------------------

    def _admin(self, clock: object, call: Callable[[Any, float], R], *, writes: bool = True) -> R:
        """``call(connection, now)`` in one write transaction (``writes=False``: one
        that reads only); ``now`` is ``clock``'s time for a test clock, store time
        otherwise."""
        checked = checked_clock(clock)
        test = checked is not None and not isinstance(checked, SystemClock)
        file = self._file
        conn = file.begin()
        try:
            result = call(conn, checked.now() if test and checked is not None else file.now())
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        if not writes:
            file.rollback(conn)
            return result
        file.writes += 1
        file.commit(conn)
        return result

    def set_limit(
        self,
        name: str,
        *,
        rate: float | None = None,
        burst: float | None = None,
        ttl: float | timedelta | None = None,
        clock: Clock | None = None,
        key: str | None = None,
    ) -> int:
        """Change limiter ``name``'s limit at run time, in every process using the file.

        As :meth:`RedisBackend.set_limit`: ``rate`` in tokens per second, ``burst`` a
        bucket's capacity, ``None`` keeping what the code says; ``ttl`` ends the
        change by itself; a new change replaces the last one whole. It is stored in
        the file, and each process follows it from its next decision on the name,
        moving the state to the new limit as of now (the tokens owed keep their
        count). A name whose rows say it is a composite's members, an adaptive
        limiter, a budget with priorities or a ConcurrencyLimit raises
        ``UnchangeableLimit`` and nothing is stored. ``clock``: the limiters' test
        clock, if they keep time on one.

        A change by name reaches every key of it (``for_key``) that has no change of
        its own, those used later too; ``key``: that key's budget alone, ahead of its
        name's change. Returns how many of its keys are in use in the file.
        """
        change = checked_override(rate, burst, ttl)
        named = self._changed(name, key)

        def configure(conn: Any, now: float) -> int:
            refuse_unchangeable(conn, named, change.burst)
            return write_change(conn, named, change, now)

        return int(self._admin(clock, configure))

    def reset_limit(self, name: str, *, clock: Clock | None = None, key: str | None = None) -> bool:
        """Return limiter ``name`` (``key``: that key's budget) to what its code says,
        in every process from its next decision; ``True`` if a change was in force."""
        named = self._changed(name, key)

        def reset(conn: Any, now: float) -> bool:
            was = read_change(conn, named, now) is not None
            write_change(conn, named, None, now)
            return was

        return self._admin(clock, reset)

    def limit_override(self, name: str, *, clock: Clock | None = None, key: str | None = None) -> Override | None:
        """The change in force for limiter ``name`` (``key``: that key's own), or
        ``None``; its ``ttl`` is what is left of it."""
        named = self._changed(name, key)
        return self._admin(clock, lambda conn, now: read_change(conn, named, now), writes=False)

    def _changed(self, name: str, key: str | None) -> str:
        """The row name a change to ``name`` (``key``: to that key's budget) is kept under."""
        checked = _validate.name(name, self, shared=True)
        assert checked is not None
        return tag(checked if key is None else Keyed(checked, _validate.key(key)))

    def now(self) -> float:
        """Store time now, as every process of the box reads it (see ``sqlite/clock.py``)."""
        return self._file.now()

    def close(self) -> None:
        """Close this process's connection to the file (reopened by the next decision)."""
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"
