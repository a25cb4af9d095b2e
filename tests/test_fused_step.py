"""Algorithms that fuse plan + commit into ``step`` for speed must not change a decision."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit._algorithm import Algorithm, step
from ratelimit._gcra import Gcra
from ratelimit._leaky_bucket import LeakyQueue

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
    assert alg.step(state, now, tokens, max_wait) == step(alg, state, now, tokens, max_wait)
