"""Token bucket as GCRA: the whole state is one number.

The generic cell rate algorithm keeps only the *theoretical arrival time* (TAT): the
moment the bucket would be full again if nothing more were taken. With an emission
interval ``T = 1 / refill_per_sec`` and a burst tolerance ``tau = capacity * T``:

- a request for ``n`` tokens may go at ``max(TAT, now) + n*T - tau`` (or now, if that
  is already past), and
- granting it moves the TAT to ``max(TAT, at) + n*T``.

A waiting request therefore *reserves* its place by pushing the TAT forward, and the
next one is planned behind it: grants come out in arrival order, ``T`` apart once the
burst is spent. A charge of ``n`` (``algorithm.charge``) moves the TAT to
``max(TAT, now) + n*T`` whatever it was: past ``now + tau`` the bucket is in debt, and
the next request waits it off.

Each grant fills a *slot* of the TAT's line (as long as its tokens take) that begins no
earlier than the grant and ends no later than the grant's time + ``tau``; slots never
overlap, which is what keeps any interval within ``capacity + rate·t``. A grant that
waited its turn ends its slot exactly at its time + ``tau``, and any grant ends it at the
TAT its commit leaves (``latest`` + ``tau``), so a refund that names it knows where its
unused tokens sit, and the part of them still ahead can be handed out
again (``room``, and ``holes.py``) whatever was queued behind it. Mirrored by
``lua/token_bucket.lua``.

A bucket refilled at no rate is an :class:`Allowance`: ``capacity`` tokens in all, the
state the tokens spent, since a TAT would have to move by ``n / 0`` seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .algorithm import EPSILON, low_part

__all__ = ["Allowance", "Gcra", "advanced"]


def advanced(base: float, step: float) -> float:
    """``base + step`` rounded up, never down: the TAT a grant moves forward.

    Near the server's clock (about 1.7e9 s) a double holds time to 2.4e-7 s, and a
    sum rounded to nearest moves the TAT by less than the grant's tokens take about
    half the time: at a million tokens a second that is 5 % more than the rate (40 %
    at three million). One unit in the last place more whenever the sum fell short
    keeps every grant's slot at least as long as its tokens take (``advanced`` in
    ``lua/token_bucket.lua``, which finds the next double up with ``math.frexp``).
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
        # Conditional expressions, not max(): this runs on every acquire, and the
        # builtin call costs more than the arithmetic.
        base = state if state > now else now
        step = tokens * self.interval
        moved = base + step
        # Whether it goes at once is decided on the sum to nearest (an error of one
        # unit, never added up); a grant that waits goes at the TAT as it moves it,
        # less the tolerance: the latest grant's time once committed, to the bit.
        if moved - self.tolerance <= now:
            return now, now
        return now, advanced(base, step) - self.tolerance

    def commit(self, state: float, now: float, tokens: float, at: float) -> float:
        if not tokens > 0:
            return state  # nothing taken from this limit (a composite's member)
        return advanced(state if state > at else at, tokens * self.interval)

    def refund(self, state: float, now: float, tokens: float, at: float) -> float:
        # With grants reserved beyond now, the bucket's tokens are already promised to
        # them at fixed times: giving some back could only put a new grant beside one
        # of them. Only the latest reservation can be rolled back (a cancelled waiter
        # at the end of the line), and with none pending the tokens return to now.
        if not tokens > 0:
            return state
        latest = state - self.tolerance
        if latest > now and at < latest - EPSILON:
            return state
        tat = state - tokens * self.interval
        return tat if tat > now else now

    def tail(self, state: float, tokens: float, at: float) -> bool:
        # A reservation that waited leaves the TAT at exactly its time + tolerance; one
        # a composite's other limit delayed past this one's plan, at its time + its
        # tokens. Any other grant's slot is not at the line's end (one taken from a
        # hole sits where the hole was, even once the line behind it was rolled back
        # and its time is later than the latest), and rolling the end back for it
        # would free another grant's slot.
        latest = state - self.tolerance
        if at <= latest + EPSILON:
            return at >= latest - EPSILON
        # (A composite's request that gave this limit nothing holds no slot in it.)
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
        # Every grant fills a slot of the TAT's line, as long as its tokens take, that
        # starts no earlier than the grant and ends no later than its time + tolerance:
        # slots that never overlap are what keeps any interval within capacity + rate·t.
        # A hole's tokens are the end of such a line, up to at + tolerance; a grant at t
        # may use the part of it that lies ahead of t.
        ahead = (at + self.tolerance - t) * self.rate
        if ahead >= tokens:
            return tokens
        return ahead if ahead > EPSILON else 0.0

    def idle_until(self, state: float) -> float:
        return state

    def restrict(self, state: float, now: float, remaining: float, until: float) -> float:
        # The TAT at which the (remaining + 1)-th grant from now lands exactly on
        # `until`: the first `remaining` may go before it, the rest follow one
        # interval apart, with no burst when the pause ends.
        tat = until + self.tolerance - (remaining + 1.0) * self.interval
        return state if state > tat else tat

    def params(self) -> tuple[float, ...]:
        return (self.capacity, self.rate)

    def slowed(self, share: float) -> Gcra:
        # The burst too: N processes that each kept the whole capacity would burst N
        # times over at the moment they all fell back.
        return Gcra(self.capacity * share, self.rate * share)

    def split(self, low_share: float) -> tuple[Gcra, Gcra]:
        # The arrival curves add up: (C - c) + (R - r)t + c + rt = C + Rt, so the two
        # lanes together never grant more than the bucket would.
        low = low_part(self.capacity, low_share, "capacity")
        rate = self.rate * low_share
        return Gcra(self.capacity - low, self.rate - rate), Gcra(low, rate)

    def guarded(self, seconds: float) -> Gcra:
        # The burst tolerance is time: a request may leave `seconds` late only if the
        # bucket keeps that much of it back.
        # A bucket of one token or more must still hold a whole one: less would refuse
        # every unit request, for ever.
        kept = self.capacity - seconds * self.rate
        if kept < min(1.0, self.capacity) - EPSILON or not kept > EPSILON:
            raise ValueError(
                f"guard={seconds!r} keeps back {seconds * self.rate:g} tokens at {self.rate:g}/s, leaving "
                f"{max(kept, 0.0):g} of capacity={self.capacity:g}: less than one request; lower the guard or "
                f"raise the capacity"
            )
        return Gcra(kept, self.rate, self.slack + seconds)

    def configured(self, rate: float | None, burst: float | None) -> Gcra:
        # The slack stays kept back from the new capacity, at the new rate. A burst
        # too small for it keeps one whole token (the run-time change was checked
        # against no process's guard): a little late jitter, never a dead bucket.
        # (token_bucket.configured in lua/token_bucket.lua, operation for operation.)
        refill = self.rate if rate is None else rate
        capacity = self.capacity if burst is None else burst
        if burst is None and self.slack > 0:
            capacity += self.slack * self.rate
        kept = capacity - self.slack * refill
        least = capacity if capacity < 1.0 else 1.0
        return Gcra(kept if kept > least else least, refill, self.slack)

    def rescale(self, new: Gcra | Allowance, state: float, now: float) -> float:
        # A change of limit at run time: the tokens still owed keep their count and
        # refill at the new rate; a full bucket stays full (token_bucket.rescale in
        # lua/token_bucket.lua, operation for operation).
        if isinstance(new, Allowance):
            # To an allowance: the tokens owed are its tokens spent.
            return (state - now) * self.rate if state > now and self.rate < math.inf else 0.0
        if not state > now or self.rate == math.inf:
            # Nothing owed: full, or (at an infinite rate) a pause, which stays.
            return state
        return now + (state - now) * self.rate * new.interval

    def step(self, state: float, now: float, tokens: float, max_wait: float) -> tuple[float, float]:
        # plan() and commit() inlined, operation for operation: this is every
        # in-process acquire, and two calls and a tuple cost more than the arithmetic.
        # advanced() inlined: its call would cost more than the usual case's check.
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


#: What an :class:`Allowance` says its latest grant's time is: before any time. Its
#: grants all went at once, and none is ever ahead; a finite number, so that a grant's
#: name (at_once) and the text of one in Redis stay numbers.
LONG_AGO = -1.7976931348623157e308


@dataclass(frozen=True, slots=True)
class Allowance:
    """A token bucket refilled at no rate: ``capacity`` tokens in all, never more.

    The state is the tokens spent (``-inf`` or ``0``: none). A request that fits in
    what is left goes at once; any other never does (admitted at ``inf``: refused for
    ever, whatever wait its caller allows), nor does any request once a charge has
    spent more than the capacity. Nothing is ever reserved ahead, so every give-back
    returns to the count, down to none spent. A grant's slot never ends (``room``).
    The state holds no time: a provider's pause is kept beside it (``holes.gate``).
    Mirrored by the ``allowance`` branches of ``lua/token_bucket.lua``.
    """

    capacity: float
    #: Seconds of guard (and lease) kept back: none at no refill (see ``guarded``).
    slack: float = 0.0
    #: The most spent a grant may leave: the capacity and a rounding's worth, which is
    #: relative below one token (an allowance of 1e-12 would otherwise grant its
    #: capacity a thousand times over, one of 5e-324 for ever).
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
        # A composite's request that gives it nothing goes by it, even once a charge
        # has spent more than the capacity (a debt no time pays off).
        if spent + tokens <= self.bound or not tokens > 0:
            return now, now
        return math.inf, math.inf

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
        # No time to move: a pause is kept beside the state (holes.gate), and in a
        # composite the other limits hold it.
        return state

    def params(self) -> tuple[float, ...]:
        return (self.capacity, 0.0)

    def slowed(self, share: float) -> Allowance:
        return Allowance(self.capacity * share)

    def split(self, low_share: float) -> tuple[Allowance, Allowance]:
        low = low_part(self.capacity, low_share, "capacity")
        return Allowance(self.capacity - low), Allowance(low)

    def guarded(self, seconds: float) -> Allowance:
        # A grant sent late is still one of the capacity's, which no time refills:
        # nothing to keep back, and no slack for the stores to record.
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
