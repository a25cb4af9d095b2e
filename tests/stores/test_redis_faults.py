"""Redis failing, as a case designed for: each failure policy, reloads, lost keys, names.

A private server (started on a free loopback port from the redis-server binary) is
stopped and restarted mid-test; nothing here touches the shared server's data except
under unique names.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis
import redis.cluster

from ratelimit import (
    BackendUnavailable,
    Composite,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.redis.backend import key_for

from conftest import unique_name
from servers import RedisServer, SilentServer

pytestmark = pytest.mark.redis

# An acquire against a dead server must give up within the socket timeouts (0.5 s
# each by default); this is the generous bound that says "it did not hang".
GIVES_UP_WITHIN = 3.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.mark.servers
def test_default_policy_raises_backend_unavailable_quickly_and_recovers(server: RedisServer) -> None:
    backend = RedisBackend.from_url(server.url)
    limiter = TokenBucket(5, 1, backend=backend, name="down")
    assert limiter.acquire() == 0.0
    server.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        limiter.acquire()
    assert time.monotonic() - started < GIVES_UP_WITHIN
    assert isinstance(caught.value.__cause__, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))
    assert backend.stats().failures == 1
    server.start()
    # A fresh server has no state: the next acquire is a fresh bucket's, and works.
    assert limiter.acquire() == 0.0


@pytest.mark.servers
def test_fail_open_grants_counts_and_warns(server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    backend = RedisBackend.from_url(server.url, on_unavailable="allow")
    limiter = TokenBucket(1, 1, backend=backend, name="open")
    server.stop()
    with caplog.at_level(logging.WARNING, logger="ratelimit"):
        assert [limiter.try_acquire() for _ in range(3)] == [True, True, True]
    assert backend.stats().failed_open == 3
    assert "fail open" in caplog.text


@pytest.mark.servers
def test_local_fallback_decides_with_this_process_share(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.5)
    limiter = TokenBucket(4, 10, backend=backend, name="fallback", clock=clock)
    server.stop()
    # Half the burst and half the rate: 2 at once, then one every 0.2 s.
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    assert limiter.acquire() == pytest.approx(0.2)
    assert backend.stats().fell_back == 4


@pytest.mark.servers
def test_a_budget_with_priorities_falls_back_to_its_share_with_both_priorities(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.5)
    # Lanes of TokenBucket(20, 10) at low_share=0.8: high 4 and 2/s, low 16 and 8/s;
    # half of each here.
    limiter = TokenBucket(20, 10, low_share=0.8, backend=backend, name="fallback-lanes", clock=clock)
    server.stop()
    # 8 from the low lane, then one borrowed from the high lane (2, leaving 1).
    assert [limiter.low.try_acquire() for _ in range(10)] == [True] * 9 + [False]
    assert [limiter.try_acquire() for _ in range(2)] == [True, False]
    assert backend.stats().fell_back == 12


@pytest.mark.servers
def test_processes_falling_back_together_keep_the_shared_burst(server: RedisServer) -> None:
    # Four processes at local_share=0.25 of TokenBucket(20, 200): at the moment they
    # all fall back, together they burst 4 x 5 = 20, the shared capacity (not 4 x 20).
    clock = ManualClock(1_000.0)
    limiters = [
        TokenBucket(
            20,
            200,
            backend=RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.25),
            name="shared",
            clock=clock,
        )
        for _ in range(4)
    ]
    server.stop()
    assert sum(limiter.try_acquire() for limiter in limiters for _ in range(20)) == 20


@pytest.mark.servers
@pytest.mark.parametrize("approximate", [False, True])
def test_a_window_falls_back_to_its_share_and_still_grants_the_largest_request(
    server: RedisServer, approximate: bool
) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.25)
    window = SlidingWindow(8, 10, approximate=approximate, backend=backend, name="window", clock=clock)
    server.stop()
    assert [window.try_acquire() for _ in range(3)] == [True, True, False]
    clock.advance(20)  # the approximate window still weighs the one before
    # Heavier than this process's share (2 of 8): counts as the whole share.
    assert window.try_acquire(8)
    assert not window.try_acquire()


# -- a charge with the store down: as a refund, it follows on_unavailable -------------


@pytest.mark.servers
def test_a_charge_raises_backend_unavailable_by_default(server: RedisServer) -> None:
    backend = RedisBackend.from_url(server.url)
    limiter = TokenBucket(5, 1, backend=backend, name="charge-down", clock=ManualClock(1_000.0))
    server.stop()
    with pytest.raises(BackendUnavailable) as caught:
        limiter.charge(2)
    assert isinstance(caught.value.__cause__, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))
    with pytest.raises(BackendUnavailable):
        limiter.settle(1, 3)
    assert limiter.stats().charged == 0


@pytest.mark.servers
def test_a_charge_without_the_store_is_lost_with_a_warning_when_failing_open(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    backend = RedisBackend.from_url(server.url, on_unavailable="allow")
    limiter = Composite([TokenBucket(5, 1), TokenBucket(100, 1)], backend=backend, name="charge-open")
    server.stop()
    with caplog.at_level(logging.WARNING, logger="ratelimit"):
        limiter.charge([0, 50])
    assert "the charge on" in caplog.text
    assert "is lost" in caplog.text
    # Lost, not granted: a charge is no decision.
    assert backend.stats().failed_open == 0


@pytest.mark.servers
def test_a_charge_without_the_store_goes_to_the_local_fallback(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.5)
    limiter = TokenBucket(4, 10, backend=backend, name="charge-local", clock=clock)
    server.stop()
    # This process's share: 2 at once, one every 0.2 s. The charge takes them both.
    limiter.charge(2)
    assert not limiter.try_acquire()
    assert limiter.acquire() == pytest.approx(0.2)


@pytest.mark.servers
def test_a_charge_on_the_async_path_follows_the_policy_too(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    raising_backend = RedisBackend.from_url(server.url)
    raising = TokenBucket(5, 1, backend=raising_backend, name="charge-async", clock=clock)
    local_backend = RedisBackend.from_url(server.url, on_unavailable="local")
    local = SlidingWindow(3, 10, backend=local_backend, name="charge-async-local", clock=clock)
    server.stop()

    async def scenario() -> bool:
        with pytest.raises(BackendUnavailable):
            await raising.charge_async(1)
        await local.settle_async(1, 3)  # estimate 1 (not acquired here), actual 3: 2 charged locally
        granted = await local.try_acquire_async()
        await raising_backend.aclose()
        await local_backend.aclose()
        return granted

    assert asyncio.run(scenario())  # 2 of 3 charged: one left
    assert not local.try_acquire()


@pytest.mark.servers
def test_async_path_raises_quickly_on_a_dead_server(server: RedisServer) -> None:
    backend = RedisBackend.from_url(server.url)
    limiter = TokenBucket(5, 1, backend=backend, name="async-down")

    async def scenario() -> float:
        assert await limiter.acquire_async() == 0.0
        server.stop()
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            await limiter.acquire_async()
        await backend.aclose()
        return time.monotonic() - started

    assert asyncio.run(scenario()) < GIVES_UP_WITHIN


@pytest.mark.servers
def test_a_server_that_never_answers_times_out_instead_of_hanging() -> None:
    with SilentServer() as silent:
        limiter = TokenBucket(5, 1, backend=RedisBackend.from_url(silent.url), name="mute")
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            limiter.acquire()
        assert time.monotonic() - started < GIVES_UP_WITHIN


def test_script_flush_mid_run_reloads_transparently(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(2, 1, backend=RedisBackend(redis_client), name=unique_name(), clock=clock)
    assert limiter.try_acquire()
    redis_client.script_flush()
    # The state survived (it is in the key, not the script): one token left, then none.
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_key_deleted_mid_run_starts_a_fresh_budget(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name()
    limiter = TokenBucket(2, 1, backend=RedisBackend(redis_client), name=name, clock=clock)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    # On a test clock the state is kept apart from any real budget of that name.
    redis_client.delete(key_for(name, "token_bucket", injected=True))
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


ODD_NAMES = [
    "with space",
    "{braces}",
    "}{",
    "a{b}c{d}",
    "100%",
    "%7B",
    "ünïcödé ✓",
    "new\nline",
    ":" * 5,
    "x" * 180,  # with the unique prefix, near the 200-character cap
]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_names_keep_one_hash_tag_and_work(redis_client: redis.Redis, name: str) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend(redis_client)
    prefix = f"{unique_name()}/"
    for limiter in (
        TokenBucket(1, 1, backend=backend, name=prefix + name, clock=clock),
        LeakyBucket(1, 1, backend=backend, name=prefix + name, clock=clock),
        SlidingWindow(1, 1, backend=backend, name=prefix + name, clock=clock),
    ):
        assert limiter.try_acquire()
        assert not limiter.try_acquire()
    keys = [k.decode() for k in redis_client.keys(f"ratelimit:{{{prefix}*") if isinstance(k, bytes)]
    assert keys, "the keys are found by the limiter's name"
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert "{" not in next(iter(tags))


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["{braces}", "a{b}c", "ünï code", "x" * 180])
def test_odd_names_on_a_cluster_with_a_composite(cluster_client: redis.cluster.RedisCluster, name: str) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend(cluster_client)
    composite = Composite(
        [TokenBucket(2, 1), SlidingWindow(3, 10), LeakyBucket(5, 5)],
        backend=backend,
        name=f"{unique_name()}-{name}",
        clock=clock,
    )
    assert composite.acquire() == 0.0
    assert composite.acquire() == pytest.approx(0.2)
    assert not composite.try_acquire()


def test_client_time_source_sends_this_machine_s_clock(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client clock far from the server's shows which one the script used.
    monkeypatch.setattr("ratelimit._stores.redis.backend.time.time", lambda: 5_000.0)
    backend = RedisBackend(redis_client, time_source="client")
    limiter = TokenBucket(2, 1, backend=backend, name=unique_name())
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    stored = redis_client.get(key_for(limiter.name or "", "token_bucket"))
    # The TAT: the client's 5000 plus two 1 s intervals (the space after it says that
    # nothing is beside the state: see the fast path in lua/_single.lua).
    assert stored == b"5002 "


def test_backend_arguments_are_checked(redis_client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="on_unavailable must be 'raise', 'allow' or 'local', got 'ignore'"):
        RedisBackend(redis_client, on_unavailable="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time_source must be 'server' or 'client', got 'ntp'"):
        RedisBackend(redis_client, time_source="ntp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="local_share must be <= 1, got 2"):
        RedisBackend(redis_client, local_share=2)
    with pytest.raises(TypeError, match="client must be a redis-py client"):
        RedisBackend("redis://127.0.0.1")


# -- the promised waits carried across a switch to the local fallback and back ---------


class Flaky(fakeredis.FakeRedis):
    """A fakeredis client whose script calls fail while ``down`` says so."""

    down = False

    def evalsha(self, *args: Any) -> Any:
        if type(self).down:
            raise redis.exceptions.ConnectionError("down")
        return super().evalsha(*args)

    def eval(self, *args: Any) -> Any:
        if type(self).down:
            raise redis.exceptions.ConnectionError("down")
        return super().eval(*args)

    def fcall(self, *args: Any) -> Any:
        if type(self).down:
            raise redis.exceptions.ConnectionError("down")
        return super().fcall(*args)


def most_beyond_the_bound(sent: list[float], capacity: float, rate: float) -> float:
    """The most grants at ``sent`` in any interval beyond ``capacity + rate * t``
    (0 or less: within it)."""
    sent = sorted(sent)
    worst = -math.inf
    for i, first in enumerate(sent):
        for j in range(i, len(sent)):
            worst = max(worst, (j - i + 1) - (capacity + rate * (sent[j] - first)))
    return worst


def run_fleet(limiters: list[Any], clock: ManualClock, events: dict[float, bool], until: float) -> list[float]:
    """Each limiter asked for 3 tokens every 10 ms (demand 3x the rate for two), each
    willing to wait 2 s; ``events`` set the store down or up at their times."""
    sent: list[float] = []
    start = clock.now()
    for tick in range(int(until / 0.01)):
        now = start + tick * 0.01
        clock.set(now)
        for at, down in events.items():
            if abs(now - (start + at)) < 1e-9:
                Flaky.down = down
        for limiter in limiters:
            for _ in range(3):
                wait, _at = limiter._handle.reserve(1.0, 2.0)
                if wait >= 0:
                    sent.append(now + wait)
    return sent


@pytest.mark.stress
@pytest.mark.parametrize("kind", ["token bucket", "window"])
def test_a_fleet_switching_to_the_fallback_and_back_keeps_the_bound(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two processes at half each, queued 2 s deep on the store when it fails, and on
    # their fallbacks when it comes back: the side taking over leaves the other's
    # queue to it. Without that: 89 (bucket) and 323 (window) grants over the bound.
    monkeypatch.setattr(Flaky, "down", False)
    shared = fakeredis.FakeServer()
    clock = ManualClock(1_000.0)
    name = unique_name("switch")

    def limiter() -> Any:
        backend = RedisBackend(Flaky(server=shared), on_unavailable="local", local_share=0.5)
        if kind == "window":  # 20 in 0.2 s: 100/s with a burst of 20, as the bucket
            return SlidingWindow(20, 0.2, backend=backend, name=name, clock=clock)
        return TokenBucket(20, 100, backend=backend, name=name, clock=clock)

    fleet = [limiter(), limiter()]
    logging.getLogger("ratelimit").disabled = True
    try:
        sent = run_fleet(fleet, clock, {3.0: True, 6.0: False}, 9.0)
    finally:
        logging.getLogger("ratelimit").disabled = False
    assert len(sent) > 800
    # Both sides had a queue at each switch: nothing beyond capacity + rate x t but,
    # at most, one request per process at the instant a queue handed over.
    assert most_beyond_the_bound(sent, 20, 100) <= len(fleet) + 1e-6


@pytest.mark.servers
@pytest.mark.parametrize("coalesce", [True, False])
def test_the_promised_queue_is_carried_across_a_real_outage(server: RedisServer, coalesce: bool) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=1.0, coalesce=coalesce)
    limiter = TokenBucket(20, 100, backend=backend, name="carried", clock=clock)
    handle = limiter._handle
    waits = [handle.reserve(1.0, 2.0)[0] for _ in range(120)]
    assert waits[-1] == pytest.approx(1.0)  # the store's queue reaches 1 s ahead
    server.stop()
    # The fallback leaves that second to the queue: its own grants follow it, at the
    # rate, with no burst of its own.
    local = [handle.reserve(1.0, 2.0)[0] for _ in range(50)]
    assert local[0] == pytest.approx(1.0)
    assert local[-1] == pytest.approx(1.49)
    assert backend.stats().fell_back == 50
    clock.advance(0.2)
    server.start()  # back, empty: a full bucket it would grant at once
    # The store leaves the fallback's queue to it (1.29 s more), then the rate.
    assert handle.reserve(1.0, 2.0)[0] == pytest.approx(1.29)
    assert handle.reserve(1.0, 2.0)[0] == pytest.approx(1.30)
    backend.close()


@pytest.mark.servers
def test_a_composite_and_a_budget_with_priorities_carry_the_queue_too(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=1.0)
    composite = Composite([TokenBucket(10, 100), SlidingWindow(100, 1)], backend=backend, name="both", clock=clock)
    lanes = TokenBucket(20, 100, low_share=0.5, backend=backend, name="lanes", clock=clock)
    queued = [composite._handle.reserve([1.0, 1.0], 2.0)[0] for _ in range(60)]
    low = [lanes.low._handle.reserve(1.0, 2.0)[0] for _ in range(60)]
    server.stop()
    assert composite._handle.reserve([1.0, 1.0], 2.0)[0] >= queued[-1]
    assert lanes.low._handle.reserve(1.0, 2.0)[0] >= low[-1]
    backend.close()


@pytest.mark.servers
def test_the_async_path_carries_the_queue_both_ways(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)

    async def scenario() -> tuple[list[float], list[float], float]:
        backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=1.0)
        handle = TokenBucket(20, 100, backend=backend, name="carried-async", clock=clock)._handle
        store = list(await asyncio.gather(*(handle.reserve_async(1.0, 2.0) for _ in range(120))))
        server.stop()
        local = [(await handle.reserve_async(1.0, 2.0))[0] for _ in range(50)]
        server.start()
        back = (await handle.reserve_async(1.0, 2.0))[0]
        await backend.aclose()
        return [wait for wait, _ in store], local, back

    store, local, back = asyncio.run(scenario())
    assert max(store) == pytest.approx(1.0)
    assert local[0] == pytest.approx(1.0)
    assert back == pytest.approx(1.49)


class Interrupted(Exception):
    """Raised as a signal handler would, between a command sent and its reply read."""


class Interrupting(redis.Redis):
    """A client whose next reply read is interrupted once ``armed``."""

    armed = False

    def parse_response(self, connection: Any, command_name: Any, **options: Any) -> Any:
        if type(self).armed:
            type(self).armed = False
            raise Interrupted
        return super().parse_response(connection, command_name, **options)  # type: ignore[no-untyped-call]


def test_a_call_interrupted_before_its_reply_leaves_no_reply_for_the_next(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py puts the connection back with the reply unread: the next call on it
    # would read that reply as its own.
    monkeypatch.setattr(Interrupting, "armed", False)
    clock = ManualClock(1_000.0)
    client = Interrupting(single_connection_client=False)
    limiter = TokenBucket(10, 1, backend=RedisBackend(client, coalesce=False), name=unique_name(), clock=clock)
    assert limiter.try_acquire(10)
    monkeypatch.setattr(Interrupting, "armed", True)
    with pytest.raises(Interrupted):
        limiter.try_acquire(1)  # refused: its reply says so, unread
    clock.advance(1.0)
    assert limiter.try_acquire(1)  # one token refilled: granted, by its own reply
    client.close()


@pytest.mark.stress
def test_a_thousand_tasks_through_an_outage_keep_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Flaky, "down", False)
    clock = ManualClock(1_000.0)
    backend = RedisBackend(Flaky(), on_unavailable="local", local_share=1.0)
    handle = TokenBucket(20, 100, backend=backend, name=unique_name("tasks"), clock=clock)._handle
    sent: list[float] = []

    async def wave() -> None:
        decisions = await asyncio.gather(*(handle.reserve_async(1.0, 3.0) for _ in range(1_000)))
        sent.extend(clock.now() + wait for wait, _ in decisions if wait >= 0)

    logging.getLogger("ratelimit").disabled = True
    try:
        for step in range(8):
            Flaky.down = step in (2, 3, 4)  # down for three waves, then back
            asyncio.run(wave())
            clock.advance(0.5)
    finally:
        logging.getLogger("ratelimit").disabled = False
    assert len(sent) > 300
    assert most_beyond_the_bound(sent, 20, 100) <= 1 + 1e-6
