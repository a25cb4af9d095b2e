"""Leaky bucket as a queue: grants leave one interval apart, never in a burst.

The state is the time the bucket will have drained (``drained_at``) and the start of
the latest grant. A request pours ``n`` tokens in, leaking at ``rate`` per second: it
is granted when everything before it has leaked (``max(drained_at, now)``). The
bucket holds at most ``capacity`` tokens: a request that would overflow it is refused
at once, whatever its timeout, and told when there will be room.

Timeline, ``capacity=3, rate=1/s``, four requests at t=0::

    t=0  granted, wait 0   (bucket: 1)
    t=0  granted, wait 1   (bucket: 2)
    t=0  granted, wait 2   (bucket: 3, full)
    t=0  refused, room at t=1

A charge (``algorithm.charge``) pours its tokens in behind everything queued, even
into a full bucket.

In a composite a grant may go later than this queue alone would let it: the bucket
lies idle between its drain and that grant. Such idle stretches still ahead are kept
after the two times (*gaps*), so that only what is queued counts against
``capacity``::

    TokenBucket(1, 0.1) and LeakyBucket(2, 1), requests at t=0, 0, 1:
    t=0  granted at 0          (bucket: 1, leaks 0-1)
    t=0  granted at 10         (bucket: 2; idle 1-10, leaks 10-11)
    t=1  granted at 20         (bucket: 2 at t=1, the one at 10 and this one)

A LeakyBucket on its own never has gaps. Twin of ``lua/leaky_bucket.lua``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .algorithm import EPSILON, exact_room, step

__all__ = ["LeakyQueue", "LeakyState"]

#: ``(drained_at, latest, *gaps)``: when everything poured in has leaked out, when
#: the latest grant started leaking (only that one may give its place back), and the
#: idle stretches still ahead as ``start, end`` pairs in time order, all before ``latest``.
LeakyState = tuple[float, ...]


def _idle(state: LeakyState, now: float) -> float:
    """Seconds of the gaps in ``state`` after ``now``: time the queue does not leak."""
    idle = 0.0
    for i in range(2, len(state), 2):
        end = state[i + 1]
        if end > now:
            start = state[i]
            idle += end - (start if start > now else now)
    return idle


def _ahead(state: LeakyState, now: float) -> LeakyState:
    """The gaps of ``state`` that end after ``now``."""
    for i in range(2, len(state), 2):
        if state[i + 1] > now:
            return state[i:]
    return ()


@dataclass(frozen=True, slots=True)
class LeakyQueue:
    """Leaky bucket holding up to ``capacity`` tokens, leaking ``rate`` per second."""

    capacity: float
    rate: float
    interval: float = field(init=False)
    #: Seconds of guard already added to each token's interval (``guarded``).
    slack: float = 0.0

    kind = "leaky_bucket"
    slotted = False
    #: One request goes at once at most: the next queues behind it (``level_all``).
    bursts = False
    most_name = "capacity"

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval", 1.0 / self.rate)

    @property
    def most(self) -> float:
        return self.capacity

    @property
    def sustained_rate(self) -> float:
        return self.rate

    def new_state(self) -> LeakyState:
        return (-math.inf, -math.inf)

    def plan(self, state: LeakyState, now: float, tokens: float) -> tuple[float, float]:
        if not tokens > 0:
            # A composite's member given 0: commit records nothing, so nothing to wait for.
            return now, now
        drained_at = state[0]
        start = drained_at if drained_at > now else now
        queued = start - now
        if len(state) > 2:
            queued -= _idle(state, now)  # the bucket is idle in its gaps: nothing queued there
        overflow = queued * self.rate + tokens - self.capacity
        if overflow > EPSILON:
            return now + overflow * self.interval, start
        return now, start

    def level(self, state: LeakyState, now: float) -> float:
        """The tokens a request could take at once now: the capacity once the queue
        has drained, none while it leaks (``bursts``: one request at most)."""
        return 0.0 if state[0] > now else self.capacity

    def commit(self, state: LeakyState, now: float, tokens: float, at: float) -> LeakyState:
        if not tokens > 0:
            return state  # nothing poured in (a composite's member)
        drained_at = state[0]
        start = drained_at if drained_at > at else at
        if len(state) == 2 and not at > drained_at:
            return (start + tokens * self.interval, start)
        # Granted later than the queue would have it: idle from the drain (or now)
        # until the grant; gaps already past go.
        gaps = _ahead(state, now)
        idle_from = drained_at if drained_at > now else now
        if at - idle_from > EPSILON:
            gaps = (*gaps, idle_from, at)
        return (start + tokens * self.interval, start, *gaps)

    def refund(self, state: LeakyState, now: float, tokens: float, at: float) -> LeakyState:
        # Only the grant at the end of the queue gives its slot back: those behind any
        # other are told when to go, and would end up side by side.
        drained_at, latest = state[0], state[1]
        if at < latest - EPSILON or not tokens > 0:
            return state
        drained_at -= tokens * self.interval
        floor = latest if latest > now else now
        # The gaps all lie before `latest`, so they stay.
        return (drained_at if drained_at > floor else floor, latest, *state[2:])

    def tail(self, state: LeakyState, tokens: float, at: float) -> bool:
        # The last grant in the queue is the one whose tokens drain last.
        return at + tokens * self.interval >= state[0] - EPSILON

    def cancel(self, state: LeakyState, now: float, tokens: float, at: float) -> LeakyState:
        # Its start is where the queue now ends. Who started before it is not known,
        # so `latest` stays no earlier: a plain refund never reaches back past a grant
        # still queued. The gaps before it stay.
        if not tokens > 0:
            return state
        latest = state[1]
        return (at, latest if latest < at else at, *state[2:])

    def latest(self, state: LeakyState) -> float:
        return state[1]

    def next_free(self, at: float, tokens: float) -> float:
        # A grant leaks for tokens / rate: the rest of the hole starts when it is out.
        return at + tokens * self.interval

    def room(self, at: float, tokens: float, t: float) -> float:
        return exact_room(at, tokens, t)

    def idle_until(self, state: LeakyState) -> float:
        return state[0]

    def restrict(self, state: LeakyState, now: float, remaining: float, until: float) -> LeakyState:
        # Drained so that the (remaining + 1)-th grant leaves at `until`; `latest` moves
        # too, so no earlier grant gives back a place that would cut it short.
        drained_at, latest = state[0], state[1]
        target = until - remaining * self.interval
        if drained_at >= target:
            return state
        return (target, target if target > latest else latest, *state[2:])

    def params(self) -> tuple[float, ...]:
        return (self.capacity, self.rate)

    def slowed(self, share: float) -> LeakyQueue:
        # No burst to share out: the capacity is a queue's length, not a burst.
        return LeakyQueue(self.capacity, self.rate * share)

    def split(self, low_share: float) -> tuple[LeakyQueue, LeakyQueue]:
        raise ValueError(
            f"low_share={low_share!r}: a leaky bucket spaces every grant 1/leak_per_sec apart, and two lanes "
            f"deciding apart cannot keep that spacing; use a TokenBucket for priorities"
        )

    def guarded(self, seconds: float) -> LeakyQueue:
        # No burst to keep back: a grant's interval is all it occupies.
        return LeakyQueue(self.capacity, 1.0 / (1.0 / self.rate + seconds), self.slack + seconds)

    def configured(self, rate: float | None, burst: float | None) -> LeakyQueue:
        # A new rate is guarded again; the queue's capacity is what the burst sets.
        leak = self.rate if rate is None else (1.0 / (1.0 / rate + self.slack) if self.slack > 0 else rate)
        return LeakyQueue(self.capacity if burst is None else burst, leak, self.slack)

    def rescale(self, new: LeakyQueue, state: LeakyState, now: float) -> LeakyState:
        # As Gcra.rescale: the queue keeps its tokens and leaks at the new rate. Its
        # gaps are dropped: their time counts as queued, never less than is.
        if not state[0] > now:
            return state
        return (now + (state[0] - now) * self.rate * new.interval, state[1])

    def step(self, state: LeakyState, now: float, tokens: float, max_wait: float) -> tuple[LeakyState, float]:
        # plan() and commit() inlined, operation for operation (see Gcra.step).
        drained_at = state[0]
        if drained_at <= now:
            # Drained already, the usual case: start is now, so the overflow is exactly
            # tokens - capacity and the grant waits nothing.
            overflow = tokens - self.capacity
            if overflow > EPSILON:
                admit_at = now + overflow * self.interval
                if admit_at - now > EPSILON:
                    return state, now - admit_at
            return (now + tokens * self.interval, now), 0.0
        try:
            start, _ = state  # two times alone: the grant starts where the queue drains
        except ValueError:  # gaps ahead (a composite's member): plan and commit
            return step(self, state, now, tokens, max_wait)
        overflow = (start - now) * self.rate + tokens - self.capacity
        if overflow > EPSILON:
            admit_at = now + overflow * self.interval
            if admit_at - now > EPSILON:
                return state, now - admit_at
        wait = start - now
        if wait <= EPSILON:
            begin = drained_at if drained_at > start else start
            return (begin + tokens * self.interval, begin), 0.0
        if wait > max_wait + EPSILON or wait == math.inf:
            return state, -wait
        begin = drained_at if drained_at > start else start
        return (begin + tokens * self.interval, begin), wait
