"""One budget for many processes on one box, with no server: state in a SQLite file.

Every decision is one short write transaction (``BEGIN IMMEDIATE`` in WAL mode) that
loads the limiter's row, runs exactly what the in-process store runs (the handles of
``memory/backend.py``, whose lock here is the transaction: :class:`Rows`) and writes the row
back. So the decisions are the memory store's, and so the Redis scripts' (the
conformance suite holds all three to them), whichever process makes them. A token
bucket whose row is one number, the usual case, decides in one self-committing
``UPDATE`` running the same step (``sqlite/quick.py``); a limit changed at run time
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

import asyncio
import contextlib
import functools
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast

from ... import _validate
from ..._algorithms import lanes as _lanes
from ..._algorithms.algorithm import EPSILON, Algorithm
from ..._algorithms.holes import Holes
from ..._algorithms.token_bucket import Gcra
from ..._clock import Clock, SystemClock, checked_clock
from ..._errors import BackendUnavailable
from ..keys import Keyed, tag, untag
from ..memory.backend import Kept, MemoryBackend, MemoryGroupHandle, MemoryHandle, MemoryLaneHandle, Slot
from ..memory.fallback import Fallback, checked_local_share, group_share, lanes_shares, single_share
from ..records import FleetRow, Override, checked_override
from ..store import Handle, Views
from ..tally import Tally
from ..unavailable import BackendStats, FailurePolicy, OnUnavailable, checked_on_unavailable
from .codec import CorruptState, decode, encode, holes_until
from .config import FORGET_PAST, NAMES, Change, Changeable, refuse_unchangeable, under
from .config import read as read_change
from .config import write as write_change
from .file import LOCK_GRACE, WAITED_LEAST, Busy, LockTimeout, StoreFile, Waited, in_thread_within
from .quick import Quick
from .slots import SlotRows, census
from .top import Cell, Counts, read_top
from .top import write as write_top

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SWEEP_SECONDS",
    "Rows",
    "SQLiteBackend",
    "SQLiteGroupHandle",
    "SQLiteHandle",
    "StoredState",
]

#: Seconds a decision waits for the file's write lock before the store counts as
#: unavailable. Transactions last tens of microseconds: only a process stopped while
#: holding the lock (or a disk that stalls) makes a wait this long.
DEFAULT_BUSY_TIMEOUT = 5.0

#: Each process looks for idle names at most this often (seconds).
SWEEP_SECONDS = 60.0

T = TypeVar("T")
R = TypeVar("R")

_SELECT = "SELECT number, blob, updated, rate, burst FROM ratelimit_state WHERE name = ? AND member = ? AND kind = ?"
_WRITE = (
    "REPLACE INTO ratelimit_state (name, member, kind, number, blob, idle, updated, test, forget, rate, burst)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6, ?9, ?10)"
)
_END_CHANGE = "DELETE FROM ratelimit_config WHERE name = ?"

_VERSION = "PRAGMA data_version"

# A sweep visits only the rows its index says may be idle (`forget` is never later than
# `idle`; see sqlite/file.py): never the whole table.
_SWEEP = "DELETE FROM ratelimit_state WHERE test = 0 AND forget <= ?1 AND idle <= ?1"
_CATCH_UP = "UPDATE ratelimit_state SET forget = idle WHERE test = 0 AND forget <= ?1 AND idle > ?1"

_Key = tuple[str, int, str]


def _bare(slot: Slot) -> bool:
    """Whether a slot has no holes, pause nor restriction: its state is all there is."""
    holes = slot.holes
    return (
        not holes.items
        and holes.paused_until == -math.inf
        and holes.restricted_until == -math.inf
        and not holes.moves
        and holes.reach == -math.inf
        and not slot.group_holes
    )


def _load_holes(slot: Slot, holes: Holes, groups: dict[tuple[str, ...], Holes]) -> None:
    _fill(slot.holes, holes)
    _fill_groups(slot.group_holes, groups)


def _idle(slot: Slot) -> float:
    """The store time from which a slot's row decides as a fresh one would."""
    idle = slot.alg.idle_until(slot.state)
    for holes in (slot.holes, *slot.group_holes.values()):
        until = holes_until(holes)
        if until > idle:
            idle = until
    return idle


def _fill(mine: Holes, loaded: Holes) -> None:
    """``mine`` made ``loaded``, in place (a handle holds on to ``mine``)."""
    mine.items[:] = loaded.items
    mine.paused_until = loaded.paused_until
    mine.restricted_until = loaded.restricted_until
    # A row written by a release that kept no pace has none, nor moves.
    mine.paced = getattr(loaded, "paced", None)
    mine.moves[:] = getattr(loaded, "moves", ())
    mine.gen = getattr(loaded, "gen", 0)
    mine.reach = getattr(loaded, "reach", -math.inf)


def _fill_groups(mine: dict[tuple[str, ...], Holes], loaded: dict[tuple[str, ...], Holes]) -> None:
    for kinds, holes in mine.items():
        _fill(holes, loaded.get(kinds) or Holes())
    for kinds, holes in loaded.items():
        mine.setdefault(kinds, holes)


class Rows:
    """The rows one handle decides on, read and written in one transaction.

    It is the lock of the memory handles it serves (``acquire``/``release`` and
    ``with``): taking it begins the transaction and loads each row into its
    :class:`~.memory.Slot`; releasing it writes back what changed and commits. An
    exception raised in between rolls the transaction back. Its :meth:`now` is the
    handles' clock: store time, never before the time written into the rows read.
    """

    __slots__ = (
        "_change",
        "_changeable",
        "_conn",
        "_file",
        "_floor",
        "_keys",
        "_left",
        "_loaded",
        "_mark",
        "_outer",
        "_reading",
        "_seen",
        "_slots",
        "_written",
        "clock",
        "test",
    )

    def __init__(
        self,
        file: StoreFile,
        keys: Sequence[_Key],
        slots: Sequence[Slot],
        clock: Clock | None,
        changeable: Changeable | None = None,
    ) -> None:
        self._file = file
        #: A single limiter's algorithm, which follows a change at run time
        #: (sqlite/config.py); ``None``: the rows keep the code's values.
        self._changeable = changeable
        #: The change the rows are decided under in this transaction.
        self._change: Change = None
        self._keys = tuple(keys)
        self._slots = tuple(slots)
        test = not (clock is None or isinstance(clock, SystemClock))
        #: Written into each row: 1 when its times are a test clock's (never swept).
        self.test = 1 if test else 0
        #: Where the time of each decision is read (before the rows' floor).
        self.clock: Callable[[], float] = clock.now if clock is not None and test else file.now
        self._conn: Any = None
        self._floor = -math.inf
        self._written = -math.inf
        self._outer: BaseException | None = None
        self._loaded: list[tuple[float | None, bytes | None]] = []
        #: ``(connection, data_version, this process's writes)`` when the slots last
        #: matched the rows; ``None``: read them at the next transaction.
        self._seen: tuple[int, int, int] | None = None
        self._mark: tuple[int, int, int] = (-1, -1, -1)
        #: This transaction only reads (a peek): it writes nothing, as Redis's peek.
        self._reading = False
        #: A read found what a decision would have written (a change to follow, one
        #: ended, changes kept to forget): the slots no longer match the rows.
        self._left = False

    def now(self) -> float:
        """The time of this transaction's decision."""
        t = self.clock()
        if t < self._floor:
            t = self._floor
        self._written = t
        return t

    def acquire(self, blocking: bool = True, *, reading: bool = False) -> bool:
        """Begin the transaction and load the rows (waiting for the file's lock up to
        its ``busy_timeout`` whatever ``blocking`` says); ``reading``: a transaction
        that writes nothing, whatever the decision does (:meth:`release` rolls it
        back), for a peek."""
        file = self._file
        conn = file.begin()
        # Set in this process's turn (begin), so no other thread's transaction reads it.
        self._reading = reading
        self._left = False
        try:
            self._outer = sys.exc_info()[1]
            # No other connection has committed (data_version), nor this process
            # written (file.writes), since this handle last read or wrote its rows:
            # the slots hold them already.
            mark = (file.generation, conn.execute(_VERSION).fetchone()[0], file.writes)
            changeable = self._changeable
            if mark == self._seen and (changeable is None or self.clock() < changeable.until):
                self._written = self._floor
            else:
                self._seen = None
                self._load(conn)
                self._mark = mark
        except CorruptState as exc:
            file.rollback(conn)
            raise BackendUnavailable(f"the SQLite store {file.path!r} holds a row it did not write: {exc}") from exc
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        self._conn = conn
        return True

    def _load(self, conn: Any) -> None:
        loaded = self._loaded
        loaded.clear()
        floor = -math.inf
        row = None
        for key, slot in zip(self._keys, self._slots, strict=True):
            row = conn.execute(_SELECT, key).fetchone()
            if row is None:
                number = blob = None
                slot.state = slot.alg.new_state()
                if not _bare(slot):
                    _load_holes(slot, Holes(), {})
            else:
                number, blob, updated = row[0], row[1], row[2]
                if updated > floor:
                    floor = updated
                if blob is None and number.__class__ is float and _bare(slot):
                    slot.state = number  # a token bucket's: the usual row, one number
                else:
                    state, holes, groups = decode(number, blob)
                    slot.state = state
                    _load_holes(slot, holes, groups)
            loaded.append((number, blob))
        self._floor = self._written = floor
        changeable = self._changeable
        if changeable is not None:
            self._follow(conn, changeable, row)

    def _follow(self, conn: Any, changeable: Changeable, row: Any) -> None:
        """Decide under the change in force: the state moved to its limit if it was
        last decided under another (see sqlite/config.py)."""
        t = self.clock()
        if t < self._floor:
            t = self._floor
        self._change = changeable.read(conn, self._keys[0][0], t)
        was, pending = (None, False) if row is None else under(row[3], row[4])
        steps = changeable.moves(was, pending, None if row is None else row[2], t)
        if self._reading:
            # A peek moves the state in memory only, and answers as Redis's does (its
            # 'peek' and 'wait' ops): the changes made since the last decision are
            # followed (Redis moved the state in each change's own call), but a change
            # that has ended is not undone: Redis's read-only ops leave that move, and
            # the row's deletion, to the next decision, reading the state as the
            # change left it under the code's limit. Nothing is written, so that the
            # decisions after a peek are those without it.
            self._left = bool(steps or pending or changeable.ended or changeable.forget_past)
            if changeable.ended:
                steps = steps[:-1]  # (the move back to the code's limit, at now)
            if steps and row is not None:
                self._slots[0].state = changeable.move(self._slots[0].state, was, steps, t)
            return
        if steps or pending:
            slot = self._slots[0]
            if row is not None:
                slot.state = changeable.move(slot.state, was, steps, t)
            self._loaded[0] = (math.nan, None)  # written back, whatever the decision
            self._written = t

    def release(self) -> None:
        conn = self._conn
        self._conn = None
        file = self._file
        seen, self._seen = self._seen or self._mark, None
        if self._reading:
            self._reading = False
            changeable = self._changeable
            if changeable is not None:
                # What the read found to write is found again by the next decision,
                # which reads the rows again if the slots no longer match them.
                changeable.ended = changeable.forget_past = False
            file.rollback(conn)
            if not self._left:
                self._seen = seen  # (a peek changes no slot: they still match the rows)
            return
        if sys.exc_info()[1] is not self._outer:
            # The decision raised (a bug, or an interrupt): nothing of it is kept, and
            # the slots are read again next time.
            file.rollback(conn)
            return
        wrote = False
        change = self._change
        under = (None, None) if change is None else change
        try:
            changeable = self._changeable
            if changeable is not None and changeable.ended:
                conn.execute(_END_CHANGE, (self._keys[0][0],))
                changeable.ended = False
                wrote = True
            elif changeable is not None and changeable.forget_past:
                conn.execute(FORGET_PAST, (self._keys[0][0],))
                changeable.forget_past = False
                wrote = True
            loaded = self._loaded
            for i, (key, slot) in enumerate(zip(self._keys, self._slots, strict=True)):
                state = slot.state
                before = loaded[i]
                if state.__class__ is float and _bare(slot):
                    if before[0] == state and before[1] is None:
                        continue  # a refusal: nothing changed
                    conn.execute(
                        _WRITE, (*key, state, None, slot.alg.idle_until(state), self._written, self.test, *under)
                    )
                    loaded[i] = (state, None)
                else:
                    number, blob = encode(state, slot.holes, slot.group_holes)
                    if (number, blob) == before:
                        continue
                    conn.execute(_WRITE, (*key, number, blob, _idle(slot), self._written, self.test, *under))
                    loaded[i] = (number, blob)
                wrote = True
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        if wrote:
            file.writes += 1
            self._floor = self._written
        file.commit(conn)  # raises (and leaves the slots to be read again) if it cannot
        self._seen = (seen[0], seen[1], file.writes)

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """A transaction that writes nothing (``acquire(reading=True)``)."""
        self.acquire(reading=True)
        try:
            yield
        finally:
            self.release()


class _Followed(MemoryHandle):
    """The memory handle of a single limiter that follows a change at run time: its
    peek reads the file only, as Redis's does; a decision would write the moves it
    makes there."""

    __slots__ = ()

    def _reading(self) -> Any:
        return cast(Rows, self._slot.lock).reading()


class _Unavailable(Generic[T]):
    """A SQLite handle: the memory handle it wraps decides in the file, and what the
    file cannot decide goes to the backend's failure policy, with the local fallback
    of ``on_unavailable="local"``."""

    __slots__ = ("__weakref__", "_backend", "_calls", "_file", "_inner", "_local", "_name", "top")

    #: A decision that finds the file locked waits for it in a thread (see reserve_async).
    suspends = True

    def __init__(self, backend: SQLiteBackend, name: str, inner: Handle[T], local: Fallback[T] | None) -> None:
        #: Where its decisions are counted for ``ratelimit top`` (sqlite/top.py):
        #: under ``(name, kind, shadow)``; ``None``: not counted.
        self.top: Cell | None = None
        self._backend = backend
        self._file = backend.file
        self._calls = backend.file.calls
        self._name = name
        self._inner = inner
        self._local = local

    @property
    def tally(self) -> Tally | None:
        return self._inner.tally

    @tally.setter
    def tally(self, tally: Tally | None) -> None:
        self._inner.tally = tally

    def name_grants(self) -> None:
        self._inner.name_grants()

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        # The caller's timeout bounds the wait for the file's lock too (sqlite/file.py).
        calls = self._calls
        calls.patience = max_wait
        try:
            decision = self._reserve(tokens, max_wait)
        except LockTimeout as exc:
            # Another process holds the file longer than the caller would wait: a busy
            # store, not an unavailable one. Refused, nothing decided, as a grant that
            # would wait too long; the wait it tells is the one spent on the lock.
            return self._refused(exc.waited)
        except BackendUnavailable as exc:
            local = self._local
            return self._backend.without_store(
                exc,
                self._name,
                local=None if local is None else lambda: local.reserve(tokens, max_wait),
                otherwise=lambda: (0.0, math.nan),
                says=(
                    "SQLite store unavailable; deciding %r locally: %s",
                    "SQLite store unavailable; granting %r without it (fail open): %s",
                ),
                decision=True,
            )
        finally:
            calls.patience = None
        self._decided(decision)
        return decision

    def _refused(self, waited: float) -> tuple[float, float]:
        """A refusal for the file's being busy ``waited`` seconds, counted as one."""
        tally = self._inner.tally
        if tally is not None:
            with tally.lock:
                tally.denied += 1
        return -waited, math.nan

    def _reserve_late(self, tokens: T, max_wait: float, came: float) -> tuple[float, float]:
        """:meth:`reserve` in a thread that an asyncio caller, come at ``came``, waited
        for (behind other callers' waits for a busy file): that wait counts in its
        timeout as a wait for the lock would. Past it, it decides only if the file is
        free at once."""
        late = time.monotonic() - came
        if max_wait == math.inf or late <= WAITED_LEAST:
            return self.reserve(tokens, max_wait)
        left = max(0.0, max_wait - late)
        if late <= max(max_wait, LOCK_GRACE):
            return self.reserve(tokens, left)
        decided = self.reserve_here(tokens, left)
        return self._refused(late) if decided is None else decided

    def _reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        """The decision in a transaction; after a wait for the lock, with what is left
        of ``max_wait`` (in the transaction that wait opened: see ``Waited``)."""
        waited = None
        try:
            try:
                return self._inner.reserve(tokens, max_wait)
            except Waited as exc:
                waited = exc.waited
            # Out of the handler: the transaction's end tells a decision that raised
            # by the exception being handled (Rows.release).
            return self._inner.reserve(tokens, max(0.0, max_wait - waited))
        finally:
            if waited is not None:
                self._file.let_go()  # kept, if the decision never began again

    def _decided(self, decision: tuple[float, float]) -> None:
        top = self.top
        backend = self._backend
        if top is not None:
            wait = decision[0]
            backend.counts.decided(top, decision[1] - wait, wait)
        backend.sweep_if_due()

    def reserve_here(self, tokens: T, max_wait: float) -> tuple[float, float] | None:
        """The decision if the file is free now, ``None`` if it would have to wait
        (then :meth:`reserve_async` waits for it off the event loop)."""
        try:
            with self._backend.file.not_waiting():
                return self.reserve(tokens, max_wait)
        except Busy:
            return None

    async def reserve_async(self, tokens: T, max_wait: float) -> tuple[float, float]:
        # At once when the file is free; else the wait for its lock (up to
        # busy_timeout) is a thread's, never the event loop's. A task cancelled
        # meanwhile leaves the thread to finish: the front gives back what it then
        # grants (``suspends``), as for a Redis round trip.
        decided = self.reserve_here(tokens, max_wait)
        if decided is not None:
            return decided
        came = time.monotonic()
        late = functools.partial(self._reserve_late, tokens, max_wait, came)
        if max_wait == math.inf:
            return await asyncio.to_thread(late)
        # A timeout bounds the wait for a thread too: one not begun by the time the
        # lock's wait would have been given up is refused, as that wait is.
        return await in_thread_within(late, max(max_wait, LOCK_GRACE), lambda: self._refused(time.monotonic() - came))

    async def _off_loop(self, call: Callable[[], R]) -> R:
        return await self._backend.file.off_loop(call)

    def _lost(self, what: str, run: Callable[[], object], local: Callable[[Fallback[T]], object]) -> None:
        try:
            run()
        except BackendUnavailable as exc:
            fallback = self._local
            self._backend.without_store(
                exc,
                self._name,
                local=None if fallback is None else lambda: local(fallback),
                otherwise=lambda: None,
                says=("", f"SQLite store unavailable; the {what} on %r is lost: %s"),
            )

    def refund(self, tokens: T, at: float | None) -> None:
        self._lost("refund", lambda: self._inner.refund(tokens, at), lambda local: local.refund(tokens, None))

    async def refund_async(self, tokens: T, at: float | None) -> None:
        await self._off_loop(lambda: self.refund(tokens, at))

    def charge(self, tokens: T) -> float | None:
        charged: float | None = None

        def run() -> None:
            nonlocal charged
            charged = self._inner.charge(tokens)

        self._lost("charge", run, lambda local: local.charge(tokens))
        return charged

    async def charge_async(self, tokens: T) -> float | None:
        return await self._off_loop(lambda: self.charge(tokens))

    def restrict(self, remaining: T, seconds: float) -> None:
        self._lost(
            "restriction",
            lambda: self._inner.restrict(remaining, seconds),
            lambda local: local.restrict(remaining, seconds),
        )

    async def restrict_async(self, remaining: T, seconds: float) -> None:
        await self._off_loop(lambda: self.restrict(remaining, seconds))

    def peek(self, tokens: T) -> float:
        try:
            return self._inner.peek(tokens)
        except BackendUnavailable as exc:
            local = self._local
            # As a decision would: the local fallback's own answer, or at once (fail open).
            return self._backend.without_store(
                exc,
                self._name,
                local=None if local is None else lambda: local.peek(tokens),
                otherwise=lambda: 0.0,
                says=("", ""),  # a read: nothing decided without the store to tell of
            )

    async def peek_async(self, tokens: T) -> float:
        return await self._off_loop(lambda: self.peek(tokens))

    def reset(self) -> None:
        self._lost("reset", self._inner.reset, lambda local: local.reset())

    async def reset_async(self) -> None:
        await self._off_loop(self.reset)


class SQLiteHandle(_Unavailable[float]):
    """One limiter, or one priority of a budget with lanes, in the file."""

    __slots__ = ("_quick",)

    def __init__(
        self,
        backend: SQLiteBackend,
        name: str,
        inner: Handle[float],
        local: Fallback[float] | None,
        quick: Quick | None = None,
    ) -> None:
        super().__init__(backend, name, inner, local)
        self._quick = quick

    def name_grants(self) -> None:
        # The statement's decision says only when a grant goes, not where it sits: a
        # limiter that gives back decides in the transaction.
        self._quick = None
        super().name_grants()

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        quick = self._quick
        if quick is None:
            return super().reserve(tokens, max_wait)
        if quick.on:
            # A token bucket whose row is one number: one statement (sqlite/quick.py),
            # which waits for no other process's lock (the full transaction does).
            try:
                decision = quick.reserve(tokens, max_wait, self._inner.tally)
            except LockTimeout as exc:  # this process's turn held by a thread that waits for the lock
                return self._refused(exc.waited)
            if decision is not None:
                self._decided(decision)
                return decision
        decision = super().reserve(tokens, max_wait)
        quick.after_full()
        return decision

    def restrict(self, remaining: float, seconds: float) -> None:
        super().restrict(remaining, seconds)
        top = self.top
        if top is not None and remaining <= EPSILON:
            # A pause fed back (a 429's Retry-After), counted for `ratelimit top`.
            self._backend.counts.paused(top, self._backend.now())


class SQLiteGroupHandle(_Unavailable[Sequence[float]]):
    """A composite's limits (or a limiter and its learned pace), in one transaction."""

    __slots__ = ("_group",)

    def __init__(
        self,
        backend: SQLiteBackend,
        name: str,
        inner: MemoryGroupHandle,
        local: Fallback[Sequence[float]] | None,
    ) -> None:
        super().__init__(backend, name, inner, local)
        self._group = inner

    def throttle(self, decided: float | None, at: float | None) -> None:
        """A refusal of the request decided at ``decided`` to go at ``at``: the learned pace cuts its rate."""
        self._lost("throttle", lambda: self._group.throttle(decided, at), lambda local: None)

    async def throttle_async(self, decided: float | None, at: float | None) -> None:
        await self._off_loop(lambda: self.throttle(decided, at))

    def rate(self) -> float:
        """The learned pace's rate now (``BackendUnavailable`` while the file cannot be read)."""
        return self._group.rate()


def _forked(ref: weakref.ref[SQLiteBackend]) -> None:
    backend = ref()
    if backend is not None:
        backend._forked()


@dataclass(frozen=True)
class StoredState:
    """One row of a :class:`SQLiteBackend` file, as :meth:`SQLiteBackend.inspect` reads it."""

    name: str
    #: The limit's place in a composite (``None``: a limiter of its own).
    member: int | None
    #: The algorithm (``token_bucket``, ``sliding_window:lanes``, ``breaker``, ...).
    kind: str
    #: The state, as the algorithm keeps it (times are store time).
    state: str
    #: Seconds since a decision last wrote it (``None`` for a ``ConcurrencyLimit``'s
    #: slots, which are rows of their own, each holder's and waiter's).
    age: float | None
    #: Seconds until it is as good as new (then a sweep forgets it); <= 0: idle now. For
    #: a ``ConcurrencyLimit``: until the last of its leases (or waiters' places) runs out.
    idle_in: float
    #: Written on a test clock (never swept).
    test: bool
    #: The key of a keyed budget (``limiter.for_key(key)``), or ``None``.
    key: str | None = None
    #: The change at run time in force for the name (``set_limit``), or ``None``.
    override: Override | None = None


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
        writes them), ``options`` as for the constructor."""
        if not isinstance(url, str) or not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ValueError(f"url must be sqlite:///PATH (sqlite:////tmp/x.db for an absolute path), got {url!r}")
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
        rows = Rows(self._file, [(named, -1, alg.kind)], [slot], clock, changeable)
        slot.lock = rows
        if changeable is None:
            inner = MemoryHandle(alg, slot, rows)
        else:
            inner = _Followed(cast(Algorithm[Any], changeable), slot, rows)
        local = None
        if self.on_unavailable == "local":
            local = single_share(self._local, alg, clock, self.local_share)
        quick = None
        if type(alg) is Gcra and changeable is not None:
            quick = Quick(self._file, named, alg, slot, rows.clock, rows.test, changeable)
        handle = SQLiteHandle(self, named, inner, local, quick)
        if rows.test == 0 and self._counters:
            handle.top = Cell((named, alg.kind, int(shadow)))
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
        local = None
        if self.on_unavailable == "local":
            local = group_share(self._local, algs, clock, self.local_share)
        handle = SQLiteGroupHandle(self, named, inner, local)
        if rows.test == 0 and self._counters:
            handle.top = Cell((named, "composite", 0))
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
            cell = Cell((named, "priorities", 0))  # both lanes in one row
            for handle in handles:
                handle.top = cell
        return handles

    def cell(self, name: str, kept: Kept, clock: Clock | None) -> tuple[Slot, Rows]:
        """One row of state of another kind than a limiter's (the circuit breaker's,
        ``kept.kind`` telling it apart): the slot it is loaded into, and the
        transaction that is both its lock and its clock."""
        slot = Slot(kept, clock)
        rows = Rows(self._file, [(tag(name), -1, kept.kind)], [slot], clock)
        slot.lock = rows
        return slot, rows

    def slot_rows(
        self, name: str | Keyed | None, member: int | None, most: int, lease: float, clock: Clock | None
    ) -> SlotRows:
        """The slots of a ConcurrencyLimit (``member`` of a composite), each holder and
        waiter a row of its own (``sqlite/slots.py``)."""
        return SlotRows(self._file, self._named(name), -1 if member is None else member, most, lease, clock)

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
            gone = conn.execute(_SWEEP, now).rowcount
            # The rows whose `forget` has passed but not their `idle` (moved on by the
            # quick path): their `forget` catches up, so the next sweep skips them.
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
        (``None``: now)."""
        if self._counters:
            with contextlib.suppress(BackendUnavailable):
                self.write_counts()
        file = self._file
        conn = file.begin()
        try:
            return read_top(conn, file.now() if now is None else now, window, lambda text: untag(text)[0])
        finally:
            file.rollback(conn)

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

    def inspect(self, names: Sequence[str] = ()) -> list[StoredState]:
        """What the file keeps for each name (every name when ``names`` is empty), as
        ``ratelimit inspect --store sqlite:///PATH`` prints it; read in one short
        transaction, nothing written."""
        file = self._file
        conn = file.begin()
        try:
            now = file.now()
            query = "SELECT name, member, kind, number, blob, idle, updated, test FROM ratelimit_state"
            if names:
                rows = [r for name in names for r in conn.execute(query + " WHERE name = ?", (tag(name),)).fetchall()]
            else:
                rows = conn.execute(query + " ORDER BY name, member").fetchall()
            changes = {
                text: read_change(conn, text, now)
                for text in {row[0] for row in rows if row[1] < 0 and row[2] in NAMES}
            }
            slots = census(conn, [tag(name) for name in names])
        finally:
            file.rollback(conn)
        found: list[StoredState] = []
        for text, member, kind, number, blob, idle, updated, test in rows:
            name, key = untag(text)
            try:
                state = repr(decode(number, blob)[0])
            except CorruptState as exc:
                state = f"<unreadable: {exc}>"
            found.append(
                StoredState(
                    name,
                    None if member < 0 else int(member),
                    kind,
                    state,
                    now - updated,
                    idle - now,
                    bool(test),
                    key,
                    changes.get(text) if member < 0 else None,
                )
            )
        # A ConcurrencyLimit's holders and waiters are rows of their own (sqlite_slots).
        for text, member, held, waiting, until, test in slots:
            name, key = untag(text)
            state = f"{held} held, {waiting} waiting"
            member_of = None if member < 0 else int(member)
            found.append(StoredState(name, member_of, "concurrency", state, None, until - now, bool(test), key))
        return found

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
    ) -> None:
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
        """
        change = checked_override(rate, burst, ttl)
        _validate.name(name, self, shared=True)
        named = tag(name)

        def configure(conn: Any, now: float) -> None:
            refuse_unchangeable(conn, named, change.burst)
            write_change(conn, named, change, now)

        self._admin(clock, configure)

    def reset_limit(self, name: str, *, clock: Clock | None = None) -> bool:
        """Return limiter ``name`` to what its code says, in every process from its
        next decision; ``True`` if a change was in force."""
        _validate.name(name, self, shared=True)
        named = tag(name)

        def reset(conn: Any, now: float) -> bool:
            was = read_change(conn, named, now) is not None
            write_change(conn, named, None, now)
            return was

        return self._admin(clock, reset)

    def limit_override(self, name: str, *, clock: Clock | None = None) -> Override | None:
        """The change in force for limiter ``name`` (``set_limit``), or ``None``; its
        ``ttl`` is what is left of it."""
        _validate.name(name, self, shared=True)
        named = tag(name)
        return self._admin(clock, lambda conn, now: read_change(conn, named, now), writes=False)

    def now(self) -> float:
        """Store time now, as every process of the box reads it (see ``sqlite/clock.py``)."""
        return self._file.now()

    def close(self) -> None:
        """Close this process's connection to the file (reopened by the next decision)."""
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"
