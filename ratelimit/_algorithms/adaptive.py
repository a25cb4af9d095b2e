"""A rate learned from the provider's refusals: CUBIC, as one more limit of a group.

For a provider that publishes no limit, the limiter keeps a second limit beside its
own: a pace whose rate is learned. It is a member of the group the limiter decides
(``algorithm.step_all``), so a grant goes at the later of the two limits' times and
everything a group does (holes, charges, refunds) works unchanged. The rate lives in
the pace's state, and that state lives with the limiter's in the store, so every
worker sharing the budget learns one rate in the same atomic step that grants.

The rate at time ``now`` is a function of the state, evaluated when needed:

- **Growth: CUBIC** (RFC 9438, scaled to rates). After a cut at ``cut_at`` from a
  rate ``peak``, the rate is ``peak * (1 + (1 - decrease) * x**3)`` with
  ``x = (now - cut_at) / recover - 1``: it starts at ``decrease * peak``, climbs fast
  and flattens as it nears ``peak`` (reached after ``recover`` seconds), stays near it
  a while, then probes beyond, faster and faster. Growth is a function of time, not
  of how many responses came back, so a fleet grows as one client whatever its size,
  and no success needs a write: successes show only as the absence of a cut.
- **Only time in use counts.** The curve's clock stops while the budget is idle
  (no decision and no grant for ``idle`` seconds: :data:`IDLE`, or two intervals at
  the floor if longer), so an unused budget does not drift up to where nobody has
  tried it. A new pace starts at the ceiling: until the first refusal nothing says
  the limit is lower.
- **Decrease: multiplicative.** A throttle sets ``peak`` to the rate the refused
  request was decided at and ``cut_at`` to now. Throttles for requests that went
  before the pace was free of the reservations made before the last cut are the same
  congestion event and change nothing, so N workers that all see a 429 for one
  overshoot cut once.
- Always within ``[floor, ceiling]``.

The pace itself is GCRA whose interval is ``1 / rate``, with a burst of the
limiter's largest request (its own burst limit still applies). Reservations already
promised keep their times when the rate changes. Mirrored by ``lua/adaptive.lua``.
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
#: Seconds a throttle whose request's grant time is unknown is taken for the same
#: congestion event as the last cut, once the reservations made before it have gone.
QUIET = 1.0
#: Seconds after the reservations made before a cut have gone during which refusals
#: still count as that cut's: a provider whose budget they emptied refuses a request
#: that arrives a little early (send jitter) even at a rate now under its limit.
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
    #: Where the growth curve starts: the last cut, moved on by the time since spent
    #: idle (``-inf``: never cut).
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
    #: Seconds without use after which the curve's clock stops: below a rate of a
    #: grant a second, the gaps of steady use are longer than IDLE and must not.
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
        """Where the growth curve starts at ``now``: the last cut, moved on by the time
        since spent idle (no decision and no grant)."""
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
        # Clocks of several clients may disagree by a little: a time before the
        # cut counts as the cut's own.
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

        Cuts the rate to ``decrease`` times the rate the request was decided at. A
        request that went before the pace was free of the reservations made before the
        last cut (or within :data:`GRACE` of it) was sent at the old rate or into the
        provider's state the old rate left: its refusal is that cut's congestion event
        and changes nothing.
        (With its time unknown, the refusal is taken for the old one's until
        :data:`QUIET` seconds after they have all gone.)
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
        # As Gcra.refund: only the latest reservation, or a grant with none pending,
        # gives its time back; at the ceiling's interval, the least it can have taken.
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
        # The limiter's own limit keeps what the provider's headers say; the learned
        # pace is only ever another limit beside it.
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
