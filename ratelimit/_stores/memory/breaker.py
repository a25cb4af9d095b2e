"""A circuit breaker's state in this process (internal).

``MemoryBackend.bind_breaker`` returns a :class:`MemoryStore`; the shared stores make
one too, as the state a breaker goes on with while they cannot be reached, and the
SQLite store's extends it (``sqlite/breaker.py``).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Protocol

from ..._algorithms.breaker import Decision, Policy, State, allow, counts, observed_mode, record
from ..._clock import Clock
from ..._events import BreakerState

__all__ = ["MemoryStore"]


class Held(Protocol):
    """What holds the state: a plain box here, a memory ``Slot`` in the SQLite store."""

    state: State


class Serial(Protocol):
    """What serialises the transitions: a ``threading.Lock``, a SQLite store's ``Rows``."""

    def __enter__(self) -> object: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> object: ...


class _Held:
    __slots__ = ("state",)

    def __init__(self, state: State) -> None:
        self.state = state


class MemoryStore:
    """Breaker state in this process, behind a lock held only for a transition."""

    def __init__(self, policy: Policy, clock: Clock) -> None:
        self._policy = policy
        self._now = clock.now
        self._held: Held = _Held(State())
        self._lock: Serial = threading.Lock()

    def allow(self) -> Decision:
        with self._lock:
            return allow(self._policy, self._held.state, self._now())

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        with self._lock:
            return record(self._policy, self._held.state, self._now(), generation, probe, ok)

    def peek(self) -> tuple[BreakerState, int, int]:
        with self._lock:
            now = self._now()
            state = self._held.state
            return observed_mode(self._policy, state, now), *counts(self._policy, state, now)

    async def allow_async(self) -> Decision:
        return self.allow()

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        return self.record(generation, probe, ok)

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return self.peek()
