"""The approximate sliding window: O(1) memory, whatever the limit.

It keeps two numbers, the tokens granted in the current fixed window and in the one
before, and estimates the sliding count as ``previous * (1 - elapsed_fraction) +
current``. It never grants more than ``limit`` within one fixed (aligned) window;
across a window edge it assumes the previous window's grants were spread evenly, so a
client that crowds its grants at the end of one window can get up to ``2 * limit``
into one sliding interval (in the worst case; with steady traffic the estimate is
close). Mirrored by ``lua/sliding_window_counter.lua``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import floor

from ._algorithm import EPSILON, step

__all__ = ["CounterState", "WindowCounter", "window_start"]


def window_start(index: float, window: float) -> float:
    """The first time whose window index is ``index``.

    ``index * window`` can round to just below the boundary, where ``floor(t / window)``
    says ``index - 1``; step up by an ulp or two until it does not.
    """
    t = index * window
    while floor(t / window) < index:
        t += abs(t) * 4.5e-16 + 5e-324
    return t


#: ``(index, previous, current, last)``: the newest window with grants, the tokens
#: granted in the window before it and in it, and the latest grant time (FIFO).
CounterState = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class WindowCounter:
    """Approximately ``limit`` tokens per sliding ``window``, in O(1) memory."""

    limit: float
    window: float

    kind = "sliding_window_counter"
    most_name = "limit"
    step = step

    @property
    def most(self) -> float:
        return self.limit

    def new_state(self) -> CounterState:
        return (-math.inf, 0.0, 0.0, -math.inf)

    def plan(self, state: CounterState, now: float, tokens: float) -> tuple[float, float]:
        index, previous, current, last = state
        start = max(now, last)
        k = floor(start / self.window)
        if k >= index + 2:
            return now, start
        if k == index + 1:
            previous, current = current, 0.0
        if current + tokens - self.limit > EPSILON:
            # This window is spent; the next one starts with it as its "previous".
            k += 1
            start = window_start(k, self.window)
            previous, current = current, 0.0
        room = self.limit - tokens - current
        if previous - room <= EPSILON:
            return now, start
        fraction = 1.0 - room / previous
        return now, max(start, k * self.window + fraction * self.window)

    def commit(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        index, previous, current, last = state
        k = floor(at / self.window)
        if k == index:
            return (index, previous, current + tokens, max(last, at))
        if k == index + 1:
            return (k, current, tokens, at)
        return (k, 0.0, tokens, at)

    def refund(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        index, previous, current, last = state
        k = floor(at / self.window)
        # Grants of the newest window are refunded from it, also just after its end
        # (a refund at `now` one window on still concerns them).
        if k == index or k == index + 1:
            return (index, previous, max(0.0, current - tokens), last)
        if k == index - 1:
            return (index, max(0.0, previous - tokens), current, last)
        return state

    def tail(self, state: CounterState, tokens: float, at: float) -> bool:
        return at >= state[3] - EPSILON

    def cancel(self, state: CounterState, now: float, tokens: float, at: float) -> CounterState:
        # Which grant came before is not kept, so `last` stays: the next request is
        # still planned no earlier than the withdrawn one was.
        return self.refund(state, now, tokens, at)

    def latest(self, state: CounterState) -> float:
        return state[3]

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def idle_until(self, state: CounterState) -> float:
        # A pause is held in `last`, which can reach past the counted windows.
        fresh = (state[0] + 2) * self.window
        return fresh if fresh > state[3] else state[3]

    def restrict(self, state: CounterState, now: float, remaining: float, until: float) -> CounterState:
        # Approximate, as this variant is: a placeholder grant now brings the estimate
        # up to `limit - remaining`, and a pause also holds every grant until `until`.
        grantable, _ = self.peek(state, now)
        extra = grantable - remaining
        if extra > EPSILON:
            index, previous, current, last = state
            start = now if now > last else last
            state = self.commit(state, now, extra, start)
        if remaining <= EPSILON:
            index, previous, current, last = state
            state = (index, previous, current, until if until > last else last)
        return state

    def peek(self, state: CounterState, now: float) -> tuple[float, float]:
        index, previous, current, _ = state
        k = floor(now / self.window)
        if k >= index + 2:
            return self.limit, 0.0
        fraction = now / self.window - k
        if k == index + 1:
            used = current * (1.0 - fraction)
        elif k == index:
            used = current + previous * (1.0 - fraction)
        else:
            used = self.limit
        return max(0.0, self.limit - used), (index + 2) * self.window - now

    def params(self) -> tuple[float, ...]:
        return (self.limit, self.window)

    def guarded(self, seconds: float) -> WindowCounter:
        return WindowCounter(self.limit, self.window + seconds)

    def slowed(self, share: float) -> WindowCounter:
        return WindowCounter(self.limit * share, self.window)
