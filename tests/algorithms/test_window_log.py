"""The exact window's log: running sums, caps, and what a decision costs in Redis.

The log keeps, per grant time, the running sum of the weights up to it; the count is
the newest sum less the base, and the moment a request fits is found by a search on
the sums (see ``ratelimit/_algorithms/sliding_window.py``). These tests pin what that design
promises beyond the conformance suite: the Redis calls a decision makes do not grow
with the limit, the sums are rebased long before they lose precision, and feedback's
caps restrict without entering the log.
"""

from __future__ import annotations

import math
import random
from typing import Any, cast

import fakeredis
import pytest
import redis

from ratelimit import ManualClock, RedisBackend, SlidingWindow
from ratelimit._algorithms.algorithm import step
from ratelimit._algorithms.sliding_window import MAX_CAPS, REBASE, REBASE_SPAN, WindowLog
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisHandle

from conftest import command_calls, unique_name


class FixedTime:
    """The ``now`` sent to the script."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> str:
        return repr(self.value)


def zrange_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_zrange", {}).get("calls", 0))


def fill(client: redis.Redis, limit: int, weights: list[int]) -> tuple[SlidingWindow, ManualClock]:
    """A window of ``limit`` per hour on a held clock, filled with ``weights`` grants."""
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(limit, 3_600, backend=RedisBackend(client), name=unique_name("log"), clock=clock)
    for weight in weights:
        assert limiter.try_acquire(weight)
        clock.advance(0.001)
    return limiter, clock


@pytest.mark.parametrize("limit", [100, 3_000])
def test_a_decision_on_a_full_window_reads_a_few_entries_whatever_the_limit(
    quiet_client: redis.Redis, limit: int
) -> None:
    # Equal weights: the interpolation lands on the entry at once. Before, a full
    # window read every member it needed to sum: `limit` of them for a whole-limit
    # request, and the whole set's worth of Lua work.
    limiter, _ = fill(quiet_client, limit, [1] * limit)
    before = zrange_calls(quiet_client)
    for tokens in (1, limit // 2, limit):
        assert not limiter.try_acquire(tokens)
    per_call = (zrange_calls(quiet_client) - before) / 3
    assert per_call <= 12, per_call


def test_uneven_weights_need_at_most_twice_log2_probes(quiet_client: redis.Redis) -> None:
    shuffle = random.Random(7)
    weights = [shuffle.choice([1, 1, 1, 2, 50, 300]) for _ in range(2_000)]
    limiter, _ = fill(quiet_client, sum(weights), weights)
    fixed = 10  # reading the ends, pruning, saving: the same for every call
    bound = fixed + 2 * math.ceil(math.log2(len(weights)))
    for tokens in (1, 7, 333, sum(weights) // 3, sum(weights)):
        before = zrange_calls(quiet_client)
        assert not limiter.try_acquire(tokens)
        assert zrange_calls(quiet_client) - before <= bound


@pytest.mark.stress
@pytest.mark.parametrize("with_name", [False, True], ids=["bare", "named"])
def test_sums_are_rebased_and_decide_as_the_pure_log(client: redis.Redis, with_name: bool) -> None:
    # Weights of about 2e11, two grants a window that never empties: the base passes
    # REBASE_SPAN times the log's content after a few thousand grants, and both twins
    # start their sums again from zero at the same moment, so their floats stay equal.
    # Named, the reserves take the checked fast path of lua/_single.lua (nothing beside the log).
    alg = WindowLog(1e12, 1.0)
    now = FixedTime(1_000.0)
    name = unique_name("rebase")
    key = key_for(name, alg.kind)
    handle = RedisHandle(RedisBackend(client), alg, key, now, None, name if with_name else None)
    state = alg.new_state()
    shuffle = random.Random(3)
    rebased, newest = 0, 0.0
    for _ in range(3_000):
        now.value += 0.5
        tokens = shuffle.choice([1e11, 1.5e11, 3e11, 0.25])
        state, wait = step(alg, state, now.value, tokens, 5.0)
        assert handle.reserve(tokens, 5.0) == (wait, now.value + wait)
        rebased += state.sums[-1] < newest
        newest = state.sums[-1]
    assert rebased >= 1
    assert state.base() < REBASE_SPAN * 4 * alg.limit
    stored = cast("list[tuple[bytes, float]]", client.zrange(key, -1, -1, withscores=True))
    assert float(stored[0][0].split(b"|")[0]) == state.sums[-1]


def test_a_rebase_comes_once_in_many_windows_not_at_every_grant() -> None:
    # Heavy weights (each past 2**32) used to rewrite the whole log at every grant
    # once one had aged out: the base alone passed REBASE.
    alg = WindowLog(1e15, 10.0)
    state = alg.new_state()
    now = 1_000.0
    rebased, newest = 0, 0.0
    for _ in range(5_000):
        now += 0.01
        state, wait = step(alg, state, now, 1e10, 0.0)
        assert wait == 0.0
        rebased += state.sums[-1] < newest
        newest = state.sums[-1]
    assert rebased <= 1


def test_a_restriction_holds_without_entering_the_log() -> None:
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(100, 10, clock=clock)
    # The provider says 2 left for the next 5 s: spread over them, and from the end of
    # the restriction on, the window's own budget, not a wait for the window.
    limiter.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset-After": "5"})
    assert [limiter.acquire() for _ in range(3)] == [2.5, 2.5, 0.0]


def test_caps_only_ever_restrict_and_stay_few() -> None:
    alg = WindowLog(100.0, 10.0)
    state = alg.new_state()
    now = 1_000.0
    # A looser report changes nothing; a stricter one wins; many crossing ones merge
    # into fewer, each merge keeping the later end and the lesser allowance.
    state = alg.restrict(state, now, 5.0, now + 4.0)
    state = alg.restrict(state, now, 9.0, now + 3.0)
    assert state.caps == [[now + 4.0, 5.0]]
    reports = [(5.0, now + 4.0)] + [(6.0 + i, now + 5.0 + i) for i in range(3 * MAX_CAPS)]
    for remaining, until in reports[1:]:
        state = alg.restrict(state, now, remaining, until)
    assert len(state.caps) <= MAX_CAPS
    # Every report is still kept by a cap that ends no earlier and allows no more.
    for remaining, until in reports:
        assert any(u >= until and left <= remaining for u, left in state.caps), (remaining, until)
    # Before the earliest end, at most its allowance goes at once.
    _, first_left = state.caps[0]
    granted = 0.0
    while True:
        state, wait = step(alg, state, now, 1.0, 0.0)
        if wait < 0:
            break
        granted += 1
    assert granted <= first_left
    assert alg.idle_until(state) >= state.caps[-1][0]


def test_a_refund_frees_the_oldest_grants_first() -> None:
    # A refund names no grant; taking it from the oldest frees capacity no earlier
    # than the caller's own entry would, so the bound holds whoever's grant it was.
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(3, 10, clock=clock)
    assert limiter.acquire() == 0.0
    clock.advance(4)
    assert [limiter.acquire(), limiter.acquire()] == [0.0, 0.0]
    limiter.refund(1)  # from the grant of t=1000
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    # The t=1004 grants count until 1014; the refunded one had until 1010.
    clock.advance(6)
    assert not limiter.try_acquire()
    clock.advance(4)  # t=1014: all of them
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]


@pytest.fixture(params=["memory", "fakeredis"])
def backend(request: pytest.FixtureRequest) -> Any:
    return None if request.param == "memory" else RedisBackend(fakeredis.FakeRedis())


@pytest.mark.xfail(
    strict=True,
    reason="this refund is not its caller's only grant since it last gave back (A, B and C in one context), so "
    "it names none; unnamed, it takes from the oldest entries, other callers' grants, once its own aged out "
    "(documented: refund within the window).",
)
def test_a_refund_after_the_grant_aged_out_never_overfills_a_window(backend: Any) -> None:
    """A refund names no entry and takes from the OLDEST entries still in the log. When
    the caller's own grant has already aged out (a request that ran longer than the
    window: an LLM call refunding its unused estimate), the oldest entries are other
    callers' live grants: removing them admits one more than `limit` in a window."""
    clock = ManualClock(1_000.0)
    name = None if backend is None else unique_name("late-refund")
    limiter = SlidingWindow(2, 10, backend=backend, name=name, clock=clock)
    sent = []
    assert limiter.try_acquire()  # A: its request runs for 12 s
    sent.append(clock.now())
    clock.advance(12)
    assert limiter.try_acquire()  # B
    sent.append(clock.now())
    clock.advance(1)
    assert limiter.try_acquire()  # C
    sent.append(clock.now())
    limiter.refund(1)  # A turned out unused; its grant left the window 2 s ago
    if limiter.try_acquire():
        sent.append(clock.now())
    most = max(sum(1 for t in sent if a <= t < a + 10) for a in sent)
    assert most <= 2, f"{most} grants in one 10 s window of a limit of 2: {sent}"


def test_members_with_equal_sums_never_part_the_script_from_the_log() -> None:
    """Weights lost to rounding used to give entries equal sums, and "<s>|<w>" could
    then name an OLDER member of the sorted set: ZADD moved it instead of adding one,
    and the twins answered 1102 and 1103. A weight that does not move the sum now
    joins the newest entry, in both."""
    limit = 2.0**50
    alg = WindowLog(limit, 100.0)
    client = fakeredis.FakeRedis()
    now = FixedTime(1_000.0)
    handle = RedisHandle(RedisBackend(client), alg, key_for(unique_name("equal-sums"), alg.kind), now, None)
    state = alg.new_state()
    odd = 2.0**49 + 0.125  # an odd multiple of its ulp (0.125)
    # 0.0625 is half an ulp: added to `odd` it rounds up (ties to even), added to the
    # result it rounds away; 0.01 is always absorbed.
    for t, tokens in [(1, odd), (2, 0.0625), (3, 0.01), (4, 0.0625), (5, limit)]:
        now.value = 1_000.0 + t
        state, wait = step(alg, state, now.value, tokens, math.inf)
        assert handle.reserve(tokens, math.inf) == (wait, now.value + wait), f"request {t}"


def test_a_refund_searches_the_entries_it_consumes(quiet_client: redis.Redis) -> None:
    """A refund used to take from the oldest entries one at a time: a 5,000-token
    refund on 5,000 one-token entries made 5,004 ZRANGE calls, and at 100,000 entries
    blocked Redis for about a second. It is now a search on the sums and one
    ZREMRANGEBYRANK."""
    n = 5_000
    clock = ManualClock(1_000.0)
    name = unique_name("refund-cost")
    limiter = SlidingWindow(2 * n, 3_600, backend=RedisBackend(quiet_client), name=name, clock=clock)
    key = cast("RedisBackend", limiter.backend).key(name, "sliding_window", clock=clock)
    pipe = quiet_client.pipeline(transaction=False)
    for i in range(n):
        pipe.zadd(key, {f"{i + 1}|1": 1_000.0 + i * 0.001})
    pipe.execute()
    clock.advance(n * 0.001)
    assert limiter.try_acquire(n)
    before = command_calls(quiet_client, "zrange")
    limiter.refund(n)
    reads = command_calls(quiet_client, "zrange") - before
    assert reads <= 12 + 2 * math.ceil(math.log2(n)), f"{reads} ZRANGE calls for one refund"


def test_heavy_weights_do_not_rewrite_the_set_at_every_grant(quiet_client: redis.Redis) -> None:
    """Sums used to be rebased whenever the base passed 2**32: with weights of 2**32
    or more every grant after one had aged out rewrote the set (20,000 entries of 1e10:
    20,001 ZADDs, about 140 ms of Redis time a call). The base must now also pass
    REBASE_SPAN times the log's content."""
    n = 2_000
    alg = WindowLog(1e15, float(n))
    key = key_for(unique_name("rebase-cost"), alg.kind)
    now = FixedTime(1_000.0)
    handle = RedisHandle(RedisBackend(quiet_client), alg, key, now, None)
    pipe = quiet_client.pipeline(transaction=False)
    for i in range(n):
        pipe.zadd(key, {f"{(i + 1) * 1e10:.17g}|1e+10": 1_000.0 + i})
    pipe.execute()
    assert REBASE < 1e10
    worst = 0
    for k in range(3):
        now.value = 1_000.0 + n + k  # the oldest entry ages out
        before = command_calls(quiet_client, "zadd")
        assert handle.reserve(1e10, 0.0)[0] == 0.0
        worst = max(worst, command_calls(quiet_client, "zadd") - before)
    assert worst <= 4, f"{worst} ZADDs for one grant on a window of {n} entries"
