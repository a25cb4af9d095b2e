"""A circuit breaker's state in a row of the file (internal).

``SQLiteBackend.bind_breaker`` returns a :class:`SQLiteStore`: the memory store's
transitions (``memory/breaker.py``), the row loaded into a memory ``Slot`` and each
transition one transaction (``Rows``, the slot's lock and clock). :class:`Kept` is
what the row keeps, ``kind`` ``"breaker"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..._algorithms.breaker import Decision, Policy, State, idle_until
from ..._clock import Clock
from ..._errors import BackendUnavailable
from ..._events import BreakerState
from ..memory.backend import Lock, Slot, Timed
from ..memory.breaker import MemoryStore
from ..unavailable import FailurePolicy
from .file import StoreFile

__all__ = ["Kept", "SQLiteStore"]

R = TypeVar("R")


@dataclass(frozen=True)
class Kept:
    """The breaker's state as a row keeps it (``SQLiteBackend.cell``)."""

    policy: Policy
    kind = "breaker"

    def new_state(self) -> State:
        return State()

    def idle_until(self, state: State) -> float:
        return idle_until(self.policy, state)


class Transaction(Lock, Timed, Protocol):
    """The rows a breaker decides on (``Rows``): its lock, and its clock."""


class SQLiteStore(MemoryStore):
    """Breaker state in a row of a :class:`~ratelimit.SQLiteBackend` file: the memory
    store's transitions, each in one transaction. When the file cannot be used, the
    backend's ``on_unavailable`` decides, as for Redis (see ``redis/breaker.py``)."""

    def __init__(
        self,
        failure: FailurePolicy,
        file: StoreFile,
        name: str,
        cell: tuple[Slot, Transaction],
        policy: Policy,
        clock: Clock,
        local: MemoryStore,
    ) -> None:
        super().__init__(policy, clock)
        slot, rows = cell
        self._held = slot
        self._lock = rows
        self._now = rows.now
        self._failure = failure
        self._file = file
        self._name = name
        self._local = local

    def _or_local(self, exc: BackendUnavailable, local: Callable[[], R]) -> R:
        says = "SQLite store unavailable; the circuit breaker %r goes on locally: %s"
        return self._failure.without_store(exc, self._name, local=local, otherwise=local, says=(says, says))

    def allow(self) -> Decision:
        try:
            return super().allow()
        except BackendUnavailable as exc:
            return self._or_local(exc, self._local.allow)

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        try:
            return super().record(generation, probe, ok)
        except BackendUnavailable as exc:
            return self._or_local(exc, lambda: self._local.record(generation, probe, ok))

    def peek(self) -> tuple[BreakerState, int, int]:
        try:
            return super().peek()
        except BackendUnavailable as exc:
            return self._or_local(exc, self._local.peek)

    # The memory store's async methods run the transition on the loop; the file's lock
    # may be another process's for up to busy_timeout, which the loop must not wait on.

    async def allow_async(self) -> Decision:
        return await self._file.off_loop(self.allow)

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        return await self._file.off_loop(lambda: self.record(generation, probe, ok))

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return await self._file.off_loop(self.peek)
