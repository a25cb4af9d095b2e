"""A ConcurrencyLimit's slots in this process, and the slots a shared store grants
without itself when it cannot be reached (``on_unavailable``).

:class:`MemorySlots` runs ``_algorithms/semaphore.py`` under a lock and wakes the
waiter a release promotes directly; it is what ``MemoryBackend.bind_slots`` returns.
:class:`Elsewhere` is reused by the Redis and SQLite stores' slots: the local
fallback of ``"local"`` is a :class:`MemorySlots` at this process's share.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Protocol

from ..._algorithms.semaphore import FULL, HELD, QUEUED, Semaphore
from ..._clock import Clock, SystemClock
from ..._errors import BackendUnavailable
from ..keys import Keyed
from ..slots import LOST
from ..waiting import Waiting

__all__ = ["Elsewhere", "MemorySlots", "memory_slots"]


class Sweeping(Protocol):
    """A store whose sweep of idle names may be due at a bind (``MemoryBackend``)."""

    def sweep_if_due(self) -> None: ...


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
    Sweeping, weakref.WeakValueDictionary[tuple[str | Keyed, int | None], MemorySlots]
] = weakref.WeakKeyDictionary()
_named_lock = threading.Lock()


def memory_slots(
    backend: Sweeping, name: str | Keyed | None, most: int, clock: Clock, member: int | None = None
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
