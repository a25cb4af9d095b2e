"""The approximate sliding window: O(1) memory, and never more than ``limit`` per window.

Time is cut into aligned sub-windows of width ``g = window / m`` (``m`` is
:data:`SUBWINDOWS`; fewer for a window under ``m`` microseconds, see
:data:`SHORTEST`), numbered ``j(t) = floor(t / g)``. The state is the tokens granted
in the ring of the ``m + 1`` newest sub-windows (``last``'s and the ``m`` before), their
total, and ``last``: the latest grant recorded, or the end of a pause. A request is
planned at ``t = max(now, last)`` or later (FIFO):

- it goes at ``t`` if sub-windows ``j(t) - m .. j(t)`` hold at most ``limit - tokens``;
- otherwise at the start of sub-window ``k + m``, for the first ``k`` from which on
  they do: from there on, only sub-windows ``k`` and later are counted.

**The bound.** No interval ``[a, a + window)`` ever holds more than ``limit``. Take the
interval's latest grant ``t*``. Grants are recorded in time order, so when ``t*`` was
decided every other grant of the interval was already counted, each in a sub-window
``>= j(t*) - m`` (it lies at or after ``a > t* - window``): the decision added them
up. The other operations keep this:

- a reservation withdrawn from the middle of the queue stays counted; whoever takes
  the hole goes at its exact time with no more than its tokens (``holes.py``);
- ``cancel`` takes the last reservation's tokens out of its sub-window and keeps
  ``last``: nothing was placed relative to it;
- ``refund`` keeps the counts *dominating* the truth: for every ``k``, the tokens
  counted from sub-window ``k`` on are at least those still granted from ``k`` on,
  which is all a decision reads. Taking from the grant's own sub-window or older ones
  keeps that (an unnamed refund takes from the oldest sub-window still counted, and
  frees nothing while reservations reach past now's sub-window);
- ``restrict`` adds placeholder grants and may hold ``last``; a pause only moves
  ``last``;
- a charge is recorded like a grant at ``max(now, last)`` and never refused, so a span
  whose latest entry is a charge may hold more than ``limit`` (the debt); one whose
  latest entry is a grant still holds at most ``limit``.

**The cost.** A decision counts a span of up to ``window + g``, so under saturation the
counter grants at least ``m / (m + 1)`` of what the exact log grants.

**Floats.** ``j(t)`` and :func:`window_start` agree at every boundary, so a grant
planned at a sub-window's start is counted in it; edges are exact to an ulp of ``t``.
Sub-window indices stay below 2**53 (Python's ints and Lua's doubles agree) for times
up to 9e9 s: hence the 1 µs floor on ``g``.

Twin of ``lua/sliding_window_counter.lua``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from math import ceil, floor

from .algorithm import EPSILON, exact_room, low_part, step

__all__ = ["SHORTEST", "SUBWINDOWS", "CounterState", "WindowCounter", "window_start"]

#: Sub-windows per window: saturated throughput is at least 20/21 of the exact log's.
#: Each one more costs a field of the Redis hash and a step of a deferred request's scan.
SUBWINDOWS = 20

#: The narrowest sub-window, seconds: Redis ``TIME``'s resolution, which keeps
#: sub-window indices exact (module docstring).
SHORTEST = 1e-6


def window_start(index: float, width: float) -> float:
    """The first time whose sub-window index (``floor(t / width)``) is ``index``
    (``index * width`` may round below the boundary: step up an ulp or two)."""
    t = index * width
    while floor(t / width) < index:
        t += abs(t) * 4.5e-16 + 5e-324
    return t


class CounterState:
    """The counts of the ``m + 1`` newest sub-windows, updated in place: ``index`` is
    ``j(last)`` (``-inf``: nothing recorded), ``slot`` its place in ``counts``."""

    __slots__ = ("counts", "index", "last", "slot", "total")

    def __init__(self, ring: int) -> None:
        self.index: float = -math.inf
        self.slot = 0
        self.total = 0.0
        self.last = -math.inf
        self.counts = [0.0] * ring

    def copy(self) -> CounterState:
        other = CounterState(0)
        other.index, other.slot, other.total, other.last = self.index, self.slot, self.total, self.last
        other.counts = list(self.counts)
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CounterState):
            return NotImplemented
        mine = (self.index, self.slot, self.total, self.last, self.counts)
        return mine == (other.index, other.slot, other.total, other.last, other.counts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"CounterState(index={self.index!r}, total={self.total!r}, last={self.last!r}, "
            f"slot={self.slot!r}, counts={self.counts!r})"
        )


@dataclass(frozen=True, slots=True)
class WindowCounter:
    """At most ``limit`` tokens per sliding ``window``, in O(1) memory."""

    limit: float
    window: float
    #: How many sub-windows make a window, their width, and the ring's length.
    subs: int = field(init=False)
    width: float = field(init=False)
    ring: int = field(init=False)
    #: Seconds of guard already added to the window (``guarded``).
    slack: float = 0.0

    kind = "sliding_window_counter"
    slotted = False
    most_name = "limit"

    def __post_init__(self) -> None:
        subs = min(SUBWINDOWS, max(1, floor(self.window / SHORTEST)))
        object.__setattr__(self, "subs", subs)
        object.__setattr__(self, "width", self.window / subs)
        object.__setattr__(self, "ring", subs + 1)

    @property
    def most(self) -> float:
        return self.limit

    @property
    def sustained_rate(self) -> float:
        # Saturated, the grants of any `subs + 1` consecutive sub-windows are `limit`.
        return self.limit / (self.window + self.width)

    def new_state(self) -> CounterState:
        return CounterState(self.ring)

    # -- moving the ring ---------------------------------------------------------------

    def _advance(self, state: CounterState, k: int) -> None:
        """Make ``k`` (> ``state.index``) the newest sub-window: the ones more than
        ``m`` before it share its slots, and leave the count."""
        counts = state.counts
        ring = self.ring
        if k - state.index > self.subs:
            for i in range(ring):
                counts[i] = 0.0
            state.total = 0.0
        else:
            total = state.total
            s = int(state.index) + 1
            while s <= k:
                i = s % ring
                total -= counts[i]
                counts[i] = 0.0
                s += 1
            state.total = total if total > 0.0 else 0.0
        state.index = k
        state.slot = k % ring

    def _hold(self, state: CounterState, until: float) -> CounterState:
        """Nothing granted before ``until``: it becomes ``last``."""
        k = floor(until / self.width)
        if k > state.index:
            self._advance(state, k)
        if until > state.last:
            state.last = until
        return state

    def _take(self, state: CounterState, s: int, tokens: float) -> float:
        """Take up to ``tokens`` out of sub-window ``s``; return what is still to take."""
        counts = state.counts
        i = s % self.ring
        c = counts[i]
        if c > tokens:
            counts[i] = c - tokens
            state.total -= tokens
            return 0.0
        counts[i] = 0.0
        state.total -= c
        return tokens - c

    # -- the protocol --------------------------------------------------------------------

    def plan(self, state: CounterState, now: float, tokens: float) -> tuple[float, float]:
        last = state.last
        t = now if now > last else last
        k = floor(t / self.width)
        index = state.index
        m = self.subs
        if k - index > m:
            return now, t
        counts = state.counts
        ring = self.ring
        limit = self.limit
        used = state.total
        # The sub-windows that are too old to count at t (in the order _advance drops them).
        s = int(index) - m
        while s < k - m:
            used -= counts[s % ring]
            s += 1
        if used + tokens - limit <= EPSILON:
            return now, t
        # Drop the oldest counted sub-window until the rest leave room: from sub-window
        # s + m on, only s and later are counted. Past `index` nothing is left.
        while s <= index:
            used -= counts[s % ring]
            s += 1
            if used + tokens - limit <= EPSILON:
                break
        return now, window_start(s + m, self.width)

    def level(self, state: CounterState, now: float) -> float:
        """The tokens a request could take at once now (what :meth:`plan` grants at
        once): the limit less what the window counts; none behind a grant dated ahead."""
        if state.last > now:
            return 0.0
        k = floor(now / self.width)
        index = state.index
        m = self.subs
        if k - index > m:
            return self.limit
        counts = state.counts
        ring = self.ring
        used = state.total
        s = int(index) - m
        while s < k - m:
            used -= counts[s % ring]
            s += 1
        return self.limit - used

    def commit(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        if not tokens > 0:
            return state  # nothing counted (a composite's member)
        k = floor(at / self.width)
        index = state.index
        if k > index:
            self._advance(state, k)
            state.last = at
            i = state.slot
        else:
            if at > state.last:
                state.last = at
            if k == index:
                i = state.slot
            else:
                # Not planned here (grants are FIFO); counted no shorter than it should be.
                oldest = int(index) - self.subs
                i = (k if k > oldest else oldest) % self.ring
        state.counts[i] += tokens
        state.total += tokens
        return state

    def step(self, state: CounterState, now: float, tokens: float, max_wait: float) -> tuple[CounterState, float]:
        # plan(), decide() and commit() inlined for the common case (the newest
        # sub-window is still t's and the request fits), operation for operation.
        last = state.last
        t = now if now > last else last
        if floor(t / self.width) == state.index:
            total = state.total + tokens
            if total - self.limit <= EPSILON:
                wait = t - now
                if wait <= EPSILON:
                    wait = 0.0
                elif wait > max_wait + EPSILON:
                    return state, -wait
                state.counts[state.slot] += tokens
                state.total = total
                state.last = t
                return state, wait
        return step(self, state, now, tokens, max_wait)

    def refund(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        index = state.index
        if index == -math.inf or not tokens > 0:
            return state
        top = int(index)
        current = floor(now / self.width)
        # Sub-windows before `oldest` are never counted again: tokens taken there free nothing.
        oldest = current - self.subs
        if oldest < top - self.subs:
            oldest = top - self.subs
        if at == now:
            # Names no grant: the caller's is in sub-window `oldest` or later, unless
            # reservations reach past now's sub-window; then taking from a later one
            # than its own could free what it never held.
            if top > current:
                return state
            s = oldest
            while s <= top and tokens > 0.0:
                tokens = self._take(state, s, tokens)
                s += 1
        else:
            # The grant's own sub-window, then older ones: never a later one.
            s = floor(at / self.width)
            if s > top:
                s = top
            while s >= oldest and tokens > 0.0:
                tokens = self._take(state, s, tokens)
                s -= 1
        if not state.total > 0.0:
            state.total = 0.0
        return state

    def tail(self, state: CounterState, tokens: float, at: float) -> bool:
        return at >= state.last - EPSILON

    def cancel(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        # Which grant came before is not kept, so `last` stays: the next request is
        # still planned no earlier than the withdrawn one was.
        return self.refund(state, now, tokens, at)

    def latest(self, state: CounterState) -> float:
        return state.last

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        return exact_room(at, tokens, t)

    def idle_until(self, state: CounterState) -> float:
        # A pause is held in `last`, which can reach past the counted sub-windows.
        if state.index == -math.inf:
            return state.last
        fresh = window_start(state.index + self.ring, self.width)
        return fresh if fresh > state.last else state.last

    def restrict(self, state: CounterState, now: float, remaining: float, until: float) -> CounterState:
        last = state.last
        t0 = now if now > last else last
        if until <= t0:
            return state  # nothing can be granted before `until` anyway
        if remaining <= EPSILON:
            return self._hold(state, until)
        # Sub-windows j(t0) .. j(until), cut from the end into `blocks` runs of m + 1,
        # each holding at most `limit` (the first with what it already holds).
        ring = self.ring
        width = self.width
        first_k = floor(t0 / width)
        end_k = floor(until / width)
        blocks = (end_k - first_k) // ring + 1
        needed = ceil(remaining / self.limit)
        if blocks <= needed:
            start = end_k - blocks * ring + 1
            index = state.index
            counts = state.counts
            held = 0.0
            s = start if start > index - self.subs else int(index) - self.subs
            while s <= index:
                held += counts[s % ring]
                s += 1
            extra = blocks * self.limit - remaining - held
            if extra > EPSILON:
                return self.commit(state, now, extra, t0)
            return state
        # More runs than `remaining` needs: it goes in the last `needed` runs, nothing
        # before them, a placeholder for the rest of the first.
        begin = window_start(end_k - needed * ring + 1, width)
        extra = needed * self.limit - remaining
        if extra > EPSILON:
            return self.commit(state, now, extra, begin)
        return self._hold(state, begin)

    def params(self) -> tuple[float, ...]:
        return (self.limit, self.window)

    def split(self, low_share: float) -> tuple[WindowCounter, WindowCounter]:
        # Over any interval of the window: (L - l) + l = L.
        low = low_part(self.limit, low_share, "limit")
        return WindowCounter(self.limit - low, self.window), WindowCounter(low, self.window)

    def guarded(self, seconds: float) -> WindowCounter:
        return WindowCounter(self.limit, self.window + seconds, self.slack + seconds)

    def configured(self, rate: float | None, burst: float | None) -> WindowCounter:
        # As WindowLog.configured: the window and its ring keep their length.
        if rate is None:
            return self
        return WindowCounter(rate * (self.window - self.slack), self.window, self.slack)

    def slowed(self, share: float) -> WindowCounter:
        return WindowCounter(self.limit * share, self.window)
