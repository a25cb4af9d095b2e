"""A leaky bucket's gaps in each store: where they are kept, and rolling deploys.

A leaky member of a composite granted later than its own queue would have it keeps
the idle stretch before that grant (``_algorithms/leaky_bucket.py``). In Redis the
state's text keeps its two times (a mark before the first says gaps are beside it, in
``<key>:gaps``); in SQLite the row's pickle keeps them, the gaps following it. A
state written by a release before gaps (the two times alone) is read as a queue with
no gap known, and a release before gaps reads a state with gaps as its two times.
"""

from __future__ import annotations

import math
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SQLiteBackend,
    TokenBucket,
)
from ratelimit._algorithms.holes import Holes
from ratelimit._stores.keys import key_for
from ratelimit._stores.sqlite.codec import decode

from conftest import unique_name

#: The parse of a leaky state in ``lua/leaky_bucket.lua`` of the release before gaps.
OLD_LOAD = """
local d, l = string.match(ARGV[1], '^(%S+) (%S+)$')
return {tostring(tonumber(d)), tostring(tonumber(l))}
"""


def _two_ahead(limiter: Composite) -> None:
    """At t=1000, on TokenBucket(1, 0.1) and LeakyBucket(2, 1): one grant now, one at
    t=1010 (the bucket's pace), the leaky queue idle from 1001 to 1010."""
    assert limiter.reserve().wait == 0.0
    assert limiter.reserve().wait == 10.0


def _composite(backend: Any, name: str, clock: ManualClock) -> Composite:
    return Composite([TokenBucket(1, 0.1), LeakyBucket(2, 1)], backend=backend, name=name, clock=clock)


# -- Redis -----------------------------------------------------------------------------


def test_redis_keeps_the_gaps_beside_the_two_times(client: Any) -> None:
    """The state's text is the two times, the first marked; the gaps sit beside it and
    expire with it; a plain leaky bucket writes neither."""
    clock, name = ManualClock(1000.0), unique_name("gaps")
    _two_ahead(_composite(RedisBackend(client), name, clock))
    key = key_for(name, "leaky_bucket", 1, injected=True)
    assert client.get(key) == b"01011 1010"
    assert client.get(key + ":gaps") == b"1001 1010"
    assert abs(client.pttl(key + ":gaps") - client.pttl(key)) < 100
    plain_name = unique_name("plain")
    plain = LeakyBucket(3, 1, backend=RedisBackend(client), name=plain_name, clock=clock)
    assert [plain.reserve().wait for _ in range(3)] == [0.0, 1.0, 2.0]
    plain_key = key_for(plain_name, "leaky_bucket", injected=True)
    assert not client.exists(plain_key + ":gaps")
    assert client.get(plain_key) in (b"1003 1002", b"1003 01002")


def test_redis_reads_a_state_of_the_release_before_gaps_as_no_gap_known(client: Any) -> None:
    """The two times alone, as the release before gaps writes them (with or without its
    clean mark), are read as they were: the time before the latest grant is counted as
    queued (the overflow that release decides), and gaps beside them, left by this
    release before that one wrote, are stale and never read."""
    for latest in ("1010", "01010"):
        clock, name = ManualClock(1000.0), unique_name("old")
        limiter = _composite(RedisBackend(client), name, clock)
        _two_ahead(limiter)
        key = key_for(name, "leaky_bucket", 1, injected=True)
        client.set(key, f"1011 {latest}", keepttl=True)
        assert client.exists(key + ":gaps")
        clock.advance(1)
        with pytest.raises(AcquireTimeout) as caught:
            limiter.reserve()
        assert caught.value.retry_after == 9.0


@pytest.mark.parametrize("gaps", ["1001 x", "1001", "1001 inf", ""])
def test_redis_forgets_gaps_that_are_not_pairs_of_times(client: Any, gaps: str) -> None:
    """Gaps written by hand or garbled are forgotten: the time counts as queued, as
    the release before gaps counted it, never an error."""
    clock, name = ManualClock(1000.0), unique_name("garbled")
    limiter = _composite(RedisBackend(client), name, clock)
    _two_ahead(limiter)
    client.set(key_for(name, "leaky_bucket", 1, injected=True) + ":gaps", gaps, keepttl=True)
    clock.advance(1)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.reserve()
    assert caught.value.retry_after == 9.0


def test_the_release_before_gaps_reads_a_state_with_gaps_as_its_two_times(client: Any) -> None:
    """Its parse of the state's text (two numbers, a space between) finds the drain
    time and the latest grant: the queue it always counted, gaps included."""
    clock, name = ManualClock(1000.0), unique_name("older")
    _two_ahead(_composite(RedisBackend(client), name, clock))
    text = client.get(key_for(name, "leaky_bucket", 1, injected=True))
    assert client.eval(OLD_LOAD, 0, text) == [b"1011", b"1010"]


def test_inspect_and_peek_count_only_what_a_paced_leaky_bucket_holds(redis_client: Any) -> None:
    """A provider's pace holds a lone leaky bucket's grants back as another member
    would: with two grants queued (at +5 s and +10 s) in a queue of three, a third
    fits. ``peek`` tells its wait behind them (11 s, not an overflow's retry_after),
    and ``inspect`` that nothing goes at once and one token waits those 11 s."""
    backend = RedisBackend(redis_client)
    name = unique_name("inspect")
    limiter = LeakyBucket(3, 1, backend=backend, name=name)
    handle = backend.bind(name, limiter.algorithm_for(None), None)
    handle.restrict(2, 10)  # two more in the next 10 s, one every 5 s
    assert [round(handle.reserve(1, math.inf)[0]) for _ in range(2)] == [5, 10]
    assert limiter.peek() == pytest.approx(11.0, abs=0.5)
    seen = backend.inspect(name)
    assert seen.available == 0.0
    assert seen.wait_for_one == pytest.approx(11.0, abs=0.5)
    assert handle.reserve(1, math.inf)[0] == pytest.approx(11.0, abs=0.5)  # the third fits
    assert handle.reserve(1, math.inf)[0] < 0  # the fourth overflows
    backend.close()


# -- SQLite ----------------------------------------------------------------------------


def _leaky_row(path: Path, name: str) -> tuple[Any, Any]:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT number, blob FROM ratelimit_state WHERE name = ? AND member = 1 AND kind = 'leaky_bucket'", (name,)
        ).fetchone()
    finally:
        conn.close()
    assert row is not None
    return row[0], row[1]


def _write_leaky_blob(path: Path, name: str, blob: bytes) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "UPDATE ratelimit_state SET blob = ? WHERE name = ? AND member = 1 AND kind = 'leaky_bucket'", (blob, name)
        )
        conn.commit()
    finally:
        conn.close()


def test_sqlite_keeps_the_gaps_after_the_rows_pickle(tmp_path: Path) -> None:
    """The row's first pickle holds the two times, which is all the release before gaps
    reads of it; the gaps follow."""
    path, clock = tmp_path / "s.db", ManualClock(1000.0)
    _two_ahead(_composite(SQLiteBackend(path), "gaps", clock))
    number, blob = _leaky_row(path, "gaps")
    assert number is None
    assert decode(number, blob)[0] == (1011.0, 1010.0, 1001.0, 1010.0)
    old = pickle.loads(blob)  # what the release before gaps unpickles: the first pickle
    assert old[0] == (1011.0, 1010.0)
    assert isinstance(old[1], Holes)


def test_sqlite_reads_a_row_of_the_release_before_gaps_as_no_gap_known(tmp_path: Path) -> None:
    """A row the release before gaps wrote (its pickle alone) decides as that release
    did: the time before the latest grant is counted as queued."""
    path, clock = tmp_path / "s.db", ManualClock(1000.0)
    limiter = _composite(SQLiteBackend(path), "old", clock)
    _two_ahead(limiter)
    _write_leaky_blob(path, "old", pickle.dumps(((1011.0, 1010.0), Holes(), {})))
    clock.advance(1)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.reserve()
    assert caught.value.retry_after == 9.0


def test_sqlite_refuses_gaps_it_did_not_write(tmp_path: Path) -> None:
    """Anything but pairs of times after the row's pickle is a row this store never wrote."""
    path, clock = tmp_path / "s.db", ManualClock(1000.0)
    limiter = _composite(SQLiteBackend(path), "odd", clock)
    _two_ahead(limiter)
    _write_leaky_blob(path, "odd", pickle.dumps(((1011.0, 1010.0), Holes(), {})) + pickle.dumps((1001.0,)))
    with pytest.raises(BackendUnavailable, match="gaps are not a leaky bucket's"):
        limiter.reserve()
