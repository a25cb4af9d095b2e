"""Keep API-calling pipelines inside their providers' rate limits.

Put ``limiter.acquire()`` before every call; the limiter decides, for every worker
sharing the budget, when each call may go.

>>> from ratelimit import TokenBucket
>>> limiter = TokenBucket(capacity=20, refill_per_sec=1000 / 60)
>>> limiter.acquire()   # the burst is free: no wait
0.0
"""

from __future__ import annotations

from ._clock import Clock, ManualClock, SystemClock
from ._composite import Composite
from ._errors import AcquireTimeout, BackendUnavailable, RateLimitError
from ._headers import RateLimitInfo, parse_rate_limit_headers
from ._limiter import Acquirer
from ._limiters import LeakyBucket, SlidingWindow, TokenBucket
from ._memory import MemoryBackend
from ._redis import BackendStats, RedisBackend

__all__ = [
    "AcquireTimeout",
    "Acquirer",
    "BackendStats",
    "BackendUnavailable",
    "Clock",
    "Composite",
    "LeakyBucket",
    "ManualClock",
    "MemoryBackend",
    "RateLimitError",
    "RateLimitInfo",
    "RedisBackend",
    "SlidingWindow",
    "SystemClock",
    "TokenBucket",
    "parse_rate_limit_headers",
]

__version__ = "0.1.0"
