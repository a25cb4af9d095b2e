"""``adaptive=``: a limiter that learns the rate of a provider that does not say it.

:class:`Adaptive` is what users pass. The limiter then decides a group of two limits
(``_algorithms/adaptive.py``): its own algorithm (the ceiling) and a learned pace.
:class:`Paced` shows the group to the front as one handle; :class:`LastGrant` tells a
caller's refusal apart from those of requests sent before the last cut.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Sequence
from typing import Any

from .. import _validate
from .._algorithms.adaptive import Cubic
from .._algorithms.algorithm import Algorithm
from .._stores.stats import Stats
from .._stores.store import Handle, Pacing

__all__ = ["Adaptive", "LastGrant", "Paced"]


class Adaptive:
    """Learn the rate from the provider's refusals, for every worker sharing the budget.

    For an API that publishes no limit, changes it by plan or load, or answers 429
    without headers. The limiter's own rate becomes the ceiling; below it a rate is
    learned by CUBIC: a refusal (a 429, or a 503 with ``Retry-After``) fed back by any
    worker cuts the shared rate to ``decrease`` times the rate it was sent at, once
    per congestion event; the rate then grows back along a cubic curve, regaining the
    old rate after ``recover`` seconds and probing beyond. A provider's headers keep
    precedence (docs/fleets.md, "Limits nobody documents").

    Args:
        floor: the lowest rate it may learn, tokens per second (> 0).
        ceiling: the highest (default: the limiter's own sustained rate, which it may
            not exceed).
        decrease: the share of the rate a cut keeps (0 < decrease < 1; default 0.7,
            as TCP CUBIC and the AWS SDKs' adaptive mode use).
        recover: seconds after a cut at which the old rate is reached again (> 0).
    """

    __slots__ = ("ceiling", "decrease", "floor", "recover")

    def __init__(
        self, floor: float = 1.0, ceiling: float | None = None, *, decrease: float = 0.7, recover: float = 6.0
    ) -> None:
        self.floor = _validate.rate("floor", floor)
        _validate.horizon("floor", floor, 1.0 / self.floor, "one token's interval at the floor")
        self.ceiling = None if ceiling is None else _validate.rate("ceiling", ceiling)
        if self.ceiling is not None and self.floor > self.ceiling:
            raise ValueError(f"floor={floor!r} is above ceiling={ceiling!r}: the floor must be the lower")
        self.decrease = _validate.real("decrease", decrease)
        if not 0 < self.decrease < 1:
            raise ValueError(f"decrease must be > 0 and < 1 (the share of the rate a cut keeps), got {decrease!r}")
        self.recover = _validate.duration("recover", recover)
        _validate.horizon("recover", recover, self.recover, "the growth back after a cut take")

    def pace(self, alg: Algorithm[Any]) -> Cubic:
        """The learned pace beside ``alg``, whose sustained rate is the ceiling's limit."""
        most = alg.sustained_rate
        ceiling = most if self.ceiling is None else self.ceiling
        if ceiling > most * (1 + 1e-12):
            raise ValueError(
                f"adaptive ceiling={ceiling:g}/s is above the limiter's own rate ({most:g}/s): the limiter "
                f"could never grant it; raise the limiter's rate or lower the ceiling"
            )
        if self.floor > ceiling:
            raise ValueError(
                f"adaptive floor={self.floor:g}/s is above the ceiling ({ceiling:g}/s): the floor must be the lower"
            )
        return Cubic(alg.most, self.floor, ceiling, self.decrease, self.recover)

    def __repr__(self) -> str:
        ceiling = "" if self.ceiling is None else f", ceiling={self.ceiling:g}"
        extra = "" if self.decrease == 0.7 else f", decrease={self.decrease!r}"
        extra += "" if self.recover == 6.0 else f", recover={self.recover!r}"
        return f"Adaptive(floor={self.floor:g}{ceiling}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Adaptive) and (self.floor, self.ceiling, self.decrease, self.recover) == (
            other.floor,
            other.ceiling,
            other.decrease,
            other.recover,
        )

    def __hash__(self) -> int:
        return hash((self.floor, self.ceiling, self.decrease, self.recover))


def adaptive(value: object) -> Adaptive | None:
    """``adaptive=`` checked: an :class:`Adaptive`, or ``None``."""
    if value is None or isinstance(value, Adaptive):
        return value
    raise TypeError(f"adaptive must be an Adaptive(...) or None, got {type(value).__name__} {value!r}")


class LastGrant:
    """Each caller's (thread's, task's) latest grant, ``(decided, at)`` in store time,
    which tells whether a refusal it feeds back went before the last cut or after."""

    __slots__ = ("_var",)

    def __init__(self) -> None:
        self._var: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
            "ratelimit_last_grant", default=None
        )

    def saw(self, wait: float, at: float) -> None:
        if not math.isnan(at):  # a grant made without the store (fail open) has no time
            self._var.set((at - wait, at))

    def take(self) -> tuple[float | None, float | None]:
        """The caller's latest grant, forgotten once read: one refusal per grant. A caller
        whose grants were made in other tasks (``asyncio.wait_for`` may run one in its
        own) reads "unknown", not an older grant that would make the refusal look old."""
        last = self._var.get()
        if last is None:
            return None, None
        self._var.set(None)
        return last


class Paced:
    """A limiter's group of two, its own algorithm and the learned pace, as one handle:
    every request weighs the same on both."""

    __slots__ = ("_group", "_pacing", "suspends")

    def __init__(self, group: Handle[Sequence[float]]) -> None:
        if not isinstance(group, Pacing):
            raise TypeError(f"{type(group).__name__} cannot keep a learned pace")
        self._group = group
        self._pacing: Pacing = group
        self.suspends = group.suspends

    @property
    def stats(self) -> Stats | None:
        return self._group.stats

    @stats.setter
    def stats(self, stats: Stats | None) -> None:
        self._group.stats = stats

    @property
    def pacing(self) -> Pacing:
        return self._pacing

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        return self._group.reserve((tokens, tokens), max_wait)

    def reserve_here(self, tokens: float, max_wait: float) -> None:
        return None  # a group decides in the store

    def name_grants(self) -> None:
        self._group.name_grants()

    async def reserve_async(self, tokens: float, max_wait: float) -> tuple[float, float]:
        return await self._group.reserve_async((tokens, tokens), max_wait)

    def refund(self, tokens: float, at: float | None) -> None:
        self._group.refund((tokens, tokens), at)

    async def refund_async(self, tokens: float, at: float | None) -> None:
        await self._group.refund_async((tokens, tokens), at)

    def charge(self, tokens: float) -> None:
        self._group.charge((tokens, tokens))

    async def charge_async(self, tokens: float) -> None:
        await self._group.charge_async((tokens, tokens))

    def restrict(self, remaining: float, seconds: float) -> None:
        self._group.restrict((remaining, remaining), seconds)

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        await self._group.restrict_async((remaining, remaining), seconds)

    def peek(self, tokens: float) -> float:
        return self._group.peek((tokens, tokens))

    async def peek_async(self, tokens: float) -> float:
        return await self._group.peek_async((tokens, tokens))

    def reset(self) -> None:
        self._group.reset()

    async def reset_async(self) -> None:
        await self._group.reset_async()
