"""What the two metrics exporters share, so that they cannot tell different stories.

``prometheus.py`` and ``otel.py`` each turn events into their library's instruments;
the numbers a gauge shows, the histogram buckets, and the label values taken from an
event are decided here once.
"""

from __future__ import annotations

from .._events import AttemptFinished, BreakerState, RetryScheduled

__all__ = ["ATTEMPT_BUCKETS", "BREAKER_STATES", "WAIT_BUCKETS", "attempt_status", "retry_reason"]

#: The value ``ratelimit_breaker_state`` takes in each state: higher is worse.
BREAKER_STATES: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}

# Waits run from "none at all" (a burst) to a provider's pause of a minute or more.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0)


def attempt_status(event: AttemptFinished) -> str:
    """The ``status`` label: the HTTP status, ``"error"`` when the attempt raised without
    a response, ``"none"`` when it returned something that is not a response."""
    if event.status is not None:
        return str(event.status)
    return "error" if event.error is not None else "none"


def retry_reason(event: RetryScheduled) -> str:
    """The ``reason`` label: the failed status, the exception's class, or ``"returned"``."""
    if event.status is not None:
        return str(event.status)
    return event.error or "returned"
