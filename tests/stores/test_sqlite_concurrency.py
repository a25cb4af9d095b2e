"""ConcurrencyLimit in a SQLite file: slots shared by the processes of one box.

The behaviour tests of the backend matrix run on the ``sqlite`` store too; here is
what only a file shared by processes has: the SQL twin held to the pure semaphore,
the wake sockets that wake a waiter of another process (beside the file, abstract
ones for paths too long, a folder removed, stale and forged wake messages, rows
naming sockets that are not wake sockets), a holder killed with SIGKILL, FIFO across processes, a
forked child, and ten thousand asyncio tasks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    ConcurrencyLimit,
    Lease,
    ManualClock,
    SQLiteBackend,
)
from ratelimit._algorithms.semaphore import Semaphore
from ratelimit._stores.records import Slots
from ratelimit._stores.sqlite import slots as sqlite_slots
from ratelimit._stores.sqlite.wake_sockets import WakeSockets, folder_of
from ratelimit._stores.waiting import Waiting
from ratelimit.cli import main

from conftest import SUPPORT

WORKER = SUPPORT / "sqlite_slots_worker.py"

# -- the SQL twin decides as the pure semaphore -------------------------------------------

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

_names = iter(range(10**9))


@pytest.fixture(scope="module")
def twin_backend(tmp_path_factory: pytest.TempPathFactory) -> SQLiteBackend:
    return SQLiteBackend(tmp_path_factory.mktemp("twin") / "twin.db")


@given(steps=ops, most=st.integers(1, 4))
@settings(max_examples=100, deadline=None)
def test_the_sql_twin_decides_as_the_semaphore(
    twin_backend: SQLiteBackend, steps: list[tuple[str, int, bool]], most: int
) -> None:
    clock = ManualClock(1_000.0)
    rows = twin_backend.slot_rows(f"twin{next(_names)}", None, most, 10.0, clock)
    sem = Semaphore(most, 10.0)
    state = sem.new_state()
    for op, n, flag in steps:
        name = f"p:{n}"
        now = clock.now()
        if op == "take":
            outcome, promoted = sem.take(state, now, name, flag)
            assert rows.take(name, flag, "socket") == (outcome, [(p, "socket") for p in promoted])
        elif op == "release":
            promoted = sem.release(state, now, name)
            assert [p for p, _ in rows.release(name)] == promoted
        elif op == "renew":
            held, lost, promoted = sem.renew(state, now, [name])
            got = rows.renew([name])
            assert (got[0], got[1], [p for p, _ in got[2]]) == (held, lost, promoted)
        elif op == "keep":
            lost, promoted = sem.keep(state, now, [name])
            got_lost, got_promoted = rows.keep([name])
            assert (got_lost, [p for p, _ in got_promoted]) == (lost, promoted)
        else:
            clock.advance(n / 4)
        assert rows.counts() == (len(state.holders), len(state.waiters))


def test_rows_of_a_limit_no_process_uses_again_are_tidied(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "tidy.db")
    forgotten = backend.slot_rows("forgotten", None, 1, 0.001, None)
    assert forgotten.take("dead:1", False)[0] == "held"  # its holder dies: never released
    on_a_test_clock = backend.slot_rows("tested", None, 1, 0.001, ManualClock(1.0))
    on_a_test_clock.take("dead:2", False)
    time.sleep(0.01)
    sqlite_slots._tidy_at.clear()  # due now
    backend.slot_rows("other", None, 1, 10.0, None).take("live:1", False)
    assert forgotten.counts() == (0, 0)
    assert on_a_test_clock.counts() == (1, 0)  # test clocks' rows are left alone


# -- wake sockets -----------------------------------------------------------------------


def _holding_all(leases: Any) -> list[str]:
    return list(leases)


def _holding_none(leases: Any) -> list[str]:
    return []


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    path = tmp_path / "store.db"
    SQLiteBackend(path)
    return str(path)


@pytest.fixture
def opened() -> Iterator[list[WakeSockets]]:
    """Wake sockets a test opens, closed after it."""
    made: list[WakeSockets] = []
    yield made
    for sockets in made:
        sockets.close()


def test_a_wake_message_wakes_a_waiter_the_file_confirms(store_file: str, opened: list[WakeSockets]) -> None:
    sockets = WakeSockets(store_file)
    opened.append(sockets)
    woken, forged = Waiting(), Waiting()
    address = sockets.expect("elsewhere:1", woken, _holding_all)
    assert address is not None
    assert address == os.path.join(folder_of(store_file), address.rpartition("/")[2])
    assert sockets.expect("elsewhere:2", forged, _holding_none) == address
    # Leases of another process: sent a wake message, as another process would.
    sockets.wake([("elsewhere:1", address), ("elsewhere:2", address)])
    assert woken.wait(5.0)
    assert not forged.wait(0.3)  # a wake message the file does not confirm wakes nobody
    sockets.forget("elsewhere:2")


def test_a_path_too_long_for_af_unix_gets_an_abstract_wake_socket(tmp_path: Path, opened: list[WakeSockets]) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "store.db")
    SQLiteBackend(path)
    sockets = WakeSockets(path)
    opened.append(sockets)
    waiting = Waiting()
    address = sockets.expect("elsewhere:1", waiting, _holding_all)
    if not sys.platform.startswith("linux"):
        assert address is None
        return
    assert address is not None
    assert address.startswith("@")
    sockets.wake([("elsewhere:1", address)])
    assert waiting.wait(5.0)


def test_dead_processes_wake_sockets_are_tidied_and_share_the_files_mode(
    store_file: str, opened: list[WakeSockets]
) -> None:
    os.chmod(store_file, 0o664)
    folder = folder_of(store_file)
    os.mkdir(folder)
    # A wake socket left by a process killed with SIGKILL: a socket file nobody listens behind.
    stale = os.path.join(folder, "0" * 16)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(stale)
    dead.close()
    other_stale = os.path.join(folder, "1" * 16)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(other_stale)
    dead.close()
    sockets = WakeSockets(store_file)
    opened.append(sockets)
    address = sockets.expect("elsewhere:1", Waiting(), _holding_none)
    assert address is not None
    assert not os.path.exists(stale)
    assert not os.path.exists(other_stale)
    assert stat.S_IMODE(os.stat(address).st_mode) == 0o664
    sockets.forget("elsewhere:1")
    # A wake message to a wake socket whose process died removes it.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(stale)
    dead.close()
    sockets.wake([("elsewhere:2", stale)])
    assert not os.path.exists(stale)


def test_a_new_folder_of_wake_sockets_is_open_to_whoever_may_write_the_file(
    tmp_path: Path, opened: list[WakeSockets]
) -> None:
    path = tmp_path / "shared.db"
    SQLiteBackend(path)
    os.chmod(path, 0o666)
    sockets = WakeSockets(str(path))
    opened.append(sockets)
    sockets.expect("elsewhere:1", Waiting(), _holding_none)
    mode = os.stat(folder_of(str(path))).st_mode
    assert stat.S_IMODE(mode) == 0o777 | stat.S_ISVTX
    sockets.forget("elsewhere:1")


# -- in one process -----------------------------------------------------------------------


def test_timeouts_and_cancellations_leave_the_queue_empty(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "q.db")
    limit = ConcurrencyLimit(1, backend=backend, name="q")

    async def main() -> None:
        holder = await limit.take_async()
        waiters = [asyncio.ensure_future(limit.take_async(timeout=None if i % 2 else 0.3)) for i in range(10)]
        await asyncio.sleep(0)  # each runs to its wait (nothing before it suspends)
        assert limit._store.queued == 10  # type: ignore[attr-defined]
        for task in waiters[1::2]:
            task.cancel()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, (AcquireTimeout, asyncio.CancelledError)) for r in results)
        assert limit._store.queued == 0  # type: ignore[attr-defined]
        await holder.release_async()

    asyncio.run(main())
    assert limit._store.held == 0  # type: ignore[attr-defined]


@pytest.mark.stress
def test_ten_thousand_tasks_on_one_limit(tmp_path: Path) -> None:
    limit = ConcurrencyLimit(8, backend=SQLiteBackend(tmp_path / "many.db"), name="many")
    inside = most = done = 0

    async def one() -> None:
        nonlocal inside, most, done
        async with limit.hold():
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0)
            inside -= 1
            done += 1

    async def main() -> None:
        tasks = [asyncio.ensure_future(one()) for _ in range(10_000)]
        await asyncio.sleep(0.05)
        for task in tasks[::3]:  # a third cancelled, wherever they are
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert 1 <= most <= 8
    assert done >= 10_000 * 2 // 3
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]


# -- processes ------------------------------------------------------------------------------


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the worker said nothing: {proc.communicate(timeout=10)[1]}")
    return line.strip()


def _wait_queued(limit: ConcurrencyLimit, count: int) -> None:
    deadline = time.monotonic() + 20
    while limit._store.queued < count:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the worker never queued"
        time.sleep(0.01)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.slow
def test_a_holder_killed_with_sigkill_gives_its_slots_back_after_its_lease(tmp_path: Path) -> None:
    path = str(tmp_path / "killed.db")
    lease = 2.0
    limit = ConcurrencyLimit(2, lease_seconds=lease, backend=SQLiteBackend(path), name="killed")
    holder = _start(path, "killed", "2", str(lease), "grab", "2")
    try:
        assert _line(holder) == "held 2"
        with pytest.raises(AcquireTimeout):
            limit.take(timeout=0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        first = limit.take(timeout=10)  # waits, not polling: woken when the lease runs out
        second = limit.take(timeout=10)
        back = time.monotonic() - killed
    finally:
        _stop([holder])
    # Its leases were renewed every lease / 3 until it died: back within a lease of it.
    assert back <= lease + 1.0
    first.release()
    second.release()


@pytest.mark.slow
def test_waiters_of_three_processes_are_served_in_arrival_order_and_woken_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "fifo.db")
    # A lease of a minute: a waiter looks by itself only every 20 s, so each prompt
    # handoff below was a wake message.
    lease = "60"
    limit = ConcurrencyLimit(1, lease_seconds=60, backend=SQLiteBackend(path), name="fifo")
    holder = limit.take()
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, flavour in enumerate(["thread", "async", "thread"]):
            procs.append(_start(path, "fifo", "1", lease, "wait", "0.05", *(["async"] if flavour == "async" else [])))
            assert _line(procs[-1]) == "waiting"
            _wait_queued(limit, i + 1)
        released = time.monotonic()
        holder.release()
        got = [float(_line(proc).split()[1]) for proc in procs]
        for proc in procs:
            assert proc.wait(20) == 0
    finally:
        _stop(procs)
    assert got == sorted(got)
    # Each handoff (a release in one process, the waiter woken in the next) well
    # before the 20 s a waiter would sleep without a wake message.
    gaps = [got[0] - released] + [b - a - 0.05 for a, b in itertools.pairwise(got)]
    assert max(gaps) < 3.0, gaps
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


@pytest.mark.slow
def test_threads_of_three_processes_never_hold_more_than_the_limit(tmp_path: Path) -> None:
    path = str(tmp_path / "busy.db")
    limit = ConcurrencyLimit(4, backend=SQLiteBackend(path), name="busy")
    started = time.monotonic()
    procs = [_start(path, "busy", "4", "30", "loop", "4", "2") for _ in range(3)]
    try:
        spans = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    finally:
        _stop(procs)
    assert all(proc.returncode == 0 for proc in procs)
    # Every process was served (no waiter left for its own look, 10 s away)...
    assert all(len(mine) >= 20 for mine in spans), [len(mine) for mine in spans]
    assert time.monotonic() - started < 9.0
    # ... and never more than 4 slots held at once among the 12 threads.
    assert _most_at_once([(a, b) for mine in spans for a, b in mine]) <= 4
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_folder_of_wake_sockets_removed_while_waiters_queue_costs_them_no_time(tmp_path: Path) -> None:
    """200 holds of 20 ms on 3 slots by 8 processes of one thread, the folder of wake
    sockets removed (a cleaner of old files) twice while waiters queue: each is bound
    again at once and its waiters look at the file then, so the holds take about the
    1.4 s they take without it; waiters whose wake messages went nowhere once waited for their
    own look (10 s with the default lease), 15-29 s in all."""
    folder = tempfile.mkdtemp(prefix="rl-", dir="/tmp")  # short: wake sockets are socket files, not abstract
    try:
        path = os.path.join(folder, "store.db")
        limit = ConcurrencyLimit(3, backend=SQLiteBackend(path), name="cleaned")
        procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), path, "cleaned", "3", "30", "holds", "1", "25", "0.02"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(8)
        ]
        try:
            assert [_line(proc) for proc in procs] == ["ready"] * 8
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            started = time.monotonic()
            for at in (0.3, 0.7):
                time.sleep(max(0.0, started + at - time.monotonic()))
                shutil.rmtree(folder_of(path), ignore_errors=True)
            spans = [json.loads(proc.communicate(timeout=120)[0]) for proc in procs]
        finally:
            _stop(procs)
        assert all(proc.returncode == 0 for proc in procs)
        every = [(a, b) for mine in spans for a, b in mine]
        assert len(every) == 200
        took = max(b for _, b in every) - min(a for a, _ in every)
        assert took < 4.0, f"200 holds of 20 ms on 3 slots took {took:.1f} s"
        assert _most_at_once(every) <= 3
        assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _forked_waiter(limit: ConcurrencyLimit, out: Any) -> None:
    with limit.hold(timeout=20):
        out.put(time.monotonic())


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_waits_behind_a_wake_socket_of_its_own(tmp_path: Path) -> None:
    limit = ConcurrencyLimit(1, lease_seconds=60, backend=SQLiteBackend(tmp_path / "fork.db"), name="forked")
    holder = limit.take()
    # A waiter of the parent first: the parent's wake socket is open when the child is forked.
    order: list[Lease] = []
    parent_waiter = threading.Thread(target=lambda: order.append(limit.take(timeout=20)))
    parent_waiter.start()
    _wait_queued(limit, 1)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_forked_waiter, args=(limit, out))
    child.start()
    try:
        _wait_queued(limit, 2)
        holder.release()
        parent_waiter.join(20)
        assert order
        released = time.monotonic()
        order[0].release()
        assert out.get(timeout=20) - released < 3.0  # a wake message to the child's own wake socket
        child.join(20)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
    assert limit._store.held == 0  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_waiter_sleeps_until_the_first_lease_can_run_out(tmp_path: Path) -> None:
    """No release will come from a killed holder: the waiter's wake socket thread looks at the
    file when the holder's lease is due to run out, before the waiter's own look."""
    clockless = ConcurrencyLimit(1, lease_seconds=6, backend=SQLiteBackend(tmp_path / "due.db"), name="due")
    dead = clockless.take()
    taken = time.monotonic()
    clockless._beat.discard(dead.name)  # never renewed again: as if its holder died
    time.sleep(1.5)
    lease = clockless.take(timeout=10)
    waited = time.monotonic() - taken
    # Due at 6 s; the waiter's own looks come every 2 s from 1.5 s: at 3.5, 5.5, 7.5 s.
    assert 5.9 <= waited < 7.0, waited
    lease.release()


# -- the file unavailable -------------------------------------------------------------------


def _lock_file(path: Path) -> tuple[threading.Event, threading.Thread]:
    """Hold the file's write lock from another connection until the event is set."""
    locked, done = threading.Event(), threading.Event()

    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        done.wait(20)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    locked.wait(10)
    return done, thread


@pytest.mark.parametrize("policy", ["raise", "allow", "local"])
def test_on_unavailable_applies_to_slots_as_for_redis(
    tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "locked.db"
    backend = SQLiteBackend(path, busy_timeout=0.05, on_unavailable=policy, local_share=0.5)  # type: ignore[arg-type]
    limit = ConcurrencyLimit(4, backend=backend, name="locked")
    held = limit.take()  # in the file
    done, thread = _lock_file(path)
    # Timeouts past busy_timeout: the file locked that long is unavailable (a take
    # with a shorter timeout is refused as the file is busy, not unavailable).
    try:
        if policy == "raise":
            with pytest.raises(BackendUnavailable):
                limit.take(timeout=0.1)
            return
        leases = [limit.take(timeout=0.1) for _ in range(2)]
        if policy == "local":
            # This process's share: floor(4 * 0.5) = 2 slots, both taken.
            with pytest.raises(AcquireTimeout):
                limit.take(timeout=0.1)
        else:
            leases.append(limit.take(timeout=0.1))  # fail open: nobody counts
        assert "SQLite store unavailable" in caplog.text
    finally:
        done.set()
        thread.join()
    for lease in leases:
        lease.release()  # where each was taken: locally, or nowhere
    held.release()  # in the file, which answers again
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]
    if policy == "local":
        assert [limit.take(timeout=0) for _ in range(4)]  # all four back in the file


def test_a_waiter_cancelled_at_any_step_of_its_handoff_leaves_nothing(tmp_path: Path) -> None:
    """Cancelled while queued, as its grant is on its way, or just after: whatever
    the step, the slot goes on to the next waiter and nothing stays held or queued."""
    limit = ConcurrencyLimit(1, backend=SQLiteBackend(tmp_path / "steps.db"), name="steps")
    store: Any = limit._store

    async def main() -> None:
        for steps in range(12):
            holder = await limit.take_async()
            waiter = asyncio.ensure_future(limit.take_async(timeout=10))
            behind = asyncio.ensure_future(limit.take_async(timeout=10))
            await asyncio.sleep(0)  # each task runs to its wait (nothing before it suspends)
            assert store.queued == 2
            await holder.release_async()  # hands the slot to the waiter
            for _ in range(steps):
                await asyncio.sleep(0)
            waiter.cancel()
            try:
                lease = await waiter
            except asyncio.CancelledError:
                pass
            else:
                await lease.release_async()  # granted before the cancel landed
            await (await asyncio.wait_for(behind, 10)).release_async()
            assert (store.held, store.queued) == (0, 0), steps

    asyncio.run(main())


@pytest.mark.slow
def test_an_async_waiter_leaves_its_loop_free_until_another_process_frees_a_slot(tmp_path: Path) -> None:
    path = str(tmp_path / "loop.db")
    limit = ConcurrencyLimit(1, lease_seconds=1, backend=SQLiteBackend(path), name="loop")
    holder = _start(path, "loop", "1", "1", "grab", "1")
    try:
        assert _line(holder) == "held 1"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)

        async def main() -> int:
            ticks = 0
            waiter = asyncio.ensure_future(limit.take_async(timeout=10))
            while not waiter.done():
                await asyncio.sleep(0.01)
                ticks += 1
            await (await waiter).release_async()
            return ticks

        ticks = asyncio.run(main())
    finally:
        _stop([holder])
    assert ticks >= 20  # the loop ran on while the lease of the killed holder ran out


def test_a_take_while_another_process_holds_the_file_waits_off_the_loop(tmp_path: Path) -> None:
    """The file's write lock held elsewhere: an async take waits for it in a thread
    (the loop runs on), and one cancelled meanwhile leaves nothing held when its take
    lands after all."""
    path = tmp_path / "busy.db"
    limit = ConcurrencyLimit(2, backend=SQLiteBackend(path), name="busy")
    limit.take(timeout=0).release()  # the tables made

    async def main() -> int:
        done, thread = _lock_file(path)
        ticks = 0
        taking = asyncio.ensure_future(limit.take_async(timeout=5))
        cancelled = asyncio.ensure_future(limit.take_async(timeout=5))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, done.set)
        while not taking.done():
            await asyncio.sleep(0.01)
            ticks += 1
        lease = await taking
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await asyncio.to_thread(thread.join)
        await lease.release_async()
        for _ in range(200):  # the cancelled take's release lands after its take
            if limit._store.held == 0:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        return ticks

    assert asyncio.run(main()) >= 10
    assert (limit._store.held, limit._store.queued) == (0, 0)  # type: ignore[attr-defined]


def test_inspect_shows_a_limits_holders_and_waiters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ratelimit inspect --store`` lists a ConcurrencyLimit beside the limiters: how
    many hold a slot and wait for one, as on Redis (the file keeps no maximum)."""

    path = tmp_path / "inspect.db"
    backend = SQLiteBackend(path)
    limit = ConcurrencyLimit(2, backend=backend, name="uploads", lease_seconds=30)
    assert backend.inspect_all() == []  # no slots table yet: nothing, not an error
    first, second = limit.take(), limit.take()
    seen = backend.inspect("uploads")
    assert (seen.name, seen.kind, seen.forms, seen.concurrency) == (
        "uploads",
        None,
        ("concurrency",),
        Slots(2, 0, None),
    )
    assert main(["inspect", "--store", f"sqlite:///{path}", "uploads"]) == 0
    out = capsys.readouterr().out
    assert "uploads  (concurrency)" in out
    assert "slots        2 of ? slots held, 0 queued" in out
    assert main(["inspect", "--store", f"sqlite:///{path}", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["limiters"]
    assert shown["forms"] == ["concurrency"]
    assert shown["concurrency"] == {"held": 2, "max": None, "queued": 0}
    first.release()
    second.release()
    assert not backend.inspect("uploads").known
    backend.close()


# -- wake sockets whose folder was removed, rows naming other sockets ---------------


@pytest.fixture
def short_store_file() -> Iterator[str]:
    # A short folder of its own: under pytest-xdist a tmp_path is long enough that the
    # wake sockets' paths pass AF_UNIX's 107 bytes, and they become abstract
    # sockets with no folder (which these tests delete and search).
    folder = tempfile.mkdtemp(prefix="rl-", dir="/tmp")
    path = os.path.join(folder, "store.db")
    SQLiteBackend(path)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def test_a_wake_socket_whose_folder_was_deleted_is_opened_again(
    short_store_file: str, opened: list[WakeSockets]
) -> None:
    """A cleaner (systemd-tmpfiles, a careless rm) removes the folder of wake sockets while
    a process keeps waiters behind its wake socket: its next waiter gets one that wake messages
    reach, not a socket bound to a name that no longer exists."""
    sockets = WakeSockets(short_store_file)
    opened.append(sockets)
    address = sockets.expect("elsewhere:1", Waiting(), _holding_all)
    assert address is not None
    shutil.rmtree(folder_of(short_store_file))
    waiting = Waiting()
    again = sockets.expect("elsewhere:2", waiting, _holding_all)
    assert again is not None
    assert os.path.exists(again)
    sender = WakeSockets(short_store_file)
    opened.append(sender)
    sender.wake([("elsewhere:2", again)])
    assert waiting.wait(5.0)
    sockets.forget("elsewhere:1")


def test_a_wake_message_never_removes_a_socket_outside_the_folder_of_wake_sockets(
    short_store_file: str, tmp_path: Path, opened: list[WakeSockets]
) -> None:
    """A row's wake socket is whatever the file says: one who may write the file (not the
    folder elsewhere) could name any socket file there, which a wake message finding nobody
    behind it would remove."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = str(elsewhere / "app.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(victim)
    dead.close()
    sockets = WakeSockets(short_store_file)
    opened.append(sockets)
    sockets.wake([("elsewhere:1", victim)])
    assert os.path.exists(victim)


def test_a_wake_message_goes_only_to_a_socket_shaped_as_a_wake_socket(
    short_store_file: str, tmp_path: Path, opened: list[WakeSockets]
) -> None:
    """A row naming another program's socket (a log, a service manager's) as its wake socket:
    the promoting process, maybe another user's, sends it nothing."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listening.bind(str(elsewhere / "log"))
    listening.setblocking(False)
    try:
        sockets = WakeSockets(short_store_file)
        opened.append(sockets)
        sockets.wake([("<13>forged entry", str(elsewhere / "log"))])
        with pytest.raises(BlockingIOError):
            listening.recv(512)
    finally:
        listening.close()
