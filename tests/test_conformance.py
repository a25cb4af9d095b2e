"""The Lua scripts against the pure algorithms, decision by decision.

For random sequences of requests (time steps, weights, timeouts, refunds), the same
sequence runs through the pure Python step and through the script on each Redis-like
store, with the time passed in. Every answer (granted or not, the wait, the grant
time) must be the same: the scripts mirror the Python arithmetic operation for
operation, so the floats are expected to agree exactly.
"""

from __future__ import annotations

import math
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import RedisBackend
from ratelimit._algorithm import Algorithm, step, step_all
from ratelimit._gcra import Gcra
from ratelimit._leaky_bucket import LeakyQueue
from ratelimit._redis import RedisGroupHandle, RedisHandle, key_for
from ratelimit._sliding_window import WindowCounter, WindowLog

from conftest import unique_name

ALGORITHMS: dict[str, Any] = {
    "token_bucket": lambda a, b: Gcra(a, b),
    "leaky_bucket": lambda a, b: LeakyQueue(a, b),
    "sliding_window": lambda a, b: WindowLog(a, b),
    "sliding_window_counter": lambda a, b: WindowCounter(a, b),
}


class FixedTime:
    """The ``now`` sent to the script: whatever the scenario says it is."""

    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> str:
        return repr(self.value)


# (time step, tokens, max_wait, refund?, restriction (remaining, seconds) or None)
Request = tuple[float, float, float, bool, "tuple[float, float] | None"]
requests = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.001, 0.1, 0.25, 0.5, 1.0, 3.0]),
        st.sampled_from([1.0, 1.0, 1.0, 2.0, 3.0]),
        st.sampled_from([0.0, 0.5, 2.0, math.inf]),
        st.booleans(),
        st.one_of(
            st.none(),
            st.none(),
            st.none(),
            st.tuples(st.sampled_from([0.0, 1.0, 2.0, 50.0]), st.sampled_from([0.5, 2.0, 30.0])),
        ),
    ),
    min_size=1,
    max_size=40,
)


@pytest.fixture(scope="module", params=["fakeredis", "redis", "cluster"])
def client(request: pytest.FixtureRequest) -> Any:
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    if request.param == "redis":
        return request.getfixturevalue("redis_client")
    return request.getfixturevalue("cluster_client")


@pytest.mark.parametrize("kind", list(ALGORITHMS))
@pytest.mark.parametrize(("first", "second"), [(3.0, 1.0), (5.0, 2.5), (4.0, 0.3)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_script_matches_pure_step(
    client: redis.Redis, kind: str, first: float, second: float, scenario: list[Request]
) -> None:
    alg: Algorithm[Any] = ALGORITHMS[kind](first, second)
    now = FixedTime()
    now.value = 1_700_000_000.0  # epoch-sized times, as the server's TIME gives
    handle = RedisHandle(RedisBackend(client), alg, key_for(unique_name(), kind), now, None)
    state = alg.new_state()
    for dt, tokens, max_wait, refund, restriction in scenario:
        now.value += dt
        if restriction is not None:
            remaining, seconds = restriction
            state = alg.restrict(state, now.value, remaining, now.value + seconds)
            handle.restrict(remaining, seconds)
        n = min(tokens, first)
        state, wait = step(alg, state, now.value, n, max_wait)
        expected = (wait, now.value + wait)
        assert handle.reserve(n, max_wait) == expected
        if refund and wait >= 0:
            state = alg.refund(state, now.value, n, now.value + wait)
            handle.refund(n, now.value + wait)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_group_script_matches_pure_step_all(client: redis.Redis, scenario: list[Request]) -> None:
    algs: list[Algorithm[Any]] = [Gcra(3.0, 1.0), WindowLog(5.0, 4.0), LeakyQueue(6.0, 2.0), WindowCounter(4.0, 2.0)]
    now = FixedTime()
    now.value = 1_700_000_000.0
    name = unique_name()
    keys = [key_for(name, alg.kind, i) for i, alg in enumerate(algs)]
    handle = RedisGroupHandle(RedisBackend(client), algs, keys, now, None)
    states = [alg.new_state() for alg in algs]
    for dt, tokens, max_wait, refund, restriction in scenario:
        now.value += dt
        if restriction is not None:
            remaining, seconds = restriction
            left = [remaining] * len(algs)
            states = [
                alg.restrict(s, now.value, remaining, now.value + seconds) for alg, s in zip(algs, states, strict=True)
            ]
            handle.restrict(left, seconds)
        weights = [min(tokens, alg.most) for alg in algs]
        states, wait = step_all(algs, states, now.value, weights, max_wait)
        assert handle.reserve(weights, max_wait) == (wait, now.value + wait)
        if refund and wait >= 0:
            states = [
                alg.refund(s, now.value, n, now.value + wait) for alg, s, n in zip(algs, states, weights, strict=True)
            ]
            handle.refund(weights, now.value + wait)
