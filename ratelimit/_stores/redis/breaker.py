"""A circuit breaker's state in one Redis hash (internal).

``RedisBackend.bind_breaker`` returns a :class:`RedisStore`: each transition one call
of ``lua/breaker.lua``, the twin of ``_algorithms/breaker.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..._algorithms.breaker import MODES, Decision, Policy
from ..._clock import Clock
from ..._errors import BackendUnavailable
from ..._events import BreakerState
from ..memory.breaker import MemoryStore
from .scripts import breaker_script

__all__ = ["RedisStore"]

R = TypeVar("R")


def _mode(value: Any) -> BreakerState:
    return MODES[int(value)]


def _policy_args(policy: Policy) -> list[str]:
    """The policy as the script's arguments."""
    numbers = (
        policy.failure_threshold,
        policy.min_calls,
        policy.window,
        policy.buckets,
        policy.cooldown,
        policy.half_open_probes,
        policy.probe_timeout,
    )
    return [repr(float(x)) for x in numbers]


class RedisStore:
    """Breaker state in one Redis hash; every transition is one call of ``breaker.lua``.

    When Redis cannot be reached, the backend's ``on_unavailable`` decides: ``"raise"``
    raises :class:`~ratelimit.BackendUnavailable`; ``"allow"`` and ``"local"`` go on
    with this process's own breaker state until Redis answers again.
    """

    def __init__(self, backend: Any, key: str, policy: Policy, clock: Clock | None, local: MemoryStore) -> None:
        self._backend = backend
        self._keys = (key,)
        self._policy_args = _policy_args(policy)
        self._now = backend.now_source(clock)
        self._script = breaker_script()
        self._local = local

    def _args(self, op: str, *extra: str) -> list[str]:
        return [op, self._now(), *self._policy_args, *extra]

    def _or_local(self, exc: BackendUnavailable, local: Callable[[], R]) -> R:
        # Under "allow" as under "local": a breaker has no grant to make without state.
        says = "Redis unavailable; the circuit breaker %r goes on locally: %s"
        result: R = self._backend.without_store(exc, self._keys[0], local=local, otherwise=local, says=(says, says))
        return result

    def _call(self, args: list[str], read: Callable[[Any], R], local: Callable[[], R]) -> R:
        try:
            return read(self._backend.run(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._or_local(exc, local)

    async def _call_async(self, args: list[str], read: Callable[[Any], R], local: Callable[[], R]) -> R:
        try:
            return read(await self._backend.run_async(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._or_local(exc, local)

    @staticmethod
    def _decision(reply: Any) -> Decision:
        admitted, probe, generation, retry_after, previous, state = reply
        return Decision(
            int(admitted) == 1, int(probe) == 1, int(generation), float(retry_after), _mode(previous), _mode(state)
        )

    @staticmethod
    def _transition(reply: Any) -> tuple[BreakerState, BreakerState]:
        return _mode(reply[0]), _mode(reply[1])

    @staticmethod
    def _peek(reply: Any) -> tuple[BreakerState, int, int]:
        return _mode(reply[0]), int(reply[1]), int(reply[2])

    def _record_args(self, generation: int, probe: bool, ok: bool | None) -> list[str]:
        return self._args("record", str(generation), "1" if probe else "0", _ok(ok))

    def allow(self) -> Decision:
        return self._call(self._args("allow"), self._decision, self._local.allow)

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        local = functools.partial(self._local.record, generation, probe, ok)
        return self._call(self._record_args(generation, probe, ok), self._transition, local)

    def peek(self) -> tuple[BreakerState, int, int]:
        return self._call(self._args("peek"), self._peek, self._local.peek)

    async def allow_async(self) -> Decision:
        return await self._call_async(self._args("allow"), self._decision, self._local.allow)

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        local = functools.partial(self._local.record, generation, probe, ok)
        return await self._call_async(self._record_args(generation, probe, ok), self._transition, local)

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return await self._call_async(self._args("peek"), self._peek, self._local.peek)


def _ok(ok: bool | None) -> str:
    return "" if ok is None else ("1" if ok else "0")
