"""``reserve``: the grant taken now, as ``acquire`` takes it, and the wait left to the caller.

Every behaviour runs on every store (memory, fakeredis, a real server, a Cluster) with
an injected clock: a reservation must say exactly what the acquire in its place would
have waited, sleep nothing, and give its place back when cancelled before it is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Adaptive,
    BackendUnavailable,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    Reservation,
    SlidingWindow,
    TokenBucket,
)
from ratelimit.events import Denied, Event, Granted

from conftest import unique_name
from held import HeldClock

Make = Callable[..., Any]

# Through Redis times travel as %.17g text around 1e3 s: exact to far below this.
CLOSE = 1e-6


def test_reserve_takes_the_slots_acquire_would_and_never_sleeps(make: Make, clock: ManualClock) -> None:
    """A burst goes at once, then one slot per interval, in arrival order; nothing sleeps."""
    limiter = make(TokenBucket, 2, 4)
    reservations = [limiter.reserve() for _ in range(5)]
    assert [r.wait for r in reservations] == pytest.approx([0, 0, 0.25, 0.5, 0.75], abs=CLOSE)
    assert [r.at for r in reservations] == pytest.approx([1000, 1000, 1000.25, 1000.5, 1000.75], abs=CLOSE)
    assert clock.sleeps == []
    assert clock.now() == 1000.0
    # An acquire after them queues behind them, as if they had been acquires.
    assert limiter.acquire() == pytest.approx(1.0, abs=CLOSE)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda make: make(LeakyBucket, 8, 2), id="leaky_bucket"),
        pytest.param(lambda make: make(SlidingWindow, 2, 1.0), id="sliding_window"),
        pytest.param(lambda make: make(SlidingWindow, 2, 1.0, approximate=True), id="window_counter"),
        pytest.param(lambda make: make(Composite, [TokenBucket(2, 4), SlidingWindow(3, 1.0)]), id="composite"),
        pytest.param(lambda make: make(TokenBucket, 2, 4, adaptive=Adaptive()), id="adaptive"),
        pytest.param(lambda make: make(TokenBucket, 4, 4, low_share=0.5), id="priorities"),
        pytest.param(lambda make: make(TokenBucket, 4, 4, low_share=0.5).low, id="low_priority"),
    ],
)
def test_every_limiter_reserves_what_acquire_would_wait(make: Make, clock: ManualClock, build: Make) -> None:
    """On every kind of limiter, a reserve waits what an acquire in its place would
    (the twin acquires in process on a clock its sleeps do not move)."""
    twin_clock = HeldClock(ManualClock(1_000.0))
    reserving = build(make)
    acquiring = build(lambda cls, *a, **k: cls(*a, clock=twin_clock, **k))
    waits = [reserving.reserve().wait for _ in range(6)]
    assert waits == pytest.approx([acquiring.acquire() for _ in range(6)], abs=CLOSE)
    assert max(waits) > 0
    assert clock.sleeps == []


def test_a_reservation_tells_its_times(make: Make) -> None:
    """``wait`` from the return, ``at`` on the limiter's clock, ``due`` on the wall clock, in UTC."""
    limiter = make(TokenBucket, 1, 2)
    limiter.acquire()
    before = datetime.now(timezone.utc)
    r = limiter.reserve(1)
    after = datetime.now(timezone.utc)
    assert isinstance(r, Reservation)
    assert r.tokens == 1
    assert r.wait == pytest.approx(0.5, abs=CLOSE)
    assert r.at == pytest.approx(1000.5, abs=CLOSE)
    assert r.due.tzinfo is not None
    assert r.due.utcoffset() == timedelta(0)
    assert before + timedelta(seconds=0.5) <= r.due <= after + timedelta(seconds=0.5)
    assert not r.cancelled
    assert "wait=0.5" in repr(r)


def test_cancel_before_due_gives_the_place_to_the_next_request(make: Make, clock: ManualClock) -> None:
    """A withdrawn reservation in the middle of the queue is a place the next request fills."""
    limiter = make(TokenBucket, 1, 10)
    reservations = [limiter.reserve() for _ in range(4)]  # at 0, 0.1, 0.2, 0.3
    clock.advance(0.05)
    assert reservations[2].cancel() is True
    assert reservations[2].cancelled
    assert limiter.reserve().at == pytest.approx(1000.2, abs=CLOSE)
    assert limiter.reserve().at == pytest.approx(1000.4, abs=CLOSE)
    assert limiter.stats().cancelled == 1


def test_cancelling_the_last_reservation_rolls_it_back(make: Make) -> None:
    """The tail of the queue withdrawn: as if it had never been made."""
    limiter = make(LeakyBucket, 3, 2)
    first, second = limiter.reserve(), limiter.reserve()
    assert second.cancel()
    assert limiter.reserve().wait == pytest.approx(second.wait, abs=CLOSE)
    assert not first.cancelled


def test_cancel_twice_gives_back_once(make: Make) -> None:
    """The second cancel does nothing: the place is not given back twice."""
    limiter = make(TokenBucket, 1, 1)
    limiter.acquire()
    r = limiter.reserve()
    behind = limiter.reserve()
    assert r.cancel() is True
    assert r.cancel() is False
    assert limiter.stats().cancelled == 1
    # Given back once: one place free at 1001, the next after `behind`.
    assert limiter.reserve().at == pytest.approx(1001, abs=CLOSE)
    assert limiter.reserve().at == pytest.approx(behind.at + 1, abs=CLOSE)


def test_cancel_once_due_does_nothing(make: Make, clock: ManualClock) -> None:
    """Once due the reservation is spent: its own clock reading says so, the store is not asked."""
    limiter = make(TokenBucket, 1, 1)
    limiter.acquire()
    r = limiter.reserve()
    clock.advance(1.0)
    assert r.cancel() is False
    assert not r.cancelled
    assert limiter.stats().cancelled == 0
    assert limiter.reserve().wait == pytest.approx(1.0, abs=CLOSE)


def test_a_grant_at_once_cannot_be_cancelled(make: Make) -> None:
    """Wait 0 is due at once: nothing to withdraw."""
    limiter = make(TokenBucket, 2, 1)
    r = limiter.reserve()
    assert r.wait == 0.0
    assert r.cancel() is False
    assert limiter.reserve().wait == 0.0
    assert limiter.reserve().wait == pytest.approx(1.0, abs=CLOSE)


def test_cancel_from_many_threads_gives_back_once(make: Make) -> None:
    """Threads racing to cancel one reservation: exactly one of them gives it back."""
    limiter = make(TokenBucket, 1, 1)
    limiter.acquire()
    r = limiter.reserve()
    limiter.reserve()
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def cancel() -> None:
        barrier.wait()
        results.append(r.cancel())

    threads = [threading.Thread(target=cancel) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 15 + [True]
    assert limiter.stats().cancelled == 1


def test_timeout_keeps_nothing_and_says_the_wait(make: Make) -> None:
    """A wait longer than ``timeout`` raises ``AcquireTimeout`` with ``retry_after``; nothing is reserved."""
    limiter = make(TokenBucket, 1, 2)
    limiter.reserve()
    with pytest.raises(AcquireTimeout) as caught:
        limiter.reserve(timeout=0.1)
    assert caught.value.retry_after == pytest.approx(0.5, abs=CLOSE)
    assert limiter.reserve(timeout=timedelta(seconds=0.5)).wait == pytest.approx(0.5, abs=CLOSE)


def test_a_full_leaky_queue_refuses_at_once(make: Make) -> None:
    """An overflowing leaky bucket refuses the reservation, ``retry_after`` saying when it has room."""
    limiter = make(LeakyBucket, 2, 1)
    limiter.reserve(), limiter.reserve()
    with pytest.raises(AcquireTimeout) as caught:
        limiter.reserve()
    assert 0 < caught.value.retry_after <= 1.0 + CLOSE


def test_bad_arguments_are_refused_before_anything_is_reserved(make: Make) -> None:
    """``tokens`` and ``timeout`` are checked as for acquire."""
    limiter = make(TokenBucket, 2, 1)
    for tokens in (0, -1, 3, math.nan, math.inf):
        with pytest.raises(ValueError, match="tokens"):
            limiter.reserve(tokens)
    with pytest.raises(ValueError, match="timeout"):
        limiter.reserve(timeout=-1)
    with pytest.raises(TypeError):
        limiter.reserve("1")
    assert limiter.reserve(2).wait == 0.0


def test_events_see_a_reservation_as_a_grant_with_its_wait(make: Make) -> None:
    """Subscribers see ``Granted`` with the wait, or ``Denied`` with what was needed."""
    limiter = make(TokenBucket, 1, 1)
    seen: list[Event] = []
    limiter.subscribe(seen.append)
    limiter.reserve()
    limiter.reserve()
    with pytest.raises(AcquireTimeout):
        limiter.reserve(timeout=0)
    assert [type(e) for e in seen] == [Granted, Granted, Denied]
    granted = [e for e in seen if isinstance(e, Granted)]
    assert [e.wait for e in granted] == pytest.approx([0.0, 1.0], abs=CLOSE)
    stats = limiter.stats()
    assert stats.granted == 2
    assert stats.denied == 1


def test_a_composite_reserves_all_or_nothing_and_cancels_all(make: Make) -> None:
    """Every member's part is reserved at the latest of their times, and given back together."""
    limiter = make(Composite, [TokenBucket(2, 1), SlidingWindow(10, 1.0)])
    limiter.reserve(), limiter.reserve()
    r = limiter.reserve([1, 1])
    assert r.tokens == (1.0, 1.0)
    assert r.wait == pytest.approx(1.0, abs=CLOSE)
    assert r.cancel()
    assert limiter.reserve().wait == pytest.approx(1.0, abs=CLOSE)


def test_a_composite_holding_slots_has_no_reserve(make: Make) -> None:
    """A composite with a ConcurrencyLimit member refuses reserve with TypeError, as acquire."""
    limiter = Composite([TokenBucket(2, 1), ConcurrencyLimit(2)])
    with pytest.raises(TypeError, match="hold"):
        limiter.reserve()


def test_concurrency_limit_has_no_time_to_reserve() -> None:
    """A count of holders frees at no known time: reserve raises a TypeError saying so."""
    limit = ConcurrencyLimit(3)
    with pytest.raises(TypeError, match="not a rate"):
        limit.reserve()
    with pytest.raises(TypeError, match="not a rate"):
        asyncio.run(limit.reserve_async())


def test_a_shadow_limiter_reserves_but_never_makes_a_caller_wait(make: Make) -> None:
    """Shadow mode: the reservation is recorded and counted, and due at once."""
    limiter = make(TokenBucket, 1, 1, shadow=True)
    assert [limiter.reserve().wait for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve(timeout=0).cancel() is False
    assert limiter.stats().denied == 1


def _elsewhere(call: Callable[[], object]) -> None:
    """Run ``call`` in a thread of its own: another caller, whose grants are not this one's."""
    thread = threading.Thread(target=call)
    thread.start()
    thread.join()


def test_a_settle_names_the_reservation(make: Make, clock: ManualClock) -> None:
    """A reservation is the caller's latest grant, which a settle names, as an acquire's is."""
    limiter = make(TokenBucket, 10, 1)
    limiter.settle(1, 1)  # changes nothing; from now on the limiter remembers whose grant is whose
    _elsewhere(lambda: limiter.acquire(10))
    r = limiter.reserve(4)  # at 1004
    _elsewhere(lambda: limiter.reserve(1))  # queued behind it, at 1005
    clock.advance(4.0)
    # Named: the 3 unused tokens of the grant at 1004 go back though one is queued behind.
    limiter.settle(4, 1)
    assert r.cancel() is False
    assert limiter.reserve(3).at == pytest.approx(1004.0, abs=CLOSE)


def test_a_settle_after_a_cancel_names_nothing(make: Make) -> None:
    """Cancelled, the grant is no one's to settle: the settle gives back unnamed (nothing, with a queue)."""
    limiter = make(TokenBucket, 10, 1)
    limiter.settle(1, 1)
    _elsewhere(lambda: limiter.acquire(10))
    r = limiter.reserve(4)
    _elsewhere(lambda: limiter.reserve(1))
    assert r.cancel()
    limiter.settle(4, 0)
    # Only the withdrawn place (4 tokens at 1004) is free, not twice as much.
    assert limiter.reserve(4).at == pytest.approx(1004.0, abs=CLOSE)
    assert limiter.reserve(4).at == pytest.approx(1009.0, abs=CLOSE)


# -- asyncio ------------------------------------------------------------------------------


def test_reserve_async_is_reserve(make: Make, clock: ManualClock) -> None:
    """The async twin decides alike and cancels alike."""
    limiter = make(TokenBucket, 1, 4)

    async def run() -> None:
        first = await limiter.reserve_async()
        second = await limiter.reserve_async()
        third = await limiter.reserve_async()
        assert [first.wait, second.wait, third.wait] == pytest.approx([0, 0.25, 0.5], abs=CLOSE)
        assert await second.cancel_async() is True
        assert await second.cancel_async() is False
        assert (await limiter.reserve_async()).at == pytest.approx(1000.25, abs=CLOSE)
        with pytest.raises(AcquireTimeout):
            await limiter.reserve_async(timeout=0.1)

    asyncio.run(run())
    assert clock.sleeps == []


async def _settle_down() -> None:
    """Let the give-backs of cancelled tasks land (they run in tasks of their own, made
    by a callback a turn of the loop after the call they follow: so, quiet for a while)."""
    quiet = 0
    for _ in range(1000):
        quiet = quiet + 1 if len(asyncio.all_tasks()) <= 1 else 0
        if quiet >= 5:
            return
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("store", ["memory", "fakeredis", "redis"], indirect=True)
def test_cancelling_reserve_async_at_every_await_keeps_nothing(make: Make, store: str) -> None:
    """A task cancelled at any point of ``reserve_async`` (or holding its reservation) strands nothing."""

    async def run() -> None:
        for steps in range(12):
            limiter = make(TokenBucket, 1, 1)
            limiter.acquire()
            task = asyncio.ensure_future(limiter.reserve_async())
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            try:
                r = await task
            except asyncio.CancelledError:
                pass
            else:
                assert await r.cancel_async()
            await _settle_down()
            # Whatever the moment, the place at 1001 is free again.
            assert (await limiter.reserve_async()).at == pytest.approx(1001.0, abs=CLOSE), steps

    asyncio.run(run())


def test_cancel_async_survives_its_caller_being_cancelled(make: Make) -> None:
    """A cancel_async interrupted while the store records it still gives the place back."""
    limiter = make(TokenBucket, 1, 1)

    async def run() -> None:
        limiter.acquire()
        r = await limiter.reserve_async()
        task = asyncio.ensure_future(r.cancel_async())
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await _settle_down()
        assert r.cancelled
        assert (await limiter.reserve_async()).at == pytest.approx(1001.0, abs=CLOSE)

    asyncio.run(run())


@pytest.mark.stress
def test_ten_thousand_tasks_reserve_distinct_places_in_order(make: Make, store: str) -> None:
    """10,000 tasks (2,000 on the slower stores) reserving at once: each gets its own slot, none twice."""
    count = 10_000 if store in ("memory", "redis") else 2_000
    limiter = make(TokenBucket, 10, 100)

    async def run() -> list[Reservation[float]]:
        return list(await asyncio.gather(*(limiter.reserve_async() for _ in range(count))))

    reservations = asyncio.run(run())
    ats = sorted(r.at for r in reservations)
    expected = [1000.0] * 10 + [1000.0 + (i - 9) / 100 for i in range(10, count)]
    assert ats == pytest.approx(expected, abs=1e-5)
    assert all(r.wait == pytest.approx(r.at - 1000.0, abs=1e-5) for r in reservations)


# -- float limits ---------------------------------------------------------------------------


def test_values_at_float_limits() -> None:
    """Tiny and huge rates and weights give finite, exact-enough reservations; a wait
    too long for a ``datetime`` is due at the latest one there is."""
    clock = ManualClock(1_000.0)
    slow = TokenBucket(1, 1e-9, clock=clock)  # one token a billion seconds, the longest horizon
    reservations = [slow.reserve() for _ in range(300)]
    r = reservations[-1]
    assert r.wait == pytest.approx(299e9)
    assert r.due == datetime.max.replace(tzinfo=timezone.utc)
    assert reservations[-2].cancel()
    assert r.cancel()
    assert slow.reserve().wait == pytest.approx(298e9)
    fast = TokenBucket(1e12, 1e12, clock=clock)
    assert fast.reserve(1e12).wait == 0.0
    assert fast.reserve(5e-7).wait == pytest.approx(5e-19, abs=1e-9)
    small = TokenBucket(1e-6, 1e-6, clock=clock)
    assert small.reserve(1e-6).wait == 0.0
    assert small.reserve(1e-6).wait == pytest.approx(1.0)


# -- an operator's change, and the store down ---------------------------------------------------


@pytest.mark.parametrize("store", ["fakeredis", "redis", "cluster"], indirect=True)
def test_a_reservation_cancelled_after_set_limit_changes_the_limit(make: Make, backend: RedisBackend) -> None:
    """``set_limit`` between the reserve and its cancel: the cancel withdraws from the new limit sanely."""
    clock = ManualClock(1_000.0)
    name = unique_name()
    limiter = make(TokenBucket, 2, 1, name=name, clock=clock)
    limiter.acquire(2)
    r = limiter.reserve()
    behind = limiter.reserve()
    assert (r.at, behind.at) == pytest.approx((1001.0, 1002.0), abs=CLOSE)
    backend.set_limit(name, rate=2.0, clock=clock)
    assert r.cancel()
    # Never more than the new limit allows: nothing goes before the reservations kept.
    nxt = limiter.reserve()
    assert nxt.at >= 1000.0 + CLOSE
    assert nxt.at <= behind.at + 1.0
    backend.set_limit(name, rate=0.5, burst=1, clock=clock)
    assert behind.cancel()
    assert nxt.cancel()
    later = limiter.reserve()
    assert later.wait >= 0
    assert math.isfinite(later.wait)


def _dead(on_unavailable: Any, **options: Any) -> RedisBackend:
    from servers import free_port

    return RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", on_unavailable=on_unavailable, **options)


def test_redis_down_raises_by_default() -> None:
    """The default policy: ``BackendUnavailable``, as for acquire."""
    limiter = TokenBucket(1, 1, backend=_dead("raise"), name=unique_name())
    with pytest.raises(BackendUnavailable):
        limiter.reserve()
    with pytest.raises(BackendUnavailable):
        asyncio.run(limiter.reserve_async())


def test_redis_down_fail_open_grants_at_once_with_nothing_to_cancel() -> None:
    """``on_unavailable="allow"``: due at once, ``at`` unknown (``nan``), nothing to give back."""
    limiter = TokenBucket(1, 1, backend=_dead("allow"), name=unique_name())
    r = limiter.reserve()
    assert r.wait == 0.0
    assert math.isnan(r.at)
    assert r.cancel() is False


def test_redis_down_local_fallback_reserves_this_process_share() -> None:
    """``on_unavailable="local"``: the local fallback reserves at this process's share.

    A cancel reaches the fallback as an acquire's interrupted sleep does: without the
    grant's time (it may be the server's), so with reservations queued it frees
    nothing there; never more than the share goes out."""
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(4, 10, backend=_dead("local", local_share=0.5), name=unique_name(), clock=clock)
    waits = [limiter.reserve().wait for _ in range(4)]
    assert waits == pytest.approx([0, 0, 0.2, 0.4], abs=CLOSE)
    r = limiter.reserve()
    assert r.wait == pytest.approx(0.6, abs=CLOSE)
    assert r.cancel()
    assert limiter.reserve().wait >= 0.6 - CLOSE


# -- the bound and the order, whatever is reserved and cancelled -------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.sampled_from([1.0, 1.0, 2.0, 0.5])),
        st.tuples(st.just("acquire"), st.sampled_from([1.0, 2.0])),
        st.tuples(st.just("cancel"), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.sampled_from([0.01, 0.1, 0.3, 1.0])),
    ),
    max_size=40,
)


def _within_bucket(grants: list[tuple[float, float]], capacity: float, rate: float) -> None:
    grants.sort()
    for i in range(len(grants)):
        total = 0.0
        for j in range(i, len(grants)):
            total += grants[j][1]
            span = grants[j][0] - grants[i][0]
            assert total <= capacity + rate * span + 1e-6, (grants[i], grants[j], total)


def _within_window(grants: list[tuple[float, float]], limit: float, window: float) -> None:
    grants.sort()
    for i, (start, _) in enumerate(grants):
        inside = sum(n for t, n in grants[i:] if t < start + window - 1e-6)
        assert inside <= limit + 1e-6, (start, inside)


def _check(
    limiter: Any,
    clock: ManualClock,
    ops: list[tuple[str, float]],
    bounded: Callable[[list[tuple[float, float]]], None] = lambda grants: _within_bucket(grants, 3.0, 2.0),
) -> None:
    kept: list[tuple[Reservation[float], float]] = []  # (reservation, tokens)
    grants: list[tuple[float, float]] = []
    withdrawn: list[float] = []
    for op, arg in ops:
        if op == "reserve":
            r = limiter.reserve(arg)
            latest = max((k.at for k, _ in kept), default=-math.inf)
            # In arrival order: a later request goes before an earlier one only into a
            # place given back.
            assert r.at >= latest - 1e-6 or any(w >= r.at - 1e-6 for w in withdrawn), (r.at, latest, withdrawn)
            kept.append((r, arg))
        elif op == "acquire":
            limiter.acquire(arg)  # sleeps on the manual clock: time moves
            grants.append((clock.now(), arg))
        elif op == "cancel" and kept:
            r, _ = kept[int(arg) % len(kept)]
            if r.cancel():
                withdrawn.append(r.at)
                kept.remove((r, r.tokens))
        elif op == "advance":
            clock.advance(arg)
    grants += [(r.at, n) for r, n in kept]
    bounded(grants)


@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_reserve_cancel_acquire_never_exceed_the_limit_in_memory(ops: list[tuple[str, float]]) -> None:
    """In process: whatever is reserved, acquired and cancelled, grants stay within the bucket."""
    clock = ManualClock(1_000.0)
    _check(TokenBucket(3, 2, clock=clock), clock, ops)


@settings(max_examples=40, deadline=None)
@given(ops=operations)
def test_reserve_cancel_acquire_never_exceed_the_limit_through_lua(ops: list[tuple[str, float]]) -> None:
    """Through the Lua scripts (fakeredis): the same bound."""
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(3, 2, clock=clock, backend=RedisBackend(fakeredis.FakeRedis()), name=unique_name())
    _check(limiter, clock, ops)


@settings(max_examples=100, deadline=None)
@given(ops=operations)
def test_reserve_cancel_acquire_keep_a_window_in_memory(ops: list[tuple[str, float]]) -> None:
    """An exact sliding window: whatever is reserved, acquired and cancelled, no window holds more than its limit."""
    clock = ManualClock(1_000.0)
    _check(SlidingWindow(3, 1.5, clock=clock), clock, ops, lambda grants: _within_window(grants, 3.0, 1.5))


@settings(max_examples=30, deadline=None)
@given(ops=operations)
def test_reserve_cancel_acquire_keep_a_window_through_lua(ops: list[tuple[str, float]]) -> None:
    """The same through the Lua scripts (fakeredis)."""
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(3, 1.5, clock=clock, backend=RedisBackend(fakeredis.FakeRedis()), name=unique_name())
    _check(limiter, clock, ops, lambda grants: _within_window(grants, 3.0, 1.5))


def test_memory_backend_shares_reservations_by_name() -> None:
    """Two limiters of one name on one MemoryBackend see each other's reservations."""
    backend, clock = MemoryBackend(), ManualClock(0.0)
    a = TokenBucket(1, 1, backend=backend, name="shared", clock=clock)
    b = TokenBucket(1, 1, backend=backend, name="shared", clock=clock)
    assert a.reserve().wait == 0.0
    r = b.reserve()
    assert r.wait == pytest.approx(1.0)
    assert r.cancel()
    assert a.reserve().wait == pytest.approx(1.0)


def test_a_cancel_that_cannot_reach_redis_raises_and_keeps_the_reservation() -> None:
    """With ``on_unavailable="raise"`` a cancel the store never heard raises, and may be tried again."""
    from servers import RedisServer

    with RedisServer() as server:
        clock = ManualClock(1_000.0)
        backend = RedisBackend.from_url(server.url)
        limiter = TokenBucket(1, 1, backend=backend, name=unique_name(), clock=clock)
        limiter.acquire()
        r = limiter.reserve()
        server.stop()
        with pytest.raises(BackendUnavailable):
            r.cancel()
        assert not r.cancelled
        assert limiter.stats().cancelled == 0
        server.start()
        assert r.cancel() is True
        assert r.cancelled
        assert limiter.stats().cancelled == 1
        backend.close()
