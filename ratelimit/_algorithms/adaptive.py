"""A rate learned from the provider's refusals: CUBIC, as one more limit of a group.

For a provider that publishes no limit, the limiter decides a second limit in its
group (``algorithm.step_all``): a pace whose rate is learned. Its state lives with
the limiter's in the store, so every worker sharing the budget learns one rate in
the same atomic step that grants. The rate is a function of the state:

- **Growth: CUBIC** (RFC 9438, scaled to rates). After a cut at ``cut_at`` from
  ``peak``, the rate is ``peak * (1 + (1 - decrease) * x**3)`` with
  ``x = (now - cut_at) / recover - 1``: from ``decrease * peak`` it climbs, flattens
  near ``peak`` (reached after ``recover`` seconds), then probes beyond. Growth
  depends on time, not on responses, so a fleet grows as one client and no success
  needs a write.
- **Only time in use counts.** The curve's clock stops while the budget is idle
  (``idle`` seconds without a decision or a grant), so an unused budget does not drift
  up untried. A new pace starts at the ceiling.
- **Decrease: multiplicative.** A throttle sets ``peak`` to the rate the refused
  request was decided at and ``cut_at`` to now. Refusals of requests sent before the
  reservations made before the last cut had gone are the same congestion event, so N
  workers that all see a 429 for one overshoot cut once.
- Always within ``[floor, ceiling]``.

The pace is GCRA at interval ``1 / rate`` with a burst of the limiter's largest
request; promised reservations keep their times when the rate changes. Twin of
``lua/adaptive.lua``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from .algorithm import EPSILON, exact_room, step

__all__ = ["GRACE", "IDLE", "MEMORY", "QUIET", "Cubic", "Pace"]

#: Seconds without a decision or a grant after which the growth curve's clock stops
#: (or two intervals at the floor, if longer).
IDLE = 1.0
#: Seconds after the last cut's reservations have gone during which a refusal whose
#: request's grant time is unknown still counts as that cut's.
QUIET = 1.0
#: Seconds after the last cut's reservations have gone during which refusals still
#: count as that cut's: send jitter makes a request arrive a little early.
GRACE = 0.25
#: Seconds the learned rate is remembered once nobody uses the budget.
MEMORY = 600.0


class Pace(NamedTuple):
    """The learned pace's state."""

    #: GCRA's theoretical arrival time at the learned rate.
    tat: float
    #: The latest grant recorded.
    last: float
    #: The rate at the last cut (0: never cut).
    peak: float
    #: Where the growth curve starts: the last cut plus idle time (``-inf``: never cut).
    cut_at: float
    #: When the reservations made before the last cut have all gone (``-inf``: never cut).
    fresh: float
    #: When the budget was last used (a grant recorded).
    seen: float


_NEW = Pace(-math.inf, -math.inf, 0.0, -math.inf, -math.inf, -math.inf)


@dataclass(frozen=True, slots=True)
class Cubic:
    """A pace between ``floor`` and ``ceiling`` tokens per second, learned by CUBIC."""

    most: float
    floor: float
    ceiling: float
    decrease: float
    recover: float
    #: Seconds without use after which the curve's clock stops: at least two
    #: intervals at the floor, so the gaps of steady slow use do not stop it.
    idle: float = field(init=False, repr=False, compare=False)

    kind = "adaptive"
    slotted = False
    most_name = "capacity"

    def __post_init__(self) -> None:
        object.__setattr__(self, "idle", max(IDLE, 2.0 / self.floor))

    @property
    def sustained_rate(self) -> float:
        return self.ceiling

    def new_state(self) -> Pace:
        return _NEW

    # -- the learned rate ------------------------------------------------------------

    def start(self, state: Pace, now: float) -> float:
        """Where the growth curve starts at ``now``: the last cut plus the time since
        spent idle."""
        cut_at = state.cut_at
        used = state.seen if state.seen > state.last else state.last
        idle = now - used - self.idle
        if idle > 0 and cut_at != -math.inf:
            return cut_at + idle
        return cut_at

    def rate(self, state: Pace, now: float) -> float:
        """The learned rate at ``now``: the ceiling until the first cut, then CUBIC's curve."""
        cut_at = self.start(state, now)
        if cut_at == -math.inf:
            return self.ceiling
        # Clients' clocks disagree a little: a time before the cut counts as the cut's.
        x = (now - cut_at) / self.recover - 1.0 if now > cut_at else -1.0
        rate = state.peak * (1.0 + (1.0 - self.decrease) * x * x * x)
        if rate < self.floor:
            return self.floor
        if rate > self.ceiling:
            return self.ceiling
        return rate

    def throttle(self, state: Pace, now: float, decided: float | None, at: float | None) -> Pace:
        """A refusal, seen at ``now``, of a request decided at ``decided`` to go at ``at``
        (both ``None``: unknown).

        Cuts the rate to ``decrease`` times the rate the request was decided at, unless
        it went before the last cut's reservations had gone (plus :data:`GRACE`, or
        :data:`QUIET` when unknown): then it is that cut's congestion event.
        """
        if decided is None or at is None:
            if now < state.fresh + QUIET:
                return state
            decided = now
        elif at < state.fresh + GRACE:
            return state
        peak = self.rate(state, decided if decided < now else now)
        fresh = state.tat if state.tat > now else now
        return Pace(state.tat, state.last, peak, now, fresh, now)

    # -- the pace: GCRA at the learned rate (see token_bucket.py) ----------------------

    def plan(self, state: Pace, now: float, tokens: float) -> tuple[float, float]:
        rate = self.rate(state, now)
        at = (state.tat if state.tat > now else now) + (tokens - self.most) / rate
        return now, at if at > now else now

    def commit(self, state: Pace, now: float, tokens: float, at: float) -> Pace:
        if not tokens > 0:
            return state
        tat, last, peak, _, fresh, _ = state
        cut_at = self.start(state, now)
        tat = (tat if tat > at else at) + tokens / self.rate(state, now)
        return Pace(tat, last if last > at else at, peak, cut_at, fresh, now)

    def refund(self, state: Pace, now: float, tokens: float, at: float) -> Pace:
        # As Gcra.refund, at the ceiling's interval: the least the grant can have taken.
        if not tokens > 0:
            return state
        if state.last > now and at < state.last - EPSILON:
            return state
        return self.cancel(state, now, tokens, at)

    def tail(self, state: Pace, tokens: float, at: float) -> bool:
        return at >= state.last - EPSILON

    def cancel(self, state: Pace, now: float, tokens: float, at: float) -> Pace:
        if not tokens > 0 or state.seen == -math.inf:
            return state  # a pace never used has nothing to give back
        tat = state.tat - tokens / self.ceiling
        return state._replace(tat=tat if tat > now else now)

    def latest(self, state: Pace) -> float:
        return state.last

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        return exact_room(at, tokens, t)

    def idle_until(self, state: Pace) -> float:
        remembered = state.seen + MEMORY
        return state.tat if state.tat > remembered else remembered

    def restrict(self, state: Pace, now: float, remaining: float, until: float) -> Pace:
        # The limiter's own limit keeps what the provider's headers say.
        return state

    def params(self) -> tuple[float, ...]:
        return (self.most, self.floor, self.ceiling, self.decrease, self.recover)

    def slowed(self, share: float) -> Cubic:
        return Cubic(self.most * share, self.floor * share, self.ceiling * share, self.decrease, self.recover)

    def split(self, low_share: float) -> tuple[Cubic, Cubic]:
        raise ValueError(f"low_share={low_share!r}: a limiter with adaptive= has one priority")

    def guarded(self, seconds: float) -> Cubic:
        return self

    def configured(self, rate: float | None, burst: float | None) -> Cubic:
        return self  # a learned pace is learned, not set

    def step(self, state: Pace, now: float, tokens: float, max_wait: float) -> tuple[Pace, float]:
        return step(self, state, now, tokens, max_wait)
