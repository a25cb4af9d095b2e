"""Redis in the states a production server gets into: keys evicted, memory full, busy.

Private ``redis-server`` processes on free loopback ports (``servers.py``), and
fakeredis where the real Lua is enough; time is a :class:`ManualClock`.

- **Lost keys.** An evicting ``maxmemory-policy`` (or anyone's ``DEL``) takes keys one
  at a time: a sliding window's sorted set, or the caps beside it, or a composite's
  members one by one. Every algorithm, and a composite, has its keys deleted one subset at a time:
  no call may fail, and the state may only forget what was lost, never grant more than
  what remains allows. Then the same under real eviction, and with garbage values.
- **A full server.** ``maxmemory`` reached under ``noeviction`` refuses every write
  with ``OOM``: that is the store being unavailable, so ``on_unavailable`` decides.
- **A busy server**, a replica, a replica without its master: the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import fakeredis
import pytest
import redis

from ratelimit import (
    BackendUnavailable,
    CircuitBreaker,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.store import Backend

from conftest import private_server, state_keys, unique_name
from servers import RedisServer, free_port

pytestmark = pytest.mark.redis

Limiter = Any  # a SingleLimiter or a Composite: try_acquire, refund, feedback
Build = Callable[[Backend, str, ManualClock], Limiter]


@pytest.fixture(scope="module")
def plain_server() -> Iterator[RedisServer]:
    server = private_server()
    yield server
    server.cleanup()


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis()
        return
    server: RedisServer = request.getfixturevalue("plain_server")
    real = redis.Redis.from_url(server.url, socket_timeout=5)
    yield real
    real.close()


def keys_of(client: redis.Redis, name: str) -> list[str]:
    """Every key of limiter ``name``'s state (all share its hash tag)."""
    return state_keys(client, name)


def burst(limiter: Limiter) -> int:
    """How many unit grants the limiter gives at once, now."""
    granted = 0
    while granted < 100 and limiter.try_acquire():
        granted += 1
    return granted


def window_key(client: redis.Redis, name: str) -> str:
    """A sliding window's sorted set."""
    return next(k for k in keys_of(client, name) if client.type(k) == b"zset" and not k.endswith(":holes"))


def entries(members: list[bytes]) -> list[tuple[float, float]]:
    """``(sum, weight)`` of each member, oldest first."""
    return [(float(s), float(w)) for s, w in (m.split(b"|") for m in members)]


def assert_sums_consistent(members: list[bytes]) -> None:
    """Each entry's sum is the one before it plus its weight, so the sums rise."""
    found = entries(members)
    for (before, _), (after, weight) in itertools.pairwise(found):
        assert after == pytest.approx(before + weight, rel=1e-12, abs=1e-9)


def assert_window_state_consistent(client: redis.Redis, name: str) -> None:
    assert_sums_consistent(cast("list[bytes]", client.zrange(window_key(client, name), 0, -1)))


# -- a sliding window loses its set, its caps, or gets members not its own ---------------


def test_a_lost_set_is_a_fresh_window_not_an_error(client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("evict")
    limiter = SlidingWindow(3, 10, backend=RedisBackend(client), name=name, clock=clock)
    assert burst(limiter) == 3
    client.delete(window_key(client, name))
    assert burst(limiter) == 3
    assert_window_state_consistent(client, name)


def test_a_lost_pace_lifts_only_the_restriction(client: redis.Redis) -> None:
    # A provider's "1 left for the next 10 s" is a pace kept beside the log's holes;
    # losing it loses that restriction, never a grant.
    clock = ManualClock(1_000.0)
    name = unique_name("evict")
    limiter = SlidingWindow(5, 10, backend=RedisBackend(client), name=name, clock=clock)
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    limiter.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset-After": "10"})
    assert not limiter.try_acquire()  # paced: the one left is due at the reset
    paces = [k for k in keys_of(client, name) if k.endswith(":pace")]
    assert len(paces) == 1
    assert client.pttl(paces[0]) > 0  # it goes once over
    client.delete(*paces)
    assert burst(limiter) == 3  # the log's own room: 5 less the 2 granted


@pytest.mark.parametrize("where", ["oldest", "middle", "newest"])
def test_a_member_not_its_own_drops_the_set_not_an_error(client: redis.Redis, where: str) -> None:
    # Members are "<sum>|<weight>": one written by hand or by an older version of the
    # script ("<seq>:<tokens>") cannot be counted, so the set is dropped whole rather
    # than misread.
    clock = ManualClock(1_000.0)
    name = unique_name("garbage")
    limiter = SlidingWindow(100, 10, backend=RedisBackend(client), name=name, clock=clock)
    for _ in range(40):
        assert limiter.try_acquire()
        clock.advance(0.01)
    zset = window_key(client, name)
    score = {"oldest": 999.0, "middle": 1_000.105, "newest": 1_000.5}[where]
    client.zadd(zset, {"7:1": score})
    granted = burst(limiter)
    # Dropped when read (the ends are read on every call) or when the search for the
    # moment enough has aged out reads it (the middle, once the window is full).
    assert granted in (60, 100) if where == "middle" else granted == 100
    clock.advance(10)
    assert burst(limiter) == 100
    assert_window_state_consistent(client, name)


# -- every algorithm, and a composite: each subset of keys lost --------------------------

SPECS: dict[str, Build] = {
    "token_bucket": lambda b, n, c: TokenBucket(3, 1, backend=b, name=n, clock=c),
    "leaky_bucket": lambda b, n, c: LeakyBucket(3, 1, backend=b, name=n, clock=c),
    "sliding_window": lambda b, n, c: SlidingWindow(3, 10, backend=b, name=n, clock=c),
    "sliding_window_counter": lambda b, n, c: SlidingWindow(3, 10, approximate=True, backend=b, name=n, clock=c),
    "composite": lambda b, n, c: Composite(
        [TokenBucket(3, 1), SlidingWindow(3, 10), SlidingWindow(3, 10, approximate=True)],
        backend=b,
        name=n,
        clock=c,
    ),
}
#: How many keys each spec keeps once it has granted.
KEY_COUNTS = {"token_bucket": 1, "leaky_bucket": 1, "sliding_window": 1, "sliding_window_counter": 1, "composite": 3}
CASES = [
    pytest.param(spec, subset, id=f"{spec}-lose-{'+'.join(map(str, subset))}")
    for spec, count in KEY_COUNTS.items()
    for size in range(1, count + 1)
    for subset in itertools.combinations(range(count), size)
]


@pytest.mark.parametrize(("spec", "subset"), CASES)
def test_losing_any_subset_of_keys_only_forgets_what_was_lost(
    client: redis.Redis, spec: str, subset: tuple[int, ...]
) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("lose")
    limiter = SPECS[spec](RedisBackend(client), name, clock)
    fresh = burst(SPECS[spec](MemoryBackend(), name, ManualClock(1_000.0)))
    assert burst(limiter) == fresh
    keys = keys_of(client, name)
    assert len(keys) == KEY_COUNTS[spec], keys
    lost = [keys[i] for i in subset]
    client.delete(*lost)

    # A member forgets its grants only when its own state is gone: the grants that
    # remain elsewhere still hold the whole limiter back.
    every_member_lost = all(k in lost for k in keys)
    assert burst(limiter) == (fresh if every_member_lost else 0)

    # Every other operation works on the mended state too.
    limiter.refund(1)
    limiter.charge(1)
    limiter.feedback({"Retry-After": "1"}, status=429)
    clock.advance(100)
    assert burst(limiter) == fresh


# -- every other script: values it cannot read -----------------------------------------


@pytest.mark.parametrize("value", ["garbage", "inf", "nan", "1 x", "x 1", "inf inf"])
@pytest.mark.parametrize("spec", ["token_bucket", "leaky_bucket"])
def test_a_value_that_is_not_the_state_is_a_fresh_one(client: redis.Redis, spec: str, value: str) -> None:
    # Before: a leaky bucket's "x 1" was a Lua error; a token bucket's "inf" refused
    # for ever (a key someone else wrote may have no TTL).
    clock = ManualClock(1_000.0)
    name = unique_name("garbage")
    limiter = SPECS[spec](RedisBackend(client), name, clock)
    fresh = burst(limiter)
    (key,) = keys_of(client, name)
    client.set(key, value)
    assert burst(limiter) == fresh
    limiter.refund(1)
    limiter.charge(1)
    limiter.feedback({"Retry-After": "1"}, status=429)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total", None),
        ("total", "x"),
        ("total", "-3"),
        ("count", "x"),
        ("count", "-1"),
        ("last", "nan"),
        ("last", None),
    ],
)
def test_a_counter_field_it_cannot_read_forgets_no_grant(client: redis.Redis, field: str, value: str | None) -> None:
    # Before: tonumber(nil) went into arithmetic, a Lua error on every call; later, a
    # field that could not be read counted nothing. A total is rebuilt from the counts,
    # a count still lives in the total, and counts with no time to place them at are
    # taken as all granted now.
    clock = ManualClock(1_000.0)
    name = unique_name("garbage")
    limiter = SPECS["sliding_window_counter"](RedisBackend(client), name, clock)
    assert burst(limiter) == 3
    (key,) = keys_of(client, name)
    if field == "count":
        names = [f.decode() if isinstance(f, bytes) else str(f) for f in client.hkeys(key)]
        (field,) = [f for f in names if f.startswith("c")]
    if value is None:
        client.hdel(key, field)
    else:
        client.hset(key, field, value)
    assert burst(limiter) == 0
    clock.advance(5)
    assert burst(limiter) == 0
    clock.advance(10.5)
    assert burst(limiter) == 3


def _breaker(client: redis.Redis, clock: ManualClock, name: str) -> CircuitBreaker:
    return CircuitBreaker(min_calls=2, window=60, buckets=10, backend=RedisBackend(client), name=name, clock=clock)


@pytest.mark.parametrize(
    ("field", "value"),
    [("mode", "7"), ("mode", "x"), ("gen", "1.5"), ("opened_at", "inf"), ("c6", "junk"), ("f6", None), ("i6", None)],
)
def test_a_breaker_field_it_cannot_read_is_lost_state_not_an_error(
    client: redis.Redis, field: str, value: str | None
) -> None:
    # Before: mode "7" raised IndexError in the client, a count that was not an
    # integer failed HINCRBY, a missing count went into arithmetic.
    clock = ManualClock(1_000.0)  # bucket 166 of 6 s: slot 6
    name = unique_name("breaker")
    breaker = _breaker(client, clock, name)
    breaker.record(breaker.allow(), True)
    (key,) = keys_of(client, name)
    if value is None:
        client.hdel(key, field)
    else:
        client.hset(key, field, value)
    breaker.record(breaker.allow(), True)
    assert breaker.stats().state == "closed"
    # And it still counts: failures open it (after one or two, as the garbled field
    # counted one call or none).
    for _ in range(2):
        if breaker.state == "closed":
            breaker.record(breaker.allow(), False)
    assert breaker.state == "open"


def test_a_lost_breaker_hash_is_a_closed_breaker(client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    name = unique_name("breaker")
    breaker = _breaker(client, clock, name)
    for _ in range(2):
        breaker.record(breaker.allow(), False)
    assert breaker.state == "open"
    client.delete(*keys_of(client, name))
    assert breaker.stats().state == "closed"
    breaker.record(breaker.allow(), True)


# -- real eviction ----------------------------------------------------------------------

FILLER = b"x" * (256 * 1024)


@pytest.mark.servers
@pytest.mark.parametrize("policy", ["allkeys-random", "allkeys-lru"])
def test_real_eviction_never_errs_and_never_leaves_a_window_inconsistent(policy: str) -> None:
    # A 4 MB server holds a dozen 256 KB fillers; each new one evicts a key, the
    # limiters' among them. The window's whole state is one sorted set, so eviction
    # takes all of it or none: whenever it is there, its sums agree with its weights.
    server = private_server(maxmemory="4mb", maxmemory_policy=policy)
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        clock = ManualClock(1_000.0)
        backend = RedisBackend(client)
        name = unique_name("evict")
        window = SlidingWindow(5, 10, backend=backend, name=name, clock=clock)
        others: list[Limiter] = [
            Composite([TokenBucket(5, 0.5), SlidingWindow(5, 10)], backend=backend, name=unique_name(), clock=clock),
            LeakyBucket(5, 1, backend=backend, name=unique_name(), clock=clock),
            SlidingWindow(5, 10, approximate=True, backend=backend, name=unique_name(), clock=clock),
        ]
        assert window.try_acquire()
        zset = window_key(client, name)
        lost = 0
        for i in range(300):
            had = client.exists(zset)
            client.set(f"filler:{i}", FILLER)
            lost += had and not client.exists(zset)
            window.try_acquire()
            for limiter in others:
                limiter.try_acquire()
            assert_sums_consistent(cast("list[bytes]", client.zrange(zset, 0, -1)))
            clock.advance(0.5)
        assert client.info("stats")["evicted_keys"] > 0
        assert lost > 0, "the window's set was never evicted: the scenario did not exercise eviction"
        client.close()
    finally:
        server.cleanup()


@pytest.mark.servers
def test_volatile_policies_evict_the_limiters_first() -> None:
    # Every limiter key has a TTL; data without one is never evicted under volatile-*.
    # On a server full of such data, each write evicts the limiter's own state: here a
    # window of 5 grants 37 or 38 of 40 calls made 0.5 s apart, 20 in one window.
    server = private_server(maxmemory="4mb", maxmemory_policy="volatile-lru")
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        clock = ManualClock(1_000.0)
        limiter = SlidingWindow(5, 10, backend=RedisBackend(client), name=unique_name(), clock=clock)
        granted: list[float] = []
        for i in range(40):
            with contextlib.suppress(redis.exceptions.OutOfMemoryError):
                client.set(f"filler:{i}", FILLER)  # full of data that cannot be evicted
            with contextlib.suppress(redis.exceptions.OutOfMemoryError, BackendUnavailable):
                if limiter.try_acquire():
                    granted.append(clock.now())
            clock.advance(0.5)
        assert client.info("stats")["evicted_keys"] > 0
        most = max(sum(1 for t in granted if x <= t < x + 10) for x in granted)
        assert most > 5, f"the limiter's state survived: at most {most} grants in a window"
        client.close()
    finally:
        server.cleanup()


# -- a full server: noeviction at maxmemory -------------------------------------------


@pytest.fixture
def full_server() -> Iterator[RedisServer]:
    """A server whose data is well over ``maxmemory``, under ``noeviction``: every
    write that could grow memory is refused with OOM, reads still work."""
    server = private_server(maxmemory_policy="noeviction")
    client = redis.Redis.from_url(server.url)
    for i in range(8):
        client.set(f"filler:{i}", FILLER)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used // 2)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("one-more", "x")
    client.close()
    yield server
    server.cleanup()


FULL_SPECS = ["token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter", "composite"]


@pytest.mark.servers
@pytest.mark.parametrize("spec", FULL_SPECS)
def test_a_full_server_raises_backend_unavailable_chaining_the_oom(full_server: RedisServer, spec: str) -> None:
    backend = RedisBackend.from_url(full_server.url)
    limiter = SPECS[spec](backend, unique_name("full"), ManualClock(1_000.0))
    with pytest.raises(BackendUnavailable) as caught:
        limiter.try_acquire()
    assert isinstance(caught.value.__cause__, redis.exceptions.OutOfMemoryError)
    assert backend.stats().failures == 1
    backend.close()


@pytest.mark.servers
@pytest.mark.parametrize("spec", FULL_SPECS)
def test_a_full_server_fails_open_with_a_warning(
    full_server: RedisServer, spec: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = RedisBackend.from_url(full_server.url, on_unavailable="allow")
    limiter = SPECS[spec](backend, unique_name("full"), ManualClock(1_000.0))
    with caplog.at_level(logging.WARNING, logger="ratelimit"):
        assert [limiter.try_acquire() for _ in range(5)] == [True] * 5
    assert "fail open" in caplog.text
    assert backend.stats().failed_open == 5
    backend.close()


@pytest.mark.servers
def test_a_full_server_decides_locally(full_server: RedisServer) -> None:
    backend = RedisBackend.from_url(full_server.url, on_unavailable="local")
    limiter = TokenBucket(3, 1, backend=backend, name=unique_name("full"), clock=ManualClock(1_000.0))
    assert burst(limiter) == 3
    assert backend.stats().fell_back == 4
    backend.close()


@pytest.mark.servers
def test_a_full_server_on_the_async_path(full_server: RedisServer) -> None:
    backend = RedisBackend.from_url(full_server.url)
    limiter = SlidingWindow(3, 10, backend=backend, name=unique_name("full"), clock=ManualClock(1_000.0))

    async def scenario() -> BaseException | None:
        try:
            with pytest.raises(BackendUnavailable) as caught:
                await limiter.acquire_async()
            return caught.value.__cause__
        finally:
            await backend.aclose()

    assert isinstance(asyncio.run(scenario()), redis.exceptions.OutOfMemoryError)


@pytest.mark.servers
@pytest.mark.parametrize("policy", ["raise", "allow", "local"])
def test_a_full_server_and_the_shared_breaker(
    full_server: RedisServer, policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Asking (closed) only reads, so it works; recording an outcome writes.
    backend = RedisBackend.from_url(full_server.url, on_unavailable=policy)
    breaker = CircuitBreaker(min_calls=1, backend=backend, name=unique_name("full"), clock=ManualClock(1_000.0))
    ticket = breaker.allow()
    if policy == "raise":
        with pytest.raises(BackendUnavailable) as caught:
            breaker.record(ticket, False)
        assert isinstance(caught.value.__cause__, redis.exceptions.OutOfMemoryError)
    else:
        with caplog.at_level(logging.WARNING, logger="ratelimit"):
            breaker.record(ticket, False)
        assert "goes on locally" in caplog.text
    backend.close()


@pytest.mark.servers
def test_once_memory_is_freed_the_limiter_works_again(full_server: RedisServer) -> None:
    backend = RedisBackend.from_url(full_server.url)
    limiter = TokenBucket(3, 1, backend=backend, name=unique_name("full"), clock=ManualClock(1_000.0))
    with pytest.raises(BackendUnavailable):
        limiter.try_acquire()
    admin = redis.Redis.from_url(full_server.url)
    admin.flushall()
    admin.close()
    assert burst(limiter) == 3
    backend.close()


# -- busy, read-only, master down -------------------------------------------------------


@pytest.mark.servers
def test_a_server_busy_with_a_long_script_is_unavailable() -> None:
    # BUSY arrives as a plain ResponseError: before, it reached the caller raw.
    server = private_server("--lua-time-limit", "50")
    hog = redis.Redis.from_url(server.url, socket_timeout=30)
    admin = redis.Redis.from_url(server.url, socket_timeout=5)
    ended: list[BaseException] = []

    def run_forever() -> None:
        try:
            hog.eval("while true do end", 0)
        except redis.exceptions.RedisError as exc:
            ended.append(exc)

    thread = threading.Thread(target=run_forever, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            try:
                admin.ping()
            except redis.exceptions.ResponseError as exc:
                if str(exc).startswith("BUSY"):
                    break
            time.sleep(0.025)  # polling the server's state, not passing time
        else:
            raise AssertionError("the server never reported BUSY")
        clock = ManualClock(1_000.0)
        raising = RedisBackend.from_url(server.url)
        with pytest.raises(BackendUnavailable) as caught:
            TokenBucket(3, 1, backend=raising, name=unique_name(), clock=clock).try_acquire()
        assert str(caught.value.__cause__).startswith("BUSY")
        opening = RedisBackend.from_url(server.url, on_unavailable="allow")
        assert TokenBucket(3, 1, backend=opening, name=unique_name(), clock=clock).try_acquire()
        raising.close()
        opening.close()
    finally:
        admin.script_kill()
        thread.join(timeout=10)
        hog.close()
        admin.close()
        server.cleanup()
    assert ended, "the script was killed"


@pytest.mark.servers
@pytest.mark.parametrize(
    ("stale", "expected"),
    [
        ("yes", redis.exceptions.ReadOnlyError),
        # A function that may write is refused as such before the stale-data check.
        ("no", (redis.exceptions.MasterDownError, redis.exceptions.ReadOnlyError)),
    ],
    ids=["replica", "replica-without-master"],
)
def test_a_replica_is_unavailable(stale: str, expected: type[BaseException] | tuple[type[BaseException], ...]) -> None:
    # A replica of a master that does not answer: it serves reads (or, with
    # replica-serve-stale-data no, nothing) and refuses writes.
    server = private_server("--replicaof", "127.0.0.1", str(free_port()))
    try:
        # Set once it answers: without stale data it would not even answer PING.
        admin = redis.Redis.from_url(server.url)
        admin.config_set("replica-serve-stale-data", stale)
        admin.close()
        backend = RedisBackend.from_url(server.url)
        limiter = TokenBucket(3, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        with pytest.raises(BackendUnavailable) as caught:
            limiter.try_acquire()
        assert isinstance(caught.value.__cause__, expected)
        backend.close()
    finally:
        server.cleanup()
