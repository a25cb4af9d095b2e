"""Refunds that name their grant: what a settle gives back is used again, whatever is
queued behind it, and no interval ever holds more than capacity + rate·t.

Before, a token bucket with grants reserved ahead gave nothing back (it cannot hand
tokens to "now" beside a reserved grant), which is exactly when an LLM budget is
contended: every over-estimate was lost. A grant that waited its own turn ends its
slot at its time + tolerance, so its unused tokens are known to sit there, and the
part still ahead is a hole others may take (``holes.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import Composite, ManualClock, TokenBucket
from ratelimit._algorithms.algorithm import EPSILON, Algorithm, charge_all
from ratelimit._algorithms.holes import GrantTime, Holes, exact, give_back, pause, reserve, restricted, void
from ratelimit._algorithms.token_bucket import Gcra


def _in(context: contextvars.Context, call: Callable[..., Any], *args: Any) -> Any:
    return context.run(call, *args)


# -- the pure core: holes past their time, named refunds, partial cover -------------

# (time step, tokens per limit, what to do after: nothing, settle a due grant (named,
# giving back a fraction), withdraw the earliest reservation ahead, a pause)
Step = tuple[float, tuple[float, float], str, float]
steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.5]),
        st.tuples(st.sampled_from([1.0, 2.0, 3.0]), st.sampled_from([0.0, 1.0, 4.0, 7.0])),
        st.sampled_from(["keep", "settle", "settle", "settle", "withdraw", "pause"]),
        st.sampled_from([0.25, 0.5, 1.0]),
    ),
    min_size=1,
    max_size=60,
)


def _assert_bound(sent: list[tuple[float, float]], capacity: float, rate: float) -> None:
    times = sorted({at for at, used in sent if used > EPSILON})
    for a in times:
        for b in times:
            if b >= a:
                inside = sum(used for at, used in sent if a - 1e-9 <= at <= b + 1e-9)
                assert inside <= capacity + rate * (b - a) + 1e-6, (a, b, inside, sorted(sent))


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=300, deadline=None)
@given(scenario=steps)
def test_named_refunds_never_let_an_interval_exceed_capacity_plus_rate(members: int, scenario: list[Step]) -> None:
    """Many callers, each settling its own grant (named) with grants queued behind it;
    the tokens each call really used never exceed the bucket's promise, per limit."""
    buckets = [Gcra(3.0, 1.0), Gcra(8.0, 2.0)][:members]
    algs: list[Algorithm[Any]] = list(buckets)
    states: list[Any] = [alg.new_state() for alg in algs]
    holes = Holes()
    now = 1_000.0
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now += dt
        want = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        states, wait, name = reserve(algs, states, holes, now, want, math.inf)
        assert wait >= 0
        grants.append({"at": now + wait, "name": name, "used": list(want)})
        if then == "settle":
            due = [g for g in grants if g["at"] <= now and any(u > 0 for u in g["used"])]
            if due:
                g = due[-1]
                back = [u * fraction for u in g["used"]]
                states = give_back(algs, states, holes, now, back, g["name"])
                g["used"] = [u - b for u, b in zip(g["used"], back, strict=True)]
        elif then == "withdraw":
            ahead = [g for g in grants if g["at"] > now + EPSILON and any(u > 0 for u in g["used"])]
            if ahead:
                g = ahead[0]
                states = give_back(algs, states, holes, now, g["used"], g["name"])
                g["used"] = [0.0] * members
        elif then == "pause":
            states = [alg.restrict(s, now, 0.0, now + 1.0) for alg, s in zip(algs, states, strict=True)]
            restricted(holes, now, now + 1.0)
            pause(holes, now + 1.0)
    for i, alg in enumerate(buckets):
        _assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


# (time step, tokens per limit, then: keep, settle the latest or the earliest grant due
# (named, giving back a fraction), withdraw a reservation ahead, charge, or a pause)
EveryStep = tuple[float, tuple[float, float], str, float]
every_step = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.5]),
        st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.sampled_from([0.0, 1.0, 4.0, 8.0])),
        st.sampled_from(["keep", "latest", "earliest", "latest", "withdraw", "charge", "pause"]),
        st.sampled_from([0.25, 0.5, 0.9, 1.0]),
    ),
    min_size=1,
    max_size=60,
)


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=300, deadline=None)
@given(scenario=every_step)
def test_no_sequence_of_acquires_charges_and_give_backs_exceeds_the_bound(
    members: int, scenario: list[EveryStep]
) -> None:
    """Every grant named as a limiter that gives back has it named (those that went at
    once too, by where their tokens sit), give-backs of any grant in any order, and
    charges among them: the tokens really used never exceed ``capacity + rate·t`` in
    any interval, per limit."""
    buckets = [Gcra(3.0, 1.0), Gcra(8.0, 2.0)][:members]
    algs: list[Algorithm[Any]] = list(buckets)
    states: list[Any] = [alg.new_state() for alg in algs]
    holes = Holes()
    now = 1_000.0
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now += dt
        want = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        states, wait, name = reserve(algs, states, holes, now, want, math.inf, True)
        assert wait >= 0
        grants.append({"at": now + wait, "name": name, "used": list(want), "named": False})
        due = [g for g in grants if g["at"] <= now + EPSILON and not g["named"] and isinstance(g["name"], GrantTime)]
        ahead = [g for g in grants if g["at"] > now + EPSILON and any(g["used"])]
        if then in ("latest", "earliest") and due:
            g = due[-1] if then == "latest" else due[0]
            name = g["name"]
            # Only from the limits the name locates the grant in: the others' refund
            # would be unnamed (its caveat is documented).
            located = [i < len(name.exact) and name.exact[i] for i in range(members)]
            for j, _, _ in name.pieces:
                located[j] = True
            back = [u * fraction if located[i] else 0.0 for i, u in enumerate(g["used"])]
            states = give_back(algs, states, holes, now, back, name)
            g["used"] = [u - b for u, b in zip(g["used"], back, strict=True)]
            g["named"] = True  # the front names a grant once
        elif then == "withdraw" and ahead:
            g = ahead[0]
            states = give_back(algs, states, holes, now, g["used"], g["name"])
            g["used"] = [0.0] * members
        elif then == "charge":
            spent = [n * fraction for n in want]
            # Tokens spent beyond an estimate go over the bound by design (later grants
            # wait the debt off): not counted, but every give-back after it must still
            # free no more than its grant left unused.
            states = charge_all(algs, states, now, spent)
            void(holes)
        elif then == "pause":
            states = [alg.restrict(s, now, 0.0, now + 1.0) for alg, s in zip(algs, states, strict=True)]
            restricted(holes, now, now + 1.0)
            pause(holes, now + 1.0)
    for i, alg in enumerate(buckets):
        _assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


def test_a_named_refund_with_a_queue_behind_is_used_again() -> None:
    """The tokens a grant did not use are taken now, where an unnamed refund loses them."""
    alg = Gcra(10.0, 1.0)
    holes = Holes()
    states: list[Any] = [alg.new_state()]
    states, _, *_ = reserve([alg], states, holes, 1_000.0, [10.0], math.inf)  # empties it
    states, wait, *_ = reserve([alg], states, holes, 1_000.0, [4.0], math.inf)  # waits 4 s
    assert wait == 4.0
    name = exact([alg], states, 1_004.0)
    assert isinstance(name, GrantTime)
    assert name.exact == (True,)
    states, wait, *_ = reserve([alg], states, holes, 1_004.0, [6.0], math.inf)  # queued behind: 1010
    assert wait == 6.0
    unnamed = give_back([alg], states, Holes(), 1_004.0, [3.0], 1_004.0)
    assert unnamed == states  # nothing given back: the bucket's refund is refused
    states = give_back([alg], states, holes, 1_004.0, [3.0], name)
    assert holes.items == [[1_004.0, (3.0,), True]]  # a late hole: good past its time
    states, wait, *_ = reserve([alg], states, holes, 1_004.0, [3.0], 0.0)
    assert wait == 0.0  # from the hole, now
    states, wait, *_ = reserve([alg], states, holes, 1_004.0, [1.0], 0.0)
    assert wait < 0


def test_a_hole_past_its_time_keeps_only_the_part_of_its_slot_still_ahead() -> None:
    alg = Gcra(10.0, 1.0)
    assert alg.room(1_004.0, 3.0, 1_004.0) == 3.0
    assert alg.room(1_004.0, 3.0, 1_012.0) == pytest.approx(2.0)
    assert alg.room(1_004.0, 3.0, 1_014.0) == 0.0
    # A window's hole is good at its own time only.
    from ratelimit._algorithms.sliding_window import WindowLog

    window = WindowLog(5.0, 10.0)
    assert window.room(1_004.0, 3.0, 1_004.0) == 3.0
    assert window.room(1_004.0, 3.0, 1_004.5) == 0.0


def test_a_grant_from_a_hole_is_never_named() -> None:
    """Its slot is not where its time says (the hole's is): naming it could free
    another grant's tokens."""
    alg = Gcra(2.0, 1.0)
    holes = Holes()
    states: list[Any] = [alg.new_state()]
    states, _, *_ = reserve([alg], states, holes, 0.0, [2.0], math.inf)
    states, _, *_ = reserve([alg], states, holes, 0.0, [1.0], math.inf)  # at 1
    states, _, *_ = reserve([alg], states, holes, 0.0, [1.0], math.inf)  # at 2
    states = give_back([alg], states, holes, 0.0, [1.0], 1.0)  # a hole at 1
    states, wait, *_ = reserve([alg], states, holes, 0.0, [1.0], math.inf)
    assert wait == 1.0  # the hole
    assert not isinstance(exact([alg], states, 1.0), GrantTime)


# -- the limiters: which grant a refund or settle names ---------------------------


def _naming(limiter: Any, tokens: Any = 1) -> Any:
    """A limiter remembers grants from its first give-back on (so that one that never
    gives back pays nothing for it): one that squares nothing starts it."""
    limiter.settle(tokens, tokens)
    return limiter


def _queue_behind(limiter: Any, tokens: float) -> float:
    """Another worker's reservation, queued behind (the store's call, no sleep)."""
    wait, _ = limiter._handle.reserve(tokens, math.inf)
    return float(wait)


def test_settle_gives_back_with_grants_queued_behind(make: Callable[..., Any], clock: ManualClock) -> None:
    """The issue's case: workers queue on the token budget and every over-estimate was
    lost. Now the estimate's unused part goes to the next request at once."""
    bucket = _naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)  # someone empties it
    assert _in(x, bucket.acquire, 4) == 4.0  # x waits its turn: 1004
    assert _queue_behind(bucket, 6) == 6.0  # and someone queues behind it: 1010
    _in(x, bucket.settle, 4, 1)  # x's call used 1 of its 4
    assert bucket.try_acquire(3)  # the 3 go now
    assert not bucket.try_acquire(1)


def test_a_settle_of_a_grant_that_went_at_once_gives_back_with_a_reservation_behind(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Issue 35: A takes the whole bucket at once (an estimate), B's request is
    reserved behind it, and A's call used 1 of its 10. The 9 came back as nothing (A's
    grant was not named: only grants that waited were). A's grant is named by where its
    tokens sit (its slot ends at 1010), so the 9 are a hole the next requests take at
    once, and no more than them."""
    bucket = _naming(make(TokenBucket, 10, 1))
    a = contextvars.copy_context()
    assert _in(a, bucket.acquire, 10) == 0.0
    assert _queue_behind(bucket, 1) == 1.0  # B: at 1001
    _in(a, bucket.settle, 10, 1)
    assert bucket.try_acquire(5)
    assert bucket.acquire(4) == 0.0
    assert not bucket.try_acquire(1)


def test_an_unnamed_refund_still_frees_nothing_with_a_queue(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = _naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    _in(x, bucket.acquire, 4)
    _queue_behind(bucket, 6)
    bucket.refund(3)  # not x's: this context has no grant of its own
    assert not bucket.try_acquire(1)


def test_two_grants_since_the_last_give_back_name_neither(make: Callable[..., Any], clock: ManualClock) -> None:
    """acquire, acquire, settle: which of the two? Naming the wrong one could free
    tokens that were used, so neither is named."""
    bucket = _naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    _in(x, bucket.acquire, 2)
    _in(x, bucket.acquire, 2)
    _queue_behind(bucket, 6)
    _in(x, bucket.settle, 2, 0)
    assert not bucket.try_acquire(1)


def test_a_grant_is_named_once(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = _naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    _in(x, bucket.acquire, 4)
    _queue_behind(bucket, 6)
    copy = _in(x, contextvars.copy_context)  # a task started after the grant sees it too
    _in(x, bucket.settle, 4, 2)
    _in(copy, bucket.settle, 4, 0)  # the same grant again: named no more
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(1)


def test_a_refund_after_a_charge_takes_back_from_the_charge(make: Callable[..., Any], clock: ManualClock) -> None:
    """``acquire(2); charge(13); refund(6)`` left a 6 s wait: the refund freed nothing
    while the charge's debt was ahead."""
    bucket = make(TokenBucket, 10, 1)
    bucket.acquire(2)
    bucket.charge(13)  # (a charge starts the remembering: it is the latest take)
    bucket.refund(6)
    assert bucket.acquire(1) == 0.0  # 2 + 13 - 6 = 9 of 10 taken


def test_settle_of_a_composite_gives_back_the_tokens_of_the_limit_that_queued(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """An LLM budget: requests and tokens, each per minute. The tokens limit is the one
    requests queue on; what a call did not use of its estimate goes to the next call,
    whose request the requests limit grants by itself as usual. (Its state is pushed
    along by the queue too, so it must hold the queue's length in its burst: a minute's
    worth of requests does.)"""
    llm = _naming(make(Composite, [TokenBucket(60, 1), TokenBucket(100, 10)]), [1, 1])
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), llm.acquire, [1, 100])
    assert _in(x, llm.acquire, [1, 40]) == 4.0  # tokens: 1004
    wait, _ = llm._handle.reserve([1, 60], math.inf)  # someone queues behind: 1010
    assert wait == 6.0
    _in(x, llm.settle, [1, 40], [1, 10])
    assert llm.try_acquire([1, 30])
    assert not llm.try_acquire([1, 1])


def test_settle_async_names_the_tasks_own_grant(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = _naming(make(TokenBucket, 10, 1))

    async def main() -> tuple[bool, bool]:
        await bucket.acquire_async(10)

        async def worker() -> None:
            await bucket.acquire_async(4)
            _queue_behind(bucket, 6)
            await bucket.settle_async(4, 1)

        await asyncio.create_task(worker())
        return await bucket.try_acquire_async(3), await bucket.try_acquire_async(1)

    assert asyncio.run(main()) == (True, False)


def test_a_limiter_that_never_gives_back_remembers_nothing(make: Callable[..., Any]) -> None:
    bucket = make(TokenBucket, 10, 1)
    bucket.acquire()
    assert bucket._named is None
    bucket.refund(1)
    assert bucket._named is not None


def test_a_charge_of_a_composite_is_not_named_but_counted(make: Callable[..., Any]) -> None:
    llm = make(Composite, [TokenBucket(5, 5), TokenBucket(100, 10)])
    llm.charge([0, 30])
    llm.refund([0, 10])  # unnamed: the composite's charge has no single slot end
    assert llm.stats().charged == 30


class _Scheduled(ManualClock):
    """A clock whose sleeps do not pass: the test keeps each caller's grant time itself
    and lets time pass for all of them at once."""

    def sleep(self, seconds: float) -> None:
        pass


@pytest.mark.stress
def test_the_bound_holds_for_many_callers_settling_through_the_store(make: Callable[..., Any]) -> None:
    """Twenty callers, each acquiring an over-estimate (8 tokens for calls that use 2
    to 4) and settling it once its grant is due: the used tokens never exceed capacity
    + rate·t, and most of the budget is used. With unnamed refunds, which free nothing
    while others are queued, about a third of it was."""
    clock = _Scheduled(1_000.0)
    bucket = _naming(make(TokenBucket, 40, 10, clock=clock))
    callers = [contextvars.copy_context() for _ in range(20)]
    pending: list[tuple[float, int, float]] = []  # (due, caller, actual)
    sent: list[tuple[float, float]] = []
    for step in range(240):
        busy = {i for _, i, _ in pending}
        for i, ctx in enumerate(callers):
            if i not in busy:
                wait = _in(ctx, bucket.acquire, 8)
                pending.append((clock.now() + wait, i, 2.0 + (step + i) % 3))
        clock.advance(0.25)
        for item in sorted(p for p in pending if p[0] <= clock.now()):
            pending.remove(item)
            due, i, actual = item
            sent.append((due, actual))
            _in(callers[i], bucket.settle, 8, actual)
    _assert_bound(sent, 40, 10)
    used = sum(actual for _, actual in sent)
    assert used >= 0.8 * (40 + 10 * 60), used


def test_a_grant_taken_from_what_others_gave_back_gives_back_in_turn(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Its pieces are named, so its own settle hands them on again."""
    bucket = _naming(make(TokenBucket, 10, 1))
    x, y = contextvars.copy_context(), contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    assert _in(x, bucket.acquire, 4) == 4.0  # 1004
    _queue_behind(bucket, 6)  # 1010
    _in(x, bucket.settle, 4, 1)
    assert _in(y, bucket.acquire, 3) == 0.0  # from x's hole, at once
    _in(y, bucket.settle, 3, 1)  # y used 1 of it
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(1)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_threads_settling_high_estimates_use_most_of_the_budget(store: str, request: pytest.FixtureRequest) -> None:
    """Real time, eight threads, through coalesced rounds on Redis: the README's ask()
    pattern with estimates four times the real use. Before, under contention, about a
    third of the tokens budget was used; the bound holds in any second."""
    import threading
    import time

    from ratelimit import RedisBackend

    from conftest import unique_name

    backend = None if store == "memory" else RedisBackend(request.getfixturevalue("redis_client"))
    name = None if backend is None else unique_name("llm")
    llm = Composite([TokenBucket(100, 50), TokenBucket(800, 400)], backend=backend, name=name)
    used: list[tuple[float, float]] = []
    lock = threading.Lock()
    seconds = 3.0
    stop = time.monotonic() + seconds

    def worker() -> None:
        while time.monotonic() < stop:
            llm.acquire([1, 40])
            sent = time.monotonic()
            time.sleep(0.02)
            llm.settle([1, 40], [1, 10])
            with lock:
                used.append((sent, 10.0))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    span = time.monotonic() - began
    total = sum(n for _, n in used)
    assert total >= 0.6 * (800 + 400 * span), total  # about 0.3 before
    times = sorted(t for t, _ in used)
    # Timestamps are taken after the sleep returns: a little jitter, a grant of slack.
    most = max(sum(10.0 for u in times if t <= u < t + 1.0) for t in times)
    assert most <= 800 + 400 + 40, most


class _Interrupted(Exception):
    """What a signal handler raises into a sleeping acquire (an alarm's timeout)."""


class _InterruptedOnce(ManualClock):
    interrupt = False

    def sleep(self, seconds: float) -> None:
        if self.interrupt:
            self.interrupt = False
            raise _Interrupted
        super().sleep(seconds)


def test_a_grant_withdrawn_by_an_interrupted_acquire_is_not_named(make: Callable[..., Any]) -> None:
    """The acquire gave its reservation back when its sleep was interrupted; a settle in
    the caller's ``except`` must not name it again (that would free a slot twice)."""
    clock = _InterruptedOnce(1_000.0)
    bucket = _naming(make(TokenBucket, 10, 1, clock=clock))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    clock.interrupt = True
    with pytest.raises(_Interrupted):
        _in(x, bucket.acquire, 4)  # would wait 4 s; withdrawn at once
    assert _queue_behind(bucket, 4) == 4.0  # someone else takes that place: 1004
    _in(x, bucket.settle, 4, 0)
    assert not bucket.try_acquire(1)
    assert _queue_behind(bucket, 1) == 5.0  # behind that reservation, still there
