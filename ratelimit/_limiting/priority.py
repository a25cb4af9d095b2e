"""People before batch jobs: one budget, acquired at high or at low priority.

A limiter built with ``low_share`` keeps its budget in two lanes
(``_algorithms/lanes.py``) and acquires at high priority; ``limiter.low`` acquires at
low priority on the same state, with its own counters and events.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

from .. import _validate
from .._clock import Clock
from .._headers.parse import RateLimitInfo
from .._stores.records import Override, UnchangeableLimit
from .._stores.store import Backend, Handle
from .front import Limiter, difference

__all__ = ["LowPriority", "priorities"]

#: What a borrowing low request leaves of the high lane by default: one unit request.
DEFAULT_HIGH_RESERVE = 1.0


def priorities(low_share: object, borrow: object, high_reserve: object) -> tuple[float, float | None] | None:
    """The priority arguments checked: ``(low_share, keep)``, ``keep`` being what a low
    request borrowing the high lane leaves of it (``None``: lows never borrow); or
    ``None`` without priorities."""
    if low_share is None:
        for name, value in (("borrow", borrow), ("high_reserve", high_reserve)):
            if value is not None:
                raise ValueError(f"{name}={value!r} needs low_share: without it there are no priorities")
        return None
    share = _validate.real("low_share", low_share)
    if not 0.0 < share < 1.0:
        raise ValueError(f"low_share must be > 0 and < 1 (the low priority's share of the budget), got {low_share!r}")
    if borrow is None:
        borrow = True
    if not isinstance(borrow, bool):
        raise TypeError(f"borrow must be a bool, got {borrow!r}")
    if high_reserve is None:
        keep = DEFAULT_HIGH_RESERVE
    else:
        keep = _validate.real("high_reserve", high_reserve)
        if not 0.0 <= keep < float("inf"):
            raise ValueError(f"high_reserve must be tokens >= 0, got {high_reserve!r}")
    if not borrow:
        if high_reserve is not None:
            raise ValueError(f"high_reserve={high_reserve!r} needs borrow=True: without borrowing nothing is lent")
        return share, None
    return share, keep


class LowPriority(Limiter[float]):
    """``limiter.low``: the same budget as ``limiter``, acquired at low priority.

    Everything a limiter offers (``acquire``, ``try_acquire``, their ``_async`` twins,
    ``refund``, ``feedback``, ``decorate``, ``stats``, ``subscribe``); ``refund``
    gives tokens back to the low lane, and ``feedback`` restricts both lanes, as the
    limiter's own does.
    """

    __slots__ = ("_describe", "_most", "_most_name", "_restrict")
    _views_from = "limiter.for_key(key).low"

    def __init__(
        self,
        *,
        handle: Handle[float],
        most: float,
        most_name: str,
        restriction: Callable[[RateLimitInfo, int | None], tuple[float, float] | None],
        describe: Callable[[], str],
        backend: Backend,
        name: str | None,
        clock: Clock,
        shadow: bool = False,
    ) -> None:
        super().__init__(backend=backend, name=name, clock=clock)
        self._handle = handle
        self._handle.stats = self._stats
        self._most = most
        # Finite: an infinite request (refused as such) never takes the fast path.
        self._fast_most = most if most < math.inf else sys.float_info.max
        if shadow:  # as the limiter it is the low priority of
            self._shadow = True
            self._fast_most = 0
        self._most_name = most_name
        self._restrict = restriction
        self._describe = describe

    def _tokens(self, tokens: object, name: str = "tokens", *, zero: bool = False, cost: bool = False) -> float:
        return _validate.tokens(tokens, math.inf if cost else self._most, self._most_name, name, zero=zero)

    def _limit_changes(self, rate: object, burst: object, ttl: object) -> list[tuple[int | None, Override]]:
        raise UnchangeableLimit(
            f"{self!r} is the low priority of a budget with priorities (low_share), which keeps the code's "
            f"values; nothing was changed"
        )

    def _difference(self, estimate: float, actual: float) -> tuple[float | None, float | None]:
        return difference(estimate, actual)

    def _restriction(self, info: RateLimitInfo, status: int | None) -> tuple[float, float] | None:
        return self._restrict(info, status)

    def __repr__(self) -> str:
        return f"{self._describe()}.low"
