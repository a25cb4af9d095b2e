"""A bucket's reserve that decides on its state alone (the fast path), and the mark in
its state that allows it.

A bucket's state written by a reserve that found nothing beside it (no change, no
holes or pause, no slack record) is "clean" (a mark in its text, see the top of
``lua/_single.lua``); a reserve that reads a clean state decides on it alone, with no
EXISTS. These tests hold the invariant at its edges: every writer of something beside
the state drops the mark in the same call, a change written by hand is followed from
the next decision that writes what the code says, and releases before the mark read a
clean state's numbers as they are. Whether the fast path decides as the full path does
is the conformance suite's (``tests/algorithms/test_conformance.py``, its ``named``
cases).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from ratelimit import LeakyBucket, ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.keys import config_key, key_for
from ratelimit._stores.redis import handles as redis_handles

from conftest import command_calls, unique_name
from marks import clean
from servers import RedisServer

BUCKETS = {"token_bucket": TokenBucket, "leaky_bucket": LeakyBucket}


def _bucket(kind: str, backend: RedisBackend, clock: ManualClock, name: str) -> Any:
    # Four tokens, one a second: a few grants at once, then a queue.
    return BUCKETS[kind](4, 1, backend=backend, name=name, clock=clock)


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_reserve_with_nothing_beside_writes_the_stateclean(client: Any, kind: str) -> None:
    name = unique_name("quick")
    clock = ManualClock(1_000.0)
    bucket = _bucket(kind, RedisBackend(client, coalesce=False), clock, name)
    alone = BUCKETS[kind](4, 1, clock=clock)  # in process: the same decisions
    for _ in range(3):
        assert [bucket.try_acquire() for _ in range(5)] == [alone.try_acquire() for _ in range(5)]
        assert clean(client.get(key_for(name, kind, injected=True)))
        clock.advance(0.7)


@pytest.mark.servers
@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_clean_state_is_decided_on_alone(quiet_redis: RedisServer, kind: str) -> None:
    admin = redis.Redis.from_url(quiet_redis.url)
    backend = RedisBackend.from_url(quiet_redis.url, coalesce=False)
    bucket = _bucket(kind, backend, ManualClock(1_000.0), unique_name("quick"))
    assert bucket.try_acquire()  # the first writes what the code says: the full path
    admin.config_resetstat()
    granted = sum(bucket.try_acquire() for _ in range(4))
    # The state read and written: no EXISTS, nothing else read. (TIME is not run: the
    # clock is the test's.) The counters of this second are held in Lua, the first one
    # written by the call before (see "Counting in memory" in lua/_top.lua).
    assert command_calls(admin, "fcall") == 4
    assert command_calls(admin, "get") == 4
    assert command_calls(admin, "set") == granted  # a refusal writes nothing
    assert command_calls(admin, "exists") == 0
    assert command_calls(admin, "hincrby") == 0
    backend.close()
    admin.close()


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_withdrawal_that_leaves_a_hole_drops_the_mark_and_the_hole_is_taken(client: Any, kind: str) -> None:
    name = unique_name("quick")
    clock = ManualClock(1_000.0)
    bucket = _bucket(kind, RedisBackend(client, coalesce=False), clock, name)
    state = key_for(name, kind, injected=True)
    while bucket.try_acquire():
        pass
    # Two reservations queued behind the burst; the first is withdrawn: a hole.
    first = bucket.reserve()
    second = bucket.reserve()
    assert clean(client.get(state))
    first.cancel()
    assert not clean(client.get(state))
    assert client.exists(f"{state}:holes")
    # The next reserve takes the full path, and the hole: it waits as the first did.
    third = bucket.reserve()
    assert third.at == pytest.approx(first.at)
    second.cancel()
    third.cancel()


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_change_set_through_the_library_is_followed_at_once(client: Any, kind: str) -> None:
    name = unique_name("quick")
    backend = RedisBackend(client, coalesce=False)
    clock = ManualClock(1_000.0)
    bucket = _bucket(kind, backend, clock, name)
    assert bucket.try_acquire()
    assert clean(client.get(key_for(name, kind, injected=True)))
    backend.set_limit(name, rate=1, burst=1, clock=clock)
    assert not clean(client.get(key_for(name, kind, injected=True)))
    # One token a second now, the one just granted still owed: nothing at once.
    assert not bucket.try_acquire()


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_change_written_by_hand_is_followed_from_the_next_decision_that_writes_the_code(
    client: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("quick")
    backend = RedisBackend(client, coalesce=False)
    clock = ManualClock(1_000.0)
    bucket = _bucket(kind, backend, clock, name)
    state = key_for(name, kind, injected=True)
    assert bucket.try_acquire()
    # Written with redis-cli, not through the library: no state rewritten, and the
    # clean state's reserves do not look (a token bucket grants its burst's second
    # token; a leaky bucket queues it, as it would anyway).
    client.hset(config_key(name), mapping={"rate": "1", "burst": "1"})
    assert bucket.try_acquire() is (kind == "token_bucket")
    ttl = client.pttl(state)
    monkeypatch.setattr(redis_handles, "CODE_EVERY", 0.0)
    fresh = _bucket(kind, backend, clock, name)
    # Its first decision writes what the code says: the full path finds the change and
    # drops the mark (keeping the state's TTL), and every decision follows it since.
    assert not fresh.try_acquire()
    assert not clean(client.get(state))
    assert 0 < client.pttl(state) <= ttl
    monkeypatch.setattr(redis_handles, "CODE_EVERY", 60.0)
    assert not bucket.try_acquire()


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_clean_state_reads_as_its_numbers_to_releases_before_the_mark(client: Any, kind: str) -> None:
    # What a release before the mark ran to load a bucket: it must read the same
    # numbers from a clean state's text as from a plain one.
    older = {
        "token_bucket": "local x = tonumber(ARGV[1]) return {tostring(x ~= nil), string.format('%.17g', x or 0)}",
        "leaky_bucket": (
            "local d, l = string.match(ARGV[1], '^(%S+) (%S+)$') d, l = tonumber(d), tonumber(l) "
            "return {tostring(d ~= nil and l ~= nil), string.format('%.17g %.17g', d or 0, l or 0)}"
        ),
    }[kind]
    name = unique_name("quick")
    bucket = _bucket(kind, RedisBackend(client, coalesce=False), ManualClock(1_000.0), name)
    for _ in range(6):
        bucket.try_acquire()
    text = client.get(key_for(name, kind, injected=True))
    assert clean(text)
    read, numbers = client.eval(older, 0, text)
    assert read == b"true"
    assert [float(x) for x in numbers.split()] == [float(x) for x in text.split()]


@pytest.mark.parametrize("kind", list(BUCKETS))
def test_a_state_written_by_hand_between_quick_decisions_is_read_as_written(client: Any, kind: str) -> None:
    # The library caches the text it wrote last, and its numbers, to skip parsing a
    # hot bucket's state: a text is read from the key at every decision, and only
    # ever stands for its own numbers, whichever key it was written to and by whom.
    clock = ManualClock(1_000.0)
    backend = RedisBackend(client, coalesce=False)
    one, two = unique_name("quick"), unique_name("quick")
    first, second = _bucket(kind, backend, clock, one), _bucket(kind, backend, clock, two)
    twin = BUCKETS[kind](4, 1, clock=clock)
    for _ in range(3):
        assert [first.try_acquire() for _ in range(5)] == [twin.try_acquire() for _ in range(5)]
        assert second.try_acquire()  # fresh: a state of its own, written last
        # The first's text, copied by hand onto the second: read as the first's
        # state, and the first's (no longer the text written last) still is.
        copied = client.get(key_for(one, kind, injected=True))
        client.set(key_for(two, kind, injected=True), copied, keepttl=True)
        expected = twin.try_acquire()
        assert second.try_acquire() == expected
        assert first.try_acquire() == expected
        clock.advance(2.5)
        client.delete(key_for(two, kind, injected=True))
