"""On Redis, a key of a name (``for_key``) first used after a change by name follows it.

Each key decides in a hash slot of its own, where its script cannot read its name's
change; each process reads the name's change once in a while and its keys' decisions
carry it (redis/name_changes.py, ``carry`` in lua/_single.lua). Two backends on one
client stand for two processes; time is the test's ManualClock, and a process's
reading of the name is made due at once (``every``) instead of waited for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from ratelimit import ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.redis.name_changes import NameChanges

from conftest import unique_name


def grants(limiter: Any, n: int = 1000) -> int:
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


@pytest.fixture(params=["fakeredis", "redis", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis()
    elif request.param == "redis":
        yield request.getfixturevalue("redis_client")
    else:
        yield request.getfixturevalue("cluster_client")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_000.0)


def test_a_key_first_used_after_a_change_by_name_follows_it(client: Any, clock: ManualClock) -> None:
    """In the process that made the change and in another one, whichever the kind."""
    here, there = RedisBackend(client), RedisBackend(client)
    name = unique_name("keysfollow")
    limiter = TokenBucket(10, 1, backend=here, name=name, clock=clock)
    elsewhere = TokenBucket(10, 1, backend=there, name=name, clock=clock)
    assert grants(elsewhere.for_key("before"), 3) == 3  # in use: reached by the SCAN
    assert here.set_limit(name, rate=1, burst=2, clock=clock) == 1
    there.name_changes.forget(name)  # its reading of the name is due (once a second)
    assert grants(limiter.for_key("later-here")) == 2
    assert grants(elsewhere.for_key("later-there")) == 2
    clock.advance(1.0)
    assert grants(elsewhere.for_key("later-there")) == 1  # at the new rate
    window = unique_name("keysfollow")
    counted = SlidingWindow(10, 1, backend=there, name=window, clock=clock)
    here.set_limit(window, rate=3, clock=clock)
    there.name_changes.forget(window)
    assert grants(counted.for_key("later")) == 3


def test_after_a_reset_by_name_later_keys_go_back(client: Any, clock: ManualClock) -> None:
    here, there = RedisBackend(client), RedisBackend(client)
    there.name_changes.every = 0.0  # reads the name at each decision
    name = unique_name("keysfollow")
    elsewhere = TokenBucket(10, 1, backend=there, name=name, clock=clock)
    here.set_limit(name, burst=2, clock=clock)
    took = elsewhere.for_key("took")
    assert grants(took) == 2
    assert here.reset_limit(name, clock=clock)
    clock.advance(100.0)
    assert grants(took) == 10  # in use at the reset: reached by it
    assert grants(elsewhere.for_key("after")) == 10


def test_a_key_taking_a_change_after_its_reset_goes_back(client: Any, clock: ManualClock) -> None:
    """A process yet to read a reset carries the change it last read: a key first used
    by it then takes the change, and goes back at its next decision once the process
    carries the reset."""
    here, there = RedisBackend(client), RedisBackend(client)
    there.name_changes.every = 3600.0
    name = unique_name("keysfollow")
    elsewhere = TokenBucket(10, 1, backend=there, name=name, clock=clock)
    here.set_limit(name, burst=2, clock=clock)
    assert grants(elsewhere.for_key("first")) == 2  # read now, then held an hour
    here.reset_limit(name, clock=clock)
    late = elsewhere.for_key("late")
    assert grants(late) == 2  # the change as last read
    there.name_changes.forget(name)  # the hour is up
    clock.advance(100.0)
    assert grants(late) == 10
    assert here.limit_override(name, key="late", clock=clock) is None


def test_a_keys_own_change_prevails(client: Any, clock: ManualClock) -> None:
    here, there = RedisBackend(client), RedisBackend(client)
    name = unique_name("keysfollow")
    elsewhere = TokenBucket(10, 1, backend=there, name=name, clock=clock)
    here.set_limit(name, burst=5, key="own", clock=clock)  # never used before
    here.set_limit(name, burst=2, clock=clock)
    assert grants(elsewhere.for_key("own")) == 5
    assert grants(elsewhere.for_key("other")) == 2
    change = here.limit_override(name, key="other", clock=clock)
    assert change is not None
    assert change.burst == 2
    assert here.reset_limit(name, key="own", clock=clock)  # then the name's holds there too
    there.name_changes.forget(name)
    clock.advance(100.0)
    assert grants(elsewhere.for_key("own")) == 2


def test_a_change_for_a_while_ends_in_keys_that_took_it(client: Any, clock: ManualClock) -> None:
    here, there = RedisBackend(client), RedisBackend(client)
    there.name_changes.every = 0.0
    name = unique_name("keysfollow")
    elsewhere = TokenBucket(10, 10, backend=there, name=name, clock=clock)
    here.set_limit(name, burst=2, ttl=5, clock=clock)
    took = elsewhere.for_key("took")
    assert grants(took) == 2
    clock.advance(6.0)
    assert grants(took) == 10
    assert grants(elsewhere.for_key("after-its-end")) == 10


def test_nothing_is_carried_while_no_change_is_in_force(client: Any, clock: ManualClock) -> None:
    """A keyed decision's op is sent as it is: nothing after it."""
    backend = RedisBackend(client)
    name = unique_name("keysfollow")
    view: Any = TokenBucket(10, 1, backend=backend, name=name, clock=clock).for_key("k")
    assert grants(view, 1) == 1
    handle = view._handle
    assert handle._args("reserve", 1.0, "")[0] in ("reserve", "~reserve", "!reserve", "^reserve")
    backend.set_limit(name, burst=2, clock=clock)
    assert " " in handle._args("reserve", 1.0, "")[0]
    backend.reset_limit(name, clock=clock)
    assert handle._args("reserve", 1.0, "")[0].split(" ")[1].isdigit()  # the reset, for a while


def test_a_name_read_on_an_event_loop_is_read_beside_the_decisions() -> None:
    import asyncio

    reads: list[str] = []

    async def read_async(key: str) -> bytes:
        reads.append(key)
        return b"7 - 2.0 -"

    changes = NameChanges(None, read_async)

    async def main() -> tuple[str, str]:
        first = changes.carried("api")  # nothing read yet: nothing carried
        await asyncio.sleep(0)  # the read's task runs
        return first, changes.carried("api")

    assert asyncio.run(main()) == ("", " 7 - 2.0 -")
    assert len(reads) == 1


def test_an_asyncio_clients_keys_follow_once_the_name_is_read(clock: ManualClock) -> None:
    """On an event loop the name is read by a task beside the decisions: the keys
    used once it has landed follow the change."""
    import asyncio

    import fakeredis.aioredis

    server = fakeredis.FakeServer()
    here = RedisBackend(fakeredis.FakeRedis(server=server))
    name = unique_name("keysfollow")
    here.set_limit(name, burst=2, clock=clock)

    async def scenario() -> tuple[int, int]:
        there = RedisBackend(fakeredis.aioredis.FakeRedis(server=server))
        limiter = TokenBucket(10, 1, backend=there, name=name, clock=clock)
        assert await limiter.for_key("first").try_acquire_async()  # starts the read
        for _ in range(10):
            await asyncio.sleep(0)
        later = limiter.for_key("later")
        granted = 0
        while granted < 100 and await later.try_acquire_async():
            granted += 1
        await there.aclose()
        return granted, len(there.name_changes._tasks)

    assert asyncio.run(scenario()) == (2, 0)


@pytest.mark.servers
def test_a_server_at_a_revision_without_follow_takes_this_one() -> None:
    """A key's decision that carries calls ``follow_<kind>``: a server holding an older
    revision (which lacks it) is given this one, and the key follows."""
    import redis

    from ratelimit._stores.redis.scripts import REVISION, library, library_text

    from conftest import private_server

    server = private_server()
    try:
        admin = redis.Redis.from_url(server.url)
        older = library_text(library().name, REVISION - 1).text
        older = "\n".join(line for line in older.splitlines() if "'follow_" not in line)
        admin.function_load(older)
        backend = RedisBackend.from_url(server.url)
        clock = ManualClock(1_000.0)
        name = unique_name("keysfollow")
        limiter = TokenBucket(10, 1, backend=backend, name=name, clock=clock)
        assert grants(limiter.for_key("before"), 1) == 1  # no change: the older text decides
        backend.set_limit(name, burst=2, clock=clock)
        assert grants(limiter.for_key("later")) == 2
        assert admin.fcall(library().function("revision"), 0) == [b"1", str(REVISION).encode()]
        backend.close()
        admin.close()
    finally:
        server.cleanup()
