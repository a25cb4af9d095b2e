"""ConcurrencyLimit holds left somewhere else than where they were entered.

A ``with`` block inside a generator is left wherever the generator is closed: in
another thread, in another task (an ``async for`` broken early, then closed by the
loop's finaliser or by ``aclose()`` from elsewhere), in a forked child. Every slot
must come back, exactly once, and no more than ``max_in_flight`` may be held.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import random
import sys
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import fakeredis
import pytest

from ratelimit import AcquireTimeout, Composite, ConcurrencyLimit, ManualClock, RedisBackend, TokenBucket

from conftest import REDIS_URL, unique_name

Make = Callable[..., Any]

#: How a block is entered: ``with limit:``, one ``hold()`` shared by every block,
#: or a ``hold()`` of its own per block.
HOW = ["limit", "shared hold", "own hold"]


def free_slots(limit: ConcurrencyLimit) -> int:
    """How many slots can be taken now (each is given back at once)."""
    leases: list[Any] = []
    with contextlib.suppress(AcquireTimeout):
        while len(leases) <= limit.max_in_flight:
            leases.append(limit.take(timeout=0))
    for lease in leases:
        lease.release()
    return len(leases)


def entering(limit: ConcurrencyLimit, how: str) -> Callable[[], Any]:
    shared = limit.hold()
    return {"limit": lambda: limit, "shared hold": lambda: shared, "own hold": limit.hold}[how]


def held_in_redis(limit: ConcurrencyLimit) -> int:
    store: Any = limit._store
    return int(store._backend.client.zcard(store._keys[0]))


# -- left in another thread -------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_a_block_left_in_another_thread_frees_its_slot(make: Make, how: str) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 3)
    holder = entering(limit, how)

    def streaming() -> Generator[int, None, None]:
        with holder():
            yield 1

    for _ in range(3):
        started = streaming()
        next(started)
        closer = threading.Thread(target=started.close)  # a worker pool stops reading
        closer.start()
        closer.join(10)
    assert free_slots(limit) == 3


def test_a_block_left_in_another_thread_is_not_renewed_in_redis(redis_client: Any) -> None:
    limit = ConcurrencyLimit(3, lease_seconds=1, backend=RedisBackend(redis_client), name=unique_name("gen"))

    def streaming() -> Generator[int, None, None]:
        with limit:
            yield 1

    gens = [streaming() for _ in range(3)]
    for g in gens:
        next(g)
    assert held_in_redis(limit) == 3
    threads = [threading.Thread(target=g.close) for g in gens]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert held_in_redis(limit) == 0  # released by the exit, not left to a heartbeat
    time.sleep(0.7)  # two beats: nothing renewed back
    assert held_in_redis(limit) == 0


# -- left by another task ----------------------------------------------------------


@pytest.mark.parametrize(
    "closer",
    # The finaliser's case waits 0.2 s of real time per generator for the loop to run it.
    ["aclose in another task", pytest.param("the loop's finaliser", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("how", HOW)
def test_a_block_left_by_another_task_frees_its_slot(make: Make, how: str, closer: str) -> None:
    limit: ConcurrencyLimit = make(ConcurrencyLimit, 3)
    holder = entering(limit, how)

    async def streaming() -> AsyncGenerator[int, None]:
        async with holder():
            yield 1

    async def main() -> None:
        for _ in range(3):
            gen = streaming()
            async for _ in gen:
                break  # the consumer stops reading early
            if closer == "aclose in another task":
                await asyncio.create_task(gen.aclose())
            else:
                del gen
                gc.collect()
                for _ in range(20):
                    await asyncio.sleep(0.01)

    asyncio.run(main())
    assert free_slots(limit) == 3


@pytest.mark.parametrize("how", ["hold", "shared hold"])
@pytest.mark.parametrize("where", ["thread", "task"])
def test_a_composite_block_left_elsewhere_frees_its_slots(make: Make, how: str, where: str) -> None:
    slots: ConcurrencyLimit = make(ConcurrencyLimit, 3)
    both = make(Composite, [TokenBucket(1_000, 1_000), slots])
    shared = both.hold()

    def holder() -> Any:
        return shared if how == "shared hold" else both.hold()

    def streaming() -> Generator[int, None, None]:
        with holder():
            yield 1

    async def streaming_async() -> AsyncGenerator[int, None]:
        async with holder():
            yield 1

    async def main() -> None:
        for _ in range(3):
            agen = streaming_async()
            async for _ in agen:
                break
            await asyncio.create_task(agen.aclose())

    if where == "thread":
        for _ in range(3):
            gen = streaming()
            next(gen)
            closer = threading.Thread(target=gen.close)
            closer.start()
            closer.join(10)
    else:
        asyncio.run(main())
    with both.hold(timeout=0), both.hold(timeout=0), both.hold(timeout=0), pytest.raises(AcquireTimeout):
        both.hold(timeout=0).__enter__()


# -- a forked child ------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_leaving_the_block_keeps_the_parents_slot(redis_client: Any) -> None:
    name = unique_name("forked")
    limit = ConcurrencyLimit(2, lease_seconds=1, backend=RedisBackend.from_url(REDIS_URL), name=name)
    other = ConcurrencyLimit(2, lease_seconds=1, backend=RedisBackend(redis_client), name=name)
    parent = os.getpid()
    taken = limit.take()
    try:
        with limit.hold():
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                # It drops the lease it inherited, looks for a slot (which frees the
                # leases dropped meanwhile), and exits through the block.
                del taken
                gc.collect()
                with contextlib.suppress(AcquireTimeout):
                    limit.take(timeout=0).release()
                sys.exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0
            assert held_in_redis(limit) == 2  # both still the parent's
            with pytest.raises(AcquireTimeout):
                other.take(timeout=0)
            time.sleep(0.7)  # the parent's heartbeat still renews both
            assert held_in_redis(limit) == 2
    finally:
        if os.getpid() != parent:  # pragma: no cover - the child, unwound
            os._exit(0)
    assert held_in_redis(limit) == 1
    taken.release()
    assert held_in_redis(limit) == 0


# -- never left -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hold", "composite hold", "async generator on a closed loop", "outside any loop"])
def test_a_hold_collected_inside_its_block_is_not_renewed(redis_client: Any, kind: str) -> None:
    limit = ConcurrencyLimit(2, lease_seconds=1, backend=RedisBackend(redis_client), name=unique_name("drop"))
    both = Composite([TokenBucket(1_000, 1_000), limit], backend=RedisBackend(redis_client), name=unique_name("drop"))
    slots: ConcurrencyLimit = both._slots[0]
    watched = slots if kind == "composite hold" else limit
    if kind == "hold":
        limit.hold().__enter__()  # entered, never left, dropped at once
    elif kind == "composite hold":
        both.hold().__enter__()
    else:

        async def streaming() -> AsyncGenerator[int, None]:
            async with limit.hold():
                yield 1

        async def first(gen: AsyncGenerator[int, None]) -> int:
            return await gen.__anext__()

        loop = asyncio.new_event_loop()
        gen = streaming()
        # Started on the loop, the generator is closed by the loop's finaliser, which
        # does nothing once the loop is closed (without shutting its generators
        # down): its block is never left. Started outside, it is closed when
        # collected, with no loop to await its release on.
        loop.run_until_complete(first(gen) if kind == "async generator on a closed loop" else gen.__anext__())
        loop.close()
        del gen
    gc.collect()
    deadline = time.monotonic() + 5
    while held_in_redis(watched) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held_in_redis(watched) == 0  # freed, not renewed by the heartbeat
    assert free_slots(watched) == 2


@pytest.mark.parametrize("how", ["limit", "own hold", "composite hold"])
def test_a_slot_outlives_asyncio_run_closing_the_loop(make: Make, how: str) -> None:
    """A holder cancelled inside its block, then ``asyncio.run`` returning at once: the
    loop's shutdown cancels the release too (its task never ran), and the slot must
    still come back (it stayed held, in Redis until its lease ran out)."""
    if how == "composite hold":
        both = make(Composite, [TokenBucket(100, 100), make(ConcurrencyLimit, 1)])
        slots: ConcurrencyLimit = both._slots[0]
        enter: Callable[[], Any] = both.hold
    else:
        slots = make(ConcurrencyLimit, 1)
        enter = entering(slots, how)

    async def scenario() -> None:
        inside = asyncio.Event()

        async def holder() -> None:
            async with enter():
                inside.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(holder())
        await inside.wait()
        task.cancel()

    asyncio.run(scenario())
    deadline = time.monotonic() + 5
    while free_slots(slots) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # the release's thread
    assert free_slots(slots) == 1


# -- the heartbeat ------------------------------------------------------------------


def test_a_release_racing_the_heartbeat_is_not_put_back(redis_client: Any) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=3, backend=RedisBackend(redis_client), name=unique_name("race"))
    lease = limit.take()
    store: Any = limit._store
    keep = store.keep
    beats: list[float] = []

    def racing(names: list[str]) -> list[str]:
        # The holder leaves while the beat that read its lease is on its way to Redis.
        lease.release()
        lost: list[str] = keep(names)
        beats.append(time.monotonic())
        return lost

    store.keep = racing
    deadline = time.monotonic() + 5
    while not beats and time.monotonic() < deadline:
        time.sleep(0.01)
    assert beats
    deadline = time.monotonic() + 0.5
    while held_in_redis(limit) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held_in_redis(limit) == 0  # not put back for another lease
    limit.take(timeout=0).release()


@pytest.mark.slow
def test_a_waiter_on_a_stalled_loop_keeps_its_place_and_its_grant(redis_client: Any) -> None:
    # A waiter renews its place itself, from its task; an event loop that runs late
    # (10,000 tasks on a loaded box) renews it late. Promoted with a place about to
    # run out, it lost its slot before it could run, and another took it: both ran
    # (16 in flight on 8). The heartbeat renews the places of late waiters.
    clock = ManualClock(start=1_000.0)
    name = unique_name("stalled")
    limit = ConcurrencyLimit(1, lease_seconds=3, backend=RedisBackend(redis_client), name=name, clock=clock)
    other = ConcurrencyLimit(1, lease_seconds=3, backend=RedisBackend(redis_client), name=name, clock=clock)
    key: str = limit._store._keys[0]  # type: ignore[attr-defined]
    holder = limit.take()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    gate = threading.Event()
    waiter = asyncio.run_coroutine_threadsafe(limit.take_async(timeout=10), loop)
    try:
        deadline = time.monotonic() + 5
        while not redis_client.zcard(key + ":queue") and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.call_soon_threadsafe(gate.wait)  # the loop stalls
        clock.advance(2.9)  # the place, taken at 1000, would run out at 1003
        deadline = time.monotonic() + 5
        while (redis_client.zscore(key + ":expiry", redis_client.zrange(key + ":queue", 0, 0)[0]) or 0) < 1_005:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        holder.release()  # the stalled waiter is handed the slot
        clock.advance(0.6)
        with pytest.raises(AcquireTimeout):
            other.take(timeout=0).release()
    finally:
        gate.set()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(waiter.result(15).release_async(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
    assert held_in_redis(limit) == 0


@pytest.mark.slow
def test_a_waiter_on_a_stalled_loop_keeps_its_place_in_a_sqlite_file(tmp_path: Any) -> None:
    """The same in a SQLite file: the heartbeat renews the place of a waiter whose
    loop is stalled, and the slot it is then handed outlasts the stall."""
    import sqlite3

    from ratelimit import SQLiteBackend

    clock = ManualClock(start=1_000.0)
    path = tmp_path / "stalled.db"
    limit = ConcurrencyLimit(1, lease_seconds=3, backend=SQLiteBackend(path), name="stalled", clock=clock)
    other = ConcurrencyLimit(1, lease_seconds=3, backend=SQLiteBackend(path), name="stalled", clock=clock)
    look = sqlite3.connect(path)

    def place_until() -> float:
        row = look.execute("SELECT max(until) FROM ratelimit_slots WHERE held = 0").fetchone()
        return float(row[0] or 0)

    holder = limit.take()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    gate = threading.Event()
    waiter = asyncio.run_coroutine_threadsafe(limit.take_async(timeout=10), loop)
    try:
        deadline = time.monotonic() + 5
        while not place_until() and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.call_soon_threadsafe(gate.wait)  # the loop stalls
        clock.advance(2.9)  # the place, taken at 1000, would run out at 1003
        deadline = time.monotonic() + 5
        while place_until() < 1_005 and time.monotonic() < deadline:
            time.sleep(0.05)
        holder.release()  # the stalled waiter is handed the slot
        clock.advance(0.6)
        with pytest.raises(AcquireTimeout):
            other.take(timeout=0).release()
    finally:
        gate.set()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(waiter.result(15).release_async(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
        look.close()
    assert free_slots(other) == 1


# -- attacks ------------------------------------------------------------------------


@pytest.mark.stress
def test_hundreds_of_threads_closing_each_others_generators(make: Make, store: str) -> None:
    most = 5
    limit: ConcurrencyLimit = make(ConcurrencyLimit, most)
    both = make(Composite, [TokenBucket(10_000, 10_000), make(ConcurrencyLimit, most)])
    shared, shared_both = limit.hold(), both.hold()
    holders = [lambda: limit, lambda: shared, limit.hold, lambda: shared_both, both.hold]
    inside = {"limit": 0, "both": 0}
    peak = {"limit": 0, "both": 0}
    lock = threading.Lock()
    handed: queue.SimpleQueue[Generator[int, None, None] | None] = queue.SimpleQueue()

    def streaming(pick: int) -> Generator[int, None, None]:
        which = "both" if pick >= 3 else "limit"
        with holders[pick]():
            with lock:
                inside[which] += 1
                peak[which] = max(peak[which], inside[which])
            try:
                yield 1
                yield 2
            finally:
                with lock:
                    inside[which] -= 1

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3):
            gen = streaming(rng.randrange(len(holders)))
            next(gen)
            if rng.random() < 0.5:
                handed.put(gen)  # closed by another thread
            else:
                gen.close()

    def closer() -> None:
        while (gen := handed.get()) is not None:
            gen.close()

    closers = [threading.Thread(target=closer) for _ in range(20)]
    producers = [threading.Thread(target=producer, args=(i,)) for i in range(200 if store == "memory" else 60)]
    for t in closers + producers:
        t.start()
    for t in producers:
        t.join(120)
    for _ in closers:
        handed.put(None)
    for t in closers:
        t.join(120)
    assert peak["limit"] <= most
    assert peak["both"] <= most
    assert free_slots(limit) == most
    assert free_slots(both._slots[0]) == most


@pytest.mark.stress
def test_thousands_of_tasks_whose_generators_are_closed_elsewhere(make: Make, store: str) -> None:
    most = 8
    limit: ConcurrencyLimit = make(ConcurrencyLimit, most)
    shared = limit.hold()
    holders: list[Callable[[], Any]] = [lambda: limit, lambda: shared, limit.hold]
    inside = peak = 0

    async def streaming(pick: int) -> AsyncGenerator[int, None]:
        nonlocal inside, peak
        async with holders[pick]():
            inside += 1
            peak = max(peak, inside)
            try:
                yield 1
                await asyncio.sleep(0)
                yield 2
            finally:
                inside -= 1

    async def consumer(i: int, rng: random.Random) -> None:
        gen = streaming(i % len(holders))
        async for _ in gen:
            break  # stops reading early
        way = rng.random()
        if way < 0.3:
            await asyncio.create_task(gen.aclose())
        elif way < 0.6:
            await gen.aclose()
        else:
            del gen  # the loop's finaliser closes it

    async def main() -> None:
        rng = random.Random(3)
        n = 10_000 if store == "memory" else 1_000
        tasks = [asyncio.create_task(consumer(i, rng)) for i in range(n)]
        await asyncio.sleep(0.01)
        for task in rng.sample(tasks, n // 4):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        gc.collect()
        for _ in range(1_000):  # the finaliser's closes land
            if not limit._live:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert peak <= most
    assert free_slots(limit) == most


def test_cancelled_at_any_await_of_a_hold_leaves_nothing_held(make: Make, store: str) -> None:
    most = 2
    limit: ConcurrencyLimit = make(ConcurrencyLimit, most)
    both = make(Composite, [TokenBucket(10_000, 10_000), make(ConcurrencyLimit, most)])
    inside = peak = 0

    async def one(holder: Any) -> None:
        nonlocal inside, peak
        async with holder:
            inside += 1
            peak = max(peak, inside)
            try:
                await asyncio.sleep(0)
            finally:
                inside -= 1

    async def main() -> None:
        for k in range(40):
            for holder in (limit, limit.hold(), both.hold()):
                tasks = [asyncio.create_task(one(holder)) for _ in range(most + 2)]
                # Steps of the loop first, then real time (a store's round trips).
                for _ in range(k % 20):
                    await asyncio.sleep(0)
                await asyncio.sleep(0 if k < 20 else (k - 20) / 4_000)
                for task in tasks[::2]:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        # Releases cancelled mid-way go on by themselves: let them land.
        for _ in range(1_000):
            if not (limit._live or both._slots[0]._live):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert peak <= most
    assert free_slots(limit) == most
    assert free_slots(both._slots[0]) == most


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_closing_inherited_generators_frees_nothing_of_its_parent(redis_client: Any) -> None:
    name = unique_name("forkgen")
    limit = ConcurrencyLimit(3, lease_seconds=1, backend=RedisBackend.from_url(REDIS_URL), name=name)
    other = ConcurrencyLimit(3, lease_seconds=1, backend=RedisBackend(redis_client), name=name)

    def streaming() -> Generator[int, None, None]:
        with limit:
            yield 1

    gen = streaming()
    next(gen)
    entered, leave = threading.Event(), threading.Event()

    def holding() -> None:
        with limit.hold():
            entered.set()
            leave.wait(30)

    holder = threading.Thread(target=holding)
    holder.start()
    entered.wait(10)
    parent = os.getpid()
    try:
        with limit.hold():
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 0
                try:
                    limit.take(timeout=0)  # all three are the parent's
                    code = 1
                except AcquireTimeout:
                    pass
                gen.close()  # an inherited generator's block, left in the child
                if code:
                    os._exit(code)
                sys.exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0
            assert held_in_redis(limit) == 3
            with pytest.raises(AcquireTimeout):
                other.take(timeout=0)
    finally:
        if os.getpid() != parent:  # pragma: no cover - the child, unwound
            os._exit(0)
    leave.set()
    holder.join(10)
    gen.close()
    assert held_in_redis(limit) == 0
    assert free_slots(other) == 3


def test_a_take_cancelled_on_its_way_to_redis_is_released_after_it_lands() -> None:
    backend = RedisBackend(fakeredis.FakeRedis())
    limit = ConcurrencyLimit(1, backend=backend, name=unique_name("landing"))
    run = backend.run

    def slow(script: Any, keys: Any, args: Any) -> Any:
        if args[0] == "take":
            time.sleep(0.2)  # a slow round trip, in a thread nobody can stop
        return run(script, keys, args)

    backend.run = slow  # type: ignore[method-assign]

    async def main() -> None:
        taking = asyncio.create_task(limit.take_async())
        await asyncio.sleep(0.05)
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        await asyncio.sleep(0.4)  # the take lands, then its release

    asyncio.run(main())
    assert held_in_redis(limit) == 0
