"""Several limits at once, granted all-or-nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from .. import _validate
from .._clock import Clock
from .._headers import RateLimitInfo
from .._stores.store import Backend
from .feedback import restriction
from .front import Decorator, Limiter
from .limiters import SingleLimiter

__all__ = ["Composite"]

Tokens = float | Sequence[float]


class Composite(Limiter[Sequence[float]]):
    """Acquire from several limits together: all of them grant, or none is charged.

    For a provider that enforces more than one limit (100 requests/s *and* 5,000 an
    hour; an LLM API's requests/min *and* tokens/min)::

        llm = Composite([TokenBucket(50, 50 / 60), TokenBucket(40_000, 40_000 / 60)])
        llm.acquire(tokens=[1, 1_200])   # one request, 1,200 tokens

    The grant happens when every limit allows it, at the latest of their times; a
    refusal (timeout, full queue) by any one of them charges none. The members
    describe the limits: the composite keeps its own state for them, under its own
    ``backend`` and ``name`` (in Redis, all in one hash slot, decided by one script
    call).

    ``tokens`` is one number charged to every member, or one number per member.
    """

    __slots__ = ("_algs", "_most", "_names")

    def __init__(
        self,
        limits: Sequence[SingleLimiter],
        *,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        if isinstance(limits, (str, bytes)) or not isinstance(limits, Sequence):
            raise TypeError(f"limits must be a sequence of limiters, got {limits!r}")
        if not limits:
            raise ValueError("limits must name at least one limiter, got an empty sequence")
        for i, member in enumerate(limits):
            if not isinstance(member, SingleLimiter):
                raise TypeError(f"limits[{i}] must be a TokenBucket, LeakyBucket or SlidingWindow, got {member!r}")
            if member.low_share is not None:
                raise ValueError(
                    f"limits[{i}] has low_share={member.low_share:g}: a composite does not take priorities "
                    f"(build its members without low_share)"
                )
        super().__init__(backend=backend, name=name, clock=clock)
        self._algs = tuple(member.algorithm_for(clock) for member in limits)
        self._most = tuple(alg.most for alg in self._algs)
        self._names = tuple(member.most_name_for(clock) for member in limits)
        self._handle = self._backend.bind_group(self._name, self._algs, clock)
        self._handle.tally = self._tally

    def _tokens(self, tokens: object) -> Sequence[float]:
        limits = tuple(zip(self._most, self._names, strict=True))
        if isinstance(tokens, Sequence) and not isinstance(tokens, (str, bytes)):
            if len(tokens) != len(limits):
                raise ValueError(f"tokens must give one number per limit ({len(limits)}), got {tokens!r}")
            return tuple(_validate.tokens(n, most, name) for n, (most, name) in zip(tokens, limits, strict=True))
        return tuple(_validate.tokens(tokens, most, name) for most, name in limits)

    def _restriction(self, info: RateLimitInfo, status: int | None) -> tuple[Sequence[float], float] | None:
        # The members count in different units (requests, tokens), and one response's
        # `remaining` speaks of one of them; a pause, though, holds for all.
        change = restriction(info, status)
        if change is None or change[0] > 0:
            return None
        return (0.0,) * len(self._algs), change[1]

    if TYPE_CHECKING:
        # The same methods as every limiter, typed to take one weight per member too.
        # At run time they are the inherited ones, which validate through _tokens.

        def acquire(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> float: ...

        def try_acquire(self, tokens: Tokens = 1) -> bool: ...

        async def acquire_async(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> float: ...

        async def try_acquire_async(self, tokens: Tokens = 1) -> bool: ...

        def refund(self, tokens: Tokens = 1) -> None: ...

        async def refund_async(self, tokens: Tokens = 1) -> None: ...

        def decorate(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> Decorator: ...
