"""A budget shared fairly among tenants in Redis (internal).

``RedisBackend.bind_fair`` returns a :class:`RedisFairHandle`: each decision one call
of ``lua/_fair.lua``, the twin of ``_algorithms/fair.py``, on three keys under the
limiter's hash tag: the budget's line, the active tenants' finishes (a sorted set) and
their weights (a hash). A Redis that cannot be reached raises ``BackendUnavailable``
whatever ``on_unavailable`` says: a fair share is one budget, with no share of it to
go on with locally.
"""

from __future__ import annotations

from typing import Any

from ..._algorithms.fair import Answer, Fair
from .replies import num
from .scripts import fair_script

__all__ = ["RedisFairHandle"]


def _answer(reply: Any) -> Answer:
    wait, deferred, ticket, next_in = reply
    return Answer(float(wait), deferred in (b"1", "1"), float(ticket), float(next_in))


class RedisFairHandle:
    """A fairly shared budget's state in Redis; every decision one script call."""

    suspends = True

    def __init__(self, backend: Any, keys: tuple[str, str, str], fair: Fair, now: Any) -> None:
        self._backend = backend
        self._keys = keys
        self._now = now
        self._script = fair_script(fair.line.kind)
        self._tail = [
            num(fair.lead),
            str(fair.most_tenants),
            num(fair.rate),
            *(num(x) for x in fair.line.params()),
        ]

    def _args(
        self, op: str, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None
    ) -> list[str]:
        return [
            op,
            self._now(),
            tenant,
            num(weight),
            num(tokens),
            "" if max_wait == float("inf") else num(max_wait),
            "" if ticket is None else num(ticket),
            *self._tail,
        ]

    def ask(self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None) -> Answer:
        args = self._args("ask", tenant, weight, tokens, max_wait, ticket)
        return _answer(self._backend.run(self._script, self._keys, args))

    async def ask_async(
        self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None
    ) -> Answer:
        args = self._args("ask", tenant, weight, tokens, max_wait, ticket)
        return _answer(await self._backend.run_async(self._script, self._keys, args))

    def peek(self, tenant: str, tokens: float, ticket: float | None) -> float:
        reply = self._backend.run(self._script, self._keys, self._args("peek", tenant, 1.0, tokens, 0.0, ticket))
        return float(reply[0])

    async def peek_async(self, tenant: str, tokens: float, ticket: float | None) -> float:
        args = self._args("peek", tenant, 1.0, tokens, 0.0, ticket)
        return float((await self._backend.run_async(self._script, self._keys, args))[0])

    def reset(self) -> None:
        self._backend.run(self._script, self._keys, self._args("reset", "", 1.0, 1.0, 0.0, None))

    async def reset_async(self) -> None:
        await self._backend.run_async(self._script, self._keys, self._args("reset", "", 1.0, 1.0, 0.0, None))
