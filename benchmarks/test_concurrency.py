"""ConcurrencyLimit: what a hold costs, and script calls per transition under contention.

- in process: ``hold()`` entered and left, uncontended, next to the lock-and-clock
  floor of ``test_memory.py`` (group ``memory-hold``);
- through Redis: an uncontended hold (a take and a release: two script calls) next to
  ``PING`` and an empty ``EVALSHA`` (group ``redis-hold``);
- under contention: 16 threads on 4 slots, each holding a slot for a millisecond; the
  script calls per grant (the target is 2: one take, one release; a waiter is told
  of its grant by the release and makes no call of its own).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from pytest_benchmark.fixture import BenchmarkFixture
from test_redis import REPORT, script_calls

from ratelimit import ConcurrencyLimit, RedisBackend


def measure(benchmark: BenchmarkFixture, call: Callable[[], object], rounds: int, iterations: int) -> None:
    benchmark.pedantic(  # type: ignore[no-untyped-call]
        call, rounds=rounds, iterations=iterations, warmup_rounds=2
    )


@pytest.mark.benchmark(group="memory-hold")
def test_floor_lock_and_monotonic(benchmark: BenchmarkFixture) -> None:
    lock = threading.Lock()
    monotonic = time.monotonic

    def floor() -> None:
        lock.acquire()
        monotonic()
        lock.release()

    measure(benchmark, floor, 300, 1_000)


@pytest.mark.benchmark(group="memory-hold")
def test_hold(benchmark: BenchmarkFixture) -> None:
    limit = ConcurrencyLimit(1_000_000)

    def hold() -> None:
        with limit.hold():
            pass

    measure(benchmark, hold, 300, 1_000)


@pytest.mark.benchmark(group="redis-hold")
def test_floor_ping(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    measure(benchmark, client.ping, 100, 60)


@pytest.mark.benchmark(group="redis-hold")
def test_floor_evalsha_empty(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    sha = client.script_load("return 0")
    measure(benchmark, lambda: client.evalsha(sha, 1, "ratelimit:{bench}:empty"), 100, 60)


@pytest.mark.benchmark(group="redis-hold")
def test_hold_redis(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    limit = ConcurrencyLimit(1_000_000, backend=RedisBackend(client), name=f"hold-{uuid.uuid4().hex[:8]}")

    def hold() -> None:
        with limit.hold():
            pass

    measure(benchmark, hold, 100, 60)


def test_script_calls_per_transition_under_contention(client: redis.Redis) -> None:
    threads, slots, seconds = 16, 4, 1.0
    limit = ConcurrencyLimit(slots, backend=RedisBackend(client), name=f"in-flight-{uuid.uuid4().hex[:8]}")
    grants = [0] * threads
    waited = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        while time.monotonic() < stop:
            started = time.monotonic()
            with limit.hold():
                if time.monotonic() - started > 0.0005:
                    waited[i] += 1
                grants[i] += 1
                time.sleep(0.001)

    before = script_calls(client)
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    calls = script_calls(client) - before
    total = sum(grants)
    REPORT.append(
        f"{'concurrency (16 on 4 slots)':<24} {total:>6} grants  {calls:>6} script calls  "
        f"{calls / total:.3f} per grant ({calls / (2 * total):.3f} per transition; {sum(waited)} grants waited)"
    )
    # A take and a release per grant; waiting adds nothing (renewals run every lease/3).
    assert calls <= 2 * total + threads
