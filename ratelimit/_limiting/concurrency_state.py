"""Where a ConcurrencyLimit's slots are kept: in this process, or in Redis (a SQLite
file: ``concurrency_sqlite.py``).

Both stores run the transitions of ``_algorithms/semaphore.py`` (Redis through its
twin, ``lua/concurrency.lua``) and wake the waiters a transition promotes: in
process directly, across processes by a message from the script (see
``_stores/redis/wakeups.py``). Every transition is one call: a take, a release, a renewal.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from .._algorithms.semaphore import FULL, HELD, QUEUED, Semaphore
from .._clock import Clock, SystemClock
from .._errors import BackendUnavailable
from .._stores.keys import Keyed, text_of
from .._stores.memory import MemoryBackend
from .._stores.redis.scripts import concurrency_script
from .._stores.redis.wakeups import CHANNEL_PREFIX, Listener, listener_for
from .._stores.waiting import Waiting, process_id
from .unfinished import finish_later

__all__ = ["LOST", "MemorySlots", "RedisSlots", "SlotStore", "lease_id", "memory_slots", "taken_here"]

#: What a waiter's check finds when its place is gone.
LOST = "lost"

logger = logging.getLogger("ratelimit")

_numbers = itertools.count(1)


def lease_id() -> str:
    """A new lease's id, ``<process>:<n>``: never reused, and naming the process that
    took it (its wake-up channel, and whose lease it is after a fork)."""
    return f"{process_id()}:{next(_numbers)}"


def taken_here(name: str) -> bool:
    """Whether this process took lease ``name``. A forked child inherits its parent's
    leases and unwinds the blocks holding them, but a shared slot stays the parent's
    to release and to renew: the parent still holds it."""
    return name.rpartition(":")[0] == process_id()


class SlotStore(Protocol):
    """What the front needs of a store of slots."""

    #: How often a waiter looks for itself in the store in case its wake-up was lost,
    #: and a holder's lease is renewed (seconds; ``inf``: never needed).
    check_every: float

    def take(self, name: str, waiting: Waiting | None) -> str: ...

    async def take_async(self, name: str, waiting: Waiting | None) -> str: ...

    def release(self, name: str) -> None: ...

    def idle(self) -> bool:
        """Whether no slot is held nor waited for here, so that a key's view may be
        forgotten (``False`` where the store's keys expire by themselves)."""
        ...

    async def release_async(self, name: str) -> None:
        """:meth:`release` for asyncio, carried through if the caller is cancelled
        meanwhile. A store that needs no I/O releases without suspending, so that a
        coroutine being closed (which may not await) still frees its slot."""
        ...

    def check(self, name: str, waiting: Waiting) -> str:
        """A waiter's look at its place, renewing it: ``HELD`` (its wake-up was lost),
        ``QUEUED``, or ``LOST`` (its place is gone: it must queue anew)."""
        ...

    async def check_async(self, name: str, waiting: Waiting) -> str: ...

    def keep(self, names: list[str]) -> list[str]:
        """The heartbeat: renew these held leases, putting back any the store lost;
        returns those."""
        ...

    def renew(self, names: list[str]) -> None:
        """The heartbeat: renew these waiters' places (a lease, if one was granted
        meanwhile), putting nothing back."""
        ...


class MemorySlots:
    """Slots in this process. A holder cannot die without its process, so leases
    never run out here; a waiter is woken by the release that hands it the slot."""

    check_every = math.inf

    def __init__(self, most: int, clock: Clock) -> None:
        self._sem = Semaphore(most, math.inf)
        self._now = clock.now
        self._lock = threading.Lock()
        self._state = self._sem.new_state()
        self._waiting: dict[str, Waiting] = {}

    @property
    def held(self) -> int:
        """How many slots are held now."""
        return len(self._state.holders)

    @property
    def queued(self) -> int:
        """How many callers wait for a slot now."""
        return len(self._state.waiters)

    def idle(self) -> bool:
        """Whether no slot is held and no caller waits (``False`` while a transition
        holds the lock: it is looked at next time)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return not self._state.holders and not self._state.waiters
        finally:
            self._lock.release()

    def _wake(self, promoted: list[str]) -> None:
        # Outside the lock: waking an asyncio waiter schedules a callback, which must
        # not run into this lock from another thread's loop.
        for name in promoted:
            waiting = self._waiting.pop(name, None)
            if waiting is not None:
                waiting.wake()

    def take(self, name: str, waiting: Waiting | None) -> str:
        with self._lock:
            outcome, promoted = self._sem.take(self._state, self._now(), name, waiting is not None)
            if outcome == QUEUED and waiting is not None:
                self._waiting[name] = waiting
            woken = [(p, self._waiting.pop(p)) for p in promoted if p in self._waiting]
        for _, waiting_one in woken:
            waiting_one.wake()
        return outcome

    async def take_async(self, name: str, waiting: Waiting | None) -> str:
        return self.take(name, waiting)

    def release(self, name: str) -> None:
        with self._lock:
            promoted = self._sem.release(self._state, self._now(), name)
            self._waiting.pop(name, None)
            woken = [self._waiting.pop(p) for p in promoted if p in self._waiting]
        for waiting in woken:
            waiting.wake()

    async def release_async(self, name: str) -> None:
        self.release(name)

    def check(self, name: str, waiting: Waiting) -> str:
        # Wake-ups in process are never lost, and places never run out.
        with self._lock:
            if name in self._state.holders:
                return HELD
            return QUEUED if name in self._state.waiters else LOST

    async def check_async(self, name: str, waiting: Waiting) -> str:
        return self.check(name, waiting)

    def keep(self, names: list[str]) -> list[str]:
        return []

    def renew(self, names: list[str]) -> None:
        pass  # places never run out here


#: The in-process slots of each named ConcurrencyLimit, per MemoryBackend: limits that
#: share a backend and a name share their slots, as long as one of them lives.
_named: weakref.WeakKeyDictionary[
    MemoryBackend, weakref.WeakValueDictionary[tuple[str | Keyed, int | None], MemorySlots]
] = weakref.WeakKeyDictionary()
_named_lock = threading.Lock()


def memory_slots(
    backend: MemoryBackend, name: str | Keyed | None, most: int, clock: Clock, member: int | None = None
) -> MemorySlots:
    """The slots of ``name`` (``member`` of a composite) on ``backend``; private ones
    for no name."""
    if name is None:
        return MemorySlots(most, clock)
    with _named_lock:
        named = _named.setdefault(backend, weakref.WeakValueDictionary())
        slots = named.get((name, member))
        if slots is None:
            slots = named[(name, member)] = MemorySlots(most, clock)
        elif slots._sem.most != most:
            raise ValueError(
                f"max_in_flight={most} differs from the {slots._sem.most} of the limit already named {name!r} "
                f"on this backend: one limit needs one size"
            )
    # As a bind does: the sweep may be due (it asks caches of keys' views to let go).
    backend.sweep_if_due()
    return slots


async def release_outlasting(
    release: Callable[[], None], later: Callable[[], Coroutine[Any, Any, None]], in_thread: Callable[[], None]
) -> None:
    """A slot's release from a coroutine, made whatever happens to its task: ``later()``
    (the release on the loop) shielded from the task's cancellation, ``in_thread()``
    (the release again in a thread nothing cancels) if the task is cancelled, for
    ``asyncio.run`` cancels every task left before it closes the loop, and ``release()``
    at once from a coroutine closed outside any loop (an async generator collected
    after its loop ended: nothing to await on, no loop to block). Made twice, a release
    frees one slot: lease names are never reused."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        release()
        return
    try:
        await asyncio.shield(later())
    except asyncio.CancelledError:
        in_thread()
        raise


class Elsewhere:
    """Slots taken while a shared store could not be used, and where each must be
    released: the store's ``on_unavailable`` decides, for Redis and SQLite alike
    (``"local"``: from this process's share, ``max(1, floor(most * share))`` slots;
    ``"allow"``: a slot nobody counts). ``store`` names the store in the warnings."""

    def __init__(self, backend: Any, label: str, store: str, most: int, share: float, clock: Clock | None) -> None:
        self._backend = backend
        self._label = label
        self._store = store
        self._local: MemorySlots | None = None
        if backend.on_unavailable == "local":
            self._local = MemorySlots(max(1, math.floor(most * share)), clock or SystemClock())
        # Leases granted without the store, by name: where each must be released.
        self._where: dict[str, MemorySlots | None] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def take(self, exc: BackendUnavailable, name: str, waiting: Waiting | None) -> str:
        """A take the store could not make: ``on_unavailable``'s outcome."""
        local = self._local

        def there() -> str:
            assert local is not None
            outcome = local.take(name, waiting)
            if outcome != FULL:
                self._where[name] = local
            return outcome

        def nowhere() -> str:
            self._where[name] = None
            return HELD

        outcome: str = self._backend.without_store(
            exc,
            self._label,
            local=None if local is None else there,
            otherwise=nowhere,
            says=(
                f"{self._store} unavailable; taking a slot of %r from this process's share: %s",
                f"{self._store} unavailable; taking a slot of %r without it (fail open): %s",
            ),
            decision=True,
        )
        return outcome

    def lost_release(self, exc: BackendUnavailable) -> None:
        """A release the store could not hear: its lease runs out on its own within
        lease_seconds, so the slot is late, not lost."""
        self._backend.without_store(
            exc,
            self._label,
            local=None,
            otherwise=lambda: None,
            says=("", f"{self._store} unavailable; a slot of %r frees when its lease runs out: %s"),
        )

    def release(self, name: str) -> bool:
        """Free ``name``'s slot where it was taken without the store (a local one, or
        none at all), saying whether it was."""
        if name not in self._where:
            return False
        local = self._where.pop(name)
        if local is not None:
            local.release(name)
        return True


class RedisSlots:
    """Slots in Redis, shared by every process; each transition is one script call.

    When Redis cannot be reached the backend's ``on_unavailable`` decides: ``"raise"``
    raises :class:`~ratelimit.BackendUnavailable`; ``"allow"`` grants a slot the
    store never hears of; ``"local"`` takes it from this process's own share,
    ``max(1, floor(max_in_flight * share))`` slots, ``share`` the backend's
    ``fallback_share()`` when the limit is made (``local_share``; with ``"auto"``, one
    over the live processes counted by then). A slot is released where it
    was taken.
    """

    def __init__(self, backend: Any, key: str, most: int, lease: float, clock: Clock | None) -> None:
        client = backend.client
        if client is None:
            raise TypeError(
                "ConcurrencyLimit needs a RedisBackend with a synchronous client, which listens for wake-ups "
                "and renews leases from a thread: make it with RedisBackend.from_url(...) "
                "or RedisBackend(redis.Redis(...))"
            )
        self._backend = backend
        self._keys = (key,)
        self._now = backend.now_source(clock)
        self._script = concurrency_script()
        self._params = (str(most), repr(float(lease)), CHANNEL_PREFIX)
        self._client = client
        self.check_every = lease / 3
        self._elsewhere = Elsewhere(backend, key, "Redis", most, backend.fallback_share(), clock)
        #: Takes on their way to Redis whose caller was cancelled meanwhile, by name.
        self._landing: dict[str, asyncio.Future[Any]] = {}

    @property
    def _listener(self) -> Listener:
        # Looked up at each use: a forked child has a listener (and a channel) of its own.
        return listener_for(self._client)

    def _args(self, op: str, *extra: str) -> list[str]:
        return [op, self._now(), *self._params, *extra]

    def _fallback(self, exc: BackendUnavailable, name: str, waiting: Waiting | None) -> str:
        self._listener.forget(name)
        return self._elsewhere.take(exc, name, waiting)

    def _taken(self, reply: Any, name: str) -> str:
        outcome = text_of(reply[0])
        if outcome not in (HELD, QUEUED, FULL):
            raise ValueError(f"unexpected reply from the concurrency script: {reply!r}")
        if outcome != QUEUED:
            self._listener.forget(name)
        return outcome

    def take(self, name: str, waiting: Waiting | None) -> str:
        if waiting is not None:
            self._listener.expect(name, waiting)
        try:
            reply = self._backend.run(self._script, self._keys, self._args("take", name, "1" if waiting else ""))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        except BaseException:
            self._listener.forget(name)
            raise
        return self._taken(reply, name)

    async def take_async(self, name: str, waiting: Waiting | None) -> str:
        if waiting is not None:
            # Subscribing blocks, once per idle period: not on the event loop.
            await asyncio.to_thread(self._listener.expect, name, waiting)
        # A take whose caller is cancelled still lands (a call in a thread cannot be
        # stopped, a command sent is run): if its release overtook it, the slot it
        # then took would be held by nobody. It goes on as a task of its own, and the
        # release of its name waits for it (see _release_async).
        call = asyncio.ensure_future(
            self._backend.run_async(self._script, self._keys, self._args("take", name, "1" if waiting else ""))
        )
        self._landing[name] = call
        call.add_done_callback(functools.partial(self._landed, name))
        try:
            reply = await asyncio.shield(call)
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        except BaseException:
            self._listener.forget(name)
            raise
        return self._taken(reply, name)

    def _released_elsewhere(self, name: str) -> bool:
        """Forget ``name``'s wake-up; free its slot if it was taken without the store."""
        self._listener.forget(name)
        return self._elsewhere.release(name)

    def idle(self) -> bool:
        return False  # its keys expire by themselves

    def release(self, name: str) -> None:
        if not self._released_elsewhere(name) and taken_here(name):
            self._release(name)

    def _release(self, name: str) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("release", name))
        except BackendUnavailable as exc:
            self._elsewhere.lost_release(exc)

    async def release_async(self, name: str) -> None:
        if self._released_elsewhere(name) or not taken_here(name):
            return
        await release_outlasting(
            functools.partial(self._release, name),
            functools.partial(self._release_async, name),
            functools.partial(self._release_in_thread, name),
        )

    def _release_in_thread(self, name: str) -> None:
        # (A store of an asyncio client alone takes no call from a thread.)
        if self._backend.client is not None:
            finish_later(functools.partial(self._release, name), f"the slot of lease {name}")

    def _landed(self, name: str, call: asyncio.Future[Any]) -> None:
        if self._landing.get(name) is call:
            del self._landing[name]
        if not call.cancelled():
            # Seen here, whether or not its caller is still there to see it.
            call.exception()

    async def _release_async(self, name: str) -> None:
        try:
            call = self._landing.get(name)
            if call is not None:
                await asyncio.wait([call])
            try:
                await self._backend.run_async(self._script, self._keys, self._args("release", name))
            except BackendUnavailable as exc:
                self._elsewhere.lost_release(exc)
        except asyncio.CancelledError:
            self._release_in_thread(name)
            raise

    def _checked(self, reply: Any, name: str) -> str:
        held = [text_of(x) for x in reply]
        if name in held[: held.index("|")]:
            self._listener.forget(name)
            return HELD
        return LOST if name in held else QUEUED

    def check(self, name: str, waiting: Waiting) -> str:
        try:
            reply = self._backend.run(self._script, self._keys, self._args("renew", name))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        return self._checked(reply, name)

    async def check_async(self, name: str, waiting: Waiting) -> str:
        try:
            reply = await self._backend.run_async(self._script, self._keys, self._args("renew", name))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        return self._checked(reply, name)

    def keep(self, names: list[str]) -> list[str]:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if not here:
            return []
        return [text_of(x) for x in self._backend.run(self._script, self._keys, self._args("keep", *here))]

    def renew(self, names: list[str]) -> None:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if here:
            self._backend.run(self._script, self._keys, self._args("renew", *here))
