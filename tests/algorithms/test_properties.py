"""Property tests on the pure algorithms: the bounds each one promises, for any traffic.

Random sequences of requests (a time step >= 0, a weight, a longest acceptable wait)
run through :func:`ratelimit._algorithms.algorithm.step`; every grant is collected as ``(grant
time, tokens)`` with ``grant time = now + wait``, and the grants are checked against
the limit the algorithm stands for. Here reaching into the algorithms is the point:
these are the pure state transitions that every store mirrors.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit._algorithms.algorithm import EPSILON, Algorithm, charge, level_all, step, step_all
from ratelimit._algorithms.holes import Holes, give_back, reserve
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.quota import Calendar, CalendarQuota
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import CounterState, WindowCounter
from ratelimit._algorithms.token_bucket import Allowance, Gcra

START = 1_000.0
INF = math.inf

# (time step, weight as a fraction of the largest request or a plain 1, max_wait)
Request = tuple[float, float, float]

time_steps = st.one_of(
    st.sampled_from([0.0, 0.0, 0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 3.75, 10.0]),
    st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False),
)
# A weight <= 0 means "one token" (capped at the largest request); otherwise a fraction of it.
weights = st.one_of(
    st.just(0.0),
    st.just(0.0),
    st.sampled_from([0.25, 0.5, 1.0]),
    st.floats(min_value=0.01, max_value=1.0, allow_nan=False),
)
max_waits = st.sampled_from([0.0, 0.5, 2.0, 7.5, INF])
request_lists = st.lists(st.tuples(time_steps, weights, max_waits), min_size=1, max_size=40)

sizes = st.sampled_from([1.0, 2.0, 2.5, 3.0, 5.0, 10.0])
rates = st.sampled_from([0.3, 0.5, 1.0, 2.0, 7.0])
windows = st.sampled_from([0.3, 1.0, 2.5, 10.0])

SETTINGS = settings(max_examples=200, deadline=None)


def weight_of(alg: Algorithm[Any], weight: float) -> float:
    return min(1.0, alg.most) if weight <= 0 else alg.most * weight


@dataclass(frozen=True)
class Decision:
    now: float
    tokens: float
    wait: float  # signed, as step returns it
    #: Where a sliding window recorded the grant (``None`` for the buckets): the
    #: reported time ``now + wait`` may be up to EPSILON earlier, since a grant due
    #: within a nanosecond is granted "now".
    recorded: float | None = None

    @property
    def granted(self) -> bool:
        return self.wait >= 0

    @property
    def at(self) -> float:
        return self.now + self.wait


def at_times(requests: Sequence[Request]) -> list[Request]:
    """The requests with absolute times (``START`` plus the running sum of the steps)."""
    now = START
    timed = []
    for dt, weight, max_wait in requests:
        now += dt
        timed.append((now, weight, max_wait))
    return timed


def run_at(
    alg: Algorithm[Any],
    timed: Sequence[Request],
    check: Callable[[Any, float], None] | None = None,
) -> list[Decision]:
    """Drive ``alg`` through requests at absolute times; ``check(state, now)`` after each."""
    state = alg.new_state()
    decisions = []
    for now, weight, max_wait in timed:
        tokens = weight_of(alg, weight)
        state, wait = step(alg, state, now, tokens, max_wait)
        decisions.append(Decision(now, tokens, wait, recorded_at(alg, state) if wait >= 0 else None))
        if check is not None:
            check(state, now)
    return decisions


def run(
    alg: Algorithm[Any],
    requests: Sequence[Request],
    check: Callable[[Any, float], None] | None = None,
) -> list[Decision]:
    """Drive ``alg`` through ``requests`` (time steps); ``check(state, now)`` after every step."""
    return run_at(alg, at_times(requests), check)


def recorded_at(alg: Algorithm[Any], state: Any) -> float | None:
    """The time a sliding window recorded its latest grant at (grants are FIFO)."""
    if isinstance(alg, WindowLog):
        return float(alg.latest(state))
    if isinstance(alg, WindowCounter):
        return float(alg.latest(state))
    return None


def grants(decisions: Sequence[Decision]) -> list[tuple[float, float]]:
    return [(d.at, d.tokens) for d in decisions if d.granted]


def recorded(decisions: Sequence[Decision]) -> list[tuple[float, float]]:
    """The grants at the times the window recorded them, checked against the reported ones."""
    result = []
    for d in decisions:
        if d.granted:
            assert d.recorded is not None
            assert d.at <= d.recorded <= d.at + EPSILON
            result.append((d.recorded, d.tokens))
    return result


def assert_fifo(decisions: Sequence[Decision]) -> None:
    times = [at for at, _ in grants(decisions)]
    assert times == sorted(times), times


def assert_token_bucket_bound(granted: Sequence[tuple[float, float]], capacity: float, rate: float) -> None:
    times = sorted(at for at, _ in granted)
    for a in times:
        for b in times:
            if b < a:
                continue
            inside = sum(n for at, n in granted if a <= at <= b)
            assert inside <= capacity + rate * (b - a) + 1e-6, (a, b, inside)


def assert_leaky_spacing(granted: Sequence[tuple[float, float]], rate: float) -> None:
    for (a, n), (b, _) in itertools.pairwise(granted):
        assert b - a >= n / rate - 1e-6, (a, n, b)


def assert_window_bound(granted: Sequence[tuple[float, float]], limit: float, window: float) -> None:
    for x, _ in granted:
        inside = sum(n for at, n in granted if x <= at < x + window)
        assert inside <= limit + 1e-9, (x, inside)


def algorithms() -> st.SearchStrategy[Algorithm[Any]]:
    return st.one_of(
        st.builds(Gcra, sizes, rates),
        st.builds(LeakyQueue, sizes, rates),
        st.builds(WindowLog, sizes, windows),
        st.builds(WindowCounter, sizes, windows),
        st.builds(lambda limit: CalendarQuota(limit, Calendar("minute", "UTC")), sizes),
    )


# -- the bound each algorithm stands for ------------------------------------------


@SETTINGS
@given(capacity=sizes, rate=rates, requests=request_lists)
def test_token_bucket_never_exceeds_capacity_plus_refill(capacity: float, rate: float, requests: list[Request]) -> None:
    decisions = run(Gcra(capacity, rate), requests)
    assert_token_bucket_bound(grants(decisions), capacity, rate)


@SETTINGS
@given(capacity=sizes, rate=rates, requests=request_lists)
def test_leaky_bucket_spaces_grants_and_never_overfills(capacity: float, rate: float, requests: list[Request]) -> None:
    def level_within_capacity(state: tuple[float, float], now: float) -> None:
        assert (max(state[0], now) - now) * rate <= capacity + 1e-6

    decisions = run(LeakyQueue(capacity, rate), requests, level_within_capacity)
    assert_leaky_spacing(grants(decisions), rate)


@SETTINGS
@given(capacity=sizes, rate=rates, requests=request_lists)
def test_leaky_bucket_refuses_only_on_overflow_or_timeout(
    capacity: float, rate: float, requests: list[Request]
) -> None:
    # A refusal with a finite max_wait is either an overflow or a wait beyond max_wait;
    # with max_wait=inf only an overflow refuses, and then its retry_after is the time
    # until the queue has room for the request.
    alg = LeakyQueue(capacity, rate)
    state = alg.new_state()
    now = START
    for dt, weight, max_wait in requests:
        now += dt
        tokens = weight_of(alg, weight)
        level = (max(state[0], now) - now) * rate
        state, wait = step(alg, state, now, tokens, max_wait)
        if level + tokens - capacity > EPSILON:
            assert wait == pytest.approx(-(level + tokens - capacity) / rate, abs=1e-9)
        elif wait < 0:
            assert max_wait < INF
            assert -wait == pytest.approx(level / rate, abs=1e-9)
            assert -wait > max_wait


@SETTINGS
@given(limit=sizes, window=windows, requests=request_lists)
def test_exact_window_never_exceeds_limit_in_any_interval(limit: float, window: float, requests: list[Request]) -> None:
    decisions = run(WindowLog(limit, window), requests)
    assert_window_bound(recorded(decisions), limit, window)


@SETTINGS
@given(limit=sizes, window=windows, requests=request_lists)
def test_approximate_window_never_exceeds_limit_in_any_interval(
    limit: float, window: float, requests: list[Request]
) -> None:
    # The same bound as the exact log (the proof is in _window_counter's docstring);
    # refunds, withdrawals and restrictions are in tests/algorithms/test_window_counter.py.
    alg = WindowCounter(limit, window)
    granted = recorded(run(alg, requests))
    assert_window_bound(granted, limit, window)
    # Stronger, and free of float edges: any m + 1 consecutive sub-windows hold at most `limit`.
    per_sub: dict[int, float] = {}
    for at, n in granted:
        per_sub[math.floor(at / alg.width)] = per_sub.get(math.floor(at / alg.width), 0.0) + n
    for k in per_sub:
        assert sum(per_sub.get(k + i, 0.0) for i in range(alg.ring)) <= limit + 1e-9, (k, per_sub)


# (time step as a fraction of the period's usual length, weight as a fraction of the
# limit (<= 0: one token), max_wait in periods, what to give back: nothing, this grant,
# the earliest reservation still ahead, or half of the latest grant already due)
QuotaStep = tuple[float, float, float, str]
quota_steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.1, 0.3, 0.5, 1.0, 2.5]),
        st.one_of(st.just(0.0), st.sampled_from([0.25, 0.5, 1.0]), st.floats(min_value=0.01, max_value=1.0)),
        st.sampled_from([0.0, 0.5, 1.5, INF]),
        st.sampled_from(["keep", "keep", "keep", "this", "earliest", "due"]),
    ),
    min_size=1,
    max_size=60,
)


@SETTINGS
@pytest.mark.parametrize(
    ("per", "tz", "start"),
    [
        ("minute", "UTC", 1_700_000_000.0),
        ("hour", "Australia/Lord_Howe", 1_775_314_800.0),  # 2026-04-05: half an hour turned back
        ("day", "America/New_York", 1_772_900_000.0),  # around 2026-03-08: a 23-hour day
        ("week", "Europe/Berlin", 1_774_700_000.0),  # around 2026-03-29 (clocks forward)
        ("month", "America/Santiago", 1_775_000_000.0),
    ],
)
@given(limit=sizes, steps=quota_steps)
def test_a_quota_never_grants_more_than_its_limit_in_one_calendar_period(
    per: str, tz: str, start: float, limit: float, steps: list[QuotaStep]
) -> None:
    """Grants, reservations withdrawn from the end or the middle of the queue, and
    give-backs of grants already due (through the holes, as the stores decide): the
    tokens kept in any one period never exceed the limit."""
    calendar = Calendar(per, tz)
    alg = CalendarQuota(limit, calendar)
    states: list[Any] = [alg.new_state()]
    holes = Holes()
    now = start
    kept: list[list[float]] = []  # [grant time, tokens still counted]
    for dt, weight, max_wait, back in steps:
        now += dt * calendar.seconds
        tokens = 1.0 if weight <= 0 else limit * weight
        tokens = min(tokens, limit)
        states, wait, _ = reserve([alg], states, holes, now, [tokens], max_wait * calendar.seconds)
        if wait >= 0:
            kept.append([now + wait, tokens])
        ahead = [k for k in kept if k[0] > now and k[1] > 0]
        due = [k for k in kept if k[0] <= now and k[1] > 0]
        if back == "this" and wait >= 0:
            given = kept[-1]
            states = give_back([alg], states, holes, now, [given[1]], given[0])
            given[1] = 0.0
        elif back == "earliest" and ahead:
            states = give_back([alg], states, holes, now, [ahead[0][1]], ahead[0][0])
            ahead[0][1] = 0.0
        elif back == "due" and due:
            half = due[-1][1] / 2
            states = give_back([alg], states, holes, now, [half], due[-1][0])
            due[-1][1] -= half
        per_period: dict[float, float] = {}
        for at, n in kept:
            begin = calendar.period(at)[0]
            per_period[begin] = per_period.get(begin, 0.0) + n
        assert all(n <= limit + 1e-6 for n in per_period.values()), per_period


# -- what every algorithm shares ----------------------------------------------------


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_grants_come_out_in_request_order(alg: Algorithm[Any], requests: list[Request]) -> None:
    assert_fifo(run(alg, requests))


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_a_refusal_changes_nothing(alg: Algorithm[Any], requests: list[Request]) -> None:
    timed = at_times(requests)
    decisions = run_at(alg, timed)
    refused = {i for i, d in enumerate(decisions) if not d.granted}
    if not refused:
        return
    # Replay without the refused requests, every other request at its same time: the
    # answers must be identical, bit for bit.
    replay = run_at(alg, [r for i, r in enumerate(timed) if i not in refused])
    assert replay == [d for i, d in enumerate(decisions) if i not in refused]


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_a_refusal_returns_the_state_it_was_given(alg: Algorithm[Any], requests: list[Request]) -> None:
    # For the one-number states the refusal hands back the very same value.
    if isinstance(alg, (WindowLog,)):
        return
    state = alg.new_state()
    now = START
    for dt, weight, max_wait in requests:
        now += dt
        before = state.copy() if isinstance(state, CounterState) else state
        state, wait = step(alg, state, now, weight_of(alg, weight), max_wait)
        if wait < 0:
            assert state == before


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_a_grant_within_max_wait_and_a_refusal_beyond_it(alg: Algorithm[Any], requests: list[Request]) -> None:
    for d, (_, _, max_wait) in zip(run(alg, requests), requests, strict=True):
        if d.granted:
            assert d.wait <= max_wait + EPSILON
        if d.wait == 0:
            assert math.copysign(1.0, d.wait) == 1.0  # a grant now is +0.0, never -0.0


# -- tightness: the bound is reached, not just respected -------------------------


@pytest.mark.parametrize("capacity", [1.0, 2.5, 3.0, 10.0])
@pytest.mark.parametrize("rate", [0.3, 1.0, 4.0])
def test_token_bucket_saturated_grant_times(capacity: float, rate: float) -> None:
    alg = Gcra(capacity, rate)
    state = alg.new_state()
    for n in range(1, 40):
        state, wait = step(alg, state, START, 1.0, INF)
        assert wait == pytest.approx(max(0.0, n - capacity) / rate, abs=1e-9)


@SETTINGS
@given(capacity=sizes, rate=rates, horizon=st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.25, 20.0]))
def test_token_bucket_saturated_count_within_a_horizon(capacity: float, rate: float, horizon: float) -> None:
    # Unit requests back-to-back at one instant, waiting as long as needed: the grants
    # falling in [start, start + T] number exactly floor(capacity + rate * T).
    alg = Gcra(capacity, rate)
    state = alg.new_state()
    count = 0
    while True:
        state, wait = step(alg, state, START, 1.0, INF)
        if wait > horizon + 1e-9:
            break
        count += 1
    assert count == math.floor(capacity + rate * horizon + 1e-9)


def queued(poured: Sequence[tuple[float, float]], rate: float, t: float) -> float:
    """The tokens still in a leaky bucket at ``t``: each grant ``(at, tokens)`` waits
    whole until ``at``, then leaks at ``rate``."""
    return sum(n if t <= at else max(0.0, n - (t - at) * rate) for at, n in poured)


@SETTINGS
@given(
    capacity=sizes,
    rate=rates,
    bucket=st.tuples(sizes, st.sampled_from([0.1, 0.3, 1.0, 7.0])),
    requests=st.lists(
        st.tuples(time_steps, weights, st.sampled_from(["both", "both", "both", "bucket only", "leaky only"])),
        min_size=1,
        max_size=40,
    ),
)
def test_a_leaky_member_queues_no_more_than_capacity_and_refuses_only_when_full(
    capacity: float, rate: float, bucket: tuple[float, float], requests: list[tuple[float, float, str]]
) -> None:
    """A leaky bucket in a composite with a token bucket that sets later grant times:
    what it holds (each grant's tokens from the request until they have leaked) never
    exceeds ``capacity``, and a request with no limit on its wait is refused only when
    it would not fit in what the bucket truly holds.

    Why: a grant later than the queue alone would have it leaves the bucket idle from
    its drain to the grant; the state keeps those gaps until they are past, and counts
    only the time the queue leaks."""
    algs: list[Algorithm[Any]] = [Gcra(*bucket), LeakyQueue(capacity, rate)]
    states: list[Any] = [alg.new_state() for alg in algs]
    poured: list[tuple[float, float]] = []
    now = START
    for dt, weight, which in requests:
        now += dt
        tokens = [0.0 if which == "leaky only" else weight_of(algs[0], weight), weight_of(algs[1], weight)]
        if which == "bucket only":
            tokens[1] = 0.0
        held = queued(poured, rate, now)
        states, wait = step_all(algs, states, now, tokens, INF)
        if wait < 0:
            assert held + tokens[1] > capacity - 1e-6, (now, held, tokens, poured)
            continue
        assert held + tokens[1] <= capacity + 1e-6, (now, held, tokens, poured)
        if tokens[1] > 0:
            at = now + wait
            if poured:
                last_at, last_n = poured[-1]
                assert at >= last_at + last_n / rate - 1e-6  # one interval per token apart
            poured.append((at, tokens[1]))


@pytest.mark.parametrize("capacity", [1.0, 2.5, 3.0, 10.0])
@pytest.mark.parametrize("rate", [0.3, 1.0, 4.0])
def test_leaky_bucket_saturated_grant_times(capacity: float, rate: float) -> None:
    alg = LeakyQueue(capacity, rate)
    state = alg.new_state()
    admitted = math.floor(capacity + EPSILON)
    for n in range(1, 20):
        state, wait = step(alg, state, START, 1.0, INF)
        if n <= admitted:
            assert wait == pytest.approx((n - 1) / rate, abs=1e-9)
        else:
            # Overflow: told when the queue will have room for one more token.
            assert wait == pytest.approx(-(admitted + 1 - capacity) / rate, abs=1e-9)


@pytest.mark.parametrize("limit", [1.0, 2.0, 5.0])
@pytest.mark.parametrize("window", [0.3, 2.5, 10.0])
def test_exact_window_saturated_grant_times(limit: float, window: float) -> None:
    alg = WindowLog(limit, window)
    state = alg.new_state()
    for n in range(1, 30):
        state, wait = step(alg, state, START, 1.0, INF)
        assert wait == pytest.approx(((n - 1) // int(limit)) * window, abs=1e-9)


@pytest.mark.parametrize("limit", [2.0, 5.0])
@pytest.mark.parametrize("window", [2.5, 10.0])
def test_approximate_window_saturated_grant_times(limit: float, window: float) -> None:
    # START is on a sub-window edge for these windows. The first `limit` go at once;
    # each next batch of `limit` when the sub-window of the one before is no longer
    # counted: one window and one sub-window later.
    alg = WindowCounter(limit, window)
    assert START % alg.width == 0
    state = alg.new_state()
    for n in range(1, int(limit) * 4):
        state, wait = step(alg, state, START, 1.0, INF)
        assert wait == pytest.approx(((n - 1) // int(limit)) * (window + alg.width), abs=1e-9)


# -- composite ---------------------------------------------------------------------

member_specs = st.lists(
    st.one_of(
        st.tuples(st.just("token_bucket"), sizes, rates),
        st.tuples(st.just("leaky_bucket"), sizes, rates),
        st.tuples(st.just("sliding_window"), sizes, windows),
        st.tuples(st.just("sliding_window_counter"), sizes, windows),
    ),
    min_size=1,
    max_size=4,
)
KINDS: dict[str, Callable[[float, float], Algorithm[Any]]] = {
    "token_bucket": Gcra,
    "leaky_bucket": LeakyQueue,
    "sliding_window": WindowLog,
    "sliding_window_counter": WindowCounter,
}


@SETTINGS
@given(
    specs=member_specs,
    requests=st.lists(st.tuples(time_steps, st.lists(weights, min_size=4, max_size=4), max_waits), max_size=40),
)
def test_composite_never_violates_a_member(
    specs: list[tuple[str, float, float]], requests: list[tuple[float, list[float], float]]
) -> None:
    algs = [KINDS[kind](a, b) for kind, a, b in specs]
    states: list[Any] = [alg.new_state() for alg in algs]
    now = START
    per_member: list[list[tuple[float, float]]] = [[] for _ in algs]
    times: list[float] = []
    for dt, member_weights, max_wait in requests:
        now += dt
        tokens = [weight_of(alg, w) for alg, w in zip(algs, member_weights, strict=False)]
        before = list(states)
        states, wait = step_all(algs, states, now, tokens, max_wait)
        if wait < 0:
            # All or nothing: a refusal leaves every member as it was. (A log's state is
            # one mutable object that planning may prune; its grants are checked below.)
            assert all(s is b or s == b for s, b in zip(states, before, strict=True))
            continue
        assert wait <= max_wait + EPSILON
        times.append(now + wait)
        # Every member records the grant at one common time; a window member tells it.
        at = now + wait
        for alg, s in zip(algs, states, strict=True):
            found = recorded_at(alg, s)
            if found is not None:
                at = found
        assert now + wait <= at <= now + wait + EPSILON
        for granted, n in zip(per_member, tokens, strict=True):
            granted.append((at, n))
    assert times == sorted(times)
    for alg, granted in zip(algs, per_member, strict=True):
        if isinstance(alg, Gcra):
            assert_token_bucket_bound(granted, alg.capacity, alg.rate)
        elif isinstance(alg, LeakyQueue):
            assert_leaky_spacing(granted, alg.rate)
        elif isinstance(alg, WindowLog):
            assert_window_bound(granted, alg.limit, alg.window)
        else:
            assert isinstance(alg, WindowCounter)
            assert_window_bound(granted, alg.limit, alg.window)


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_a_composite_of_one_decides_like_its_member(alg: Algorithm[Any], requests: list[Request]) -> None:
    # step_all over a single member is step: same waits, same grants.
    alone = run(alg, requests)
    states: list[Any] = [alg.new_state()]
    now = START
    for (dt, weight, max_wait), expected in zip(requests, alone, strict=True):
        now += dt
        states, wait = step_all([alg], states, now, [weight_of(alg, weight)], max_wait)
        assert wait == expected.wait


# -- charges: debt that later grants wait off --------------------------------------------
#
# A charge is never refused, so it may take a limit over; what must hold is that every
# *grant* still keeps the limit with the charges counted. Steps are acquires (waiting up
# to a max_wait: 0 is try_acquire), charges and refunds, at times that only move on.
# Grants and charges are *records* ``[time, tokens]`` in the order they were decided; a
# refund of ``k`` at ``now`` (``refund(k)``, naming no grant) is modelled as taking ``k``
# off the newest records already made (time <= now), and is at most what those hold
# within the last window for a sliding window (refund within ``window_seconds``, as the
# README says). The algorithms take refunds elsewhere (a window from its oldest grants,
# a bucket from its state): never less strict than this model, which is what the
# properties below show, each checked at the moment every grant is decided, on the
# records as they stand then.

Step = tuple[float, str, float, float]  # (time step, "acquire" | "charge" | "refund", weight, max_wait)
charge_steps = st.lists(
    st.tuples(time_steps, st.sampled_from(["acquire", "acquire", "acquire", "charge", "refund"]), weights, max_waits),
    min_size=1,
    max_size=40,
)


def run_with_charges(
    alg: Algorithm[Any], steps: Sequence[Step], check: Callable[[list[list[float]], Any, float], None]
) -> tuple[int, int]:
    """Drive ``alg`` through ``steps``; ``check(records, state, now)`` after every grant,
    the grant last in ``records``. Returns how many grants and charges there were."""
    state = alg.new_state()
    now = START
    records: list[list[float]] = []
    counts = [0, 0]
    span = getattr(alg, "window", INF)
    for dt, kind, weight, max_wait in steps:
        now += dt
        tokens = weight_of(alg, weight)
        if kind == "charge":
            before = alg.latest(state)
            state = charge(alg, state, now, tokens)
            # A queue's charge starts where the queue ends; any other, at its own time.
            at = alg.latest(state) if isinstance(alg, LeakyQueue) else max(now, before)
            records.append([at, tokens])
            counts[1] += 1
        elif kind == "refund":
            made = [r for r in records if r[0] <= now + EPSILON and r[0] > now - span]
            back = min(tokens, sum(r[1] for r in made))
            if back > 0:
                state = alg.refund(state, now, back, now)
                for record in reversed(made):
                    took = min(back, record[1])
                    record[1] -= took
                    back -= took
        else:
            state, wait = step(alg, state, now, tokens, max_wait)
            if wait >= 0:
                logged = recorded_at(alg, state)
                records.append([now + wait if logged is None else logged, tokens])
                counts[0] += 1
                check(records, state, now)
    return counts[0], counts[1]


@SETTINGS
@given(capacity=sizes, rate=rates, steps=charge_steps)
def test_token_bucket_grants_keep_the_bound_counting_charges(capacity: float, rate: float, steps: list[Step]) -> None:
    """For every grant at ``t`` and every ``s <= t``: the tokens of the records decided up
    to it (grants and charges) with times in ``[s, t]`` are at most
    ``capacity + rate * (t - s)``.

    Why: the TAT is at least the GCRA recursion ``max(TAT, at) + n / rate`` run over the
    records (a charge is that step at ``max(now, latest)``; a refund lowers it to
    ``max(TAT - k / rate, now)``, never below the recursion over the records with ``k``
    taken off the newest made ones), and a grant at ``t`` needs ``t >= TAT + n / rate -
    capacity / rate``: the recursion over ``[s, t]`` then adds up to at most
    ``t + capacity / rate - s``."""

    def bound(records: list[list[float]], state: float, now: float) -> None:
        t = records[-1][0]
        for s, _ in records:
            inside = sum(n for at, n in records if s <= at <= t)
            assert inside <= capacity + rate * (t - s) + 1e-6, (s, t, inside)

    run_with_charges(Gcra(capacity, rate), steps, bound)


@SETTINGS
@given(capacity=sizes, rate=rates, steps=charge_steps)
def test_leaky_bucket_grants_wait_for_everything_poured_before(capacity: float, rate: float, steps: list[Step]) -> None:
    """A grant at ``t`` comes no sooner than every record before it has leaked: for each
    earlier record at ``a``, ``t - a >= (its tokens and those of every record after it)
    / rate``; and a grant never leaves more than ``capacity`` queued.

    Why: the time the bucket drains is at least ``max(drained, at) + n / rate`` run over
    the records (a charge pours in behind the queue; a refund only drains it sooner by
    what the newest made records gave back), and a grant starts when it has drained."""

    def spaced(records: list[list[float]], state: tuple[float, float], now: float) -> None:
        t = records[-1][0]
        for i in range(len(records) - 1):
            behind = sum(n for _, n in records[i:-1])
            assert t - records[i][0] >= behind / rate - 1e-6, (i, records)
        assert (max(state[0], now) - now) * rate <= capacity + 1e-6

    run_with_charges(LeakyQueue(capacity, rate), steps, spaced)


@SETTINGS
@given(limit=sizes, window=windows, steps=charge_steps)
def test_exact_window_grants_keep_the_limit_counting_charges(limit: float, window: float, steps: list[Step]) -> None:
    """For every grant at ``t``: the tokens of the records decided up to it (grants and
    charges) with times in ``(t - window, t]`` are at most ``limit``.

    Why: a grant is planned where the log's entries in ``(t - window, t]`` leave room
    for it, and the log holds every record (charges appended in time order) but for
    refunds, which it takes from its oldest grants already made: from any span ending
    at ``t >= now`` that frees no more than taking them off the newest made ones."""

    def bound(records: list[list[float]], state: Any, now: float) -> None:
        t = records[-1][0]
        inside = sum(n for at, n in records if t - window + 1e-9 < at <= t)
        assert inside <= limit + 1e-9, (t, inside, records)

    run_with_charges(WindowLog(limit, window), steps, bound)


@SETTINGS
@given(limit=sizes, window=windows, steps=charge_steps)
def test_approximate_window_grants_keep_the_limit_counting_charges(
    limit: float, window: float, steps: list[Step]
) -> None:
    """For every grant at ``t``: the tokens of the records decided up to it with times in
    the ``m + 1`` sub-windows ending with ``t``'s (so in ``(t - window, t]`` too) are at
    most ``limit``.

    Why: a decision counts those sub-windows; a charge is counted in the sub-window of
    ``max(now, last)``, like a grant; and a refund takes tokens from the oldest counted
    sub-windows, so from every sub-window on the counts stay at least the records'."""
    alg = WindowCounter(limit, window)

    def bound(records: list[list[float]], state: CounterState, now: float) -> None:
        k = math.floor(records[-1][0] / alg.width)
        inside = sum(n for at, n in records if k - alg.subs <= math.floor(at / alg.width) <= k)
        assert inside <= limit + 1e-9, (k, inside, records)

    run_with_charges(alg, steps, bound)


@SETTINGS
@given(alg=algorithms(), steps=charge_steps)
def test_grants_and_charges_stay_in_time_order(alg: Algorithm[Any], steps: list[Step]) -> None:
    # Every record, grant or charge, at or after the one decided before it (refunds
    # never move a record), so a window's log is only ever appended to.
    def ordered(records: list[list[float]], state: Any, now: float) -> None:
        times = [at for at, _ in records]
        assert all(b >= a - EPSILON for a, b in itertools.pairwise(times)), times

    grants, _ = run_with_charges(alg, [*steps, (0.0, "acquire", 0.0, INF)], ordered)
    assert grants >= 1 or isinstance(alg, LeakyQueue)  # only a queue refuses a patient request


@SETTINGS
@given(alg=algorithms(), requests=request_lists)
def test_nothing_given_records_nothing(alg: Algorithm[Any], requests: list[Request]) -> None:
    # A composite's member given 0: commit, refund and cancel leave it deciding as it did.
    state = alg.new_state()
    now = START
    for dt, weight, max_wait in requests:
        now += dt
        state, _ = step(alg, state, now, weight_of(alg, weight), max_wait)
    latest = alg.latest(state)
    before = [alg.plan(state, now, weight_of(alg, w)) for w in (0.0, 0.5, 1.0)], alg.idle_until(state)
    state = alg.commit(state, now, 0.0, max(now, latest) + 1.0)
    state = alg.refund(state, now, 0.0, now)
    state = alg.cancel(state, now, 0.0, latest)
    assert ([alg.plan(state, now, weight_of(alg, w)) for w in (0.0, 0.5, 1.0)], alg.idle_until(state)) == before
    assert alg.latest(state) == latest


# -- the level a decision leaves (what the serving gate's RateLimit field says) -----


@SETTINGS
@given(alg=st.one_of(algorithms(), st.builds(Allowance, sizes)), requests=request_lists)
def test_the_level_is_what_the_plan_grants_at_once(alg: Algorithm[Any], requests: list[Request]) -> None:
    """After every decision, ``level_all`` counts exactly the whole requests of one token
    that could go at once one after another (each planned and committed in turn), and
    one more goes at once ``more_in`` seconds later, not before."""

    def check(state: Any, now: float) -> None:
        left, more = level_all([alg], [state], now)
        if 0.0 < more < math.inf:
            admit_at, at = alg.plan(copy.deepcopy(state), now + more, left + 1.0)
            assert max(admit_at, at) - (now + more) <= EPSILON
        state = copy.deepcopy(state)
        for _ in range(int(left)):
            admit_at, at = alg.plan(state, now, 1.0)
            assert max(admit_at, at) - now <= EPSILON
            state = alg.commit(state, now, 1.0, now)
        if left + 1.0 <= alg.most + EPSILON:
            admit_at, at = alg.plan(state, now, 1.0)
            assert max(admit_at, at) - now > EPSILON or more == 0.0
        assert more >= 0.0

    run(alg, requests, check)
