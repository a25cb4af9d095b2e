"""ConcurrencyLimit: at most N requests in flight, shared like every limiter.

A holder keeps its slot until it releases it. In a shared store each slot is a lease
that a heartbeat thread renews while its holder lives, so a process killed with
SIGKILL frees its slots within ``lease_seconds``. Waiters queue in arrival order
across processes, and a release hands the slot to the head of the queue and wakes
that waiter: each transition is one store call, and waiting costs no polling. The
limit reaches a store's slots through its backend's ``bind_slots`` alone
(``_stores/slots.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Generic, NoReturn, TypeVar

from .. import _validate
from .._algorithms.semaphore import HELD, QUEUED
from .._clock import Clock, SystemClock
from .._errors import AcquireTimeout
from .._stores.keys import Keyed
from .._stores.records import UnchangeableLimit
from .._stores.slots import LOST, SlotStore, lease_id
from .._stores.store import Backend
from .._stores.waiting import Waiting
from .front import placed
from .keyed import Keyable

__all__ = ["ConcurrencyLimit", "Entries", "Hold", "Lease", "entrant", "rebound", "release_all", "release_all_async"]

logger = logging.getLogger("ratelimit")

#: The shortest lease: renewals every third of it must get through calls that may
#: each take a socket timeout (0.5 s). The longest: a year, past which a timer overflows.
MIN_LEASE = 1.0
MAX_LEASE = 366 * 86400.0

#: The longest one wait call blocks when no wake-up can be lost (in-process).
_LONG_WAIT = 3600.0

_NOT_A_RATE = (
    "ConcurrencyLimit has no reserve(): it counts holders, not a rate, and a slot frees when its holder "
    "releases it, at no time known in advance; hold one with `with limit.hold():` or limit.take()"
)


class Lease:
    """One held slot. :meth:`release` frees it (once: later calls do nothing); as a
    context manager, leaving the block releases it. A lease dropped unreleased frees
    its slot when garbage-collected. Any thread or task may release it; in a forked
    child it frees nothing the store shares (the parent still holds the slot)."""

    __slots__ = ("_limit", "name")

    def __init__(self, limit: ConcurrencyLimit, name: str) -> None:
        self._limit = limit
        self.name = name

    @property
    def released(self) -> bool:
        return self.name not in self._limit._live

    def release(self) -> None:
        """Free the slot for the next waiter; a second call does nothing."""
        # dict.pop is atomic: exactly one caller gets the release, whatever the threads.
        if self._limit._live.pop(self.name, None) is not None:
            self._limit._release(self.name)

    async def release_async(self) -> None:
        """:meth:`release` for asyncio; a cancellation does not stop it."""
        if self._limit._live.pop(self.name, None) is not None:
            await self._limit._release_async(self.name)

    def __del__(self) -> None:
        # The collector may run this under the store's lock: only post the name (safe in a
        # SimpleQueue); the next call or heartbeat frees the slot.
        if self._limit._live.pop(self.name, None) is not None:
            self._limit._dropped.put(self.name)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release_async()

    def __repr__(self) -> str:
        return f"Lease({self.name!r}, released={self.released})"


def _patience(limit: float) -> float | None:
    """A take's timeout as a waiter's patience (``None``: it waits as long as needed)."""
    return None if limit == math.inf else limit


def release_all(leases: Iterable[Lease]) -> None:
    """Release every one of ``leases``, even if one release fails or is interrupted
    (the first error is raised once all were tried)."""
    failed: BaseException | None = None
    for lease in leases:
        try:
            lease.release()
        except BaseException as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


async def release_all_async(leases: Iterable[Lease]) -> None:
    """:func:`release_all` for asyncio: a cancellation meanwhile stops none of them."""
    failed: BaseException | None = None
    for lease in leases:
        try:
            await lease.release_async()
        except BaseException as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


def entrant() -> object:
    """Who is entering or leaving a block from a coroutine: its task (else its
    thread: a coroutine may be closed outside any loop)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task if task is not None else threading.get_ident()


T = TypeVar("T")


class _Entry(Generic[T]):
    __slots__ = ("frame", "item", "owner")

    def __init__(self, frame: object, owner: object, item: T) -> None:
        self.frame = frame
        self.owner = owner
        self.item = item


def _unfile(index: dict[object, list[_Entry[T]]], key: object, entry: _Entry[T]) -> None:
    stack = index[key]
    # Nearly always the newest: search from the end.
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is entry:
            del stack[i]
            break
    if not stack:
        del index[key]


class Entries(Generic[T]):
    """What a ``with`` target that may be inside many blocks at once (``with limit:``,
    a shared ``hold()``) holds for each of them until it is left.

    A block inside a generator is left wherever the generator is closed (another
    thread, the loop's finaliser task). So an entry is filed under the frame running
    the ``with`` statement, which a generator keeps wherever it runs; an exit from
    another frame (helpers, an ``ExitStack``) takes its thread's or task's newest
    entry, and failing that any newest one: each exit frees one entry, so none is
    ever stranded.
    """

    __slots__ = ("_all", "_by_frame", "_by_owner", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Every entry, oldest first (a dict as an ordered set).
        self._all: dict[_Entry[T], None] = {}
        self._by_frame: dict[object, list[_Entry[T]]] = {}
        self._by_owner: dict[object, list[_Entry[T]]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, frame: object, owner: object, item: T) -> None:
        entry = _Entry(frame, owner, item)
        with self._lock:
            self._all[entry] = None
            self._by_frame.setdefault(frame, []).append(entry)
            self._by_owner.setdefault(owner, []).append(entry)

    def pop(self, frame: object, owner: object) -> T | None:
        """The entry of the block that ``frame`` (run by ``owner``) is leaving."""
        with self._lock:
            stack = self._by_frame.get(frame) or self._by_owner.get(owner)
            if stack:
                entry = stack[-1]
            elif self._all:
                entry = next(reversed(self._all))
            else:
                return None
            del self._all[entry]
            _unfile(self._by_frame, entry.frame, entry)
            _unfile(self._by_owner, entry.owner, entry)
        return entry.item


class Hold:
    """What :meth:`ConcurrencyLimit.hold` returns: ``with`` or ``async with`` it to hold
    one slot for the block. It may be shared, as a semaphore is: each block entering
    it holds a slot of its own, freed when that block is left."""

    __slots__ = ("_entries", "_limit", "_timeout")

    def __init__(self, limit: ConcurrencyLimit, timeout: float | timedelta | None) -> None:
        self._limit = limit
        self._timeout = timeout
        self._entries: Entries[Lease] = Entries()

    def __enter__(self) -> Lease:
        return self._enter(sys._getframe(1))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit(sys._getframe(1))

    async def __aenter__(self) -> Lease:
        return await self._enter_async(sys._getframe(1))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._exit_async(sys._getframe(1))

    # The frame running the ``with`` statement is passed in (see Entries).

    def _enter(self, frame: object) -> Lease:
        return _enter(self._limit, self._timeout, self._entries, frame)

    def _exit(self, frame: object) -> None:
        _exit(self._entries, frame)

    async def _enter_async(self, frame: object) -> Lease:
        return await _enter_async(self._limit, self._timeout, self._entries, frame)

    async def _exit_async(self, frame: object) -> None:
        await _exit_async(self._entries, frame)


# A block's entry and exit, for a Hold and for ``with limit:``, whose entries the limit
# keeps itself (a Hold of its own would be a cycle, and a key's view must be freed by
# reference counting).


def _enter(limit: ConcurrencyLimit, timeout: float | timedelta | None, entries: Entries[Lease], frame: object) -> Lease:
    lease = limit.take(timeout)
    entries.add(frame, threading.get_ident(), lease)
    return lease


def _exit(entries: Entries[Lease], frame: object) -> None:
    lease = entries.pop(frame, threading.get_ident())
    if lease is not None:
        lease.release()


async def _enter_async(
    limit: ConcurrencyLimit, timeout: float | timedelta | None, entries: Entries[Lease], frame: object
) -> Lease:
    lease = await limit.take_async(timeout)
    entries.add(frame, entrant(), lease)
    return lease


async def _exit_async(entries: Entries[Lease], frame: object) -> None:
    lease = entries.pop(frame, entrant())
    if lease is not None:
        await lease.release_async()


class _Heartbeat:
    """Renews the leases one limit holds, in one call every ``check_every`` seconds, from
    a daemon thread that runs while something is held or waited for. Each beat also
    frees the slots of leases dropped unreleased.

    A waiter renews its own place from its task or thread, which may run late (a
    stalled event loop). A place that ran out while its waiter lived would, once
    promoted, be a slot handed to another while its holder still went ahead: more
    holders than the limit. So each beat also renews the places of waiters that have
    not renewed their own for a beat and a half."""

    def __init__(self, limit: ConcurrencyLimit, store: SlotStore) -> None:
        self._limit = weakref.ref(limit)
        self._store = store
        self._lock = threading.Lock()
        self._names: set[str] = set()
        #: Each waiter's name, and when (monotonic) its place was last renewed.
        self._waiting: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def add(self, name: str) -> None:
        """Renew held lease ``name`` (a waiter's, once granted) until discarded."""
        self._track(name, None)

    def wait(self, name: str) -> None:
        """Renew the place of waiter ``name``, whenever its own renewal is late,
        until it is granted or discarded."""
        self._track(name, time.monotonic())

    def renewed(self, name: str) -> None:
        """Waiter ``name`` has just renewed its own place."""
        if self._store.check_every == math.inf:
            return
        with self._lock:
            if name in self._waiting:
                self._waiting[name] = time.monotonic()

    def _track(self, name: str, waiting_since: float | None) -> None:
        if self._store.check_every == math.inf:
            return
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: no thread came along, and the parent renews its own leases.
                self._pid = os.getpid()
                self._names = set()
                self._waiting = {}
                self._thread = None
            if waiting_since is None:
                self._waiting.pop(name, None)
                self._names.add(name)
            else:
                self._waiting[name] = waiting_since
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ratelimit-leases", daemon=True)
                self._thread.start()

    def discard(self, name: str) -> None:
        if self._store.check_every == math.inf:
            return  # nothing was added (see add)
        # The thread stops by itself, or a hold-release loop would start one per hold.
        with self._lock:
            self._names.discard(name)
            self._waiting.pop(name, None)

    def _orphaned(self) -> None:
        with self._lock:
            names, self._names = sorted(self._names), set()
            self._thread = None
        for name in names:
            with contextlib.suppress(Exception):
                self._store.release(name)

    def _run(self) -> None:
        pause = threading.Event()
        while True:
            pause.wait(self._store.check_every)
            limit = self._limit()
            if limit is None:
                # A lease keeps its limit alive: every lease was dropped unreleased.
                self._orphaned()
                return
            limit._drain()
            del limit
            with self._lock:
                if not self._names and not self._waiting:
                    self._thread = None
                    return
                names = sorted(self._names)
                # Late: not renewed for a beat and a half (a place lasts three beats).
                now = time.monotonic()
                due = 1.5 * self._store.check_every
                late = [name for name, since in self._waiting.items() if now - since >= due]
                for name in late:
                    self._waiting[name] = now
            try:
                lost = self._store.keep(names) if names else []
                if late:
                    # Renewing never puts a place back: one gone stays gone.
                    self._store.renew(late)
            except Exception:
                logger.warning(
                    "could not renew %d lease(s); retrying in %.3g s",
                    len(names) + len(late),
                    self._store.check_every,
                    exc_info=True,
                )
                continue
            if lost:
                self._put_back(lost)

    def _put_back(self, lost: list[str]) -> None:
        with self._lock:
            left = [name for name in lost if name not in self._names]
        # Released while this beat was on its way, then put back as lost: release again,
        # or they block a slot for a whole lease.
        for name in left:
            with contextlib.suppress(Exception):
                self._store.release(name)
        lost = [name for name in lost if name not in left]
        if lost:
            # Lost by the store (a restart, a failover): others may have had their slots.
            logger.warning("leases %s were lost by the store while held, and put back", lost)


class ConcurrencyLimit(Keyable):
    """At most ``max_in_flight`` holders at once, shared like every limiter.

    For a provider that caps requests in flight (GitHub's 100 concurrent requests, an
    inference API's concurrency limit)::

        in_flight = ConcurrencyLimit(100, backend=RedisBackend.from_url(url), name="github")
        with in_flight.hold():
            response = client.get(url)

    Args:
        max_in_flight: the most slots held at once, an int >= 1.
        lease_seconds: how long a slot outlives a holder that dies without releasing
            it (killed, frozen, cut off from the store); a thread renews a live
            holder's lease every ``lease_seconds / 3``, however long it holds the
            slot. In process no lease is needed.
        backend: where the slots live; in-process by default, a
            :class:`~ratelimit.RedisBackend` across processes, a
            :class:`~ratelimit.SQLiteBackend` among the processes of one box.
        name: the shared limit's name (required with a shared backend).
        clock: the clock the store's leases run on (tests).

    Waiters are served in arrival order, across processes; a release hands its slot
    straight to the first of them. Cancelling a waiting task, or a timeout, leaves
    nothing held.
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_beat",
        "_clock",
        "_dropped",
        "_entries",
        "_lease",
        "_live",
        "_most",
        "_name",
        "_store",
    )

    def __init__(
        self,
        max_in_flight: int,
        *,
        lease_seconds: float | timedelta = 30,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TypeError(f"max_in_flight must be an int, got {type(max_in_flight).__name__} {max_in_flight!r}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        self._lease = _validate.duration("lease_seconds", lease_seconds)
        if not MIN_LEASE <= self._lease <= MAX_LEASE:
            raise ValueError(
                f"lease_seconds must be between {MIN_LEASE:g} and {MAX_LEASE:g}, got {lease_seconds!r}: a lease is "
                f"renewed every third of it, through calls that may take a socket timeout (0.5 s) each"
            )
        self._most = max_in_flight
        store, checked, _ = placed(backend, name, clock)
        self._bind(store, self._place_of(checked), None, clock)

    def _bind(self, backend: Backend, name: str | Keyed | None, member: int | None, clock: Clock | None) -> None:
        """Keep the slots under ``name`` (a ``Keyed`` one: a key's, see ``for_key``)."""
        self._backend = backend
        self._name = name.name if isinstance(name, Keyed) else name
        self._clock: Clock = clock or SystemClock()
        bind_slots = getattr(backend, "bind_slots", None)
        if bind_slots is None:
            raise TypeError(
                f"ConcurrencyLimit keeps its slots where a backend binds them (bind_slots), and "
                f"{type(backend).__name__} has no bind_slots: use a MemoryBackend, a RedisBackend or a SQLiteBackend"
            )
        self._store: SlotStore = bind_slots(name, self._most, self._lease, clock, member=member)
        self._beat = _Heartbeat(self, self._store)
        #: The leases taken here and not yet released, and those dropped unreleased.
        self._live: dict[str, bool] = {}
        self._dropped: queue.SimpleQueue[str] = queue.SimpleQueue()
        #: The blocks of ``with limit:`` (a shared hold with no timeout).
        self._entries: Entries[Lease] = Entries()

    @property
    def max_in_flight(self) -> int:
        return self._most

    def set_limit(self, rate: object = None, burst: object = None, ttl: object = None) -> NoReturn:
        """Refused: a ConcurrencyLimit holds slots, not a rate; its ``max_in_flight``
        is the code's. Raises ``UnchangeableLimit`` (a ``ValueError``)."""
        raise UnchangeableLimit(
            f"{self!r} is a ConcurrencyLimit (slots held, not a rate): rate and burst do not apply, and "
            f"max_in_flight is not changed at run time; nothing was changed"
        )

    def reset_limit(self) -> bool:
        """Nothing to reset (see :meth:`set_limit`): ``False``."""
        return False

    @property
    def lease_seconds(self) -> float:
        return self._lease

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def clock(self) -> Clock:
        return self._clock

    def __repr__(self) -> str:
        return f"ConcurrencyLimit({self._most}, name={self._name!r}, backend={self._backend!r}){self._key_suffix()}"

    def _unnamed_in_process(self) -> bool:
        return self._name is None

    def _idle(self) -> bool:
        return self._store.idle()

    # -- what a rate offers and a count of holders cannot ---------------------------

    def reserve(self, tokens: object = 1, timeout: object = None) -> NoReturn:
        """Not offered: raises ``TypeError``. A slot frees at no moment known in advance,
        so there is no time to reserve (use :meth:`hold` or :meth:`take`)."""
        raise TypeError(_NOT_A_RATE)

    async def reserve_async(self, tokens: object = 1, timeout: object = None) -> NoReturn:
        """Not offered, as :meth:`reserve` says."""
        raise TypeError(_NOT_A_RATE)

    # -- holding ------------------------------------------------------------------

    def hold(self, timeout: float | timedelta | None = None) -> Hold:
        """Hold one slot for a ``with`` (or ``async with``) block.

        Args:
            timeout: the longest wait for a slot, in seconds (or a ``timedelta``);
                ``None`` waits as long as needed, ``0`` takes a slot only if one is
                free now.

        Raises:
            AcquireTimeout: no slot within ``timeout``; nothing is held. Its
                ``retry_after`` is the time waited (when a slot frees is not known).
        """
        if timeout is not None:
            _validate.timeout_seconds(timeout)
        return Hold(self, timeout)

    def take(self, timeout: float | timedelta | None = None) -> Lease:
        """Take one slot and return its :class:`Lease`; release it when done (or use
        :meth:`hold`). Waits as :meth:`hold` says."""
        limit = _validate.timeout_seconds(timeout)
        self._drain()
        store = self._store
        name = lease_id()
        started = time.monotonic()
        try:
            # In process a first try is free and spares a waiter; in a shared store the
            # take queues at once, saving a round trip.
            if limit == 0 or store.check_every == math.inf:
                outcome = store.take(name, None)
                if outcome == HELD or limit == 0:
                    return self._granted(name, outcome, started)
            waiting = Waiting(patience=_patience(limit))
            self._beat.wait(name)
            outcome = store.take(name, waiting)
            while outcome == QUEUED:
                left = limit - (time.monotonic() - started)
                if left <= 0:
                    break
                if waiting.wait(min(left, store.check_every, _LONG_WAIT)):
                    outcome = HELD
                else:
                    outcome = store.check(name, waiting)
                    self._beat.renewed(name)
                    if outcome == LOST:  # its place is gone (an outage, eviction): queue again
                        outcome = store.take(name, waiting)
        except BaseException:
            # Interrupted or failed, at any point: whatever the store recorded goes.
            self._beat.discard(name)
            with contextlib.suppress(Exception):
                store.release(name)
            raise
        if outcome != HELD:
            # Timed out: withdraw, which also frees a slot granted at the last moment.
            store.release(name)
        return self._granted(name, outcome, started)

    async def take_async(self, timeout: float | timedelta | None = None) -> Lease:
        """:meth:`take` for asyncio: suspends the task, not the thread. Cancelling it
        while it waits leaves nothing held."""
        limit = _validate.timeout_seconds(timeout)
        await self._drain_async()
        store = self._store
        name = lease_id()
        started = time.monotonic()
        try:
            if limit == 0 or store.check_every == math.inf:
                outcome = await store.take_async(name, None)
                if outcome == HELD or limit == 0:
                    return self._granted(name, outcome, started)
            waiting = Waiting(loop=asyncio.get_running_loop(), patience=_patience(limit))
            self._beat.wait(name)
            outcome = await store.take_async(name, waiting)
            while outcome == QUEUED:
                left = limit - (time.monotonic() - started)
                if left <= 0:
                    break
                if await waiting.wait_async(min(left, store.check_every, _LONG_WAIT)):
                    outcome = HELD
                else:
                    outcome = await store.check_async(name, waiting)
                    self._beat.renewed(name)
                    if outcome == LOST:
                        outcome = await store.take_async(name, waiting)
            if outcome != HELD:
                await store.release_async(name)
        except BaseException:
            # Cancelled or failed at any await, granted or not: nothing stays held.
            self._beat.discard(name)
            with contextlib.suppress(Exception):
                await store.release_async(name)
            raise
        return self._granted(name, outcome, started)

    def _granted(self, name: str, outcome: str, started: float) -> Lease:
        if outcome != HELD:
            self._beat.discard(name)
            raise self._timed_out(time.monotonic() - started)
        self._beat.add(name)
        self._live[name] = True
        return Lease(self, name)

    def _drain(self) -> None:
        """Free the slots of leases dropped unreleased (see ``Lease.__del__``)."""
        while not self._dropped.empty():
            try:
                name = self._dropped.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                self._release(name)

    async def _drain_async(self) -> None:
        while not self._dropped.empty():
            try:
                name = self._dropped.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                await self._release_async(name)

    # -- as a semaphore ----------------------------------------------------------------

    def __enter__(self) -> Lease:
        """``with limit:`` holds one slot for the block, waiting as long as needed."""
        return _enter(self, None, self._entries, sys._getframe(1))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _exit(self._entries, sys._getframe(1))

    async def __aenter__(self) -> Lease:
        return await _enter_async(self, None, self._entries, sys._getframe(1))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await _exit_async(self._entries, sys._getframe(1))

    def _timed_out(self, waited: float) -> AcquireTimeout:
        return AcquireTimeout(
            waited, f"no slot of max_in_flight={self._most} came free within the timeout ({waited:.3g} s waited)"
        )

    def _release(self, name: str) -> None:
        self._beat.discard(name)
        self._store.release(name)

    async def _release_async(self, name: str) -> None:
        self._beat.discard(name)
        await self._store.release_async(name)


def rebound(
    limit: ConcurrencyLimit, *, backend: Backend, name: str | Keyed | None, member: int, clock: Clock | None
) -> ConcurrencyLimit:
    """``limit``'s size and lease, kept as ``member`` of a composite under the
    composite's own ``backend`` and ``name``."""
    copy = ConcurrencyLimit.__new__(ConcurrencyLimit)
    copy._key = copy._keys = None
    copy._most = limit.max_in_flight
    copy._lease = limit.lease_seconds
    copy._bind(backend, name, member, clock)
    return copy
