"""What a state was found beside, kept by the function library (``lua/_kept.lua``).

A decision asks after the keys beside its state (a change, holes, the slack record, a
window log's caps) and reads the slack record; the library keeps what it found for
0.1 s of the calls' clock, and the calls that may write there forget it. These tests
hold both halves: whatever is written through the library is followed at once, and
whatever is written beside it (redis-cli here) within 0.1 s; where nothing is kept
(another database, scripts, a clock behind) it is followed at once. Whether the
decisions match the in-process ones is the conformance suite's.
"""

from __future__ import annotations

import math
import urllib.parse
from typing import Any

import pytest
import redis

from ratelimit import LeakyBucket, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.keys import config_key, key_for
from ratelimit._stores.records import Override
from ratelimit._stores.redis.config import write_override
from ratelimit._stores.redis.scripts import call_by_script

from conftest import REDIS_URL, command_calls, unique_name
from marks import clean
from servers import RedisServer

#: How long the library trusts what it found (TRUSTED in lua/_kept.lua).
TRUSTED = 0.1
KINDS = ["exact", "approximate"]


def _window(kind: str, backend: RedisBackend, clock: ManualClock, name: str) -> SlidingWindow:
    # Four a second, with the default guard (a slack of 0.05 s): a window's every
    # decision reads the slack record, which is what the library keeps.
    return SlidingWindow(4, 1, approximate=kind == "approximate", backend=backend, name=name, clock=clock)


def _two_granted(client: Any, kind: str) -> tuple[SlidingWindow, ManualClock, str]:
    """A window of a new name that has granted two: its first decision asked what is
    beside its state (it writes what the code says), and the library keeps that."""
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    window = _window(kind, RedisBackend(client, coalesce=False), clock, name)
    assert window.try_acquire()
    assert window.try_acquire()
    return window, clock, name


def _change_by_hand(client: Any, name: str) -> None:
    # As redis-cli would: one a second (a window's limit is then the rate times its
    # length), no state moved and nothing forgotten in the library.
    client.hset(config_key(name), mapping={"rate": "1", "burst": ""})


@pytest.mark.parametrize("kind", KINDS)
def test_a_change_written_beside_the_library_is_followed_within_a_tenth_of_a_second(client: Any, kind: str) -> None:
    window, clock, name = _two_granted(client, kind)
    _change_by_hand(client, name)
    clock.advance(TRUSTED / 2)
    assert window.try_acquire()  # what was found is trusted: the code's limit of 4
    clock.advance(TRUSTED)
    assert not window.try_acquire()  # asked again: 3 counted against a limit of 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_change_set_through_the_library_is_followed_at_once(client: Any, kind: str) -> None:
    window, clock, name = _two_granted(client, kind)
    write_override(client, name, Override(rate=1.0, burst=None, ttl=None), now=clock.now())
    assert not window.try_acquire()


@pytest.mark.parametrize("kind", KINDS)
def test_a_restriction_fed_back_through_the_library_holds_at_once(client: Any, kind: str) -> None:
    window, _, _ = _two_granted(client, kind)
    # The provider says one more may go in the next 30 s: spread over them, it is due at
    # their end, a pace kept beside the state (<holes>:pace) that the next decision
    # reads, whatever was found beside the state a moment ago.
    window.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30"}, status=200)
    assert [window.try_acquire() for _ in range(3)] == [False, False, False]


@pytest.mark.parametrize("kind", KINDS)
def test_a_reset_through_the_library_is_followed_at_once(client: Any, kind: str) -> None:
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    window = _window(kind, RedisBackend(client, coalesce=False), clock, name)
    assert sum(window.try_acquire() for _ in range(5)) == 4
    window.reset()
    assert window.try_acquire()


@pytest.mark.parametrize("counted", [True, False])
def test_another_database_keeps_nothing_and_follows_a_change_at_once(counted: bool) -> None:
    url = urllib.parse.urlsplit(REDIS_URL)
    other = redis.Redis.from_url(urllib.parse.urlunsplit(url._replace(path="/1")))
    try:
        name = unique_name("beside")
        clock = ManualClock(1_000.0)
        backend = RedisBackend(other, coalesce=False, counters=counted)
        window = _window("approximate", backend, clock, name)
        assert window.try_acquire()
        assert window.try_acquire()
        _change_by_hand(other, name)
        assert not window.try_acquire()
        # A bucket there takes its quick path, and counts for `top` only if counted.
        bucket = TokenBucket(4, 1, backend=backend, name=f"{name}-bucket", clock=clock)
        assert [bucket.try_acquire() for _ in range(6)] == [True] * 4 + [False] * 2
        assert bool(other.keys(f"ratelimit:{{{name}-bucket}}:*:top:*")) is counted
    finally:
        other.close()


def test_scripts_keep_nothing_and_follow_a_change_at_once() -> None:
    scripts = redis.Redis.from_url(REDIS_URL)
    call_by_script(scripts)  # a server without Functions: the same Lua, as scripts
    try:
        name = unique_name("beside")
        clock = ManualClock(1_000.0)
        window = _window("exact", RedisBackend(scripts, coalesce=False), clock, name)
        assert window.try_acquire()
        assert window.try_acquire()
        _change_by_hand(scripts, name)
        assert not window.try_acquire()
    finally:
        scripts.close()


def test_a_clock_behind_what_was_found_asks_again(client: Any) -> None:
    # Two processes whose clocks differ: what one found is not trusted by a call
    # whose time is earlier than its.
    name = unique_name("beside")
    ahead, behind = ManualClock(1_000.0), ManualClock(999.9)
    window = _window("approximate", RedisBackend(client, coalesce=False), ahead, name)
    late = _window("approximate", RedisBackend(client, coalesce=False), behind, name)
    assert late.try_acquire()  # (each process's first decision asks)
    assert window.try_acquire()
    assert window.try_acquire()
    _change_by_hand(client, name)
    assert not late.try_acquire()


@pytest.mark.servers
@pytest.mark.parametrize("kind", KINDS)
def test_a_busy_window_asks_once_a_tenth_of_a_second(quiet_redis: RedisServer, kind: str) -> None:
    admin = redis.Redis.from_url(quiet_redis.url)
    backend = RedisBackend.from_url(quiet_redis.url, coalesce=False)
    clock = ManualClock(1_000.0)
    window = _window_on(kind, backend, clock)
    assert window.try_acquire()
    admin.config_resetstat()
    for _ in range(10):
        assert window.try_acquire()
        clock.advance(TRUSTED / 20)
    assert command_calls(admin, "fcall") == 10
    assert command_calls(admin, "exists") == 0
    # (The exact window's state is a sorted set: any HMGET would be the slack record's.)
    if kind == "exact":
        assert command_calls(admin, "hmget") == 0
    clock.advance(TRUSTED)
    assert window.try_acquire()
    assert command_calls(admin, "exists") == 1
    backend.close()
    admin.close()


def _window_on(kind: str, backend: RedisBackend, clock: ManualClock) -> SlidingWindow:
    return SlidingWindow(
        1_000, 1, approximate=kind == "approximate", backend=backend, name=unique_name("beside"), clock=clock
    )


def test_a_bucket_without_slack_never_writes_its_state_clean_beside_a_record(client: Any) -> None:
    # A leased process keeps a slack, and so a record; a process of the same name
    # without one must not trust what the leased one found alone (the record is beside
    # its state, which the quick path's mark says is never so).
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    leased = TokenBucket(100, 10, backend=RedisBackend(client, coalesce=True), name=name, clock=clock, lease=0.5)
    plain = TokenBucket(100, 10, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert leased.try_acquire()
    assert leased.try_acquire()
    assert plain.try_acquire()
    assert plain.try_acquire()
    state = client.get(key_for(name, "token_bucket", injected=True))
    assert state is not None
    assert not clean(state)


def test_a_bucket_follows_a_change_set_beside_the_library_once_a_tenth_has_passed(redis_client: redis.Redis) -> None:
    # A writer beside the library that rewrites the state, as an older release's `set`
    # does: this release's scripts on another client (they keep nothing). A decision
    # that used what was kept writes the state unmarked, so the quick path does not
    # hide the change for the minute until the code is written again.
    client = redis_client
    beside = redis.Redis.from_url(REDIS_URL)
    call_by_script(beside)
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    bucket = TokenBucket(4, 1, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert bucket.try_acquire()  # asks (it writes what the code says), and keeps it
    write_override(beside, name, Override(rate=1.0, burst=1.0, ttl=None), now=clock.now())
    bucket.try_acquire()  # may use what was kept: the code's burst of 4
    clock.advance(2 * TRUSTED)
    assert not bucket.try_acquire()  # the change's burst of 1, two taken
    beside.close()


def test_a_peek_keeps_nothing_so_a_change_set_before_any_decision_is_seen_at_once(client: Any) -> None:
    # No decision yet, so no code written: `set` writes the change itself, beside the
    # library. What the first peek found must not hide it from the next.
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    bucket = LeakyBucket(4, 1, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert bucket.peek(1) == 0.0
    write_override(client, name, Override(rate=None, burst=0.3, ttl=None), now=clock.now())
    assert bucket.peek(1) == math.inf  # more than the changed burst could ever hold
