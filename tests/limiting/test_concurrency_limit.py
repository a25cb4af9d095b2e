"""ConcurrencyLimit: never more than max_in_flight held, FIFO, leases, crashes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    ConcurrencyLimit,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    TokenBucket,
)
from ratelimit._algorithms.semaphore import FULL, HELD, QUEUED, Semaphore
from ratelimit._stores.redis.scripts import concurrency_script
from ratelimit._stores.redis.wakeups import CHANNEL_PREFIX

from conftest import REDIS_URL, SUPPORT, unique_name

WORKER = SUPPORT / "concurrency_worker.py"


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


# -- the pure semaphore -------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("renew"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("keep"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("time"), st.integers(0, 40), st.just(False)),
    ),
    max_size=60,
)


@given(ops, st.integers(1, 4))
# A waiter's own heartbeat after its holder's lease ran out: expiry promotes it first.
@example([("take", 0, True), ("time", 20, False), ("take", 1, True), ("time", 28, False), ("keep", 1, False)], 1)
@settings(max_examples=300, deadline=None)
def test_semaphore_never_over_and_first_come_first_served(steps: list[tuple[str, int, bool]], most: int) -> None:
    sem = Semaphore(most, 10.0)
    state = sem.new_state()
    now = 0.0
    #: When each waiter now in the queue arrived there (the step's index).
    arrived: dict[str, int] = {}
    served: list[int] = []
    for i, (op, n, flag) in enumerate(steps):
        name = f"p:{n}"
        promoted: list[str] = []
        if op == "take":
            outcome, promoted = sem.take(state, now, name, flag)
            if outcome == QUEUED and name not in arrived:
                arrived[name] = i
        elif op == "release":
            promoted = sem.release(state, now, name)
        elif op == "renew":
            promoted = sem.renew(state, now, [name])[2]
        elif op == "keep":
            promoted = sem.keep(state, now, [name])[1]
        else:
            now += n / 4
        served += [arrived.pop(p) for p in promoted]
        if op == "keep":
            # Held now whatever it was; after the promotions, since expiry may have
            # promoted this very waiter before its heartbeat put it back.
            arrived.pop(name, None)
        for gone in [p for p in arrived if p not in state.waiters]:
            del arrived[gone]  # ran out, or withdrawn
        # Only the heartbeat may put a held lease back past the limit (it is held).
        assert len(state.holders) <= most or any(o == "keep" for o, _, _ in steps[: i + 1])
        assert not set(state.holders) & set(state.waiters)
    # Every waiter handed a slot arrived after the one handed a slot before it.
    assert served == sorted(served)


def test_release_hands_the_slot_to_the_head_of_the_queue() -> None:
    sem = Semaphore(1, 10.0)
    state = sem.new_state()
    assert sem.take(state, 0, "a:1", True) == (HELD, [])
    assert sem.take(state, 0, "b:1", True) == (QUEUED, [])
    assert sem.take(state, 0, "c:1", True) == (QUEUED, [])
    assert sem.take(state, 0, "d:1", False) == (FULL, [])
    assert sem.release(state, 1, "a:1") == ["b:1"]
    assert sem.release(state, 1, "a:1") == []  # released already: nothing happens
    assert sem.release(state, 2, "b:1") == ["c:1"]


def test_a_lease_that_runs_out_frees_its_slot_and_a_renewed_one_does_not() -> None:
    sem = Semaphore(1, 10.0)
    state = sem.new_state()
    sem.take(state, 0, "a:1", True)
    sem.take(state, 0, "b:1", True)
    assert sem.renew(state, 9, ["a:1", "b:1"]) == (["a:1"], [], [])
    assert sem.take(state, 18, "c:1", False) == (FULL, [])  # renewed at 9: holds until 19
    assert sem.renew(state, 18, ["b:1"]) == ([], [], [])  # b waits on, renewed until 28
    held, lost, promoted = sem.renew(state, 19.5, ["b:1"])
    assert promoted == ["b:1"]
    assert held == ["b:1"]
    assert lost == []
    assert sem.renew(state, 40, ["b:1", "a:1"]) == ([], ["b:1", "a:1"], [])


# -- the Lua twin ---------------------------------------------------------------------


def _redis_backends(request: pytest.FixtureRequest) -> list[tuple[str, Any]]:
    return [("fakeredis", fakeredis.FakeRedis())]


@pytest.mark.parametrize("store", ["fakeredis", "redis", "cluster"])
@given(steps=ops, most=st.integers(1, 4))
@settings(max_examples=40, deadline=None)
def test_lua_twin_decides_as_the_semaphore(
    store: str, steps: list[tuple[str, int, bool]], most: int, request: pytest.FixtureRequest
) -> None:
    client: Any
    if store == "fakeredis":
        client = fakeredis.FakeRedis()
    elif store == "redis":
        client = request.getfixturevalue("redis_client")
    else:
        client = request.getfixturevalue("cluster_client")
    script = concurrency_script()
    key = f"ratelimit:{{{unique_name('twin')}}}:injected:concurrency"
    sem = Semaphore(most, 10.0)
    state = sem.new_state()
    now = 1_000.0
    pubsub = client.pubsub(ignore_subscribe_messages=True) if store == "fakeredis" else None
    for op, n, flag in steps:
        name = f"p:{n}"
        args = [op, repr(now), str(most), "10.0", CHANNEL_PREFIX]
        if op == "take":
            outcome, _ = sem.take(state, now, name, flag)
            reply = script(client, [key], [*args, name, "1" if flag else ""])
            assert reply[0].decode() == outcome
        elif op == "release":
            sem.release(state, now, name)
            script(client, [key], [*args, name])
        elif op == "renew":
            held, lost, _ = sem.renew(state, now, [name])
            reply = [x.decode() for x in script(client, [key], [*args, name])]
            assert reply == [*held, "|", *lost]
        elif op == "keep":
            lost_held, _ = sem.keep(state, now, [name])
            assert [x.decode() for x in script(client, [key], [*args, name])] == lost_held
        else:
            now += n / 4
    if pubsub is not None:
        pubsub.close()


# -- on every store -------------------------------------------------------------------


def test_no_more_than_max_in_flight_and_timeout_holds_nothing(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 2)
    first, second = limit.take(), limit.take()
    with pytest.raises(AcquireTimeout):
        limit.take(timeout=0)
    with pytest.raises(AcquireTimeout) as caught:
        limit.take(timeout=0.05)
    assert caught.value.retry_after >= 0.05
    first.release()
    first.release()  # a second release frees nothing more
    with limit.hold(timeout=0) as third:
        assert not third.released
        with pytest.raises(AcquireTimeout):
            limit.take(timeout=0)  # the timed-out waiter above left nothing behind
    assert third.released
    second.release()
    a, b = limit.take(timeout=0), limit.take(timeout=0)
    a.release()
    b.release()


def test_waiters_are_served_in_arrival_order(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 1)
    holder = limit.take()
    order: list[int] = []
    started: list[threading.Event] = []

    def wait(i: int) -> None:
        with limit.hold(timeout=10):
            order.append(i)

    threads = []
    for i in range(5):
        t = threading.Thread(target=wait, args=(i,))
        t.start()
        threads.append(t)
        # Each is queued before the next arrives.
        deadline = time.monotonic() + 5
        while _queued(limit) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert not order
    holder.release()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert not started


def _queued(limit: ConcurrencyLimit) -> int:
    store: Any = limit._store
    if hasattr(store, "queued"):
        return int(store.queued)
    client = store._backend.client
    return int(client.zcard(store._keys[0] + ":queue"))


@pytest.mark.stress
def test_hundreds_of_threads_never_exceed_the_limit(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 4)
    inside = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(3):
            with limit.hold():
                with lock:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0005)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert 1 <= most <= 4
    limit.take(timeout=0).release()  # everything was given back


@pytest.mark.stress
def test_ten_thousand_tasks_with_cancellations_leave_nothing_held(make: Callable[..., Any], store: str) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 8)
    tasks_n = 10_000 if store == "memory" else 1_000

    async def main() -> int:
        inside = 0
        most = 0

        async def one() -> None:
            nonlocal inside, most
            async with limit.hold():
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0)
                inside -= 1

        tasks = [asyncio.ensure_future(one()) for _ in range(tasks_n)]
        await asyncio.sleep(0.01)
        for t in tasks[::3]:  # cancel a third of them, wherever they are
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return most

    assert asyncio.run(main()) <= 8
    leases = [limit.take(timeout=0) for _ in range(8)]  # all 8 are free again
    with pytest.raises(AcquireTimeout):
        limit.take(timeout=0)
    for lease in leases:
        lease.release()


def test_async_timeout_and_cancellation_while_queued(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 1)

    async def main() -> None:
        holder = await limit.take_async()
        with pytest.raises(AcquireTimeout):
            await limit.take_async(timeout=0.05)
        waiter = asyncio.ensure_future(limit.take_async())
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        nxt = asyncio.ensure_future(limit.take_async(timeout=5))
        await asyncio.sleep(0.05)
        await holder.release_async()
        lease = await nxt  # the cancelled waiter was not in the way
        await lease.release_async()

    asyncio.run(main())


def test_a_dropped_lease_frees_its_slot(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 1)
    limit.take()  # dropped at once, never released
    lease = limit.take(timeout=1)
    lease.release()


def test_validation() -> None:
    with pytest.raises(TypeError, match="max_in_flight"):
        ConcurrencyLimit(2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_in_flight must be >= 1, got 0"):
        ConcurrencyLimit(0)
    with pytest.raises(ValueError, match="lease_seconds"):
        ConcurrencyLimit(1, lease_seconds=-1)
    with pytest.raises(ValueError, match="lease_seconds must be between 1 and"):
        ConcurrencyLimit(1, lease_seconds=0.01)
    with pytest.raises(ValueError, match="lease_seconds must be between 1 and"):
        ConcurrencyLimit(1, lease_seconds=1e10)
    with pytest.raises(ValueError, match="name is required"):
        ConcurrencyLimit(1, backend=RedisBackend(fakeredis.FakeRedis()))
    with pytest.raises(ValueError, match="timeout"):
        ConcurrencyLimit(1).hold(timeout=-1)
    backend = MemoryBackend()
    kept = ConcurrencyLimit(2, backend=backend, name="x")
    with pytest.raises(ValueError, match="max_in_flight=3"):
        ConcurrencyLimit(3, backend=backend, name="x")
    assert kept.max_in_flight == 2


def test_limits_of_one_name_share_their_slots_in_process() -> None:
    backend = MemoryBackend()
    a = ConcurrencyLimit(1, backend=backend, name="shared")
    b = ConcurrencyLimit(1, backend=backend, name="shared")
    with a.hold(), pytest.raises(AcquireTimeout):
        b.take(timeout=0)


def test_a_backend_that_binds_no_slots_is_refused_by_its_type() -> None:
    class RatesOnly:
        """A store of one's own that binds rate limiters and nothing else."""

        shared = False

        def bind(self, *args: object, **options: object) -> None:
            raise AssertionError("a ConcurrencyLimit binds no rate")

    with pytest.raises(TypeError, match="RatesOnly has no bind_slots"):
        ConcurrencyLimit(1, backend=RatesOnly())  # type: ignore[arg-type]


# -- leases in Redis --------------------------------------------------------------------


@pytest.mark.parametrize("store", ["fakeredis", "redis"])
def test_an_unrenewed_lease_runs_out_on_the_store_clock(store: str, request: pytest.FixtureRequest) -> None:
    client = fakeredis.FakeRedis() if store == "fakeredis" else request.getfixturevalue("redis_client")
    clock = ManualClock(1_000.0)
    backend = RedisBackend(client)
    name = unique_name()
    limit = ConcurrencyLimit(1, lease_seconds=10, backend=backend, name=name, clock=clock)
    dead = limit.take()
    limit._beat.discard(dead.name)
    clock.advance(9.9)
    with pytest.raises(AcquireTimeout):
        limit.take(timeout=0)
    clock.advance(0.2)
    fresh = limit.take(timeout=0)
    dead.release()  # ran out already: frees nothing
    with pytest.raises(AcquireTimeout):
        limit.take(timeout=0)
    fresh.release()


@pytest.mark.slow
def test_a_live_holder_keeps_its_slot_past_the_lease(redis_client: Any) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=unique_name())
    with limit.hold():
        deadline = time.monotonic() + 2.5  # two and a half leases long
        while time.monotonic() < deadline:
            with pytest.raises(AcquireTimeout):
                limit.take(timeout=0)
            time.sleep(0.05)
    limit.take(timeout=0).release()


@pytest.mark.slow
def test_a_process_killed_with_sigkill_frees_its_slots_within_the_lease(redis_client: Any) -> None:
    name = unique_name("crash")
    lease = 1.0
    child = subprocess.Popen(
        [sys.executable, str(WORKER), REDIS_URL, name, "2", str(lease), "grab", "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("held 2")
        limit = ConcurrencyLimit(2, lease_seconds=lease, backend=RedisBackend.from_url(REDIS_URL), name=name)
        with pytest.raises(AcquireTimeout):
            limit.take(timeout=0)
        time.sleep(2 * lease)  # alive past its lease, the child still holds both
        with pytest.raises(AcquireTimeout):
            limit.take(timeout=0)
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        first = limit.take(timeout=10)
        second = limit.take(timeout=10)
        freed = time.monotonic() - killed
        # Freed by the lease's end; seen by the waiter within a third of a lease more.
        assert freed <= lease + lease / 3 + 0.5
        first.release()
        second.release()
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


@pytest.mark.slow
def test_real_processes_never_exceed_the_limit_and_cost_one_call_per_transition(redis_client: Any) -> None:
    name = unique_name("procs")
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), REDIS_URL, name, "3", "5", "hold", "4", "2"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    spans = [(s[0], s[1]) for r in results for s in r["spans"]]
    calls = sum(r["calls"] for r in results)
    assert len(spans) > 100
    assert most_at_once(spans) <= 3
    # A take and a release each; waiting adds nothing but a rare renewal.
    assert calls / len(spans) <= 2.1


# -- when Redis is down ------------------------------------------------------------------


class _Down:
    """A client whose every command fails as an unreachable server's would."""

    def __init__(self) -> None:
        import redis

        self._error = redis.exceptions.ConnectionError("down")

    def evalsha(self, *args: Any) -> Any:
        raise self._error

    def eval(self, *args: Any) -> Any:
        raise self._error

    def pubsub(self, **kwargs: Any) -> Any:
        raise self._error


def test_unavailable_store_follows_the_policy() -> None:
    down: Any = _Down()
    raising = ConcurrencyLimit(2, backend=RedisBackend(down), name="down")
    with pytest.raises(BackendUnavailable):
        raising.take(timeout=0)
    allowing = ConcurrencyLimit(1, backend=RedisBackend(down, on_unavailable="allow"), name="down")
    a, b = allowing.take(timeout=0), allowing.take(timeout=0)  # fail open: not counted
    a.release()
    b.release()
    local = ConcurrencyLimit(4, backend=RedisBackend(down, on_unavailable="local", local_share=0.5), name="down")
    c, d = local.take(timeout=0), local.take(timeout=0)
    with pytest.raises(AcquireTimeout):
        local.take(timeout=0)  # this process's share: 2 of 4
    c.release()
    local.take(timeout=0).release()
    d.release()


# -- with rate limits -----------------------------------------------------------------


def test_composite_holds_a_slot_and_takes_the_rate_all_or_nothing(make: Callable[..., Any], clock: ManualClock) -> None:
    both: Composite = make(Composite, [TokenBucket(2, 1), ConcurrencyLimit(1)])
    with pytest.raises(TypeError, match="hold"):
        both.acquire()
    # The slot is taken: a second request times out, and takes no rate token.
    with both.hold(), pytest.raises(AcquireTimeout), both.hold(timeout=0):
        pass
    with both.hold(timeout=0):
        pass  # the second of two tokens: the failed attempt above took none
    # The slot is free, the bucket empty: all or nothing gives the slot back.
    with pytest.raises(AcquireTimeout), both.hold(timeout=0.5):
        pass
    clock.advance(1)
    with both.hold(timeout=0):
        pass


def test_composite_hold_async_gives_everything_back_when_cancelled(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    both: Composite = make(Composite, [TokenBucket(1, 1), ConcurrencyLimit(1)])

    async def main() -> None:
        async with both.hold():
            waiter = asyncio.ensure_future(both.hold().__aenter__())
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        clock.advance(1)
        async with both.hold(timeout=0):
            pass

    asyncio.run(main())


def test_a_composite_needs_a_rate_limit() -> None:
    with pytest.raises(ValueError, match="at least one rate limit"):
        Composite([ConcurrencyLimit(2)])


# -- what an adversary found -------------------------------------------------------------


def test_a_waiter_handed_a_slot_holds_it_only_as_long_as_its_place_would_last() -> None:
    sem = Semaphore(1, 10.0)
    state = sem.new_state()
    sem.take(state, 0, "a:1", True)
    sem.take(state, 0, "b:1", True)  # place until 10; b then dies
    assert sem.release(state, 8, "a:1") == ["b:1"]
    assert state.holders["b:1"] == 10.0  # not 18: a dead waiter blocks one lease at most


def test_a_shared_hold_gives_each_task_and_thread_a_slot_of_its_own(make: Callable[..., Any]) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 2)
    gate = limit.hold()

    async def main() -> int:
        inside = most = 0

        async def one(g: Any) -> None:
            nonlocal inside, most
            async with g:
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.002)
                inside -= 1

        await asyncio.gather(*(one(gate) for _ in range(30)), *(one(limit) for _ in range(30)))
        return most

    assert asyncio.run(main()) == 2
    # As a semaphore, re-entered by one thread: two slots.
    with limit, limit, pytest.raises(AcquireTimeout):
        limit.take(timeout=0)
    limit.take(timeout=0).release()


def test_a_lease_dropped_in_a_reference_cycle_is_freed_without_deadlock(make: Callable[..., Any]) -> None:
    import gc

    limit: ConcurrencyLimit = make(ConcurrencyLimit, 1)

    class Cycle:
        pass

    c = Cycle()
    c.me = c  # type: ignore[attr-defined]
    c.lease = limit.take()  # type: ignore[attr-defined]
    del c
    gc.collect()  # the lease's __del__ runs here: it may not take any lock
    limit.take(timeout=1).release()


def test_cancelling_tasks_anywhere_leaves_nothing_held_in_redis(redis_client: Any) -> None:
    import random

    limit = ConcurrencyLimit(4, backend=RedisBackend.from_url(REDIS_URL), name=unique_name("cancel"))
    key = limit.backend.key(limit.name, "concurrency")  # type: ignore[attr-defined]

    async def main() -> None:
        async def one() -> None:
            async with limit.hold():
                await asyncio.sleep(0.001)

        tasks = [asyncio.ensure_future(one()) for _ in range(600)]
        rng = random.Random(7)
        while not all(t.done() for t in tasks):
            rng.choice(tasks).cancel()
            await asyncio.sleep(rng.random() / 500)
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert redis_client.zcard(key) == 0
    assert redis_client.zcard(key + ":queue") == 0


def test_a_waiter_whose_queue_key_was_evicted_queues_again(redis_client: Any) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=unique_name("evict"))
    key = limit.backend.key(limit.name, "concurrency")  # type: ignore[attr-defined]
    holder = limit.take()
    got: list[float] = []

    def wait() -> None:
        with limit.hold(timeout=5):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 5
    while not redis_client.zcard(key + ":queue") and time.monotonic() < deadline:
        time.sleep(0.01)
    redis_client.delete(key + ":queue")
    holder.release()
    released = time.monotonic()
    waiter.join(10)
    assert got, "the waiter was stranded"
    assert got[0] - released < 1.5  # found at its next look, a third of a lease later


def test_the_heartbeat_puts_back_a_held_lease_the_store_lost(redis_client: Any) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=unique_name("lost"))
    key = limit.backend.key(limit.name, "concurrency")  # type: ignore[attr-defined]
    with limit.hold():
        redis_client.delete(key)  # a restart without persistence, a failover
        time.sleep(0.6)  # a beat (every third of a lease) later
        with pytest.raises(AcquireTimeout):
            limit.take(timeout=0)


def test_a_shorter_lease_never_cuts_the_life_of_a_longer_ones_keys(redis_client: Any) -> None:
    name = unique_name("ttl")
    long = ConcurrencyLimit(1, lease_seconds=60, backend=RedisBackend(redis_client), name=name)
    short = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=name)
    with long.hold():
        with pytest.raises(AcquireTimeout):
            short.take(timeout=0)
        assert redis_client.pttl(long.backend.key(name, "concurrency")) > 30_000  # type: ignore[attr-defined]


class _Flaky:
    """fakeredis whose scripts fail as an unreachable server's would, once ``down``."""

    def __init__(self) -> None:
        import redis

        self.inner = fakeredis.FakeRedis()
        self.down = False
        self._error = redis.exceptions.ConnectionError("down")

    def evalsha(self, *args: Any) -> Any:
        if self.down:
            raise self._error
        return self.inner.evalsha(*args)

    def eval(self, *args: Any) -> Any:
        if self.down:
            raise self._error
        return self.inner.eval(*args)

    def pubsub(self, **kwargs: Any) -> Any:
        # redis-py types pubsub() from 8.2 on, and not before: Any keeps both clean.
        inner: Any = self.inner
        return inner.pubsub(**kwargs)


def test_a_waiter_follows_the_failure_policy_when_redis_goes_down() -> None:
    client: Any = _Flaky()
    limit = ConcurrencyLimit(
        1, lease_seconds=1, backend=RedisBackend(client, on_unavailable="allow"), name=unique_name("down")
    )
    holder = limit.take()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(limit.take(timeout=5) is not None))
    waiter.start()
    time.sleep(0.1)
    client.down = True
    waiter.join(10)
    assert got == [True]  # failed open at its next look, as an acquire would
    client.down = False
    holder.release()


def test_requests_streamed_retry_does_not_wait_on_its_own_slot() -> None:
    from ratelimit import Backoff, Retry
    from ratelimit.requests import session
    from ratelimit.testing import FakeProvider

    slots = ConcurrencyLimit(1)
    retry = Retry(max_attempts=3, backoff=Backoff(base=0.01, max_delay=0.02))
    with FakeProvider(1000, 1.0) as provider, session(retry=retry, concurrency=slots) as http:
        provider.force_status(503, count=1)
        response = http.get(provider.url, stream=True, timeout=5)
        assert response.status_code == 200
        response.close()
    slots.take(timeout=0).release()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_renews_its_own_leases(redis_client: Any) -> None:
    name = unique_name("fork")
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend.from_url(REDIS_URL), name=name)
    limit.take().release()  # the parent's heartbeat thread is running at the fork
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            with limit.hold(timeout=5):
                time.sleep(2.5)  # two and a half leases: renewed by the child's own heartbeat
            code = 0
        finally:
            os._exit(code)
    try:
        other = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=name)
        time.sleep(0.5)
        deadline = time.monotonic() + 1.8
        while time.monotonic() < deadline:
            with pytest.raises(AcquireTimeout):
                other.take(timeout=0)
            time.sleep(0.1)
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_leases_of_a_dropped_limit_are_freed_by_its_heartbeat(redis_client: Any) -> None:
    import gc

    name = unique_name("orphan")
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=RedisBackend(redis_client), name=name)
    key = limit.backend.key(name, "concurrency")  # type: ignore[attr-defined]
    limit.take()  # dropped at once, and the limit with it
    del limit
    gc.collect()
    deadline = time.monotonic() + 3
    while redis_client.zcard(key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.zcard(key) == 0  # freed at the next beat, not renewed for ever
