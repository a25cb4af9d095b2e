"""Hostile sequences against refunds that name their grant (issue 24 item 11).

The promise: the tokens each call really used (its grant less what it gave back) never
exceed ``capacity + rate·t`` in any interval, and the memory store and the Lua scripts
decide alike. Each test here is one way that was broken.
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

from ratelimit import Composite, LeakyBucket, ManualClock, MemoryBackend, RedisBackend, TokenBucket
from ratelimit._algorithms.algorithm import EPSILON, Algorithm
from ratelimit._algorithms.holes import GrantTime, Holes, give_back, pause, plan, restricted, settle
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisGroupHandle, RedisHandle

from conftest import state_keys, unique_name


@pytest.fixture(params=["memory", "fakeredis", "redis"])
def store(request: pytest.FixtureRequest) -> str:
    """The stores these run on (the cluster decides with the same scripts as one server)."""
    return str(request.param)


def _in(context: contextvars.Context, call: Callable[..., Any], *args: Any) -> Any:
    return context.run(call, *args)


def _naming(limiter: Any, tokens: Any = 1) -> Any:
    """Start the remembering of grants (a limiter's first give-back does)."""
    limiter.settle(tokens, tokens)
    return limiter


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


def test_a_grant_given_back_by_an_interrupted_acquire_is_not_named_again(backend: Any) -> None:
    """acquire() gives a reservation back when its sleep is interrupted (here, with
    another worker queued behind it: a hole of 4 at 1004), but the caller's latest
    grant stays remembered: a settle(4, 0) in the caller's ``except`` (the call was
    never made) names it and withdraws it a second time, and the hole holds 8."""
    clock = _InterruptingClock(1_000.0)
    bucket = _naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)  # someone empties it
    clock.interrupt = True
    clock.meanwhile = lambda: bucket._handle.reserve(6, math.inf)  # queued behind: 1010
    with pytest.raises(Interrupted):
        _in(x, bucket.acquire, 4)  # would wait 4 s; given back at once
    _in(x, bucket.settle, 4, 0)  # "the call was not made": nothing more to give back
    clock.set(1_004.0)
    assert bucket.try_acquire(4)  # x's place
    assert not bucket.try_acquire(1)


def test_a_late_named_settle_gives_back_only_what_is_still_ahead(backend: Any) -> None:
    """A grant that waited its turn ends its slot at its time + tolerance; once that is
    past, its unused tokens are gone. With nothing queued a named settle still took
    them off the TAT, freeing the slot of the latest grant instead: 4 tokens at one
    moment from a bucket of 3."""
    clock = ManualClock(1_000.0)
    bucket = _naming(TokenBucket(3, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 3)  # empties it at 1000
    assert _in(x, bucket.acquire, 1) == 1.0  # x waits its turn: 1001, slot [1003, 1004]
    clock.set(1_004.0)  # full again
    _in(contextvars.copy_context(), bucket.acquire, 3)  # others take all of it at 1004
    _in(x, bucket.settle, 1, 0)  # x's call used nothing, but its slot is past
    assert not bucket.try_acquire(1)


def test_a_late_settle_of_a_grant_that_went_at_once_frees_nothing_past(backend: Any) -> None:
    """The same through a grant that did not wait (the front passes its time, unnamed):
    the bucket refilled to its capacity since, and the settle still handed its tokens
    to now."""
    clock = ManualClock(1_000.0)
    bucket = _naming(TokenBucket(3, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    assert _in(x, bucket.acquire, 1) == 0.0
    clock.set(1_003.0)  # full again
    _in(contextvars.copy_context(), bucket.acquire, 3)
    _in(x, bucket.settle, 1, 0)
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


class _Now:
    """The time both stores decide at: the memory store's clock, the script's ``now``."""

    def __init__(self, value: float) -> None:
        self.clock = ManualClock(value)

    @property
    def value(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def __call__(self) -> str:
        return repr(self.clock.now())


def _pair(algs: list[Algorithm[Any]], now: _Now, client: Any) -> tuple[Any, Any]:
    """The same limits on the memory store and on the script, at the same times."""
    clock = now.clock
    name = unique_name()
    if len(algs) == 1:
        memory: Any = MemoryBackend().bind(name, algs[0], clock)
        script: Any = RedisHandle(RedisBackend(client), algs[0], key_for(name, algs[0].kind), now, None)
    else:
        memory = MemoryBackend().bind_group(name, algs, clock)
        keys = [key_for(name, alg.kind, i) for i, alg in enumerate(algs)]
        script = RedisGroupHandle(RedisBackend(client), algs, keys, now, None)
    return memory, script


def test_many_spent_holes_are_dropped_alike(server_time: _ServerTime) -> None:
    """Python drops every spent hole before planning; the script only those among the
    first 17 it reads, and then scans 16 of the rest, all spent: the hole that still
    has room (what its slot holds ahead) goes unseen there, and the two decide apart."""
    alg = Gcra(1.0, 1.0)
    now = _Now(1_700_000_000.0)
    memory, script = _pair([alg], now, fakeredis.FakeRedis())
    grants = [memory.reserve(1.0, math.inf) for _ in range(50)]
    assert [script.reserve(1.0, math.inf) for _ in range(50)] == grants
    for _, at in grants[1:43]:  # withdrawn mid-queue: holes at +1 .. +42
        memory.refund(1.0, at)
        script.refund(1.0, at)
    now.advance(42.5)  # the holes up to +41 are spent; +42 holds half a token ahead
    assert script.reserve(0.5, math.inf) == memory.reserve(0.5, math.inf)


def test_a_grant_from_a_hole_is_named_alike(server_time: _ServerTime) -> None:
    """The memory store names any grant that waited whose time is a slotted limit's
    latest, a grant taken from a hole too; the script never names one. A composite's
    token bucket can be at its tail where the window is not (a later request gave the
    bucket 0), so a withdrawn grant there leaves a hole at the bucket's latest time."""
    algs: list[Algorithm[Any]] = [Gcra(3.0, 1.0), WindowLog(5.0, 4.0)]
    now = _Now(1_000.0)
    memory, script = _pair(algs, now, fakeredis.FakeRedis())
    for handle in (memory, script):
        handle.reserve([3, 4], math.inf)  # the bucket empty, the window one short
        _, grant = handle.reserve([1, 1], math.inf)  # waits for the bucket: 1001
        handle.reserve([0, 1], math.inf)  # the window's: 1004
        handle.refund([1, 1], grant)  # withdrawn: the bucket's tail, not the window's
    assert repr(script.reserve([1, 1], math.inf)) == repr(memory.reserve([1, 1], math.inf))


def test_the_script_keeps_a_named_refunds_hole_while_its_slot_is_ahead(server_time: _ServerTime) -> None:
    """A named refund leaves a hole at its grant's (past) time that stays good until
    that time + tolerance; the script set the holes key to expire a second after the
    latest hole's time, so the server forgot it there while memory kept it."""
    alg = Gcra(10.0, 1.0)  # tolerance 10 s
    now = _Now(1_700_000_000.0)
    memory, script = _pair([alg], now, fakeredis.FakeRedis())
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
    algs = buckets[:members]
    now = _Now(1_000.0)
    memory, script = _pair(algs, now, fakeredis.FakeRedis())
    memory.name_grants()
    script.name_grants()
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now.advance(dt)
        want: Any = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        if members == 1:
            want = want[0]
        decided = memory.reserve(want, math.inf)
        assert repr(script.reserve(want, math.inf)) == repr(decided)
        grants.append({"at": decided[1], "tokens": want, "done": False})
        due = [g for g in grants if g["at"] <= now.value and not g["done"]]
        ahead = [g for g in grants if g["at"] > now.value + EPSILON and not g["done"]]
        if then in ("latest", "earliest") and due:
            g = due[-1] if then == "latest" else due[0]
            back = g["tokens"] * fraction if members == 1 else [n * fraction for n in g["tokens"]]
            memory.refund(back, g["at"])
            script.refund(back, g["at"])
            g["done"] = True
        elif then == "withdraw" and ahead:
            g = ahead[0]
            memory.refund(g["tokens"], g["at"])
            script.refund(g["tokens"], g["at"])
            g["done"] = True


# -- composites and numbers at their limits -------------------------------------------


def test_a_grant_delayed_by_a_leaky_bucket_it_gives_nothing_stays_reserved(make: Callable[..., Any]) -> None:
    """A request that gave a composite's leaky bucket 0 tokens still waited for its
    queue to drain, yet no limit recorded that it was reserved for then (the bucket
    records nothing, the token bucket's latest is its own plan); a refund then found
    nothing queued and freed the end of the token bucket's line, that grant's slot: 5
    tokens within 0.25 s from a bucket of 4 refilled at 2/s. A leaky bucket given 0
    now waits for nothing, so the grant is where the token bucket put it."""
    llm = _naming(make(Composite, [TokenBucket(4, 2), LeakyBucket(3, 1)]), [1, 1])
    x = contextvars.copy_context()
    assert _in(x, llm.acquire, [1, 1]) == 0.0  # the queue drains at +1
    wait, _ = llm._handle.reserve([2, 0], math.inf)  # someone else's, for the bucket only
    assert wait == 0.0  # not held back by a queue it pours nothing into
    _in(x, llm.refund, [0.5, 0])  # x's call used half a token less
    later, _ = llm._handle.reserve([3, 0], math.inf)
    # 0.5 + 2 now and 3 after `later`: within capacity + rate·t.
    assert 4 + 2 * later + 1e-9 >= 0.5 + 2 + 3, later


def test_a_million_tokens_a_second_at_the_servers_clock_never_exceed_the_bucket() -> None:
    """The scripts decide at the server's TIME, about 1.7e9 s, where a double holds
    time to 2.4e-7 s: an emission interval of 1e-6 s rounded to the nearest step
    moved the TAT by 4 of those steps (0.95 us), and the bucket granted about 5 %
    more than its rate (40 % more at 3e6/s). The TAT is moved by the sum rounded up."""
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
    """Whether a request goes at once is decided on the sums to nearest: with the TAT
    rounded up there too, a full bucket of one token refused its one token by a unit
    in the last place (2.4e-7 s, more than the decisions' EPSILON)."""
    now = _Now(1_700_000_000.0)
    for capacity, rate in [(1.0, 1000.0), (3.0, 0.1), (10.0, 3e6)]:
        alg = Gcra(capacity, rate)
        assert alg.step(alg.new_state(), now.value, capacity, 0.0)[1] == 0.0
        assert alg.plan(alg.new_state(), now.value, capacity) == (now.value, now.value)
        memory, script = _pair([alg], now, client)
        assert script.reserve(capacity, 0.0) == memory.reserve(capacity, 0.0) == (0.0, now.value)
        now.advance(1.0)


def test_the_tat_rounded_up_is_the_scripts_to_the_bit(client: Any) -> None:
    """The script moves the TAT as the algorithm does at the server's clock, where the
    sums round (3e6 tokens a second: a third of a step), on its quick path and on
    the full one (a hole beside the state)."""
    alg = Gcra(10.0, 3e6)
    now = _Now(1_700_000_000.0)
    memory, script = _pair([alg], now, client)
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
    bucket = _naming(TokenBucket(10, 1, backend=RedisBackend(client), name=name, clock=clock))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    assert _in(x, bucket.acquire, 4) == 4.0  # 1004
    bucket._handle.reserve(6, math.inf)  # queued behind: 1010
    _in(x, bucket.settle, 4, 1)  # a hole of 3 at 1004, good until 1014
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


def test_a_grant_given_back_by_a_cancelled_task_is_not_named_again(backend: Any) -> None:
    """The asyncio twin: a task cancelled while its acquire sleeps (``asyncio.timeout``
    does this, then raises TimeoutError in the same task) gives its reservation back;
    the task's settle then names the grant and withdraws it again."""
    clock = _StuckClock(1_000.0)
    bucket = _naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))

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


def test_a_named_settle_after_feedback_never_lends_more_than_the_provider_said(backend: Any) -> None:
    """The LLM loop: acquire the estimate, call, feed the response's headers back, then
    settle with the usage. The provider's ``remaining`` already counts what the call
    used; the restriction puts the limiter's line past now, so an unnamed refund freed
    nothing. A named one leaves the unused estimate as a hole, which the next requests
    take at once: 3 tokens go now where the provider said 1 remains until the reset."""
    clock = ManualClock(1_000.0)
    bucket = _naming(TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock))
    x = contextvars.copy_context()
    _in(contextvars.copy_context(), bucket.acquire, 10)
    assert _in(x, bucket.acquire, 4) == 4.0  # x's call goes at 1004
    info = _in(x, bucket.feedback, {"RateLimit-Remaining": "1", "RateLimit-Reset": "10"})
    assert info.remaining == 1
    assert not bucket.try_acquire(1)  # the one left is for later
    _in(x, bucket.settle, 4, 1)  # the call used 1 of its 4
    assert not bucket.try_acquire(1)


def test_a_withdrawn_grant_another_limit_delayed_keeps_no_room_past_its_time(make: Callable[..., Any]) -> None:
    """A hole stays good past its time for a token bucket because a grant that waited
    its own turn ends its slot at its time + tolerance. A composite's grant delayed by
    the other limit does not: here the second bucket's slot of the grant at +3 is
    [+3, +4], yet its hole was taken at +3.5 as if it ended at +6, beside the grants
    at +4: 4 tokens of the second bucket within 0.5 s, from a bucket of 3 at 1/s."""
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
    """The property of test_named_refunds, but a settle may be of any grant already due
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
        _assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


def _assert_bound(sent: list[tuple[float, float]], capacity: float, rate: float) -> None:
    times = sorted({at for at, used in sent if used > EPSILON})
    for a in times:
        for b in times:
            if b >= a:
                inside = sum(used for at, used in sent if a - 1e-9 <= at <= b + 1e-9)
                assert inside <= capacity + rate * (b - a) + 1e-6, (a, b, inside, sorted(sent))
