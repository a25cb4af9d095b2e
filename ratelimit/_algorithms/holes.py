"""Withdrawn reservations: holes in the queue that later requests may fill.

A reservation is a promise of a grant at time ``at``. When its caller gives up before
then (a timeout, a cancelled task, Ctrl-C), the promise is withdrawn:

- If it is the last reservation recorded, the algorithm rolls it back
  (``Algorithm.cancel``), and with it any holes that are now at the end of the queue.
- Otherwise it cannot be rolled back: the reservations behind it were placed relative
  to it, and handing its budget to "now" could put a new grant closer to them than the
  algorithm allows. It becomes a *hole* ``[at, tokens]``, still paid for in the state.
  A later request that fits in a hole is granted at exactly the hole's time, with no
  more than its tokens: a moment and a weight the state has already accounted for, so
  no interval ever sees more than the algorithm allows.

A hole whose time has passed is dropped: granting it later than its slot is not safe
in general (a token bucket's later grants are spaced from it). A request looks at the
first ``SCAN`` holes only, so its cost stays bounded however many callers gave up.

A provider's pause (a restriction to nothing more until ``until``) drops the holes
before its end, and until then a place withdrawn before the end is lost and a refund
frees nothing: no request that was not already promised goes out during a pause.

Everything here works on a group of limits granted together (a composite); one limiter
is a group of one. ``tokens`` is one number per limit. Mirrored by ``lua/_members.lua``.

Timeline, ``TokenBucket(1, 10)`` (one grant per 100 ms), four requests at t=0 and the
third withdrawn at t=0.05::

    t=0     A wait 0, B wait 0.1, C wait 0.2, D wait 0.3
    t=0.05  C withdrawn: D is behind it, so C's slot at 0.2 becomes a hole
    t=0.06  E takes the hole: wait 0.14 (goes at 0.2), not 0.34
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from .algorithm import EPSILON, Algorithm, commit_all, decide, latest_all, plan_all

__all__ = ["SCAN", "Hole", "Holes", "Planned", "give_back", "pause", "plan", "reserve", "settle", "void"]

#: How many holes a request looks at, earliest first, for one it fits in.
SCAN = 16

#: ``[at, tokens]``: when the withdrawn grant was due, and its tokens per limit.
Hole = list[Any]


class Holes:
    """One limiter's (or composite's) holes, earliest first, and the end of the
    latest pause."""

    __slots__ = ("items", "paused_until")

    def __init__(self) -> None:
        self.items: list[Hole] = []
        self.paused_until = -math.inf

    def __repr__(self) -> str:
        return f"Holes({self.items!r}, paused_until={self.paused_until!r})"


def _fits(have: Sequence[float], want: Sequence[float]) -> bool:
    # A hole of another shape belongs to another composite of the same name.
    return len(have) == len(want) and all(w <= h + EPSILON for h, w in zip(have, want, strict=True))


def _drop_past(holes: list[Hole], now: float) -> None:
    cut = now - EPSILON
    stale = 0
    while stale < len(holes) and holes[stale][0] < cut:
        stale += 1
    if stale:
        del holes[:stale]


def _add(holes: list[Hole], at: float, tokens: Sequence[float]) -> None:
    # Two withdrawals for one moment are one hole (they were one grant's worth of
    # budget at one time, whoever held it).
    i = bisect.bisect_left(holes, at - EPSILON, key=lambda hole: hole[0])
    if i < len(holes) and holes[i][0] <= at + EPSILON:
        holes[i][1] = tuple(h + n for h, n in zip(holes[i][1], tokens, strict=True))
    else:
        holes.insert(i, [at, tuple(tokens)])


def void(holes: Holes) -> None:
    """A charge was recorded: the holes are void. Each was a withdrawn grant's budget,
    placed before the latest grant; the charge lands behind that grant, and a request
    taking a hole would go ahead of the debt (an interval holding the charge, the
    hole's grant and the grants around it would then hold more than the limit). The
    pause, if any, stays."""
    holes.items.clear()


def pause(holes: Holes, until: float) -> None:
    """A provider's pause until ``until``: a hole before then would be a request that
    was not promised going out during it. Forget them, and take no more until then."""
    items = holes.items
    keep = bisect.bisect_left(items, until, key=lambda hole: hole[0])
    if keep:
        del items[:keep]
    if until > holes.paused_until:
        holes.paused_until = until


def _take(algs: Sequence[Algorithm[Any]], holes: list[Hole], i: int, tokens: Sequence[float]) -> None:
    """Grant ``tokens`` of hole ``i`` at its time; keep what is left where it still fits."""
    at, have = holes.pop(i)
    rest = tuple(h - n for h, n in zip(have, tokens, strict=True))
    if all(r <= EPSILON for r in rest):
        return
    # In a queue the rest starts when this grant has left; where the limits of a
    # composite disagree on that, the rest is given up rather than misplaced.
    moved = {alg.next_free(at, n) for alg, n in zip(algs, tokens, strict=True)}
    if len(moved) == 1:
        _add(holes, moved.pop(), rest)


#: A plan with holes: ``(admit_at, at, hole)``, ``hole`` the index of the hole the
#: request would take (``None``: the algorithms' own plan).
Planned = tuple[float, float, "int | None"]


def plan(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float, tokens: Sequence[float]
) -> Planned:
    """``plan_all`` that first offers the request the earliest hole it fits in.

    A hole wins when it comes before the algorithms' own plan (or when they would not
    even admit the request now: a full leaky queue still has the hole's room). Drops
    holes that are past or void, which changes nothing they mean.
    """
    items = holes.items
    _drop_past(items, now)
    found = None
    for i in range(min(len(items), SCAN)):
        if _fits(items[i][1], tokens):
            found = i
            break
    admit_at, at = plan_all(algs, states, now, tokens)
    if found is not None and items[found][0] > latest_all(algs, states) + EPSILON:
        # Every hole is before a grant still reserved. Not so here: the state was
        # lost (a Redis key evicted) and the holes with it are void; so is the pause,
        # which was the state's.
        items.clear()
        holes.paused_until = -math.inf
        found = None
    if found is not None:
        hole_at = items[found][0]
        if admit_at - now > EPSILON or hole_at < at:
            return now, hole_at, found
    return admit_at, at, None


def settle(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    planned: Planned,
    max_wait: float,
) -> tuple[list[Any], float]:
    """Decide the request :func:`plan` planned and, if granted, record it (in the hole
    it takes, or in the states)."""
    admit_at, at, found = planned
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return list(states), wait
    if found is not None:
        _take(algs, holes.items, found, tokens)
        return list(states), wait
    return commit_all(algs, states, now, tokens, at), wait


def reserve(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    max_wait: float,
) -> tuple[list[Any], float]:
    """``step_all`` that first offers the request the earliest hole it fits in: :func:`plan`
    then :func:`settle`."""
    return settle(algs, states, holes, now, tokens, plan(algs, states, holes, now, tokens), max_wait)


def _reserved_after(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, when: float) -> bool:
    # While a grant is still ahead, giving tokens back to now could put a new grant
    # beside it, so nothing is given back.
    latest = latest_all(algs, states)
    return latest > now and when < latest - EPSILON


def _tail(algs: Sequence[Algorithm[Any]], states: Sequence[Any], tokens: Sequence[float], at: float) -> bool:
    return all(alg.tail(state, n, at) for alg, state, n in zip(algs, states, tokens, strict=True))


def _cancel(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float], at: float
) -> list[Any]:
    return [alg.cancel(state, now, n, at) for alg, state, n in zip(algs, states, tokens, strict=True)]


def give_back(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    at: float | None,
) -> list[Any]:
    """Give back a grant: a plain refund once its time has come (``at`` past or
    ``None``), otherwise the withdrawal of a reservation (see the module docstring)."""
    if at is None or at <= now + EPSILON:
        when = now if at is None else at
        if now < holes.paused_until or (len(algs) > 1 and _reserved_after(algs, states, now, when)):
            return list(states)
        return [alg.refund(state, now, n, when) for alg, state, n in zip(algs, states, tokens, strict=True)]
    if at < holes.paused_until:
        return list(states)  # its place is inside a pause: lost
    items = holes.items
    if not _tail(algs, states, tokens, at):
        _add(items, at, tokens)
        return list(states)
    states = _cancel(algs, states, now, tokens, at)
    while items:
        hole_at, left = items[-1]
        if hole_at < now - EPSILON:
            items.clear()  # sorted: every hole is past
            break
        if not _tail(algs, states, left, hole_at):
            break
        items.pop()
        states = _cancel(algs, states, now, left, hole_at)
    if holes.paused_until > now:
        # The withdrawn grants may be what made the state stricter than the pause, and
        # it was left alone then: rolled back, it must hold the pause on its own.
        states = [alg.restrict(state, now, 0.0, holes.paused_until) for alg, state in zip(algs, states, strict=True)]
    return states
