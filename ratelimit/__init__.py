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

from ._clock import Clock, ManualClock, SystemClock
from ._errors import AcquireTimeout, BackendUnavailable, CircuitOpen, RateLimitError, RetryError
from ._events import Attempt, subscribe
from ._headers.parse import RateLimitInfo, parse_rate_limit_headers
from ._limiting.adaptive import Adaptive
from ._limiting.composite import Composite
from ._limiting.concurrency import ConcurrencyLimit, Hold, Lease
from ._limiting.fair import FairShare, TenantShare
from ._limiting.for_limit import for_limit
from ._limiting.front import Acquirer, LimiterStats
from ._limiting.limiters import LeakyBucket, SlidingWindow, TokenBucket
from ._limiting.quota import Quota
from ._limiting.reservation import Reservation
from ._resilience.backoff import Backoff
from ._resilience.breaker import BreakerStats, CircuitBreaker, Ticket
from ._resilience.outcome import classify
from ._resilience.retry import Retry, RetryStats
from ._stores.memory import MemoryBackend
from ._stores.redis import RedisBackend
from ._stores.sqlite import SQLiteBackend
from ._stores.unavailable import BackendStats

__all__ = [
    "AcquireTimeout",
    "Acquirer",
    "Adaptive",
    "Attempt",
    "BackendStats",
    "BackendUnavailable",
    "Backoff",
    "BreakerStats",
    "CircuitBreaker",
    "CircuitOpen",
    "Clock",
    "Composite",
    "ConcurrencyLimit",
    "FairShare",
    "Hold",
    "LeakyBucket",
    "Lease",
    "LimiterStats",
    "ManualClock",
    "MemoryBackend",
    "Quota",
    "RateLimitError",
    "RateLimitInfo",
    "RedisBackend",
    "Reservation",
    "Retry",
    "RetryError",
    "RetryStats",
    "SQLiteBackend",
    "SlidingWindow",
    "SystemClock",
    "TenantShare",
    "Ticket",
    "TokenBucket",
    "classify",
    "for_limit",
    "parse_rate_limit_headers",
    "subscribe",
]

__version__ = "0.1.0"

# A library's convention: the application decides where log records go. Without a
# handler of its own, Python's last-resort handler would print our warnings to stderr.
logging.getLogger("ratelimit").addHandler(logging.NullHandler())
