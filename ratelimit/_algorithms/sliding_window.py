"""The exact sliding window: a log of the grants of the last window.

A grant counts against the limit while ``now < time + window``, so in ANY interval
``[a, a + window)`` at most ``limit`` tokens are granted. A request that does not fit
is planned at the moment enough old grants have aged out, and recorded there (a
future-dated entry): the next request is planned behind it, in arrival order.

**Cost.** Each entry keeps its time, its weight and the running sum of the weights up
to it. The tokens counted are the newest sum less the *base* (the first entry's sum
less its weight), and the moment a request fits is the time of the first entry whose
sum reaches ``base + excess``: a binary search, O(log n). Grants are recorded in time
order, so sums and times rise together. Memory is one entry per grant time in the
window.

**Charges** are appended like grants and never refused, so the log may hold more than
``limit``. **Restrictions** are kept beside the log as *caps*, ``[until, left]``, so
the log is only ever appended to at its end and consumed from its start.

Twin of ``lua/sliding_window.lua``; the O(1) approximate variant is
``sliding_window_counter.py``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .algorithm import EPSILON, exact_room, low_part

__all__ = ["REBASE", "Log", "WindowLog"]

#: Running sums are rebased to start from zero once the base passes this and
#: :data:`REBASE_SPAN` times the tokens the log holds: below both, a sum's rounding
#: (at most 2**-20 of a token or 2**-42 of the log's content) counts for nothing and
#: integral weights are exact, and the rewrite a rebase costs stays rare.
REBASE = 2.0**32
REBASE_SPAN = 1024.0

#: The most caps kept; past it the two earliest merge into one stricter cap.
MAX_CAPS = 8


class Log:
    """The exact log's state: parallel lists of entries, oldest first from ``head``
    (those before it pruned, dropped in batches), and the caps.

    ``head < len(times)``, or the lists are empty. Until the sums are rebased no weight
    exceeds its sum, so the base is never below zero; ``rebased`` says that may no
    longer hold, until the log empties.
    """

    __slots__ = ("caps", "head", "rebased", "sums", "times", "weights")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sums: list[float] = []
        self.weights: list[float] = []
        self.head = 0
        self.caps: list[list[float]] = []
        self.rebased = False

    def __len__(self) -> int:
        return len(self.times) - self.head

    def base(self) -> float:
        head = self.head
        return self.sums[head] - self.weights[head]

    def total(self) -> float:
        """The tokens the entries hold."""
        if len(self.times) == self.head:
            return 0.0
        return self.sums[-1] - self.base()

    def prune(self, cutoff: float) -> None:
        """Forget entries at or before ``cutoff``: they no longer count anywhere ahead."""
        times = self.times
        head = bisect_right(times, cutoff, self.head)
        if head == len(times):
            self.clear()
        elif head > 1024 and 2 * head > len(times):
            # In batches: moving the entries that stay costs as much as those gone.
            del times[:head], self.sums[:head], self.weights[:head]
            self.head = 0
        else:
            self.head = head

    def clear(self) -> None:
        self.times.clear()
        self.sums.clear()
        self.weights.clear()
        self.head = 0
        self.rebased = False

    def drop_newest(self) -> None:
        self.times.pop()
        self.sums.pop()
        self.weights.pop()
        if len(self.times) == self.head:
            self.clear()

    def rebase_if_due(self) -> None:
        """Start the sums from zero again (see :data:`REBASE`)."""
        base = self.base()
        if base > REBASE and base > REBASE_SPAN * (self.sums[-1] - base):
            self.sums[self.head :] = [s - base for s in self.sums[self.head :]]
            # Each sum less a rounded base may land an ulp below its weight.
            self.rebased = True


def _capped(caps: list[list[float]], at: float, tokens: float) -> float:
    """The earliest time from ``at`` on that every cap lets ``tokens`` through."""
    for until, left in caps:  # sorted by `until`: a cap passed moves `at` past it
        if at < until and tokens > left + EPSILON:
            at = until
    return at


@dataclass(frozen=True, slots=True)
class WindowLog:
    """At most ``limit`` tokens in any interval of ``window`` seconds, exactly."""

    limit: float
    window: float
    #: Seconds of guard already added to the window (``guarded``).
    slack: float = 0.0

    kind = "sliding_window"
    slotted = False
    most_name = "limit"

    @property
    def most(self) -> float:
        return self.limit

    @property
    def sustained_rate(self) -> float:
        return self.limit / self.window

    def new_state(self) -> Log:
        return Log()

    def _pruned(self, state: Log, now: float) -> None:
        """Forget the caps over and the entries aged out by ``now``: pruning changes
        nothing the log means, so planning may do it."""
        if state.caps and state.caps[0][0] <= now:
            state.caps = [cap for cap in state.caps if cap[0] > now]
        if len(state.times) > state.head and state.times[state.head] <= now - self.window:
            state.prune(now - self.window)

    def level(self, state: Log, now: float) -> float:
        """The tokens a request could take at once now (what :meth:`plan` grants at
        once): the limit less what the window counts, and no more than a cap in force
        leaves; none behind a grant dated ahead."""
        self._pruned(state, now)
        left = self.limit
        if len(state.times) > state.head:
            if state.times[-1] > now:
                return 0.0
            left = self.limit - (state.sums[-1] - state.base())
        for until, cap in state.caps:
            if now < until and cap < left:
                left = cap
        return left

    def plan(self, state: Log, now: float, tokens: float) -> tuple[float, float]:
        times = state.times
        self._pruned(state, now)
        if len(times) == state.head:
            at = now
        else:
            last = times[-1]
            base = state.base()
            excess = state.sums[-1] - base + tokens - self.limit
            at = last if last > now else now
            if excess > EPSILON:
                # The first entry whose sum reaches base + excess: once it ages out,
                # enough has. Rounding may put the target past the newest: then it.
                index = bisect_left(state.sums, base + excess - EPSILON, state.head)
                first = times[index if index < len(times) else -1] + self.window
                if first > at:
                    at = first
        if state.caps:
            at = _capped(state.caps, at, tokens)
        return now, at

    def commit(self, state: Log, now: float, tokens: float, at: float) -> Log:
        times, sums = state.times, state.sums
        if not tokens > 0:
            return state  # nothing to count (a composite's member charged nothing)
        if len(times) == state.head:
            times.append(at)
            sums.append(tokens)
            state.weights.append(tokens)
        else:
            total = sums[-1] + tokens
            if at <= times[-1] or total == sums[-1]:
                # One entry per time and strictly rising sums (the script's sorted set
                # holds no two alike): a weight too small to move the sum joins the
                # newest entry, which moves to its time (counted longer, never less).
                times[-1] = at if at > times[-1] else times[-1]
                sums[-1] = total
                state.weights[-1] += tokens
            else:
                times.append(at)
                sums.append(total)
                state.weights.append(tokens)
            state.rebase_if_due()
        if state.caps:
            for cap in state.caps:
                if at < cap[0]:
                    cap[1] -= tokens
        return state

    def _first(self, state: Log, now: float, tokens: float) -> tuple[Log, float]:
        if tokens > 0:
            state.times.append(now)
            state.sums.append(tokens)
            state.weights.append(tokens)
        return state, 0.0

    def step(self, state: Log, now: float, tokens: float, max_wait: float) -> tuple[Log, float]:
        # The usual case inlined (no caps, room now, nothing reserved ahead): plan(),
        # decide() and commit() as one, operation for operation. Early exits keep each
        # jump short, which CPython's specialised float comparison needs.
        times = state.times
        if not times:
            if not state.caps:
                return self._first(state, now, tokens)
            return self._planned(state, now, tokens, max_wait)
        if state.caps:
            return self._planned(state, now, tokens, max_wait)
        last = times[-1]
        cutoff = now - self.window
        if not (last <= now and cutoff < last):
            if last <= cutoff:
                # All of it aged out: the sums start again from zero, as in plan().
                state.clear()
                return self._first(state, now, tokens)
            return self._planned(state, now, tokens, max_wait)
        head = state.head
        if times[head] <= cutoff:
            # Usually one entry has aged out since the last call: try it before a search.
            head += 1
            if times[head] <= cutoff:
                head = bisect_right(times, cutoff, head)
            if head > 1024 and 2 * head > len(times):
                state.prune(cutoff)
                head = 0
            else:
                state.head = head
        sums = state.sums
        newest = sums[-1]
        total = newest + tokens
        # With a base >= 0, a total that fits is a plan that fits, without reading the
        # head's entry (long out of the cache).
        if not (total - self.limit <= EPSILON and not state.rebased) and not (
            newest - (sums[head] - state.weights[head]) + tokens - self.limit <= EPSILON
        ):
            return self._planned(state, now, tokens, max_wait)
        # The base is no more than the newest sum: only a large one may need a rebase.
        due = False
        if newest > REBASE:
            due = sums[head] - state.weights[head] > REBASE
        if last == now or total == newest:
            if tokens > 0:
                times[-1] = now
                sums[-1] = total
                state.weights[-1] += tokens
        else:
            times.append(now)
            sums.append(total)
            state.weights.append(tokens)
        if due:
            state.rebase_if_due()
        return state, 0.0

    def _planned(self, state: Log, now: float, tokens: float, max_wait: float) -> tuple[Log, float]:
        """step() the planned way: plan(), decide() and commit()."""
        _, at = self.plan(state, now, tokens)
        wait = at - now
        if wait <= EPSILON:
            wait = 0.0
        elif wait > max_wait + EPSILON:
            return state, -wait
        return self.commit(state, now, tokens, at), wait

    def refund(self, state: Log, now: float, tokens: float, at: float) -> Log:
        # A refund names no entry: the tokens come from the OLDEST grants already made,
        # freeing capacity no earlier than removing the caller's own entry would (newer
        # ones could let a later window overfill). A search on the sums: O(log n).
        if not tokens > 0 or at <= now - self.window:
            return state  # nothing, or a grant named by its time that has aged out
        state.prune(now - self.window)
        times, sums, weights = state.times, state.sums, state.weights
        head = state.head
        if len(times) == head or times[head] > now:
            return state
        target = state.base() + tokens
        made = bisect_right(times, now, head)  # only grants already made
        used = bisect_left(sums, target + EPSILON, head)
        if used >= made:
            state.head = made
            if made == len(times):
                state.clear()
            return state
        state.head = used
        weights[used] = sums[used] - target
        return state

    def tail(self, state: Log, tokens: float, at: float) -> bool:
        return len(state.times) == state.head or at >= state.times[-1] - EPSILON

    def cancel(self, state: Log, now: float, tokens: float, at: float) -> Log:
        # The withdrawn grant is in the newest entry (one entry per time).
        times = state.times
        if len(times) == state.head or times[-1] < at - EPSILON or not tokens > 0:
            return state
        weights, sums = state.weights, state.sums
        # The sums must keep rising, or a search could stop at the wrong entry.
        prev = sums[-2] if len(times) - state.head > 1 else sums[-1] - weights[-1]
        if weights[-1] - tokens <= EPSILON or sums[-1] - tokens <= prev:
            state.drop_newest()
        else:
            weights[-1] -= tokens
            sums[-1] -= tokens
        return state

    def latest(self, state: Log) -> float:
        times = state.times
        return times[-1] if len(times) > state.head else -math.inf

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        return exact_room(at, tokens, t)

    def idle_until(self, state: Log) -> float:
        times = state.times
        idle = times[-1] + self.window if len(times) > state.head else -math.inf
        for until, _ in state.caps:
            idle = until if until > idle else idle
        return idle

    def restrict(self, state: Log, now: float, remaining: float, until: float) -> Log:
        caps = [cap for cap in state.caps if cap[0] > now]
        # Only ever stricter: a cap ending no earlier and leaving no more says it all;
        # one ending no later and leaving no less says nothing more.
        if any(u >= until and left <= remaining for u, left in caps):
            state.caps = caps
            return state
        caps = [cap for cap in caps if not (cap[0] <= until and cap[1] >= remaining)]
        caps.append([until, remaining])
        caps.sort()
        while len(caps) > MAX_CAPS:
            # Merged into one that ends with the later and leaves the lesser: stricter.
            first, second = caps[0], caps[1]
            caps[0:2] = [[second[0], min(first[1], second[1])]]
        state.caps = caps
        return state

    def params(self) -> tuple[float, ...]:
        return (self.limit, self.window)

    def split(self, low_share: float) -> tuple[WindowLog, WindowLog]:
        # Over any interval of the window: (L - l) + l = L.
        low = low_part(self.limit, low_share, "limit")
        return WindowLog(self.limit - low, self.window), WindowLog(low, self.window)

    def guarded(self, seconds: float) -> WindowLog:
        return WindowLog(self.limit, self.window + seconds, self.slack + seconds)

    def configured(self, rate: float | None, burst: float | None) -> WindowLog:
        # The window keeps its length, so the state stays meaningful; no burst of its own.
        if rate is None:
            return self
        return WindowLog(rate * (self.window - self.slack), self.window, self.slack)

    def slowed(self, share: float) -> WindowLog:
        # A share of the limit in the same window: a longer one would let every process
        # fall back with the whole limit at once.
        return WindowLog(self.limit * share, self.window)
