"""Limits changed at run time in a SQLite file (``SQLiteBackend.set_limit``,
``ratelimit set --store sqlite:///PATH``): the Redis store's meanings, decision by
decision on a ManualClock (the figures are those of ``test_runtime_config.py``).

Several backends on one file stand for several processes.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest
from changes import KINDS, Step, for_kind, steps, through_both
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    SQLiteBackend,
    TokenBucket,
)
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.records import Override, UnchangeableLimit
from ratelimit.cli import main

from conftest import unique_name


def grants(limiter: Any, n: int = 1000) -> int:
    """How many unit try_acquires go now, up to ``n``."""
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def test_a_change_holds_from_the_next_decision_of_every_process(path: Path) -> None:
    clock = ManualClock(1000.0)
    backends = [SQLiteBackend(path) for _ in range(3)]
    limiters = [TokenBucket(30, 1, backend=b, name="next", clock=clock) for b in backends]
    assert [grants(lim, 10) for lim in limiters] == [10, 10, 10]  # the code's 30 between them
    clock.advance(1.0)
    backends[0].set_limit("next", rate=100, burst=5, clock=clock)
    # 29 tokens owed at 1/s keep their count: at 100/s they are repaid in 0.29 s.
    assert [grants(lim) for lim in limiters] == [0, 0, 0]
    clock.advance(0.29 + 0.05)  # repaid, then 5 refilled: the new burst
    assert [grants(lim) for lim in limiters] == [5, 0, 0]
    clock.advance(0.02)
    assert [grants(lim) for lim in limiters] == [2, 0, 0]
    assert backends[1].reset_limit("next", clock=clock)
    # Back to the code: the 5 tokens owed at 100/s are 5 owed at 1/s, out of 30.
    assert [grants(lim) for lim in limiters] == [25, 0, 0]
    clock.advance(1.0)
    assert [grants(lim) for lim in limiters] == [1, 0, 0]
    assert not backends[2].reset_limit("next", clock=clock)


def test_a_change_made_before_a_decision_moves_the_state_at_its_own_time(path: Path) -> None:
    """No process decides between the change and a later decision: the state moves
    as of the change, as Redis moves it in the change's own call."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="late", clock=clock)
    assert grants(limiter) == 10  # 10 owed at 1/s
    backend.set_limit("late", rate=10, clock=clock)  # at 1000: 10 owed at 10/s take 1 s
    clock.advance(5.0)
    # Moved at 1005 instead, the 5 still owed would take 0.5 s and grant 5 now.
    assert grants(limiter) == 10


def test_a_leaky_bucket_keeps_its_queue_at_the_new_rate(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = LeakyBucket(10, 1, backend=backend, name="leaky", clock=clock)
    assert limiter.acquire(timeout=0) == 0
    for expected in (1.0, 2.0, 3.0):
        wait = backend.bind("leaky", limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
        assert wait == pytest.approx(expected)
    backend.set_limit("leaky", rate=10, clock=clock)
    # Four tokens queued at 1/s leak in 0.4 s at 10/s; the next one goes after them.
    wait = backend.bind("leaky", limiter.algorithm_for(clock), clock).reserve(1, math.inf)[0]
    assert wait == pytest.approx(0.4)


def test_a_window_keeps_its_length_and_takes_the_rate_as_its_limit(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = SlidingWindow(10, 60, backend=backend, name="window", clock=clock, guard=0)
    assert grants(limiter) == 10
    backend.set_limit("window", rate=0.5, clock=clock)  # 30 per 60 s window
    assert grants(limiter) == 20
    with pytest.raises(ValueError, match=r"burst=5.0.*sliding_window.*no burst"):
        backend.set_limit("window", burst=5, clock=clock)
    assert backend.limit_override("window", clock=clock) == Override(0.5, None)


def test_a_change_for_a_while_ends_at_the_first_decision_after_it(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(2, 1, backend=backend, name="ttl", clock=clock)
    backend.set_limit("ttl", rate=10, burst=20, ttl=3.0, clock=clock)
    assert backend.limit_override("ttl", clock=clock) == Override(10.0, 20.0, 3.0)
    assert grants(limiter) == 20
    clock.advance(3.0)
    # The change has ended: the 20 owed at 10/s were repaid after 2 s, and the
    # code's bucket of 2 is full again, no more.
    assert backend.limit_override("ttl", clock=clock) is None
    assert grants(limiter) == 2
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM ratelimit_config").fetchone() == (0,)
    conn.close()


def test_set_limit_on_a_test_clock_carries_the_tokens_owed(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="set-clock", clock=clock)
    assert grants(limiter) == 10
    backend.set_limit("set-clock", rate=0.1, ttl=30, clock=clock)
    assert grants(limiter) == 0  # the 10 owed take 100 s at 0.1/s: one token per 10 s
    clock.advance(10.0)
    assert grants(limiter) == 1
    assert backend.limit_override("set-clock", clock=clock) == Override(0.1, None, 20.0)
    clock.advance(20.0)  # the change ends on the limiter's clock: 8 owed at 1/s again
    assert backend.limit_override("set-clock", clock=clock) is None
    assert grants(limiter) == 2
    backend.set_limit("set-clock", burst=4, clock=clock)
    assert backend.reset_limit("set-clock", clock=clock)
    assert not backend.reset_limit("set-clock", clock=clock)
    with pytest.raises(TypeError, match=r"clock must be a clock instance.*ManualClock"):
        backend.set_limit("set-clock", rate=1, clock=ManualClock)  # type: ignore[arg-type]


def test_a_request_larger_than_a_lowered_burst_is_refused_for_ever(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="big", clock=clock)
    backend.set_limit("big", burst=3, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(5)
    assert caught.value.retry_after == math.inf
    assert limiter.try_acquire(5) is False
    assert limiter.try_acquire(3) is True


def test_the_quick_path_steps_aside_while_a_change_is_in_force(path: Path) -> None:
    """A bucket on real time decides in one statement; with a change in force it
    decides in full transactions, and in one statement again once reset."""
    backend = SQLiteBackend(path)
    # A token per 1000 s: what a test reads is not moved by the time it takes.
    limiter = TokenBucket(1000, 1e-3, backend=backend, name="quick")
    assert grants(limiter, 3) == 3
    backend.set_limit("quick", burst=2)
    assert grants(limiter, 10) == 0  # 3 owed: more than the new burst
    assert backend.reset_limit("quick")
    assert grants(limiter, 10) == 10
    conn = sqlite3.connect(path)
    (rate, burst), *_ = conn.execute("SELECT rate, burst FROM ratelimit_state WHERE name = 'quick'").fetchall()
    conn.close()
    assert (rate, burst) == (None, None)


def test_names_that_would_never_read_a_change_are_refused(path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    Composite([TokenBucket(5, 1), SlidingWindow(10, 60)], backend=backend, name="both", clock=clock).acquire()
    TokenBucket(5, 1, backend=backend, name="lanes", low_share=0.4, clock=clock).acquire()
    for name, what in (("both", "composite"), ("lanes", "priorities")):
        with pytest.raises(UnchangeableLimit, match=what):
            backend.set_limit(name, rate=1, clock=clock)
        assert backend.limit_override(name, clock=clock) is None
    # A ConcurrencyLimit's slots are rows of another table: a change was once stored
    # for it, which nothing would ever read.
    held = ConcurrencyLimit(2, backend=backend, name="slots").take()
    with pytest.raises(UnchangeableLimit, match="ConcurrencyLimit"):
        backend.set_limit("slots", rate=1)
    assert backend.limit_override("slots") is None
    held.release()
    # A name no process has used yet takes the change, for the limiter that reads it.
    backend.set_limit("later", rate=2, clock=clock)
    assert backend.limit_override("later", clock=clock) == Override(2.0, None)
    with pytest.raises(ValueError, match="rate must be"):
        backend.set_limit("later", rate=0, clock=clock)
    with pytest.raises(ValueError, match="name must be"):
        backend.set_limit("", rate=1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    capacity=st.floats(1, 50),
    rate=st.floats(0.5, 50),
    new_rate=st.floats(0.5, 50),
    used=st.integers(0, 60),
)
def test_the_move_is_the_lua_twin_s(tmp_path: Path, capacity: float, rate: float, new_rate: float, used: int) -> None:
    """``Gcra.rescale`` (and ``LeakyQueue.rescale``), as ``token_bucket.rescale`` of
    Lua writes it: what is owed keeps its count at the new rate; nothing owed, nothing moves."""
    old, new = Gcra(capacity, rate), Gcra(capacity, new_rate)
    now = 1000.0
    state = now + used / rate
    moved = old.rescale(new, state, now)
    assert moved == (now + (state - now) * old.rate * new.interval if state > now else state)
    assert old.rescale(new, now - 1.0, now) == now - 1.0
    leaky_old, leaky_new = LeakyQueue(capacity, rate), LeakyQueue(capacity, new_rate)
    assert leaky_old.rescale(leaky_new, (state, 5.0), now)[1] == 5.0


def test_set_and_inspect_commands_on_a_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 2, backend=backend, name="cli")
    assert limiter.try_acquire()
    url = f"sqlite:///{path}"
    assert main(["set", "cli", "--rate", "30/min", "--burst", "4", "--for", "1h", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "cli:" in out
    assert "rate 0.5/s" in out
    override = backend.limit_override("cli")
    assert override is not None
    assert (override.rate, override.burst) == (0.5, 4.0)
    assert override.ttl == pytest.approx(3600, abs=5)
    assert main(["inspect", "cli", "--store", url]) == 0
    assert "changed      rate 0.5/s, burst 4; ends in" in capsys.readouterr().out
    assert main(["set", "cli", "--reset", "--store", url]) == 0
    assert "back to the code's values" in capsys.readouterr().out
    assert backend.limit_override("cli") is None
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=backend, name="pair").acquire()
    assert main(["set", "pair", "--rate", "1/s", "--store", url]) == 1
    assert "composite" in capsys.readouterr().err


def test_top_counts_every_process_s_decisions(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each process counts in memory and writes once a second; ``top`` adds them up
    per limiter (a composite as one, a keyed budget in its limiter's row)."""
    backends = [SQLiteBackend(path) for _ in range(2)]
    first, second = (TokenBucket(5, 1e-3, backend=b, name="top-a") for b in backends)
    assert grants(first, 8) == 5  # 5 granted, then refused (the 6th)
    assert not second.try_acquire()
    assert not second.try_acquire()
    assert TokenBucket(5, 1, backend=backends[1], name="top-k").for_key("customer-1").try_acquire()
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=backends[1], name="top-c").acquire()
    second.feedback({"Retry-After": "30"}, status=429)  # a pause fed back
    backends[1].write_counts()
    rows = {row.name: row for row in backends[0].top(5.0, now=backends[0].now() + 1.0)}
    assert set(rows) == {"top-a", "top-k", "top-c"}
    assert rows["top-a"].grants_per_sec == pytest.approx(5 / 5)
    assert rows["top-a"].refusals_per_sec == pytest.approx(3 / 5)
    assert rows["top-a"].p99_wait == 0.0
    assert rows["top-a"].pauses == 1
    assert rows["top-c"].kind == "composite"
    assert rows["top-c"].grants_per_sec == pytest.approx(1 / 5)
    assert rows["top-k"].kind == "token_bucket"
    url = f"sqlite:///{path}"
    assert main(["top", "--store", url, "--json"]) == 0
    assert {row["name"] for row in json.loads(capsys.readouterr().out)["limiters"]} == set(rows)
    assert main(["top", "--store", url, "--iterations", "1"]) == 0
    assert "top-a" in capsys.readouterr().out


def test_counters_off_count_nothing(path: Path) -> None:
    backend = SQLiteBackend(path, counters=False)
    assert TokenBucket(5, 1, backend=backend, name="quiet").try_acquire()
    assert backend.top(now=backend.now() + 1.0) == []
    with pytest.raises(TypeError, match="counters must be a bool"):
        SQLiteBackend(path, counters="yes")  # type: ignore[arg-type]


def test_a_request_larger_than_a_lowered_burst_is_refused_with_holes_too(path: Path) -> None:
    """With a withdrawn reservation's hole in the row, the decision plans through the
    holes: the request too large for the change is refused there too, never granted
    at an infinite time."""
    clock = ManualClock(1000.0)
    backend = SQLiteBackend(path)
    limiter = TokenBucket(10, 1, backend=backend, name="holes", clock=clock)
    assert grants(limiter) == 10
    reservation = limiter.reserve(1)
    limiter.reserve(1)
    reservation.cancel()  # a hole ahead, kept in the row
    backend.set_limit("holes", burst=3, clock=clock)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(5)
    assert caught.value.retry_after == math.inf
    assert limiter.peek(5) == math.inf


def test_a_restriction_then_two_changes_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    waits = []
    for backend in (RedisBackend(redis_client, coalesce=False), SQLiteBackend(path)):
        clock = ManualClock(1_000.0)
        name = unique_name("restricted-changes")
        bucket = TokenBucket(4, 2, backend=backend, name=name, clock=clock)
        assert bucket.try_acquire()
        bucket.feedback({"RateLimit-Remaining": "1", "RateLimit-Reset": "2"})
        clock.advance(0.3)
        backend.set_limit(name, rate=5.0, burst=8.0, clock=clock)
        clock.advance(2.0)
        backend.set_limit(name, rate=5.0, burst=2.0, clock=clock)
        waits.append(bucket.reserve(1, timeout=2).wait)
    assert waits[0] == 0.0
    assert waits[1] == waits[0]


# -- changes in a row, through Redis and through the file ------------------------------
# The same steps on a ManualClock through a RedisBackend (whose 'configure' moves the
# state at each change, lua/_single.lua `switch`) and a SQLiteBackend (whose next
# decision moves it through each change kept, sqlite_config.py): every decision alike,
# to the bit.


def spend(n: int) -> list[Step]:
    return [("reserve", 1.0, 0.0)] * n


def test_three_changes_in_a_row_decide_as_through_redis(path: Path, redis_client: Any) -> None:
    steps: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 10.0, None, None),  # at 10/s: all repaid by 1001
        ("advance", 0.5),
        ("set", 0.5, 4.0, None),  # the 5 still owed at 0.5/s: 10 s more
        ("advance", 1.0),
        ("set", 100.0, 3.0, None),  # the 4.5 still owed at 100/s: repaid by 1001.545
        ("advance", 0.05),
        *spend(4),
    ]
    got = through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)
    # A full bucket of 3. Moved straight from the code's 1/s to the latest change at
    # 1001.5, 8.5 would be owed, repaid at 1001.585 only: nothing would go.
    assert [wait for wait, _ in got] == [0.0] * 13 + [pytest.approx(-0.01)]


@pytest.mark.parametrize("seconds", [0.5, 5.0])
def test_a_change_for_a_while_replaced_by_another_decides_as_through_redis(
    path: Path, redis_client: Any, seconds: float
) -> None:
    """Replaced before its end (5 s) or after it with no decision between (0.5 s):
    Redis moves the state from it to the next change either way."""
    steps: list[Step] = [
        *spend(10),
        ("set", 10.0, 20.0, seconds),
        ("advance", 1.0),
        ("set", 0.5, None, None),
        *spend(2),
        ("advance", 1.0),
        *spend(2),
    ]
    through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file, each value as stored: its type and its
    bytes (a REAL as its eight)."""
    conn = sqlite3.connect(path)
    try:
        found = {}
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            stored = [
                tuple((type(v).__name__, struct.pack("<d", v) if isinstance(v, float) else v) for v in row)
                for row in rows
            ]
            found[table] = sorted(stored, key=repr)
        return found
    finally:
        conn.close()


def test_a_peek_after_a_change_for_a_while_ended_writes_nothing_and_answers_as_redis(
    path: Path, redis_client: Any
) -> None:
    """A peek once a change for a while has ended (its row, and a change kept before
    it, still in the file) moves the state in memory only, as Redis's read-only
    'wait' op does: nothing written, the same answers, and the decisions after it
    those without it (a peek that moved the state back at its own time would leave
    1.5 owed at 1000.4, where Redis, moving it back then, finds the bucket full)."""
    alg = TokenBucket(10, 1).algorithm_for(ManualClock())
    before: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 10.0, None, None),  # replaced before any decision: kept in the row (past)
        ("advance", 0.02),
        ("set", 100.0, None, 0.05),  # the 9.8 owed at 100/s, repaid by 1000.118; ends at 1000.07
        ("advance", 0.08),
    ]
    peeks: list[Step] = [("peek", 10.0), ("peek", 1.0), ("advance", 0.3), ("peek", 10.0)]
    after: list[Step] = [("reserve", 9.0, 0.0), ("reserve", 2.0, 0.0), ("advance", 1.0), ("reserve", 2.0, 0.0)]

    clock = ManualClock(1_000.0)
    backend = SQLiteBackend(path)
    handle = backend.bind("ended", alg, clock)
    for _ in range(10):
        assert handle.reserve(1.0, 0.0)[0] == 0.0
    backend.set_limit("ended", rate=10.0, clock=clock)
    clock.advance(0.02)
    backend.set_limit("ended", rate=100.0, ttl=0.05, clock=clock)
    clock.advance(0.08)
    stored = _tables(path)
    (config,) = stored["ratelimit_config"]
    assert (config[-2][0], config[-1][0]) == ("str", "float")  # past and seen: a change kept
    peeked = [handle.peek(10.0), handle.peek(1.0)]
    assert _tables(path) == stored
    clock.advance(0.3)
    peeked.append(handle.peek(10.0))
    assert _tables(path) == stored  # nothing saved, no row deleted nor forgotten
    # Redis reads the state as the change left it (repaid by 1000.118), under the
    # code's limit: 0.018 owed at 1000.1, none at 1000.4.
    assert peeked == [pytest.approx(0.018), 0.0, 0.0]

    steps = [*before, *peeks, *after]
    want = through_both(path, redis_client, alg, steps)
    assert want[10:13] == peeked
    # The next decision moves the state back at its own time: 9 go of a full bucket,
    # then 1 token is left, and one more comes in a second.
    assert [wait for wait, _ in want[13:]] == [0.0, pytest.approx(-1.0), 0.0]
    assert want[13:] == through_both(path, redis_client, alg, [step for step in steps if step[0] != "peek"])[10:]


def test_a_change_for_a_while_ending_before_any_decision_decides_as_through_redis(
    path: Path, redis_client: Any
) -> None:
    """The state moves to the change when it is made, and back at the first decision
    after its end: not straight from the code's values to the code's values."""
    steps: list[Step] = [
        *spend(10),  # 10 owed at 1/s
        ("set", 100.0, None, 1.0),  # repaid by 1000.1
        ("advance", 2.0),
        *spend(10),
    ]
    got = through_both(path, redis_client, TokenBucket(10, 1).algorithm_for(ManualClock()), steps)
    assert [wait for wait, _ in got[-10:]] == [0.0] * 10


@pytest.mark.parametrize("algorithm", [TokenBucket(10, 1), LeakyBucket(10, 1)], ids=["token", "leaky"])
def test_a_reset_between_changes_decides_as_through_redis(path: Path, redis_client: Any, algorithm: Any) -> None:
    steps: list[Step] = [
        *spend(6),
        ("set", 4.0, None, None),
        ("advance", 0.5),
        ("reset",),
        ("advance", 0.5),
        ("set", 0.25, 8.0, None),
        ("advance", 0.5),
        *spend(3),
        ("reset",),
        ("reset",),
        *spend(3),
    ]
    through_both(path, redis_client, algorithm.algorithm_for(ManualClock()), steps)


def test_a_reset_with_no_change_decides_as_through_redis(path: Path, redis_client: Any) -> None:
    steps: list[Step] = [*spend(7), ("advance", 0.3), ("reset",), ("advance", 0.1), *spend(4)]
    through_both(path, redis_client, TokenBucket(10, 3).algorithm_for(ManualClock()), steps)


_steps = steps([None, 0.5, 2.0, 7.0, 40.0], [None, 2.0, 6.0, 30.0])


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_changes_in_any_order_decide_as_through_redis(
    tmp_path: Path, redis_client: Any, kind: str, steps: list[Step]
) -> None:
    """Decisions, changes (for a while or not), resets and restrictions in any order,
    as many changes in a row as drawn: the file decides as Redis does. (A window has
    no burst: its changes set the rate alone.)"""
    path = tmp_path / f"{unique_name('any')}.db"
    through_both(path, redis_client, KINDS[kind]().algorithm_for(ManualClock()), for_kind(kind, steps))
