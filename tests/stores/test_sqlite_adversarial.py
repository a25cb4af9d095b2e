"""The SQLite store under a hostile or careless user.

The quick path and the full transaction mixed by several processes while refunds,
pauses and changes at run time come and go (held: one decision, whichever path
makes it); then what broke once and is kept broken no more: doors whose folder was
removed, rows naming sockets that are not doors, a forked child's counts for
``ratelimit top``, ``":memory:"`` as a path, a keyed row in ``ratelimit inspect``.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import ManualClock, SQLiteBackend, TokenBucket
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.sqlite.doors import Doors, folder_of
from ratelimit._stores.waiting import Waiting
from ratelimit.cli import main

# -- the quick path and the full transaction, mixed, decide as the full one alone --------

_steps = st.lists(
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
_numbers = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_quick_and_full_decisions_mixed_across_processes_are_one_transaction_s(
    tmp_path: Path, steps: list[tuple[str, int, float, float, float | None, float | None, float | None]]
) -> None:
    """Four handles of one bucket on two backends of one file (two processes, two
    handles each), the quick path on, against one handle deciding every call in a full
    transaction on a file of its own: refunds (holes), pauses, charges and changes at
    run time (with ends) come and go between the decisions; every answer is the same."""
    name = f"mixed-{next(_numbers)}"
    clock = ManualClock(start=1_700_000_000.0)
    alg = Gcra(3.0, 1.0)
    backends = [SQLiteBackend(tmp_path / "mixed.db") for _ in range(2)]
    handles = [backends[i // 2].bind(name, alg, clock) for i in range(4)]
    alone = SQLiteBackend(tmp_path / "alone.db")
    full = alone.bind(name, alg, clock)
    full._quick = None  # every decision in a full transaction
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


# -- the doors ----------------------------------------------------------------------------


def _holding_all(leases: Any) -> list[str]:
    return list(leases)


@pytest.fixture
def store_file() -> Iterator[str]:
    # A short folder of its own: under pytest-xdist a tmp_path is long enough that the
    # doors' socket paths pass AF_UNIX's 107 bytes, and the doors become abstract
    # sockets with no folder (which these tests delete and search).
    folder = tempfile.mkdtemp(prefix="rl-", dir="/tmp")
    path = os.path.join(folder, "adv.db")
    SQLiteBackend(path)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def opened() -> Iterator[list[Doors]]:
    made: list[Doors] = []
    yield made
    for doors in made:
        doors.close()


def test_a_door_whose_folder_was_deleted_is_opened_again(store_file: str, opened: list[Doors]) -> None:
    """A cleaner (systemd-tmpfiles, a careless rm) removes the folder of doors while a
    process keeps waiters behind its door: its next waiter gets a door that knocks
    reach, not a socket bound to a name that no longer exists."""
    doors = Doors(store_file)
    opened.append(doors)
    address = doors.expect("elsewhere:1", Waiting(), _holding_all)
    assert address is not None
    shutil.rmtree(folder_of(store_file))
    waiting = Waiting()
    again = doors.expect("elsewhere:2", waiting, _holding_all)
    assert again is not None
    assert os.path.exists(again)
    knocker = Doors(store_file)
    opened.append(knocker)
    knocker.knock([("elsewhere:2", again)])
    assert waiting.wait(5.0)
    doors.forget("elsewhere:1")


def test_a_knock_never_removes_a_socket_outside_the_folder_of_doors(
    store_file: str, tmp_path: Path, opened: list[Doors]
) -> None:
    """A row's door is whatever the file says: one who may write the file (not the
    folder elsewhere) could name any socket file there, which a knock finding nobody
    behind it would remove."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = str(elsewhere / "app.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(victim)
    dead.close()
    doors = Doors(store_file)
    opened.append(doors)
    doors.knock([("elsewhere:1", victim)])
    assert os.path.exists(victim)


def test_a_knock_goes_only_to_a_socket_shaped_as_a_door(store_file: str, tmp_path: Path, opened: list[Doors]) -> None:
    """A row naming another program's socket (a log, a service manager's) as its door:
    the promoting process, maybe another user's, sends it nothing."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listening.bind(str(elsewhere / "log"))
    listening.setblocking(False)
    try:
        doors = Doors(store_file)
        opened.append(doors)
        doors.knock([("<13>forged entry", str(elsewhere / "log"))])
        with pytest.raises(BlockingIOError):
            listening.recv(512)
    finally:
        listening.close()


def _child_decides(limiter: TokenBucket, backend: SQLiteBackend) -> None:
    for _ in range(3):
        assert limiter.try_acquire()
    backend.write_counts()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_counts_only_its_own_decisions_for_top(tmp_path: Path) -> None:
    """A pool's worker forked after its parent decided: ``ratelimit top`` once
    counted the parent's unwritten decisions again for each child."""
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
    """SQLite's name for a private database made a file called ``:memory:`` in the
    working folder, which no other process would ever find."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="MemoryBackend"):
        SQLiteBackend(":memory:")
    with pytest.raises(ValueError, match="MemoryBackend"):
        SQLiteBackend.from_url("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []


def test_inspect_tells_a_keyed_budget_from_its_name_s_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ratelimit inspect --store`` printed a keyed budget's row under the bare name,
    two rows alike but for their states: the listing shows names, as on Redis, and
    ``--key`` one key's budget."""
    path = tmp_path / "keys.db"
    limiter = TokenBucket(3, 1, backend=SQLiteBackend(path), name="geocode")
    limiter.try_acquire()
    limiter.for_key("tenant-7").try_acquire()
    assert main(["inspect", "--store", f"sqlite:///{path}"]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("geocode")]
    assert heads == ["geocode  (token_bucket)"]
    assert main(["inspect", "geocode", "--key", "tenant-7", "--store", f"sqlite:///{path}"]) == 0
    assert capsys.readouterr().out.startswith("geocode key tenant-7  (token_bucket)")
