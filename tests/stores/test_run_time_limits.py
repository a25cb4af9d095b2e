"""Limits changed at run time (``set_limit``, ``reset_limit``, ``ratelimit set``) and
what ``inspect`` reads back, on every store that processes share.

Time is a ManualClock and each change is made at that clock's time (``clock=``), so
"from the next decision on" is checked decision by decision. The first part runs on
every shared store of the backend matrix (fakeredis, a real Redis, a Cluster, a SQLite
file), several backends on one store standing for several processes, with the same
figures on each. Then what only one store has, marked as such: for Redis, the script's
mapping, what the code says (``:code``) and its eviction, the command against live
worker processes, a Cluster and hash tags; for a SQLite file, the fast path stepping
aside, the changes kept in a row and decided as Redis decides them (``changes.py``),
garbage in the rows, several processes and the file's formats.
"""

from __future__ import annotations

import bisect
import json
import math
import multiprocessing
import os
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.cluster
from changes import KINDS, Step, for_kind, steps, through_both
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    SQLiteBackend,
    TokenBucket,
)
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.keys import code_key, config_key, key_for
from ratelimit._stores.records import Override, UnchangeableLimit
from ratelimit._stores.redis.config import inspect, read_override, write_override
from ratelimit._stores.redis.scripts import group_script, single_script
from ratelimit._stores.sqlite import file as sqlite_file
from ratelimit._stores.sqlite.config import MOST_KEPT
from ratelimit.cli import main

from conftest import REDIS_URL, SUPPORT, private_server, unique_name


def grants(limiter: Any, n: int = 1000) -> int:
    """How many unit try_acquires go now, up to ``n``."""
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


# -- on every shared store ------------------------------------------------------------
# A change at run time reaches every process of a store that processes share: the
# backend matrix's stores less the in-process one. Each ``shared.backend()`` stands for
# a process of its own on the same store; every figure is the same on each.

#: The stores these run on: conftest.STORES less "memory", which no other process reads.
SHARED = ["fakeredis", "redis", "cluster", "sqlite"]


class Shared:
    """Backends on one shared store, each standing for a process of its own."""

    def __init__(self, store: str, request: pytest.FixtureRequest) -> None:
        self.store = store
        self.made: list[RedisBackend | SQLiteBackend] = []
        self.path: Path = request.getfixturevalue("tmp_path") / "store.db"
        self.client: Any = None
        if store == "fakeredis":
            self.client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        elif store == "redis":
            self.client = request.getfixturevalue("redis_client")
        elif store == "cluster":
            self.client = request.getfixturevalue("cluster_client")

    def backend(self, *, coalesce: bool = False) -> RedisBackend | SQLiteBackend:
        """Another process's backend (``coalesce`` is Redis's; a file has no rounds)."""
        made: RedisBackend | SQLiteBackend
        if self.store == "sqlite":
            made = SQLiteBackend(self.path)
        elif self.store == "redis":
            made = RedisBackend.from_url(REDIS_URL, coalesce=coalesce)
        elif self.store == "fakeredis":
            server = self.client.connection_pool.connection_kwargs["server"]
            made = RedisBackend(fakeredis.FakeRedis(server=server), coalesce=coalesce)
        else:  # a client of its own: closing a backend closes its client
            host, port = self.client.get_default_node().host, self.client.get_default_node().port
            made = RedisBackend(redis.cluster.RedisCluster(host=host, port=port, socket_timeout=2), coalesce=coalesce)
        self.made.append(made)
        return made

    def coalescing(self) -> tuple[bool, ...]:
        """The ways a backend of this store sends its calls: Redis's plain and
        coalesced; a file's one."""
        return (False,) if self.store == "sqlite" else (False, True)

    def change_stored(self, name: str) -> bool:
        """Whether the store still holds a change for ``name`` (its key, or its row)."""
        if self.store == "sqlite":
            conn = sqlite3.connect(self.path)
            try:
                return bool(conn.execute("SELECT count(*) FROM ratelimit_config WHERE name = ?", (name,)).fetchone()[0])
            finally:
                conn.close()
        return bool(self.client.exists(config_key(name)))

    def close(self) -> None:
        for made in self.made:
            made.close()


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest) -> Iterator[Shared]:
    made = Shared(str(request.param), request)
    yield made
    made.close()


def test_a_change_holds_from_the_next_decision_of_every_process(shared: Shared) -> None:
    clock = ManualClock(1000.0)
    name = unique_name("next")
    backends = [shared.backend() for _ in range(3)]
    limiters = [TokenBucket(30, 1, backend=b, name=name, clock=clock) for b in backends]
    assert [grants(lim, 10) for lim in limiters] == [10, 10, 10]  # the code's 30 between them
    clock.advance(1.0)
    backends[0].set_limit(name, rate=100, burst=5, clock=clock)
    # 29 tokens owed at 1/s keep their count: at 100/s they are repaid in 0.29 s.
    assert [grants(lim) for lim in limiters] == [0, 0, 0]
    clock.advance(0.29 + 0.05)  # repaid, then 5 refilled: the new burst
    assert [grants(lim) for lim in limiters] == [5, 0, 0]
    clock.advance(0.02)
    assert [grants(lim) for lim in limiters] == [2, 0, 0]
    assert backends[1].reset_limit(name, clock=clock)
    # Back to the code: the 5 tokens owed at 100/s are 5 owed at 1/s, out of 30.
    assert [grants(lim) for lim in limiters] == [25, 0, 0]
    clock.advance(1.0)
    assert [grants(lim) for lim in limiters] == [1, 0, 0]
    assert not backends[2].reset_limit(name, clock=clock)


def test_a_change_made_before_a_decision_moves_the_state_at_its_own_time(shared: Shared) -> None:
    """No process decides between the change and a later decision: the state moves
    as of the change, not as of that decision."""
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("late")
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
    assert grants(limiter) == 10  # 10 owed at 1/s
    backend.set_limit(name, rate=10, clock=clock)  # at 1000: 10 owed at 10/s take 1 s
    clock.advance(5.0)
    # Moved at 1005 instead, the 5 still owed would take 0.5 s and grant 5 now.
    assert grants(limiter) == 10


def test_a_leaky_bucket_keeps_its_queue_at_the_new_rate(shared: Shared) -> None:
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("leaky")
    limiter = LeakyBucket(10, 1, backend=backend, name=name, clock=clock)
    assert limiter.acquire(timeout=0) == 0
    for expected in (1.0, 2.0, 3.0):
        wait = backend.bind(name, limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
        assert wait == pytest.approx(expected)
    backend.set_limit(name, rate=10, clock=clock)
    # Four tokens queued at 1/s leak in 0.4 s at 10/s; the next one goes after them.
    wait = backend.bind(name, limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
    assert wait == pytest.approx(0.4)


def test_a_window_keeps_its_length_and_takes_the_rate_as_its_limit(shared: Shared) -> None:
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("window")
    limiter = SlidingWindow(10, 60, backend=backend, name=name, clock=clock, guard=0)
    assert grants(limiter) == 10
    backend.set_limit(name, rate=0.5, clock=clock)  # 30 per 60 s window
    assert grants(limiter) == 20
    with pytest.raises(ValueError, match=r"burst=5.0.*sliding_window.*no burst"):
        backend.set_limit(name, burst=5, clock=clock)
    assert backend.limit_override(name, clock=clock) == Override(0.5, None)


def test_a_change_for_a_while_ends_at_the_first_decision_after_it(shared: Shared) -> None:
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("ttl")
    limiter = TokenBucket(2, 1, backend=backend, name=name, clock=clock)
    backend.set_limit(name, rate=10, burst=20, ttl=3.0, clock=clock)
    assert backend.limit_override(name, clock=clock) == Override(10.0, 20.0, 3.0)
    assert grants(limiter) == 20
    clock.advance(3.0)
    # The change has ended: the 20 owed at 10/s were repaid after 2 s, and the
    # code's bucket of 2 is full again, no more.
    assert backend.limit_override(name, clock=clock) is None
    assert grants(limiter) == 2
    assert not shared.change_stored(name)


def test_set_limit_on_a_test_clock_carries_the_tokens_owed(shared: Shared) -> None:
    # The change is made at the limiter's own time, to the state kept on its clock:
    # read at the store's time, the state would not move and the lower rate would
    # read the 10 tokens owed as 1, a fresh burst (and the change would never end).
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("set-clock")
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
    assert grants(limiter) == 10
    backend.set_limit(name, rate=0.1, ttl=30, clock=clock)
    assert grants(limiter) == 0  # the 10 owed take 100 s at 0.1/s: one token per 10 s
    clock.advance(10.0)
    assert grants(limiter) == 1
    assert backend.limit_override(name, clock=clock) == Override(0.1, None, 20.0)
    clock.advance(20.0)  # the change ends on the limiter's clock: 8 owed at 1/s again
    assert backend.limit_override(name, clock=clock) is None
    assert grants(limiter) == 2
    backend.set_limit(name, burst=4, clock=clock)
    assert backend.reset_limit(name, clock=clock)
    assert not backend.reset_limit(name, clock=clock)
    with pytest.raises(TypeError, match=r"clock must be a clock instance.*ManualClock"):
        backend.set_limit(name, rate=1, clock=ManualClock)  # type: ignore[arg-type]


def test_a_request_larger_than_a_lowered_burst_is_refused_for_ever(shared: Shared) -> None:
    clock = ManualClock(1000.0)
    for coalesce in shared.coalescing():
        backend = shared.backend(coalesce=coalesce)
        name = unique_name("big")
        limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
        backend.set_limit(name, burst=3, clock=clock)
        with pytest.raises(AcquireTimeout) as caught:
            limiter.acquire(5)
        assert caught.value.retry_after == math.inf
        assert limiter.try_acquire(5) is False
        assert limiter.try_acquire(3) is True


def test_a_request_larger_than_a_lowered_burst_is_refused_with_holes_too(shared: Shared) -> None:
    """With a withdrawn reservation's hole beside the state, the decision plans through
    the holes: the request too large for the change is refused there too, never
    granted at an infinite time."""
    clock = ManualClock(1000.0)
    backend = shared.backend()
    name = unique_name("holes")
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
    assert grants(limiter) == 10
    reservation = limiter.reserve(1)
    limiter.reserve(1)
    reservation.cancel()  # a hole ahead, kept beside the state
    backend.set_limit(name, burst=3, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(5)
    assert caught.value.retry_after == math.inf
    assert limiter.peek(5) == math.inf


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0}, "rate must be > 0"),
        ({"rate": -1}, "rate must be > 0"),
        ({"rate": math.nan}, "rate must be a number"),
        ({"rate": math.inf}, "rate must be > 0"),
        ({"rate": 1e13}, "rate must be between"),
        ({"rate": "fast"}, "rate must be a"),
        ({"burst": 0}, "burst must be > 0"),
        ({"burst": 1e-9}, "burst must be between"),
        ({"rate": 1, "ttl": 0}, "ttl must be > 0"),
        ({"rate": 1, "ttl": 1e9}, "ttl must be > 0 and at most"),
        ({}, "give rate, burst or both"),
    ],
)
def test_bad_values_are_refused_and_change_nothing(shared: Shared, kwargs: dict[str, Any], message: str) -> None:
    backend = shared.backend()
    name = unique_name("bad")
    backend.set_limit(name, rate=7)
    with pytest.raises((ValueError, TypeError), match=message):
        backend.set_limit(name, **kwargs)
    assert backend.limit_override(name) == Override(7.0, None)


# -- Redis only: the scripts, what the code says (``:code``), eviction, the commands ------


WORKER = SUPPORT / "shared_worker.py"


def change(client: Any, name: str, clock: ManualClock, rate: float | None = None, burst: float | None = None,
           ttl: float | None = None) -> None:  # fmt: skip
    write_override(client, name, Override(rate, burst, ttl), now=clock.now())


@pytest.fixture
def backend(redis_client: redis.Redis) -> Any:
    """The Redis tests' backend (this module's, in place of the matrix's)."""
    made = RedisBackend(redis_client, coalesce=False)
    yield made
    made.close()


# -- the mapping: the script and the algorithm agree ----------------------------------------------------


ALGS = st.one_of(
    st.builds(Gcra, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(LeakyQueue, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(WindowLog, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(WindowCounter, st.floats(1, 1e4), st.floats(0.01, 1e4)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    alg=ALGS,
    guard=st.sampled_from([0.0, 0.001, 0.05, 0.3]),
    rate=st.none() | st.floats(1e-6, 1e6),
    burst=st.none() | st.floats(1e-6, 1e6),
)
def test_the_script_maps_a_change_exactly_as_the_algorithm_does(
    redis_client: redis.Redis, alg: Any, guard: float, rate: float | None, burst: float | None
) -> None:
    try:
        guarded = alg.guarded(guard) if guard else alg
    except ValueError:
        return  # a configuration the limiter itself refuses
    if rate is None and burst is None:
        rate = 1.0
    name = unique_name("map")
    kind = guarded.kind
    if kind in ("sliding_window", "sliding_window_counter"):
        burst = None
    redis_client.hset(config_key(name), mapping={"rate": "" if rate is None else repr(rate),
                                                 "burst": "" if burst is None else repr(burst)})  # fmt: skip
    reply = single_script(kind)(
        redis_client,
        [key_for(name, kind), config_key(name)],
        ["peek", "1000", "1", "", *(repr(p) for p in guarded.params()), repr(guarded.slack)],
    )
    expected = guarded.configured(rate, burst).params()
    assert (float(reply[0]), float(reply[1])) == expected


def test_guarded_algorithms_carry_their_slack() -> None:
    assert Gcra(10, 100).guarded(0.05).slack == 0.05
    assert LeakyQueue(10, 100).guarded(0.05).guarded(0.01).slack == pytest.approx(0.06)
    assert WindowLog(10, 1).guarded(0.05).slack == 0.05
    # The guard stays kept back from the new values.
    bucket = Gcra(10, 100).guarded(0.05)  # 5 tokens kept back
    # 10 - 0.05 x 200 leaves nothing: one whole token is kept, never a dead bucket.
    assert bucket.configured(200, None).params() == (1.0, 200)
    assert bucket.configured(None, 20).params() == (15.0, 100)
    window = WindowLog(10, 60).guarded(0.05)
    assert window.configured(1.0, None).params() == (60.0, 60.05)


# -- from the next decision on, in every process ------------------------------------------


def _owed_trace(backend: RedisBackend, client: redis.Redis, lose_code: bool) -> list[object]:
    """The grants of the sequence above, with what the code says deleted (as an evicting
    ``maxmemory-policy`` takes it) before each change when ``lose_code``."""
    clock = ManualClock(1000.0)
    name = unique_name("set-codeless")
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)

    def lose() -> None:
        if lose_code:
            client.delete(code_key(name))  # (written again at a process's first decision a minute on)

    trace: list[object] = [grants(limiter)]
    assert client.exists(code_key(name))
    lose()
    backend.set_limit(name, rate=0.1, ttl=30, clock=clock)
    trace.append(grants(limiter))  # the 10 owed take 100 s at 0.1/s
    clock.advance(10.0)
    trace += [grants(limiter), backend.limit_override(name, clock=clock)]
    clock.advance(20.0)  # ends by itself: 8 owed at 1/s again
    trace += [backend.limit_override(name, clock=clock), grants(limiter)]
    lose()
    backend.set_limit(name, rate=100, burst=10, clock=clock)
    trace.append(grants(limiter))  # 10 owed at 1/s become 10 owed at 100/s
    clock.advance(0.05)
    trace.append(grants(limiter))
    lose()
    trace.append(backend.reset_limit(name, clock=clock))
    clock.advance(1.0)  # back at 1/s: what 100/s owed is owed at 1/s
    trace.append(grants(limiter))
    lose()
    backend.set_limit(name, rate=1000, burst=1000, clock=clock)
    lose()
    backend.set_limit(name, rate=0.5, clock=clock)  # no decision between the two changes
    clock.advance(4.0)
    trace.append(grants(limiter))
    return trace


def test_a_change_holds_at_once_when_what_the_code_says_is_gone(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    """``:code`` (what the code says) is the key an evicting policy takes first: it is
    written once a minute. ``set`` then knows neither the kind nor the code's values,
    and the change must still hold from the next decision, moving the tokens owed as
    it does when the code is known, not be ignored until a process writes ``:code``."""
    kept = _owed_trace(backend, redis_client, lose_code=False)
    assert kept == [10, 0, 1, Override(0.1, None, 20.0), None, 2, 0, 5, True, 1, 2]
    assert _owed_trace(backend, redis_client, lose_code=True) == kept


@pytest.mark.servers
def test_a_change_holds_after_an_evicting_policy_took_what_the_code_says(caplog: pytest.LogCaptureFixture) -> None:
    """On a server that evicts (allkeys-lru), ``:code`` is written once a minute and
    goes first while the state, touched at every decision, stays. ``set`` still holds
    from the next decision, and says the change itself may be evicted."""
    server = private_server("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10")
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        backend = RedisBackend(client, coalesce=False)
        clock = ManualClock(1000.0)
        name = unique_name("evicted")
        limiter = TokenBucket(400, 400, backend=backend, name=name, clock=clock)
        assert grants(limiter, 10) == 10
        # Filled until what the code says is evicted.
        filler = b"x" * 65536
        for i in range(1000):
            if not client.exists(code_key(name)):
                break
            client.set(f"filler-{i}", filler)
            assert limiter.try_acquire()  # the state is touched, what the code says is not
            clock.advance(1 / 400)
        assert not client.exists(code_key(name))
        assert client.exists(key_for(name, "token_bucket", injected=True))
        with caplog.at_level("WARNING", logger="ratelimit"):
            backend.set_limit(name, rate=10, burst=10, clock=clock)
        # What is owed is kept (LRU is kept to the second: the state may have been
        # evicted too, and started afresh): at most the new burst now, not ~390.
        assert grants(limiter) <= 10
        clock.advance(1.0)
        assert grants(limiter) == 10
        assert "maxmemory-policy allkeys-lru" in caplog.text  # said: the change may go too
        backend.close()
    finally:
        client.close()
        server.cleanup()


def test_a_change_on_a_server_that_does_not_evict_says_nothing(
    backend: RedisBackend, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    policy = redis_client.info("memory")["maxmemory_policy"]
    name = unique_name("quiet")
    with caplog.at_level("WARNING", logger="ratelimit"):
        backend.set_limit(name, rate=10)
    assert ("maxmemory-policy" in caplog.text) == policy.startswith("allkeys-")
    backend.reset_limit(name)


def test_what_the_code_says_is_written_once_and_kept_a_day(backend: RedisBackend, redis_client: redis.Redis) -> None:
    name = unique_name("code")
    limiter = TokenBucket(4, 2, backend=backend, name=name, guard=0.25)
    limiter.try_acquire()
    key = f"ratelimit:{{{name}}}:code"
    assert redis_client.hgetall(key) == {
        b"kind": b"token_bucket",
        b"p1": b"3.5",
        b"p2": b"2.0",
        b"slack": b"0.25",
        b"shadow": b"0",
    }
    assert 86_000_000 < redis_client.pttl(key) <= 86_400_000
    redis_client.pexpire(key, 50_000)
    limiter.try_acquire()
    assert redis_client.pttl(key) <= 50_000  # present: not rewritten by every call


def test_a_garbled_stored_change_is_ignored(backend: RedisBackend, redis_client: redis.Redis) -> None:
    clock = ManualClock(1000.0)
    for rate, burst in [("nan", ""), ("abc", "-1"), ("1e300", "inf"), ("0", "0"), ("", "")]:
        name = unique_name("garbled")
        limiter = TokenBucket(4, 1, backend=backend, name=name, clock=clock)
        redis_client.hset(config_key(name), mapping={"rate": rate, "burst": burst, "until": "x"})
        assert grants(limiter) == 4
        assert read_override(redis_client, name, now=clock.now()) is None


def test_a_bad_name_is_refused(backend: RedisBackend) -> None:
    with pytest.raises(ValueError, match="name must be 1 to"):
        backend.set_limit("", rate=1)
    with pytest.raises(TypeError, match="name must be a str"):
        backend.inspect(5)  # type: ignore[arg-type]


def test_an_asyncio_only_backend_says_it_needs_a_sync_client() -> None:
    import redis.asyncio

    backend = RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL))
    with pytest.raises(TypeError, match="sync one"):
        backend.set_limit("x", rate=1)


def test_a_change_and_inspect_work_on_fakeredis() -> None:
    client = fakeredis.FakeRedis()
    backend = RedisBackend(client, coalesce=False)
    clock = ManualClock(1000.0)
    limiter = TokenBucket(5, 1, backend=backend, name="fake", clock=clock)
    change(client, "fake", clock, burst=2)
    assert grants(limiter) == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 3)), min_size=5, max_size=40),
    when=st.integers(0, 39),
    capacity=st.sampled_from([1.0, 3.0, 10.0]),
    rate=st.sampled_from([2.0, 10.0]),
    burst=st.sampled_from([1.0, 2.0, 5.0, 20.0]),
    new_rate=st.sampled_from([0.5, 5.0, 50.0]),
    code_lost=st.booleans(),
)
def test_after_a_change_no_interval_passes_the_new_limit(
    redis_client: redis.Redis,
    steps: list[tuple[float, int]],
    when: int,
    capacity: float,
    rate: float,
    burst: float,
    new_rate: float,
    code_lost: bool,
) -> None:
    """... whether or not what the code says was there (evicted: ``code_lost``)."""
    clock = ManualClock(1000.0)
    name = unique_name("bound")
    backend = RedisBackend(redis_client, coalesce=False)
    limiter = TokenBucket(capacity, rate, backend=backend, name=name, clock=clock)
    changed_at = None
    times: list[float] = []
    for i, (gap, tries) in enumerate(steps):
        if i == when:
            if code_lost:
                redis_client.delete(code_key(name))
            change(redis_client, name, clock, rate=new_rate, burst=burst)
            changed_at = clock.now()
        clock.advance(gap)
        for _ in range(tries):
            if limiter.try_acquire() and changed_at is not None:
                times.append(clock.now())
    backend.close()
    # Every interval from the change on holds at most burst + new_rate * its length.
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + new_rate * (times[j] - start) + 1e-6


# -- the commands against live worker processes ------------------------------------------


def max_in_any_window(times: list[float], width: float) -> int:
    return max((bisect.bisect_left(times, t + width) - i for i, t in enumerate(times)), default=0)


@pytest.mark.slow
def test_set_mid_run_changes_the_rate_of_every_live_process(redis_client: redis.Redis) -> None:
    name = unique_name("live")
    seconds = 4.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), REDIS_URL, name, "20", "400", "4", str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    # The processes run at the code's 400/s for a second once they have started (which
    # takes longer than that on a loaded machine: wait for their first grant, not a time).
    deadline = time.monotonic() + 30
    while not any(redis_client.scan_iter(match=f"ratelimit:{{{name}}}:*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-m", "ratelimit", "set", name, "--rate", "50/s", "--burst", "5", "--redis", REDIS_URL],
        capture_output=True,
        text=True,
        timeout=30,
    )
    after = time.time()
    assert out.returncode == 0, out.stderr
    assert "rate 50/s, burst 5 tokens; until reset" in out.stdout
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout)["grants"])
    everyone = sorted(t for r in results for t in r)
    early = [t for t in everyone if t < before]
    assert len(early) > 300, "the code's rate ran before the change"
    # Reservations made before the change at 400/s may still land just after it (12
    # threads hold at most one each); from 0.1 s after it, only the new limit holds.
    late = [t for t in everyone if t >= after + 0.1]
    assert max_in_any_window(late, 1.0) <= 5 + 50 + 1
    span = everyone[-1] - (after + 0.1)
    assert span > 1.0
    # At the change, up to the old burst (20 tokens) and a reservation of each of the
    # 12 threads may be owed, made at 400/s: they keep their count and refill at the
    # new rate, so the first (20 + 12) / 50 s after it may grant nothing (on a loaded
    # machine the processes start late, the change comes late in their run, and that
    # is a good part of a short span).
    owed = (20 + 12) / 50
    assert 0.8 * 50 * (span - owed) <= len(late) <= (1.1 * 50 + 5 / span) * span
    # Every process follows it: none gets more than the new rate alone.
    for r in results:
        assert len([t for t in r if t >= after + 0.1]) <= 50 * span + 5 + 1


@pytest.mark.slow
def test_a_change_holds_in_live_processes_once_what_the_code_says_is_evicted(redis_client: redis.Redis) -> None:
    """Processes at 400/s, ``:code`` evicted (deleted here), then a change to 50/s,
    burst 5: from 0.1 s after it, no second holds more than the new limit, in every
    process, without waiting for a process to write ``:code`` again a minute on."""
    name = unique_name("live-evicted")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), REDIS_URL, name, "20", "400", "4", "6"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    deadline = time.monotonic() + 30
    while not redis_client.exists(key_for(name, "token_bucket")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)
    assert redis_client.delete(code_key(name)) == 1
    backend = RedisBackend(redis_client, coalesce=False)
    backend.set_limit(name, rate=50, burst=5)
    after = time.time()
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout)["grants"])
    late = sorted(t for r in results for t in r if t >= after + 0.1)
    assert late, "the processes ended before the change"
    assert max_in_any_window(late, 1.0) <= 5 + 50 + 1
    assert not redis_client.exists(code_key(name))  # no process wrote it again meanwhile
    backend.reset_limit(name)


def test_inspect_and_set_commands(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("cmd")
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    limiter = TokenBucket(10, 2, backend=backend, name=name, guard=0.5)
    for _ in range(4):
        limiter.acquire()
    limiter.feedback({"Retry-After": "30"}, 429)
    assert main(["inspect", name, "--redis", REDIS_URL]) == 0
    text = capsys.readouterr().out
    assert f"{name}  (token_bucket)" in text
    assert "capacity 9 tokens, refill_per_sec 2/s (guard 0.5 s kept back)" in text
    assert "changed      none (the code's values)" in text
    assert "fed back by the provider, until " in text
    assert "(30 s left)" in text or "(29." in text

    assert main(["set", name, "--rate", "600/min", "--for", "1h", "--redis", REDIS_URL]) == 0
    text = capsys.readouterr().out
    assert "rate 10/s; ends in 60 min" in text
    # The guard is kept back at the new rate: 10 - 0.5 x 10 = 5.
    assert "in force     capacity 5 tokens, refill_per_sec 10/s" in text

    assert main(["inspect", name, "nobody-" + name, "--redis", REDIS_URL, "--json"]) == 1
    seen = json.loads(capsys.readouterr().out)
    assert seen["unknown"] == ["nobody-" + name]
    (entry,) = seen["limiters"]
    assert entry["kind"] == "token_bucket"
    assert entry["effective"] == {"capacity": 5.0, "refill_per_sec": 10.0}
    assert entry["override"]["rate"] == 10.0
    assert 3590 < entry["override"]["ttl"] <= 3600
    assert entry["paused_for"] > 25

    assert main(["set", name, "--reset", "--redis", REDIS_URL]) == 0
    assert "back to the code's values" in capsys.readouterr().out
    assert backend.limit_override(name) is None
    # Every name found, when none is given.
    assert main(["inspect", "--redis", REDIS_URL, "--json"]) == 0
    assert name in [e["name"] for e in json.loads(capsys.readouterr().out)["limiters"]]
    backend.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["set", "x", "--redis", REDIS_URL], "give --rate, --burst or both"),
        (["set", "x", "--reset", "--rate", "1/s", "--redis", REDIS_URL], "--reset returns to the code's values"),
        (["set", "x", "--rate", "0/s", "--redis", REDIS_URL], "--rate"),
        (["set", "x", "--rate", "1/s", "--for", "soon", "--redis", REDIS_URL], "expected a duration"),
        (["set", "x", "--burst", "-2", "--redis", REDIS_URL], "--burst"),
        (["set", "x", "--burst", "1e13", "--redis", REDIS_URL], "burst must be between"),
        (["set", "x", "--rate", "1/s"], "--redis"),
        (["inspect"], "--redis"),
    ],
)
def test_bad_command_arguments_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_an_unreachable_redis_exits_1_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--redis", "redis://:hunter2@127.0.0.1:1"]) == 1
    assert main(["set", "x", "--rate", "1/s", "--redis", "redis://:hunter2@127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis at redis://:***@127.0.0.1:1" in err
    assert "hunter2" not in err


def test_inspect_shows_a_breaker_and_a_composites_members(redis_client: redis.Redis) -> None:
    from ratelimit import CircuitBreaker, Composite

    name = unique_name("breaker")
    backend = RedisBackend(redis_client, coalesce=False)
    breaker = CircuitBreaker(failure_threshold=0.5, min_calls=2, backend=backend, name=name)
    for _ in range(2):
        breaker.record(breaker.allow(), False)
    composite = Composite([TokenBucket(5, 1), SlidingWindow(10, 60)], backend=backend, name=name)
    assert composite.try_acquire()
    seen = inspect(redis_client, name)
    assert seen.known
    assert seen.kind is None
    assert seen.breaker == "open"
    assert seen.other_keys == ("0:token_bucket", "1:sliding_window")
    backend.close()


def test_set_inspect_and_top_on_a_cluster(cluster_client: Any) -> None:
    from ratelimit._stores.redis.fleet import fleet

    backend = RedisBackend(cluster_client, coalesce=False)
    name = unique_name("cluster")
    limiter = TokenBucket(10, 1, backend=backend, name=name)
    assert grants(limiter) == 10
    backend.set_limit(name, rate=1000, burst=3)
    time.sleep(0.02)  # 10 owed at 1,000/s: repaid in 10 ms, then 3 of burst at most
    assert 1 <= grants(limiter) <= 3 + 20
    seen = backend.inspect(name)
    assert seen.effective == {"capacity": 3.0, "refill_per_sec": 1000.0}
    assert backend.reset_limit(name)
    assert backend.limit_override(name) is None
    # A change stored before any process decided (no script known to write it).
    fresh = unique_name("cluster-fresh")
    backend.set_limit(fresh, rate=2, ttl=60)
    assert backend.limit_override(fresh) == Override(2.0, None, pytest.approx(60, abs=1))  # type: ignore[arg-type]
    seconds, micros = cluster_client.time()
    rows = fleet(cluster_client, window=2, now=float(seconds) + micros / 1e6 + 1.0)
    assert name in [row.name for row in rows]
    backend.close()


def test_names_with_hash_tags_and_glob_characters(backend: RedisBackend, redis_client: redis.Redis) -> None:
    name = unique_name("odd{x}*?[a]%")
    limiter = TokenBucket(3, 1, backend=backend, name=name)
    assert grants(limiter) == 3
    assert not limiter.try_acquire()
    backend.set_limit(name, burst=2)
    seen = backend.inspect(name)
    assert seen.kind == "token_bucket"
    assert seen.other_keys == ()
    assert seen.effective == {"capacity": 2.0, "refill_per_sec": 1.0}
    assert backend.reset_limit(name)
    # A composite of such a name: its members' keys are found by a pattern that
    # matches the name's glob characters literally.
    from ratelimit import Composite

    composite = Composite([TokenBucket(3, 1), TokenBucket(5, 1)], backend=backend, name=name)
    assert composite.try_acquire()
    assert backend.inspect(name).other_keys == ("0:token_bucket", "1:token_bucket")
    assert backend.inspect(name + "x").other_keys == ()


def _peeks_after_a_change(backend: RedisBackend, client: redis.Redis, lose_code: bool) -> list[float]:
    clock = ManualClock(1000.0)
    name = unique_name("set-peek")
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
    assert grants(limiter) == 10
    if lose_code:
        client.delete(code_key(name))
    backend.set_limit(name, rate=0.5, burst=3, clock=clock)
    peeks = [limiter.peek(1)]
    clock.advance(2.0)
    peeks.append(limiter.peek(1))
    return peeks


def test_peek_after_a_change_whose_code_was_gone_tells_the_wait_the_decision_keeps(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    """A limiter's ``peek`` right after ``set`` tells the wait its next decision keeps,
    whether or not what the code says (``:code``) was there to move the state."""
    kept = _peeks_after_a_change(backend, redis_client, lose_code=False)
    assert kept == [16.0, 14.0]
    assert _peeks_after_a_change(backend, redis_client, lose_code=True) == kept


# -- SQLite only: the fast path, changes kept in the row and decided as Redis decides
# them, garbage in the rows, processes and the file's formats ---------------------------


#: The repository: a process of the release before runs from its history.
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """The SQLite tests' file."""
    return tmp_path / "store.db"


def test_the_quick_path_steps_aside_while_a_change_is_in_force(path: Path) -> None:
    """A bucket on real time decides in one statement; with a change in force it
    decides in full transactions, and in one statement again once reset."""
    backend = SQLiteBackend(path)
    # A token per 1000 s: what a test reads is not moved by the time it takes.
    limiter = TokenBucket(1000, 1e-3, backend=backend, name="quick")
    assert grants(limiter, 3) == 3
    backend.set_limit("quick", burst=2)
    assert grants(limiter, 10) == 0  # 3 owed: more than the new burst
    assert backend.reset_limit("quick")
    assert grants(limiter, 10) == 10
    conn = sqlite3.connect(path)
    (rate, burst), *_ = conn.execute("SELECT rate, burst FROM ratelimit_state WHERE name = 'quick'").fetchall()
    conn.close()
    assert (rate, burst) == (None, None)


def test_names_that_would_never_read_a_change_are_refused(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    Composite([TokenBucket(5, 1), SlidingWindow(10, 60)], backend=backend, name="both", clock=clock).acquire()
    TokenBucket(5, 1, backend=backend, name="lanes", low_share=0.4, clock=clock).acquire()
    for name, what in (("both", "composite"), ("lanes", "priorities")):
        with pytest.raises(UnchangeableLimit, match=what):
            backend.set_limit(name, rate=1, clock=clock)
        assert backend.limit_override(name, clock=clock) is None
    # A ConcurrencyLimit's slots are rows of another table: a change stored for it
    # would never be read.
    held = ConcurrencyLimit(2, backend=backend, name="slots").take()
    with pytest.raises(UnchangeableLimit, match="ConcurrencyLimit"):
        backend.set_limit("slots", rate=1)
    assert backend.limit_override("slots") is None
    held.release()
    # A name no process has used yet takes the change, for the limiter that reads it.
    backend.set_limit("later", rate=2, clock=clock)
    assert backend.limit_override("later", clock=clock) == Override(2.0, None)
    with pytest.raises(ValueError, match="rate must be"):
        backend.set_limit("later", rate=0, clock=clock)
    with pytest.raises(ValueError, match="name must be"):
        backend.set_limit("", rate=1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    capacity=st.floats(1, 50),
    rate=st.floats(0.5, 50),
    new_rate=st.floats(0.5, 50),
    used=st.integers(0, 60),
)
def test_the_move_is_the_lua_twin_s(tmp_path: Path, capacity: float, rate: float, new_rate: float, used: int) -> None:
    """``Gcra.rescale`` (and ``LeakyQueue.rescale``), as ``token_bucket.rescale`` of
    Lua writes it: what is owed keeps its count at the new rate; nothing owed, nothing moves."""
    old, new = Gcra(capacity, rate), Gcra(capacity, new_rate)
    now = 1000.0
    state = now + used / rate
    moved = old.rescale(new, state, now)
    assert moved == (now + (state - now) * old.rate * new.interval if state > now else state)
    assert old.rescale(new, now - 1.0, now) == now - 1.0
    leaky_old, leaky_new = LeakyQueue(capacity, rate), LeakyQueue(capacity, new_rate)
    assert leaky_old.rescale(leaky_new, (state, 5.0), now)[1] == 5.0


def test_set_and_inspect_commands_on_a_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 2, backend=backend, name="cli")
    assert limiter.try_acquire()
    url = f"sqlite:///{path}"
    assert main(["set", "cli", "--rate", "30/min", "--burst", "4", "--for", "1h", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "cli:" in out
    assert "rate 0.5/s" in out
    override = backend.limit_override("cli")
    assert override is not None
    assert (override.rate, override.burst) == (0.5, 4.0)
    assert override.ttl == pytest.approx(3600, abs=5)
    assert main(["inspect", "cli", "--store", url]) == 0
    assert "changed      rate 0.5/s, burst 4 tokens; ends in" in capsys.readouterr().out
    assert main(["set", "cli", "--reset", "--store", url]) == 0
    assert "back to the code's values" in capsys.readouterr().out
    assert backend.limit_override("cli") is None
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=backend, name="pair").acquire()
    assert main(["set", "pair", "--rate", "1/s", "--store", url]) == 1
    assert "composite" in capsys.readouterr().err


def test_top_counts_every_process_s_decisions(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each process counts in memory and writes once a second; ``top`` adds them up
    per limiter (a composite as one, a keyed budget in its limiter's row)."""
    backends = [SQLiteBackend(path) for _ in range(2)]
    first, second = (TokenBucket(5, 1e-3, backend=b, name="top-a") for b in backends)
    assert grants(first, 8) == 5  # 5 granted, then refused (the 6th)
    assert not second.try_acquire()
    assert not second.try_acquire()
    assert TokenBucket(5, 1, backend=backends[1], name="top-k").for_key("customer-1").try_acquire()
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=backends[1], name="top-c").acquire()
    second.feedback({"Retry-After": "30"}, status=429)  # a pause fed back
    backends[1].write_counts()
    rows = {row.name: row for row in backends[0].top(5.0, now=backends[0].now() + 1.0)}
    assert set(rows) == {"top-a", "top-k", "top-c"}
    assert rows["top-a"].grants_per_sec == pytest.approx(5 / 5)
    assert rows["top-a"].refusals_per_sec == pytest.approx(3 / 5)
    assert rows["top-a"].p99_wait == 0.0
    assert rows["top-a"].pauses == 1
    assert rows["top-c"].kind == "composite"
    assert rows["top-c"].grants_per_sec == pytest.approx(1 / 5)
    assert rows["top-k"].kind == "token_bucket"
    url = f"sqlite:///{path}"
    assert main(["top", "--store", url, "--json"]) == 0
    assert {row["name"] for row in json.loads(capsys.readouterr().out)["limiters"]} == set(rows)
    assert main(["top", "--store", url, "--iterations", "1"]) == 0
    assert "top-a" in capsys.readouterr().out


def test_counters_off_count_nothing(path: Path) -> None:
    backend = SQLiteBackend(path, counters=False)
    assert TokenBucket(5, 1, backend=backend, name="quiet").try_acquire()
    assert backend.top(now=backend.now() + 1.0) == []
    with pytest.raises(TypeError, match="counters must be a bool"):
        SQLiteBackend(path, counters="yes")  # type: ignore[arg-type]


def test_a_restriction_then_two_changes_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    waits = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1_000.0)
        name = unique_name("restricted-changes")
        bucket = TokenBucket(4, 2, backend=backend, name=name, clock=clock)
        assert bucket.try_acquire()
        bucket.feedback({"RateLimit-Remaining": "1", "RateLimit-Reset": "2"})
        clock.advance(0.3)
        backend.set_limit(name, rate=5.0, burst=8.0, clock=clock)
        clock.advance(2.0)
        backend.set_limit(name, rate=5.0, burst=2.0, clock=clock)
        waits.append(bucket.reserve(1, timeout=2).wait)
    assert waits[0] == 0.0
    assert waits[1] == waits[0]


# -- changes in a row, through Redis and through the file ------------------------------
# The same steps on a ManualClock through a RedisBackend (whose 'configure' moves the
# state at each change, lua/_single.lua `switch`) and a SQLiteBackend (whose next
# decision moves it through each change kept, sqlite_config.py): every decision alike,
# to the bit.


def spend(n: int) -> list[Step]:
    return [("reserve", 1.0, 0.0)] * n


def test_three_changes_in_a_row_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    steps: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 10.0, None, None),  # at 10/s: all repaid by 1001
        ("advance", 0.5),
        ("set", 0.5, 4.0, None),  # the 5 still owed at 0.5/s: 10 s more
        ("advance", 1.0),
        ("set", 100.0, 3.0, None),  # the 4.5 still owed at 100/s: repaid by 1001.545
        ("advance", 0.05),
        *spend(4),
    ]
    got = through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)
    # A full bucket of 3. Moved straight from the code's 1/s to the latest change at
    # 1001.5, 8.5 would be owed, repaid at 1001.585 only: nothing would go.
    assert [wait for wait, _ in got] == [0.0] * 13 + [pytest.approx(-0.01)]


@pytest.mark.parametrize("seconds", [0.5, 5.0])
def test_a_change_for_a_while_replaced_by_another_decides_as_through_redis(
    path: Path, redis_client: Any, seconds: float
) -> None:
    """Replaced before its end (5 s) or after it with no decision between (0.5 s):
    Redis moves the state from it to the next change either way."""
    steps: list[Step] = [
        *spend(10),
        ("set", 10.0, 20.0, seconds),
        ("advance", 1.0),
        ("set", 0.5, None, None),
        *spend(2),
        ("advance", 1.0),
        *spend(2),
    ]
    through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file, each value as stored: its type and its
    bytes (a REAL as its eight)."""
    conn = sqlite3.connect(path)
    try:
        found = {}
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            stored = [
                tuple((type(v).__name__, struct.pack("<d", v) if isinstance(v, float) else v) for v in row)
                for row in rows
            ]
            found[table] = sorted(stored, key=repr)
        return found
    finally:
        conn.close()


def test_a_peek_after_a_change_for_a_while_ended_writes_nothing_and_answers_as_redis(
    path: Path, redis_client: Any
) -> None:
    """A peek once a change for a while has ended (its row, and a change kept before
    it, still in the file) moves the state in memory only, as Redis's read-only
    'wait' op does: nothing written, the same answers, and the decisions after it
    those without it (a peek that moved the state back at its own time would leave
    1.5 owed at 1000.4, where Redis, moving it back then, finds the bucket full)."""
    alg = TokenBucket(10, 1).algorithm_for(ManualClock())
    before: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 10.0, None, None),  # replaced before any decision: kept in the row (past)
        ("advance", 0.02),
        ("set", 100.0, None, 0.05),  # the 9.8 owed at 100/s, repaid by 1000.118; ends at 1000.07
        ("advance", 0.08),
    ]
    peeks: list[Step] = [("peek", 10.0), ("peek", 1.0), ("advance", 0.3), ("peek", 10.0)]
    after: list[Step] = [("reserve", 9.0, 0.0), ("reserve", 2.0, 0.0), ("advance", 1.0), ("reserve", 2.0, 0.0)]

    clock = ManualClock(1_000.0)
    backend = SQLiteBackend(path)
    handle = backend.bind("ended", alg, clock)
    for _ in range(10):
        assert handle.reserve(1.0, 0.0)[0] == 0.0
    backend.set_limit("ended", rate=10.0, clock=clock)
    clock.advance(0.02)
    backend.set_limit("ended", rate=100.0, ttl=0.05, clock=clock)
    clock.advance(0.08)
    stored = _tables(path)
    (config,) = stored["ratelimit_config"]
    assert (config[-2][0], config[-1][0]) == ("str", "float")  # past and seen: a change kept
    peeked = [handle.peek(10.0), handle.peek(1.0)]
    assert _tables(path) == stored
    clock.advance(0.3)
    peeked.append(handle.peek(10.0))
    assert _tables(path) == stored  # nothing saved, no row deleted nor forgotten
    # Redis reads the state as the change left it (repaid by 1000.118), under the
    # code's limit: 0.018 owed at 1000.1, none at 1000.4.
    assert peeked == [pytest.approx(0.018), 0.0, 0.0]

    steps = [*before, *peeks, *after]
    want = through_both(path, redis_client, alg, steps)
    assert want[10:13] == peeked
    # The next decision moves the state back at its own time: 9 go of a full bucket,
    # then 1 token is left, and one more comes in a second.
    assert [wait for wait, _ in want[13:]] == [0.0, pytest.approx(-1.0), 0.0]
    assert want[13:] == through_both(path, redis_client, alg, [step for step in steps if step[0] != "peek"])[10:]


def test_a_change_for_a_while_ending_before_any_decision_decides_as_through_redis(
    path: Path, redis_client: Any
) -> None:
    """The state moves to the change when it is made, and back at the first decision
    after its end: not straight from the code's values to the code's values."""
    steps: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 100.0, None, 1.0),  # repaid by 1000.1
        ("advance", 2.0),
        *spend(10),
    ]
    got = through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)
    assert [wait for wait, _ in got[-10:]] == [0.0] * 10


@pytest.mark.parametrize("algorithm", [TokenBucket(10, 1), LeakyBucket(10, 1)], ids=["token", "leaky"])
def test_a_reset_between_changes_decides_as_through_redis(path: Path, redis_client: Any, algorithm: Any) -> None:
    steps: list[Step] = [
        *spend(6),
        ("set", 4.0, None, None),
        ("advance", 0.5),
        ("reset",),
        ("advance", 0.5),
        ("set", 0.25, 8.0, None),
        ("advance", 0.5),
        *spend(3),
        ("reset",),
        ("reset",),
        *spend(3),
    ]
    through_both(path, redis_client, algorithm.algorithm_for(ManualClock()), steps)


def test_a_reset_with_no_change_decides_as_through_redis(path: Path, redis_client: Any) -> None:
    steps: list[Step] = [*spend(7), ("advance", 0.3), ("reset",), ("advance", 0.1), *spend(4)]
    through_both(path, redis_client, TokenBucket(10, 3).algorithm_for(ManualClock()), steps)


_steps = steps([None, 0.5, 2.0, 7.0, 40.0], [None, 2.0, 6.0, 30.0])


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_changes_in_any_order_decide_as_through_redis(
    tmp_path: Path, redis_client: Any, kind: str, steps: list[Step]
) -> None:
    """Decisions, changes (for a while or not), resets and restrictions in any order,
    as many changes in a row as drawn: the file decides as Redis does. (A window has
    no burst: its changes set the rate alone.)"""
    path = tmp_path / f"{unique_name('any')}.db"
    through_both(path, redis_client, KINDS[kind]().algorithm_for(ManualClock()), for_kind(kind, steps))


def _rows(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


# -- many changes in a row ---------------------------------------------------------------


def test_hundreds_of_changes_with_no_decision_keep_a_row_of_a_few_kilobytes(path: Path) -> None:
    """A script that sets a limit every minute on a budget nobody decides on: the
    changes kept (``past``) stay at most MOST_KEPT, not one more per change (which
    made the row grow without end and each change cost more than the last)."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1e-3, backend=backend, name="cron", clock=clock)
    assert grants(limiter) == 10  # 10 owed for 10,000 s: the row is never idle
    for i in range(600):
        clock.advance(60.0)
        backend.set_limit("cron", rate=(1e-3, 2e-3, 5e-4)[i % 3], clock=clock)
    ((count, size),) = _rows(path, "SELECT json_array_length(past), length(past) FROM ratelimit_config")
    assert count == MOST_KEPT
    assert size < 4096
    assert limiter.try_acquire() in (True, False)  # decided, through the changes kept
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]


def test_as_many_changes_in_a_row_as_are_kept_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    """Up to MOST_KEPT changes with no decision between: each one moves the state,
    to the bit as Redis moves it."""
    waits = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1000.0)
        name = unique_name("kept")
        handle = backend.bind(name, TokenBucket(50, 1).algorithm_for(clock), clock)
        assert handle.reserve(50, 0)[0] == 0.0
        for i in range(MOST_KEPT + 1):  # the latest, and MOST_KEPT it replaced
            clock.advance(0.25)
            backend.set_limit(name, rate=(0.5, 7.0, 40.0, 2.0)[i % 4], clock=clock)
        waits.append([handle.reserve(1, math.inf) for _ in range(3)])
    assert waits[1] == waits[0]


# -- garbage written by hand ---------------------------------------------------------------

#: What whoever may write the file could leave in ``past``.
_GARBLED_PAST = [
    "not json",
    '{"a": 1}',
    "5",
    "[[1, 2]]",
    '[["x", null, 1000]]',
    "[[0, null, 1000]]",
    "[[-5, null, 1000]]",
    "[[NaN, null, 1000]]",
    "[[Infinity, null, 1000]]",
    "[[1e308, null, 1000]]",
    "[[1e-300, null, 1000]]",
    "[[null, 0, 1000]]",
    "[[2, null, NaN]]",
    "[[2, null, -Infinity]]",
    '[[2, null, "1000"]]',
    "[[true, null, 1000]]",
    "[[[1], null, 1000]]",
    "[" * 100_000 + "]" * 100_000,  # deeper than json's recursion
]


def _garbled_past_run(path: Path, kind: type[Any], past: str | None) -> list[Any]:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = kind(10, 1, backend=backend, name="garbled", clock=clock)
    assert limiter.try_acquire(10)
    backend.set_limit("garbled", rate=2, clock=clock)
    clock.advance(1.0)
    backend.set_limit("garbled", rate=3, clock=clock)
    ((seen,),) = _rows(path, "SELECT seen FROM ratelimit_config")
    assert seen is not None  # the change replaced is kept, against the state row
    _rows(path, "UPDATE ratelimit_config SET past = ?", past)
    out: list[Any] = []
    for _ in range(4):
        out.append(limiter.try_acquire())
        out.append(limiter.peek(1))
        clock.advance(0.7)
    return out


@pytest.mark.parametrize("kind", [TokenBucket, LeakyBucket], ids=["token", "leaky"])
@pytest.mark.parametrize("past", _GARBLED_PAST, ids=range(len(_GARBLED_PAST)))
def test_garbage_in_the_changes_kept_is_decided_as_without_them(tmp_path: Path, kind: type[Any], past: str) -> None:
    """Never a TypeError, a ZeroDivisionError, a RecursionError or a NaN the row
    cannot hold (each decision failing for ever after): the state moves straight to
    the latest change, as if nothing were kept."""
    want = _garbled_past_run(tmp_path / "clean.db", kind, None)
    assert _garbled_past_run(tmp_path / "garbled.db", kind, past) == want
    assert _rows(tmp_path / "garbled.db", "SELECT past, seen FROM ratelimit_config") == [(None, None)]


#: A change's own columns written by hand: a value no change may set (outside
#: MIN_SET..MAX_SET, text, a blob) keeps the code's, as Lua's `valid` reads a hash;
#: an ``until`` that is no time ends nothing.
_GARBLED_COLUMNS = [
    ("rate", "'x'"),
    ("rate", "x'00'"),
    ("rate", "0"),
    ("rate", "-1"),
    ("rate", "1e308"),
    ("rate", "-1e308"),
    ("rate", "1e-300"),
    ("burst", "0"),
    ("burst", "-3"),
    ("burst", "'abc'"),
    ("burst", "1e13"),
    ("until", "'abc'"),
    ("until", "x'00'"),
]


def _garbled_column_run(path: Path, kind: type[Any], column: str, value: str | None) -> list[Any]:
    """A change to 2/s (and a burst of 4, for a bucket) for a while, decided under;
    then the same change made again and its ``column`` spoiled with ``value``, or
    (``None``) the change that spoiled row means made instead."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = kind(10, 1, backend=backend, name="column", clock=clock)
    burst = None if kind is SlidingWindow else 4.0
    assert limiter.try_acquire(10)
    backend.set_limit("column", rate=2, burst=burst, ttl=600, clock=clock)
    assert not limiter.try_acquire()  # decided under the change
    clock.advance(0.5)
    if value is None:
        rate = None if column == "rate" else 2.0
        burst = None if column == "burst" else burst
        if rate is None and burst is None:
            backend.reset_limit("column", clock=clock)
        else:
            backend.set_limit("column", rate=rate, burst=burst, ttl=None if column == "until" else 600, clock=clock)
    else:
        backend.set_limit("column", rate=2, burst=burst, ttl=600, clock=clock)
        _rows(path, f"UPDATE ratelimit_config SET {column} = {value}")
    out: list[Any] = [backend.limit_override("column", clock=clock)]
    for _ in range(4):
        out.append(limiter.try_acquire())
        out.append(limiter.peek(1))
        clock.advance(0.7)
    return out


@pytest.mark.parametrize("kind", [TokenBucket, LeakyBucket, SlidingWindow], ids=["token", "leaky", "window"])
@pytest.mark.parametrize(("column", "value"), _GARBLED_COLUMNS)
def test_garbage_in_a_change_s_columns_keeps_the_code_s_values_as_on_redis(
    tmp_path: Path, kind: type[Any], column: str, value: str
) -> None:
    """A rate of text, 0 or 1e308, a burst of 0, an ``until`` of text in a change's
    row: every decision is the one the code's values give, as on Redis, and none
    raises (no TypeError, no ZeroDivisionError)."""
    want = _garbled_column_run(tmp_path / "clean.db", kind, column, None)
    assert _garbled_column_run(tmp_path / "garbled.db", kind, column, value) == want


def test_a_change_s_time_written_as_text_moves_the_state_at_the_decision(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="at", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("at", rate=10, clock=clock)
    _rows(path, "UPDATE ratelimit_config SET at = 'yesterday'")
    clock.advance(0.5)
    # Moved at 1000.5, its 9.5 owed repaid at 10/s by 1001.45: none yet.
    assert not limiter.try_acquire()
    assert limiter.peek(1) == pytest.approx(0.05)


@pytest.mark.parametrize("value", ["'x'", "x'01'", "1e999", "-1e999", "NULL"])
def test_garbage_in_seen_leaves_the_changes_kept_unread(path: Path, value: str) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="seen", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("seen", rate=100, clock=clock)
    clock.advance(1.0)
    backend.set_limit("seen", rate=0.5, clock=clock)
    _rows(path, f"UPDATE ratelimit_config SET seen = {value}")
    # Not the state row's: moved straight from 1/s to 0.5/s at 1001, 9 owed: two
    # tokens in 2 s (through the changes kept, the bucket would be full).
    assert limiter.peek(2) == pytest.approx(2.0)
    # A peek writes nothing; the next decision forgets them.
    assert _rows(path, "SELECT past IS NOT NULL FROM ratelimit_config") == [(1,)]
    assert limiter.try_acquire(1)
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]


# -- a change the holes must not get round ------------------------------------------------


def test_a_request_larger_than_a_lowered_burst_takes_no_hole_as_on_redis(path: Path, redis_client: Any) -> None:
    """A reservation withdrawn leaves a hole of 5 tokens; the burst lowered to 1e-6
    after it: a request of 1 is refused for ever, as Lua's `too_big` refuses it
    before offering any hole (not granted into the hole)."""
    answers = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1000.0)
        name = unique_name("hole")
        handle = backend.bind(name, TokenBucket(8, 2).algorithm_for(clock), clock)
        handle.restrict(0.0, 0.5)
        wait, at = handle.reserve(5.0, math.inf)
        handle.charge(1.0)
        handle.refund(5.0, at)
        backend.set_limit(name, rate=2.0, burst=1e-6, clock=clock)
        answers.append((wait, handle.reserve(1.0, math.inf), handle.peek(1.0)))
    assert answers[1] == answers[0]
    assert answers[1][1][0] == -math.inf
    # Through a limiter: AcquireTimeout with an infinite retry_after.
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(8, 2, backend=backend, name="hole-limiter", clock=clock)
    limiter.feedback({"Retry-After": "0.5"}, status=429)
    reservation = limiter.reserve(5)
    reservation.cancel()
    backend.set_limit("hole-limiter", burst=0.5, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(1, timeout=10)
    assert caught.value.retry_after == math.inf


# -- the Redis/SQLite differential, with refunds, charges and float extremes ---------------

_steps_among_refunds = steps(
    [None, 0.5, 2.0, 7.0, 40.0, 1e-6, 3e-6, 5e11, 1e12], [None, 2.0, 6.0, 30.0, 0.3, 1e-6, 1e12], refunds=True, most=40
)


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps_among_refunds)
def test_changes_among_refunds_charges_and_restrictions_decide_as_through_redis(
    tmp_path: Path, redis_client: Any, kind: str, steps: list[Step]
) -> None:
    """Rates and bursts from 1e-6 to 1e12 among refunds (named or not), charges and
    restrictions: one process, and two taking turns while a third makes the changes."""
    alg = KINDS[kind]().algorithm_for(ManualClock())
    through_both(tmp_path / f"{unique_name('db')}.db", redis_client, alg, for_kind(kind, steps))


# -- keyed budgets, composites and ConcurrencyLimit on a name with changes kept -----------


def test_keyed_budgets_composites_and_slots_beside_changes_kept(path: Path, redis_client: Any) -> None:
    clock = ManualClock(1000.0)
    got = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        name = unique_name("keyed")
        limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
        keyed = limiter.for_key("customer-1")
        assert grants(limiter) == 10
        assert grants(keyed, 4) == 4
        backend.set_limit(name, rate=100, clock=clock)
        backend.set_limit(name, rate=0.5, burst=20, clock=clock)
        # A change by name reaches its keys: 4 owed of the new burst of 20.
        got.append((grants(keyed), grants(limiter), limiter.peek(1), keyed.peek(1)))
    assert got[1][:3] == got[0][:3]
    # Redis moved the key at each change, the file moves it once to the latest (a
    # key's decision reads its name's row, whose replaced changes are its name's).
    assert got[1][3] == pytest.approx(got[0][3], rel=1e-9)
    assert got[1][0] == 16
    # A composite and a ConcurrencyLimit made on names whose changes are kept (set
    # before they were used) decide as the code says, and refuse changes since.
    backend = SQLiteBackend(path)
    for name in ("both", "slots"):
        TokenBucket(5, 1, backend=backend, name=name, clock=clock).acquire()
        backend.set_limit(name, rate=7, clock=clock)
        backend.set_limit(name, rate=9, clock=clock)
        _rows(path, "DELETE FROM ratelimit_state WHERE name = ?", name)
    both = Composite([TokenBucket(5, 1), SlidingWindow(10, 60)], backend=backend, name="both", clock=clock)
    assert grants(both) == 5
    slots = ConcurrencyLimit(2, backend=backend, name="slots")
    held = [slots.take(), slots.take()]
    with pytest.raises(AcquireTimeout):
        slots.take(timeout=0)
    for name, what in (("both", "composite"), ("slots", "ConcurrencyLimit")):
        with pytest.raises(UnchangeableLimit, match=what):
            backend.set_limit(name, rate=1, clock=clock)
    for lease in held:
        lease.release()


# -- the one-statement decision ------------------------------------------------------------


def test_a_decision_with_no_change_pending_is_one_update(path: Path) -> None:
    """Counted with a trace of the connection's statements: after a change is read
    (and the changes it kept forgotten), a reset, a change ended, a reset with no
    change, or a change to another name, each decision is one UPDATE again."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(1000, 1, backend=backend, name="quick", clock=clock)
    statements: list[str] = []

    def decided() -> list[str]:
        conn = backend._file._conn
        assert conn is not None
        statements.clear()
        conn.set_trace_callback(statements.append)
        try:
            assert limiter.try_acquire()
        finally:
            conn.set_trace_callback(None)
        return [s.split()[0] for s in statements]

    def settles() -> None:
        decided()  # the full transaction that reads what changed
        for _ in range(3):
            assert decided() == ["UPDATE"]

    settles()
    backend.set_limit("quick", rate=2, clock=clock)
    backend.set_limit("quick", rate=3, clock=clock)
    assert "SELECT" in decided()
    assert decided() != ["UPDATE"]  # a change in force: full transactions
    backend.reset_limit("quick", clock=clock)
    settles()
    backend.set_limit("other", rate=5, clock=clock)
    backend.set_limit("other", rate=6, clock=clock)
    for _ in range(3):
        assert decided() == ["UPDATE"]
    backend.set_limit("quick", rate=2, ttl=1, clock=clock)
    decided()
    clock.advance(2.0)
    settles()
    backend.reset_limit("quick", clock=clock)  # none in force: kept as Redis's 'configure'
    settles()
    backend.set_limit("quick", burst=500, clock=clock)
    backend.reset_limit("quick", clock=clock)
    settles()
    assert _rows(path, "SELECT past, seen FROM ratelimit_config WHERE name = 'quick'") == [(None, None)]


# -- another process holding the lock, several processes changing at once ----------------


def test_a_change_while_another_process_holds_the_lock_stores_nothing_or_all(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path, busy_timeout=0.05)
    limiter = TokenBucket(10, 1, backend=backend, name="locked", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("locked", rate=100, clock=clock)
    before = _rows(path, "SELECT * FROM ratelimit_config")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        clock.advance(0.5)
        with pytest.raises(BackendUnavailable, match="stayed locked"):
            backend.set_limit("locked", rate=0.5, clock=clock)
        with pytest.raises(BackendUnavailable, match="stayed locked"):
            backend.reset_limit("locked", clock=clock)
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert _rows(path, "SELECT * FROM ratelimit_config") == before
    backend.set_limit("locked", rate=0.5, clock=clock)
    # 1/s to 100/s at 1000 (10 owed repaid by 1000.1), to 0.5/s at 1000.5: a full
    # bucket. Moved straight from 1/s at 1000.5, 9.5 would still be owed.
    assert grants(limiter) == 10


def _change_many(path: str, name: str, seed: int, count: int) -> None:
    backend = SQLiteBackend(path)
    for i in range(count):
        if (i + seed) % 5 == 4:
            backend.reset_limit(name)
        else:
            backend.set_limit(name, rate=(1.0, 5.0, 20.0)[(i + seed) % 3], burst=(2.0, 10.0)[(i * seed) % 2])


def _decide_many(path: str, name: str, count: int, out: Any) -> None:
    limiter = TokenBucket(10, 5, backend=SQLiteBackend(path), name=name)
    out.put(sum(limiter.try_acquire() for _ in range(count)))


@pytest.mark.slow
def test_changes_from_several_processes_at_once_never_over_admit(path: Path) -> None:
    """Two processes changing the limit 150 times each (and threads of a third),
    two deciding all the while: no error, no row growing, and never more grants than
    the largest burst and the fastest rate allow (tokens owed keep their count
    through every change, so a change never hands out a burst again)."""
    name = "busy"
    backend = SQLiteBackend(path)
    started = backend.now()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [context.Process(target=_change_many, args=(str(path), name, seed, 150)) for seed in (1, 2)]
    procs += [context.Process(target=_decide_many, args=(str(path), name, 400, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    _change_many(str(path), name, 3, 60)
    granted = out.get(timeout=120) + out.get(timeout=120)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    elapsed = backend.now() - started
    assert granted <= 10 + 20 * elapsed + 1
    ((past,),) = _rows(path, "SELECT past FROM ratelimit_config")
    assert past is None or len(json.loads(past)) <= MOST_KEPT


# -- the migration from format 2, and the release before format 3 -------------------------


def _format_2(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE ratelimit_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
        "CREATE TABLE ratelimit_state (name TEXT NOT NULL, member INTEGER NOT NULL, kind TEXT NOT NULL,"
        " number REAL, blob BLOB, idle REAL NOT NULL, updated REAL NOT NULL, test INTEGER NOT NULL,"
        " forget REAL NOT NULL DEFAULT 0, rate REAL, burst REAL, PRIMARY KEY (name, member, kind)) WITHOUT ROWID;"
        "CREATE INDEX ratelimit_forget ON ratelimit_state (forget) WHERE test = 0;"
        "CREATE TABLE ratelimit_config (name TEXT PRIMARY KEY, rate REAL, burst REAL, until REAL,"
        " at REAL NOT NULL) WITHOUT ROWID;"
        "INSERT INTO ratelimit_meta VALUES ('format', 'ratelimit-fleet sqlite store'), ('version', 2);"
        "INSERT INTO ratelimit_state VALUES ('moved', -1, 'token_bucket', 1004.0, NULL, 1004.0, 1000.0, 1, 1004.0,"
        " 2.0, NULL);"
        "INSERT INTO ratelimit_config VALUES ('moved', 4.0, NULL, NULL, 1000.0);"
    )
    conn.commit()
    conn.close()


def _open_at_once(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        clock = ManualClock(1000.0)
        limiter = TokenBucket(10, 1, backend=SQLiteBackend(path), name="moved", clock=clock)
        out.put(limiter.peek(1))
    except BaseException as exc:  # reported to the test
        out.put(repr(exc))


@pytest.mark.slow
def test_a_file_of_format_2_opened_by_several_processes_at_once_is_migrated_once(path: Path) -> None:
    _format_2(path)
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(4), context.Queue()
    procs = [context.Process(target=_open_at_once, args=(str(path), barrier, out)) for _ in range(4)]
    for proc in procs:
        proc.start()
    answers = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    # 2/s to 4/s at 1000: 8 owed at 4/s, none left to wait for past the 10 - 8 free.
    assert answers == [0.0] * 4
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
    columns = [row[1] for row in _rows(path, "PRAGMA table_info(ratelimit_config)")]
    assert columns == ["name", "rate", "burst", "until", "at", "past", "seen"]


#: The last commit of the release before format 3.
_BEFORE = "b1000ea"

#: A process of the release before: one command a line on stdin, one answer a line.
_DRIVER = """
import json, sys
from ratelimit import ManualClock, SQLiteBackend, TokenBucket
clock = ManualClock(1000.0)
backend = limiter = None
for line in sys.stdin:
    op, *args = json.loads(line)
    try:
        if op == "open":
            backend = SQLiteBackend(args[0])
            limiter = TokenBucket(10, 1, backend=backend, name="mixed", clock=clock)
            answer = None
        elif op == "at":
            clock.advance(args[0] - clock.now())
            answer = None
        elif op == "take":
            answer = limiter.try_acquire(args[0])
        elif op == "peek":
            answer = limiter.peek(1)
        elif op == "set":
            answer = backend.set_limit("mixed", rate=args[0], clock=clock)
    except Exception as exc:
        answer = f"{type(exc).__name__}: {exc}"
    print(json.dumps(answer), flush=True)
"""


@pytest.fixture(scope="module")
def release_before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as the release before format 3 had it, from git."""
    where = tmp_path_factory.mktemp("before")
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", _BEFORE, "ratelimit"], capture_output=True, check=True, timeout=60
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the release before ({_BEFORE}) is not in git here: {exc}")
    return where


class _Before:
    def __init__(self, package: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(package)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=package,  # not this checkout's package, which `-c` would import first
        )

    def __call__(self, *command: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


@pytest.mark.slow
def test_the_release_before_refuses_a_file_of_format_3_untouched(path: Path, release_before: Path) -> None:
    backend = SQLiteBackend(path)
    backend.set_limit("mixed", rate=2)
    backend.close()  # the last connection: the WAL checkpointed into the file
    before = path.read_bytes()
    older = _Before(release_before)
    try:
        answer = older("open", str(path))
    finally:
        older.close()
    assert "format version 3" in answer
    assert "ValueError" in answer
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_process_of_the_release_before_keeps_deciding_once_the_file_is_migrated(
    path: Path, release_before: Path
) -> None:
    """Opened at format 2 by the release before, made format 3 by this one: the older
    process decides and changes as it did, and neither moves the state twice."""
    older = _Before(release_before)
    try:
        assert older("open", str(path)) is None
        assert older("take", 10) is True  # 10 owed at 1/s
        assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(2,)]
        clock = ManualClock(1000.0)
        backend = SQLiteBackend(path)
        assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
        limiter = TokenBucket(10, 1, backend=backend, name="mixed", clock=clock)
        backend.set_limit("mixed", rate=10.0, clock=clock)
        clock.advance(0.5)
        backend.set_limit("mixed", rate=0.5, clock=clock)
        # The older process: straight from 1/s to 0.5/s at 1000.5, 9.5 owed; 9.45
        # at 1000.6, one token in 0.9 s.
        older("at", 1000.6)
        assert older("peek") == pytest.approx(0.9)
        assert older("take", 1) is False
        clock.advance(0.2)
        assert limiter.peek(1) == pytest.approx(0.8)  # 9.4 owed, as it left it: not moved again
        older("at", 1000.7)
        assert older("set", 100.0) is None  # its change replaces the row whole
        clock.advance(0.1)
        assert limiter.peek(1) == pytest.approx(0.0)  # 9.3 owed at 100/s, one free
        # (At its own time: a peek writes nothing, so no row's time is its floor.)
        older("at", 1000.8)
        assert older("peek") == pytest.approx(0.0)
    finally:
        older.close()


# -- found on the way: a second backend on the file ------------------------------------------

_CHILD = """
import sys
from ratelimit import SQLiteBackend, TokenBucket
limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(sys.argv[1]), name="locks")
print(sum(limiter.try_acquire() for _ in range(int(sys.argv[2]))))
"""


def _child_grants(path: Path, n: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.slow
def test_a_second_backend_on_the_file_keeps_the_first_one_s_decisions(path: Path) -> None:
    """Opening a second SQLiteBackend on the path read the file's header with
    ``open()``; closing that descriptor dropped every POSIX lock of the process on
    the file, the first backend's shared lock too. A process that then closed its
    last connection took itself for the last user, checked the WAL in and deleted
    it: the first backend's decisions after that went to a deleted WAL, unseen by
    every other process (13 grants from a bucket of 10)."""
    limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(path), name="locks")
    assert limiter.try_acquire()
    SQLiteBackend(path)  # another backend of this process on the same file
    assert _child_grants(path, 1) == 1
    assert [limiter.try_acquire() for _ in range(3)] == [True] * 3
    assert _child_grants(path, 20) == 5
    assert Path(f"{path}-wal").exists()  # still this process's


def test_a_migration_that_fails_halfway_leaves_the_file_of_format_2(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration is one write transaction: a process that fails (or dies) after its
    first ALTER leaves the file as it was, and the next process migrates it whole."""
    _format_2(path)
    broken = (sqlite_file._MIGRATE_2[0], "ALTER TABLE no_such_table ADD COLUMN x", *sqlite_file._MIGRATE_2[1:])
    monkeypatch.setattr(sqlite_file, "_MIGRATE_2", broken)
    with pytest.raises(OSError, match="no_such_table"):
        SQLiteBackend(path)
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(2,)]
    assert [row[1] for row in _rows(path, "PRAGMA table_info(ratelimit_config)")][-1] == "at"
    monkeypatch.undo()
    clock = ManualClock(1000.0)
    limiter = TokenBucket(10, 1, backend=SQLiteBackend(path), name="moved", clock=clock)
    assert limiter.peek(1) == 0.0
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]


def test_a_composites_member_changes_are_kept_as_long_as_one_lasts(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    name = unique_name("members")
    composite = Composite([TokenBucket(10, 10), TokenBucket(100, 1)], backend=backend, name=name)
    key = f"ratelimit:{{{name}}}:members:config"
    composite.set_limit(burst=[None, 5], ttl=[None, 100])
    assert 86_400_000 + 99_000 < redis_client.pttl(key) <= 86_400_000 + 105_000  # a day past its end (and a margin)
    composite.set_limit(burst=[4, None])  # member 1's change stays as it is
    assert redis_client.pttl(key) == -1  # a change until reset: for good
    assert composite.try_acquire()
    assert redis_client.hmget(key, "0:was", "1:was") == [b"- 4.0", b"- 5.0"]  # the changes the states are at
    assert composite.reset_limit()
    assert composite.try_acquire()  # moves the state back: nothing is left
    assert redis_client.exists(key) == 0


def test_a_round_of_a_composite_decides_on_its_members_changes(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    """A round (several requests in one call, ``redis/rounds.py``) reads the change once
    and decides each request on it: a request the lowered member could never hold is
    refused for ever, the others wait their turn at its rate."""
    name = unique_name("round")
    now = 1_700_000_000.0
    backend.set_limit(name, burst=2, member=1, clock=ManualClock(now))
    keys = [key_for(name, "token_bucket", i, injected=True) for i in range(2)]
    members = ["token_bucket", "0", "10", "10", "token_bucket", "0", "100", "1"]
    requests = ["", "1", "1", "", "1", "1", "", "1", "3", "", "1", "1"]
    reply = group_script()(redis_client, keys, ["~batch", repr(now), "", *members, *requests])
    waits = [float(reply[i]) for i in range(0, 12, 3)]
    assert waits == [0.0, 0.0, -math.inf, 1.0]
