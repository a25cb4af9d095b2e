"""A limiter's counters, kept by the store's handle inside the step it already
serialises (internal).

The in-process store counts under the lock its decision holds anyway, so counting
costs the hot path a few attribute updates and no lock of its own. Fields written
outside a decision (``restricted``, ``cancelled``, ``charged``) have a lock of their own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["LimiterStats", "Stats", "weight"]


def weight(tokens: Any) -> float:
    """One request's weight in counters and events: its tokens, or for a composite
    (one weight per member) the largest."""
    return float(tokens) if tokens.__class__ in (int, float) else float(max(tokens))


@dataclass(frozen=True)
class LimiterStats:
    """Counters of one limiter object since it was made (this process's requests only)."""

    #: Requests granted (reserved), and the tokens they took.
    granted: int
    tokens: float
    #: Requests refused (``try_acquire`` said no, ``acquire`` timed out or overflowed).
    denied: int
    #: Seconds the granted requests were told to wait in all, and the longest wait.
    waited: float
    max_wait: float
    #: Granted requests whose wait was interrupted, and so given back.
    cancelled: int
    #: Responses whose feedback lowered the budget or paused it.
    restricted: int
    #: Tokens taken by ``charge`` (and by ``settle`` where a call cost more than its
    #: estimate), without waiting; a composite counts its largest weight, as in ``tokens``.
    charged: float
    #: Refusals fed back to a learned rate (``adaptive=``); the shared store counts one
    #: cut per congestion event, however many of these it was told of.
    throttled: int = 0


class Stats:
    """A limiter's counts as they change (``snapshot`` makes its ``LimiterStats``)."""

    __slots__ = (
        "cancelled",
        "charged",
        "denied",
        "granted",
        "lock",
        "max_wait",
        "restricted",
        "throttled",
        "tokens",
        "waited",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.granted = self.denied = self.cancelled = self.restricted = self.throttled = 0
        self.tokens = self.waited = self.max_wait = self.charged = 0.0

    def record(self, weight: float, wait: float) -> None:
        """Count one decision; the caller holds the lock that serialises its handle."""
        if wait >= 0:
            self.granted += 1
            self.tokens += weight
            if wait > 0:
                self.waited += wait
                if wait > self.max_wait:
                    self.max_wait = wait
        else:
            self.denied += 1

    def count_restricted(self) -> None:
        with self.lock:
            self.restricted += 1

    def count_throttled(self) -> None:
        with self.lock:
            self.throttled += 1

    def count_cancelled(self) -> None:
        with self.lock:
            self.cancelled += 1

    def count_charged(self, weight: float) -> None:
        with self.lock:
            self.charged += weight

    def snapshot(self) -> LimiterStats:
        return LimiterStats(
            self.granted,
            self.tokens,
            self.denied,
            self.waited,
            self.max_wait,
            self.cancelled,
            self.restricted,
            self.charged,
            self.throttled,
        )
