"""Several readings of one response as one: the binding budget, lowered by the rest.

One response may report several budgets: the items of a ``RateLimit`` list, HubSpot's
interval and second, Salesforce's org and app, Zendesk's account and endpoints, or one
budget in two dialects. ``binding`` keeps the one that runs out first, whole (its
limit, remaining, reset and window together, never a field of one budget beside a field
of another), and ``merge`` folds in what cannot be paced against it.
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

    The lowest remaining, the latest reset and ``Retry-After``, the lowest limit with
    its own window (see ``_limit_and_window``). ``gradual`` (and ``refills``) only if
    every reading that says anything of the budget is: fields of one read with the
    other's refill could make its pace faster than either says.
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

    A reading with a ``remaining`` and a time (a reset, or a window) is a *budget*, and
    budgets are compared whole: the one that runs out first is kept, with its own
    limit, reset and window. Most binding first:

    1. a spent budget (``remaining`` 0, its reset not due now): nothing may go until it
       refills, so of several, the one with the latest reset (an unknown reset last);
    2. then the lowest pace, ``remaining / seconds``: the most a client may send per
       second and still have that budget last until it refills. ``seconds`` is the
       reset, or the window when no reset is given (a window's budget refills within
       one window, so the pace is never overstated). On a tie, the longer time, then
       the reading that says more (a limit, a window). A ``gradual`` budget with its
       limit known refills as it goes: all of ``limit`` may go before its reset, so
       its pace is ``limit / reset``, spent or not;
    3. last, a budget refilling now (a reset of 0).

    A reading without a ``remaining``, or without any time, cannot be paced against
    the others. It is merged into the binding budget field by field, most
    conservatively (``merge``): a lower ``remaining`` with no time still caps what
    may go before the binding budget's reset.
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
