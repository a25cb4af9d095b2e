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
import time
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import fakeredis._socket._base as fakeredis_base
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naming import Now, assert_bound, decide_alike, naming, pair, queue_behind, run_in

from ratelimit import Composite, LeakyBucket, ManualClock, RedisBackend, TokenBucket
from ratelimit._algorithms.algorithm import EPSILON, Algorithm, charge_all
from ratelimit._algorithms.holes import (
    GrantTime,
    Holes,
    exact,
    give_back,
    pause,
    plan,
    reserve,
    restricted,
    settle,
    void,
)
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.token_bucket import Gcra

from conftest import state_keys, unique_name

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
        assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


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
        assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


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
    assert holes.items == [[1_004.0, (3.0,), True]]  # a lasting hole: good past its time
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


def test_settle_gives_back_with_grants_queued_behind(make: Callable[..., Any], clock: ManualClock) -> None:
    """The issue's case: workers queue on the token budget and every over-estimate was
    lost. Now the estimate's unused part goes to the next request at once."""
    bucket = naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)  # someone empties it
    assert run_in(x, bucket.acquire, 4) == 4.0  # x waits its turn: 1004
    assert queue_behind(bucket, 6) == 6.0  # and someone queues behind it: 1010
    run_in(x, bucket.settle, 4, 1)  # x's call used 1 of its 4
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
    bucket = naming(make(TokenBucket, 10, 1))
    a = contextvars.copy_context()
    assert run_in(a, bucket.acquire, 10) == 0.0
    assert queue_behind(bucket, 1) == 1.0  # B: at 1001
    run_in(a, bucket.settle, 10, 1)
    assert bucket.try_acquire(5)
    assert bucket.acquire(4) == 0.0
    assert not bucket.try_acquire(1)


def test_an_unnamed_refund_still_frees_nothing_with_a_queue(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    run_in(x, bucket.acquire, 4)
    queue_behind(bucket, 6)
    bucket.refund(3)  # not x's: this context has no grant of its own
    assert not bucket.try_acquire(1)


def test_two_grants_since_the_last_give_back_name_neither(make: Callable[..., Any], clock: ManualClock) -> None:
    """acquire, acquire, settle: which of the two? Naming the wrong one could free
    tokens that were used, so neither is named."""
    bucket = naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    run_in(x, bucket.acquire, 2)
    run_in(x, bucket.acquire, 2)
    queue_behind(bucket, 6)
    run_in(x, bucket.settle, 2, 0)
    assert not bucket.try_acquire(1)


def test_a_grant_is_named_once(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = naming(make(TokenBucket, 10, 1))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    run_in(x, bucket.acquire, 4)
    queue_behind(bucket, 6)
    copy = run_in(x, contextvars.copy_context)  # a task started after the grant sees it too
    run_in(x, bucket.settle, 4, 2)
    run_in(copy, bucket.settle, 4, 0)  # the same grant again: named no more
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
    llm = naming(make(Composite, [TokenBucket(60, 1), TokenBucket(100, 10)]), [1, 1])
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), llm.acquire, [1, 100])
    assert run_in(x, llm.acquire, [1, 40]) == 4.0  # tokens: 1004
    wait, _ = llm._handle.reserve([1, 60], math.inf)  # someone queues behind: 1010
    assert wait == 6.0
    run_in(x, llm.settle, [1, 40], [1, 10])
    assert llm.try_acquire([1, 30])
    assert not llm.try_acquire([1, 1])


def test_settle_async_names_the_tasks_own_grant(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = naming(make(TokenBucket, 10, 1))

    async def main() -> tuple[bool, bool]:
        await bucket.acquire_async(10)

        async def worker() -> None:
            await bucket.acquire_async(4)
            queue_behind(bucket, 6)
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
    bucket = naming(make(TokenBucket, 40, 10, clock=clock))
    callers = [contextvars.copy_context() for _ in range(20)]
    pending: list[tuple[float, int, float]] = []  # (due, caller, actual)
    sent: list[tuple[float, float]] = []
    for step in range(240):
        busy = {i for _, i, _ in pending}
        for i, ctx in enumerate(callers):
            if i not in busy:
                wait = run_in(ctx, bucket.acquire, 8)
                pending.append((clock.now() + wait, i, 2.0 + (step + i) % 3))
        clock.advance(0.25)
        for item in sorted(p for p in pending if p[0] <= clock.now()):
            pending.remove(item)
            due, i, actual = item
            sent.append((due, actual))
            run_in(callers[i], bucket.settle, 8, actual)
    assert_bound(sent, 40, 10)
    used = sum(actual for _, actual in sent)
    assert used >= 0.8 * (40 + 10 * 60), used


def test_a_grant_taken_from_what_others_gave_back_gives_back_in_turn(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Its pieces are named, so its own settle hands them on again."""
    bucket = naming(make(TokenBucket, 10, 1))
    x, y = contextvars.copy_context(), contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    assert run_in(x, bucket.acquire, 4) == 4.0  # 1004
    queue_behind(bucket, 6)  # 1010
    run_in(x, bucket.settle, 4, 1)
    assert run_in(y, bucket.acquire, 3) == 0.0  # from x's hole, at once
    run_in(y, bucket.settle, 3, 1)  # y used 1 of it
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
    bucket = naming(make(TokenBucket, 10, 1, clock=clock))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    clock.interrupt = True
    with pytest.raises(_Interrupted):
        run_in(x, bucket.acquire, 4)  # would wait 4 s; withdrawn at once
    assert queue_behind(bucket, 4) == 4.0  # someone else takes that place: 1004
    run_in(x, bucket.settle, 4, 0)
    assert not bucket.try_acquire(1)
    assert queue_behind(bucket, 1) == 5.0  # behind that reservation, still there


# -- under interruption, cancellation, late settles and the server's clock ------------

#: The stores these run on (the cluster decides with the same scripts as one server).
SCRIPTED = ["memory", "fakeredis", "redis"]


class Interrupted(Exception):
    """What a signal handler raises into a sleeping acquire (an alarm's timeout)."""


class _InterruptingClock(ManualClock):
    """A clock whose next sleep is interrupted, before any time passes, once
    ``meanwhile`` has run (another worker's request)."""

    interrupt = False
    meanwhile: Callable[[], object] = staticmethod(lambda: None)

    def sleep(self, seconds: float) -> None:
        if self.interrupt:
            self.interrupt = False
            self.meanwhile()
            raise Interrupted
        super().sleep(seconds)


# -- the front: which grant a give-back names ---------------------------------------


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_grant_given_back_by_an_interrupted_acquire_is_not_named_again(backend: Any) -> None:
    """acquire() gives its reservation back when its sleep is interrupted, leaving a
    hole of 4 at 1004 before another worker's grant; the settle(4, 0) in the caller's
    ``except`` (the call was never made) gives back nothing more: the hole holds 4,
    not 8."""
    clock = _InterruptingClock(1_000.0)
    bucket = naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)  # someone empties it
    clock.interrupt = True
    clock.meanwhile = lambda: bucket._handle.reserve(6, math.inf)  # queued behind: 1010
    with pytest.raises(Interrupted):
        run_in(x, bucket.acquire, 4)  # would wait 4 s; given back at once
    run_in(x, bucket.settle, 4, 0)  # "the call was not made": nothing more to give back
    clock.set(1_004.0)
    assert bucket.try_acquire(4)  # x's place
    assert not bucket.try_acquire(1)


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_late_named_settle_gives_back_only_what_is_still_ahead(backend: Any) -> None:
    """A grant that waited its turn ends its slot at its time + tolerance; once that is
    past, its unused tokens are gone, even with nothing queued: the settle frees no
    other grant's slot in their place (that would be 4 tokens at one moment from a
    bucket of 3)."""
    clock = ManualClock(1_000.0)
    bucket = naming(TokenBucket(3, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 3)  # empties it at 1000
    assert run_in(x, bucket.acquire, 1) == 1.0  # x waits its turn: 1001, slot [1003, 1004]
    clock.set(1_004.0)  # full again
    run_in(contextvars.copy_context(), bucket.acquire, 3)  # others take all of it at 1004
    run_in(x, bucket.settle, 1, 0)  # x's call used nothing, but its slot is past
    assert not bucket.try_acquire(1)


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_late_settle_of_a_grant_that_went_at_once_frees_nothing_past(backend: Any) -> None:
    """The same through a grant that did not wait (the front passes its time, unnamed):
    once the bucket has refilled to its capacity, the settle hands no tokens to now."""
    clock = ManualClock(1_000.0)
    bucket = naming(TokenBucket(3, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    assert run_in(x, bucket.acquire, 1) == 0.0
    clock.set(1_003.0)  # full again
    run_in(contextvars.copy_context(), bucket.acquire, 3)
    run_in(x, bucket.settle, 1, 0)
    assert not bucket.try_acquire(1)


# -- the stores: Python and Lua decide alike -----------------------------------------


class _ServerTime:
    """``time`` as fakeredis's command loop sees it: moved by the test (its keys expire
    on it), while the scripts get the scenario's ``now``."""

    def __init__(self) -> None:
        self.value = 1_700_000_000.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return self.value


@pytest.fixture
def server_time() -> Iterator[_ServerTime]:
    clock = _ServerTime()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fakeredis_base, "time", clock)
        yield clock


def test_many_spent_holes_are_dropped_alike(server_time: _ServerTime) -> None:
    """Fifty holes, all but the last spent: the script, which reads the holes in pages,
    finds the one that still has room (what its slot holds ahead) as Python does, and
    the two decide alike."""
    alg = Gcra(1.0, 1.0)
    now = Now(1_700_000_000.0)
    memory, script = pair([alg], now, fakeredis.FakeRedis())
    grants = [memory.reserve(1.0, math.inf) for _ in range(50)]
    assert [script.reserve(1.0, math.inf) for _ in range(50)] == grants
    for _, at in grants[1:43]:  # withdrawn mid-queue: holes at +1 .. +42
        memory.refund(1.0, at)
        script.refund(1.0, at)
    now.advance(42.5)  # the holes up to +41 are spent; +42 holds half a token ahead
    assert script.reserve(0.5, math.inf) == memory.reserve(0.5, math.inf)


def test_a_grant_from_a_hole_is_named_alike(server_time: _ServerTime) -> None:
    """A grant taken from a hole is named (or not) alike by the memory store and the
    script. A composite's token bucket can be at its tail where the window is not (a
    later request gave the bucket 0), so a withdrawn grant there leaves a hole at the
    bucket's latest time."""
    algs: list[Algorithm[Any]] = [Gcra(3.0, 1.0), WindowLog(5.0, 4.0)]
    now = Now(1_000.0)
    memory, script = pair(algs, now, fakeredis.FakeRedis())
    for handle in (memory, script):
        handle.reserve([3, 4], math.inf)  # the bucket empty, the window one short
        _, grant = handle.reserve([1, 1], math.inf)  # waits for the bucket: 1001
        handle.reserve([0, 1], math.inf)  # the window's: 1004
        handle.refund([1, 1], grant)  # withdrawn: the bucket's tail, not the window's
    assert repr(script.reserve([1, 1], math.inf)) == repr(memory.reserve([1, 1], math.inf))


def test_the_script_keeps_a_named_refunds_hole_while_its_slot_is_ahead(server_time: _ServerTime) -> None:
    """A named refund leaves a hole at its grant's (past) time that stays good until
    that time + tolerance: the server keeps the holes key that long, as memory keeps
    the hole."""
    alg = Gcra(10.0, 1.0)  # tolerance 10 s
    now = Now(1_700_000_000.0)
    memory, script = pair([alg], now, fakeredis.FakeRedis())
    grants = []
    for handle in (memory, script):
        handle.reserve(10.0, math.inf)
        grants.append(handle.reserve(4.0, math.inf)[1])  # 4 s: its slot ends at +14
        handle.reserve(6.0, math.inf)  # queued behind
    now.advance(4.0)
    server_time.value += 4.0
    for handle, grant in zip((memory, script), grants, strict=True):
        handle.refund(3.0, grant)  # named: a hole at +4 good until +14
    now.advance(3.0)  # +7: 3 tokens of it are still ahead
    server_time.value += 3.0
    assert script.reserve(3.0, 0.0) == memory.reserve(3.0, 0.0)


# (time step, tokens per limit, then: keep, settle a due grant by its name (the latest or
# the earliest), withdraw the earliest reservation ahead)
_Alike = tuple[float, tuple[float, float], str, float]
_alike = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.25, 1.0, 2.5]),
        st.tuples(st.sampled_from([0.5, 1.0, 3.0]), st.sampled_from([0.0, 1.0, 4.0])),
        st.sampled_from(["keep", "latest", "earliest", "withdraw"]),
        st.sampled_from([0.5, 1.0]),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=40, deadline=None)
@given(scenario=_alike)
def test_grants_named_at_once_decide_alike(members: int, scenario: list[_Alike]) -> None:
    """Grants at once named by where their tokens sit, settles of any grant due and
    withdrawals: the memory store and the script give the same decisions and names,
    step by step."""
    buckets: list[Algorithm[Any]] = [Gcra(3.0, 1.0), Gcra(8.0, 2.0)]
    decide_alike(buckets, members, scenario)


# -- composites and numbers at their limits -------------------------------------------


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_grant_delayed_by_a_leaky_bucket_it_gives_nothing_stays_reserved(make: Callable[..., Any]) -> None:
    """A request that gives a composite's leaky bucket 0 tokens waits for nothing of
    that bucket's queue, so the grant is where the token bucket puts it, and a refund
    after it frees no slot of another grant: what went stays within capacity + rate·t
    (4 + 2/s here)."""
    llm = naming(make(Composite, [TokenBucket(4, 2), LeakyBucket(3, 1)]), [1, 1])
    x = contextvars.copy_context()
    assert run_in(x, llm.acquire, [1, 1]) == 0.0  # the queue drains at +1
    wait, _ = llm._handle.reserve([2, 0], math.inf)  # someone else's, for the bucket only
    assert wait == 0.0  # not held back by a queue it pours nothing into
    run_in(x, llm.refund, [0.5, 0])  # x's call used half a token less
    later, _ = llm._handle.reserve([3, 0], math.inf)
    # 0.5 + 2 now and 3 after `later`: within capacity + rate·t.
    assert 4 + 2 * later + 1e-9 >= 0.5 + 2 + 3, later


def test_a_million_tokens_a_second_at_the_servers_clock_never_exceed_the_bucket() -> None:
    """The scripts decide at the server's TIME, about 1.7e9 s, where a double holds
    time to 2.4e-7 s, coarser than an emission interval of 1e-6 s: the TAT moves by
    the sum rounded up, so the bucket grants no more than its capacity plus its rate."""
    alg = Gcra(1_000.0, 1e6)
    state, start, granted = alg.new_state(), 1_700_000_000.0, 0
    for step in range(21):
        now = start + step * 1e-3  # each millisecond refills the whole capacity
        while True:
            after, wait = alg.step(state, now, 1.0, 0.0)
            if wait < 0:
                break
            state, granted = after, granted + 1
    assert granted <= 1_000 + 1e6 * 20e-3, granted


def test_a_full_bucket_grants_its_capacity_at_once_at_the_servers_clock(client: Any) -> None:
    """Whether a request goes at once is decided on the sums rounded to nearest: a full
    bucket grants its whole capacity at once at the server's clock, on the memory
    store and the script alike."""
    now = Now(1_700_000_000.0)
    for capacity, rate in [(1.0, 1000.0), (3.0, 0.1), (10.0, 3e6)]:
        alg = Gcra(capacity, rate)
        assert alg.step(alg.new_state(), now.value, capacity, 0.0)[1] == 0.0
        assert alg.plan(alg.new_state(), now.value, capacity) == (now.value, now.value)
        memory, script = pair([alg], now, client)
        assert script.reserve(capacity, 0.0) == memory.reserve(capacity, 0.0) == (0.0, now.value)
        now.advance(1.0)


def test_the_tat_rounded_up_is_the_scripts_to_the_bit(client: Any) -> None:
    """The script moves the TAT as the algorithm does at the server's clock, where the
    sums round (3e6 tokens a second: a third of a step), on its fast path and on
    the full one (a hole beside the state)."""
    alg = Gcra(10.0, 3e6)
    now = Now(1_700_000_000.0)
    memory, script = pair([alg], now, client)
    for i in range(200):
        tokens = (1.0, 3.0, 0.5)[i % 3]
        assert script.reserve(tokens, math.inf) == memory.reserve(tokens, math.inf), i
        if i == 100:
            _, at = memory.reserve(1.0, math.inf)
            assert script.reserve(1.0, math.inf)[1] == at
            memory.refund(1.0, at - 1e-6)
            script.refund(1.0, at - 1e-6)
        now.advance(1e-6 * (i % 4))


# -- Redis losing keys ------------------------------------------------------------------


def test_a_named_refunds_hole_goes_with_an_evicted_state(client: Any) -> None:
    """The holes are void once the state they were cut from is lost (an evicted key):
    the script tells by a hole later than every grant the state holds. A named
    refund's hole is at its grant's past time, so it is never later: the fresh bucket
    grants its 10, and the old hole 3 more at the same moment."""
    clock = ManualClock(1_000.0)
    name = unique_name()
    bucket = naming(TokenBucket(10, 1, backend=RedisBackend(client), name=name, clock=clock))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    assert run_in(x, bucket.acquire, 4) == 4.0  # 1004
    bucket._handle.reserve(6, math.inf)  # queued behind: 1010
    run_in(x, bucket.settle, 4, 1)  # a hole of 3 at 1004, good until 1014
    keys = state_keys(client, name)
    assert any(key.endswith(":holes") for key in keys)
    for key in keys:
        if not key.endswith(":holes"):
            client.delete(key)  # evicted: the bucket starts full
    assert bucket.try_acquire(10)
    assert not bucket.try_acquire(3)


class _StuckClock(ManualClock):
    """A clock whose async sleeps never end on their own (a timeout ends them)."""

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.Event().wait()


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_grant_given_back_by_a_cancelled_task_is_not_named_again(backend: Any) -> None:
    """The asyncio twin: a task cancelled while its acquire sleeps (``asyncio.timeout``
    does this, then raises TimeoutError in the same task) gives its reservation back;
    the task's settle after it gives back nothing more."""
    clock = _StuckClock(1_000.0)
    bucket = naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))

    def queue_and_cancel(task: asyncio.Task[Any]) -> None:
        bucket._handle.reserve(6, math.inf)  # another worker, queued behind: 1010
        task.cancel()

    async def main() -> tuple[bool, bool]:
        bucket._handle.reserve(10, math.inf)  # someone else empties it
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.05, queue_and_cancel, task)
        try:
            await bucket.acquire_async(4)  # would wait 4 s
        except asyncio.CancelledError:
            await bucket.settle_async(4, 0)  # the call was not made
        clock.set(1_004.0)
        return bool(await bucket.try_acquire_async(4)), bool(await bucket.try_acquire_async(1))

    assert asyncio.run(main()) == (True, False)


# -- the provider's word ----------------------------------------------------------------


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_named_settle_after_feedback_never_lends_more_than_the_provider_said(backend: Any) -> None:
    """The LLM loop: acquire the estimate, call, feed the response's headers back, then
    settle with the usage. The provider's ``remaining`` already counts what the call
    used, so the unused estimate given back after it lends nothing beyond what the
    provider said remains until its reset."""
    clock = ManualClock(1_000.0)
    bucket = naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    run_in(contextvars.copy_context(), bucket.acquire, 10)
    assert run_in(x, bucket.acquire, 4) == 4.0  # x's call goes at 1004
    info = run_in(x, bucket.feedback, {"RateLimit-Remaining": "1", "RateLimit-Reset": "10"})
    assert info.remaining == 1
    assert not bucket.try_acquire(1)  # the one left is for later
    run_in(x, bucket.settle, 4, 1)  # the call used 1 of its 4
    assert not bucket.try_acquire(1)


@pytest.mark.parametrize("store", SCRIPTED)
def test_a_withdrawn_grant_another_limit_delayed_keeps_no_room_past_its_time(make: Callable[..., Any]) -> None:
    """A hole stays good past its time for a token bucket because a grant that waited
    its own turn ends its slot at its time + tolerance. A composite's grant delayed by
    the other limit does not: the second bucket's slot of the grant at +3 is [+3, +4],
    so its hole is not taken at +3.5 as if it ended at +6 (that would be 4 tokens of
    the second bucket within 0.5 s, from a bucket of 3 at 1/s)."""
    both = make(Composite, [TokenBucket(3, 1), TokenBucket(3, 1)])
    handle = both._handle
    clock = both.clock
    handle.reserve([3, 3], math.inf)  # both empty at +0
    assert handle.reserve([2, 0], math.inf)[0] == 2.0  # the first bucket's line moves on
    wait, grant = handle.reserve([1, 1], math.inf)  # +3, by the first bucket
    assert wait == 3.0
    assert handle.reserve([1, 1], math.inf)[0] == 4.0
    assert handle.reserve([0, 2], math.inf)[0] == 4.0  # the second bucket's own turn
    handle.refund([1, 1], grant)  # withdrawn mid-queue: a hole at +3
    clock.advance(3.5)
    wait, _ = handle.reserve([1, 1], math.inf)
    # The second bucket grants 1 + 2 at +4: one more may go at +5 at the earliest.
    assert wait >= 1.5 - 1e-9, wait


# -- the property, with any grant given back ----------------------------------------------

# (time step, tokens per limit, what to do after: nothing, settle the latest or the
# earliest grant already due (named as the stores name it, giving back a fraction),
# withdraw the earliest or the latest reservation ahead, a pause)
AnyStep = tuple[float, tuple[float, float], str, float]
any_steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.5]),
        st.tuples(st.sampled_from([0.0, 1.0, 2.0, 3.0]), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
        st.sampled_from(["keep", "latest", "earliest", "withdraw", "withdraw_last", "pause"]),
        st.sampled_from([0.25, 0.5, 1.0]),
    ),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=300, deadline=None)
@given(scenario=any_steps)
def test_giving_back_any_grant_never_lets_an_interval_exceed_capacity_plus_rate(
    members: int, scenario: list[AnyStep]
) -> None:
    """The property above, but a settle may be of any grant already due
    (not only the latest one: callers finish in any order), a withdrawal of any one
    ahead, and a composite's request may give a limit 0. Names are what the stores give
    a limiter that gives back: every grant, one that went at once by where its tokens
    sit."""
    buckets = [Gcra(3.0, 1.0), Gcra(3.0, 1.0)][:members]
    algs: list[Algorithm[Any]] = list(buckets)
    states: list[Any] = [alg.new_state() for alg in algs]
    holes = Holes()
    now = 1_000.0
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now += dt
        want = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        planned = plan(algs, states, holes, now, want)
        states, wait, name = settle(algs, states, holes, now, want, planned, math.inf, True)
        grants.append({"at": now + wait, "name": name, "used": list(want), "named": False})
        # Only what the store names (an unnamed refund that is not the bucket's latest
        # can still free another grant's slot: the caveat docs/costs.md states).
        due = [
            g
            for g in grants
            if g["at"] <= now and not g["named"] and any(g["used"]) and isinstance(g["name"], GrantTime)
        ]
        ahead = [g for g in grants if g["at"] > now + EPSILON and any(g["used"])]
        if then in ("latest", "earliest") and due:
            g = due[-1] if then == "latest" else due[0]
            # Only from the limits the name locates the grant in (``exact``, or a piece
            # of it): another limit's refund would be unnamed (the same caveat).
            located = [bool(g["name"].exact[i]) if i < len(g["name"].exact) else False for i in range(members)]
            for j, _, _ in g["name"].pieces:
                located[j] = True
            back = [u * fraction if located[i] else 0.0 for i, u in enumerate(g["used"])]
            states = give_back(algs, states, holes, now, back, g["name"])
            g["used"] = [u - b for u, b in zip(g["used"], back, strict=True)]
            g["named"] = True  # the front names a grant once
        elif then in ("withdraw", "withdraw_last") and ahead:
            g = ahead[0] if then == "withdraw" else ahead[-1]
            states = give_back(algs, states, holes, now, g["used"], g["name"])
            g["used"] = [0.0] * members
        elif then == "pause":
            states = [alg.restrict(s, now, 0.0, now + 1.0) for alg, s in zip(algs, states, strict=True)]
            restricted(holes, now, now + 1.0)
            pause(holes, now + 1.0)
    for i, alg in enumerate(buckets):
        assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)
