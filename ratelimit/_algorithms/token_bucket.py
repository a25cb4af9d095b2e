"""Token bucket as GCRA: the whole state is one number.

The generic cell rate algorithm keeps only the *theoretical arrival time* (TAT): the
moment the bucket would be full again if nothing more were taken. With an emission
interval ``T = 1 / refill_per_sec`` and a burst tolerance ``tau = capacity * T``:

- a request for ``n`` tokens may go at ``max(TAT, now) + n*T - tau``, or now if past;
- granting it moves the TAT to ``max(TAT, at) + n*T``.

A waiting request *reserves* its place by pushing the TAT forward: grants come out in
arrival order, ``T`` apart once the burst is spent. A charge of ``n`` moves the TAT to
``max(TAT, now) + n*T`` whatever it was; past ``now + tau`` the bucket is in debt.

Each grant fills a *slot* of the TAT's line (as long as its tokens take) from no
earlier than the grant to no later than its time + ``tau``; slots never overlap, which
keeps any interval within ``capacity + rate·t``. A grant ends its slot at the TAT its
commit leaves (its time + ``tau`` if it waited its turn), so a refund that names it
knows where its unused tokens sit (``room``, ``holes.py``). Twin of
``lua/token_bucket.lua``.

A bucket refilled at no rate is an :class:`Allowance` (a TAT would move by ``n / 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .algorithm import EPSILON, low_part

__all__ = ["Allowance", "Gcra", "advanced"]


def advanced(base: float, step: float) -> float:
    """``base + step`` rounded up, never down: the TAT a grant moves forward.

    Near 1.7e9 s a sum rounded to nearest falls short of the grant's tokens about half
    the time, granting more than the rate at millions of tokens a second; one unit in
    the last place more keeps every slot as long as its tokens take. Twin of
    ``advanced`` in ``lua/token_bucket.lua``.
    """
    moved = base + step
    if moved - base < step:
        moved = _nextafter(moved, _UP)
    return moved


_nextafter = math.nextafter
_UP = math.inf


@dataclass(frozen=True, slots=True)
class Gcra:
    """Token bucket of ``capacity`` tokens refilled at ``rate`` tokens per second."""

    capacity: float
    rate: float
    interval: float = field(init=False)
    tolerance: float = field(init=False)
    #: Seconds of guard (and lease) already kept back: ``guarded`` adds to it.
    slack: float = 0.0

    kind = "token_bucket"
    slotted = True
    most_name = "capacity"

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval", 1.0 / self.rate)
        object.__setattr__(self, "tolerance", self.capacity / self.rate)

    @property
    def most(self) -> float:
        # At an infinite rate the bucket refills at once: any weight goes.
        return self.capacity if self.rate < math.inf else math.inf

    @property
    def sustained_rate(self) -> float:
        return self.rate

    def new_state(self) -> float:
        return -math.inf

    def plan(self, state: float, now: float, tokens: float) -> tuple[float, float]:
        # Conditional expressions, not max(): on every acquire the call costs more.
        base = state if state > now else now
        step = tokens * self.interval
        moved = base + step
        # Going at once is decided on the sum to nearest (one unit off, never added
        # up); a grant that waits goes at the TAT commit will leave, less the tolerance.
        if moved - self.tolerance <= now:
            return now, now
        return now, advanced(base, step) - self.tolerance

    def level(self, state: float, now: float) -> float:
        """The tokens a request could take at once now (``algorithm.level_all``): what
        the bucket holds, ``tolerance`` less the TAT's lead over now, in tokens."""
        if self.rate == math.inf:
            return math.inf
        base = state if state > now else now
        return (now + self.tolerance - base) * self.rate

    def commit(self, state: float, now: float, tokens: float, at: float) -> float:
        if not tokens > 0:
            return state  # nothing taken from this limit (a composite's member)
        return advanced(state if state > at else at, tokens * self.interval)

    def refund(self, state: float, now: float, tokens: float, at: float) -> float:
        # Tokens given back while grants are reserved could put a new grant beside one:
        # only the latest reservation rolls back; with none pending, back to now.
        if not tokens > 0:
            return state
        latest = state - self.tolerance
        if latest > now and at < latest - EPSILON:
            return state
        tat = state - tokens * self.interval
        return tat if tat > now else now

    def tail(self, state: float, tokens: float, at: float) -> bool:
        # The last grant left the TAT at its time + tolerance (it waited its turn) or
        # at its time + its tokens (another limit delayed it). Any other grant's slot
        # is not at the line's end (one from a hole sits where the hole was), and
        # rolling the end back would free another grant's slot.
        latest = state - self.tolerance
        if at <= latest + EPSILON:
            return at >= latest - EPSILON
        # A composite's request that gave this limit nothing holds no slot in it.
        return not tokens > 0 or abs(at + tokens * self.interval - state) <= EPSILON

    def cancel(self, state: float, now: float, tokens: float, at: float) -> float:
        if not tokens > 0:
            return state
        tat = state - tokens * self.interval
        return tat if tat > now else now

    def latest(self, state: float) -> float:
        return state - self.tolerance

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        # A hole's tokens end a slot at at + tolerance (module docstring): a grant at t
        # may use the part of it ahead of t.
        ahead = (at + self.tolerance - t) * self.rate
        if ahead >= tokens:
            return tokens
        return ahead if ahead > EPSILON else 0.0

    def idle_until(self, state: float) -> float:
        return state

    def restrict(self, state: float, now: float, remaining: float, until: float) -> float:
        # The TAT at which the (remaining + 1)-th grant lands on `until`: no burst when
        # the restriction ends.
        tat = until + self.tolerance - (remaining + 1.0) * self.interval
        return state if state > tat else tat

    def params(self) -> tuple[float, ...]:
        return (self.capacity, self.rate)

    def slowed(self, share: float) -> Gcra:
        # The burst too: N processes that each kept the whole capacity would burst N
        # times over when they all fell back.
        return Gcra(self.capacity * share, self.rate * share)

    def split(self, low_share: float) -> tuple[Gcra, Gcra]:
        # The arrival curves add up: (C - c) + (R - r)t + c + rt = C + Rt, so the two
        # lanes together never grant more than the bucket would.
        low = low_part(self.capacity, low_share, "capacity")
        rate = self.rate * low_share
        return Gcra(self.capacity - low, self.rate - rate), Gcra(low, rate)

    def guarded(self, seconds: float) -> Gcra:
        # A request may leave `seconds` late only if the bucket keeps that much of its
        # tolerance back; a bucket of one token or more must still hold a whole one.
        kept = self.capacity - seconds * self.rate
        if kept < min(1.0, self.capacity) - EPSILON or not kept > EPSILON:
            raise ValueError(
                f"guard={seconds!r} keeps back {seconds * self.rate:g} tokens at {self.rate:g}/s, leaving "
                f"{max(kept, 0.0):g} of capacity={self.capacity:g}: less than one request; lower the guard or "
                f"raise the capacity"
            )
        return Gcra(kept, self.rate, self.slack + seconds)

    def configured(self, rate: float | None, burst: float | None) -> Gcra:
        # The slack stays kept back, at the new rate; a burst too small for it keeps one
        # whole token (late jitter, never a dead bucket). Twin of token_bucket.configured.
        refill = self.rate if rate is None else rate
        capacity = self.capacity if burst is None else burst
        if burst is None and self.slack > 0:
            capacity += self.slack * self.rate
        kept = capacity - self.slack * refill
        least = capacity if capacity < 1.0 else 1.0
        return Gcra(kept if kept > least else least, refill, self.slack)

    def rescale(self, new: Gcra | Allowance, state: float, now: float) -> float:
        # A run-time change: tokens owed keep their count and refill at the new rate;
        # a full bucket stays full. Twin of token_bucket.rescale.
        if isinstance(new, Allowance):
            # To an allowance: the tokens owed are its tokens spent.
            return (state - now) * self.rate if state > now and self.rate < math.inf else 0.0
        if not state > now or self.rate == math.inf:
            # Nothing owed: full, or (at an infinite rate) a pause, which stays.
            return state
        return now + (state - now) * self.rate * new.interval

    def step(self, state: float, now: float, tokens: float, max_wait: float) -> tuple[float, float]:
        # plan(), commit() and advanced() inlined, operation for operation: this is
        # every in-process acquire, where calls cost more than the arithmetic.
        base = state if state > now else now
        step = tokens * self.interval
        tat = base + step
        at = tat - self.tolerance
        if tat - base < step:
            tat = _nextafter(tat, _UP)
        if at <= now:
            return tat, 0.0
        at = tat - self.tolerance
        wait = at - now
        if wait <= EPSILON:
            return advanced(state if state > at else at, tokens * self.interval), 0.0
        if wait > max_wait + EPSILON or wait == math.inf:
            return state, -wait
        return advanced(state if state > at else at, tokens * self.interval), wait


#: An :class:`Allowance`'s latest grant: before any time (none is ever ahead), finite
#: so that a grant's name and its text in Redis stay numbers.
LONG_AGO = -1.7976931348623157e308


@dataclass(frozen=True, slots=True)
class Allowance:
    """A token bucket refilled at no rate: ``capacity`` tokens in all, never more.

    The state is the tokens spent (``-inf`` or ``0``: none). A request that fits goes
    at once, any other is refused for ever; every give-back returns to the count. A
    provider's pause is kept beside the state (``holes.gate``). Twin of the
    ``allowance`` branches of ``lua/token_bucket.lua``.
    """

    capacity: float
    #: Seconds of guard (and lease) kept back: none at no refill (see ``guarded``).
    slack: float = 0.0
    #: The most spent a grant may leave: the capacity and a rounding's worth, relative
    #: below one token so a tiny allowance is not granted many times over.
    bound: float = field(init=False, compare=False, repr=False)

    kind = "token_bucket"
    slotted = True
    most_name = "capacity"
    rate = 0.0

    def __post_init__(self) -> None:
        least = self.capacity if self.capacity < 1.0 else 1.0
        object.__setattr__(self, "bound", self.capacity + EPSILON * least)

    @property
    def most(self) -> float:
        return self.capacity

    @property
    def sustained_rate(self) -> float:
        return 0.0

    def new_state(self) -> float:
        return -math.inf

    def plan(self, state: float, now: float, tokens: float) -> tuple[float, float]:
        spent = state if state > 0.0 else 0.0
        # A composite's request that gives it nothing goes by it, even in debt.
        if spent + tokens <= self.bound or not tokens > 0:
            return now, now
        return math.inf, math.inf

    def level(self, state: float, now: float) -> float:
        """The tokens a request could take at once now: those not spent."""
        return self.capacity - (state if state > 0.0 else 0.0)

    def commit(self, state: float, now: float, tokens: float, at: float) -> float:
        if not tokens > 0:
            return state
        return (state if state > 0.0 else 0.0) + tokens

    def refund(self, state: float, now: float, tokens: float, at: float) -> float:
        if not tokens > 0:
            return state
        left = state - tokens
        return left if left > 0.0 else 0.0

    def tail(self, state: float, tokens: float, at: float) -> bool:
        return True

    def cancel(self, state: float, now: float, tokens: float, at: float) -> float:
        return self.refund(state, now, tokens, at)

    def latest(self, state: float) -> float:
        return LONG_AGO

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        return tokens

    def idle_until(self, state: float) -> float:
        # Spent tokens never come back by themselves: the state matters for ever.
        return math.inf if state > 0.0 else -math.inf

    def restrict(self, state: float, now: float, remaining: float, until: float) -> float:
        # No time to move: a pause is kept beside the state (holes.gate).
        return state

    def params(self) -> tuple[float, ...]:
        return (self.capacity, 0.0)

    def slowed(self, share: float) -> Allowance:
        return Allowance(self.capacity * share)

    def split(self, low_share: float) -> tuple[Allowance, Allowance]:
        low = low_part(self.capacity, low_share, "capacity")
        return Allowance(self.capacity - low), Allowance(low)

    def guarded(self, seconds: float) -> Allowance:
        # Nothing refills, so a late grant takes nothing more: nothing to keep back.
        return self

    def configured(self, rate: float | None, burst: float | None) -> Gcra | Allowance:
        # As Gcra.configured, where the slack keeps nothing back at no rate.
        capacity = self.capacity if burst is None else burst
        if rate is None or rate == 0.0:
            return Allowance(capacity, self.slack)
        kept = capacity - self.slack * rate
        least = capacity if capacity < 1.0 else 1.0
        return Gcra(kept if kept > least else least, rate, self.slack)

    def rescale(self, new: Gcra | Allowance, state: float, now: float) -> float:
        # The tokens spent keep their count: owed, to a bucket that refills.
        if isinstance(new, Allowance) or not state > 0.0:
            return state
        return now + state * new.interval

    def step(self, state: float, now: float, tokens: float, max_wait: float) -> tuple[float, float]:
        spent = state if state > 0.0 else 0.0
        if spent + tokens <= self.bound:
            return spent + tokens, 0.0
        return state, -math.inf
