"""The Lua scripts against the pure algorithms, decision by decision.

For random sequences of requests (time steps, weights, timeouts, refunds, charges
into debt, pauses and other restrictions, and reservations withdrawn from the end or
the middle of the queue; for a composite, members given 0), the same
sequence runs through the pure Python step and through the script on each Redis-like
store, with the time passed in. Every answer (granted or not, the wait, the grant
time) must be the same: the scripts mirror the Python arithmetic operation for
operation, so the floats are expected to agree exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import fakeredis
import fakeredis._socket._base as fakeredis_base
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import ManualClock, RedisBackend
from ratelimit._algorithms.algorithm import Algorithm, charge_all, peek_all
from ratelimit._algorithms.holes import (
    GrantTime,
    Holes,
    give_back,
    level,
    pace_charge,
    pace_wait,
    reserve,
    restrict,
    void,
)
from ratelimit._algorithms.lanes import HIGH, LANES, LOW, Lanes, LaneTime
from ratelimit._algorithms.lanes import give_back as give_back_lane
from ratelimit._algorithms.lanes import peek as peek_lanes
from ratelimit._algorithms.lanes import reserve as reserve_lane
from ratelimit._algorithms.lanes import restrict as restrict_lanes
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.quota import Calendar, CalendarQuota
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Allowance, Gcra
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisGroupHandle, RedisHandle, RedisLaneHandle

from conftest import unique_name
from scenarios import ALGORITHMS, Request, member_weights, requests, same, take_back


class FixedTime:
    """The ``now`` sent to the script: whatever the scenario says it is."""

    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> str:
        return repr(self.value)


class _FrozenTime:
    """``time`` as fakeredis's command loop sees it here: stopped. The scenarios pass
    the scripts a fake ``now``, but fakeredis expires keys on real time, and a state
    kept for a second or two could vanish mid-example on a loaded machine."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def time() -> float:
        return 1_700_000_000.0


@pytest.fixture(scope="module", params=["fakeredis", "redis", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fakeredis":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fakeredis_base, "time", _FrozenTime())
            yield fakeredis.FakeRedis()
        return
    if request.param == "redis":
        yield request.getfixturevalue("redis_client")
        return
    yield request.getfixturevalue("cluster_client")


def on_the_wire(told: tuple[float, float]) -> tuple[float, float]:
    """A level as the script sends it: the seconds until one more in whole
    microseconds, rounded up."""
    left, more = told
    return left, math.ceil(more * 1_000_000) / 1_000_000 if more < math.inf else more


@pytest.mark.parametrize(
    ("kind", "first", "second"),
    # Every algorithm at three limits, and a token bucket refilled at an infinite rate
    # (a limiter that never limits, but for a pause fed back) and at none (an
    # allowance that never refills).
    [(kind, *limits) for kind in ALGORITHMS for limits in [(3.0, 1.0), (5.0, 2.5), (4.0, 0.3)]]
    + [("token_bucket", 3.0, math.inf), ("token_bucket", 3.0, 0.0), ("token_bucket", 7.5, 0.0)],
)
@pytest.mark.parametrize("with_name", [False, True], ids=["bare", "named"])
@pytest.mark.parametrize("leveled", [False, True], ids=["plain", "leveled"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_script_matches_pure_step(
    client: redis.Redis,
    kind: str,
    first: float,
    second: float,
    with_name: bool,
    leveled: bool,
    scenario: list[Request],
) -> None:
    """Leveled: each reserve also asks for the level it left (the serving gate's), which
    the script tells as ``holes.level`` tells it, on the fast, checked fast and full paths."""
    alg: Algorithm[Any] = ALGORITHMS[kind](first, second)
    now = FixedTime()
    now.value = 1_700_000_000.0  # epoch-sized times, as the server's TIME gives
    # Named, as every limiter of an application is: its calls name the change key, so
    # a bucket's reserves take the fast path of lua/_single.lua while nothing is beside
    # the state, and the full path from a give-back or a restriction on; bare (the
    # script driven with its state key alone), always the full path.
    limiter = unique_name()
    handle = RedisHandle(RedisBackend(client), alg, key_for(limiter, kind), now, None, limiter if with_name else None)
    states: list[Any] = [alg.new_state()]
    holes = Holes()
    pending: list[tuple[float, float]] = []
    for dt, tokens, max_wait, back, restriction, charged, _ in scenario:
        now.value += dt
        if restriction is not None:
            remaining, seconds = restriction
            states = restrict([alg], states, holes, now.value, [remaining], now.value + seconds)
            handle.restrict(remaining, seconds)
        n = min(tokens, first)
        # limiter.peek: the script's read-only wait, as the pure one says it.
        assert handle.peek(n) == max(peek_all([alg], states, now.value, [n]), pace_wait(holes, now.value))
        states, wait, name = reserve([alg], states, holes, now.value, [n], max_wait)
        if leveled:
            told_wait, told_at, told = handle.reserve_level(n, max_wait)
            same((told_wait, told_at), (wait, name))
            assert told == on_the_wire(level([alg], states, holes, now.value))
        else:
            same(handle.reserve(n, max_wait), (wait, name))
        if wait >= 0:
            pending.append((name, n))
        if charged:
            states = charge_all([alg], states, now.value, [min(charged, first)])
            void(holes)
            pace_charge(holes, now.value, min(charged, first))
            named = handle.charge(min(charged, first))
            if alg.slotted:
                assert named == alg.latest(states[0])
                assert isinstance(named, GrantTime)
                pending.append((named, min(charged, first)))
            else:
                assert named is None
        given = take_back(back, pending, now.value)
        if given is not None:
            at, n = given
            states = give_back([alg], states, holes, now.value, [n], at)
            handle.refund(n, at)


GROUPS: dict[str, Any] = {
    "four": lambda: [Gcra(3.0, 1.0), WindowLog(5.0, 4.0), LeakyQueue(6.0, 2.0), WindowCounter(4.0, 2.0)],
    # A slow bucket sets most grant times, and the leaky queue keeps the gaps it leaves.
    "gaps": lambda: [Gcra(2.0, 0.4), LeakyQueue(4.0, 3.0)],
    # An allowance (a token bucket refilled at no rate) beside limits that refill,
    # and allowances alone (whose pauses are kept beside their states).
    "with-allowance": lambda: [WindowLog(5.0, 4.0), Allowance(9.0), Gcra(3.0, 1.0)],
    "allowances": lambda: [Allowance(4.0), Allowance(12.0)],
    # A calendar quota capping a bucket, its boundaries sent beside the bucket's numbers.
    "with-quota": lambda: [Gcra(3.0, 1.0), CalendarQuota(7.0, Calendar("minute", "Asia/Kolkata"))],
}


#: A change at run time of each group's first member (``set_limit(member=0)``), made
#: before its first decision: raised, so that no request the code allows is too big.
FIRST_CHANGED: dict[str, tuple[float | None, float | None]] = {
    "four": (2.0, 4.0),
    "gaps": (0.8, 3.0),
    "with-allowance": (2.5, None),
    "allowances": (None, 6.0),
    "with-quota": (2.0, 4.0),
}


@pytest.mark.parametrize("members", list(GROUPS))
@pytest.mark.parametrize(
    ("leveled", "changed"), [(False, False), (True, False), (False, True)], ids=["plain", "leveled", "changed"]
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_group_script_matches_pure_step_all(
    client: redis.Redis, members: str, leveled: bool, changed: bool, scenario: list[Request]
) -> None:
    """Leveled: the composite's level (its tightest member's) too, as ``holes.level``.
    Changed: the first member's limit changed at run time, which the script reads
    beside the members' states (the pure step runs the changed algorithm)."""
    algs: list[Algorithm[Any]] = GROUPS[members]()
    now = FixedTime()
    now.value = 1_700_000_000.0
    name = unique_name()
    keys = [key_for(name, alg.kind, i) for i, alg in enumerate(algs)]
    backend = RedisBackend(client)
    handle = RedisGroupHandle(backend, algs, keys, now, None)
    if changed:
        rate, burst = FIRST_CHANGED[members]
        backend.set_limit(name, rate=rate, burst=burst, member=0, clock=ManualClock(now.value))
        algs = [algs[0].configured(rate, burst), *algs[1:]]
    states = [alg.new_state() for alg in algs]
    holes = Holes()
    pending: list[tuple[float, Any]] = []
    for dt, tokens, max_wait, back, restriction, charged, zeros in scenario:
        now.value += dt
        if restriction is not None:
            remaining, seconds = restriction
            left = [remaining] * len(algs)
            states = restrict(algs, states, holes, now.value, left, now.value + seconds)
            handle.restrict(left, seconds)
        weights = member_weights(algs, tokens, zeros)
        assert handle.peek(weights) == max(peek_all(algs, states, now.value, weights), pace_wait(holes, now.value))
        states, wait, granted = reserve(algs, states, holes, now.value, weights, max_wait)
        if leveled:
            told_wait, told_at, told = handle.reserve_level(weights, max_wait)
            same((told_wait, told_at), (wait, granted))
            assert told == on_the_wire(level(algs, states, holes, now.value))
        else:
            same(handle.reserve(weights, max_wait), (wait, granted))
        if wait >= 0:
            pending.append((granted, weights))
        if charged:
            # The LLM case among others: no request, some tokens.
            costs = member_weights(algs, charged, zeros >> 1)
            states = charge_all(algs, states, now.value, costs)
            void(holes)
            pace_charge(holes, now.value, costs[0])
            handle.charge(costs)
        given = take_back(back, pending, now.value)
        if given is not None:
            at, back_weights = given
            states = give_back(algs, states, holes, now.value, back_weights, at)
            handle.refund(back_weights, at)


# -- priorities: two lanes of one algorithm, decided by one script call ------------

# (time step, tokens, max_wait, low priority, what to give back, restriction or None,
# how many alike). What to give back, besides the choices above: "refund", a plain
# refund (no grant named) of this grant's tokens from the caller's own priority. Runs
# of alike requests fill a lane, which is when the other one matters.
LaneRequest = tuple[float, float, float, bool, str, "tuple[float, float] | None", int]
lane_requests = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.1, 0.25, 0.5, 1.0, 3.0]),
        st.sampled_from([1.0, 1.0, 1.0, 2.0, 3.0]),
        st.sampled_from([0.0, 0.5, 2.0, math.inf, math.inf]),
        st.booleans(),
        st.sampled_from(["keep", "keep", "keep", "this", "earliest", "refund"]),
        st.one_of(
            st.none(),
            st.none(),
            st.none(),
            st.none(),
            st.tuples(st.sampled_from([0.0, 1.0, 2.0, 5.0, 50.0]), st.sampled_from([0.5, 2.0, 30.0])),
        ),
        st.sampled_from([1, 1, 1, 4]),
    ),
    min_size=1,
    max_size=40,
)

LANE_ALGORITHMS: dict[str, Any] = {
    "token_bucket": Gcra(6.0, 2.0),
    "sliding_window": WindowLog(7.0, 3.0),
    "sliding_window_counter": WindowCounter(6.0, 2.0),
}


@pytest.mark.parametrize("kind", list(LANE_ALGORITHMS))
@pytest.mark.parametrize(("low_share", "keep"), [(0.5, None), (0.7, 1.0), (0.4, 0.0)])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=lane_requests)
def test_lanes_script_matches_pure_lanes(
    client: redis.Redis, kind: str, low_share: float, keep: float | None, scenario: list[LaneRequest]
) -> None:
    lanes = Lanes.of(LANE_ALGORITHMS[kind], low_share)
    now = FixedTime()
    now.value = 1_700_000_000.0
    name = unique_name()
    keys = [key_for(name, kind, lane=lane) for lane in LANES]
    backend = RedisBackend(client)
    handles = [RedisLaneHandle(backend, lanes, keys, now, None, lane, keep) for lane in (HIGH, LOW)]
    state = lanes.new_state()
    pending: list[tuple[float, float]] = []
    # The lane of each priority's latest grant: where its plain refunds go (LastLane).
    last = [HIGH, LOW]
    for dt, tokens, max_wait, low, back, restriction, alike in scenario:
        now.value += dt
        priority = LOW if low else HIGH
        if restriction is not None:
            remaining, seconds = restriction
            restrict_lanes(lanes, state, now.value, remaining, now.value + seconds)
            handles[priority].restrict(remaining, seconds)
        n = min(tokens, (lanes.low if low else lanes.high).most)
        for _ in range(alike):
            assert handles[priority].peek(n) == peek_lanes(lanes, state, now.value, n, low, keep)
            wait, lane = reserve_lane(lanes, state, now.value, n, max_wait, low, keep)
            got = handles[priority].reserve(n, max_wait)
            assert got == (wait, now.value + wait)
            assert isinstance(got[1], LaneTime)
            assert got[1].lane == lane
            if wait >= 0:
                pending.append((got[1], n))
                last[priority] = lane
        if back == "refund" and wait >= 0:
            give_back_lane(lanes, state, last[priority], now.value, n, None)
            handles[priority].refund(n, None)
            continue
        given = take_back(back, pending, now.value)
        if given is not None:
            at, n = given
            assert isinstance(at, LaneTime)
            give_back_lane(lanes, state, at.lane, now.value, n, at)
            handles[priority].refund(n, at)
