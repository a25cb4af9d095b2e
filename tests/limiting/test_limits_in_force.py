"""The limit in force decides: a limit raised at run time grants what the code's would
refuse, and a composite's refusal says which of its limits refused.

Built with ``make`` (every store of the backend matrix) on the test's ManualClock.
Only the shared stores change a limit at run time (``backend.set_limit``); in
process the code's limit is the one in force.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import (
    AcquireTimeout,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    SlidingWindow,
    TokenBucket,
)

Make = Callable[..., Any]


def _changeable(limiter: Any) -> Any:
    set_limit = getattr(limiter.backend, "set_limit", None)
    if set_limit is None:
        pytest.skip("no change at run time in process: the code's limit is the one in force")
    return set_limit


# -- a limit raised at run time -------------------------------------------------------------


def test_a_raised_burst_grants_a_request_larger_than_the_codes(make: Make, clock: ManualClock) -> None:
    """Go's SetBurst, Guava's setRate: a request the limit in force holds is granted,
    however the code was configured."""
    bucket = make(TokenBucket, 2, 5)
    set_limit = _changeable(bucket)
    set_limit(bucket.name, burst=4, clock=clock)
    assert bucket.peek(4) == 0.0
    assert bucket.reserve(4).wait == 0.0
    assert bucket.acquire(4) == pytest.approx(0.8)  # 4 tokens at 5/s
    bucket.settle(4, 4)
    clock.advance(0.8)
    assert bucket.try_acquire(4)
    assert not bucket.try_acquire(4)

    async def later() -> float:
        wait: float = await bucket.acquire_async(4, timeout=1)
        return wait

    assert asyncio.run(later()) == pytest.approx(0.8)


def test_a_request_no_limit_in_force_holds_is_a_value_error(make: Make, clock: ManualClock) -> None:
    """Larger than the code's limit with no change, or larger than the code's and the
    change's: ValueError, nothing recorded, as before any change existed."""
    bucket = make(TokenBucket, 2, 5)
    for call in (bucket.acquire, bucket.try_acquire, bucket.reserve, bucket.peek):
        with pytest.raises(ValueError, match=r"tokens must be <= capacity \(2\)"):
            call(4)
    with pytest.raises(ValueError, match="tokens must be > 0"):
        bucket.acquire(0)
    set_limit = getattr(bucket.backend, "set_limit", None)
    if set_limit is not None:
        set_limit(bucket.name, burst=4, clock=clock)
        with pytest.raises(ValueError, match=r"tokens must be <= capacity \(2\), or the limit a change"):
            bucket.acquire(5)
        with pytest.raises(ValueError, match="set_limit"):
            asyncio.run(bucket.try_acquire_async(5))
    assert bucket.try_acquire(2)  # nothing was taken


def test_a_lowered_limit_refuses_for_ever_what_only_the_codes_held(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 4, 5)
    set_limit = _changeable(bucket)
    set_limit(bucket.name, burst=2, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(3)
    assert caught.value.retry_after == math.inf
    assert bucket.try_acquire(2)


@pytest.mark.parametrize("kind", [LeakyBucket, SlidingWindow])
def test_the_other_kinds_follow_the_limit_in_force(make: Make, clock: ManualClock, kind: Any) -> None:
    limiter = make(kind, 2, 1)
    set_limit = _changeable(limiter)
    if kind is SlidingWindow:
        set_limit(limiter.name, rate=4, clock=clock)  # a window's limit: rate x its length
    else:
        set_limit(limiter.name, burst=4, clock=clock)
    assert limiter.try_acquire(3)
    with pytest.raises(ValueError, match="set_limit"):
        limiter.try_acquire(5)


# -- which limit of a composite refused -------------------------------------------------------


def test_a_composites_refusal_names_the_limit_that_refused(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(5, 1), SlidingWindow(2, 10), LeakyBucket(3, 1)])
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == 1.0  # the leaky bucket's spacing
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(timeout=1)
    assert (caught.value.failing_limit, caught.value.retry_after) == (1, 9.0)  # the window, full until 1010
    with pytest.raises(AcquireTimeout) as caught:
        limiter.reserve([5, 0, 1], timeout=0.5)
    assert caught.value.failing_limit == 0  # the bucket: 4 tokens left of 5
    clock.advance(9)

    async def scenario() -> None:
        assert [(await limiter.reserve_async([0, 0, 1])).wait for _ in range(3)] == [0.0, 1.0, 2.0]  # queue full
        with pytest.raises(AcquireTimeout) as caught:
            await limiter.acquire_async([0, 1, 1])
        assert caught.value.failing_limit == 2  # the leaky bucket overflows
        with pytest.raises(AcquireTimeout) as caught:
            await limiter.reserve_async([1, 2, 0], timeout=0)
        assert caught.value.failing_limit == 1

    asyncio.run(scenario())


def test_a_single_limiters_refusal_names_none(make: Make) -> None:
    bucket = make(TokenBucket, 1, 1)
    assert bucket.try_acquire()
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(timeout=0)
    assert caught.value.failing_limit is None


def test_a_holds_refusal_names_the_slot_or_the_rate(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [ConcurrencyLimit(1), TokenBucket(1, 1)])
    with limiter.hold():
        with pytest.raises(AcquireTimeout) as caught, limiter.hold(timeout=0):
            pass
        assert caught.value.failing_limit == 0
    with pytest.raises(AcquireTimeout) as caught, limiter.hold(timeout=0):
        pass
    assert caught.value.failing_limit == 1
