"""The exact sliding window: a log of the grants of the last window.

A grant counts against the limit while ``now < time + window``, so in ANY interval
``[a, a + window)`` at most ``limit`` tokens are granted. A request that does not fit
is planned at the moment enough old grants have aged out, and recorded there (a
future-dated entry): the next request is planned behind it, in arrival order. Memory
is one entry per grant in the window, at most ``limit`` entries for unit requests.
Mirrored by ``lua/sliding_window.lua``. The O(1) approximate variant is
``_window_counter.py``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ._algorithm import EPSILON, step

__all__ = ["Log", "WindowLog"]


class Log:
    """The exact log's state: grants oldest first, and their total."""

    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[list[float]] = deque()
        self.total = 0.0

    def prune(self, cutoff: float) -> None:
        """Forget grants at or before ``cutoff``: they no longer count anywhere ahead."""
        entries = self.entries
        while entries and entries[0][0] <= cutoff:
            self.total -= entries.popleft()[1]
        if not entries:
            # Subtraction of float weights drifts; an empty log is exactly zero.
            self.total = 0.0


@dataclass(frozen=True, slots=True)
class WindowLog:
    """At most ``limit`` tokens in any interval of ``window`` seconds, exactly."""

    limit: float
    window: float

    kind = "sliding_window"
    most_name = "limit"
    step = step

    @property
    def most(self) -> float:
        return self.limit

    def new_state(self) -> Log:
        return Log()

    def plan(self, state: Log, now: float, tokens: float) -> tuple[float, float]:
        entries = state.entries
        # Pruning changes nothing the log means, so planning may do it.
        if entries and entries[0][0] <= now - self.window:
            state.prune(now - self.window)
        last = entries[-1][0] if entries else now
        excess = state.total + tokens - self.limit
        if excess <= EPSILON:
            return now, max(now, last)
        aged = 0.0
        for at, weight in entries:
            aged += weight
            if aged >= excess - EPSILON:
                return now, max(now, at + self.window, last)
        # Ran off the end: rounding of fractional weights and refunds has left the
        # total above the sum of its entries. The entries are the truth: the total
        # becomes their sum (the one just taken: left to right, as the Lua twin takes
        # it), and the request waits until the whole log has aged out, which is
        # always enough.
        state.total = aged
        return now, max(now, last + self.window)

    def commit(self, state: Log, now: float, tokens: float, at: float) -> Log:
        entries = state.entries
        if entries and entries[-1][0] == at:
            entries[-1][1] += tokens
        else:
            entries.append([at, tokens])
        state.total += tokens
        return state

    def refund(self, state: Log, now: float, tokens: float, at: float) -> Log:
        state.prune(now - self.window)
        entries = state.entries
        # A grant named by its time (``at`` before now) is taken out where it stands. A
        # refund at now names none: the grant standing at now may be another caller's.
        for entry in reversed(entries if at < now else ()):
            if entry[0] <= at:
                if entry[0] == at:
                    taken = min(tokens, entry[1])
                    entry[1] -= taken
                    state.total -= taken
                    tokens -= taken
                break
        # The rest comes from the OLDEST grants already made: the caller's own grant is
        # at least as recent, so this frees capacity no earlier than removing its own
        # entry would. (Taking from newer entries could let a later window overfill.)
        for entry in entries:
            if tokens <= 0 or entry[0] > now:
                break
            taken = min(tokens, entry[1])
            entry[1] -= taken
            state.total -= taken
            tokens -= taken
        state.entries = deque(entry for entry in entries if entry[1] > EPSILON)
        if not state.entries:
            state.total = 0.0
        return state

    def tail(self, state: Log, tokens: float, at: float) -> bool:
        entries = state.entries
        return not entries or at >= entries[-1][0] - EPSILON

    def cancel(self, state: Log, now: float, tokens: float, at: float) -> Log:
        # The withdrawn grant is among the entries at the newest time (a restriction's
        # placeholder may stand there too): take its tokens from them together and
        # keep what is left as one entry, as the script does with its members.
        entries = state.entries
        if not entries or entries[-1][0] < at - EPSILON:
            return state
        newest = entries[-1][0]
        held = 0.0
        while entries and entries[-1][0] == newest:
            held += entries.pop()[1]
        taken = min(tokens, held)
        left = held - taken
        state.total -= taken
        if left <= EPSILON:
            state.total -= left
        else:
            entries.append([newest, left])
        if not entries:
            state.total = 0.0
        return state

    def latest(self, state: Log) -> float:
        entries = state.entries
        return entries[-1][0] if entries else -math.inf

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def idle_until(self, state: Log) -> float:
        entries = state.entries
        return entries[-1][0] + self.window if entries else -math.inf

    def restrict(self, state: Log, now: float, remaining: float, until: float) -> Log:
        # One placeholder grant, dated so it counts until exactly `until`, weighing
        # what the log must hold on top of the grants that count until then anyway.
        # Grants that age out before `until` are already counted at full weight until
        # they do, so at no moment before `until` is more than `remaining` grantable.
        state.prune(now - self.window)
        cutoff = until - self.window
        lasting = 0.0
        for at, weight in state.entries:
            if at > cutoff:
                lasting += weight
        extra = self.limit - remaining - lasting
        if extra <= EPSILON:
            return state
        entries = state.entries
        index = len(entries)
        while index > 0 and entries[index - 1][0] > cutoff:
            index -= 1
        entries.insert(index, [cutoff, extra])
        state.total += extra
        return state

    def peek(self, state: Log, now: float) -> tuple[float, float]:
        state.prune(now - self.window)
        if not state.entries:
            return self.limit, 0.0
        return max(0.0, self.limit - state.total), state.entries[-1][0] + self.window - now

    def params(self) -> tuple[float, ...]:
        return (self.limit, self.window)

    def guarded(self, seconds: float) -> WindowLog:
        return WindowLog(self.limit, self.window + seconds)

    def slowed(self, share: float) -> WindowLog:
        # A share of the limit in the same window: a longer window would let every
        # process fall back with the whole limit at once.
        return WindowLog(self.limit * share, self.window)
