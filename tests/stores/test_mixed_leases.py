"""A fleet that mixes leased and plain limiters of one name (a rollout of ``lease=``).

A leased token is granted by the shared budget and may be sent up to ``lease`` seconds
later, so a leased limiter keeps ``lease x rate`` of its burst back (a window counts
each grant that much longer). A plain process of the same name must keep the same
share back while leased tokens may still go, or the two together exceed the limit.
The script records the largest slack any process keeps (``lua/_single.lua``), and
every process decides with it.
"""

from __future__ import annotations

import bisect
import json
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import AcquireTimeout, LeakyBucket, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._algorithms.algorithm import step
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._limiting.limiters import SingleLimiter
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisHandle
from ratelimit._stores.redis.rounds import Rounds
from ratelimit._stores.redis.scripts import single_script

from conftest import REDIS_URL, SUPPORT, unique_name


def rounds_of(limiter: Any) -> Rounds:
    handle = limiter._handle
    assert isinstance(handle, RedisHandle)
    assert handle.rounds is not None
    return handle.rounds


def within_bucket(times: list[float], capacity: float, rate: float) -> bool:
    """At most ``capacity + rate * (b - a)`` one-token grants in any interval ``[a, b]``."""
    times = sorted(times)
    return all(
        j - i + 1 <= capacity + rate * (times[j] - times[i]) + 1e-6
        for i in range(len(times))
        for j in range(i, len(times))
    )


def within_window(times: list[float], limit: float, window: float) -> bool:
    """At most ``limit`` grants in any interval of ``window`` seconds."""
    times = sorted(times)
    return all(sum(1 for u in times[i:] if u < t + window - 1e-9) <= limit for i, t in enumerate(times))


#: Who asks, after how long, how many times in a row, and whether it waits (acquire)
#: or not (try_acquire). Runs of requests are what grow a lease.
STEPS = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5]),
        st.integers(1, 8),
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_a_leased_and_a_plain_bucket_never_exceed_it_together(steps: list[tuple[int, float, int, bool]]) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("mixed")
    capacity, rate = 10.0, 10.0
    fleet = [
        TokenBucket(capacity, rate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name=name, clock=clock,
                    lease=0.3),
        TokenBucket(capacity, rate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name=name, clock=clock),
    ]  # fmt: skip
    sent: list[float] = []
    for who, later, times, wait in steps:
        clock.advance(later)
        for _ in range(times):
            if wait:
                try:
                    fleet[who].acquire(timeout=0.5)  # the clock sleeps to the grant
                except AcquireTimeout:
                    continue
                sent.append(clock.now())
            elif fleet[who].try_acquire():
                sent.append(clock.now())
    assert within_bucket(sent, capacity, rate)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, approximate=st.booleans())
def test_a_leased_and_a_plain_window_never_exceed_it_together(
    steps: list[tuple[int, float, int, bool]], approximate: bool
) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("mixed-window")
    limit, window = 6.0, 1.0
    fleet = [
        SlidingWindow(limit, window, approximate=approximate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
                      name=name, clock=clock, lease=0.2),
        SlidingWindow(limit, window, approximate=approximate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
                      name=name, clock=clock),
    ]  # fmt: skip
    sent: list[float] = []
    for who, later, times, _ in steps:
        clock.advance(later)
        for _ in range(times):
            if fleet[who].try_acquire():
                sent.append(clock.now())
    assert within_window(sent, limit, window)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.5]),
            st.integers(1, 6),
            st.sampled_from([None, 0, 2]),
        ),
        min_size=1,
        max_size=50,
    ),
    kind=st.sampled_from(["bucket", "window", "counter"]),
)
def test_three_slacks_on_one_budget_never_exceed_it(steps: list[tuple[int, float, int, int | None]], kind: str) -> None:
    # A longer lease arriving under a shorter one's record, and a plain process beside;
    # a provider's response now and then says how many are left for the next second.
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("three")

    def build(lease: float | None) -> SingleLimiter:
        backend = RedisBackend(fakeredis.FakeRedis(server=shared))
        if kind == "bucket":
            return TokenBucket(10, 10, backend=backend, name=name, clock=clock, lease=lease)
        return SlidingWindow(
            6, 1.0, approximate=kind == "counter", backend=backend, name=name, clock=clock, lease=lease
        )

    fleet = [build(0.1), build(None), build(0.3)]
    sent: list[float] = []
    for who, later, times, left in steps:
        clock.advance(later)
        if left is not None:
            fleet[who].feedback({"RateLimit-Remaining": str(left), "RateLimit-Reset": "1"})
        for _ in range(times):
            if fleet[who].try_acquire():
                sent.append(clock.now())
    assert within_bucket(sent, 10, 10) if kind == "bucket" else within_window(sent, 6, 1.0)


# -- the share kept back, and given up again --------------------------------------------


@pytest.fixture(params=["fakeredis", "redis"])
def server(request: pytest.FixtureRequest) -> Any:
    """What several backends (several "processes") share: a client factory."""
    if request.param == "fakeredis":
        shared = fakeredis.FakeServer()
        return lambda: fakeredis.FakeRedis(server=shared)
    client = request.getfixturevalue("redis_client")
    return lambda: client


def burst(limiter: Any) -> int:
    count = 0
    while count < 100 and limiter.try_acquire():
        count += 1
    return count


def test_a_plain_process_keeps_the_leases_share_back_until_the_budget_idles(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    name = unique_name("rollout")
    leased = TokenBucket(10, 10, backend=RedisBackend(server()), name=name, clock=clock, lease=0.5)
    plain = TokenBucket(10, 10, backend=RedisBackend(server()), name=name, clock=clock)
    assert leased.try_acquire()  # a round: its token, and a lease of what is asked
    held = rounds_of(leased).allotted
    # The leased process keeps 0.5 s x 10/s = 5 tokens back: the plain one too.
    assert burst(plain) == 5 - 1 - held
    # Once the bucket has been full for the lease's time (and as much again: the record
    # is written ahead), nothing leased can still go: the plain one has its whole burst.
    clock.advance(1.0 + 0.5 + 0.5)
    assert burst(plain) == 10
    # A leased process deciding again takes the share back at once.
    clock.advance(1.0)
    assert leased.try_acquire()
    clock.advance(1.0)
    assert burst(plain) == 5 - rounds_of(leased).allotted


def test_a_request_larger_than_the_lease_leaves_is_refused_saying_why(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    name = unique_name("rollout-big")
    leased = TokenBucket(10, 10, backend=RedisBackend(server()), name=name, clock=clock, lease=0.5)
    plain = TokenBucket(10, 10, backend=RedisBackend(server()), name=name, clock=clock)
    assert leased.try_acquire()
    clock.advance(1.0)
    assert not plain.try_acquire(8)
    with pytest.raises(AcquireTimeout, match=r"lease=") as caught:
        plain.acquire(8)
    assert caught.value.retry_after == math.inf
    assert plain.try_acquire(5)


def test_the_record_expires_and_is_no_other_key_to_inspect(redis_client: redis.Redis) -> None:
    name = unique_name("rollout-key")
    backend = RedisBackend(redis_client)
    limiter = TokenBucket(100, 10, backend=backend, name=name, lease=0.5)  # real time
    assert limiter.try_acquire()
    key = key_for(name, "token_bucket") + ":slack"
    slack, until = redis_client.hmget(key, "slack", "until")
    assert slack is not None
    assert until is not None
    assert float(slack) == 0.5
    assert 0 < redis_client.pttl(key) <= 3_000
    assert backend.inspect(name).other_keys == ()
    backend.close()


# -- the Lua twins: Python's guarded and idle_until ---------------------------------------

ALGS = st.one_of(
    st.builds(Gcra, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(LeakyQueue, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(WindowLog, st.floats(1, 1e4), st.floats(0.01, 1e4)),
    st.builds(WindowCounter, st.floats(1, 1e4), st.floats(0.01, 1e4)),
)


@settings(max_examples=100, deadline=None)
@given(alg=ALGS, slack=st.sampled_from([0.001, 0.05, 0.3, 5.0]))
def test_under_a_recorded_slack_the_script_decides_with_the_algorithm_guarded_by_it(alg: Any, slack: float) -> None:
    client = fakeredis.FakeRedis()
    name = unique_name("twin")
    kind = alg.kind
    base = key_for(name, kind)
    client.hset(base + ":slack", mapping={"slack": repr(slack), "until": "2000"})
    reply = single_script(kind)(client, [base], ["peek", "1000", "1", "", *(repr(p) for p in alg.params()), "0"])
    try:
        expected = alg.guarded(slack).params()
    except ValueError:
        # What the limiter would refuse: a bucket keeps one whole token (or its capacity).
        expected = (min(1.0, alg.capacity), alg.rate)
    assert (float(reply[0]), float(reply[1])) == expected
    # Once its time is over, the record is not in force.
    reply = single_script(kind)(client, [base], ["peek", "2000", "1", "", *(repr(p) for p in alg.params()), "0"])
    assert (float(reply[0]), float(reply[1])) == alg.params()


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter"]),
    slack=st.sampled_from([0.01, 0.2, 1.0]),
    steps=st.lists(st.tuples(st.sampled_from([0.0, 0.01, 0.3, 2.0]), st.integers(1, 3)), min_size=1, max_size=40),
)
def test_the_record_lasts_until_the_state_has_been_idle_for_the_slack(
    kind: str, slack: float, steps: list[tuple[float, int]]
) -> None:
    clock = ManualClock(start=1_000.0)
    name = unique_name("idle")
    client = fakeredis.FakeRedis()
    build: dict[str, Callable[[], SingleLimiter]] = {
        "token_bucket": lambda: TokenBucket(6, 3, guard=slack, backend=RedisBackend(client), name=name, clock=clock),
        "leaky_bucket": lambda: LeakyBucket(6, 3, guard=slack, backend=RedisBackend(client), name=name, clock=clock),
        "sliding_window": lambda: SlidingWindow(6, 2, guard=slack, backend=RedisBackend(client), name=name,
                                                clock=clock),
        "sliding_window_counter": lambda: SlidingWindow(6, 2, approximate=True, guard=slack,
                                                        backend=RedisBackend(client), name=name, clock=clock),
    }  # fmt: skip
    limiter = build[kind]()
    alg: Any = limiter.algorithm_for(clock)
    state = alg.new_state()
    key = key_for(name, kind, injected=True) + ":slack"
    for later, tokens in steps:
        clock.advance(later)
        now = clock.now()
        state, wait = step(alg, state, now, tokens, 0.0)
        assert limiter.try_acquire(tokens) is (wait >= 0)
        if wait < 0:
            continue
        idle = max(alg.idle_until(state), now)
        until = float(client.hget(key, "until") or "nan")
        assert idle + slack - 1e-9 <= until <= idle + 2 * slack + 1e-9


@pytest.mark.parametrize("approximate", [False, True])
def test_a_leased_window_arriving_after_a_plain_one_counts_what_it_granted(approximate: bool) -> None:
    # A window counter cuts its sub-windows by the window's length, which the lease
    # lengthens: the state the plain process wrote is cut again, nothing dropped.
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("window-after")
    leased, plain = (
        SlidingWindow(6, 1.0, approximate=approximate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
                      name=name, clock=clock, lease=lease)
        for lease in (0.2, None)
    )  # fmt: skip
    sent: list[float] = []
    for who, later in [(plain, 0.01), (leased, 0.0), (leased, 0.0), (leased, 0.01), (leased, 0.1), (leased, 0.3),
                       (leased, 0.5)]:  # fmt: skip
        clock.advance(later)
        if who.try_acquire():
            sent.append(clock.now())
    assert within_window(sent, 6, 1.0)
    assert len(sent) == 6


@pytest.mark.parametrize(
    ("slack", "until"),
    [("abc", "2000"), ("-5", "2000"), ("0", "2000"), ("nan", "2000"), ("inf", "2000"), ("1e300", "2000"),
     ("0.5", "inf"), ("0.5", "nan"), ("0.5", "x")],
)  # fmt: skip
@pytest.mark.parametrize("approximate", [False, True])
def test_a_garbled_record_is_ignored(slack: str, until: str, approximate: bool) -> None:
    clock = ManualClock(start=1_000.0)
    client = fakeredis.FakeRedis()
    name = unique_name("garbled")
    limiter = SlidingWindow(6, 1.0, approximate=approximate, backend=RedisBackend(client), name=name, clock=clock)
    kind = "sliding_window_counter" if approximate else "sliding_window"
    client.hset(key_for(name, kind, injected=True) + ":slack", mapping={"slack": slack, "until": until})
    assert burst(limiter) == 6
    clock.advance(1.1)  # a window and a sub-window: the counter's too
    assert burst(limiter) == 6


# -- end to end: real processes on a real server --------------------------------------

WORKER = SUPPORT / "shared_worker.py"


@pytest.mark.slow
def test_leased_and_plain_processes_on_one_budget_never_exceed_it(redis_client: redis.Redis) -> None:
    # Two processes lease (50 ms, and a guard of 50 ms for send jitter: 40 of the 60
    # tokens kept back) and two do not (the guard alone: 20), four threads each, all
    # emptying the bucket the moment it refills.
    capacity, rate, seconds = 60, 400.0, 3.0
    name = unique_name("mixed-e2e")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), REDIS_URL, name, str(capacity), str(rate), "4", str(seconds), lease],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lease in ("0", "0.05", "0", "0.05")
    ]
    grants: list[float] = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        grants += json.loads(out)["grants"]
    grants.sort()
    assert len(grants) > capacity
    # Sends are timestamped after the call returns: one grant of slack for that.
    most = max(bisect.bisect_left(grants, t + 1.0) - i for i, t in enumerate(grants))
    assert most <= capacity + rate + 1
