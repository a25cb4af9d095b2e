"""Leaky bucket as a queue: grants leave one interval apart, never in a burst.

The state is the time the bucket will have drained (``drained_at``). A request for
``n`` tokens pours ``n`` tokens in; they leak out at ``rate`` per second, so the
request is granted when everything poured before it has leaked (``max(drained_at,
now)``) and the bucket then drains ``n / rate`` seconds later. The bucket holds at most
``capacity`` tokens: a request that would overflow it is refused at once, whatever
its timeout, and told when there will be room.

Timeline, ``capacity=3, rate=1/s``, four requests at t=0::

    t=0  granted, wait 0   (bucket: 1)
    t=0  granted, wait 1   (bucket: 2)
    t=0  granted, wait 2   (bucket: 3, full)
    t=0  refused, room at t=1

Mirrored by ``lua/leaky_bucket.lua``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._algorithm import EPSILON

__all__ = ["LeakyQueue"]


@dataclass(frozen=True, slots=True)
class LeakyQueue:
    """Leaky bucket holding up to ``capacity`` tokens, leaking ``rate`` per second."""

    capacity: float
    rate: float
    interval: float = field(init=False)

    kind = "leaky_bucket"
    most_name = "capacity"

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval", 1.0 / self.rate)

    @property
    def most(self) -> float:
        return self.capacity

    def new_state(self) -> float:
        return -math.inf

    def plan(self, state: float, now: float, tokens: float) -> tuple[float, float]:
        start = state if state > now else now
        overflow = (start - now) * self.rate + tokens - self.capacity
        if overflow > EPSILON:
            return now + overflow * self.interval, start
        return now, start

    def commit(self, state: float, now: float, tokens: float, at: float) -> float:
        return (state if state > at else at) + tokens * self.interval

    def refund(self, state: float, now: float, tokens: float, at: float) -> float:
        return max(state - tokens * self.interval, now)

    def restrict(self, state: float, now: float, remaining: float, until: float) -> float:
        # Drained so that the (remaining + 1)-th grant leaves at `until`.
        drained_at = until - remaining * self.interval
        return state if state > drained_at else drained_at

    def peek(self, state: float, now: float) -> tuple[float, float]:
        drained_at = max(state, now)
        return self.capacity - (drained_at - now) * self.rate, drained_at - now

    def params(self) -> tuple[float, ...]:
        return (self.capacity, self.rate)

    def slowed(self, share: float) -> LeakyQueue:
        return LeakyQueue(self.capacity, self.rate * share)

    def step(self, state: float, now: float, tokens: float, max_wait: float) -> tuple[float, float]:
        # plan() and commit() inlined, operation for operation (see Gcra.step).
        start = state if state > now else now
        overflow = (start - now) * self.rate + tokens - self.capacity
        if overflow > EPSILON:
            admit_at = now + overflow * self.interval
            if admit_at - now > EPSILON:
                return state, now - admit_at
        wait = start - now
        if wait <= EPSILON:
            return (state if state > start else start) + tokens * self.interval, 0.0
        if wait > max_wait + EPSILON:
            return state, -wait
        return (state if state > start else start) + tokens * self.interval, wait
