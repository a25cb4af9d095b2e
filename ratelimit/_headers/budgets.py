"""Several readings of one response as one: the binding budget, lowered by the rest.

``binding`` keeps the budget that runs out first, whole (never a field of one budget
beside a field of another); ``merge`` folds in what cannot be paced against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .fields import RateLimitInfo

__all__ = ["binding", "merge"]


def _low(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else min(x, y)


def _high(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else max(x, y)


def _limit_and_window(a: RateLimitInfo, b: RateLimitInfo) -> tuple[float | None, float | None]:
    """The lower limit with its own window: both from one reading, never one of each.

    On equal limits, the longer window known (the slower rate). With no limit at all,
    a window still says how long a budget lasts: the first one given.
    """
    if a.limit is None and b.limit is None:
        return None, a.window if a.window is not None else b.window
    if b.limit is None or (a.limit is not None and a.limit < b.limit):
        return a.limit, a.window
    if a.limit is None or b.limit < a.limit:
        return b.limit, b.window
    return a.limit, _high(a.window, b.window)


def merge(a: RateLimitInfo, b: RateLimitInfo) -> RateLimitInfo:
    """Two readings of one response: the most conservative of each field.

    The lowest remaining and limit (with its own window), the latest reset and
    ``Retry-After``. ``gradual`` and ``refills`` only if every reading that says
    anything of the budget is: one's fields with the other's refill could overstate
    the pace.
    """
    limit, window = _limit_and_window(a, b)
    telling = [r for r in (a, b) if (r.limit, r.remaining, r.reset_after) != (None, None, None)]
    return RateLimitInfo(
        limit=limit,
        remaining=_low(a.remaining, b.remaining),
        reset_after=_high(a.reset_after, b.reset_after),
        retry_after=_high(a.retry_after, b.retry_after),
        window=window,
        gradual=bool(telling) and all(r.gradual for r in telling),
        refills=bool(telling) and all(r.refills for r in telling),
    )


def binding(readings: Iterable[RateLimitInfo]) -> RateLimitInfo:
    """Several readings of one response as one: the binding budget, lowered by the rest.

    A reading with a ``remaining`` and a time (a reset, or a window) is a *budget*;
    the one that runs out first is kept whole. Most binding first:

    1. a spent budget (``remaining`` 0, its reset not due now), the latest reset first
       (an unknown reset last): nothing may go until it refills;
    2. the lowest pace, ``remaining / seconds``, with ``seconds`` the reset, else the
       window (a window's budget refills within one, so the pace is never overstated);
       ties to the longer time, then to the reading that says more (a limit, a window). A
       ``gradual`` budget with a known limit refills as it goes, so its pace is
       ``limit / reset``, spent or not;
    3. a budget refilling now (a reset of 0).

    A reading without a ``remaining`` or a time cannot be paced; it is merged into the
    binding budget field by field (``merge``), since a lower ``remaining`` still caps
    what may go before the binding reset.
    """
    budgets: list[RateLimitInfo] = []
    others: list[RateLimitInfo] = []
    for reading in readings:
        timed = reading.reset_after is not None or reading.window is not None
        (budgets if reading.remaining is not None and timed else others).append(reading)
    combined = min(budgets, key=_pressure) if budgets else RateLimitInfo()
    for other in others:
        combined = merge(combined, other)
    return combined


def _pressure(budget: RateLimitInfo) -> tuple[int, float, float, int]:
    """How soon one budget runs out, as ``binding`` orders them: lower is sooner."""
    remaining, reset = budget.remaining or 0.0, budget.reset_after
    says = -sum(field is not None for field in (budget.limit, budget.window))
    if budget.gradual and reset and budget.limit is not None and budget.limit > remaining:
        return 1, budget.limit / reset, -reset, says
    if remaining <= 0 and reset != 0:
        return 0, -reset if reset is not None else math.inf, 0.0, says
    seconds = reset if reset is not None else budget.window or 0.0
    if seconds > 0:
        return 1, remaining / seconds, -seconds, says
    return 2, remaining, 0.0, says
