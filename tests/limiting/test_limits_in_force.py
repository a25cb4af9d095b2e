"""The limit in force decides: a limit raised at run time grants what the code's would
refuse, a composite's refusal says which of its limits refused, and a token bucket
refilled at an infinite rate never limits (but for a pause fed back).

Built with ``make`` (every store of the backend matrix) on the test's ManualClock.
A limit is changed at run time through its backend (``backend.set_limit``), on
every store (``test_set_limit.py`` holds ``limiter.set_limit`` itself).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# -- a limit at the end of the scale: refilled at an infinite rate ------------------------------


def test_an_infinite_rate_grants_every_request_at_once_whatever_its_weight(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 5, math.inf)
    assert repr(bucket).startswith("TokenBucket(capacity=5, refill_per_sec=inf")
    assert bucket.refill_per_sec == math.inf
    assert [bucket.acquire(1e9) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.try_acquire(7)
    assert bucket.peek(1e12) == 0.0
    assert bucket.reserve(3).wait == 0.0
    with pytest.raises(ValueError, match="tokens must be finite"):
        bucket.acquire(math.inf)
    with pytest.raises(ValueError, match="tokens must be > 0"):
        bucket.try_acquire(0)
    # What a provider says still holds: a pause stops it until the pause ends.
    bucket.feedback({"Retry-After": "10"}, status=429)
    assert bucket.peek(1) == 10.0
    assert not bucket.try_acquire()
    clock.advance(10)
    assert bucket.try_acquire(100)

    async def scenario() -> None:
        assert await bucket.acquire_async(1e6) == 0.0
        assert await bucket.try_acquire_async(1e6)

    asyncio.run(scenario())


def test_an_infinite_rate_in_a_composite_leaves_the_other_limits(make: Make) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, math.inf), SlidingWindow(2, 10)])
    assert [limiter.try_acquire([50, 1]) for _ in range(3)] == [True, True, False]


def test_an_infinite_rate_changed_at_run_time_and_back(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 5, math.inf)
    set_limit = _changeable(bucket)
    assert bucket.try_acquire(50)
    set_limit(bucket.name, rate=1, burst=2, clock=clock)
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(1)
    assert bucket.peek(1) == 1.0
    bucket.backend.reset_limit(bucket.name, clock=clock)
    assert bucket.try_acquire(100)
    assert bucket.peek(100) == 0.0


def test_an_infinite_rate_writes_finite_numbers_and_short_ttls_to_redis(redis_client: Any) -> None:
    from ratelimit import RedisBackend

    from conftest import state_keys, unique_name

    clock = ManualClock(1_700_000_000.0)
    name = unique_name("unlimited")
    bucket = TokenBucket(5, math.inf, backend=RedisBackend(redis_client), name=name, clock=clock)
    for _ in range(100):
        assert bucket.try_acquire(3)
    bucket.feedback({"Retry-After": "10"}, status=429)
    for key in state_keys(redis_client, name):
        assert 0 < redis_client.pttl(key) <= 86_400_000 + 1_000, key
        if redis_client.type(key) == b"string":
            assert math.isfinite(float(redis_client.get(key))), key
    for key in state_keys(redis_client, name):
        redis_client.delete(key)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.0, 1e-6, 0.5, 3.0]),
            st.floats(1e-3, 1e9),
            st.one_of(st.none(), st.none(), st.none(), st.integers(1, 20)),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_an_infinite_rate_refuses_only_inside_a_pause(make: Make, clock: ManualClock, steps: Any) -> None:
    """Any sequence of requests, of any weights, at any times: every one is granted at
    once but those inside a pause fed back, which are refused until it ends."""
    bucket = make(TokenBucket, 2, math.inf)
    paused_until = -math.inf
    for dt, tokens, pause in steps:
        clock.advance(dt)
        if pause is not None:
            bucket.feedback({"Retry-After": str(pause)}, status=429)
            paused_until = max(paused_until, clock.now() + pause)
        assert bucket.try_acquire(tokens) is (clock.now() >= paused_until - 1e-6)


def test_an_infinite_rate_with_priorities_grants_both_lanes_any_weight() -> None:
    bucket = TokenBucket(10, math.inf, low_share=0.5)
    assert bucket.try_acquire(1e9)
    assert bucket.low.try_acquire(1e9)
    for call in (bucket.try_acquire, bucket.low.try_acquire):
        with pytest.raises(ValueError, match="tokens must be finite"):
            call(math.inf)


# -- a limit at the other end: refilled at no rate (an allowance) ----------------------------


def test_an_allowance_grants_its_capacity_once_and_then_never(make: Make, clock: ManualClock) -> None:
    """Go's rate.Limit(0) with a burst: ``capacity`` tokens in all, whatever the time."""
    bucket = make(TokenBucket, 3, 0)
    assert repr(bucket).startswith("TokenBucket(capacity=3, refill_per_sec=0")
    assert bucket.refill_per_sec == 0.0
    assert bucket.peek(3) == 0.0
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.advance(1e8)
    assert not bucket.try_acquire()
    assert bucket.peek(1) == math.inf
    # Nothing can ever come: refused at once, whatever the timeout, never a sleep for ever.
    for timeout in (None, 0, 5.0, 1e12):
        before = clock.now()
        with pytest.raises(AcquireTimeout) as caught:
            bucket.acquire(timeout=timeout)
        assert caught.value.retry_after == math.inf
        assert clock.now() == before
    with pytest.raises(AcquireTimeout) as caught:
        bucket.reserve(1)
    assert caught.value.retry_after == math.inf
    with pytest.raises(ValueError, match="tokens must be <= capacity"):
        bucket.try_acquire(4)

    async def scenario() -> None:
        assert not await bucket.try_acquire_async()
        with pytest.raises(AcquireTimeout) as caught:
            await bucket.acquire_async()
        assert caught.value.retry_after == math.inf

    asyncio.run(scenario())


def test_an_allowance_takes_back_what_is_refunded_up_to_its_capacity(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 4, 0)
    assert bucket.acquire(3) == 0.0
    assert bucket.reserve(1).wait == 0.0
    bucket.refund(2)
    clock.advance(60)
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(0.5)
    bucket.refund(4)
    bucket.refund(4)  # more than was taken: the allowance is whole, never more
    assert bucket.try_acquire(4)
    assert not bucket.try_acquire(1)
    bucket.settle(4, 1)  # an estimate of 4 used 1
    assert bucket.try_acquire(3)
    assert not bucket.try_acquire(1)


def test_an_allowance_keeps_a_pause_fed_back_and_loses_nothing_to_it(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 5, 0)
    assert bucket.try_acquire(2)
    bucket.feedback({"Retry-After": "10"}, status=429)
    assert bucket.peek(1) == 10.0
    assert not bucket.try_acquire()
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(timeout=1)
    assert caught.value.retry_after == 10.0
    bucket.refund(1)  # the refused call's token: it counts, pause or not
    clock.advance(10)
    assert [bucket.try_acquire() for _ in range(5)] == [True, True, True, True, False]


def test_an_allowance_keeps_a_providers_count_as_a_pace(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 10, 0)
    # Two left in the next 4 s: spread over them, and the allowance still counts.
    bucket.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "4"}, status=200)
    assert bucket.acquire(timeout=None) == pytest.approx(2.0)
    assert bucket.acquire(timeout=None) == pytest.approx(2.0)
    assert bucket.acquire(8) == 0.0
    assert not bucket.try_acquire()


def test_an_allowance_in_a_composite_refuses_for_ever_naming_itself(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [SlidingWindow(10, 1), TokenBucket(2, 0)])
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    clock.advance(5)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire()
    assert caught.value.retry_after == math.inf
    assert caught.value.failing_limit == 1
    assert limiter.try_acquire([1, 0])  # a request the allowance does not weigh on
    limiter.refund([1, 1])
    assert limiter.try_acquire()


def test_an_allowance_per_key_is_one_allowance_per_key(make: Make) -> None:
    bucket = make(TokenBucket, 2, 0)
    first, second = bucket.for_key("tenant-a"), bucket.for_key("tenant-b")
    assert [first.try_acquire() for _ in range(3)] == [True, True, False]
    assert [second.try_acquire() for _ in range(3)] == [True, True, False]
    assert not bucket.for_key("tenant-a").try_acquire()


def test_an_allowance_changed_at_run_time_and_back(make: Make, clock: ManualClock) -> None:
    """A rate set at run time refills what was spent; back at no rate, what is still
    owed then is spent for good. A run-time rate of 0 is refused: the bounds of a
    change (``MIN_SET``) hold for every kind, and a window's limit would be 0."""
    bucket = make(TokenBucket, 4, 0)
    set_limit = _changeable(bucket)
    assert bucket.try_acquire(4)
    with pytest.raises(ValueError, match=r"rate must be > 0 at run time .*got 0: a rate of 0 is set in the code"):
        set_limit(bucket.name, rate=0, clock=clock)
    set_limit(bucket.name, rate=1, clock=clock)
    assert bucket.peek(1) == pytest.approx(1.0)  # the 4 spent are owed, refilled at 1/s
    clock.advance(1.5)
    assert bucket.try_acquire(1)
    bucket.backend.reset_limit(bucket.name, clock=clock)
    # 3.5 owed at the reset: spent for good, half a token left.
    assert bucket.try_acquire(0.5)
    assert not bucket.try_acquire(0.5)
    set_limit(bucket.name, burst=6, clock=clock)  # a larger allowance, the same spent
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(0.5)


def test_an_allowance_stays_in_redis_as_a_finite_number(redis_client: Any) -> None:
    from ratelimit import RedisBackend

    from conftest import state_keys, unique_name

    clock = ManualClock(1_700_000_000.0)
    name = unique_name("allowance")
    bucket = TokenBucket(5, 0, backend=RedisBackend(redis_client), name=name, clock=clock)
    assert bucket.try_acquire(3)
    bucket.feedback({"Retry-After": "10"}, status=429)
    state = [key for key in state_keys(redis_client, name) if key.endswith(":token_bucket")]
    assert state
    assert float(redis_client.get(state[0])) == 3.0
    assert redis_client.pttl(state[0]) > 1e12  # kept as long as any store keeps anything
    for key in state_keys(redis_client, name):
        if redis_client.type(key) == b"string":
            assert math.isfinite(float(redis_client.get(key).split()[0])), key
    for key in state_keys(redis_client, name):
        redis_client.delete(key)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.0, 1e-6, 0.5, 3.0, 1e6]),
            st.sampled_from([0.25, 1.0, 1.0, 2.0, 3.0]),
            st.sampled_from(["try", "acquire", "reserve", "refund", "charge", "pause", "pace"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_an_allowance_never_grants_more_than_its_capacity_in_all(make: Make, clock: ManualClock, steps: Any) -> None:
    """Any sequence of requests, give-backs, charges and feedback at any times: what was
    granted or charged, less what was given back, never passes the capacity at a grant."""
    capacity = 5.0
    bucket = make(TokenBucket, capacity, 0)
    held = 0.0  # granted, less given back (a refund gives back at most what is held)
    for dt, tokens, what in steps:
        clock.advance(dt)
        granted = False
        if what == "try":
            granted = bucket.try_acquire(tokens)
        elif what in ("acquire", "reserve"):
            refused: list[float] = []
            try:
                if what == "acquire":
                    bucket.acquire(tokens, timeout=None)
                else:
                    bucket.reserve(tokens)
                granted = True
            except AcquireTimeout as exc:
                refused.append(exc.retry_after)
            # Refused for ever, or until a pause fed back ends: never a wait for ever.
            assert all(after == math.inf or after <= 10.0 for after in refused)
        elif what == "refund":
            back = min(tokens, held)
            if back > 0:
                bucket.refund(back)
                held -= back
        elif what == "charge":
            bucket.charge(tokens)
            held += tokens
        elif what == "pause":
            bucket.feedback({"Retry-After": "10"}, status=429)
        else:
            bucket.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "6"}, status=200)
        if granted:
            held += tokens
            # (A charge may spend past the capacity; no grant is made from there.)
            assert held <= capacity + 1e-9


def test_an_allowances_pause_and_spent_tokens_are_what_inspect_says(redis_client: Any) -> None:
    from ratelimit import RedisBackend

    from conftest import state_keys, unique_name

    name = unique_name("allowance")
    backend = RedisBackend(redis_client)
    bucket = TokenBucket(5, 0, backend=backend, name=name)
    assert bucket.try_acquire(5)
    bucket.feedback({"Retry-After": "30"}, status=429)
    seen = backend.inspect(name)
    assert seen.effective == {"capacity": 5.0, "refill_per_sec": 0.0}
    assert seen.wait_for_one == math.inf
    assert seen.paused_for is not None
    assert 25 < seen.paused_for <= 30
    for key in state_keys(redis_client, name):
        redis_client.delete(key)
