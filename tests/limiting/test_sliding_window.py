"""SlidingWindow behaviour through the public API, exact log and approximate counter.
What every limiter promises alike (refunds, requests that can never go, first come
first served, cancelled acquires) is in ``test_every_limiter.py``.

Every limiter is built with ``make`` (so it runs on every store of the backend matrix)
on the test's :class:`ManualClock`, 1000.0 at the start; a blocking sleep moves it.
1000 is a multiple of the 0.5 s sub-windows the approximate counter cuts a 10 s window
into: [1000, 1000.5), [1000.5, 1001), ... Where several reservations must be pending
at one instant (many workers), a :class:`HeldClock` reads the same time but its sleeps
do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ratelimit import AcquireTimeout, ManualClock, SlidingWindow

from held import held, held_clock

Make = Callable[..., Any]


@pytest.fixture(params=[False, True], ids=["exact", "approximate"])
def approximate(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


# -- the exact log --------------------------------------------------------------------


def test_limit_per_window(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 3, 10)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.advance(9.5)
    assert not limiter.try_acquire()
    clock.advance(0.5)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert clock.sleeps == []


def test_a_grant_counts_until_exactly_one_window_later(make: Make, clock: ManualClock) -> None:
    # Half-open: a grant at t counts in [t, t + window) and no longer at t + window.
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    assert limiter.try_acquire()  # t=1000
    clock.advance(4)
    assert limiter.try_acquire()  # t=1004
    assert not limiter.try_acquire()
    clock.advance(5.75)  # t=1009.75
    assert not limiter.try_acquire()
    clock.advance(0.25)  # t=1010: the t=1000 grant has aged out
    assert limiter.try_acquire()
    assert not limiter.try_acquire()  # t=1004 and t=1010 count
    clock.advance(3.75)  # t=1013.75
    assert not limiter.try_acquire()
    clock.advance(0.25)  # t=1014
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_acquire_waits_until_the_oldest_grant_ages_out(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    assert limiter.acquire() == 0.0
    clock.advance(4)
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == 6.0  # goes at t=1010, when the t=1000 grant ages out
    assert limiter.acquire() == 4.0  # at t=1014, when the t=1004 one does
    assert clock.sleeps == [6.0, 4.0]
    assert clock.now() == 1_014.0


def test_reservations_are_future_dated_fifo_entries(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(held(SlidingWindow), 2, 10)
    assert [limiter.acquire() for _ in range(6)] == [0.0, 0.0, 10.0, 10.0, 20.0, 20.0]
    assert held_clock(limiter).sleeps == [10.0, 10.0, 20.0, 20.0]
    clock.advance(10)  # t=1010: the reservations for 1010 hold the window
    assert not limiter.try_acquire()
    assert limiter.acquire() == 20.0  # t=1030
    clock.advance(20)  # t=1030: the reservation for t=1030 holds one of the two places
    assert [limiter.try_acquire() for _ in range(2)] == [True, False]
    clock.advance(10)  # t=1040: every reservation has aged out
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


def test_weighted_requests(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 10, 10)
    assert limiter.acquire(6) == 0.0
    clock.advance(2)
    assert limiter.acquire(3) == 0.0
    assert not limiter.try_acquire(2)
    assert limiter.try_acquire(1)  # 10 in the window: full
    assert limiter.acquire(5) == 8.0  # t=1010, when the 6 of t=1000 age out
    assert limiter.acquire(4) == 2.0  # t=1012, when the 3 + 1 of t=1002 age out
    assert clock.sleeps == [8.0, 2.0]


def test_a_timed_out_request_consumes_nothing(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    assert [limiter.acquire() for _ in range(2)] == [0.0, 0.0]
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=5)
    assert info.value.retry_after == 10.0
    with pytest.raises(AcquireTimeout) as heavier:
        limiter.acquire(2, timeout=9.5)
    assert heavier.value.retry_after == 10.0
    assert clock.sleeps == []
    assert limiter.acquire(timeout=10) == 10.0
    assert clock.sleeps == [10.0]
    # At t=1010 only the grant just made counts.
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_timedelta_window(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 1, timedelta(milliseconds=500))
    assert limiter.window_seconds == 0.5
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == 0.5


# -- the approximate counter ----------------------------------------------------------
# It counts aligned sub-windows of window / 20 = 0.5 s: a grant at t=1000 counts in
# sub-window [1000, 1000.5) and is counted by every decision up to t=1010.5, one
# sub-window past its window: never early, at most half a second late.


def test_approximate_limit_within_a_window(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 3, 10, approximate=True)
    assert limiter.approximate
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.advance(9.5)
    assert not limiter.try_acquire()


def test_approximate_counts_a_grant_for_its_window_and_at_most_one_sub_window_more(
    make: Make, clock: ManualClock
) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    assert [limiter.try_acquire() for _ in range(2)] == [True, True]  # sub-window [1000, 1000.5)
    clock.advance(10)  # t=1010: still counted, it is the oldest of the 21 sub-windows
    assert not limiter.try_acquire()
    clock.advance(0.25)
    assert not limiter.try_acquire()
    clock.advance(0.25)  # t=1010.5: a new sub-window, the t=1000 grants are out
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


def test_approximate_counts_every_sub_window_of_the_span(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    assert limiter.try_acquire()  # t=1000
    clock.advance(4.2)
    assert limiter.try_acquire()  # t=1004.2, sub-window [1004, 1004.5)
    clock.advance(6.3)  # t=1010.5: the first is out, the second still counts
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    clock.advance(4)  # t=1014.5: the t=1004.2 grant is out too
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_approximate_waits(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    waits = [limiter.acquire() for _ in range(5)]
    # The third goes at t=1010.5, when sub-window [1000, 1000.5) is no longer counted;
    # the fourth with it; the fifth when theirs is not, at t=1021.
    assert waits == [0.0, 0.0, 10.5, 0.0, 10.5]
    assert clock.now() == 1_021.0


def test_approximate_reservations_are_fifo(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(held(SlidingWindow), 4, 10, approximate=True)
    waits = [limiter.acquire() for _ in range(10)]
    assert waits == [0.0] * 4 + [10.5] * 4 + [21.0] * 2


def test_approximate_never_exceeds_the_limit_in_a_sliding_interval(make: Make, clock: ManualClock) -> None:
    # Grants crowded at the end of a window (the two-counter estimate let a third in
    # at t=1015 here): the counter holds them at least as long as the exact log.
    exact: SlidingWindow = make(SlidingWindow, 2, 10)
    counter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    clock.advance(9.75)  # t=1009.75
    assert [exact.try_acquire() for _ in range(2)] == [True, True]
    assert [counter.try_acquire() for _ in range(2)] == [True, True]
    clock.advance(9.875)  # t=1019.625
    assert not exact.try_acquire()
    assert not counter.try_acquire()
    clock.advance(0.125)  # t=1019.75: the exact log lets two in, the counter at t=1020
    assert exact.try_acquire()
    assert not counter.try_acquire()
    clock.advance(0.25)
    assert counter.try_acquire()


def test_approximate_a_timed_out_request_consumes_nothing(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    assert [limiter.acquire() for _ in range(2)] == [0.0, 0.0]
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=10)
    assert info.value.retry_after == 10.5
    assert clock.sleeps == []
    assert limiter.acquire(timeout=10.5) == 10.5


# -- refund (what every limiter's refund does: test_every_limiter.py) ------------------


def test_refund_later_in_the_window(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    assert limiter.try_acquire()  # t=1000
    clock.advance(3)
    assert limiter.try_acquire()  # t=1003
    clock.advance(3)  # t=1006
    limiter.refund()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_refund_after_the_window_gives_nothing_extra(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    assert [limiter.try_acquire() for _ in range(2)] == [True, True]
    clock.advance(10)  # both aged out on their own
    limiter.refund(2)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


def test_approximate_refund_just_after_a_window_edge(make: Make, clock: ManualClock) -> None:
    # Refund within window_seconds of the grant is the documented contract: a refund
    # names no grant, so the counter takes it from the oldest sub-window still counted.
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=True)
    clock.advance(9)  # t=1009
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    clock.advance(1)  # t=1010: both still count
    assert not limiter.try_acquire()
    limiter.refund()  # one of the two t=1009 grants was not used
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_exact_refund_just_after_a_window_edge(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10)
    clock.advance(9)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    clock.advance(1)
    limiter.refund()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


# -- asyncio --------------------------------------------------------------------------


def test_async_twins(make: Make, clock: ManualClock, approximate: bool) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 2, 10, approximate=approximate)
    # The exact log: the third goes at t=1010, when the first two age out, leaving one
    # place. The counter: at t=1010.5, when the sub-window of the first two is no longer
    # counted, leaving one too.
    third, places = (10.5, 1) if approximate else (10.0, 1)

    async def scenario() -> None:
        assert [await limiter.acquire_async() for _ in range(3)] == [0.0, 0.0, third]
        assert clock.sleeps == [third]
        assert [await limiter.try_acquire_async() for _ in range(places + 1)] == [True] * places + [False]
        with pytest.raises(AcquireTimeout):
            await limiter.acquire_async(timeout=1)
        assert clock.sleeps == [third]
        await limiter.refund_async()
        assert await limiter.try_acquire_async()

    asyncio.run(scenario())
