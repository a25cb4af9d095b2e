"""The exact window's log: running sums, caps, and what a decision costs in Redis.

The log keeps, per grant time, the running sum of the weights up to it; the count is
the newest sum less the base, and the moment a request fits is found by a search on
the sums (see ``ratelimit/_sliding_window.py``). These tests pin what that design
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
from ratelimit._algorithm import step
from ratelimit._redis import RedisHandle, key_for
from ratelimit._sliding_window import MAX_CAPS, REBASE, WindowLog

from conftest import unique_name


class FixedTime:
    """The ``now`` sent to the script."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> str:
        return repr(self.value)


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Any:
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("redis_client")


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
    redis_client: redis.Redis, limit: int
) -> None:
    # Equal weights: the interpolation lands on the entry at once. Before, a full
    # window read every member it needed to sum: `limit` of them for a whole-limit
    # request, and the whole set's worth of Lua work.
    limiter, _ = fill(redis_client, limit, [1] * limit)
    before = zrange_calls(redis_client)
    for tokens in (1, limit // 2, limit):
        assert not limiter.try_acquire(tokens)
    per_call = (zrange_calls(redis_client) - before) / 3
    assert per_call <= 12, per_call


def test_uneven_weights_need_at_most_twice_log2_probes(redis_client: redis.Redis) -> None:
    shuffle = random.Random(7)
    weights = [shuffle.choice([1, 1, 1, 2, 50, 300]) for _ in range(2_000)]
    limiter, _ = fill(redis_client, sum(weights), weights)
    fixed = 10  # reading the ends, pruning, saving: the same for every call
    bound = fixed + 2 * math.ceil(math.log2(len(weights)))
    for tokens in (1, 7, 333, sum(weights) // 3, sum(weights)):
        before = zrange_calls(redis_client)
        assert not limiter.try_acquire(tokens)
        assert zrange_calls(redis_client) - before <= bound


def test_sums_are_rebased_and_decide_as_the_pure_log(client: redis.Redis) -> None:
    # Weights of a billion, a window of 10 s, a grant a second: the base passes 2**32
    # after a few windows, and both twins start their sums again from zero at the
    # same moment, so their floats stay equal and small.
    alg = WindowLog(1e10, 10.0)
    now = FixedTime(1_000.0)
    key = key_for(unique_name("rebase"), alg.kind)
    handle = RedisHandle(RedisBackend(client), alg, key, now, None)
    state = alg.new_state()
    shuffle = random.Random(3)
    for _ in range(200):
        now.value += 1.0
        tokens = shuffle.choice([1e9, 1.5e9, 3e9, 0.25])
        state, wait = step(alg, state, now.value, tokens, 5.0)
        assert handle.reserve(tokens, 5.0) == (wait, now.value + wait)
    # About 3e11 tokens went through: without rebasing the sums would be that large.
    assert state.base() < REBASE
    assert state.sums[-1] < REBASE + 3 * alg.limit
    newest = cast("list[tuple[bytes, float]]", client.zrange(key, -1, -1, withscores=True))
    assert float(newest[0][0].split(b"|")[0]) == state.sums[-1]


def test_a_cap_restricts_without_entering_the_log() -> None:
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(100, 10, clock=clock)
    # The provider says 2 left for the next 5 s: two go, the third waits for the end
    # of the restriction, not for the window.
    limiter.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset-After": "5"})
    waits = [limiter.acquire() for _ in range(3)]
    assert waits[:2] == [0.0, 0.0]
    assert 0 < waits[2] <= 5.0


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
