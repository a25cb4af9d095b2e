"""Redis Sentinel: the ``redis+sentinel://`` URL, and limiters that carry on through a failover.

The URL tests need no server. The others run a real master, replica and three
sentinels on loopback (``servers.RedisSentinelSet``, started once for the module), and
one of them SIGKILLs the master: whichever test runs after it finds the promoted
replica as the master, which the sentinels name, so the order does not matter.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.exceptions
import redis.sentinel

from ratelimit import BackendUnavailable, RedisBackend, TokenBucket
from ratelimit._stores.redis.calls import DEFAULT_POOL_SIZE
from ratelimit._stores.redis.clients import DEFAULT_CONNECT_TIMEOUT, DEFAULT_SOCKET_TIMEOUT
from ratelimit._stores.redis.sentinel import parse_sentinel_url

from conftest import unavailable, unique_name
from servers import HOST, RedisSentinelSet, RedisServer

SECRET = "s3cr%40t"  # percent-encoded "s3cr@t"
PLAIN_SECRET = "s3cr@t"

# -- the URL, no server ------------------------------------------------------------------


def test_the_url_names_sentinels_service_db_and_credentials() -> None:
    found = parse_sentinel_url(
        f"redis+sentinel://app:{SECRET}@10.0.0.1,10.0.0.2:26380,[::1]:26381/cache/3"
        "?socket_timeout=0.25&sentinel_password=other&sentinel_username=watcher"
    )
    assert found.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 26381))
    assert found.service == "cache"
    assert found.db == 3
    assert (found.username, found.password) == ("app", PLAIN_SECRET)
    assert (found.sentinel_username, found.sentinel_password) == ("watcher", "other")
    assert found.timeouts == {"socket_timeout": 0.25}
    assert PLAIN_SECRET not in repr(found)
    assert "other" not in repr(found)


def test_a_short_url_takes_the_defaults() -> None:
    found = parse_sentinel_url("REDIS+SENTINEL://127.0.0.1/mymaster")
    assert found.sentinels == ((HOST, 26379),)
    assert (found.service, found.db, found.username, found.password) == ("mymaster", 0, None, None)
    assert found.master_settings() == {"db": 0}
    assert found.sentinel_settings() == {}
    # A password alone (no user), as in redis://:password@host.
    assert parse_sentinel_url(f"redis+sentinel://:{SECRET}@h/m").master_settings() == {
        "db": 0,
        "password": PLAIN_SECRET,
    }


@pytest.mark.parametrize(
    ("url", "names"),
    [
        (f"redis+sentinel://u:{SECRET}@/mymaster", "names no sentinel"),
        (f"redis+sentinel://u:{SECRET}@h:1", "service name"),
        (f"redis+sentinel://u:{SECRET}@h:1/", "service name"),
        (f"redis+sentinel://u:{SECRET}@h:1/m/x", "the db 'x' is not a number"),
        (f"redis+sentinel://u:{SECRET}@h:1/m/0/extra", "is not /service or /service/db"),
        (f"redis+sentinel://u:{SECRET}@h:port/m", "port 'port' of sentinel 'h'"),
        (f"redis+sentinel://u:{SECRET}@h:1,h2:99999/m", "port '99999' of sentinel 'h2'"),
        (f"redis+sentinel://u:{SECRET}@h:1,,h2/m", "sentinel address ''"),
        (f"redis+sentinel://u:{SECRET}@[::1/m", "is not [ipv6]:port"),
        (f"redis+sentinel://u:{SECRET}@h/m?password={SECRET}", "unknown option 'password'"),
        (f"redis+sentinel://u:{SECRET}@h/m?socket_timeout=soon", "socket_timeout='soon'"),
        (f"redis+sentinel://u:{SECRET}@h/m?socket_timeout=-1", "socket_timeout='-1'"),
        (f"redis+sentinel://u:{SECRET}@h/m?sentinel_password", "option 'sentinel_password' has no value"),
        (f"redis+sentinel://u:{SECRET}@h/m?socket_timeout=1&socket_timeout=2", "given twice"),
        (f"redis+sentinel://u:{SECRET}@h/m#frag", "fragment"),
    ],
)
def test_a_bad_url_names_the_part_and_hides_the_password(url: str, names: str) -> None:
    with pytest.raises(ValueError, match="bad Redis Sentinel URL") as caught:
        RedisBackend.from_url(url)
    message = str(caught.value)
    assert names in message
    assert SECRET not in message
    assert PLAIN_SECRET not in message
    assert "u:***@" in message


def test_a_sentinel_password_in_the_query_is_hidden_too() -> None:
    with pytest.raises(ValueError, match="the db 'zero' is not a number") as caught:
        RedisBackend.from_url(f"redis+sentinel://h/m/zero?sentinel_password={SECRET}")
    assert SECRET not in str(caught.value)
    assert "sentinel_password=***" in str(caught.value)


def test_a_sentinel_url_is_not_a_cluster() -> None:
    with pytest.raises(ValueError, match="cluster=True"):
        RedisBackend.from_url("redis+sentinel://:pw@h/m", cluster=True)


def _master_kwargs(client: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = client.connection_pool.connection_kwargs
    return kwargs


def test_from_url_gives_the_sentinel_clients_the_plain_defaults() -> None:
    # Nothing listens there: a client connects only when first used.
    backend = RedisBackend.from_url(f"redis+sentinel://app:{SECRET}@127.0.0.1:1,127.0.0.1:2/cache/2")
    client = backend.client
    master = _master_kwargs(client)
    assert master["socket_timeout"] == DEFAULT_SOCKET_TIMEOUT
    assert master["socket_connect_timeout"] == DEFAULT_CONNECT_TIMEOUT
    assert (master["db"], master["username"], master["password"]) == (2, "app", PLAIN_SECRET)
    assert master["retry"].get_retries() == 0
    assert client.connection_pool.max_connections == DEFAULT_POOL_SIZE + 1 == backend.pool_size + 1  # one held
    manager = client.connection_pool.sentinel_manager
    assert [(s.connection_pool.connection_kwargs["port"]) for s in manager.sentinels] == [1, 2]
    asking = manager.sentinels[0].connection_pool.connection_kwargs
    assert asking["socket_timeout"] == DEFAULT_SOCKET_TIMEOUT
    assert asking.get("password") is None  # the master's password is not the sentinels'
    assert repr(backend) == "RedisBackend(sentinel service cache, on_unavailable='raise')"
    backend.close()


def test_options_and_the_query_set_timeouts_and_pool() -> None:
    url = "redis+sentinel://127.0.0.1:1/m?socket_timeout=0.2&sentinel_password=pw&sentinel_username=w"
    backend = RedisBackend.from_url(url, pool_size=4, socket_timeout=9.0, socket_connect_timeout=0.3)
    master = _master_kwargs(backend.client)
    # What the URL says wins over the options, as in redis-py's own from_url.
    assert (master["socket_timeout"], master["socket_connect_timeout"]) == (0.2, 0.3)
    assert backend.client.connection_pool.max_connections == 4 + 1  # pool_size and the one held
    asking = backend.client.connection_pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs
    assert (asking["socket_timeout"], asking["username"], asking["password"]) == (0.2, "w", "pw")

    async def async_client() -> None:
        # The asyncio client of this loop: no socket timeout of its own (each call
        # has a deadline), the sentinels asked with the URL's.
        client: Any = backend._async_factory() if backend._async_factory else None
        assert isinstance(client, redis.asyncio.Redis)
        master = _master_kwargs(client)
        assert master["socket_timeout"] is None
        assert master.get("password") is None
        pool: Any = client.connection_pool
        assert pool.max_connections == 4 + 1  # each loop holds one too
        sentinel = pool.sentinel_manager
        assert isinstance(sentinel, redis.asyncio.sentinel.Sentinel)
        assert sentinel.sentinels[0].connection_pool.connection_kwargs["socket_timeout"] == 0.2
        await client.aclose()

    asyncio.run(async_client())
    assert backend._deadline == 0.3  # the longer of the two timeouts
    backend.close()


def test_a_dead_sentinel_set_is_unavailable_not_a_bug() -> None:
    backend = RedisBackend.from_url("redis+sentinel://127.0.0.1:1,127.0.0.1:2/m")
    limiter = TokenBucket(5, 1, backend=backend, name=unique_name("sentinel"))
    with pytest.raises(BackendUnavailable) as caught:
        limiter.try_acquire()
    assert isinstance(caught.value.__cause__, redis.sentinel.MasterNotFoundError)

    async def run() -> None:
        with pytest.raises(BackendUnavailable) as caught:
            await limiter.try_acquire_async()
        assert isinstance(caught.value.__cause__, redis.asyncio.sentinel.MasterNotFoundError)
        await backend.aclose()

    asyncio.run(run())


# -- real servers -------------------------------------------------------------------------


def _have_redis_server() -> None:
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")


@pytest.mark.servers
def test_a_replica_refuses_a_script_as_unavailable() -> None:
    # What a client still pointed at a demoted master meets: READONLY, an outage.
    _have_redis_server()
    with RedisServer() as master, RedisServer(None, "--replicaof", HOST, str(master.port)) as replica:
        backend = RedisBackend(redis.Redis(host=HOST, port=replica.port, socket_timeout=1))
        with pytest.raises(BackendUnavailable) as caught:
            TokenBucket(5, 1, backend=backend, name=unique_name("replica")).try_acquire()
        assert isinstance(caught.value.__cause__, redis.exceptions.ReadOnlyError)
        assert str(caught.value.__cause__).startswith("You can't write against a read only replica")
        backend.close()


@pytest.fixture(scope="module")
def sentinels() -> Iterator[RedisSentinelSet]:
    """A master, a replica and three sentinels, for this module."""
    _have_redis_server()
    group = RedisSentinelSet()
    try:
        group.start()
    except Exception as exc:  # pragma: no cover - environment trouble
        group.stop()
        unavailable(f"could not start Redis Sentinel: {exc}")
    yield group
    group.stop()


@pytest.mark.servers
def test_acquires_through_the_url_sync_and_async(sentinels: RedisSentinelSet) -> None:
    backend = RedisBackend.from_url(sentinels.url)
    name = unique_name("sentinel")
    limiter = TokenBucket(3, 0.001, backend=backend, name=name)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, True]
    assert not limiter.try_acquire()

    async def run() -> None:
        same = TokenBucket(3, 0.001, backend=backend, name=name)
        assert not await same.try_acquire_async()  # one budget, seen from asyncio
        fresh = TokenBucket(2, 0.001, backend=backend, name=unique_name("sentinel"))
        assert [await fresh.try_acquire_async() for _ in range(3)] == [True, True, False]
        await backend.aclose()

    asyncio.run(run())


@pytest.mark.servers
def test_a_client_from_master_for_works_as_it_is(sentinels: RedisSentinelSet) -> None:
    make: Any = redis.sentinel.Sentinel  # untyped in redis-py
    sentinel = make(sentinels.addresses, socket_timeout=1)
    backend = RedisBackend(sentinel.master_for(sentinels.service, socket_timeout=1))
    limiter = TokenBucket(2, 0.001, backend=backend, name=unique_name("master-for"))
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    backend.close()
    sentinel.close()

    async def run() -> None:
        make_async: Any = redis.asyncio.sentinel.Sentinel
        async_sentinel = make_async(sentinels.addresses, socket_timeout=1)
        client = async_sentinel.master_for(sentinels.service, socket_timeout=1)
        async with RedisBackend(client) as backend:
            limiter = TokenBucket(2, 0.001, backend=backend, name=unique_name("master-for"))
            assert [await limiter.try_acquire_async() for _ in range(3)] == [True, True, False]
        await async_sentinel.aclose()

    asyncio.run(run())


class Driver:
    """Acquires in a loop on a thread of its own until told to stop, each outcome kept
    with the times its call began and ended: ``True``/``False``, or the exception raised."""

    def __init__(self, backend: RedisBackend, asynchronous: bool) -> None:
        self.backend = backend
        self.limiter = TokenBucket(1_000_000, 1_000_000, backend=backend, name=unique_name("failover"))
        self.outcomes: list[tuple[float, float, bool | BaseException]] = []
        self.stopping = threading.Event()
        target = self._run_async if asynchronous else self._run
        self.thread = threading.Thread(target=target, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            try:
                outcome: bool | BaseException = self.limiter.try_acquire()
            except Exception as exc:
                outcome = exc
            self.outcomes.append((began, time.monotonic(), outcome))
            time.sleep(0.005)
        self.backend.close()

    def _run_async(self) -> None:
        async def run() -> None:
            while not self.stopping.is_set():
                began = time.monotonic()
                try:
                    outcome: bool | BaseException = await self.limiter.try_acquire_async()
                except Exception as exc:
                    outcome = exc
                self.outcomes.append((began, time.monotonic(), outcome))
                await asyncio.sleep(0.005)
            await self.backend.aclose()

        asyncio.run(run())

    def __enter__(self) -> Driver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)


def _replication_lag(master: redis.Redis, replica: redis.Redis, samples: int = 20) -> tuple[int, float]:
    """The most bytes the replica was behind the master, and the longest it took to
    catch up with an offset, over ``samples`` probes while the drivers write."""
    most_bytes, most_seconds = 0, 0.0
    for _ in range(samples):
        ahead = int(master.info("replication")["master_repl_offset"])
        began = time.monotonic()
        while True:
            behind = int(replica.info("replication")["slave_repl_offset"])
            most_bytes = max(most_bytes, ahead - behind)
            if behind >= ahead:
                break
            time.sleep(0.0005)
        most_seconds = max(most_seconds, time.monotonic() - began)
        time.sleep(0.02)
    return most_bytes, most_seconds


@pytest.mark.servers
def test_acquires_carry_on_through_a_failover(sentinels: RedisSentinelSet) -> None:
    old, new = sentinels.master_port(), sentinels.replica.port
    if old == new:  # pragma: no cover - a failover already happened in this module
        pytest.fail("the module's master was failed over before this test")
    # A budget spent on the old master and replicated: the new master remembers it.
    spent = TokenBucket(3, 0.001, backend=RedisBackend.from_url(sentinels.url), name=unique_name("spent"))
    assert [spent.try_acquire() for _ in range(3)] == [True, True, True]
    master: Any = redis.Redis(host=HOST, port=sentinels.master.port, socket_timeout=2)
    replica = redis.Redis(host=HOST, port=sentinels.replica.port, socket_timeout=2)
    assert master.execute_command("WAIT", 1, 2000) == 1

    raising = Driver(RedisBackend.from_url(sentinels.url), asynchronous=False)
    raising_async = Driver(RedisBackend.from_url(sentinels.url), asynchronous=True)
    local = Driver(RedisBackend.from_url(sentinels.url, on_unavailable="local"), asynchronous=False)
    with raising, raising_async, local:
        time.sleep(0.3)
        lag_bytes, lag_seconds = _replication_lag(master, replica)
        killed = time.monotonic()
        sentinels.kill_master()
        assert sentinels.wait_for_failover(deadline=15.0) == new
        failed_over = time.monotonic()
        time.sleep(0.5)
    master.close()
    replica.close()
    print(
        f"\nreplica lag under load: at most {lag_bytes} bytes behind at a probe, an offset reached within"
        f" {lag_seconds * 1000:.1f} ms (the probes' own round trips included);"
        f" failover seen by every sentinel {failed_over - killed:.2f} s after SIGKILL"
    )

    for driver in (raising, raising_async):
        during = [outcome for began, _, outcome in driver.outcomes if killed <= began < failed_over]
        after = [outcome for began, _, outcome in driver.outcomes if began >= failed_over]
        errors = [outcome for outcome in during if isinstance(outcome, BaseException)]
        assert errors, "the switch went unnoticed: no call failed while no master was known"
        assert all(isinstance(error, BackendUnavailable) for error in errors), errors
        assert len(after) >= 10
        assert all(outcome is True for outcome in after), after[:5]
        # Every call over before the kill succeeded (one in flight at the kill may not have).
        assert all(outcome is True for _, ended, outcome in driver.outcomes if ended < killed)

    # The local fallback grants all along: no error, and some grants decided locally.
    assert all(outcome is True for _, _, outcome in local.outcomes)
    assert any(killed <= began < failed_over for began, _, _ in local.outcomes)
    assert local.backend.stats().fell_back > 0

    assert not spent.try_acquire()  # the replicated state survived the failover
