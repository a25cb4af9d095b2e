"""Limits changed at run time in a SQLite file, under a hostile or careless user.

Changes made by the hundred with no decision between, by several processes at once
or while another holds the file's lock; garbage written by hand into a change's
row; a file of format 2 opened by several processes at once, and a process of the
release before format 3 beside one of this release; keyed budgets, composites and
ConcurrencyLimit on a name with changes kept; the Redis/SQLite differential with
changes among refunds, charges and restrictions; and the one-statement decision of
a token bucket, still one statement when no change is pending.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from changes import KINDS, Step, for_kind, steps, through_both
from hypothesis import HealthCheck, given, settings

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    SQLiteBackend,
    TokenBucket,
)
from ratelimit._stores.records import UnchangeableLimit
from ratelimit._stores.sqlite import file as sqlite_file
from ratelimit._stores.sqlite.config import MOST_KEPT

from conftest import unique_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def _rows(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def grants(limiter: Any, n: int = 1000) -> int:
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


# -- many changes in a row ---------------------------------------------------------------


def test_hundreds_of_changes_with_no_decision_keep_a_row_of_a_few_kilobytes(path: Path) -> None:
    """A script that sets a limit every minute on a budget nobody decides on: the
    changes kept (``past``) stay at most MOST_KEPT, not one more per change (which
    made the row grow without end and each change cost more than the last)."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1e-3, backend=backend, name="cron", clock=clock)
    assert grants(limiter) == 10  # 10 owed for 10,000 s: the row is never idle
    for i in range(600):
        clock.advance(60.0)
        backend.set_limit("cron", rate=(1e-3, 2e-3, 5e-4)[i % 3], clock=clock)
    ((count, size),) = _rows(path, "SELECT json_array_length(past), length(past) FROM ratelimit_config")
    assert count == MOST_KEPT
    assert size < 4096
    assert limiter.try_acquire() in (True, False)  # decided, through the changes kept
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]


def test_as_many_changes_in_a_row_as_are_kept_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    """Up to MOST_KEPT changes with no decision between: each one moves the state,
    to the bit as Redis moves it."""
    waits = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1000.0)
        name = unique_name("kept")
        handle = backend.bind(name, TokenBucket(50, 1).algorithm_for(clock), clock)
        assert handle.reserve(50, 0)[0] == 0.0
        for i in range(MOST_KEPT + 1):  # the latest, and MOST_KEPT it replaced
            clock.advance(0.25)
            backend.set_limit(name, rate=(0.5, 7.0, 40.0, 2.0)[i % 4], clock=clock)
        waits.append([handle.reserve(1, math.inf) for _ in range(3)])
    assert waits[1] == waits[0]


# -- garbage written by hand ---------------------------------------------------------------

#: What whoever may write the file could leave in ``past``.
_GARBLED_PAST = [
    "not json",
    '{"a": 1}',
    "5",
    "[[1, 2]]",
    '[["x", null, 1000]]',
    "[[0, null, 1000]]",
    "[[-5, null, 1000]]",
    "[[NaN, null, 1000]]",
    "[[Infinity, null, 1000]]",
    "[[1e308, null, 1000]]",
    "[[1e-300, null, 1000]]",
    "[[null, 0, 1000]]",
    "[[2, null, NaN]]",
    "[[2, null, -Infinity]]",
    '[[2, null, "1000"]]',
    "[[true, null, 1000]]",
    "[[[1], null, 1000]]",
    "[" * 100_000 + "]" * 100_000,  # deeper than json's recursion
]


def _garbled_past_run(path: Path, kind: type[Any], past: str | None) -> list[Any]:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = kind(10, 1, backend=backend, name="garbled", clock=clock)
    assert limiter.try_acquire(10)
    backend.set_limit("garbled", rate=2, clock=clock)
    clock.advance(1.0)
    backend.set_limit("garbled", rate=3, clock=clock)
    ((seen,),) = _rows(path, "SELECT seen FROM ratelimit_config")
    assert seen is not None  # the change replaced is kept, against the state row
    _rows(path, "UPDATE ratelimit_config SET past = ?", past)
    out: list[Any] = []
    for _ in range(4):
        out.append(limiter.try_acquire())
        out.append(limiter.peek(1))
        clock.advance(0.7)
    return out


@pytest.mark.parametrize("kind", [TokenBucket, LeakyBucket], ids=["token", "leaky"])
@pytest.mark.parametrize("past", _GARBLED_PAST, ids=range(len(_GARBLED_PAST)))
def test_garbage_in_the_changes_kept_is_decided_as_without_them(tmp_path: Path, kind: type[Any], past: str) -> None:
    """Never a TypeError, a ZeroDivisionError, a RecursionError or a NaN the row
    cannot hold (each decision failing for ever after): the state moves straight to
    the latest change, as if nothing were kept."""
    want = _garbled_past_run(tmp_path / "clean.db", kind, None)
    assert _garbled_past_run(tmp_path / "garbled.db", kind, past) == want
    assert _rows(tmp_path / "garbled.db", "SELECT past, seen FROM ratelimit_config") == [(None, None)]


#: A change's own columns written by hand: a value no change may set (outside
#: MIN_SET..MAX_SET, text, a blob) keeps the code's, as Lua's `valid` reads a hash;
#: an ``until`` that is no time ends nothing.
_GARBLED_COLUMNS = [
    ("rate", "'x'"),
    ("rate", "x'00'"),
    ("rate", "0"),
    ("rate", "-1"),
    ("rate", "1e308"),
    ("rate", "-1e308"),
    ("rate", "1e-300"),
    ("burst", "0"),
    ("burst", "-3"),
    ("burst", "'abc'"),
    ("burst", "1e13"),
    ("until", "'abc'"),
    ("until", "x'00'"),
]


def _garbled_column_run(path: Path, kind: type[Any], column: str, value: str | None) -> list[Any]:
    """A change to 2/s (and a burst of 4, for a bucket) for a while, decided under;
    then the same change made again and its ``column`` spoiled with ``value``, or
    (``None``) the change that spoiled row means made instead."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = kind(10, 1, backend=backend, name="column", clock=clock)
    burst = None if kind is SlidingWindow else 4.0
    assert limiter.try_acquire(10)
    backend.set_limit("column", rate=2, burst=burst, ttl=600, clock=clock)
    assert not limiter.try_acquire()  # decided under the change
    clock.advance(0.5)
    if value is None:
        rate = None if column == "rate" else 2.0
        burst = None if column == "burst" else burst
        if rate is None and burst is None:
            backend.reset_limit("column", clock=clock)
        else:
            backend.set_limit("column", rate=rate, burst=burst, ttl=None if column == "until" else 600, clock=clock)
    else:
        backend.set_limit("column", rate=2, burst=burst, ttl=600, clock=clock)
        _rows(path, f"UPDATE ratelimit_config SET {column} = {value}")
    out: list[Any] = [backend.limit_override("column", clock=clock)]
    for _ in range(4):
        out.append(limiter.try_acquire())
        out.append(limiter.peek(1))
        clock.advance(0.7)
    return out


@pytest.mark.parametrize("kind", [TokenBucket, LeakyBucket, SlidingWindow], ids=["token", "leaky", "window"])
@pytest.mark.parametrize(("column", "value"), _GARBLED_COLUMNS)
def test_garbage_in_a_change_s_columns_keeps_the_code_s_values_as_on_redis(
    tmp_path: Path, kind: type[Any], column: str, value: str
) -> None:
    """Before: a rate of text or 0 raised from every decision (TypeError,
    ZeroDivisionError), one of 1e308 granted everything, a burst of 0 refused
    everything for ever, an ``until`` of text raised."""
    want = _garbled_column_run(tmp_path / "clean.db", kind, column, None)
    assert _garbled_column_run(tmp_path / "garbled.db", kind, column, value) == want


def test_a_change_s_time_written_as_text_moves_the_state_at_the_decision(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="at", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("at", rate=10, clock=clock)
    _rows(path, "UPDATE ratelimit_config SET at = 'yesterday'")
    clock.advance(0.5)
    # Moved at 1000.5, its 9.5 owed repaid at 10/s by 1001.45: none yet.
    assert not limiter.try_acquire()
    assert limiter.peek(1) == pytest.approx(0.05)


@pytest.mark.parametrize("value", ["'x'", "x'01'", "1e999", "-1e999", "NULL"])
def test_garbage_in_seen_leaves_the_changes_kept_unread(path: Path, value: str) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="seen", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("seen", rate=100, clock=clock)
    clock.advance(1.0)
    backend.set_limit("seen", rate=0.5, clock=clock)
    _rows(path, f"UPDATE ratelimit_config SET seen = {value}")
    # Not the state row's: moved straight from 1/s to 0.5/s at 1001, 9 owed: two
    # tokens in 2 s (through the changes kept, the bucket would be full).
    assert limiter.peek(2) == pytest.approx(2.0)
    # A peek writes nothing; the next decision forgets them.
    assert _rows(path, "SELECT past IS NOT NULL FROM ratelimit_config") == [(1,)]
    assert limiter.try_acquire(1)
    assert _rows(path, "SELECT past, seen FROM ratelimit_config") == [(None, None)]


# -- a change the holes must not get round ------------------------------------------------


def test_a_request_larger_than_a_lowered_burst_takes_no_hole_as_on_redis(path: Path, redis_client: Any) -> None:
    """A reservation withdrawn leaves a hole of 5 tokens; the burst lowered to 1e-6
    after it: a request of 1 is refused for ever, as Lua's `too_big` refuses it
    before offering any hole (it was granted into the hole)."""
    answers = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1000.0)
        name = unique_name("hole")
        handle = backend.bind(name, TokenBucket(8, 2).algorithm_for(clock), clock)
        handle.restrict(0.0, 0.5)
        wait, at = handle.reserve(5.0, math.inf)
        handle.charge(1.0)
        handle.refund(5.0, at)
        backend.set_limit(name, rate=2.0, burst=1e-6, clock=clock)
        answers.append((wait, handle.reserve(1.0, math.inf), handle.peek(1.0)))
    assert answers[1] == answers[0]
    assert answers[1][1][0] == -math.inf
    # Through a limiter: AcquireTimeout with an infinite retry_after.
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(8, 2, backend=backend, name="hole-limiter", clock=clock)
    limiter.feedback({"Retry-After": "0.5"}, status=429)
    reservation = limiter.reserve(5)
    reservation.cancel()
    backend.set_limit("hole-limiter", burst=0.5, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(1, timeout=10)
    assert caught.value.retry_after == math.inf


# -- the Redis/SQLite differential, with refunds, charges and float extremes ---------------

_steps = steps(
    [None, 0.5, 2.0, 7.0, 40.0, 1e-6, 3e-6, 5e11, 1e12], [None, 2.0, 6.0, 30.0, 0.3, 1e-6, 1e12], refunds=True, most=40
)


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_changes_among_refunds_charges_and_restrictions_decide_as_through_redis(
    tmp_path: Path, redis_client: Any, kind: str, steps: list[Step]
) -> None:
    """Rates and bursts from 1e-6 to 1e12 among refunds (named or not), charges and
    restrictions: one process, and two taking turns while a third makes the changes."""
    alg = KINDS[kind]().algorithm_for(ManualClock())
    through_both(tmp_path / f"{unique_name('db')}.db", redis_client, alg, for_kind(kind, steps))


# -- keyed budgets, composites and ConcurrencyLimit on a name with changes kept -----------


def test_keyed_budgets_composites_and_slots_beside_changes_kept(path: Path, redis_client: Any) -> None:
    clock = ManualClock(1000.0)
    got = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        name = unique_name("keyed")
        limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
        keyed = limiter.for_key("customer-1")
        assert grants(limiter) == 10
        assert grants(keyed, 4) == 4
        backend.set_limit(name, rate=100, clock=clock)
        backend.set_limit(name, rate=0.5, burst=20, clock=clock)
        # A keyed budget keeps the code's values (set_limit names the limiter's own).
        got.append((grants(keyed), grants(limiter), limiter.peek(1), keyed.peek(1)))
    assert got[1] == got[0]
    assert got[1][0] == 6
    # A composite and a ConcurrencyLimit made on names whose changes are kept (set
    # before they were used) decide as the code says, and refuse changes since.
    backend = SQLiteBackend(path)
    for name in ("both", "slots"):
        TokenBucket(5, 1, backend=backend, name=name, clock=clock).acquire()
        backend.set_limit(name, rate=7, clock=clock)
        backend.set_limit(name, rate=9, clock=clock)
        _rows(path, "DELETE FROM ratelimit_state WHERE name = ?", name)
    both = Composite([TokenBucket(5, 1), SlidingWindow(10, 60)], backend=backend, name="both", clock=clock)
    assert grants(both) == 5
    slots = ConcurrencyLimit(2, backend=backend, name="slots")
    held = [slots.take(), slots.take()]
    with pytest.raises(AcquireTimeout):
        slots.take(timeout=0)
    for name, what in (("both", "composite"), ("slots", "ConcurrencyLimit")):
        with pytest.raises(UnchangeableLimit, match=what):
            backend.set_limit(name, rate=1, clock=clock)
    for lease in held:
        lease.release()


# -- the one-statement decision ------------------------------------------------------------


def test_a_decision_with_no_change_pending_is_one_update(path: Path) -> None:
    """Counted with a trace of the connection's statements: after a change is read
    (and the changes it kept forgotten), a reset, a change ended, a reset with no
    change, or a change to another name, each decision is one UPDATE again."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(1000, 1, backend=backend, name="quick", clock=clock)
    statements: list[str] = []

    def decided() -> list[str]:
        conn = backend._file._conn
        assert conn is not None
        statements.clear()
        conn.set_trace_callback(statements.append)
        try:
            assert limiter.try_acquire()
        finally:
            conn.set_trace_callback(None)
        return [s.split()[0] for s in statements]

    def settles() -> None:
        decided()  # the full transaction that reads what changed
        for _ in range(3):
            assert decided() == ["UPDATE"]

    settles()
    backend.set_limit("quick", rate=2, clock=clock)
    backend.set_limit("quick", rate=3, clock=clock)
    assert "SELECT" in decided()
    assert decided() != ["UPDATE"]  # a change in force: full transactions
    backend.reset_limit("quick", clock=clock)
    settles()
    backend.set_limit("other", rate=5, clock=clock)
    backend.set_limit("other", rate=6, clock=clock)
    for _ in range(3):
        assert decided() == ["UPDATE"]
    backend.set_limit("quick", rate=2, ttl=1, clock=clock)
    decided()
    clock.advance(2.0)
    settles()
    backend.reset_limit("quick", clock=clock)  # none in force: kept as Redis's 'configure'
    settles()
    backend.set_limit("quick", burst=500, clock=clock)
    backend.reset_limit("quick", clock=clock)
    settles()
    assert _rows(path, "SELECT past, seen FROM ratelimit_config WHERE name = 'quick'") == [(None, None)]


# -- another process holding the lock, several processes changing at once ----------------


def test_a_change_while_another_process_holds_the_lock_stores_nothing_or_all(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path, busy_timeout=0.05)
    limiter = TokenBucket(10, 1, backend=backend, name="locked", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("locked", rate=100, clock=clock)
    before = _rows(path, "SELECT * FROM ratelimit_config")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        clock.advance(0.5)
        with pytest.raises(BackendUnavailable, match="stayed locked"):
            backend.set_limit("locked", rate=0.5, clock=clock)
        with pytest.raises(BackendUnavailable, match="stayed locked"):
            backend.reset_limit("locked", clock=clock)
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert _rows(path, "SELECT * FROM ratelimit_config") == before
    backend.set_limit("locked", rate=0.5, clock=clock)
    # 1/s to 100/s at 1000 (10 owed repaid by 1000.1), to 0.5/s at 1000.5: a full
    # bucket. Moved straight from 1/s at 1000.5, 9.5 would still be owed.
    assert grants(limiter) == 10


def _change_many(path: str, name: str, seed: int, count: int) -> None:
    backend = SQLiteBackend(path)
    for i in range(count):
        if (i + seed) % 5 == 4:
            backend.reset_limit(name)
        else:
            backend.set_limit(name, rate=(1.0, 5.0, 20.0)[(i + seed) % 3], burst=(2.0, 10.0)[(i * seed) % 2])


def _decide_many(path: str, name: str, count: int, out: Any) -> None:
    limiter = TokenBucket(10, 5, backend=SQLiteBackend(path), name=name)
    out.put(sum(limiter.try_acquire() for _ in range(count)))


@pytest.mark.slow
def test_changes_from_several_processes_at_once_never_over_admit(path: Path) -> None:
    """Two processes changing the limit 150 times each (and threads of a third),
    two deciding all the while: no error, no row growing, and never more grants than
    the largest burst and the fastest rate allow (tokens owed keep their count
    through every change, so a change never hands out a burst again)."""
    name = "busy"
    backend = SQLiteBackend(path)
    started = backend.now()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [context.Process(target=_change_many, args=(str(path), name, seed, 150)) for seed in (1, 2)]
    procs += [context.Process(target=_decide_many, args=(str(path), name, 400, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    _change_many(str(path), name, 3, 60)
    granted = out.get(timeout=120) + out.get(timeout=120)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    elapsed = backend.now() - started
    assert granted <= 10 + 20 * elapsed + 1
    ((past,),) = _rows(path, "SELECT past FROM ratelimit_config")
    assert past is None or len(json.loads(past)) <= MOST_KEPT


# -- the migration from format 2, and the release before format 3 -------------------------


def _format_2(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE ratelimit_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
        "CREATE TABLE ratelimit_state (name TEXT NOT NULL, member INTEGER NOT NULL, kind TEXT NOT NULL,"
        " number REAL, blob BLOB, idle REAL NOT NULL, updated REAL NOT NULL, test INTEGER NOT NULL,"
        " forget REAL NOT NULL DEFAULT 0, rate REAL, burst REAL, PRIMARY KEY (name, member, kind)) WITHOUT ROWID;"
        "CREATE INDEX ratelimit_forget ON ratelimit_state (forget) WHERE test = 0;"
        "CREATE TABLE ratelimit_config (name TEXT PRIMARY KEY, rate REAL, burst REAL, until REAL,"
        " at REAL NOT NULL) WITHOUT ROWID;"
        "INSERT INTO ratelimit_meta VALUES ('format', 'ratelimit-fleet sqlite store'), ('version', 2);"
        "INSERT INTO ratelimit_state VALUES ('moved', -1, 'token_bucket', 1004.0, NULL, 1004.0, 1000.0, 1, 1004.0,"
        " 2.0, NULL);"
        "INSERT INTO ratelimit_config VALUES ('moved', 4.0, NULL, NULL, 1000.0);"
    )
    conn.commit()
    conn.close()


def _open_at_once(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        clock = ManualClock(1000.0)
        limiter = TokenBucket(10, 1, backend=SQLiteBackend(path), name="moved", clock=clock)
        out.put(limiter.peek(1))
    except BaseException as exc:  # reported to the test
        out.put(repr(exc))


@pytest.mark.slow
def test_a_file_of_format_2_opened_by_several_processes_at_once_is_migrated_once(path: Path) -> None:
    _format_2(path)
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(4), context.Queue()
    procs = [context.Process(target=_open_at_once, args=(str(path), barrier, out)) for _ in range(4)]
    for proc in procs:
        proc.start()
    answers = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    # 2/s to 4/s at 1000: 8 owed at 4/s, none left to wait for past the 10 - 8 free.
    assert answers == [0.0] * 4
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
    columns = [row[1] for row in _rows(path, "PRAGMA table_info(ratelimit_config)")]
    assert columns == ["name", "rate", "burst", "until", "at", "past", "seen"]


#: The last commit of the release before format 3.
_BEFORE = "b1000ea"

#: A process of the release before: one command a line on stdin, one answer a line.
_DRIVER = """
import json, sys
from ratelimit import ManualClock, SQLiteBackend, TokenBucket
clock = ManualClock(1000.0)
backend = limiter = None
for line in sys.stdin:
    op, *args = json.loads(line)
    try:
        if op == "open":
            backend = SQLiteBackend(args[0])
            limiter = TokenBucket(10, 1, backend=backend, name="mixed", clock=clock)
            answer = None
        elif op == "at":
            clock.advance(args[0] - clock.now())
            answer = None
        elif op == "take":
            answer = limiter.try_acquire(args[0])
        elif op == "peek":
            answer = limiter.peek(1)
        elif op == "set":
            answer = backend.set_limit("mixed", rate=args[0], clock=clock)
    except Exception as exc:
        answer = f"{type(exc).__name__}: {exc}"
    print(json.dumps(answer), flush=True)
"""


@pytest.fixture(scope="module")
def release_before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as the release before format 3 had it, from git."""
    where = tmp_path_factory.mktemp("before")
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", _BEFORE, "ratelimit"], capture_output=True, check=True, timeout=60
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the release before ({_BEFORE}) is not in git here: {exc}")
    return where


class _Before:
    def __init__(self, package: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(package)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=package,  # not this checkout's package, which `-c` would import first
        )

    def __call__(self, *command: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


@pytest.mark.slow
def test_the_release_before_refuses_a_file_of_format_3_untouched(path: Path, release_before: Path) -> None:
    backend = SQLiteBackend(path)
    backend.set_limit("mixed", rate=2)
    backend.close()  # the last connection: the WAL checkpointed into the file
    before = path.read_bytes()
    older = _Before(release_before)
    try:
        answer = older("open", str(path))
    finally:
        older.close()
    assert "format version 3" in answer
    assert "ValueError" in answer
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_process_of_the_release_before_keeps_deciding_once_the_file_is_migrated(
    path: Path, release_before: Path
) -> None:
    """Opened at format 2 by the release before, made format 3 by this one: the older
    process decides and changes as it did, and neither moves the state twice."""
    older = _Before(release_before)
    try:
        assert older("open", str(path)) is None
        assert older("take", 10) is True  # 10 owed at 1/s
        assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(2,)]
        clock = ManualClock(1000.0)
        backend = SQLiteBackend(path)
        assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
        limiter = TokenBucket(10, 1, backend=backend, name="mixed", clock=clock)
        backend.set_limit("mixed", rate=10.0, clock=clock)
        clock.advance(0.5)
        backend.set_limit("mixed", rate=0.5, clock=clock)
        # The older process: straight from 1/s to 0.5/s at 1000.5, 9.5 owed; 9.45
        # at 1000.6, one token in 0.9 s.
        older("at", 1000.6)
        assert older("peek") == pytest.approx(0.9)
        assert older("take", 1) is False
        clock.advance(0.2)
        assert limiter.peek(1) == pytest.approx(0.8)  # 9.4 owed, as it left it: not moved again
        older("at", 1000.7)
        assert older("set", 100.0) is None  # its change replaces the row whole
        clock.advance(0.1)
        assert limiter.peek(1) == pytest.approx(0.0)  # 9.3 owed at 100/s, one free
        # (At its own time: a peek writes nothing, so no row's time is its floor.)
        older("at", 1000.8)
        assert older("peek") == pytest.approx(0.0)
    finally:
        older.close()


# -- found on the way: a second backend on the file ------------------------------------------

_CHILD = """
import sys
from ratelimit import SQLiteBackend, TokenBucket
limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(sys.argv[1]), name="locks")
print(sum(limiter.try_acquire() for _ in range(int(sys.argv[2]))))
"""


def _child_grants(path: Path, n: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.slow
def test_a_second_backend_on_the_file_keeps_the_first_one_s_decisions(path: Path) -> None:
    """Opening a second SQLiteBackend on the path read the file's header with
    ``open()``; closing that descriptor dropped every POSIX lock of the process on
    the file, the first backend's shared lock too. A process that then closed its
    last connection took itself for the last user, checked the WAL in and deleted
    it: the first backend's decisions after that went to a deleted WAL, unseen by
    every other process (13 grants from a bucket of 10)."""
    limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(path), name="locks")
    assert limiter.try_acquire()
    SQLiteBackend(path)  # another backend of this process on the same file
    assert _child_grants(path, 1) == 1
    assert [limiter.try_acquire() for _ in range(3)] == [True] * 3
    assert _child_grants(path, 20) == 5
    assert Path(f"{path}-wal").exists()  # still this process's


def test_a_migration_that_fails_halfway_leaves_the_file_of_format_2(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration is one write transaction: a process that fails (or dies) after its
    first ALTER leaves the file as it was, and the next process migrates it whole."""
    _format_2(path)
    broken = (sqlite_file._MIGRATE_2[0], "ALTER TABLE no_such_table ADD COLUMN x", *sqlite_file._MIGRATE_2[1:])
    monkeypatch.setattr(sqlite_file, "_MIGRATE_2", broken)
    with pytest.raises(OSError, match="no_such_table"):
        SQLiteBackend(path)
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(2,)]
    assert [row[1] for row in _rows(path, "PRAGMA table_info(ratelimit_config)")][-1] == "at"
    monkeypatch.undo()
    clock = ManualClock(1000.0)
    limiter = TokenBucket(10, 1, backend=SQLiteBackend(path), name="moved", clock=clock)
    assert limiter.peek(1) == 0.0
    assert _rows(path, "SELECT value FROM ratelimit_meta WHERE key = 'version'") == [(3,)]
