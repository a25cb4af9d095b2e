"""``charge`` and ``settle``: costs known only after the call, on every store.

A charge takes tokens now, never waits and is never refused: later requests wait the
debt off. ``settle(estimate, actual)`` squares an acquired estimate with the real
cost: the difference is refunded or charged. Each limiter is built with ``make``, so
every test runs on memory, fakeredis, a real Redis and a Cluster, on the test's
:class:`ManualClock` (1000.0 at the start; a blocking sleep moves it). Where several
reservations must be pending at one instant, a :class:`HeldClock` reads the same
time but its sleeps do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import AcquireTimeout, Composite, LeakyBucket, ManualClock, SlidingWindow, TokenBucket

from held import held, held_clock

Make = Callable[..., Any]


# -- into debt: later grants wait it off --------------------------------------------------


def test_an_emptied_token_bucket_charged_five_waits_five_seconds_more(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 1)
    assert all(bucket.try_acquire() for _ in range(10))
    bucket.charge(5)
    assert clock.sleeps == []  # a charge never waits
    assert bucket.acquire() == 6.0  # one interval, and the five charged


def test_a_charge_on_a_fresh_bucket_takes_its_burst(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 2)
    bucket.charge(10)
    assert not bucket.try_acquire()
    assert bucket.acquire() == 0.5


def test_a_full_exact_window_charged_three_grants_when_four_have_aged_out(make: Make, clock: ManualClock) -> None:
    window: SlidingWindow = make(SlidingWindow, 10, 60)
    for i in range(10):  # one grant a second, t = 1000 .. 1009: full
        assert window.try_acquire()
        if i < 9:
            clock.advance(1)
    window.charge(3)
    # 13 counted: a grant needs 4 of them gone, the 4th ages out at 1003 + 60.
    assert window.acquire() == 54.0
    assert clock.now() == 1_063.0


def test_a_charged_approximate_window_waits_longer_than_an_uncharged_one(make: Make, clock: ManualClock) -> None:
    charged: SlidingWindow = make(held(SlidingWindow), 10, 60, approximate=True)
    plain: SlidingWindow = make(held(SlidingWindow), 10, 60, approximate=True)
    for window in (charged, plain):
        assert all(window.try_acquire() for _ in range(10))
    clock.advance(30)
    charged.charge(3)
    # Once the full sub-window is no longer counted, the charge's still is.
    plain_wait = plain.acquire(8)
    assert 30 < plain_wait < 35
    assert charged.acquire(8) > plain_wait + 25


def test_a_full_leaky_bucket_takes_the_charge_and_overflows_until_it_drains(make: Make, clock: ManualClock) -> None:
    queue: LeakyBucket = make(held(LeakyBucket), 3, 1)
    assert [queue.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]  # full
    queue.charge(2)  # poured in all the same: five queued
    assert not queue.try_acquire()
    with pytest.raises(AcquireTimeout) as info:
        queue.acquire()
    assert info.value.retry_after == 3.0  # room for one more once two have gone
    clock.advance(3)
    assert queue.acquire() == 2.0  # behind the charge


def test_a_charge_goes_behind_reservations_already_promised(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(held(TokenBucket), 1, 1)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]
    bucket.charge(1)
    assert bucket.acquire() == 4.0  # the promised ones keep their times


# -- while feedback holds the budget -------------------------------------------------------


def test_a_charge_during_a_pause_delays_the_first_grant_after_it(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 5, 1)
    bucket.feedback({"Retry-After": "10"}, status=429)
    bucket.charge(3)
    # Unpaused, one grant at t=1010 and then one a second; three of them were charged.
    assert bucket.acquire() == 13.0


@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "approximate"])
def test_a_charge_during_a_pause_counts_in_the_window_after_it(
    make: Make, clock: ManualClock, approximate: bool
) -> None:
    window: SlidingWindow = make(SlidingWindow, 10, 60, approximate=approximate)
    window.feedback({"Retry-After": "10"}, status=429)
    window.charge(3)
    assert window.acquire() == 10.0
    assert sum(window.try_acquire() for _ in range(10)) == 6  # 10 less the 3 charged and the 1 above


def test_a_charge_counts_against_a_lowered_remaining(make: Make, clock: ManualClock) -> None:
    window: SlidingWindow = make(SlidingWindow, 100, 60)
    window.feedback({"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "8"})
    # 5 over 8 s: one every 1.6 s. The charge takes 3 of them; the 2 left go at 6.4 s
    # and at the reset.
    window.charge(3)
    assert not window.try_acquire()
    assert [window.acquire() for _ in range(2)] == pytest.approx([6.4, 1.6])


# -- withdrawn reservations ----------------------------------------------------------------


def test_a_charge_voids_the_holes_of_withdrawn_reservations(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(held(TokenBucket), 1, 10)
    held_time = held_clock(bucket)

    async def scenario() -> list[float]:
        tasks = [await held_time.start(bucket.acquire_async()) for _ in range(4)]  # at 0, 0.1, 0.2, 0.3
        tasks[2].cancel()  # a hole at 0.2
        with pytest.raises(asyncio.CancelledError):
            await tasks[2]
        await bucket.charge_async(1)  # behind the reservation at 0.3
        later = [await held_time.start(bucket.acquire_async()) for _ in range(2)]
        held_time.release()
        return [await task for task in later]

    # Taking the hole at 0.2 would put the newcomer ahead of the debt: with the grants
    # at 0.1 and 0.3 and the charge, [0.1, 0.3] would hold 4 where 3 fit. Both go
    # after the charge instead.
    assert asyncio.run(scenario()) == pytest.approx([0.5, 0.6])


# -- settle ---------------------------------------------------------------------------------


def test_settle_refunds_what_a_call_did_not_use(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 1)
    bucket.acquire(10)
    bucket.settle(10, 4)
    assert bucket.try_acquire(6)
    assert not bucket.try_acquire(1)
    assert bucket.stats().charged == 0


def test_settle_charges_what_a_call_used_beyond_its_estimate(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 1)
    bucket.acquire(4)
    bucket.settle(4, 10)
    assert not bucket.try_acquire(1)
    assert bucket.acquire() == 1.0
    assert bucket.stats().charged == 6


def test_settle_with_nothing_used_gives_the_whole_estimate_back(make: Make, clock: ManualClock) -> None:
    window: SlidingWindow = make(SlidingWindow, 10, 60)
    window.acquire(8)
    window.settle(8, 0)
    assert window.try_acquire(10)


def test_settle_with_the_estimate_exact_changes_nothing(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 1)
    bucket.acquire(7)
    bucket.settle(7, 7)
    assert bucket.try_acquire(3)
    assert not bucket.try_acquire(1)


def test_the_llm_case_settles_each_member_on_its_own(make: Make, clock: ManualClock) -> None:
    # 3 requests and 100 tokens a minute: reserve one request and the estimate.
    llm: Composite = make(Composite, [TokenBucket(3, 3 / 60), TokenBucket(100, 100 / 60)])
    llm.acquire([1, 50])
    llm.settle([1, 50], [1, 80])  # 30 more tokens than estimated, the same one request
    assert not llm.try_acquire([1, 21])
    assert llm.try_acquire([1, 20])
    assert llm.try_acquire([1, 0])
    assert not llm.try_acquire([1, 0])  # three requests made: the first member is empty
    assert llm.stats().charged == 30


def test_a_composite_charge_of_nothing_on_a_member_records_nothing_there(make: Make, clock: ManualClock) -> None:
    llm: Composite = make(Composite, [TokenBucket(2, 1), TokenBucket(100, 1)])
    llm.charge([0, 100])  # output tokens only: no request
    assert not llm.try_acquire([0, 1])  # the tokens are spent
    assert llm.try_acquire([2, 0])  # both requests are still there


def test_a_composite_settle_may_refund_one_member_and_charge_another(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(5, 1), TokenBucket(10, 1)])
    limiter.acquire([2, 8])
    limiter.settle([2, 8], [5, 4])  # 3 more of the first, 4 fewer of the second
    assert not limiter.try_acquire([1, 0])
    assert limiter.try_acquire([0, 6])
    assert not limiter.try_acquire([0, 1])
    assert limiter.stats().charged == 3


def test_the_async_twins_charge_and_settle(make: Make, clock: ManualClock) -> None:
    bucket: TokenBucket = make(TokenBucket, 10, 1)

    async def scenario() -> float:
        await bucket.acquire_async(5)
        await bucket.settle_async(5, 8)
        await bucket.charge_async(2)
        return await bucket.acquire_async()

    assert asyncio.run(scenario()) == 1.0
    assert bucket.stats().charged == 5


# -- costs beyond the largest request ------------------------------------------------------


def test_a_real_cost_beyond_the_largest_request_is_charged_as_a_longer_debt(make: Make) -> None:
    bucket: TokenBucket = make(TokenBucket, 1000, 1000 / 60)
    bucket.acquire(800)
    bucket.settle(800, 1500)  # the call cost more than the bucket holds: 500 tokens of debt
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(timeout=0)
    assert caught.value.retry_after == pytest.approx(501 / (1000 / 60))
    window: SlidingWindow = make(SlidingWindow, 10, 60)
    window.charge(25)  # one entry heavier than the limit: nothing until it ages out
    with pytest.raises(AcquireTimeout) as caught:
        window.acquire(timeout=0)
    assert caught.value.retry_after == pytest.approx(60)
