"""Limits at the ends of the doubles, on every store (``make``): an allowance smaller
than a rounding is still its capacity, and a debt charged past the largest double is
a debt for ever, not a bucket whole again (Redis once wrote it as 'inf', which its
scripts read back as no state)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import AcquireTimeout, Composite, LeakyBucket, ManualClock, SlidingWindow, TokenBucket

Make = Callable[..., Any]


@pytest.mark.parametrize("capacity", [1e-12, 1e-10, 5e-324])
def test_an_allowance_below_a_rounding_grants_its_capacity_once(make: Make, capacity: float) -> None:
    bucket = make(TokenBucket, capacity, 0)
    assert bucket.try_acquire(capacity)
    assert not bucket.try_acquire(capacity)
    assert bucket.peek(capacity) == math.inf
    bucket.refund(capacity)
    assert bucket.try_acquire(capacity / 2 if capacity / 2 > 0 else capacity)


def test_an_allowance_of_one_token_keeps_its_rounding(make: Make) -> None:
    # Ten tenths make one token, whatever the sum's last bit.
    bucket = make(TokenBucket, 1, 0)
    assert all(bucket.try_acquire(0.1) for _ in range(10))
    assert not bucket.try_acquire(0.1)


@pytest.mark.parametrize(
    ("kind", "args"),
    [(TokenBucket, (1, 1.5e-9)), (LeakyBucket, (1, 1.5e-9)), (TokenBucket, (1e308, 0))],
    ids=["token_bucket", "leaky_bucket", "allowance"],
)
def test_a_debt_charged_past_the_largest_double_lasts(make: Make, clock: ManualClock, kind: Any, args: Any) -> None:
    bucket = make(kind, *args)
    assert bucket.try_acquire(1)
    bucket.charge(1e308)
    bucket.charge(1e308)  # past the largest double: a debt that never ends
    clock.advance(1e8)
    assert not bucket.try_acquire(1)
    assert bucket.peek(1) == math.inf
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(timeout=None)
    assert caught.value.retry_after == math.inf
    bucket.charge(1)  # charged again from there: still the same debt
    assert not bucket.try_acquire(1)
    assert bucket.peek(1) == math.inf


def test_a_composites_allowance_charged_past_the_largest_double_lasts(make: Make, clock: ManualClock) -> None:
    limiter = make(Composite, [SlidingWindow(10, 1), TokenBucket(1e308, 0)])
    limiter.charge([1, 1e308])
    limiter.charge([1, 1e308])
    clock.advance(5)
    assert not limiter.try_acquire([1, 1])
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire([1, 1], timeout=None)
    assert caught.value.retry_after == math.inf
    assert caught.value.failing_limit == 1
    assert limiter.try_acquire([1, 0])


def test_a_request_that_gives_an_allowance_in_debt_nothing_goes_by_it(make: Make) -> None:
    """docs/algorithms.md: in a Composite, a request that gives the allowance 0 tokens
    goes by it; a charge past its capacity once refused those for ever too."""
    limiter = make(Composite, [SlidingWindow(10, 1), TokenBucket(2, 0)])
    limiter.charge([1, 3])  # one token of debt, which no time pays off
    assert limiter.peek([1, 0]) == 0.0
    assert limiter.try_acquire([1, 0])
    assert not limiter.try_acquire([1, 1])
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire([1, 1])
    assert caught.value.failing_limit == 1


@pytest.mark.xfail(
    strict=True,
    reason=(
        "documented (docs/costs.md, a leaky bucket beside a slower limit): a LeakyBucket's gaps grow "
        "with every composite grant another limit delays past its queue, one pair per reservation "
        "queued ahead, and each decision reads them all: TokenBucket(1, 1) with LeakyBucket(1e6, 1e6), "
        "8,000 reservations queued, a 243 KB gaps key and 34 ms of Redis server time per decision "
        "(0.9 ms in process). Dropping gaps is safe (the time counts as queued) but refuses deep "
        "queues a leaky bucket of that capacity admits"
    ),
)
def test_a_leaky_members_gaps_stay_bounded_under_a_deep_queue(redis_client: Any) -> None:
    from ratelimit import RedisBackend

    from conftest import state_keys, unique_name

    clock = ManualClock(1_700_000_000.0)
    name = unique_name("gaps")
    limiter = Composite(
        [TokenBucket(1, 1), LeakyBucket(1e6, 1e6)], backend=RedisBackend(redis_client), name=name, clock=clock
    )
    try:
        for _ in range(300):
            limiter.reserve([1, 1], timeout=1e6)
        gaps = [key for key in state_keys(redis_client, name) if key.endswith(":gaps")]
        assert not gaps or len(redis_client.get(gaps[0]).split()) <= 128
    finally:
        for key in state_keys(redis_client, name):
            redis_client.delete(key)
