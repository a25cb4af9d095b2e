"""A decision taken in one ``step`` (plan and commit fused, for speed) is the decision
that ``plan`` then ``commit`` take, for every algorithm that fuses them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ratelimit._algorithms import holes as _holes
from ratelimit._algorithms.algorithm import EPSILON, Algorithm, step, step_all
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.quota import Calendar, CalendarQuota
from ratelimit._algorithms.sliding_window import Log, WindowLog
from ratelimit._algorithms.sliding_window_counter import CounterState, WindowCounter
from ratelimit._algorithms.token_bucket import Allowance, Gcra
from ratelimit._clock import ManualClock
from ratelimit._stores.memory.backend import MemoryBackend
from ratelimit._stores.stats import Stats

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


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.floats(min_value=0.5, max_value=1e6),
    now=times,
    spent=st.one_of(st.just(-math.inf), st.just(0.0), st.floats(min_value=0.0, max_value=2e6)),
    fraction=st.floats(min_value=0.0, max_value=1.5, exclude_min=True),
    max_wait=waits,
)
def test_an_allowances_fused_step_is_plan_then_commit(
    capacity: float, now: float, spent: float, fraction: float, max_wait: float
) -> None:
    """A token bucket refilled at no rate: granted at once or refused for ever (a wait
    of -inf), never a nan, whatever wait the caller allows."""
    alg = Allowance(capacity)
    tokens = capacity * fraction
    assume(tokens > 0)
    fused = alg.step(spent, now, tokens, max_wait)
    assert fused == step(alg, spent, now, tokens, max_wait)
    assert fused[1] in (0.0, -math.inf)
    assert not math.isnan(fused[0])


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


# -- the approximate window's fused step ------------------------------------------------------------------

#: Time steps as fractions of the window: within a sub-window, across one, across the ring.
fractions = st.one_of(
    st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.03, 0.05, 0.25, 0.5, 0.9, 0.97, 0.99, 1.0, 1.05, 2.0]),
    st.floats(min_value=0.0, max_value=3.0, allow_nan=False),
)
epoch_windows = st.sampled_from([1e-6, 3e-5, 0.3, 1.0, 2.5, 60.0, 3600.0, 1e9])


@settings(max_examples=300, deadline=None)
@given(
    window=epoch_windows,
    limit=st.sampled_from([1.0, 3.0, 100.0, 1e15]),
    start=st.sampled_from([0.0, 1_000.0, 1_700_000_000.0]),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["acquire", "acquire", "acquire", "refund", "restrict"]),
            fractions,
            st.floats(min_value=0.01, max_value=1.0),
            st.sampled_from([0.0, 0.5, math.inf]),
        ),
        max_size=50,
    ),
)
def test_the_counters_fused_step_decides_as_plan_then_commit(
    window: float, limit: float, start: float, ops: list[tuple[str, float, float, float]]
) -> None:
    alg = WindowCounter(limit, window)
    state = alg.new_state()
    now = start
    for op, fraction, weight, max_wait in ops:
        now += fraction * window
        tokens = weight * limit
        if op == "refund":
            state = alg.refund(state, now, tokens, now)
        elif op == "restrict":
            state = alg.restrict(state, now, tokens, now + fraction * window)
        else:
            fused, fused_wait = alg.step(state.copy(), now, tokens, max_wait * window)
            plain, plain_wait = step(alg, state.copy(), now, tokens, max_wait * window)
            assert (fused, fused_wait) == (plain, plain_wait)
            assert math.copysign(1.0, fused_wait) == math.copysign(1.0, plain_wait)
            state = fused


def test_the_common_step_touches_only_the_newest_sub_window() -> None:
    alg = WindowCounter(100.0, 1.0)
    state, _ = alg.step(alg.new_state(), 1_000.0, 1.0, 0.0)
    counts = state.counts
    state, wait = alg.step(state, 1_000.0 + 0.01, 2.0, 0.0)
    assert wait == 0.0
    assert state.counts is counts  # updated in place, nothing allocated
    assert state.total == 3.0
    assert state.counts[state.slot] == 3.0


# -- the in-process group handle's fast path -------------------------------------------

GROUP_KINDS: dict[str, Any] = {
    "token_bucket": lambda size: Gcra(size, 2.0),
    "leaky_bucket": lambda size: LeakyQueue(size, 2.0),
    "sliding_window": lambda size: WindowLog(size, 1.5),
    "sliding_window_counter": lambda size: WindowCounter(size, 1.5),
}


def _seen(alg: Algorithm[Any], state: Any, now: float) -> object:
    """A state as a value to compare: the in-place ones by their contents."""
    if isinstance(state, Log):
        assert isinstance(alg, WindowLog)
        return _pruned(alg, state, now)
    if isinstance(state, CounterState):
        return (state.index, state.slot, state.total, list(state.counts), state.last)
    return state


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(GROUP_KINDS)), min_size=1, max_size=3),
    size=st.sampled_from([1.0, 3.0, 10.0]),
    ops=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.0, 0.05, 0.25, 1.0]),  # time step
            st.sampled_from([0.0, 0.5, 1.0]),  # share of each member's largest request
            waits,
            st.sampled_from(["", "", "", "withdraw", "refund", "pause"]),
        ),
        min_size=1,
        max_size=60,
    ),
)
def test_the_memory_group_handle_decides_as_the_pure_functions(
    kinds: list[str], size: float, ops: list[tuple[float, float, float, str]]
) -> None:
    # The handle steps in place on its slots when there are no holes: the same decisions,
    # names and states as step_all (and as holes.reserve once there are holes).
    algs: list[Algorithm[Any]] = [GROUP_KINDS[kind](size) for kind in kinds]
    clock = ManualClock(1_000.0)
    handle = MemoryBackend().bind_group(None, algs, clock)
    stats = handle.stats = Stats()
    states: list[Any] = [alg.new_state() for alg in algs]
    holes = _holes.Holes()
    granted = 0
    for dt, share, max_wait, extra in ops:
        clock.advance(dt)
        now = clock.now()
        tokens = [max(1.0, alg.most * share) if i == 0 else alg.most * share for i, alg in enumerate(algs)]
        wait, name = handle.reserve(tokens, max_wait)
        expected_name: float | None = None
        if holes.items:
            new, expected, expected_name = _holes.reserve(algs, states, holes, now, tokens, max_wait)
        else:
            new, expected = step_all(algs, states, now, tokens, max_wait)
        assert wait == expected
        if expected >= 0:
            states = list(new)
            granted += 1
            if expected_name is None:
                expected_name = _holes.exact(algs, states, now + expected) if expected > EPSILON else now + expected
            assert name == expected_name
            assert type(name) is type(expected_name)
        if extra == "withdraw" and wait > 0:
            handle.refund(tokens, name)
            states = _holes.give_back(algs, states, holes, now, tokens, name)
        elif extra == "refund" and wait >= 0:
            handle.refund(tokens, None)
            states = _holes.give_back(algs, states, holes, now, tokens, None)
        elif extra == "pause":
            handle.restrict([0.0] * len(algs), dt + 0.5)
            _holes.restricted(holes, now, now + dt + 0.5)
            _holes.pause(holes, now + dt + 0.5)
            states = [alg.restrict(s, now, 0.0, now + dt + 0.5) for alg, s in zip(algs, states, strict=True)]
        assert [_seen(alg, s, now) for alg, s in zip(algs, states, strict=True)] == [
            _seen(alg, slot.state, now) for alg, slot in zip(algs, handle._slots, strict=True)
        ]
    assert stats.granted == granted


@settings(max_examples=500, deadline=None)
@given(
    limit=st.floats(min_value=0.5, max_value=1e6),
    per=st.sampled_from(["minute", "hour", "day", "month"]),
    now=st.floats(min_value=1.6e9, max_value=1.9e9),
    periods_off=st.sampled_from([None, -3, -1, 0, 1, 2]),
    used=st.floats(min_value=0.0, max_value=1.2),
    fraction=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    max_wait=st.one_of(st.just(0.0), st.just(math.inf), st.floats(min_value=0.0, max_value=1e7)),
)
def test_a_quotas_fused_step_is_plan_then_commit(
    limit: float, per: str, now: float, periods_off: int | None, used: float, fraction: float, max_wait: float
) -> None:
    """A state of now's period, an earlier one or one reserved ahead, partly or wholly
    used (or more, a charge's debt)."""
    alg = CalendarQuota(limit, Calendar(per, "America/New_York"))
    state: tuple[float, float] = alg.new_state()
    if periods_off is not None:
        start = alg.calendar.period(now)[0]
        for _ in range(abs(periods_off)):
            start = alg.calendar.period(start - 1)[0] if periods_off < 0 else alg.calendar.period(start)[1]
        state = (start, used * limit)
    tokens = limit * fraction
    assume(tokens > 0)  # (a request's weight; a tiny fraction of a small limit underflows)
    assert alg.step(state, now, tokens, max_wait) == step(alg, state, now, tokens, max_wait)
