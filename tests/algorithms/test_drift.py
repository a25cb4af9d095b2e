"""Float drift in the exact sliding window: fractional weights and refunds at large limits.

The log keeps a running total beside its entries. Adding and taking fractional
weights from a total near 1e6 or 1e9 rounds (an ulp of 1e9 is 1.2e-7, far above the
1e-9 the plan allows), so the total drifts from the sum of the entries. Drifted
upwards, it made a request for the whole limit find no entry whose ageing frees
enough: ``AssertionError: unreachable`` in process, a Lua error through Redis. The
plan now falls back to "when the whole log has aged out" and makes the total the sum
of the entries again.

Each scenario runs through the public API on a :class:`ManualClock`, on memory,
fakeredis (the real ``lua/`` scripts) and the real Redis: it must raise nothing but
``AcquireTimeout``, and keep the window bound on what the grants kept after refunds.
And the script still decides as the pure log does, bit for bit, with these weights
too (test_conformance.py pins the two with whole-number weights).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import AcquireTimeout, ManualClock, MemoryBackend, RedisBackend, SlidingWindow
from ratelimit._algorithms.algorithm import step
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisHandle
from ratelimit._stores.store import Backend

from conftest import unique_name


@pytest.fixture(params=["memory", "fakeredis", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "fakeredis":
        yield RedisBackend(fakeredis.FakeRedis())
    else:
        yield RedisBackend(request.getfixturevalue("redis_client"))


def kept_within_bound(grants: list[tuple[float, float]], limit: float, window: float) -> tuple[float, float]:
    """The most tokens kept in any interval ``[x, x + window)``, and the ``x`` where."""
    grants = sorted(grants)
    times = [at for at, _ in grants]
    most, where = 0.0, math.nan
    for i, (x, _) in enumerate(grants):
        # A grant due within a nanosecond is reported "now" but recorded up to 1e-9
        # later (see Decision.recorded in test_properties.py): leave the interval's
        # far end that much slack.
        end = bisect.bisect_left(times, x + window - 2e-9)
        inside = math.fsum(n for _, n in grants[i:end])
        if inside > most:
            most, where = inside, x
    return most, where


def run(
    backend: Backend, limit: float, window: float, scenario: list[tuple[float, float, float | None, float]]
) -> list[tuple[float, float]]:
    """Drive a SlidingWindow; returns each grant as (time, tokens kept after its refund)."""
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(limit, window, backend=backend, name=unique_name("drift"), clock=clock)
    kept = []
    for dt, tokens, timeout, refund in scenario:
        clock.advance(dt)
        asked = clock.now()
        try:
            wait = limiter.acquire(tokens, timeout=timeout)
        except AcquireTimeout:
            continue
        back = tokens * refund
        if back > 0:
            limiter.refund(back)
        kept.append((asked + wait, tokens - back))
    return kept


LIMITS = [1e6, 123_456.789, 1e9]

# (time step, tokens as a share of the limit (1.0: all of it) or a small fractional
# count, timeout, share of the grant refunded at once)
steps = st.tuples(
    st.sampled_from([0.0, 0.0, 0.001, 0.1, 0.5, 1.0, 3.0]),
    st.one_of(
        st.just(("share", 1.0)),
        st.tuples(st.just("share"), st.floats(min_value=1e-4, max_value=1.0)),
        st.tuples(st.just("count"), st.sampled_from([0.1, 0.3, 0.7, 1.7, 12.345])),
    ),
    st.sampled_from([0.0, 2.5, None]),
    st.one_of(st.just(0.0), st.just(0.0), st.floats(min_value=0.0, max_value=1.0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limit=st.sampled_from(LIMITS),
    window=st.sampled_from([1.0, 10.0]),
    raw=st.lists(steps, min_size=1, max_size=40),
)
def test_fractional_weights_and_refunds_never_fail_and_keep_the_bound(
    backend: Backend, limit: float, window: float, raw: list[Any]
) -> None:
    scenario = [
        (dt, limit * amount if kind == "share" else amount, timeout, refund)
        for dt, (kind, amount), timeout, refund in raw
    ]
    kept = run(backend, limit, window, scenario)
    most, where = kept_within_bound(kept, limit, window)
    # What rounding may cost: a few ulps of the limit per operation, far below one token.
    assert most <= limit * (1 + 1e-12) + 1e-6, (most, where)


class FixedTime:
    """The ``now`` sent to the script: whatever the scenario says it is."""

    def __init__(self) -> None:
        self.value = 1_700_000_000.0  # epoch-sized, as the server's TIME

    def __call__(self) -> str:
        return repr(self.value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limit=st.sampled_from(LIMITS),
    window=st.sampled_from([1.0, 10.0]),
    raw=st.lists(steps, min_size=1, max_size=40),
)
def test_the_script_decides_as_the_pure_log_with_fractional_weights(
    client: Any, limit: float, window: float, raw: list[Any]
) -> None:
    alg = WindowLog(limit, window)
    now = FixedTime()
    handle = RedisHandle(RedisBackend(client), alg, key_for(unique_name("drift"), alg.kind), now, None)
    state = alg.new_state()
    for dt, (kind, amount), timeout, refund in raw:
        tokens = limit * amount if kind == "share" else amount
        max_wait = math.inf if timeout is None else timeout
        now.value += dt
        state, wait = step(alg, state, now.value, tokens, max_wait)
        assert handle.reserve(tokens, max_wait) == (wait, now.value + wait)
        back = tokens * refund
        if wait == 0 and back > 0:
            # A grant already made (a reservation still ahead would be withdrawn).
            state = alg.refund(state, now.value, back, now.value)
            handle.refund(back, now.value)


def test_a_whole_limit_request_after_drift_waits_for_the_log_to_age_out(backend: Backend) -> None:
    # 999,999,999.9 + 0.1 rounds to 1,000,000,000.1000000238; once the first grant
    # ages out, the total reads 0.1000000238 against an entry of 0.1. The whole limit
    # then needs every entry to age out: the 0.1 at t=1001, so at t=1011.
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(1e9, 10, backend=backend, name=unique_name("drift"), clock=clock)
    assert limiter.acquire(1e9 - 0.1) == 0.0
    clock.advance(1)
    assert limiter.acquire(0.1) == 0.0
    clock.advance(9.5)
    assert limiter.acquire(1e9) == 0.5
    assert clock.now() == 1_011.0
    # The total was made the entries' sum again: the limit is spent until t=1021.
    assert not limiter.try_acquire(0.1)
    clock.advance(10)
    assert limiter.try_acquire(1e9)
