"""Keep API-calling pipelines inside their providers' rate limits.

Put ``limiter.acquire()`` before every call; the limiter decides, for every worker
sharing the budget, when each call may go.

>>> from ratelimit import TokenBucket
>>> limiter = TokenBucket(capacity=20, refill_per_sec=1000 / 60)
>>> limiter.acquire()   # the burst is free: no wait
0.0
"""

from __future__ import annotations

import logging

from ._backoff import Backoff
from ._breaker import BreakerStats, CircuitBreaker, Ticket
from ._clock import Clock, ManualClock, SystemClock
from ._composite import Composite
from ._errors import AcquireTimeout, BackendUnavailable, CircuitOpen, RateLimitError, RetryError
from ._events import subscribe
from ._headers import RateLimitInfo, parse_rate_limit_headers
from ._limiter import Acquirer, LimiterStats
from ._limiters import LeakyBucket, SlidingWindow, TokenBucket
from ._memory import MemoryBackend
from ._outcome import classify
from ._redis import BackendStats, RedisBackend
from ._retry import Attempt, Retry, RetryStats

__all__ = [
    "AcquireTimeout",
    "Acquirer",
    "Attempt",
    "BackendStats",
    "BackendUnavailable",
    "Backoff",
    "BreakerStats",
    "CircuitBreaker",
    "CircuitOpen",
    "Clock",
    "Composite",
    "LeakyBucket",
    "LimiterStats",
    "ManualClock",
    "MemoryBackend",
    "RateLimitError",
    "RateLimitInfo",
    "RedisBackend",
    "Retry",
    "RetryError",
    "RetryStats",
    "SlidingWindow",
    "SystemClock",
    "Ticket",
    "TokenBucket",
    "classify",
    "parse_rate_limit_headers",
    "subscribe",
]

__version__ = "0.1.0"

# A library's convention: the application decides where log records go. Without a
# handler of its own, Python's last-resort handler would print our warnings to stderr.
logging.getLogger("ratelimit").addHandler(logging.NullHandler())
