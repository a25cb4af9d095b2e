"""Limits changed at run time (``RedisBackend.set_limit``, ``ratelimit set``) and
what ``inspect`` reads back.

Most tests keep time on a ManualClock and write the change at that clock's time
(``write_override(..., now=)``): the script reads the change in the same call as it
decides, so "from the next decision on" is checked decision by decision. One test runs
live worker processes and changes the rate with the command mid-run.
"""

from __future__ import annotations

import bisect
import json
import math
import subprocess
import sys
import time
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.keys import code_key, config_key, key_for
from ratelimit._stores.records import Override
from ratelimit._stores.redis.config import inspect, read_override, reset_override, write_override
from ratelimit._stores.redis.scripts import single_script
from ratelimit.cli import main

from conftest import REDIS_URL, SUPPORT, private_server, unique_name

WORKER = SUPPORT / "shared_worker.py"


def change(client: Any, name: str, clock: ManualClock, rate: float | None = None, burst: float | None = None,
           ttl: float | None = None) -> None:  # fmt: skip
    write_override(client, name, Override(rate, burst, ttl), now=clock.now())


def grants(limiter: Any, n: int = 1000) -> int:
    """How many unit try_acquires go now, up to ``n``."""
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


@pytest.fixture
def backend(redis_client: redis.Redis) -> Any:
    made = RedisBackend(redis_client, coalesce=False)
    yield made
    made.close()


# -- the mapping: Python and Lua agree ----------------------------------------------------


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


def test_a_change_holds_from_the_next_decision_of_every_process(redis_client: redis.Redis) -> None:
    clock = ManualClock(1000.0)
    name = unique_name("next")
    # Three "processes": three backends, each with its own limiter of the same name.
    backends = [RedisBackend(redis.Redis.from_url(REDIS_URL), coalesce=False) for _ in range(3)]
    limiters = [TokenBucket(30, 1, backend=b, name=name, clock=clock) for b in backends]
    assert [grants(lim, 10) for lim in limiters] == [10, 10, 10]  # the code's 30 between them
    clock.advance(1.0)
    change(redis_client, name, clock, rate=100, burst=5)
    # 29 tokens owed at 1/s keep their count: at 100/s they are repaid in 0.29 s.
    assert [grants(lim) for lim in limiters] == [0, 0, 0]
    clock.advance(0.29 + 0.05)  # repaid, then 5 refilled: the new burst
    assert [grants(lim) for lim in limiters] == [5, 0, 0]
    clock.advance(0.02)
    assert [grants(lim) for lim in limiters] == [2, 0, 0]
    assert reset_override(redis_client, name, now=clock.now())
    # Back to the code: the 5 tokens owed at 100/s are 5 owed at 1/s, out of 30.
    assert [grants(lim) for lim in limiters] == [25, 0, 0]
    clock.advance(1.0)
    assert [grants(lim) for lim in limiters] == [1, 0, 0]
    assert not reset_override(redis_client, name, now=clock.now())
    for b in backends:
        b.close()


def test_a_leaky_bucket_keeps_its_queue_at_the_new_rate(backend: RedisBackend, redis_client: redis.Redis) -> None:
    clock = ManualClock(1000.0)
    name = unique_name("leaky")
    limiter = LeakyBucket(10, 1, backend=backend, name=name, clock=clock)
    assert limiter.acquire(timeout=0) == 0
    for expected in (1.0, 2.0, 3.0):
        wait = backend.bind(name, limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
        assert wait == pytest.approx(expected)
    change(redis_client, name, clock, rate=10)
    # Four tokens queued at 1/s leak in 0.4 s at 10/s; the next one goes after them.
    wait = backend.bind(name, limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
    assert wait == pytest.approx(0.4)


def test_a_window_keeps_its_length_and_takes_the_rate_as_its_limit(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    clock = ManualClock(1000.0)
    name = unique_name("window")
    limiter = SlidingWindow(10, 60, backend=backend, name=name, clock=clock, guard=0)
    assert grants(limiter) == 10
    change(redis_client, name, clock, rate=0.5)  # 30 per 60 s window
    assert grants(limiter) == 20
    with pytest.raises(ValueError, match=r"burst=5.0.*sliding_window.*no burst"):
        backend.set_limit(name, burst=5)
    assert read_override(redis_client, name, now=clock.now()) == Override(0.5, None)


def test_a_change_for_a_while_ends_at_the_first_decision_after_it(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    clock = ManualClock(1000.0)
    name = unique_name("ttl")
    limiter = TokenBucket(2, 1, backend=backend, name=name, clock=clock)
    change(redis_client, name, clock, rate=10, burst=20, ttl=3.0)
    assert read_override(redis_client, name, now=clock.now()) == Override(10.0, 20.0, 3.0)
    assert grants(limiter) == 20
    clock.advance(3.0)
    # The change has ended: the 20 owed at 10/s were repaid after 2 s, and the
    # code's bucket of 2 is full again, no more.
    assert read_override(redis_client, name, now=clock.now()) is None
    assert grants(limiter) == 2
    assert not redis_client.exists(config_key(name))


def test_set_limit_on_a_test_clock_carries_the_tokens_owed(backend: RedisBackend) -> None:
    # The change is made at the limiter's own time, to the state kept on its clock:
    # read at the server's time, the state would not move and the lower rate would
    # read the 10 tokens owed as 1, a fresh burst (and the change would never end).
    clock = ManualClock(1000.0)
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
    """The defect as found: on a server that evicts (allkeys-lru), ``:code`` is written
    once a minute and goes first while the state, touched at every decision, stays.
    ``set`` then still holds from the next decision, and says the change itself may be
    evicted."""
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


def test_a_request_larger_than_a_lowered_burst_is_refused_for_ever(
    redis_client: redis.Redis,
) -> None:
    clock = ManualClock(1000.0)
    for coalesce in (False, True):
        name = unique_name("big")
        b = RedisBackend(redis_client, coalesce=coalesce)
        limiter = TokenBucket(10, 1, backend=b, name=name, clock=clock)
        change(redis_client, name, clock, burst=3)
        with pytest.raises(AcquireTimeout) as caught:
            limiter.acquire(5)
        assert caught.value.retry_after == math.inf
        assert limiter.try_acquire(5) is False
        assert limiter.try_acquire(3) is True
        b.close()


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
def test_bad_values_are_refused_and_change_nothing(
    backend: RedisBackend, redis_client: redis.Redis, kwargs: dict[str, Any], message: str
) -> None:
    name = unique_name("bad")
    backend.set_limit(name, rate=7)
    with pytest.raises((ValueError, TypeError), match=message):
        backend.set_limit(name, **kwargs)
    assert backend.limit_override(name) == Override(7.0, None)


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
    assert "rate 50/s, burst 5; until reset" in out.stdout
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
    """The defect as found: processes at 400/s, ``:code`` evicted (deleted here), then
    a change to 50/s, burst 5: from 0.1 s after it, no second holds more than the new
    limit, in every process (it held the code's 400/s until a process wrote ``:code``
    again, a minute on)."""
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
    assert "capacity 9, refill_per_sec 2/s (guard 0.5 s kept back)" in text
    assert "changed      none (the code's values)" in text
    assert "fed back by the provider, until " in text
    assert "(30 s left)" in text or "(29." in text

    assert main(["set", name, "--rate", "600/min", "--for", "1h", "--redis", REDIS_URL]) == 0
    text = capsys.readouterr().out
    assert "rate 10/s; ends in 60 min" in text
    # The guard is kept back at the new rate: 10 - 0.5 x 10 = 5.
    assert "in force     capacity 5, refill_per_sec 10/s" in text

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
