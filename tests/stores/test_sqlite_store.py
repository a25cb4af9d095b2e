"""The SQLite store: one budget for the processes of one box, in a file.

Every behaviour test parametrised over stores runs on it too (the ``sqlite`` case of
``conftest.py``); here are what only a file has: its decisions held to the pure
algorithms through the rows (two backends on one file standing for two processes),
the fast path and full transactions mixed by processes deciding as full ones alone,
processes, locks, a process killed inside a transaction, the file's time across a
reboot and a wall-clock step, idle names, a forked child's counts for ``ratelimit
top``, keyed rows in ``ratelimit inspect``, and every bad path (``:memory:`` too).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import math
import multiprocessing
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ratelimit._stores.sqlite.backend as sqlite_store
import ratelimit._stores.sqlite.file as sqlite_file
from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    CircuitBreaker,
    CircuitOpen,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    SlidingWindow,
    SQLiteBackend,
    TokenBucket,
)
from ratelimit._algorithms.algorithm import Algorithm, charge_all
from ratelimit._algorithms.holes import Holes, give_back, pace_charge, reserve, restrict, void
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._limiting.front import acquire_level
from ratelimit.cli import main

from conftest import SUPPORT
from scenarios import ALGORITHMS, Request, member_weights, requests, same, take_back

WORKER = SUPPORT / "sqlite_worker.py"
ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False

# -- the same decisions as the pure step, through the rows -----------------------------


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sqlite") / "conformance.db"


_names = iter(range(10**9))


@pytest.mark.parametrize("kind", list(ALGORITHMS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_decisions_through_the_file_match_the_pure_step(store_path: Path, kind: str, scenario: list[Request]) -> None:
    """Two backends on one file (two processes, as far as the rows can tell) take
    turns deciding; every answer is the pure step's, bit for bit."""
    alg: Algorithm[Any] = ALGORITHMS[kind](3.0, 1.0)
    clock = ManualClock(start=1_700_000_000.0)
    name = f"conformance-{next(_names)}"
    handles = [SQLiteBackend(store_path).bind(name, alg, clock) for _ in range(2)]
    states: list[Any] = [alg.new_state()]
    holes = Holes()
    pending: list[tuple[float, float]] = []
    for i, (dt, tokens, max_wait, back, restriction, charged, _) in enumerate(scenario):
        handle = handles[i % 2]
        clock.advance(dt)
        now = clock.now()
        if restriction is not None:
            remaining, seconds = restriction
            states = restrict([alg], states, holes, now, [remaining], now + seconds)
            handle.restrict(remaining, seconds)
        n = min(tokens, 3.0)
        states, wait, at = reserve([alg], states, holes, now, [n], max_wait)
        same(handle.reserve(n, max_wait), (wait, at))
        if wait >= 0:
            pending.append((at, n))
        if charged:
            states = charge_all([alg], states, now, [min(charged, 3.0)])
            void(holes)
            pace_charge(holes, now, min(charged, 3.0))
            named = handle.charge(min(charged, 3.0))
            if alg.slotted:
                assert named == alg.latest(states[0])
                pending.append((named, min(charged, 3.0)))
        given_back = take_back(back, pending, now)
        if given_back is not None:
            at, n = given_back
            states = give_back([alg], states, holes, now, [n], at)
            handles[(i + 1) % 2].refund(n, at)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=requests)
def test_a_composite_through_the_file_matches_the_pure_step(store_path: Path, scenario: list[Request]) -> None:
    """A composite of all four algorithms, decided in one transaction over four rows."""
    algs: list[Algorithm[Any]] = [Gcra(3.0, 1.0), WindowLog(5.0, 4.0), LeakyQueue(6.0, 2.0), WindowCounter(4.0, 2.0)]
    clock = ManualClock(start=1_700_000_000.0)
    name = f"group-{next(_names)}"
    handles = [SQLiteBackend(store_path).bind_group(name, algs, clock) for _ in range(2)]
    states = [alg.new_state() for alg in algs]
    holes = Holes()
    pending: list[tuple[float, Any]] = []
    for i, (dt, tokens, max_wait, back, _, charged, zeros) in enumerate(scenario):
        handle = handles[i % 2]
        clock.advance(dt)
        now = clock.now()
        weights = member_weights(algs, tokens, zeros)
        states, wait, granted = reserve(algs, states, holes, now, weights, max_wait)
        same(handle.reserve(weights, max_wait), (wait, granted))
        if wait >= 0:
            pending.append((granted, weights))
        if charged:
            costs = member_weights(algs, charged, zeros >> 1)
            states = charge_all(algs, states, now, costs)
            void(holes)
            pace_charge(holes, now, costs[0])
            handle.charge(costs)
        given_back = take_back(back, pending, now)
        if given_back is not None:
            at, back_weights = given_back
            states = give_back(algs, states, holes, now, back_weights, at)
            handles[(i + 1) % 2].refund(back_weights, at)


# -- processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_processes_started_at_once_on_a_new_file_share_one_burst(tmp_path: Path) -> None:
    """Eight processes make the file at the same moment and take from one budget:
    exactly its ten tokens are granted among them."""
    path = tmp_path / "new.db"
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "take", str(path), "shared", "5", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in outputs]
    assert sum(int(out) for out, _ in outputs) == 10


@pytest.mark.slow
def test_a_process_killed_inside_a_transaction_loses_nothing(tmp_path: Path) -> None:
    """A process SIGKILLed while holding the write lock, half-way through a write:
    the others wait for the lock, go on once it dies, and find the budget as it was."""
    path = tmp_path / "killed.db"
    limiter = TokenBucket(3, 1e-6, backend=SQLiteBackend(path), name="killed")
    assert limiter.try_acquire()
    holder = subprocess.Popen([sys.executable, str(WORKER), "hold", str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        results: list[float] = []
        waiting = threading.Thread(target=lambda: results.append(limiter.acquire()))
        waiting.start()
        time.sleep(0.2)
        assert not results  # waiting for the lock, not refused for it
        os.kill(holder.pid, signal.SIGKILL)
        waiting.join(10)
        assert results == [0.0]
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    # The dead process's write is gone: one token left of three, no more, no less.
    assert [limiter.try_acquire() for _ in range(2)] == [True, False]
    assert limiter.backend.stats().lock_waits >= 1  # type: ignore[attr-defined]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def _forked_take(path: str, out: Any) -> None:
    limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(path), name="forked")
    out.put(sum(limiter.try_acquire() for _ in range(4)))


@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    """A backend made before a fork works in the child (its own connection) and in
    the parent, on one budget."""
    path = tmp_path / "fork.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1e-6, backend=backend, name="forked")
    assert limiter.try_acquire()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=lambda: out.put(sum(limiter.try_acquire() for _ in range(4))))
    child.start()
    assert out.get(timeout=30) == 4
    child.join(30)
    assert sum(limiter.try_acquire() for _ in range(10)) == 5


# -- locks and unavailability ----------------------------------------------------------


def _hold_lock(path: Path, seconds: float) -> threading.Thread:
    ready = threading.Event()

    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait()
    return thread


def test_contention_waits_for_the_lock_and_is_counted(tmp_path: Path) -> None:
    """A decision with no timeout that finds the file locked waits, and is counted."""
    backend = SQLiteBackend(tmp_path / "s.db")
    limiter = TokenBucket(5, 1, backend=backend, name="busy")
    holder = _hold_lock(tmp_path / "s.db", 0.1)
    assert limiter.acquire() == 0.0
    holder.join()
    stats = backend.stats()
    assert stats.lock_waits == 1
    assert 0.05 < stats.lock_wait_seconds < 5
    assert stats.failures == 0


def test_a_lock_held_past_busy_timeout_makes_the_store_unavailable(tmp_path: Path) -> None:
    """Past busy_timeout: BackendUnavailable naming the file, never sqlite3's error."""
    backend = SQLiteBackend(tmp_path / "s.db", busy_timeout=0.1)
    limiter = TokenBucket(5, 1, backend=backend, name="stuck")
    holder = _hold_lock(tmp_path / "s.db", 0.6)
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="stayed locked") as caught:
            limiter.acquire(timeout=10)  # a timeout past busy_timeout: the store is out
        assert time.monotonic() - started < 0.5
        assert str(tmp_path) in str(caught.value)
    finally:
        holder.join()
    assert limiter.try_acquire()


@contextlib.contextmanager
def _locked_by_another_process(path: Path, seconds: float) -> Iterator[float]:
    """Another process takes ``path``'s write lock and keeps it ``seconds``: the block
    runs while it holds it, given the monotonic time it took it (about)."""
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), "lock", str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        yield time.monotonic()
        assert holder.wait(30) == 0
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["raise", "allow"])
def test_a_timeout_bounds_the_wait_for_another_process_s_lock(tmp_path: Path, policy: str) -> None:
    """Another process holds the file for 1 s: ``acquire(timeout=0.05)`` and
    ``reserve(timeout=0.05)`` are refused (AcquireTimeout) within the timeout and a
    little, and ``try_acquire`` at once; a busy file is not an unavailable one (no
    failure counted, nothing granted without it); nothing is taken from the budget."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path, on_unavailable=policy)  # type: ignore[arg-type]
    limiter = TokenBucket(3, 1e-6, backend=backend, name="held")
    window = SlidingWindow(3, 3600, backend=backend, name="held-window")  # a full transaction
    assert limiter.try_acquire()
    assert window.try_acquire()
    with _locked_by_another_process(path, 1.0) as since:
        for call in (
            lambda: limiter.acquire(timeout=0.05),
            lambda: limiter.reserve(timeout=0.05),
            lambda: window.acquire(timeout=0.05),
        ):
            started = time.monotonic()
            with pytest.raises(AcquireTimeout) as caught:
                call()
            assert time.monotonic() - started < 0.05 + 0.25
            assert caught.value.retry_after >= 0.05  # at least what it waited for the lock
        for tried in (limiter.try_acquire, window.try_acquire):
            started = time.monotonic()
            assert not tried()
            assert time.monotonic() - started < 0.25
        assert time.monotonic() - since < 0.9  # all of it while the lock was held
    assert backend.stats().failures == 0
    assert limiter.stats().denied == 3
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    assert [window.try_acquire() for _ in range(3)] == [True, True, False]


@pytest.mark.slow
def test_threads_by_the_hundred_each_keep_their_timeout_while_another_process_holds_the_file(
    tmp_path: Path,
) -> None:
    """200 threads of one process call ``try_acquire`` (and ``acquire(timeout=0.05)``)
    while another process holds the file for 2 s: they take turns in this process,
    and each is refused within its timeout and a little of its arrival, not after the
    turns of all those before it (each waiting its own 20 ms for the lock)."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(1000, 1e-6, backend=backend, name="crowd")
    assert limiter.try_acquire()
    took: list[float] = []
    answers: list[object] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        started = time.monotonic()
        try:
            answer: object = limiter.try_acquire() if i % 2 else limiter.acquire(timeout=0.05)
        except AcquireTimeout as exc:
            answer = exc
        with lock:
            took.append(time.monotonic() - started)
            answers.append(answer)

    with _locked_by_another_process(path, 2.0) as since:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(200)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert time.monotonic() - since < 1.8  # all of it while the lock was held
    assert len(answers) == 200
    assert all(answer is False or isinstance(answer, AcquireTimeout) for answer in answers)
    assert max(took) < 0.05 + 0.45, sorted(took)[-5:]
    assert backend.stats().failures == 0
    assert limiter.try_acquire()


@pytest.mark.slow
def test_a_concurrency_limit_that_will_not_wait_does_not_wait_for_another_process_s_lock(tmp_path: Path) -> None:
    """``hold(timeout=0)`` while another process holds the file: no slot (AcquireTimeout)
    at once, as ``try_acquire``; nothing left held or queued."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limit = ConcurrencyLimit(2, backend=backend, name="held-slots")
    with limit.hold():
        pass  # the table is made
    with _locked_by_another_process(path, 1.0):
        started = time.monotonic()
        with pytest.raises(AcquireTimeout), limit.hold(timeout=0):
            pass
        assert time.monotonic() - started < 0.25

        async def main() -> None:
            with pytest.raises(AcquireTimeout):
                await limit.take_async(timeout=0)

        started = time.monotonic()
        asyncio.run(main())
        assert time.monotonic() - started < 0.25
    assert backend.stats().failures == 0
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]
    with limit.hold(timeout=0), limit.hold(timeout=0):
        pass


@pytest.mark.slow
def test_a_concurrency_limit_keeps_its_timeout_while_another_process_holds_the_file(tmp_path: Path) -> None:
    """``hold(timeout=0.05)`` and ``take_async(timeout=0.05)`` while another process
    holds the file for 2 s: AcquireTimeout within the timeout and a little (they
    waited for the lock until it was let go, or past ``busy_timeout`` twice and then
    raised BackendUnavailable); nothing left held or queued."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limit = ConcurrencyLimit(2, backend=backend, name="held-slots-timed")
    with limit.hold():
        pass  # the table is made
    with _locked_by_another_process(path, 2.0):
        started = time.monotonic()
        with pytest.raises(AcquireTimeout), limit.hold(timeout=0.05):
            pass
        assert time.monotonic() - started < 0.05 + 0.25

        async def main() -> None:
            with pytest.raises(AcquireTimeout):
                await limit.take_async(timeout=0.05)

        started = time.monotonic()
        asyncio.run(main())
        assert time.monotonic() - started < 0.05 + 0.25
    assert backend.stats().failures == 0
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]
    with limit.hold(timeout=0), limit.hold(timeout=0):
        pass


@pytest.mark.slow
def test_a_queued_hold_keeps_its_timeout_when_another_process_takes_the_file_meanwhile(tmp_path: Path) -> None:
    """A ``hold(timeout=1)`` queued behind this process's holder; another process then
    holds the file for 3 s: AcquireTimeout at about 1 s (the waiter's look at its
    place and its withdrawal each waited for the lock, 3 s), and its withdrawal is
    made once the file is free, leaving the slot to the next holder."""
    path = tmp_path / "s.db"
    limit = ConcurrencyLimit(1, backend=SQLiteBackend(path), name="queued-timed")
    lease = limit.take()
    took: list[float] = []

    def wait_in_the_queue() -> None:
        started = time.monotonic()
        with pytest.raises(AcquireTimeout), limit.hold(timeout=1.0):
            pass
        took.append(time.monotonic() - started)

    waiter = threading.Thread(target=wait_in_the_queue)
    waiter.start()
    while not limit._store.queued:  # type: ignore[attr-defined]
        time.sleep(0.001)
    with _locked_by_another_process(path, 3.0):
        waiter.join()
    assert took[0] < 1.0 + 0.4, took
    lease.release()
    deadline = time.monotonic() + 10
    while limit._store.queued and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)  # the withdrawal's thread
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]
    with limit.hold(timeout=0):
        pass


@pytest.mark.slow
def test_async_calls_keep_their_timeout_while_another_process_holds_the_file(tmp_path: Path) -> None:
    """As their synchronous twins: refused within the timeout and a little, the event
    loop never blocked meanwhile."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(3, 1e-6, backend=backend, name="held-aio")
    assert limiter.try_acquire()

    async def main() -> list[float]:
        took: list[float] = []
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            await limiter.acquire_async(timeout=0.05)
        took.append(time.monotonic() - started)
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            await limiter.reserve_async(timeout=0.05)
        took.append(time.monotonic() - started)
        started = time.monotonic()
        assert not await limiter.try_acquire_async()
        took.append(time.monotonic() - started)
        return took

    with _locked_by_another_process(path, 1.0):
        took = asyncio.run(main())
    assert max(took) < 0.05 + 0.25, took
    assert backend.stats().failures == 0
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


@pytest.mark.slow
def test_asyncio_tasks_by_the_hundred_are_refused_at_once_while_another_process_holds_the_file(
    tmp_path: Path,
) -> None:
    """600 tasks' ``try_acquire_async`` while another process holds the file for 2 s:
    the few threads that wait for the lock serve them in turn, and the time a task
    waits for a thread counts as a wait for the lock: past its 20 ms, it is refused
    at once rather than waiting its 20 ms again after all those before it."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10_000, 1, backend=backend, name="aio-crowd")
    assert limiter.try_acquire()

    async def main() -> list[tuple[float, bool]]:
        started = time.monotonic()

        async def one() -> tuple[float, bool]:
            granted = await limiter.try_acquire_async()
            return time.monotonic() - started, granted

        return list(await asyncio.gather(*(one() for _ in range(600))))

    with _locked_by_another_process(path, 2.0) as since:
        answers = asyncio.run(main())
        assert time.monotonic() - since < 1.8  # all of it while the lock was held
    assert not any(granted for _, granted in answers)
    assert max(took for took, _ in answers) < 1.0
    assert backend.stats().failures == 0


@pytest.mark.slow
def test_a_timeout_is_kept_while_untimed_tasks_hold_every_thread_waiting_for_the_lock(tmp_path: Path) -> None:
    """Another process holds the file for 3 s; 40 tasks wait for it without a timeout,
    each in a thread of asyncio's default executor (a few): a task with ``timeout=0.05``
    behind them is refused within its timeout and a little, not when their waits end
    (it waited for the lock's release, 3 s, or for ``busy_timeout``)."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(100, 1e-6, backend=backend, name="aio-starved")
    assert limiter.try_acquire()

    async def main() -> float:
        untimed = [asyncio.create_task(limiter.acquire_async()) for _ in range(40)]
        await asyncio.sleep(0.1)  # each in its thread, waiting for the lock
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            await limiter.acquire_async(timeout=0.05)
        took = time.monotonic() - started
        await asyncio.gather(*untimed)
        return took

    with _locked_by_another_process(path, 3.0):
        took = asyncio.run(main())
    assert took < 0.05 + 0.5, took
    assert backend.stats().failures == 0
    assert limiter.peek(59) == 0.0  # the 40 granted, nothing else
    assert limiter.peek(60) > 0.0


@pytest.mark.slow
def test_the_wait_for_the_lock_counts_in_the_timeout(tmp_path: Path) -> None:
    """The file held for 1 s, and the next token due in about 3.6 s: an acquire whose
    timeout is 0.4 s short of that would have it past its timeout (the lock, then the
    grant's own wait): refused once it has the lock, rather than decided with its
    whole timeout still to wait."""
    path = tmp_path / "s.db"
    limiter = TokenBucket(1, 0.25, backend=SQLiteBackend(path), name="lock-and-wait")
    assert limiter.try_acquire()
    spent = time.monotonic()
    with _locked_by_another_process(path, 1.0):
        started = time.monotonic()
        due = spent + 4.0 - started
        with pytest.raises(AcquireTimeout):
            limiter.acquire(timeout=due - 0.4)
        assert time.monotonic() - started < 1.0 + 0.3  # at the lock's end
    assert not limiter.try_acquire()  # nothing of the refusal was taken


@pytest.mark.parametrize("policy", ["allow", "local"])
def test_on_unavailable_applies_as_for_redis(tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture) -> None:
    """'allow' grants without the file, 'local' decides at this process's share."""
    backend = SQLiteBackend(tmp_path / "s.db", busy_timeout=0.05, on_unavailable=policy, local_share=0.5)  # type: ignore[arg-type]
    limiter = TokenBucket(4, 1e-6, backend=backend, name="fallback")
    holder = _hold_lock(tmp_path / "s.db", 0.5)

    def granted_within_a_second() -> bool:
        try:
            limiter.acquire(timeout=1)  # past busy_timeout
        except AcquireTimeout:
            return False
        return True

    try:
        granted = [granted_within_a_second() for _ in range(3)]
    finally:
        holder.join()
    stats = backend.stats()
    if policy == "allow":
        assert granted == [True, True, True]
        assert stats.failed_open == 3
    else:
        assert granted == [True, True, False]  # half of a burst of 4
        assert stats.fell_back == 3
    assert "SQLite store unavailable" in caplog.text


def test_a_full_disk_is_a_clear_error(tmp_path: Path) -> None:
    """A write the disk cannot hold: BackendUnavailable that says the disk is full."""
    backend = SQLiteBackend(tmp_path / "full.db")
    limiter = TokenBucket(5, 1, backend=backend, name="first")
    assert limiter.try_acquire()
    conn = backend._file._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    big = Composite([SlidingWindow(10**6, 3600) for _ in range(3)], backend=backend, name="big")

    def fill() -> None:
        for _ in range(3000):
            big.try_acquire()

    with pytest.raises(BackendUnavailable, match="full"):
        fill()
    assert limiter.try_acquire()  # what fits still works


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A filesystem of 4 MB of its own (tmpfs), to fill: mounting one needs root, which
    CI runs as; elsewhere the test is skipped, saying so."""
    if not ROOT or not sys.platform.startswith("linux"):
        pytest.skip("a full disk is made by mounting a tmpfs of 4 MB, which needs root on Linux")
    folder = Path(tempfile.mkdtemp(prefix="rl-disk-", dir="/tmp"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(folder)], capture_output=True, text=True
    )
    # Root that cannot mount (a container without the capability) is a machine this
    # test cannot run on: fail rather than skip, so that CI never passes it unseen.
    assert mounted.returncode == 0, f"cannot mount a tmpfs as root: {mounted.stderr}"
    try:
        yield folder
    finally:
        gc.collect()  # the backends' connections closed before the filesystem goes
        subprocess.run(["umount", str(folder)], check=False, capture_output=True)
        if os.path.ismount(folder):
            subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)
        folder.rmdir()


def _fill(folder: Path) -> Path:
    """Fill the disk holding ``folder`` with a file of zeros; returns the file."""
    filler = folder / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(bytes(65536))
                out.flush()
        except OSError:
            pass
    return filler


def test_a_disk_that_filled_up_serves_again_once_a_little_room_is_made(small_disk: Path) -> None:
    """The disk filled, then 1 MB freed: the WAL, checked in only at 4 MB, grew into the
    room made and filled it again within a few hundred decisions, and every write failed
    from then on. It is checked in and truncated when the disk fills, and checked in
    within the room left from then on: every decision is made again."""
    backend = SQLiteBackend(small_disk / "s.db")
    limiters = [TokenBucket(1e9, 1e9, backend=backend, name=f"n{i}") for i in range(50)]
    for limiter in limiters:
        assert limiter.try_acquire()
    filler = _fill(small_disk)

    def decide_until_full() -> None:
        for _ in range(100):
            for limiter in limiters:
                limiter.try_acquire()

    with pytest.raises(BackendUnavailable, match="full"):
        decide_until_full()
    os.truncate(filler, filler.stat().st_size - 1024 * 1024)
    failed = 0
    for i in range(5000):
        try:
            limiters[i % len(limiters)].try_acquire()
        except BackendUnavailable:
            failed += 1
    assert failed <= 1, f"{failed} of 5000 decisions failed with 1 MB free"
    wal = Path(f"{small_disk / 's.db'}-wal").stat().st_size
    assert wal < 1024 * 1024  # it never takes all the room made
    assert backend.stats().failures >= 1


def test_the_file_deleted_under_a_running_fleet_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleted under two running processes: both move to the new file, one budget again."""
    monkeypatch.setattr(sqlite_file, "CHECK_EVERY", 0.0)
    path = tmp_path / "gone.db"
    a = TokenBucket(4, 1e-6, backend=SQLiteBackend(path), name="gone")
    b = TokenBucket(4, 1e-6, backend=SQLiteBackend(path), name="gone")
    assert a.try_acquire()
    assert b.try_acquire()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert a.try_acquire()
    assert path.exists()
    assert [b.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert "deleted or replaced" in caplog.text


@pytest.mark.skipif(ROOT, reason="root writes any file")
def test_a_file_made_read_only_under_a_running_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only under a running process: BackendUnavailable that says so."""
    monkeypatch.setattr(sqlite_file, "CHECK_EVERY", 0.0)
    path = tmp_path / "ro.db"
    limiter = TokenBucket(4, 1e-6, backend=SQLiteBackend(path), name="ro")
    assert limiter.try_acquire()
    path.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(BackendUnavailable, match=r"read-only|cannot be"):
            limiter.try_acquire()
    finally:
        tmp_path.chmod(0o755)
        path.chmod(0o644)


# -- bad paths ---------------------------------------------------------------------------


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist") as caught:
        SQLiteBackend(tmp_path / "nope" / "s.db")
    assert str(tmp_path / "nope") in str(caught.value)


def test_a_folder_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as caught:
        SQLiteBackend(tmp_path)
    assert str(tmp_path) in str(caught.value)


def test_a_file_that_is_not_a_database_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"my notes, which are not a database\n" * 100)
    with pytest.raises(ValueError, match="is not a SQLite database") as caught:
        SQLiteBackend(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == b"my notes, which are not a database\n" * 100


def test_a_database_that_is_not_ours_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match="not a ratelimit store") as caught:
        SQLiteBackend(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    assert TokenBucket(1, 1, backend=SQLiteBackend(path), name="x").try_acquire()


@pytest.mark.skipif(ROOT, reason="root writes any file")
def test_a_read_only_file_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    SQLiteBackend(path).close()
    path.chmod(0o444)
    with pytest.raises(PermissionError) as caught:
        SQLiteBackend(path)
    assert str(path) in str(caught.value)


def test_a_row_it_did_not_write_runs_nothing(tmp_path: Path) -> None:
    """A row holding a pickle of something else (a file writable by others) is refused
    as unavailable; nothing in it is ever called."""
    backend = SQLiteBackend(tmp_path / "s.db")
    limiter = SlidingWindow(3, 1, backend=backend, name="evil")
    assert limiter.try_acquire()
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE ratelimit_state SET number = NULL, blob = ?", (pickle.dumps((os.system, ("true",))),))
    conn.commit()
    conn.close()
    with pytest.raises(BackendUnavailable, match="did not write"):
        limiter.try_acquire()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"busy_timeout": 0}, ValueError, "busy_timeout"),
        ({"on_unavailable": "maybe"}, ValueError, "on_unavailable"),
        ({"local_share": "auto"}, ValueError, "local_share"),
        ({"local_share": 2}, ValueError, "local_share"),
    ],
)
def test_bad_options_name_themselves(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        SQLiteBackend(tmp_path / "s.db", **kwargs)


def test_bad_paths_and_urls(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="path"):
        SQLiteBackend(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path"):
        SQLiteBackend("")
    with pytest.raises(ValueError, match="sqlite:///"):
        SQLiteBackend.from_url("redis://x")
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/u.db")
    assert backend.path == str(tmp_path / "u.db")
    assert repr(backend) == f"SQLiteBackend({str(tmp_path / 'u.db')!r})"


def test_a_name_is_required_and_leases_are_refused(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    with pytest.raises(ValueError, match="name is required"):
        TokenBucket(1, 1, backend=backend)
    with pytest.raises(ValueError, match="lease"):
        TokenBucket(1, 1, backend=backend, name="x", lease=0.1)


# -- time ----------------------------------------------------------------------------


def test_store_time_survives_a_reboot_and_a_wall_clock_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a reboot (a new boot id, the boot clock from zero) store time continues
    from the latest row, so no limiter is stuck and no budget refills early; a
    wall-clock step within a boot changes nothing."""
    boot = {"id": "boot-a", "seconds": 50_000.0}
    wall = {"now": 1_700_000_000.0}
    monkeypatch.setattr(sqlite_file, "boot_id", lambda: boot["id"])
    monkeypatch.setattr(sqlite_file, "boot_seconds", lambda: boot["seconds"])
    monkeypatch.setattr("ratelimit._stores.sqlite.clock.boot_seconds", lambda: boot["seconds"])
    monkeypatch.setattr("ratelimit._stores.sqlite.clock.time.time", lambda: wall["now"])
    path = tmp_path / "t.db"
    first = SQLiteBackend(path)
    limiter = TokenBucket(2, 0.01, backend=first, name="slow")  # a token per 100 s
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    before = first.now()
    # A wall-clock step of an hour, forwards then backwards: nothing moves.
    wall["now"] += 3600
    assert not limiter.try_acquire()
    wall["now"] -= 7200
    assert not limiter.try_acquire()
    assert first.now() == before
    # The box reboots 10 s later (by the wall clock), its boot clock from 3 s.
    wall["now"] += 3600 + 10
    boot.update(id="boot-b", seconds=3.0)
    after = TokenBucket(2, 0.01, backend=SQLiteBackend(path), name="slow")
    assert after.backend.now() == pytest.approx(before + 10)  # type: ignore[attr-defined]
    assert not after.try_acquire()  # no burst: 10 s of 100 s refilled
    # Not stuck either: the wait is what is left of the 100 s.
    with pytest.raises(AcquireTimeout) as caught:
        after.acquire(timeout=0)
    assert 85 < caught.value.retry_after < 95
    # A wall clock set back across the reboot: time continues from the last write.
    boot.update(id="boot-c", seconds=1.0)
    wall["now"] -= 10**6
    again = SQLiteBackend(path)
    assert again.now() >= before + 10


def test_a_row_is_never_decided_before_its_own_time(tmp_path: Path) -> None:
    """The clamp: a row written ahead of this process's clock (an offset read before a
    rebase) is decided at its own time, never earlier."""
    backend = SQLiteBackend(tmp_path / "s.db")
    limiter = LeakyBucket(2, 1, backend=backend, name="ahead")
    assert limiter.try_acquire()
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE ratelimit_state SET updated = updated + 1000")
    conn.commit()
    conn.close()
    assert limiter.try_acquire()
    conn = sqlite3.connect(tmp_path / "s.db")
    (updated,) = conn.execute("SELECT updated FROM ratelimit_state").fetchone()
    conn.close()
    assert updated >= backend.now() + 999


# -- idle names ----------------------------------------------------------------------


def test_idle_names_are_swept_and_busy_ones_kept(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    quick = [TokenBucket(1, 1000, backend=backend, name=f"tenant-{i}") for i in range(50)]
    for limiter in quick:
        assert limiter.try_acquire()
    slow = TokenBucket(1, 1e-3, backend=backend, name="slow")
    assert slow.try_acquire()
    tested = SlidingWindow(1, 1, backend=backend, name="on-a-test-clock", clock=ManualClock())
    assert tested.try_acquire()
    assert len(backend) == 52
    time.sleep(0.01)  # every quick bucket is whole again
    assert backend.sweep() == 50
    assert len(backend) == 2
    # A name swept decides as it did: it was as good as new.
    assert quick[0].try_acquire()
    assert not slow.try_acquire()


def _rows(path: Path, sql: str, *args: Any) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.commit()
        conn.close()


def test_the_quick_path_moves_idle_and_leaves_forget_to_the_sweep(tmp_path: Path) -> None:
    """A bare token bucket decides in one statement that writes its TAT (``idle``)
    but not ``forget`` (the sweep's index); a sweep at a time between them keeps the
    row and lets ``forget`` catch up, so that the next one skips it."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(100, 1, backend=backend, name="moving")
    for _ in range(5):
        assert limiter.try_acquire()
    ((number, blob, idle, forget),) = _rows(path, "SELECT number, blob, idle, forget FROM ratelimit_state")
    assert blob is None
    assert idle == number
    assert forget == pytest.approx(idle - 4.0, abs=0.01)  # written by the first decision only
    _rows(path, "UPDATE ratelimit_state SET forget = forget - 1000, idle = idle - 1000, number = number - 1000")
    _rows(path, "UPDATE ratelimit_state SET idle = ?1, number = ?1", backend.now() + 60)
    assert backend.sweep() == 0
    ((idle, forget),) = _rows(path, "SELECT idle, forget FROM ratelimit_state")
    assert forget == idle
    assert limiter.peek(100) > 59.0  # the row kept its state


def test_a_sweep_visits_only_the_rows_its_index_names(tmp_path: Path) -> None:
    """100,000 busy names and a few idle ones: the sweep's statements search the
    ``forget`` index (SQLite's plan says so), and forget exactly the idle names."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    now = backend.now()
    busy = [(f"busy-{i}", now + 3600.0) for i in range(100_000)]
    idle = [(f"idle-{i}", now - 1.0) for i in range(7)]
    conn = sqlite3.connect(path)
    conn.executemany(
        "INSERT INTO ratelimit_state (name, member, kind, number, blob, idle, updated, test, forget)"
        " VALUES (?1, -1, 'token_bucket', ?2, NULL, ?2, ?2, 0, ?2)",
        busy + idle,
    )
    conn.commit()
    plans = [
        " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", (now,)))
        for sql in (sqlite_store._SWEEP, sqlite_store._CATCH_UP)
    ]
    conn.close()
    for plan in plans:
        assert "USING INDEX ratelimit_forget (forget<?)" in plan, plan
    assert backend.sweep() == 7
    assert len(backend) == 100_000


def _format_1(path: Path, rows: list[tuple[Any, ...]]) -> None:
    """A file as the first release of the store made it (format 1: no ``forget``)."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE ratelimit_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID")
    conn.execute(
        "CREATE TABLE ratelimit_state (name TEXT NOT NULL, member INTEGER NOT NULL, kind TEXT NOT NULL,"
        " number REAL, blob BLOB, idle REAL NOT NULL, updated REAL NOT NULL, test INTEGER NOT NULL,"
        " PRIMARY KEY (name, member, kind)) WITHOUT ROWID"
    )
    conn.executemany("INSERT INTO ratelimit_meta VALUES (?, ?)", [("format", sqlite_file.FORMAT), ("version", 1)])
    conn.executemany("INSERT INTO ratelimit_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()


def test_a_file_of_format_1_is_migrated_with_its_state(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    wall = time.time()
    # A bucket of 2 tokens at 1 per hour, both spent: its TAT two hours ahead.
    _format_1(path, [("spent", -1, "token_bucket", wall + 7200.0, None, wall + 7200.0, wall, 0)])
    backend = SQLiteBackend(path)
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
    assert _rows(path, "SELECT forget = idle FROM ratelimit_state") == [(1,)]
    assert _rows(path, "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'ratelimit_forget'")
    # The state came through: the spent bucket still refuses, a new name grants.
    assert not TokenBucket(2, 1 / 3600, backend=backend, name="spent").try_acquire()
    assert TokenBucket(2, 1 / 3600, backend=backend, name="fresh").try_acquire()
    assert SQLiteBackend(path).sweep() == 0  # a second process opens format 3 as it is


def _format_2(path: Path, rows: list[tuple[Any, ...]], changes: list[tuple[Any, ...]]) -> None:
    """A file as the release before format 3 made it: its config rows keep no
    replaced change (no ``past``, ``seen``)."""
    _format_1(path, [])
    conn = sqlite3.connect(path)
    conn.executescript(
        "ALTER TABLE ratelimit_state ADD COLUMN forget REAL NOT NULL DEFAULT 0;"
        "ALTER TABLE ratelimit_state ADD COLUMN rate REAL;"
        "ALTER TABLE ratelimit_state ADD COLUMN burst REAL;"
        "CREATE INDEX ratelimit_forget ON ratelimit_state (forget) WHERE test = 0;"
        "CREATE TABLE ratelimit_config (name TEXT PRIMARY KEY, rate REAL, burst REAL, until REAL,"
        " at REAL NOT NULL) WITHOUT ROWID;"
        "UPDATE ratelimit_meta SET value = 2 WHERE key = 'version';"
    )
    conn.executemany("INSERT INTO ratelimit_state VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("INSERT INTO ratelimit_config VALUES (?, ?, ?, ?, ?)", changes)
    conn.commit()
    conn.close()


def test_a_file_of_format_2_is_migrated_with_its_changes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    # On a test clock at 1000: a bucket of 10 at 1/s decided under a change to 2/s
    # with 8 owed (its TAT 4 s ahead), and a change stored for it since (to 4/s at
    # 1000), which no decision has read.
    row = ("moved", -1, "token_bucket", 1004.0, None, 1004.0, 1000.0, 1, 1004.0, 2.0, None)
    _format_2(path, [row], [("moved", 4.0, None, None, 1000.0)])
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
    assert _rows(path, "SELECT rate, burst, until, at, past, seen FROM ratelimit_config") == [
        (4.0, None, None, 1000.0, None, None)
    ]
    # Two changes more, no decision between: the state moves through each, as Redis
    # moves it.
    clock.advance(1.0)
    backend.set_limit("moved", rate=1.0, clock=clock)
    clock.advance(1.0)
    backend.set_limit("moved", rate=100.0, clock=clock)
    assert _rows(path, "SELECT past FROM ratelimit_config") == [
        (json.dumps([[4.0, None, 1000.0], [1.0, None, 1001.0]]),)
    ]
    limiter = TokenBucket(10, 1, backend=backend, name="moved", clock=clock)
    # 2/s to 4/s at 1000 (TAT 1002), to 1/s at 1001 (1005), to 100/s at 1002
    # (1002.03): 3 owed. Moved straight from 2/s to 100/s at 1002, 4 would be.
    assert limiter.try_acquire(7)
    assert not limiter.try_acquire(1)
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]
    clock.advance(0.03)
    assert limiter.try_acquire(3)
    assert SQLiteBackend(path).sweep() == 0  # a second process opens format 3 as it is


def test_changes_kept_are_left_when_a_process_of_the_release_before_decided(tmp_path: Path) -> None:
    """A process still running the release before format 3 decides without reading
    the changes kept, and writes the state row (its ``updated``): the next decision
    then moves the state as that release did, once, not through them again."""
    path = tmp_path / "mixed.db"
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="mixed", clock=clock)
    assert limiter.try_acquire(10)  # 10 owed at 1/s
    backend.set_limit("mixed", rate=10.0, clock=clock)
    clock.advance(0.5)
    backend.set_limit("mixed", rate=0.5, clock=clock)
    assert _rows(path, "SELECT past FROM ratelimit_config") == [(json.dumps([[10.0, None, 1000.0]]),)]
    # The older process: the state moved straight from 1/s to 0.5/s at 1000.5, and
    # written at 1000.6 under the change, as that release writes it.
    _rows(path, "UPDATE ratelimit_state SET number = 1019.5, idle = 1019.5, updated = 1000.6, rate = 0.5")
    clock.advance(0.1)
    # 18.9 s ahead at 0.5/s: 9.45 owed of 10, one token in 0.9 s. Moved through the
    # changes kept once more, 4.7 would be owed.
    assert not limiter.try_acquire(1)
    assert limiter.peek(1) == pytest.approx(0.9)
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]


def test_a_file_of_a_later_format_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _format_1(path, [])
    _rows(path, "UPDATE ratelimit_meta SET value = 4 WHERE key = 'version'")
    before = path.read_bytes()
    with pytest.raises(ValueError, match="format version 4") as caught:
        SQLiteBackend(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before


def test_asyncio_callers_use_the_same_file(tmp_path: Path) -> None:
    limiter = SlidingWindow(5, 60, backend=SQLiteBackend(tmp_path / "s.db"), name="aio")

    async def main() -> list[bool]:
        return list(await asyncio.gather(*(limiter.try_acquire_async() for _ in range(8))))

    assert sorted(asyncio.run(main())) == [False] * 3 + [True] * 5


def _hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another connection (another process, as far as the file can tell) takes the
    write lock and keeps it for ``seconds``; returns once it holds it."""
    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=0)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(5)
    return thread


def _ticks_while_locked(path: Path, action: Callable[[], Awaitable[object]]) -> tuple[list[float], float, float]:
    """Run ``action`` while another connection holds ``path``'s write lock for 0.5 s,
    with a ticker on the same loop: its ticks, and when ``action`` started and ended."""

    async def main() -> tuple[list[float], float, float]:
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        holder = _hold_write_lock(path, 0.5)
        started = time.monotonic()
        await action()
        ended = time.monotonic()
        ticking.cancel()
        holder.join()
        return ticks, started, ended

    return asyncio.run(main())


def _assert_the_loop_kept_ticking(ticks: list[float], started: float, ended: float) -> None:
    assert ended - started >= 0.3  # it did wait for the lock
    during = [t for t in ticks if started <= t <= ended]
    assert len(during) >= 10  # about 50 on a quiet machine
    gaps = [b - a for a, b in zip([started, *during], [*during, ended], strict=True)]
    assert max(gaps) < 0.25


def test_an_async_decision_waits_for_the_lock_off_the_event_loop(tmp_path: Path) -> None:
    """The file locked by another for 0.5 s: the task waits for it in a thread, and a
    ticker on the same loop keeps ticking meanwhile."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="aio-locked")
    assert limiter.try_acquire()  # the row exists: the next decision is the fast path's

    ticks, started, ended = _ticks_while_locked(path, limiter.acquire_async)
    _assert_the_loop_kept_ticking(ticks, started, ended)
    assert backend.stats().lock_waits >= 1


def test_a_task_cancelled_while_waiting_for_the_lock_gives_its_grant_back(tmp_path: Path) -> None:
    """The thread that waits for the lock cannot be stopped: the grant it then makes
    for the cancelled task is given back, and no token is lost."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(1, 1e-6, backend=backend, name="aio-cancelled")
    assert limiter.peek() == 0.0

    async def main() -> None:
        holder = _hold_write_lock(path, 0.5)
        task = asyncio.create_task(limiter.acquire_async())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.join()
        deadline = time.monotonic() + 10
        while limiter.stats().cancelled < 1 or await limiter.peek_async() != 0.0:
            assert time.monotonic() < deadline, "the grant made for the cancelled task was never given back"
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert backend.stats().lock_waits >= 1
    assert limiter.try_acquire()  # the one token, given back
    assert not limiter.try_acquire()


def test_hundreds_of_threads_never_exceed_the_budget(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    limiters = [TokenBucket(50, 1e-6, backend=backend, name="threads") for _ in range(4)]
    granted: list[bool] = []

    def run(i: int) -> None:
        granted.append(limiters[i % 4].try_acquire())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 50
    assert not math.isnan(backend.now())


# -- the circuit breaker ----------------------------------------------------------------


@pytest.mark.slow
def test_a_breaker_opened_by_one_process_is_open_for_the_others(tmp_path: Path) -> None:
    """The breaker's state is a row: two backends on one file (two processes) see one
    circuit, and with the file locked past busy_timeout each goes on locally."""
    clock = ManualClock(start=1_000.0)
    path = tmp_path / "b.db"
    options: dict[str, Any] = {"min_calls": 2, "failure_threshold": 0.5, "cooldown": 10, "name": "api", "clock": clock}
    first = CircuitBreaker(backend=SQLiteBackend(path), **options)
    second = CircuitBreaker(backend=SQLiteBackend(path, busy_timeout=0.05, on_unavailable="allow"), **options)
    for _ in range(2):
        ticket = first.allow()
        first.record(ticket, ok=False)
    opened = second.state
    assert opened == "open"
    with pytest.raises(CircuitOpen):
        second.allow()
    clock.advance(10)
    assert second.state == "half_open"
    holder = _hold_lock(path, 0.3)
    try:
        assert second.allow() is not None  # its own state: closed, never told of the outage
    finally:
        holder.join()
    assert isinstance(second.backend, SQLiteBackend)
    assert second.backend.stats().failures == 1


def test_a_breakers_async_calls_wait_for_the_lock_off_the_event_loop(tmp_path: Path) -> None:
    """A breaker's transitions are transactions on the file too: the file locked by
    another for 0.5 s, the loop keeps ticking while allow_async and record_async wait."""
    path = tmp_path / "b.db"
    breaker = CircuitBreaker(backend=SQLiteBackend(path), name="aio-breaker", min_calls=2, cooldown=10)
    breaker.record(breaker.allow(), ok=True)  # the row exists

    async def allow_and_record() -> None:
        await breaker.record_async(await breaker.allow_async(), ok=False)

    ticks, started, ended = _ticks_while_locked(path, allow_and_record)
    _assert_the_loop_kept_ticking(ticks, started, ended)
    assert breaker.stats().failures == 1


# -- the command line -------------------------------------------------------------------


@pytest.mark.slow
def test_bench_and_inspect_take_a_sqlite_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ratelimit bench --store sqlite:///PATH`` runs its workers on the file, and
    ``ratelimit inspect --store`` shows what it keeps."""
    url = f"sqlite:///{tmp_path}/bench.db"
    assert main(["bench", "--store", url, "--processes", "2", "--threads", "2", "--seconds", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"].startswith("SQLite file")
    assert report["grants"] > 0
    assert main(["inspect", "--store", url, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["limiters"]
    assert row["kind"] == "token_bucket"
    assert main(["inspect", "--store", url, "nobody"]) == 1
    assert main(["inspect", "--store", f"sqlite:///{tmp_path}/missing/x.db"]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--store", "redis://x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--store takes a SQLite file" in err
    assert "sqlite:////srv/app/x.db (four slashes)" in err


# -- the fast path and the full transaction mixed by processes; top, paths, inspect ---

_mixed_steps = st.lists(
    st.tuples(
        st.sampled_from(["reserve", "reserve", "reserve", "refund", "pause", "charge", "set", "reset", "time"]),
        st.integers(0, 3),  # which handle: two per backend, two backends (processes) on one file
        st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.5, 3.0]),
        st.sampled_from([0.0, 0.5, 2.0, math.inf]),
        st.sampled_from([None, 0.5, 2.0, 6.0]),
        st.sampled_from([None, 1.0, 5.0]),
        st.sampled_from([None, 0.5, 3.0]),
    ),
    max_size=50,
)
_mixed_numbers = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_mixed_steps)
def test_quick_and_full_decisions_mixed_across_processes_decide_as_full_transactions(
    tmp_path: Path, steps: list[tuple[str, int, float, float, float | None, float | None, float | None]]
) -> None:
    """Four handles of one bucket on two backends of one file (two processes, two
    handles each), the fast path on, against one handle deciding every call in a full
    transaction on a file of its own: refunds (holes), pauses, charges and changes at
    run time (with ends) come and go between the decisions; every answer is the same."""
    name = f"mixed-{next(_mixed_numbers)}"
    clock = ManualClock(start=1_700_000_000.0)
    alg = Gcra(3.0, 1.0)
    backends = [SQLiteBackend(tmp_path / "mixed.db") for _ in range(2)]
    handles = [backends[i // 2].bind(name, alg, clock) for i in range(4)]
    alone = SQLiteBackend(tmp_path / "alone.db")
    full = alone.bind(name, alg, clock)
    full._fast_path = None  # every decision in a full transaction
    granted: list[tuple[float, float]] = []
    for what, which, tokens, max_wait, rate, burst, ttl in steps:
        handle, backend = handles[which], backends[which // 2]
        if what == "reserve":
            expected = full.reserve(tokens, max_wait)
            got = handle.reserve(tokens, max_wait)
            assert got[0] == expected[0]
            assert got[1] == expected[1] or (math.isnan(got[1]) and math.isnan(expected[1]))
            if got[0] >= 0:
                granted.append((got[1], tokens))
        elif what == "refund" and granted:
            at, back = granted.pop()
            full.refund(back, at)
            handle.refund(back, at)
        elif what == "pause":
            remaining = 0.0 if tokens < 1 else 1.0
            full.restrict(remaining, 2.0)
            handle.restrict(remaining, 2.0)
        elif what == "charge":
            assert handle.charge(tokens) == full.charge(tokens)
        elif what == "set" and (rate is not None or burst is not None):
            alone.set_limit(name, rate=rate, burst=burst, ttl=ttl, clock=clock)
            backend.set_limit(name, rate=rate, burst=burst, ttl=ttl, clock=clock)
        elif what == "reset":
            assert backend.reset_limit(name, clock=clock) == alone.reset_limit(name, clock=clock)
        elif what == "time":
            clock.advance(tokens)
        assert handle.peek(1.0) == full.peek(1.0)


def _child_decides(limiter: TokenBucket, backend: SQLiteBackend) -> None:
    for _ in range(3):
        assert limiter.try_acquire()
    backend.write_counts()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_counts_only_its_own_decisions_for_top(tmp_path: Path) -> None:
    """A pool's worker forked after its parent decided counts, for ``ratelimit top``,
    only its own decisions, not the parent's still unwritten ones again."""
    backend = SQLiteBackend(tmp_path / "top.db")
    limiter = TokenBucket(100, 1, backend=backend, name="pool")
    for _ in range(5):
        assert limiter.try_acquire()
    child = multiprocessing.get_context("fork").Process(target=_child_decides, args=(limiter, backend))
    child.start()
    child.join(20)
    assert child.exitcode == 0
    # The whole seconds of the last 5 before a moment 2 s from now: every decision above.
    (row,) = backend.top(window=5.0, now=backend.now() + 2.0)
    assert row.grants_per_sec is not None
    assert round(row.grants_per_sec * 5.0) == 8


def test_memory_is_not_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's name for a private database is refused, pointing to the memory store:
    no file called ``:memory:`` is made in the working folder, where no other process
    would find it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="MemoryBackend"):
        SQLiteBackend(":memory:")
    with pytest.raises(ValueError, match="MemoryBackend"):
        SQLiteBackend.from_url("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []


def test_inspect_tells_a_keyed_budget_from_its_name_s_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ratelimit inspect --store`` lists names, as on Redis, and ``--key`` shows one
    key's budget."""
    path = tmp_path / "keys.db"
    limiter = TokenBucket(3, 1, backend=SQLiteBackend(path), name="geocode")
    limiter.try_acquire()
    limiter.for_key("tenant-7").try_acquire()
    assert main(["inspect", "--store", f"sqlite:///{path}"]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("geocode")]
    assert heads == ["geocode  (token_bucket)"]
    assert main(["inspect", "geocode", "--key", "tenant-7", "--store", f"sqlite:///{path}"]) == 0
    assert capsys.readouterr().out.startswith("geocode key tenant-7  (token_bucket)")


# -- what the code configured, kept for inspect ----------------------------------------


def test_inspect_tells_the_code_the_limit_in_force_and_what_could_go_now(tmp_path: Path) -> None:
    """A single limiter's first decision keeps what its code configured, and inspect
    works out from it and the row what Redis's peek tells: the parameters in force,
    the most one request could take now, the wait for one token, the grants ahead."""
    backend = SQLiteBackend(tmp_path / "s.db")
    limiter = TokenBucket(5, 1 / 3600, backend=backend, name="api")
    assert limiter.try_acquire(3)
    seen = backend.inspect("api")
    assert seen.kind == "token_bucket"
    assert seen.code == {"capacity": 5.0, "refill_per_sec": 1 / 3600}
    assert seen.effective == seen.code
    assert (seen.slack, seen.shadow) == (0.0, False)
    assert seen.available == pytest.approx(2.0, abs=0.01)
    assert seen.wait_for_one == 0.0
    assert seen.promised_ahead == 0.0
    assert limiter.try_acquire(2)
    reservation = limiter.reserve(1, timeout=7200)  # one token more: an hour ahead
    seen = backend.inspect("api")
    assert seen.available == pytest.approx(0.0, abs=1e-6)
    assert seen.wait_for_one == pytest.approx(7200.0, abs=5.0)
    assert seen.promised_ahead == pytest.approx(3600.0, abs=5.0)
    reservation.cancel()


def test_inspect_follows_a_change_the_guard_shadow_and_each_kind(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    bucket = TokenBucket(10, 1, backend=backend, name="changed", shadow=True)
    assert bucket.try_acquire()
    backend.set_limit("changed", rate=2.0, burst=4.0)
    seen = backend.inspect("changed")
    assert seen.code == {"capacity": 10.0, "refill_per_sec": 1.0}
    assert seen.effective == {"capacity": 4.0, "refill_per_sec": 2.0}
    assert seen.shadow is True
    # The state moved to the new limit as a peek moves it: 1 owed of 4.
    assert seen.available == pytest.approx(3.0, abs=0.01)
    guarded = TokenBucket(10, 1, backend=backend, name="guarded", guard=0.5)
    assert guarded.try_acquire()
    seen = backend.inspect("guarded")
    assert seen.slack == 0.5
    assert seen.code == {"capacity": 9.5, "refill_per_sec": 1.0}
    window = SlidingWindow(5, 3600, backend=backend, name="window")
    assert window.try_acquire(2)
    seen = backend.inspect("window")
    # A window keeps its default guard: its length as the script is given it.
    assert (seen.kind, seen.code) == ("sliding_window", {"limit": 5.0, "window": 3600.0 + seen.slack})
    assert seen.available == pytest.approx(3.0)
    assert seen.wait_for_one == 0.0


def test_inspect_of_a_key_s_budget_reads_its_own_code_and_composites_keep_none(tmp_path: Path) -> None:
    """A keyed budget's code is its own; a composite and a budget with priorities
    keep none, as on Redis (whose scripts for them write none)."""
    backend = SQLiteBackend(tmp_path / "s.db")
    limiter = TokenBucket(3, 1 / 60, backend=backend, name="keyed")
    assert limiter.for_key("tenant-7").try_acquire()
    seen = backend.inspect("keyed", key="tenant-7")
    assert seen.code == {"capacity": 3.0, "refill_per_sec": 1 / 60}
    assert seen.available == pytest.approx(2.0, abs=0.01)
    assert not backend.inspect("keyed").known
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=backend, name="pair").acquire()
    TokenBucket(10, 1, low_share=0.5, backend=backend, name="lanes").acquire()
    for name in ("pair", "lanes"):
        seen = backend.inspect(name)
        assert seen.known
        assert (seen.kind, seen.code, seen.available) == (None, None, None)
    assert {each.name for each in backend.inspect_all()} == {"pair", "lanes"}


def test_the_code_is_written_once_per_handle_and_again_after_a_sweep(tmp_path: Path) -> None:
    """Not at each decision: the fast path never writes it. A sweep forgets it with
    the name's last state row, and the next decision writes it again."""
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(100, 1, backend=backend, name="once")
    assert limiter.try_acquire()
    assert _rows(path, "SELECT name, kind, p1, p2, slack, shadow FROM ratelimit_code") == [
        ("once", "token_bucket", 100.0, 1.0, 0.0, 0)
    ]
    _rows(path, "DELETE FROM ratelimit_code")
    for _ in range(5):
        assert limiter.try_acquire()
    assert _rows(path, "SELECT name FROM ratelimit_code") == []  # decided without it
    assert TokenBucket(100, 1, backend=backend, name="once").try_acquire()  # another handle: its first
    assert _rows(path, "SELECT name FROM ratelimit_code") == [("once",)]
    _rows(path, "UPDATE ratelimit_state SET forget = forget - 1000, idle = idle - 1000, number = number - 1000")
    assert backend.sweep() == 1
    assert _rows(path, "SELECT name FROM ratelimit_code") == []
    assert not backend.inspect("once").known
    assert limiter.try_acquire()  # a fresh row: the code with it
    assert _rows(path, "SELECT name FROM ratelimit_code") == [("once",)]
    assert backend.inspect("once").code == {"capacity": 100.0, "refill_per_sec": 1.0}


def test_a_file_without_the_code_table_gets_it_and_keeps_its_format(tmp_path: Path) -> None:
    """A file of format 3 made by a release before the table (and so one that such a
    process re-creates): the table is made where this release opens it, the format
    stays 3 (which that release opens as it is), and its rows are decided as before."""
    path = tmp_path / "before.db"
    SQLiteBackend(path).close()
    _rows(path, "DROP TABLE ratelimit_code")
    wall = time.time()
    _rows(
        path,
        "INSERT INTO ratelimit_state (name, member, kind, number, blob, idle, updated, test, forget)"
        " VALUES ('spent', -1, 'token_bucket', ?1, NULL, ?1, ?2, 0, ?1)",
        wall + 7200.0,
        wall,
    )
    backend = SQLiteBackend(path)
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
    assert _rows(path, "SELECT name FROM sqlite_master WHERE name = 'ratelimit_code'") == [("ratelimit_code",)]
    seen = backend.inspect("spent")  # a row no process of this release has decided yet
    assert (seen.kind, seen.code, seen.available) == ("token_bucket", None, None)
    limiter = TokenBucket(2, 1 / 3600, backend=backend, name="spent")
    assert not limiter.try_acquire()
    seen = backend.inspect("spent")
    assert seen.code == {"capacity": 2.0, "refill_per_sec": 1 / 3600}
    assert seen.available == pytest.approx(0.0, abs=1e-3)


def test_a_code_row_written_by_hand_gives_its_kind_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path)
    assert TokenBucket(5, 1, backend=backend, name="hand").try_acquire()
    _rows(path, "UPDATE ratelimit_code SET p1 = -3")
    seen = backend.inspect("hand")
    assert (seen.kind, seen.code, seen.available) == ("token_bucket", None, None)
    _rows(path, "UPDATE ratelimit_code SET kind = 'mystery', p1 = 5")
    assert backend.inspect("hand").kind == "mystery"


def test_a_spent_allowance_in_real_time_refuses_as_on_every_store(tmp_path: Path) -> None:
    """A TokenBucket(n, 0) spent, on the real clock (its decisions counted for
    ``ratelimit top``): refused, never an error from the count of a grant never due."""
    bucket = TokenBucket(1, 0, backend=SQLiteBackend(tmp_path / "store.db"), name="allowance")
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(timeout=5)
    assert caught.value.retry_after == math.inf
    with pytest.raises(AcquireTimeout):
        acquire_level(bucket, 1, 0)

    async def scenario() -> None:
        assert not await bucket.try_acquire_async()
        with pytest.raises(AcquireTimeout):
            await bucket.acquire_async()

    asyncio.run(scenario())
