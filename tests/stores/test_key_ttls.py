"""Every key a limiter writes in Redis expires once its state would be fresh anyway.

The README promises it: a key's TTL is the time until the state decides as a new one
would (``Algorithm.idle_until``), plus a second. Checked on a real server for each
algorithm, against the pure twin driven through the same calls, and for the keys
beside the state: a window's caps and the holes a withdrawn reservation leaves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
import redis

from ratelimit import Composite, LeakyBucket, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._algorithms.algorithm import charge, step
from ratelimit._limiting.limiters import SingleLimiter

from conftest import command_calls, state_keys, unique_name

pytestmark = pytest.mark.redis

#: Real time passes between the script and the PTTL read; the TTL never exceeds the
#: promise, and falls short of it by no more than this.
SLACK_MS = 250

Build = Callable[[RedisBackend, str, ManualClock], SingleLimiter]

LIMITERS: dict[str, Build] = {
    "token_bucket": lambda b, n, c: TokenBucket(4, 2, backend=b, name=n, clock=c),
    "leaky_bucket": lambda b, n, c: LeakyBucket(4, 2, backend=b, name=n, clock=c),
    "sliding_window": lambda b, n, c: SlidingWindow(3, 7, backend=b, name=n, clock=c),
    "sliding_window_counter": lambda b, n, c: SlidingWindow(3, 7, approximate=True, backend=b, name=n, clock=c),
}


def ttls(client: redis.Redis, name: str) -> dict[str, int]:
    return {key: int(client.pttl(key)) for key in state_keys(client, name)}


def promised_ms(seconds: float) -> int:
    return max(1000, math.ceil((seconds + 1) * 1000))


def assert_within(found: int, seconds: float) -> None:
    promised = promised_ms(seconds)
    assert promised - SLACK_MS <= found <= promised, (found, promised)


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_the_state_key_expires_when_the_state_is_fresh_again(redis_client: redis.Redis, kind: str) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("ttl")
    limiter = LIMITERS[kind](RedisBackend(redis_client), name, clock)
    alg: Any = limiter.algorithm_for(clock)
    state = alg.new_state()
    # A burst, then reservations behind it (the manual clock sleeps each wait out).
    decided = clock.now()
    for dt, tokens in [(0.0, 1.0), (0.0, 2.0), (0.4, 1.0), (0.0, 1.0)]:
        clock.advance(dt)
        decided = clock.now()
        state, wait = step(alg, state, decided, tokens, math.inf)
        assert limiter.acquire(tokens, timeout=math.inf) == pytest.approx(wait, abs=1e-9)
    found = ttls(redis_client, name)
    assert list(found) == [RedisBackend(redis_client).key(name, kind, clock=clock)]
    assert_within(next(iter(found.values())), alg.idle_until(state) - decided)


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_a_charge_into_debt_keeps_the_key_until_the_debt_is_waited_off(redis_client: redis.Redis, kind: str) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("ttl-charge")
    limiter = LIMITERS[kind](RedisBackend(redis_client), name, clock)
    alg: Any = limiter.algorithm_for(clock)
    state = alg.new_state()
    for tokens in (3.0, 3.0):  # a second charge on top of the first: in debt
        state = charge(alg, state, clock.now(), tokens)
        limiter.charge(tokens)
    (found,) = ttls(redis_client, name).values()
    assert_within(found, alg.idle_until(state) - clock.now())


def test_a_windows_pace_and_caps_expire_with_the_restriction(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("ttl-caps")
    limiter = SlidingWindow(100, 10, backend=RedisBackend(redis_client), name=name, clock=clock)
    assert limiter.try_acquire()
    # Some left: a pace beside the holes, kept until the reset's 4 s at most.
    limiter.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset-After": "4"})
    paces = {key: ttl for key, ttl in ttls(redis_client, name).items() if key.endswith(":pace")}
    assert len(paces) == 1
    assert 0 < next(iter(paces.values())) <= promised_ms(4.0)
    # None left: the window's caps, kept as long.
    limiter.feedback({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "4"})
    caps = {key: ttl for key, ttl in ttls(redis_client, name).items() if key.endswith(":caps")}
    assert len(caps) == 1
    assert 0 < next(iter(caps.values())) <= promised_ms(4.0)


def test_holes_expire_with_the_queue_they_were_left_in(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("ttl-holes")
    backend = RedisBackend(redis_client)
    limiter = TokenBucket(1, 2, backend=backend, name=name, clock=clock)
    handle: Any = limiter._handle
    reservations = [handle.reserve(1.0, math.inf) for _ in range(4)]
    # Withdraw the second of four: a hole in the middle of the queue.
    handle.refund(1.0, reservations[1][1])
    found = ttls(redis_client, name)
    holes = [ttl for key, ttl in found.items() if key.endswith(":holes")]
    state = [ttl for key, ttl in found.items() if not key.endswith(":holes")]
    assert len(holes) == 1
    assert len(state) == 1
    # The queue runs to 1001.5, and the bucket is fresh a refill later.
    assert 0 < holes[0] <= state[0] <= promised_ms(2.0)


def test_every_key_of_a_composite_expires(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("ttl-composite")
    limiter = Composite(
        [TokenBucket(3, 1), SlidingWindow(5, 4), SlidingWindow(5, 4, approximate=True), LeakyBucket(3, 2)],
        backend=RedisBackend(redis_client),
        name=name,
        clock=clock,
    )
    for _ in range(4):
        limiter.acquire()
    found = ttls(redis_client, name)
    assert len(found) == 4
    # The longest any member's state matters here: the bucket's queue of 1 s plus its
    # 3 s refill, the windows' 4 s after their last grant at t=1001.
    assert all(0 < ttl <= promised_ms(4.0 + 1.0) for ttl in found.values()), found


@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "approximate"])
def test_a_busy_window_on_the_servers_clock_writes_its_ttl_a_few_times_a_second_and_never_short(
    quiet_client: redis.Redis, approximate: bool
) -> None:
    # On the server's clock (no clock given: TIME) a busy window's key keeps the
    # deadline a grant before it set while that still holds: the approximate
    # window's moves with its newest sub-window (5 s / 20 here), the exact one's is
    # rounded up to the next half second. Never shorter than the state's idle time.
    name = unique_name("ttl-busy")
    backend = RedisBackend(quiet_client, coalesce=False)
    limiter = SlidingWindow(100_000, 5, approximate=approximate, backend=backend, name=name)
    assert limiter.try_acquire()  # the first writes what the code says: the full path
    key = backend.key(name, "sliding_window_counter" if approximate else "sliding_window")
    before, started = command_calls(quiet_client, "pexpire"), time.monotonic()
    for _ in range(300):
        assert limiter.try_acquire()
    elapsed = time.monotonic() - started
    written = command_calls(quiet_client, "pexpire") - before
    # (Beside it, the slack record of the window's guard, written twice a guard.)
    per_second = (4 if approximate else 2) + 2 / 0.05
    assert written <= per_second * elapsed + 3, (written, elapsed)
    ttl_ms = quiet_client.pttl(key)
    seconds, micros = quiet_client.time()
    now = seconds + micros / 1e6
    if approximate:
        newest = float(cast("bytes", quiet_client.hget(key, "last")))
    else:
        newest = cast("list[tuple[bytes, float]]", quiet_client.zrange(key, -1, -1, withscores=True))[0][1]
    # The window as guarded (5.05 s): the state is fresh once its newest grant's
    # window has passed, and the key outlives that by most of its second's margin.
    fresh_in = newest + 5.05 - now
    assert (fresh_in + 0.5) * 1000 - SLACK_MS <= ttl_ms <= (fresh_in + 0.25 + 1.5) * 1000, (ttl_ms, fresh_in)
