"""The public surface: exported names, the shared interface, and argument checks."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

import ratelimit
from ratelimit import (
    Acquirer,
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    LeakyBucket,
    MemoryBackend,
    RateLimitError,
    SlidingWindow,
    TokenBucket,
)

PUBLIC = {
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
}


def test_exports_are_exactly_the_public_names_sorted() -> None:
    assert set(ratelimit.__all__) == PUBLIC
    assert ratelimit.__all__ == sorted(ratelimit.__all__)
    for name in ratelimit.__all__:
        assert getattr(ratelimit, name) is not None


def test_every_limiter_is_an_acquirer() -> None:
    limiters = [
        TokenBucket(1, 1),
        LeakyBucket(1, 1),
        SlidingWindow(1, 1),
        SlidingWindow(1, 1, approximate=True),
        Composite([TokenBucket(1, 1)]),
    ]
    for limiter in limiters:
        assert isinstance(limiter, Acquirer)


def test_exception_tree() -> None:
    assert issubclass(AcquireTimeout, RateLimitError)
    assert issubclass(AcquireTimeout, TimeoutError)
    assert issubclass(BackendUnavailable, RateLimitError)
    assert AcquireTimeout(2.5).retry_after == 2.5


BAD_CONSTRUCTORS: list[tuple[Any, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    (TokenBucket, (0, 1), {}, ValueError, "capacity must be > 0 and finite, got 0"),
    (TokenBucket, (-1, 1), {}, ValueError, "capacity must be > 0 and finite, got -1"),
    (TokenBucket, (math.nan, 1), {}, ValueError, "capacity must be a number, got nan"),
    (TokenBucket, (math.inf, 1), {}, ValueError, "capacity must be > 0 and finite, got inf"),
    (TokenBucket, ("10", 1), {}, TypeError, "capacity must be a number, got str '10'"),
    (TokenBucket, (True, 1), {}, TypeError, "capacity must be a number, got bool True"),
    (TokenBucket, (1, 0), {}, ValueError, "refill_per_sec must be > 0 and finite, got 0"),
    (TokenBucket, (1, None), {}, TypeError, "refill_per_sec must be a number, got NoneType None"),
    (LeakyBucket, (1, -2.5), {}, ValueError, "leak_per_sec must be > 0 and finite, got -2.5"),
    (LeakyBucket, ([1], 1), {}, TypeError, "capacity must be a number, got list [1]"),
    (SlidingWindow, (0, 1), {}, ValueError, "limit must be > 0 and finite, got 0"),
    (SlidingWindow, (1, timedelta(0)), {}, ValueError, "window_seconds must be > 0 and finite, got 0.0"),
    (SlidingWindow, (1, "1m"), {}, TypeError, "window_seconds must be a number, got str '1m'"),
    (SlidingWindow, (1, 1), {"approximate": "yes"}, TypeError, "approximate must be a bool, got 'yes'"),
    (TokenBucket, (1, 1), {"name": ""}, ValueError, "name must be 1 to 200 characters, got ''"),
    (TokenBucket, (1, 1), {"name": "x" * 201}, ValueError, "name must be 1 to 200 characters"),
    (TokenBucket, (1, 1), {"name": 7}, TypeError, "name must be a str, got int 7"),
    (TokenBucket, (1, 1), {"clock": "now"}, TypeError, "clock must provide now(), sleep() and sleep_async()"),
    (TokenBucket, (1, 1), {"backend": object()}, TypeError, "backend must be a MemoryBackend or RedisBackend"),
    (Composite, ([],), {}, ValueError, "limits must name at least one limiter, got an empty sequence"),
    (Composite, (TokenBucket(1, 1),), {}, TypeError, "limits must be a sequence of limiters"),
    (Composite, ([TokenBucket(1, 1), "x"],), {}, TypeError, "limits[1] must be a TokenBucket, LeakyBucket"),
]


@pytest.mark.parametrize(("cls", "args", "kwargs", "error", "message"), BAD_CONSTRUCTORS)
def test_constructors_name_the_bad_argument_and_value(
    cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        cls(*args, **kwargs)
    assert message in str(caught.value)


BAD_CALLS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"tokens": 0}, ValueError, "tokens must be > 0, got 0"),
    ({"tokens": -1}, ValueError, "tokens must be > 0, got -1"),
    ({"tokens": 11}, ValueError, "tokens must be <= capacity (10), got 11: such a request could never be granted"),
    ({"tokens": math.nan}, ValueError, "tokens must be a number, got nan"),
    ({"tokens": "1"}, TypeError, "tokens must be a number, got str '1'"),
    ({"tokens": True}, TypeError, "tokens must be a number, got bool True"),
    ({"timeout": -1}, ValueError, "timeout must be >= 0 or None, got -1"),
    ({"timeout": "5"}, TypeError, "timeout must be a number, got str '5'"),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_CALLS)
def test_acquire_names_the_bad_argument_and_value(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    limiter = TokenBucket(10, 1)
    with pytest.raises(error) as caught:
        limiter.acquire(**kwargs)
    assert message in str(caught.value)
    # Nothing was consumed by the bad call.
    assert limiter.try_acquire(10)


def test_composite_tokens_must_match_the_members() -> None:
    limiter = Composite([TokenBucket(5, 1), SlidingWindow(3, 1)])
    with pytest.raises(ValueError, match=r"tokens must give one number per limit \(2\), got \[1\]"):
        limiter.acquire([1])
    with pytest.raises(ValueError, match=r"tokens must be <= limit \(3\), got 4"):
        limiter.acquire([1, 4])


def test_a_shared_backend_needs_a_name() -> None:
    class SharedBackend(MemoryBackend):
        shared = True

    with pytest.raises(ValueError, match="name is required with a shared backend"):
        TokenBucket(1, 1, backend=SharedBackend())


def test_timeout_accepts_a_timedelta() -> None:
    limiter = TokenBucket(1, 1)
    assert limiter.try_acquire()
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(timeout=timedelta(milliseconds=100))
    assert 0.9 < caught.value.retry_after <= 1.0
