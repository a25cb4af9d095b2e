"""In-process state: the embedded default, thread-safe and asyncio-safe.

A lock guards each limiter's state for the few microseconds a decision takes; waiting
happens in the caller, after the lock is released, so one sleeping acquire never
blocks another thread's decision. Nothing here awaits, so the same lock serves
asyncio tasks too (it is never held across an ``await``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ._algorithm import Algorithm, step_all
from ._clock import Clock, SystemClock
from ._tally import Tally, weight

__all__ = ["MemoryBackend"]


class _Slot:
    """One limiter's state and the lock that serialises decisions on it."""

    __slots__ = ("lock", "state")

    def __init__(self, state: Any) -> None:
        self.lock = threading.Lock()
        self.state = state


class MemoryBackend:
    """State held in this process.

    Limiters created without ``backend=`` each get private state of their own. Pass
    one ``MemoryBackend`` to several limiters with the same ``name`` to make them
    share one budget inside a process (the in-process twin of a Redis key).
    """

    shared = False

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._lock = threading.Lock()

    def _slot(self, name: str | None, alg: Algorithm[Any]) -> _Slot:
        if name is None:
            return _Slot(alg.new_state())
        with self._lock:
            slot = self._slots.get((name, alg.kind))
            if slot is None:
                slot = self._slots[(name, alg.kind)] = _Slot(alg.new_state())
            return slot

    def bind(self, name: str | None, alg: Algorithm[Any], clock: Clock | None) -> MemoryHandle:
        return MemoryHandle(alg, self._slot(name, alg), clock or SystemClock())

    def bind_group(self, name: str | None, algs: Sequence[Algorithm[Any]], clock: Clock | None) -> MemoryGroupHandle:
        members = [None if name is None else f"{name}:{i}" for i in range(len(algs))]
        slots = [self._slot(member, alg) for member, alg in zip(members, algs, strict=True)]
        return MemoryGroupHandle(algs, slots, clock or SystemClock())

    def __repr__(self) -> str:
        return f"MemoryBackend(<{len(self._slots)} named limiters>)"


class MemoryHandle:
    """One limiter bound to its in-process state."""

    suspends = False

    __slots__ = ("_alg", "_now", "_slot", "_step", "tally")

    def __init__(self, alg: Algorithm[Any], slot: _Slot, clock: Clock) -> None:
        self.tally: Tally | None = None
        self._alg = alg
        self._slot = slot
        self._now = clock.now
        self._step = alg.step

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        slot = self._slot
        # acquire()/release() rather than `with`: measurably cheaper on this hot path,
        # and nothing between them can raise except a bug in the algorithm.
        slot.lock.acquire()
        try:
            # Read inside the lock, so that decisions see time in the order they run.
            now = self._now()
            slot.state, wait = self._step(slot.state, now, tokens, max_wait)
            if self.tally is not None:
                self.tally.record(tokens, wait)
        finally:
            slot.lock.release()
        return wait, now + wait

    async def reserve_async(self, tokens: float, max_wait: float) -> tuple[float, float]:
        return self.reserve(tokens, max_wait)

    def refund(self, tokens: float, at: float | None) -> None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            slot.state = self._alg.refund(slot.state, now, tokens, now if at is None else at)

    async def refund_async(self, tokens: float, at: float | None) -> None:
        self.refund(tokens, at)

    def restrict(self, remaining: float, seconds: float) -> None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            slot.state = self._alg.restrict(slot.state, now, remaining, now + seconds)

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        self.restrict(remaining, seconds)

    def peek(self) -> tuple[float, float]:
        slot = self._slot
        with slot.lock:
            return self._alg.peek(slot.state, self._now())


class MemoryGroupHandle:
    """Several limits decided together, all-or-nothing."""

    suspends = False

    __slots__ = ("_algs", "_locks", "_now", "_slots", "tally")

    def __init__(self, algs: Sequence[Algorithm[Any]], slots: Sequence[_Slot], clock: Clock) -> None:
        self.tally: Tally | None = None
        self._algs = tuple(algs)
        self._slots = tuple(slots)
        self._now = clock.now
        # One global order (by identity) so that two composites over shared slots
        # never deadlock.
        self._locks = tuple(slot.lock for slot in sorted(self._slots, key=id))

    def reserve(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float]:
        locks = self._locks
        for lock in locks:
            lock.acquire()
        try:
            now = self._now()
            states, wait = step_all(self._algs, [s.state for s in self._slots], now, tokens, max_wait)
            for slot, state in zip(self._slots, states, strict=True):
                slot.state = state
            if self.tally is not None:
                self.tally.record(weight(tokens), wait)
        finally:
            for lock in reversed(locks):
                lock.release()
        return wait, now + wait

    async def reserve_async(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float]:
        return self.reserve(tokens, max_wait)

    def refund(self, tokens: Sequence[float], at: float | None) -> None:
        locks = self._locks
        for lock in locks:
            lock.acquire()
        try:
            now = self._now()
            when = now if at is None else at
            for alg, slot, n in zip(self._algs, self._slots, tokens, strict=True):
                slot.state = alg.refund(slot.state, now, n, when)
        finally:
            for lock in reversed(locks):
                lock.release()

    async def refund_async(self, tokens: Sequence[float], at: float | None) -> None:
        self.refund(tokens, at)

    def restrict(self, remaining: Sequence[float], seconds: float) -> None:
        locks = self._locks
        for lock in locks:
            lock.acquire()
        try:
            now = self._now()
            for alg, slot, n in zip(self._algs, self._slots, remaining, strict=True):
                slot.state = alg.restrict(slot.state, now, n, now + seconds)
        finally:
            for lock in reversed(locks):
                lock.release()

    async def restrict_async(self, remaining: Sequence[float], seconds: float) -> None:
        self.restrict(remaining, seconds)
