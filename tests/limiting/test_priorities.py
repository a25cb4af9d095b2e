"""Priorities on one budget: people before batch jobs.

A limiter built with ``low_share`` acquires at high priority; ``limiter.low`` at low
priority (see ``ratelimit._algorithms.lanes``). What must hold:

- a high request waits behind at most the high grants already reserved, never
  behind queued low ones;
- low requests use idle high capacity (unless ``borrow=False``) but leave
  ``high_reserve`` tokens of it; high requests use idle low capacity;
- for any sequence of acquires at either priority, refunds, withdrawals and pauses,
  the two priorities together never grant more than the configured limit.

The behaviour tests run on every store (``make``); the property tests drive the pure
lanes, which the conformance suite holds the scripts to.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    Acquirer,
    AcquireTimeout,
    Composite,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._algorithms import holes as holes_module
from ratelimit._algorithms.algorithm import EPSILON, Algorithm, step
from ratelimit._algorithms.lanes import HIGH, LOW, Lanes, LaneTime, give_back, reserve, restrict
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Gcra

from conftest import unique_name
from held import held, held_clock

Make = Callable[..., Any]


# -- the promise, on every store -----------------------------------------------


def test_a_high_request_goes_ahead_of_queued_low_ones(make: Make, clock: ManualClock) -> None:
    # Each lane of TokenBucket(10, 10) at low_share=0.8: low 8 tokens, 8/s; high 2, 2/s.
    limiter = make(held(TokenBucket), 10, 10, low_share=0.8, borrow=False)
    low_waits = [limiter.low.acquire() for _ in range(30)]
    assert low_waits[-1] == pytest.approx(22 / 8)  # the low queue reaches 2.75 s ahead
    # A person arrives: the high lane's burst, then its own slots, 0.5 s apart.
    assert [limiter.acquire() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.5, 1.0])
    # The lows queue on where they were.
    assert limiter.low.acquire() == pytest.approx(23 / 8)


def test_the_readmes_timeline(make: Make, clock: ManualClock) -> None:
    lanes = make(held(TokenBucket), 4, 4, low_share=0.5, borrow=False)
    one = make(held(TokenBucket), 4, 4)
    start = clock.now()
    low = [lanes.low.acquire() for _ in range(6)]
    alone = [one.acquire() for _ in range(6)]
    clock.advance(0.1)
    high = [0.1 + lanes.acquire() for _ in range(3)]
    behind = [0.1 + one.acquire() for _ in range(3)]
    assert clock.now() == start + 0.1
    assert low == pytest.approx([0, 0, 0.5, 1.0, 1.5, 2.0])
    assert high == pytest.approx([0.1, 0.1, 0.6])
    assert alone == pytest.approx([0, 0, 0, 0, 0.25, 0.5])
    assert behind == pytest.approx([0.75, 1.0, 1.25])


def test_in_one_queue_the_same_person_waits_behind_the_batch(make: Make, clock: ManualClock) -> None:
    # The same traffic without priorities: what the lanes are for.
    limiter = make(held(TokenBucket), 10, 10)
    for _ in range(30):
        limiter.acquire()
    assert limiter.acquire() == pytest.approx(2.1)


def test_lows_borrow_idle_high_capacity_but_leave_the_reserve(make: Make, clock: ManualClock) -> None:
    limiter = make(held(TokenBucket), 10, 10, low_share=0.8, high_reserve=1)
    # 8 from the low lane, 1 borrowed from the high lane (2 - 1 reserved), then queued.
    waits = [limiter.low.acquire() for _ in range(10)]
    assert waits == pytest.approx([0.0] * 9 + [1 / 8])
    assert limiter.try_acquire()  # the reserved token: a person goes at once
    assert not limiter.try_acquire()


def test_without_borrowing_the_low_share_is_a_hard_cap(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 10, low_share=0.8, borrow=False)
    granted = 0
    for _ in range(400):  # 4 s of lows trying every 10 ms, highs idle
        granted += limiter.low.try_acquire()
        clock.advance(0.01)
    assert 8 + 8 * 3.99 - 1 <= granted <= 8 + 8 * 4.0  # the low lane's burst and rate, no more
    assert limiter.try_acquire(2)  # the high lane is whole


def test_highs_use_idle_low_capacity(make: Make, clock: ManualClock) -> None:
    limiter = make(held(TokenBucket), 4, 4, low_share=0.5, borrow=False)
    # High lane 2 + idle low lane 2 at once; then each next one in whichever lane
    # grants it earlier (a tie goes to the high lane).
    assert [limiter.acquire() for _ in range(6)] == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.5, 0.5])
    # The sixth went in the low lane: a low request now queues behind it.
    assert limiter.low.acquire() == pytest.approx(1.0)


def test_a_withdrawn_reservation_goes_back_to_its_own_lane(make: Make, clock: ManualClock) -> None:
    limiter = make(held(TokenBucket), 4, 4, low_share=0.5, borrow=False)
    held_time = held_clock(limiter)

    async def scenario() -> list[float]:
        # 2 in the high lane and 2 in the low lane at once, one in the high lane at 0.5.
        first = [await held_time.start(limiter.acquire_async()) for _ in range(5)]
        sixth = await held_time.start(limiter.acquire_async())  # the low lane's slot at 0.5
        sixth.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sixth
        low = await held_time.start(limiter.low.acquire_async())  # that slot, given back
        high = await held_time.start(limiter.acquire_async())  # the high lane's next: 1.0
        held_time.release()
        return [await task for task in [*first, low, high]]

    assert asyncio.run(scenario()) == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0])


def test_a_pause_pauses_both_priorities(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 10, low_share=0.8)
    limiter.low.feedback({"Retry-After": "5"}, status=429)
    assert not limiter.try_acquire()
    assert not limiter.low.try_acquire()
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=1)
    assert info.value.retry_after == pytest.approx(5.0, abs=0.5)
    clock.advance(5.0)
    assert limiter.try_acquire()
    assert limiter.low.try_acquire()


def test_remaining_is_split_and_people_get_the_last_token(make: Make, clock: ManualClock) -> None:
    limiter = make(held(TokenBucket), 100, 10, low_share=0.8, borrow=False)
    limiter.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "10"}, status=200)
    # 3 until the reset, floor(3 * 0.8) = 2 of them for low priority, each lane's spread
    # over the 10 s (the last at the reset): the high lane's one at 10, the low lane's at
    # 5 (which a person takes, being sooner) and 10; the rest at the reset, where the
    # budget is whole again.
    waits = [limiter.acquire() for _ in range(3)] + [limiter.low.acquire() for _ in range(3)]
    assert waits == pytest.approx([5, 10, 10, 10, 10, 10])
    # One left: it is a person's (by the reset); low priority waits for the reset.
    limiter = make(held(TokenBucket), 100, 10, low_share=0.8)
    limiter.low.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "10"}, status=200)
    assert limiter.low.acquire() >= 10
    assert limiter.acquire() <= 10


def test_a_sliding_window_with_priorities(make: Make, clock: ManualClock) -> None:
    # limit 10 at low_share=0.75: 7 for low priority (rounded down), 3 for high.
    limiter = make(held(SlidingWindow), 10, 1.0, low_share=0.75, borrow=False)
    waits = [limiter.low.acquire() for _ in range(15)]
    assert waits == pytest.approx([0.0] * 7 + [1.0] * 7 + [2.0])
    assert [limiter.acquire() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 1.0])


def test_each_priority_counts_its_own(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 10, low_share=0.5)

    async def scenario() -> None:
        assert await limiter.low.try_acquire_async(3)
        assert await limiter.low.acquire_async(2) == 0.0
        assert await limiter.try_acquire_async()

    asyncio.run(scenario())
    assert (limiter.low.stats().granted, limiter.low.stats().tokens) == (2, 5.0)
    assert (limiter.stats().granted, limiter.stats().tokens) == (1, 1.0)
    assert isinstance(limiter.low, Acquirer)


def test_a_plain_refund_goes_to_the_callers_lane(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 10, low_share=0.8, borrow=False)
    assert all(limiter.low.try_acquire() for _ in range(8))
    assert not limiter.low.try_acquire()
    limiter.low.refund(2)
    assert limiter.low.try_acquire(2)
    assert not limiter.low.try_acquire()


# -- Redis: one hash tag, the lanes beside each other ---------------------------------


@pytest.mark.parametrize("store", ["redis", "cluster"])
def test_the_lanes_keys_share_the_limiters_hash_tag(store: str, make: Make, request: pytest.FixtureRequest) -> None:
    client = request.getfixturevalue("redis_client" if store == "redis" else "cluster_client")
    name = unique_name("lanes")
    limiter = make(TokenBucket, 10, 10, low_share=0.8, name=name)
    limiter.try_acquire()
    limiter.low.try_acquire()
    keys = {f"ratelimit:{{{name}}}:injected:{lane}:token_bucket" for lane in ("hi", "lo")}
    assert all(client.exists(key) for key in keys)
    assert not client.exists(f"ratelimit:{{{name}}}:injected:token_bucket")


def test_one_script_call_per_acquire_at_either_priority(quiet_client: redis.Redis) -> None:
    backend = RedisBackend(quiet_client)
    limiter = TokenBucket(10, 10, low_share=0.5, backend=backend, name=unique_name("lanes"), clock=ManualClock(1.0))
    limiter.try_acquire()  # loads the script
    before = _script_calls(quiet_client)
    for _ in range(5):
        limiter.try_acquire()
        limiter.low.try_acquire()
    assert _script_calls(quiet_client) - before == 10


def _script_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha", "eval"))


# -- the API: small, and clear when misused ----------------------------------------------


def test_without_low_share_there_is_no_low_priority() -> None:
    with pytest.raises(AttributeError, match="low_share"):
        _ = TokenBucket(10, 10).low
    with pytest.raises(AttributeError, match="low_share"):
        _ = LeakyBucket(10, 10).low
    assert TokenBucket(10, 10).low_share is None


@pytest.mark.parametrize("share", [0, 1, -0.5, 1.5, math.inf])
def test_low_share_must_be_a_share(share: float) -> None:
    with pytest.raises(ValueError, match="low_share"):
        TokenBucket(10, 10, low_share=share)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"low_share": "0.5"}, TypeError, "low_share"),
        ({"borrow": False}, ValueError, "borrow=False needs low_share"),
        ({"high_reserve": 2}, ValueError, "high_reserve=2 needs low_share"),
        ({"low_share": 0.5, "borrow": "no"}, TypeError, "borrow"),
        ({"low_share": 0.5, "high_reserve": -1}, ValueError, "high_reserve"),
        ({"low_share": 0.5, "borrow": False, "high_reserve": 2}, ValueError, "needs borrow=True"),
    ],
)
def test_priority_arguments_are_checked(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        TokenBucket(10, 10, **kwargs)


def test_each_lane_must_keep_a_whole_token() -> None:
    with pytest.raises(ValueError, match=r"low_share=0.5 splits capacity=1 into 0 for low priority"):
        TokenBucket(1, 10, low_share=0.5)
    # 9.9 rounds down to 9: a whole token is left to high priority.
    assert SlidingWindow(10, 1, low_share=0.99).low.try_acquire(9)
    with pytest.raises(ValueError, match=r"low_share=0.05 splits limit=10 into 0 for low priority"):
        SlidingWindow(10, 1, low_share=0.05)


def test_a_leaky_bucket_takes_no_low_share() -> None:
    with pytest.raises(TypeError, match="low_share"):
        LeakyBucket(10, 10, low_share=0.5)  # type: ignore[call-arg]


def test_a_request_larger_than_its_lane_is_refused_at_once() -> None:
    limiter = TokenBucket(10, 10, low_share=0.8)
    with pytest.raises(ValueError, match=r"high-priority share of capacity \(2\)"):
        limiter.acquire(3)
    with pytest.raises(ValueError, match=r"low-priority share of capacity \(8\)"):
        limiter.low.acquire(9)


def test_a_composite_takes_no_priorities() -> None:
    with pytest.raises(ValueError, match=r"limits\[1\] has low_share=0.5"):
        Composite([TokenBucket(10, 10), TokenBucket(10, 1, low_share=0.5)])


def test_the_repr_says_the_priorities() -> None:
    assert (
        repr(TokenBucket(10, 10, low_share=0.8))
        == "TokenBucket(capacity=10, refill_per_sec=10, low_share=0.8, high_reserve=1)"
    )
    limiter = TokenBucket(10, 10, low_share=0.8, borrow=False)
    assert repr(limiter.low) == "TokenBucket(capacity=10, refill_per_sec=10, low_share=0.8, borrow=False).low"
    assert limiter.low_share == 0.8


# -- the bound, whatever the calls (pure lanes) ------------------------------------------

#: The configured limits; each is split by ``low_share``.
CONFIGURED: dict[str, Callable[[], Algorithm[Any]]] = {
    "token_bucket": lambda: Gcra(5.0, 2.0),
    "token_bucket_fractional": lambda: Gcra(4.5, 3.0),
    "sliding_window": lambda: WindowLog(6.0, 1.5),
    "sliding_window_counter": lambda: WindowCounter(7.0, 2.0),
}

operations = st.lists(
    st.one_of(
        # (op, low priority, weight or step or pick, max_wait)
        st.tuples(
            st.just("reserve"),
            st.booleans(),
            st.sampled_from([1.0, 1.0, 1.0, 2.0, 0.5]),
            st.sampled_from([0.0, 0.5, 2.0, 1e9, 1e9]),
        ),
        st.tuples(st.just("burst"), st.booleans(), st.just(1.0), st.just(1e9)),
        st.tuples(st.just("withdraw"), st.booleans(), st.integers(0, 30), st.just(0.0)),
        st.tuples(st.just("advance"), st.booleans(), st.sampled_from([0.01, 0.1, 0.25, 0.5, 1.0]), st.just(0.0)),
        st.tuples(st.just("refund"), st.booleans(), st.integers(0, 30), st.sampled_from([0.5, 1.0])),
        st.tuples(st.just("restrict"), st.booleans(), st.sampled_from([0.0, 0.0, 1.0, 3.0]), st.just(0.0)),
    ),
    max_size=80,
)


def _replays(alg: Algorithm[Any], grants: list[tuple[float, float]]) -> bool:
    """Whether one fresh, unsplit limit grants every one of ``grants`` at its own time."""
    state = alg.new_state()
    for at, tokens in sorted(grants):
        state, wait = step(alg, state, at, tokens, 0.0)
        if wait < 0:
            return False
    return True


@pytest.mark.parametrize("kind", list(CONFIGURED))
@pytest.mark.parametrize(("low_share", "keep"), [(0.5, None), (0.8, 1.0), (0.6, 0.0)])
@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_both_priorities_together_never_exceed_the_limit(
    kind: str, low_share: float, keep: float | None, ops: list[tuple[str, bool, float, float]]
) -> None:
    configured = CONFIGURED[kind]()
    lanes = Lanes.of(configured, low_share)
    state = lanes.new_state()
    now = 1_000.0
    #: [grant time (a LaneTime), tokens still granted]
    granted: list[list[Any]] = []
    for op, low, a, b in ops:
        if op == "advance":
            now += a
        elif op in ("reserve", "burst"):
            own = lanes.low if low else lanes.high
            n = min(a, own.most)
            for _ in range(1 if op == "reserve" else 6):
                if not low:
                    # Never behind queued lows: no later than the high lane's own plan.
                    high = holes_module.plan((lanes.high,), (state.states[HIGH],), state.holes[HIGH], now, (n,))
                wait, lane = reserve(lanes, state, now, n, b, low, keep)
                if wait < 0:
                    continue
                assert wait <= b + EPSILON
                if not low:
                    assert now + wait <= max(high[0], high[1], now) + EPSILON
                if low and keep is None:
                    assert lane == LOW  # a hard cap
                granted.append([LaneTime(now + wait, lane), n])
        elif op == "withdraw":
            ahead = [i for i, g in enumerate(granted) if g[0] > now]
            if ahead:
                # By place: a LaneTime equals any float of its time, whatever its lane.
                grant = granted.pop(ahead[int(a) % len(ahead)])
                give_back(lanes, state, grant[0].lane, now, grant[1], grant[0])
        elif op == "refund":
            # As in test_cancellation: a refund names no grant, and only a window can
            # take it from where it was counted (its lane's oldest grants, never less
            # than the truth), if it comes within a window of the grant, as refund()
            # documents. It goes to the lane the grant was taken from.
            window = getattr(configured, "window", 0.0)
            made = [g for g in granted if now - window < g[0] <= now and g[1] > 0]
            if made:
                grant = made[int(a) % len(made)]
                back = min(b, grant[1])
                give_back(lanes, state, grant[0].lane, now, back, None)
                grant[1] -= back
        else:
            restrict(lanes, state, now, a, now + 1.0)
        assert _replays(configured, [(float(at), n) for at, n in granted if n > 0])


def test_a_charge_is_split_between_the_lanes_as_their_rates_are(make: Make, clock: ManualClock) -> None:
    budget: TokenBucket = make(TokenBucket, 10, 2, low_share=0.5, borrow=False)  # lanes of 5 at 1/s
    budget.low.acquire()
    budget.low.settle(1, 9)  # the batch call cost 9: 8 more, 4 from each lane
    assert not budget.low.try_acquire()  # 5 - 1 - 4
    assert budget.try_acquire()  # 5 - 4: a person's lane pays its share of the debt
    assert not budget.try_acquire()
    budget.charge(10)  # 5 more from each: both lanes wait it off together, as one limit
    for view in (budget, budget.low):
        with pytest.raises(AcquireTimeout) as caught:
            view.acquire(timeout=0)
        assert caught.value.retry_after == pytest.approx(6.0)


def test_a_settle_gives_back_to_the_lane_the_callers_grant_came_from(make: Make, clock: ManualClock) -> None:
    budget: TokenBucket = make(TokenBucket, 4, 2, low_share=0.5, borrow=False)  # lanes of 2 at 1/s
    assert budget.try_acquire(2)  # the high lane, emptied
    budget.acquire()  # served from the idle low lane
    budget.settle(1, 0)  # not used after all: back to the low lane it came from
    assert budget.low.try_acquire(2)
    # Sent to the high lane, it would have let a fifth token go at this instant.
    assert not budget.try_acquire()
