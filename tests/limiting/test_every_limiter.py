"""What every limiter promises alike: a token bucket, a leaky bucket, an exact and an
approximate sliding window, one test per promise, each limiter with its own figures.

The promises: a refund lets the next request go, and never makes room the limit does
not have; a request that can never go, or is not a request, raises ``ValueError`` and
takes nothing; requests made at one instant are served first come, first served, the
asyncio ones too; a cancelled asyncio acquire gives its place back, wherever it is in
the queue. What only one limiter does (a burst, a queue that overflows, a
window's edges) is in its own module. Limiters are built with ``make`` (every store
of the backend matrix) on the test's :class:`ManualClock` (1000.0 at the start; a
blocking sleep moves it); where several reservations must be pending at one instant,
a :class:`HeldClock` reads the same time but its sleeps do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ratelimit import AcquireTimeout, LeakyBucket, ManualClock, SlidingWindow, TokenBucket

from held import held, held_clock

Make = Callable[..., Any]


@dataclass(frozen=True)
class Limit:
    """A limiter to build (``cls(*args, **kwargs)``) and how many try_acquires of one
    token it grants at once when new (``room``): a leaky bucket grants one, then
    spaces the rest."""

    cls: type[Any]
    args: tuple[float, ...]
    room: int
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, make: Make, *, hold: bool = False) -> Any:
        return make(held(self.cls) if hold else self.cls, *self.args, **self.kwargs)


TOKEN = Limit(TokenBucket, (3, 1), room=3)
LEAKY = Limit(LeakyBucket, (3, 1), room=1)
EXACT = Limit(SlidingWindow, (2, 10), room=2)
APPROXIMATE = Limit(SlidingWindow, (2, 10), room=2, kwargs={"approximate": True})
EVERY = {"token_bucket": TOKEN, "leaky_bucket": LEAKY, "exact_window": EXACT, "approximate_window": APPROXIMATE}


def tries(limiter: Any, n: int) -> list[bool]:
    return [limiter.try_acquire() for _ in range(n)]


# -- refunds -----------------------------------------------------------------------------


def give_back(limiter: Any, tokens: float, way: str) -> None:
    if way == "sync":
        limiter.refund(tokens)
    else:
        asyncio.run(limiter.refund_async(tokens))


@pytest.mark.parametrize("way", ["sync", "async"])
@pytest.mark.parametrize("limit", list(EVERY.values()), ids=list(EVERY))
def test_refund_makes_the_next_try_succeed(make: Make, clock: ManualClock, limit: Limit, way: str) -> None:
    """A token given back (``refund`` or ``refund_async``) goes to the next request at
    once, and only that one."""
    limiter = limit.build(make)
    assert tries(limiter, limit.room + 1) == [True] * limit.room + [False]
    give_back(limiter, 1, way)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert clock.sleeps == []


@pytest.mark.parametrize("way", ["sync", "async"])
@pytest.mark.parametrize(
    "limit", [TOKEN, EXACT, APPROXIMATE], ids=["token_bucket", "exact_window", "approximate_window"]
)
def test_a_refund_never_makes_room_beyond_the_limit(make: Make, clock: ManualClock, limit: Limit, way: str) -> None:
    """Given back before anything was granted, or more than was: the limit still grants
    its own room and no more. (A leaky bucket's twin, whose queue cannot go below
    empty, is in its module.)"""
    limiter = limit.build(make)
    give_back(limiter, limit.room, way)  # nothing granted yet: nothing to give back
    assert tries(limiter, limit.room + 1) == [True] * limit.room + [False]
    give_back(limiter, limit.room, way)
    give_back(limiter, limit.room, way)
    assert tries(limiter, limit.room + 1) == [True] * limit.room + [False]


# -- requests that can never go ------------------------------------------------------------

# (limit, more tokens than it ever holds, the word the error names it by)
NEVER = {
    "token_bucket": (TOKEN, 4.0, "capacity"),
    "leaky_bucket": (LEAKY, 3.5, "capacity"),
    "exact_window": (EXACT, 3.0, "limit"),
    "approximate_window": (APPROXIMATE, 3.0, "limit"),
}


@pytest.mark.parametrize(("limit", "too_many", "word"), list(NEVER.values()), ids=list(NEVER))
@pytest.mark.parametrize("not_a_request", [0, -1])
def test_requests_that_can_never_be_granted_raise_value_error_and_take_nothing(
    make: Make, limit: Limit, too_many: float, word: str, not_a_request: int
) -> None:
    limiter = limit.build(make)
    with pytest.raises(ValueError, match=word):
        limiter.acquire(too_many)
    with pytest.raises(ValueError, match="tokens"):
        limiter.try_acquire(not_a_request)
    with pytest.raises(ValueError, match="timeout"):
        limiter.acquire(timeout=-1)
    # Nothing was taken by the rejected calls: the whole limit goes at once.
    whole = limit.args[0]
    assert limiter.try_acquire(whole)


# -- first come, first served -------------------------------------------------------------

# (limit, requests made at one instant, the wait each is told, in order)
QUEUED = {
    "token_bucket": (Limit(TokenBucket, (3, 1), room=3), 7, [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]),
    "leaky_bucket": (Limit(LeakyBucket, (5, 4), room=1), 5, [0.0, 0.25, 0.5, 0.75, 1.0]),
}


@pytest.mark.parametrize(("limit", "count", "waits"), list(QUEUED.values()), ids=list(QUEUED))
def test_reservations_at_one_instant_are_fifo_and_evenly_spaced(
    make: Make, clock: ManualClock, limit: Limit, count: int, waits: list[float]
) -> None:
    limiter = limit.build(make, hold=True)
    assert [limiter.acquire() for _ in range(count)] == waits
    assert held_clock(limiter).sleeps == [wait for wait in waits if wait > 0]


# (limit, asyncio tasks started at one instant, the wait each is told, in order)
ARRIVALS = {
    "token_bucket": (Limit(TokenBucket, (3, 1), room=3), 6, [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]),
    "leaky_bucket": (Limit(LeakyBucket, (4, 2), room=1), 4, [0.0, 0.5, 1.0, 1.5]),
}


@pytest.mark.parametrize(("limit", "count", "waits"), list(ARRIVALS.values()), ids=list(ARRIVALS))
def test_async_tasks_reserve_in_arrival_order(
    make: Make, clock: ManualClock, limit: Limit, count: int, waits: list[float]
) -> None:
    limiter = limit.build(make, hold=True)
    held_time = held_clock(limiter)

    async def scenario() -> list[float]:
        tasks = [await held_time.start(limiter.acquire_async()) for _ in range(count)]
        assert [task.done() for task in tasks] == [wait == 0 for wait in waits]
        held_time.release()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(scenario()) == waits
    assert held_time.sleeps == [wait for wait in waits if wait > 0]


# -- a cancelled asyncio acquire ----------------------------------------------------------

# (limit, the wait of the first request past its room, places once that wait has passed)
CANCELLED = {
    "token_bucket": (TOKEN, 1.0, 1),
    "leaky_bucket": (LEAKY, 1.0, 1),
    "exact_window": (EXACT, 10.0, 2),
    "approximate_window": (APPROXIMATE, 10.5, 2),
}


@pytest.mark.parametrize(("limit", "wait", "places"), list(CANCELLED.values()), ids=list(CANCELLED))
def test_cancelled_acquire_async_gives_its_reservation_back(
    make: Make, clock: ManualClock, limit: Limit, wait: float, places: int
) -> None:
    limiter = limit.build(make, hold=True)
    held_time = held_clock(limiter)

    async def scenario() -> None:
        assert [await limiter.try_acquire_async() for _ in range(limit.room)] == [True] * limit.room
        task = await held_time.start(limiter.acquire_async())
        assert not task.done()
        assert held_time.sleeps == [wait]  # reserved, now asleep
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The place is free again: the same request gets the same answer.
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(timeout=wait / 2)
        assert info.value.retry_after == wait
        clock.advance(wait)
        # Had the reservation stayed, it would hold one of these places.
        assert [await limiter.try_acquire_async() for _ in range(places + 1)] == [True] * places + [False]

    asyncio.run(scenario())


# (limit: one grant per `interval`)
ONE_AT_A_TIME = {
    "token_bucket": (Limit(TokenBucket, (1, 1), room=1), 1.0),
    "exact_window": (Limit(SlidingWindow, (1, 10), room=1), 10.0),
}


@pytest.mark.parametrize(("limit", "interval"), list(ONE_AT_A_TIME.values()), ids=list(ONE_AT_A_TIME))
def test_a_cancelled_middle_reservation_is_taken_at_its_own_time(
    make: Make, clock: ManualClock, limit: Limit, interval: float
) -> None:
    """The next request takes the withdrawn place, one interval from the grants on
    either side; the one after it queues behind the last. (A leaky bucket's twin, whose
    queue is full again once the place is taken, is in its module.)"""
    limiter = limit.build(make, hold=True)
    held_time = held_clock(limiter)

    async def scenario() -> list[float]:
        first = await held_time.start(limiter.acquire_async())  # +0
        middle = await held_time.start(limiter.acquire_async())  # +1 interval
        last = await held_time.start(limiter.acquire_async())  # +2 intervals
        assert first.done()
        assert held_time.sleeps == [interval, 2 * interval]
        middle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await middle
        taken = await held_time.start(limiter.acquire_async())
        after = await held_time.start(limiter.acquire_async())
        held_time.release()
        await last
        return [await taken, await after]

    assert asyncio.run(scenario()) == [interval, 3 * interval]
