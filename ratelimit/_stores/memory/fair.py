"""A fairly shared budget's state in this process (``_algorithms/fair.py``): each
decision one step of the pure transition under the slot's lock.

``MemoryBackend.bind_fair`` and ``SQLiteBackend.bind_fair`` bind it; the SQLite
store's slot lock is a transaction that loads the row and writes it back.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..._algorithms import fair as _fair
from ..._algorithms.fair import Answer, Fair

__all__ = ["MemoryFairHandle"]


class _Slot(Protocol):
    """What the handle uses of a ``memory.backend.Slot``."""

    lock: Any
    state: Any

    def idle(self) -> bool: ...


class _Timed(Protocol):
    def now(self) -> float: ...


class MemoryFairHandle:
    """A fairly shared budget bound to its in-process (or SQLite) state."""

    suspends = False

    __slots__ = ("__weakref__", "_fair", "_now", "_slot")

    def __init__(self, fair: Fair, slot: _Slot, clock: _Timed) -> None:
        self._fair = fair
        self._slot = slot
        self._now = clock.now

    def ask(self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None) -> Answer:
        slot = self._slot
        with slot.lock:
            return _fair.reserve(self._fair, slot.state, self._now(), tenant, weight, tokens, max_wait, ticket)

    async def ask_async(
        self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None
    ) -> Answer:
        return self.ask(tenant, weight, tokens, max_wait, ticket)

    def peek(self, tenant: str, tokens: float, ticket: float | None) -> float:
        slot = self._slot
        with slot.lock:
            return _fair.peek(self._fair, slot.state, self._now(), tenant, tokens, ticket)

    async def peek_async(self, tenant: str, tokens: float, ticket: float | None) -> float:
        return self.peek(tenant, tokens, ticket)

    def reset(self) -> None:
        slot = self._slot
        with slot.lock:
            slot.state = self._fair.new_state()

    async def reset_async(self) -> None:
        self.reset()
