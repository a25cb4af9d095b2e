"""``peek``: the wait a request would get now, recording nothing; ``reset``: forget the usage.

Run on every store with an injected clock. ``peek`` must say what the next reserve
is told (or what its refusal's ``retry_after`` says), and leave every key, TTL and
counter as it found them; ``reset`` must leave the budget as a new limiter's, for
every limiter sharing it, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from ratelimit import (
    AcquireTimeout,
    Adaptive,
    BackendUnavailable,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit.events import Event

from conftest import command_calls, state_keys, unique_name

Make = Callable[..., Any]
CLOSE = 1e-6

BUILDS = [
    pytest.param(lambda make: make(TokenBucket, 2, 4), id="token_bucket"),
    pytest.param(lambda make: make(LeakyBucket, 3, 2), id="leaky_bucket"),
    pytest.param(lambda make: make(SlidingWindow, 2, 1.0), id="sliding_window"),
    pytest.param(lambda make: make(SlidingWindow, 2, 1.0, approximate=True), id="window_counter"),
    pytest.param(lambda make: make(Composite, [TokenBucket(2, 4), SlidingWindow(3, 1.0)]), id="composite"),
    pytest.param(lambda make: make(TokenBucket, 2, 4, adaptive=Adaptive()), id="adaptive"),
    pytest.param(lambda make: make(TokenBucket, 4, 4, low_share=0.5), id="priorities"),
    pytest.param(lambda make: make(TokenBucket, 4, 4, low_share=0.5).low, id="low_priority"),
]


@pytest.mark.parametrize("build", BUILDS)
def test_peek_says_what_the_next_request_gets(make: Make, clock: ManualClock, build: Make) -> None:
    """After each request, peek equals the wait the next one is told (or its refusal's retry_after)."""
    limiter = build(make)
    for step in range(6):
        said = limiter.peek()
        try:
            got = limiter.reserve().wait
        except AcquireTimeout as exc:
            got = exc.retry_after
        assert said == pytest.approx(got, abs=CLOSE), step
        clock.advance(0.1)


def test_peek_of_a_full_leaky_queue_is_the_retry_after(make: Make) -> None:
    """An overflowing leaky bucket: peek says when the queue has room, as AcquireTimeout does."""
    limiter = make(LeakyBucket, 2, 1)
    limiter.reserve(), limiter.reserve()
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire()
    assert limiter.peek() == pytest.approx(caught.value.retry_after, abs=CLOSE)
    assert limiter.peek() == pytest.approx(1.0, abs=CLOSE)


def test_peek_weighs_tokens_and_a_composite_weighs_each_limit(make: Make) -> None:
    """Heavier requests wait longer; a composite's wait is its slowest limit's."""
    bucket = make(TokenBucket, 4, 2)
    bucket.acquire(4)
    assert [bucket.peek(n) for n in (1, 2, 4)] == pytest.approx([0.5, 1.0, 2.0], abs=CLOSE)
    both = make(Composite, [TokenBucket(4, 2), SlidingWindow(2, 10.0)])
    both.acquire([2, 2])
    assert both.peek([2, 0]) == pytest.approx(0.0, abs=CLOSE)
    assert both.peek([0, 1]) == pytest.approx(10.0, abs=CLOSE)
    assert both.peek() == pytest.approx(10.0, abs=CLOSE)


def test_peek_records_nothing(make: Make) -> None:
    """No grant, no counter, no event: a hundred peeks change nothing."""
    limiter = make(TokenBucket, 2, 1)
    limiter.acquire()
    seen: list[Event] = []
    limiter.subscribe(seen.append)
    before = limiter.stats()
    assert {limiter.peek() for _ in range(100)} == {0.0}
    assert limiter.stats() == before
    assert seen == []
    assert limiter.reserve().wait == 0.0
    assert limiter.reserve().wait == pytest.approx(1.0, abs=CLOSE)


def test_peek_checks_tokens_as_acquire(make: Make) -> None:
    """``tokens`` is checked as for acquire: more than the limit holds is a ValueError."""
    limiter = make(TokenBucket, 2, 1)
    for tokens in (0, -1, 3, math.nan):
        with pytest.raises(ValueError, match="tokens"):
            limiter.peek(tokens)


def _snapshot(client: redis.Redis, name: str) -> dict[str, tuple[bytes | None, int]]:
    """Every key of ``name`` (its counters and code too): its serialised value and TTL."""
    keys = sorted(client.scan_iter(match=f"ratelimit:{{{name}}}:*", count=1000))
    return {key.decode(): (client.dump(key), int(client.pttl(key))) for key in keys}


WRITES = ("set", "hset", "zadd", "zrem", "del", "pexpire", "expire", "hdel", "incrbyfloat", "zremrangebyscore")


@pytest.mark.parametrize("build", BUILDS)
def test_peek_writes_nothing_to_redis(quiet_client: redis.Redis, build: Make) -> None:
    """On a private server: no key's value or TTL changes, no write command runs, no counter for `top`."""
    clock = ManualClock(1_000.0)
    backend = RedisBackend(quiet_client)
    name = unique_name()
    limiter = build(lambda cls, *a, **k: cls(*a, backend=backend, name=name, clock=clock, **k))
    limiter.reserve(), limiter.reserve(), limiter.reserve()
    clock.advance(0.05)
    before = _snapshot(quiet_client, name)
    writes = {command: command_calls(quiet_client, command) for command in WRITES}
    for _ in range(20):
        limiter.peek()
        asyncio.run(limiter.peek_async())
    after = _snapshot(quiet_client, name)
    assert {command: command_calls(quiet_client, command) for command in WRITES} == writes
    assert after.keys() == before.keys()
    for key, (value, ttl) in after.items():
        assert value == before[key][0], key
        # Real time runs on between the snapshots; a TTL only ever runs down here.
        assert ttl <= before[key][1], key


def test_peek_is_inf_for_more_than_a_changed_limit_holds(backend: Any, store: str) -> None:
    """An operator lowered the burst below the request: peek says it could never go."""
    if store == "memory":
        pytest.skip("set_limit is a shared store's")
    clock = ManualClock(1_000.0)
    name = unique_name()
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
    limiter.acquire()
    backend.set_limit(name, burst=3, clock=clock)
    assert limiter.peek(5) == math.inf
    assert limiter.peek(2) == pytest.approx(0.0, abs=CLOSE)


# -- reset ---------------------------------------------------------------------------------


@pytest.mark.parametrize("build", BUILDS)
def test_reset_makes_the_budget_whole_again(make: Make, build: Make) -> None:
    """After reset a limiter decides as a new one would: the same waits, from the start."""
    fresh = build(make)
    fresh_waits = [fresh.reserve().wait for _ in range(3)]
    used = build(make)
    for _ in range(5):
        with contextlib.suppress(AcquireTimeout):  # a leaky queue fills up
            used.reserve()
    assert used.peek() > 0
    used.reset()
    assert used.peek() == 0.0
    assert [used.reserve().wait for _ in range(3)] == pytest.approx(fresh_waits, abs=CLOSE)


def test_reset_forgets_a_pause_and_withdrawn_places(make: Make, clock: ManualClock) -> None:
    """A provider's pause and the holes of cancelled reservations go with the usage."""
    limiter = make(TokenBucket, 2, 1)
    limiter.feedback({"Retry-After": "30"}, status=429)
    assert limiter.peek() == pytest.approx(30.0, abs=CLOSE)
    r = limiter.reserve()
    limiter.reserve()
    assert r.cancel()
    limiter.reset()
    assert [limiter.reserve().wait for _ in range(3)] == pytest.approx([0.0, 0.0, 1.0], abs=CLOSE)


def test_reset_reaches_every_limiter_sharing_the_budget(backend: Any, clock: ManualClock) -> None:
    """Two limiter objects of one name: one resets, the other finds the budget whole."""
    name = unique_name()
    a = TokenBucket(2, 1, backend=backend, name=name, clock=clock)
    b = TokenBucket(2, 1, backend=backend, name=name, clock=clock)
    a.acquire(2)
    assert b.peek() == pytest.approx(1.0, abs=CLOSE)
    a.reset()
    assert b.peek(2) == 0.0


def test_reset_keeps_counters_and_a_reservation_made_before_cancels_harmlessly(make: Make) -> None:
    """``stats`` is the object's history; a reservation from before the reset gives back nothing that is not there."""
    limiter = make(TokenBucket, 1, 1)
    limiter.acquire()
    old = limiter.reserve()
    limiter.reset()
    assert limiter.stats().granted == 2
    assert old.cancel()
    assert [limiter.reserve().wait for _ in range(2)] == pytest.approx([0.0, 1.0], abs=CLOSE)


def test_reset_leaves_no_state_keys_and_keeps_an_operators_change(backend: Any, store: str) -> None:
    """Through Redis the state's keys are gone; the limit set by ``set_limit`` stays."""
    if store in ("memory", "sqlite"):
        pytest.skip("keys are the Redis store's")
    clock = ManualClock(1_000.0)
    name = unique_name()
    limiter = SlidingWindow(3, 10.0, backend=backend, name=name, clock=clock)
    limiter.acquire()
    limiter.feedback({"RateLimit-Remaining": "0", "RateLimit-Reset": "5"}, status=200)
    backend.set_limit(name, rate=0.2, clock=clock)  # 2 per 10 s
    client = backend._sync_client
    changes = (":config", ":config:keys")  # the name's change, and as its keys carry it
    assert [key for key in state_keys(client, name) if not key.endswith(changes)]
    limiter.reset()
    assert [key for key in state_keys(client, name) if not key.endswith(changes)] == []
    assert backend.limit_override(name, clock=clock) is not None
    assert [limiter.reserve(timeout=0).wait for _ in range(2)] == [0.0, 0.0]
    with pytest.raises(AcquireTimeout):
        limiter.reserve(timeout=0)


def test_async_twins(make: Make) -> None:
    """``peek_async`` and ``reset_async`` say and do what the sync ones do."""
    limiter = make(TokenBucket, 1, 2)

    async def run() -> None:
        await limiter.acquire_async()
        assert await limiter.peek_async() == pytest.approx(0.5, abs=CLOSE)
        await limiter.reset_async()
        assert await limiter.peek_async() == 0.0

    asyncio.run(run())


def test_memory_names_share_a_reset() -> None:
    """On one MemoryBackend a name's state is shared, and so is its reset."""
    backend, clock = MemoryBackend(), ManualClock(0.0)
    a = Composite([TokenBucket(1, 1), SlidingWindow(2, 5.0)], backend=backend, name="both", clock=clock)
    b = Composite([TokenBucket(1, 1), SlidingWindow(2, 5.0)], backend=backend, name="both", clock=clock)
    a.acquire()
    assert b.peek() == pytest.approx(1.0)
    b.reset()
    assert a.peek() == 0.0


# -- the store down ---------------------------------------------------------------------------


def _dead(on_unavailable: Any, **options: Any) -> RedisBackend:
    from servers import free_port

    return RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", on_unavailable=on_unavailable, **options)


def test_redis_down_peek_and_reset_follow_on_unavailable() -> None:
    """``raise`` raises; ``allow`` says 0 (it would grant) and loses the reset; ``local`` asks the fallback."""
    raising = TokenBucket(1, 1, backend=_dead("raise"), name=unique_name())
    with pytest.raises(BackendUnavailable):
        raising.peek()
    with pytest.raises(BackendUnavailable):
        raising.reset()
    with pytest.raises(BackendUnavailable):
        asyncio.run(raising.peek_async())
    opened = TokenBucket(1, 1, backend=_dead("allow"), name=unique_name())
    assert opened.peek() == 0.0
    opened.reset()
    clock = ManualClock(1_000.0)
    local = TokenBucket(2, 1, backend=_dead("local", local_share=0.5), name=unique_name(), clock=clock)
    local.acquire()  # the fallback's share: a burst of 1
    assert local.peek() == pytest.approx(2.0, abs=CLOSE)  # and half the rate
    local.reset()
    assert local.peek() == 0.0
