"""Quota through the public API: calendar periods of a time zone, on every store.

Times are Unix times of a :class:`ManualClock` started at a known local moment (a
blocking sleep moves it). Through Redis the clock's time is sent as the script's
``now`` (how every script is driven in tests); the server's own clock is used where no
clock is given, as in production.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import fakeredis
import pytest
import redis

from ratelimit import (
    AcquireTimeout,
    Composite,
    ManualClock,
    MemoryBackend,
    Quota,
    RedisBackend,
    SystemClock,
    TokenBucket,
)
from ratelimit._algorithms.quota import Calendar
from ratelimit._stores.redis import handles

from conftest import unique_name

Make = Callable[..., Any]

NEW_YORK = ZoneInfo("America/New_York")


def at(tz: str, *when: int) -> float:
    """The Unix time of local time ``when`` (year, month, day, hour, minute...) in ``tz``."""
    year, month, day, hour, minute, second = (*when, 0, 0, 0)[:6]
    return datetime(year, month, day, hour, minute, second, tzinfo=ZoneInfo(tz)).timestamp()


def spend(limiter: Quota, tokens: int) -> None:
    for _ in range(tokens):
        assert limiter.try_acquire()
    assert not limiter.try_acquire()


# -- the boundaries, on every store -------------------------------------------------


def test_a_day_spent_at_half_past_midnight_when_clocks_spring_forward_comes_back_22_and_a_half_hours_later(
    make: Make,
) -> None:
    # 2026-03-08, New York: 02:00 EST becomes 03:00 EDT, a day of 23 hours.
    clock = ManualClock(at("America/New_York", 2026, 3, 8, 0, 30))
    limiter: Quota = make(Quota, 10, "day", tz="America/New_York", clock=clock)
    spend(limiter, 10)
    assert limiter.peek() == 22.5 * 3600
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=3600)
    assert info.value.retry_after == 22.5 * 3600
    assert limiter.acquire() == 22.5 * 3600
    assert clock.now() == at("America/New_York", 2026, 3, 9, 0, 0)
    spend(limiter, 9)  # the new day's: the one acquired and nine more


def test_a_day_when_clocks_fall_back_lasts_25_hours(make: Make) -> None:
    clock = ManualClock(at("America/New_York", 2026, 11, 1, 0, 0))
    limiter: Quota = make(Quota, 3, "day", tz="America/New_York", clock=clock)
    spend(limiter, 3)
    assert limiter.peek() == 25 * 3600


def test_a_week_runs_from_monday_midnight_local_time(make: Make) -> None:
    # Sunday 2026-03-15 23:59 in Tokyo: the ISO week ends a minute later.
    clock = ManualClock(at("Asia/Tokyo", 2026, 3, 15, 23, 59))
    limiter: Quota = make(Quota, 2, "week", tz="Asia/Tokyo", clock=clock)
    spend(limiter, 2)
    assert limiter.acquire() == 60.0
    assert datetime.fromtimestamp(clock.now(), ZoneInfo("Asia/Tokyo")) == datetime(
        2026, 3, 16, tzinfo=ZoneInfo("Asia/Tokyo")
    )
    # Monday: a whole week to go once this one is spent.
    assert limiter.try_acquire()
    assert limiter.peek() == 7 * 86400


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ((2026, 2, 10, 12, 0), (2026, 3, 1)),  # February, 28 days
        ((2028, 2, 29, 23, 0), (2028, 3, 1)),  # a leap day
        ((2026, 12, 31, 23, 30), (2027, 1, 1)),  # December into January
    ],
)
def test_a_month_ends_at_the_first_of_the_next(make: Make, start: tuple[int, ...], end: tuple[int, ...]) -> None:
    clock = ManualClock(at("Europe/Paris", *start))
    limiter: Quota = make(Quota, 5, "month", tz="Europe/Paris", clock=clock)
    spend(limiter, 5)
    assert limiter.peek() == at("Europe/Paris", *end) - clock.now()


def test_reservations_queue_into_the_next_periods_in_arrival_order(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 30))
    limiter: Quota = make(Quota, 2, "minute", clock=clock)
    waits = [limiter.reserve().wait for _ in range(6)]
    assert waits == [0.0, 0.0, 30.0, 30.0, 90.0, 90.0]
    # Two periods ahead is as far as a queue reaches.
    with pytest.raises(AcquireTimeout) as info:
        limiter.reserve(timeout=3600)
    assert info.value.retry_after == 150.0


def test_a_cancelled_reservation_and_a_refund_give_back_to_their_own_period(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 0))
    limiter: Quota = make(Quota, 2, "minute", clock=clock)
    spend(limiter, 2)
    limiter.refund(1)
    assert limiter.try_acquire()  # this minute's token, given back
    assert not limiter.try_acquire()
    ahead = limiter.reserve()
    assert ahead.wait == 60.0
    ahead.cancel()
    assert limiter.reserve().wait == 60.0  # the next minute's place, free again
    assert limiter.reserve().wait == 60.0
    assert limiter.peek() == 120.0


def test_a_spent_quota_refuses_try_acquire_and_a_larger_request_raises(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 0))
    limiter: Quota = make(Quota, 3, "hour", clock=clock)
    assert limiter.try_acquire(3)
    assert not limiter.try_acquire()
    with pytest.raises(ValueError, match="limit"):
        limiter.try_acquire(4)
    clock.advance(3600)
    assert limiter.try_acquire(3)


def test_a_429_pauses_it_and_the_periods_count_goes_on_after_it(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 0))
    limiter: Quota = make(Quota, 100, "day", clock=clock)
    assert limiter.try_acquire(10)
    # A pause of a minute: the day's own count goes on after it.
    limiter.feedback({"Retry-After": "60"}, status=429)
    assert limiter.peek() == 60.0
    clock.advance(60)
    assert limiter.try_acquire(90)
    assert not limiter.try_acquire()
    # A pause past the day's end: the next day starts when it ends, whole.
    clock.advance(at("UTC", 2026, 5, 4, 23, 30) - clock.now())
    limiter.refund(50)
    limiter.feedback({"Retry-After": "3600"}, status=429)
    assert limiter.peek() == 3600.0
    clock.advance(3600)
    assert limiter.try_acquire(100)
    assert not limiter.try_acquire()


# -- in a composite -------------------------------------------------------------------


def test_inside_a_composite_it_caps_a_per_second_limit_exactly(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 0))
    limiter: Composite = make(Composite, [TokenBucket(5, 5), Quota(100, "minute")], clock=clock)
    granted: Counter[int] = Counter()
    per_second: Counter[int] = Counter()
    while True:
        limiter.acquire()
        if clock.now() >= at("UTC", 2026, 5, 4, 10, 3, 0):
            break
        granted[int(clock.now() // 60)] += 1
        per_second[int(clock.now())] += 1
    # Every minute holds exactly the quota, sent at the bucket's pace from its start.
    assert list(granted.values()) == [100, 100, 100]
    assert max(per_second.values()) <= 5 + 5
    assert all(n <= 5 for t, n in per_second.items() if t % 60)


def test_a_composite_with_a_quota_keeps_time_on_the_wall_clock() -> None:
    limiter = Composite([TokenBucket(5, 5), Quota(1, "day")])
    assert limiter.clock.now() == pytest.approx(time.time(), abs=5)
    assert limiter.try_acquire()
    assert 0 < limiter.peek([0, 1]) <= 86400 + 3600


# -- through Redis, on the server's clock --------------------------------------------


def test_through_redis_the_period_is_the_servers_whatever_the_clients_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # No clock given: the script reads TIME. The client's own clock, off by a quarter of
    # a period, only picks which boundaries it sends: the server's period decides.
    server = fakeredis.FakeRedis()
    skewed = SimpleNamespace(time=lambda: time.time() + 15 * 60.0, monotonic=time.monotonic)
    monkeypatch.setattr(handles, "time", skewed)
    limiter = Quota(1, "hour", backend=RedisBackend(server), name=unique_name())
    assert limiter.try_acquire()
    end = Calendar("hour", "UTC").period(time.time())[1]
    assert limiter.peek() == pytest.approx(end - time.time(), abs=2.0)
    monkeypatch.undo()
    assert limiter.peek() == pytest.approx(end - time.time(), abs=2.0)


def test_through_a_real_redis_the_wait_ends_at_the_servers_next_hour(redis_client: redis.Redis) -> None:
    limiter = Quota(2, "hour", backend=RedisBackend(redis_client), name=unique_name())
    spend(limiter, 2)
    seconds, micros = redis_client.time()
    server = seconds + micros / 1e6
    assert limiter.peek() == pytest.approx(3600.0 - server % 3600.0, abs=1.0)
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0)
    assert info.value.retry_after == pytest.approx(3600.0 - server % 3600.0, abs=1.0)


def test_a_quota_keys_expire_once_its_period_is_over(redis_client: redis.Redis) -> None:
    name = unique_name()
    limiter = Quota(2, "day", backend=RedisBackend(redis_client), name=name)
    assert limiter.try_acquire()
    ttl = redis_client.pttl(f"ratelimit:{{{name}}}:quota") / 1000
    seconds, _ = redis_client.time()
    left = Calendar("day", "UTC").period(seconds)[1] - seconds
    assert left < ttl <= left + 3


# -- in process -------------------------------------------------------------------------


@pytest.mark.parametrize("clock", [None, SystemClock()], ids=["none", "system"])
def test_in_process_real_time_is_read_as_unix_time(clock: SystemClock | None) -> None:
    limiter = Quota(1, "hour", clock=clock)
    assert limiter.try_acquire()
    assert limiter.peek() == pytest.approx(3600.0 - time.time() % 3600.0, abs=1.0)
    assert Composite([TokenBucket(1, 1), Quota(1, "minute")], clock=clock).clock.now() == pytest.approx(
        time.time(), abs=5
    )


def test_each_key_has_a_quota_of_its_own(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 30))
    limiter: Quota = make(Quota, 2, "minute", clock=clock)
    spend(limiter.for_key("a"), 2)
    spend(limiter.for_key("b"), 2)
    assert limiter.try_acquire()


def test_asyncio_waits_for_the_boundary_too(make: Make) -> None:
    clock = ManualClock(at("UTC", 2026, 5, 4, 10, 0, 30))
    limiter: Quota = make(Quota, 1, "minute", clock=clock)

    async def run() -> None:
        assert await limiter.try_acquire_async()
        assert not await limiter.try_acquire_async()
        assert await limiter.acquire_async() == 30.0

    asyncio.run(run())
    assert clock.now() == at("UTC", 2026, 5, 4, 10, 1, 0)


def test_its_arguments_are_checked_and_named() -> None:
    with pytest.raises(ValueError, match="per must be one of"):
        Quota(10, "fortnight")
    with pytest.raises(TypeError, match="per must be a str"):
        Quota(10, 86400)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tz must be an IANA time zone name.*'Mars/Olympus'"):
        Quota(10, "day", tz="Mars/Olympus")
    with pytest.raises(TypeError, match="tz must be"):
        Quota(10, "day", tz=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit must be > 0"):
        Quota(0, "day")
    with pytest.raises(TypeError, match="limit must be a number"):
        Quota("10", "day")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit must be > 0 and finite"):
        Quota(math.inf, "day")
    with pytest.raises(ValueError, match="name"):
        Quota(10, "day", backend=RedisBackend(fakeredis.FakeRedis()))


def test_repr_and_properties() -> None:
    limiter = Quota(10_000, "day", tz="America/Los_Angeles", backend=MemoryBackend())
    assert (limiter.limit, limiter.per, limiter.tz) == (10_000, "day", "America/Los_Angeles")
    assert repr(limiter) == "Quota(limit=10000, per='day', tz='America/Los_Angeles')"


@pytest.mark.parametrize("limit", [1e17, 2**53 + 2.0])
def test_the_level_of_a_quota_past_the_whole_doubles_is_told_in_bounded_time(
    make: Make, clock: ManualClock, store: str, limit: float
) -> None:
    # A quota has no `level` of its own: its level is found by bisection on its plan,
    # which must end where neighbouring doubles are more than one token apart (it spun
    # for ever there, in process and in the Lua twin, holding the Redis server).
    from ratelimit._limiting.front import acquire_level

    if store in ("redis", "cluster"):
        # A server holding a library revision without the bound would spin in the
        # script, unkillable (it has written), and hold every client of the server:
        # the Lua twin is checked on fakeredis, which runs the same library.
        pytest.skip("never run against a shared server: an unbounded bisection there holds it")
    clock.set(1.7e9)
    quota = make(Quota, limit, "day")
    quota.charge(limit / 10)
    told: list[Any] = []
    worker = threading.Thread(target=lambda: told.append(acquire_level(quota, 1, 0.0)), daemon=True)
    worker.start()
    worker.join(10.0)
    assert not worker.is_alive(), "the level's bisection never ended"
    waited, level = told[0]
    assert waited == 0.0
    assert level is not None
    left, more_in = level
    assert 1.0 <= left <= limit - limit / 10  # never more than is truly left
    assert more_in == 0.0
