"""Priorities on one budget: a high lane and a low lane, and which one a request takes.

A promised time cannot be moved, so a person's request planned behind a queue of
batch reservations would wait for all of them. A budget with priorities therefore
keeps two states of its algorithm (``Algorithm.split``): a *high lane* and a *low
lane* holding ``low_share`` of the limit. Every grant is recorded in exactly one lane,
and the lanes' limits add up to the configured one, so together they never grant more
than it allows.

A **high** request goes

1. in the high lane if it grants now;
2. else in the low lane if *that* grants now (low priority is idle: its share is
   free);
3. else it queues in whichever lane grants it earlier (the high lane on a tie).

The high lane holds only high requests and lows granted at once (5), so a high
request never waits behind queued low ones.

A **low** request goes

4. in the low lane if it grants now;
5. else, when lows may borrow, in the high lane if that would grant ``tokens +
   keep`` now: idle high capacity is used, but ``keep`` tokens of it stay ready for a
   person;
6. else it queues in the low lane only. Without borrowing the low share is a hard cap.

``docs/fleets.md`` draws a timeline of two lanes against one queue.

Holes are kept per lane, and a grant given back goes to the lane it was taken from
(:class:`LaneTime`). Twin of ``lua/_lanes.lua``.
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass
from typing import Any

from . import holes as _holes
from .algorithm import EPSILON, Algorithm, decide
from .algorithm import charge as _charge

__all__ = [
    "HIGH",
    "LANES",
    "LOW",
    "LaneState",
    "LaneTime",
    "Lanes",
    "LastLane",
    "charge",
    "charge_parts",
    "give_back",
    "peek",
    "reserve",
    "restrict",
    "shares",
]

#: The lanes' indices, and their names in keys and scripts.
HIGH = 0
LOW = 1
LANES = ("hi", "lo")


class LaneTime(float):
    """A reserved grant's time (a float to any reader) that also says which lane it was
    taken from, so that withdrawing it gives it back there."""

    __slots__ = ("lane",)

    lane: int

    def __new__(cls, at: float, lane: int) -> LaneTime:
        self = float.__new__(cls, at)
        self.lane = lane
        return self

    def __reduce__(self) -> tuple[type[LaneTime], tuple[float, int]]:
        return LaneTime, (float(self), self.lane)

    def __repr__(self) -> str:
        return f"LaneTime({float(self)!r}, {LANES[self.lane]!r})"


@dataclass(frozen=True, slots=True)
class Lanes:
    """A limit split in two lanes (``Algorithm.split``); ``low_share`` is what split it,
    kept to split a provider's ``remaining`` alike."""

    high: Algorithm[Any]
    low: Algorithm[Any]
    low_share: float

    @classmethod
    def of(cls, alg: Algorithm[Any], low_share: float) -> Lanes:
        high, low = alg.split(low_share)
        return cls(high, low, low_share)

    @property
    def kind(self) -> str:
        """Names the state in an in-process store: never the unsplit algorithm's."""
        return f"{self.high.kind}:lanes"

    def new_state(self) -> LaneState:
        return LaneState(self.high.new_state(), self.low.new_state())

    def idle_until(self, state: LaneState) -> float:
        high = self.high.idle_until(state.states[HIGH])
        low = self.low.idle_until(state.states[LOW])
        return high if high > low else low


class LaneState:
    """Both lanes' states and holes, indexed by lane."""

    __slots__ = ("holes", "states")

    def __init__(self, high: Any, low: Any) -> None:
        self.states: list[Any] = [high, low]
        self.holes = (_holes.Holes(), _holes.Holes())

    def __repr__(self) -> str:
        return f"LaneState(high={self.states[HIGH]!r}, low={self.states[LOW]!r}, holes={self.holes!r})"


def _now(planned: _holes.Planned, now: float) -> bool:
    """Whether a plan grants now."""
    return decide(planned[0], planned[1], now, 0.0) >= 0


def _when(planned: _holes.Planned) -> float:
    admit_at, at, _ = planned
    return admit_at if admit_at > at else at


def _plan(alg: Algorithm[Any], state: Any, holes: _holes.Holes, now: float, tokens: float) -> _holes.Planned:
    """``holes.plan`` in one lane; with no holes, pause or pace, the algorithm's own plan
    no earlier than now (the same numbers, without the lists)."""
    if not holes.items and holes.paused_until == -math.inf and holes.paced is None:
        admit_at, at = alg.plan(state, now, tokens)
        return (admit_at if admit_at > now else now), (at if at > now else now), None
    return _holes.plan((alg,), (state,), holes, now, (tokens,))


def _settle(
    lanes: Lanes, state: LaneState, lane: int, now: float, tokens: float, planned: _holes.Planned, max_wait: float
) -> tuple[float, int]:
    alg = lanes.high if lane == HIGH else lanes.low
    admit_at, at, found = planned
    if found is None and state.holes[lane].paced is None:
        # holes.settle without the grant's name: a lane's grant is named by its LaneTime.
        wait = decide(admit_at, at, now, max_wait)
        if wait >= 0:
            state.states[lane] = alg.commit(state.states[lane], now, tokens, at)
        return wait, lane
    states, wait, _ = _holes.settle((alg,), (state.states[lane],), state.holes[lane], now, (tokens,), planned, max_wait)
    state.states[lane] = states[0]
    return wait, lane


def reserve(
    lanes: Lanes, state: LaneState, now: float, tokens: float, max_wait: float, low: bool, keep: float | None
) -> tuple[float, int]:
    """Decide a request of high priority (or ``low``) and record it in the lane it
    takes. ``keep``: what a low request borrowing the high lane must leave of it
    (``None``: lows never borrow). Returns ``(signed wait, lane)``, a refusal's lane
    the one it would have queued in."""
    high, low_alg = lanes.high, lanes.low
    states, holes = state.states, state.holes
    # Shortcut for steps 1 and 4: the own lane has no holes, pause or pace and grants
    # now (the same numbers as _plan and _settle).
    lane = LOW if low else HIGH
    alg = low_alg if low else high
    own = holes[lane]
    if not own.items and own.paused_until == -math.inf and own.paced is None:
        admit_at, at = alg.plan(states[lane], now, tokens)
        if admit_at - now <= EPSILON and at - now <= EPSILON:
            states[lane] = alg.commit(states[lane], now, tokens, at if at > now else now)
            return 0.0, lane
    if low:
        planned = _plan(low_alg, states[LOW], holes[LOW], now, tokens)
        # No borrowing from a high lane a provider's pace holds: it would go ahead of it.
        paced = holes[HIGH].paced
        if (
            not _now(planned, now)
            and keep is not None
            and tokens + keep <= high.most + EPSILON
            and (paced is None or paced[2] <= now)
        ):
            admit_at, at = high.plan(states[HIGH], now, tokens + keep)
            if decide(admit_at, at, now, 0.0) >= 0:
                # Granted now, so nothing is reserved in the high lane ahead of it.
                states[HIGH] = high.commit(states[HIGH], now, tokens, at)
                return 0.0, HIGH
        return _settle(lanes, state, LOW, now, tokens, planned, max_wait)
    planned = _plan(high, states[HIGH], holes[HIGH], now, tokens)
    if not _now(planned, now) and tokens <= low_alg.most + EPSILON:
        other = _plan(low_alg, states[LOW], holes[LOW], now, tokens)
        if _now(other, now) or _when(other) < _when(planned):
            return _settle(lanes, state, LOW, now, tokens, other, max_wait)
    return _settle(lanes, state, HIGH, now, tokens, planned, max_wait)


def _bare(alg: Algorithm[Any], state: Any, now: float, tokens: float) -> _holes.Planned:
    """The lane's own plan, no earlier than now, its holes not offered."""
    admit_at, at = alg.plan(state, now, tokens)
    return (admit_at if admit_at > now else now), (at if at > now else now), None


def peek(lanes: Lanes, state: LaneState, now: float, tokens: float, low: bool, keep: float | None) -> float:
    """The wait :func:`reserve` would tell a request now, read only (``limiter.peek``):
    the lane chosen as ``reserve`` does, holes not offered (as ``algorithm.peek_all``)."""
    high, low_alg = lanes.high, lanes.low
    states = state.states
    if low:
        planned = _bare(low_alg, states[LOW], now, tokens)
        if (
            not _now(planned, now)
            and keep is not None
            and tokens + keep <= high.most + EPSILON
            and _now(_bare(high, states[HIGH], now, tokens + keep), now)
        ):
            return 0.0  # it borrows the high lane, at once
    else:
        planned = _bare(high, states[HIGH], now, tokens)
        if not _now(planned, now) and tokens <= low_alg.most + EPSILON:
            other = _bare(low_alg, states[LOW], now, tokens)
            if _now(other, now) or _when(other) < _when(planned):
                planned = other
    return abs(decide(planned[0], planned[1], now, math.inf))


def give_back(lanes: Lanes, state: LaneState, lane: int, now: float, tokens: float, at: float | None) -> None:
    """``holes.give_back`` in ``lane``: where the grant was taken (or, for a plain refund,
    the caller's own lane)."""
    alg = lanes.high if lane == HIGH else lanes.low
    back = _holes.give_back((alg,), (state.states[lane],), state.holes[lane], now, (tokens,), at)
    state.states[lane] = back[0]


def shares(lanes: Lanes, remaining: float) -> tuple[float, float]:
    """A provider's ``remaining`` split as the limit was: the low lane's part rounded
    down to whole tokens, the high lane the rest (people get the last token)."""
    low = float(math.floor(remaining * lanes.low_share + EPSILON))
    return remaining - low, low


class LastLane:
    """The lane of each caller's (thread's, task's) latest grant through one handle,
    where a plain refund or a settle sends its tokens back.

    A refund names no grant; sent to the wrong lane it would turn budget promised for
    later into budget available now. With no grant through the handle, the caller's
    priority's lane.
    """

    __slots__ = ("_default", "_var")

    def __init__(self, default: int) -> None:
        self._default = default
        self._var: contextvars.ContextVar[int] = contextvars.ContextVar("ratelimit_last_lane")

    def saw(self, lane: int) -> None:
        # Setting a context variable copies the context's mapping: only a change is set.
        var = self._var
        if var.get(self._default) != lane:
            var.set(lane)

    def lane(self) -> int:
        return self._var.get(self._default)


def charge_parts(lanes: Lanes, tokens: float) -> tuple[float, float]:
    """A charge's tokens per lane, ``(high, low)``: split as the lanes' rates are.

    A charge spends the one limit's budget whichever priority spent it. Charged to one
    lane alone, its debt would stop that lane while the other went on granting, and
    together they would exceed the limit; split, both wait the debt off together.
    """
    high, low = lanes.high.sustained_rate, lanes.low.sustained_rate
    low_part = tokens * low / (high + low)
    return tokens - low_part, low_part


def charge(lanes: Lanes, state: LaneState, now: float, tokens: float) -> None:
    """``algorithm.charge`` in both lanes, by :func:`charge_parts`; the holes of each
    lane charged are then void (``holes.void``)."""
    for lane, (alg, part) in enumerate(zip((lanes.high, lanes.low), charge_parts(lanes, tokens), strict=True)):
        if part > 0:
            state.states[lane] = _charge(alg, state.states[lane], now, part)
            _holes.void(state.holes[lane])
            _holes.pace_charge(state.holes[lane], now, part)


def restrict(lanes: Lanes, state: LaneState, now: float, remaining: float, until: float) -> None:
    """A provider's restriction (``holes.restrict``) in both lanes, ``remaining`` split
    by :func:`shares`."""
    parts = shares(lanes, remaining)
    for lane, alg in ((HIGH, lanes.high), (LOW, lanes.low)):
        part = parts[lane]
        state.states[lane] = _holes.restrict((alg,), (state.states[lane],), state.holes[lane], now, (part,), until)[0]
