"""Algorithms that fuse plan + commit into ``step`` for speed must not change a decision."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ratelimit._algorithms.algorithm import Algorithm, step
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import Log, WindowLog
from ratelimit._algorithms.token_bucket import Gcra

times = st.floats(min_value=0.0, max_value=2e9, allow_nan=False)
deltas = st.floats(min_value=-50.0, max_value=50.0, allow_nan=False)
waits = st.one_of(st.just(0.0), st.just(math.inf), st.floats(min_value=0.0, max_value=100.0))


@pytest.mark.parametrize("make", [Gcra, LeakyQueue], ids=["token_bucket", "leaky_bucket"])
@settings(max_examples=500, deadline=None)
@given(
    capacity=st.floats(min_value=0.5, max_value=1e6),
    rate=st.floats(min_value=1e-3, max_value=1e6),
    now=times,
    state_offset=st.one_of(st.just(-math.inf), deltas),
    fraction=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    max_wait=waits,
)
def test_fused_step_is_plan_then_commit(
    make: Any, capacity: float, rate: float, now: float, state_offset: float, fraction: float, max_wait: float
) -> None:
    alg: Algorithm[Any] = make(capacity, rate)
    state: Any = now + state_offset
    if isinstance(alg, LeakyQueue):
        state = (state, state - alg.interval)
    tokens = capacity * fraction
    # A request's weight is > 0 (a 0 is only ever a composite member's, which goes
    # through commit, never step); a tiny fraction of a small capacity underflows to 0.
    assume(tokens > 0)
    assert alg.step(state, now, tokens, max_wait) == step(alg, state, now, tokens, max_wait)


def _pruned(alg: WindowLog, state: Log, now: float) -> tuple[list[float], list[float], list[float], list[list[float]]]:
    state.prune(now - alg.window)
    head = state.head
    return state.times[head:], state.sums[head:], state.weights[head:], state.caps


@settings(max_examples=300, deadline=None)
@given(
    limit=st.sampled_from([1.0, 3.0, 64.0, 1e10]),
    window=st.sampled_from([1e-3, 0.5, 10.0]),
    ops=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=2.0),  # time step
            st.floats(min_value=0.01, max_value=1.0),  # share of the limit
            waits,
            st.sampled_from(["", "", "", "refund", "cancel", "restrict"]),
        ),
        min_size=1,
        max_size=150,
    ),
)
def test_the_logs_fused_step_decides_as_plan_then_commit(
    limit: float, window: float, ops: list[tuple[float, float, float, str]]
) -> None:
    # The decisions, and the log once pruned, must be the same as plan() then commit().
    alg = WindowLog(limit, window)
    fused, plain = alg.new_state(), alg.new_state()
    now = 1_000.0
    for dt, share, max_wait, extra in ops:
        now += dt
        tokens = max(1.0, limit * share) if limit > 1 else limit * share
        fused, wait = alg.step(fused, now, tokens, max_wait)
        plain, expected = step(alg, plain, now, tokens, max_wait)
        assert wait == expected
        if extra == "refund":
            fused, plain = (alg.refund(s, now, tokens / 2, now) for s in (fused, plain))
        elif extra == "cancel" and wait > 0:
            fused, plain = (alg.cancel(s, now, tokens, now + wait) for s in (fused, plain))
        elif extra == "restrict":
            fused, plain = (alg.restrict(s, now, limit * share, now + dt) for s in (fused, plain))
        assert _pruned(alg, fused, now) == _pruned(alg, plain, now)
