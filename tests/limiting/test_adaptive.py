"""adaptive=: a rate learned from refusals, shared by every worker (issue 14).

The pure rule on its own (cut, growth curve, floor, ceiling, idle, one cut per
congestion event), the same decisions in memory and through the Lua twin, and the
limiter around it: feedback, headers keeping precedence, the HTTP integrations.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Any

import fakeredis
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from ratelimit import (
    Adaptive,
    Backoff,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    Retry,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._algorithms.adaptive import GRACE, IDLE, QUIET, Cubic, Pace
from ratelimit._algorithms.algorithm import step_all
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.store import Backend
from ratelimit.events import Throttled
from ratelimit.httpx import RateLimitTransport
from ratelimit.prometheus import PrometheusMetrics

from conftest import state_keys, unique_name

CEILING = 100.0


def cubic(floor: float = 1.0, ceiling: float = CEILING, recover: float = 6.0) -> Cubic:
    return Cubic(1.0, floor, ceiling, 0.7, recover)


def cut_at(alg: Cubic, now: float, peak: float) -> Pace:
    """A pace cut at ``now`` from ``peak``, with nothing reserved."""
    return Pace(-math.inf, -math.inf, peak, now, now, now)


# -- the rule on its own ------------------------------------------------------------


def test_a_new_pace_runs_at_the_ceiling_until_its_first_refusal() -> None:
    alg = cubic()
    assert alg.rate(alg.new_state(), 1_000.0) == CEILING


def test_a_refusal_cuts_to_decrease_times_the_rate_it_was_decided_at() -> None:
    alg = cubic()
    state = alg.throttle(alg.new_state(), 1_000.0, 999.9, 1_000.0)
    assert state.peak == CEILING
    assert alg.rate(state, 1_000.0) == pytest.approx(70.0)


def test_the_rate_grows_back_along_the_cubic_curve() -> None:
    alg = cubic(ceiling=200.0, recover=6.0)
    state = Pace(-math.inf, -math.inf, 100.0, 1_000.0, 1_000.0, 1_000.0)
    # peak * (1 + 0.3 * (t/6 - 1)^3): fast at first, flat near the old rate, then probing.
    expected = {0.0: 70.0, 1.5: 100 * (1 - 0.3 * 0.75**3), 3.0: 96.25, 6.0: 100.0, 9.0: 100 * (1 + 0.3 * 0.125)}
    for after, rate in expected.items():
        # In use all along (a decision at every point): the curve's clock runs.
        busy = state._replace(seen=1_000.0 + after)
        assert alg.rate(busy, 1_000.0 + after) == pytest.approx(rate, rel=1e-12), after
    # ... and never above the ceiling, however long it grows.
    assert alg.rate(state._replace(seen=1_060.0), 1_060.0) == 200.0


def test_the_rate_never_goes_below_the_floor() -> None:
    alg = cubic(floor=40.0)
    state = alg.new_state()
    for t in range(5):
        state = alg.throttle(state, 1_000.0 + t, 1_000.0 + t, 1_000.0 + t)
    assert state.peak < 40.0 / 0.7  # five cuts: 100 * 0.7^4 = 24, and more
    assert alg.rate(state, 1_004.0) == 40.0


def test_refusals_of_requests_sent_before_the_cut_are_one_congestion_event() -> None:
    alg, now = cubic(), 1_000.0
    state = alg.new_state()
    # Three grants reserved at the ceiling's pace, the last going at now + 0.02.
    for _ in range(3):
        state, _ = alg.step(state, now, 1.0, math.inf)
    state = alg.throttle(state, now, now, now)  # the first one is refused
    assert state.fresh == pytest.approx(now + 0.03)  # when the pace is free of them
    once = state
    # The other two went at the old rate: their refusals change nothing...
    state = alg.throttle(state, now + 0.05, now, now + 0.01)
    state = alg.throttle(state, now + 0.05, now, now + 0.02)
    assert state == once
    # So does one sent just after them, into the provider's state they left...
    state, _ = alg.step(state, now + 0.03, 1.0, math.inf)
    state = alg.throttle(state, now + 0.05, now + 0.03, state.last)
    assert state.peak == once.peak
    # ... but a request granted past that grace and refused is news: the rate cuts again.
    later = now + 0.03 + GRACE
    state, _ = alg.step(state, later, 1.0, math.inf)
    state = alg.throttle(state, later + 0.02, later, state.last)
    assert alg.rate(state, later + 0.02) == pytest.approx(0.7 * alg.rate(once, later))


def test_a_refusal_whose_grant_is_unknown_waits_out_a_quiet_spell() -> None:
    alg, now = cubic(), 1_000.0
    state = alg.throttle(alg.new_state(), now, None, None)
    assert alg.rate(state, now) == pytest.approx(70.0)
    assert alg.throttle(state, now + QUIET - 0.01, None, None) == state
    assert QUIET == 1.0
    assert alg.rate(alg.throttle(state, now + QUIET, None, None), now + QUIET) < 70.0


def test_an_idle_budget_does_not_grow_unseen() -> None:
    alg, now = cubic(), 1_000.0
    state = cut_at(alg, now, 100.0)
    state, _ = alg.step(state, now, 1.0, math.inf)
    # An hour without a grant: the curve's clock stopped after IDLE seconds.
    later = now + 3_600.0
    state, _ = alg.step(state, later, 1.0, math.inf)
    assert alg.idle == max(IDLE, 2 / alg.floor)
    assert alg.rate(state, later) == pytest.approx(alg.rate(cut_at(alg, now, 100.0), now + alg.idle), rel=1e-9)


def test_a_clock_behind_the_cut_reads_the_cut_rate_not_less() -> None:
    alg = cubic()
    state = cut_at(alg, 1_000.0, 100.0)
    assert alg.rate(state, 990.0) == pytest.approx(70.0)


def test_the_pace_spaces_grants_at_the_learned_rate() -> None:
    alg, now = cubic(), 1_000.0
    state = cut_at(alg, now, 10.0)  # 7/s
    waits = []
    for _ in range(4):
        state, wait = alg.step(state, now, 1.0, math.inf)
        waits.append(wait)
    assert waits == pytest.approx([0.0, 1 / 7, 2 / 7, 3 / 7], rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["acquire", "throttle", "throttle?", "wait"]), st.floats(0.0, 3.0)),
        max_size=60,
    )
)
def test_no_sequence_leaves_the_rate_outside_floor_and_ceiling_or_grants_past_the_bucket(
    ops: list[tuple[str, float]],
) -> None:
    bucket, pace = Gcra(5.0, CEILING), cubic(floor=2.0)
    states: list[Any] = [bucket.new_state(), pace.new_state()]
    now, grants, last = 1_000.0, [], None
    for op, x in ops:
        if op == "acquire":
            states, wait = step_all([bucket, pace], states, now, [1.0, 1.0], math.inf)
            grants.append(now + wait)
            last = (now, now + wait)
        elif op == "throttle":
            states[1] = pace.throttle(states[1], now, *(last or (None, None)))
        elif op == "throttle?":
            states[1] = pace.throttle(states[1], now, None, None)
        else:
            now += x
        assert 2.0 <= pace.rate(states[1], now) <= CEILING
    # The learned pace only ever adds to the bucket's own limit.
    grants.sort()
    for i, start in enumerate(grants):
        for j in range(i, len(grants)):
            assert j - i + 1 <= 5 + CEILING * (grants[j] - start) + 1e-6


# -- the limiter: every store decides the same ----------------------------------------


def waited(limiter: TokenBucket, tokens: float) -> float:
    try:
        return limiter.acquire(tokens, timeout=0.5)
    except TimeoutError as exc:
        return -getattr(exc, "retry_after", 1.0)


@pytest.mark.parametrize("floor", [2.0, 0.5])  # 0.5: the idle threshold is two intervals at the floor
def test_memory_and_lua_decide_alike(backend: Backend, floor: float) -> None:
    """The Python rule and its Lua twin, decision for decision, on a random history."""
    rng = random.Random(14)
    twin_clock, clock = ManualClock(start=1_000.0), ManualClock(start=1_000.0)
    name = unique_name("adaptive")
    learn = Adaptive(floor=floor, recover=2)
    ours = TokenBucket(3, 50, adaptive=learn, backend=backend, name=name, clock=clock)
    model = TokenBucket(3, 50, adaptive=learn, backend=MemoryBackend(), name=name, clock=twin_clock)
    for _ in range(300):
        op = rng.random()
        if op < 0.5:
            assert ours.try_acquire() == model.try_acquire()
        elif op < 0.65:
            n = rng.choice([1, 2, 3])
            assert waited(ours, n) == waited(model, n)
        elif op < 0.75:
            ours.feedback({}, status=429)
            model.feedback({}, status=429)
        elif op < 0.8:
            ours.refund(1)
            model.refund(1)
        elif op < 0.83:
            cost = rng.choice([1, 4, 9])
            ours.charge(cost)
            model.charge(cost)
        else:
            step = rng.choice([0.001, 0.01, 0.1, 0.7, 3.0, 7.0])
            clock.advance(step)
            twin_clock.advance(step)
        assert ours.adaptive_rate() == model.adaptive_rate()


def test_a_refusal_fed_back_by_any_worker_cuts_everyones_rate(make: Callable[..., Any]) -> None:
    name = unique_name("fleet")
    workers = [make(TokenBucket, 1, CEILING, adaptive=Adaptive(), name=name) for _ in range(3)]
    for worker in workers:
        worker.acquire()
    # All three went at the old rate: three refusals, one congestion event.
    for worker in workers:
        worker.feedback({}, status=429)
    assert [w.adaptive_rate() for w in workers] == pytest.approx([70.0] * 3)
    assert sum(w.stats().throttled for w in workers) == 3


def test_the_learned_pace_spaces_every_workers_grants(make: Callable[..., Any], clock: ManualClock) -> None:
    name = unique_name("paced")
    a, b = (make(TokenBucket, 1, CEILING, adaptive=Adaptive(floor=1), name=name) for _ in range(2))
    a.acquire()
    a.feedback({}, status=429)
    clock.advance(1.0)
    rate = a.adaptive_rate()
    assert rate is not None
    assert 70.0 < rate < 100.0
    # The test clock moves on by each wait: one pace for both, each grant one interval
    # of the learned rate after the last (which grows a little as time passes).
    waits = [w.acquire() for w in (a, b, a, b)]
    assert waits[0] == 0.0
    assert all(0.95 / rate < w < 1.000001 / rate for w in waits[1:]), (waits, rate)


@pytest.mark.parametrize(
    ("headers", "status", "cut"),
    [
        ({}, 429, True),
        ({"Retry-After": "2"}, 429, True),
        ({"Retry-After": "2"}, 503, True),
        ({}, 503, False),  # an outage, not a throttle
        ({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1000000005"}, 200, False),
        ({}, 500, False),
        ({}, None, False),
    ],
)
def test_what_counts_as_a_throttle(
    make: Callable[..., Any], headers: dict[str, str], status: int | None, cut: bool
) -> None:
    limiter = make(TokenBucket, 1, CEILING, adaptive=Adaptive())
    limiter.acquire()
    limiter.feedback(headers, status=status, now=1_000_000_000.0)
    assert limiter.adaptive_rate() == pytest.approx(70.0 if cut else CEILING)


def test_headers_keep_precedence_a_retry_after_pause_is_kept_in_full(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    limiter = make(TokenBucket, 1, CEILING, adaptive=Adaptive())
    limiter.acquire()
    limiter.feedback({"Retry-After": "5"}, status=429)
    # The learned rate would grant in 1/70 s; the provider said 5 s, and 5 s it is.
    assert limiter.acquire() == pytest.approx(5.0, abs=0.02)


def test_headers_keep_precedence_a_stated_remaining_holds_whatever_was_learned(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    limiter = make(TokenBucket, 10, CEILING, adaptive=Adaptive())
    limiter.feedback({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1000000003"}, status=200, now=1e9)
    assert limiter.adaptive_rate() == CEILING  # nothing refused: nothing learned
    assert limiter.acquire() == pytest.approx(3.0, abs=0.02)


@pytest.mark.parametrize("cls", [TokenBucket, LeakyBucket, SlidingWindow])
def test_every_limiter_learns(make: Callable[..., Any], cls: Callable[..., Any]) -> None:
    limiter = make(cls, 10, 10, adaptive=Adaptive(floor=0.5))
    assert limiter.acquire() == 0.0
    limiter.feedback({}, status=429)
    ceiling = limiter.sustained_rate
    assert limiter.adaptive_rate() == pytest.approx(0.7 * ceiling)


def test_async_paths_learn_too(make: Callable[..., Any]) -> None:
    limiter = make(TokenBucket, 1, CEILING, adaptive=Adaptive())

    async def main() -> None:
        await limiter.acquire_async()
        await limiter.feedback_async({}, status=429)
        # The task's own grant went before the cut: its second refusal is the same event.
        await limiter.feedback_async({}, status=429)

    asyncio.run(main())
    assert limiter.adaptive_rate() == pytest.approx(70.0)


def test_the_httpx_transport_drives_it_with_no_code_from_the_user() -> None:
    limiter = TokenBucket(1, CEILING, adaptive=Adaptive())
    answers = iter([429, 200])
    mock = httpx.MockTransport(lambda request: httpx.Response(next(answers)))
    retry = Retry(max_attempts=2, backoff=Backoff(base=0.001, max_delay=0.001), limiter=limiter)
    with httpx.Client(transport=RateLimitTransport(retry=retry, transport=mock)) as client:
        assert client.get("http://provider.test/").status_code == 200
    # The bare 429 (its request granted at once, at the ceiling) was fed back by the
    # retry runner in the caller's own thread: one cut.
    assert limiter.stats().throttled == 1
    assert limiter.adaptive_rate() == pytest.approx(70.0, rel=0.02)


def test_each_refusal_fed_back_is_an_event_and_a_metric() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = TokenBucket(1, CEILING, adaptive=Adaptive(), name="learner")
    seen: list[object] = []
    limiter.subscribe(seen.append)
    limiter.subscribe(metrics)
    limiter.acquire()
    limiter.feedback({}, status=429)
    limiter.feedback({}, status=200)
    assert [e for e in seen if isinstance(e, Throttled)] == [Throttled("learner", 429)]
    assert registry.get_sample_value("ratelimit_feedback_throttles_total", {"name": "learner"}) == 1.0


# -- what it refuses ------------------------------------------------------------------


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"floor must be > 0"):
        Adaptive(floor=0)
    with pytest.raises(ValueError, match=r"floor=5 is above ceiling=2"):
        Adaptive(floor=5, ceiling=2)
    with pytest.raises(ValueError, match=r"decrease must be > 0 and < 1.*got 1"):
        Adaptive(decrease=1)
    with pytest.raises(ValueError, match=r"recover must be > 0"):
        Adaptive(recover=-1)
    with pytest.raises(TypeError, match=r"adaptive must be an Adaptive\(...\) or None, got float 0.5"):
        TokenBucket(1, 10, adaptive=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ceiling=20/s is above the limiter's own rate \(10/s\)"):
        TokenBucket(1, 10, adaptive=Adaptive(ceiling=20))
    with pytest.raises(ValueError, match=r"floor=20/s is above the ceiling \(10/s\)"):
        TokenBucket(1, 10, adaptive=Adaptive(floor=20))
    with pytest.raises(ValueError, match=r"two priorities"):
        TokenBucket(10, 10, adaptive=Adaptive(), low_share=0.5)
    with pytest.raises(ValueError, match=r"limits\[1\] has adaptive=Adaptive\(floor=1\)"):
        Composite([TokenBucket(1, 10), TokenBucket(1, 5, adaptive=Adaptive())])


def test_the_repr_says_it_learns() -> None:
    assert repr(TokenBucket(1, 10, adaptive=Adaptive(floor=2, ceiling=8))) == (
        "TokenBucket(capacity=1, refill_per_sec=10, adaptive=Adaptive(floor=2, ceiling=8))"
    )
    assert TokenBucket(1, 10).adaptive_rate() is None


def test_fakeredis_keeps_the_pace_beside_the_limiters_state() -> None:
    server = fakeredis.FakeRedis()
    name = unique_name("keys")
    limiter = TokenBucket(1, 10, adaptive=Adaptive(), backend=RedisBackend(server), name=name)
    limiter.acquire()
    keys = state_keys(server, name)
    assert keys == [f"ratelimit:{{{name}}}:0:token_bucket", f"ratelimit:{{{name}}}:1:adaptive"]
    assert 0 < server.pttl(keys[1]) <= 601_000  # remembered ten minutes once idle


@pytest.mark.stress
def test_ten_thousand_tasks_with_cancellations_and_refusals_stay_within_the_limit(clock: ManualClock) -> None:
    limiter = TokenBucket(5, CEILING, adaptive=Adaptive(floor=5), clock=clock)
    granted: list[float] = []

    async def worker(i: int) -> None:
        # The test clock moves by every task's sleep: a grant's time is the decision's
        # (made before the first await, in process) plus the wait it was given.
        decided = clock.now()
        granted.append(decided + await limiter.acquire_async())
        if i % 7 == 0:
            await limiter.feedback_async({}, status=429)

    async def main() -> None:
        tasks = [asyncio.ensure_future(worker(i)) for i in range(10_000)]
        await asyncio.sleep(0)
        for task in tasks[::3]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert 0 < len(granted) < 10_000
    rate = limiter.adaptive_rate()
    assert rate is not None
    assert 5.0 <= rate <= CEILING
    granted.sort()
    # Never past the bucket: at most capacity + ceiling * t in any stretch.
    for i in range(0, len(granted), 97):
        j = min(len(granted) - 1, i + 500)
        assert j - i + 1 <= 5 + CEILING * (granted[j] - granted[i]) + 1e-6


# -- what an adversary found ----------------------------------------------------------


def test_a_grant_is_read_once_so_a_stale_one_never_hides_later_refusals(clock: ManualClock) -> None:
    """On Python 3.11 ``asyncio.wait_for`` acquires in a task of its own: the caller's
    context never sees those grants. Its one old grant must not make every later
    refusal look like the first congestion event's."""
    limiter = TokenBucket(1, CEILING, adaptive=Adaptive(), clock=clock)

    async def main() -> None:
        await limiter.acquire_async()
        await limiter.feedback_async({}, status=429)  # 100 -> 70
        for _ in range(200):
            await asyncio.ensure_future(limiter.acquire_async())  # its grant stays in that task
            await limiter.feedback_async({}, status=429)
            clock.advance(0.05)

    asyncio.run(main())
    rate = limiter.adaptive_rate()
    assert rate is not None
    # Unknown grants: one cut per quiet second once the old reservations have gone.
    assert 1.0 <= rate < 40.0  # before: back at the ceiling, 100


def test_a_pace_never_used_gives_nothing_back() -> None:
    alg = cubic()
    assert alg.cancel(alg.new_state(), 1_000.0, 1.0, 1_000.0) == alg.new_state()
    assert alg.refund(alg.new_state(), 1_000.0, 1.0, 1_000.0) == alg.new_state()


def test_the_curve_grows_while_reservations_drain_though_nobody_decides() -> None:
    alg, now = cubic(), 1_000.0
    state = cut_at(alg, now, 100.0)
    for _ in range(210):  # three seconds of reservations at 70/s and more
        state, _ = alg.step(state, now, 1.0, math.inf)
    assert state.last > now + 2.9
    # Three seconds on, no decision since: still in use (grants going), so growing.
    assert alg.rate(state, now + 3.0) == pytest.approx(96.25)


def test_a_slow_floor_counts_its_own_gaps_as_use() -> None:
    alg = cubic(floor=0.2)
    assert alg.idle == 10.0  # two intervals at the floor


def test_the_learned_rate_falls_back_on_the_local_share_while_redis_is_down() -> None:
    from servers import free_port

    down = RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", on_unavailable="local", local_share=0.5)
    limiter = TokenBucket(1, CEILING, adaptive=Adaptive(), backend=down, name=unique_name("down"))
    assert limiter.adaptive_rate() == pytest.approx(CEILING * 0.5)


def test_a_floor_whose_interval_no_store_could_keep_is_refused() -> None:
    with pytest.raises(ValueError, match=r"floor=1e-300 makes one token's interval at the floor"):
        Adaptive(floor=1e-300)
    assert "decrease=0.9999999999999999" in repr(Adaptive(decrease=0.9999999999999999))
