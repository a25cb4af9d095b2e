"""Fixtures shared by the whole suite.

Behaviour tests take ``make`` and build their limiter through it: the limiter then
runs on every store of the backend matrix with one injected :class:`ManualClock`, so
the same scenario must give the same decisions everywhere:

- ``memory``: the in-process store;
- ``fakeredis``: fakeredis with lupa, running the real ``lua/`` scripts, no server;
- ``redis``: a real server at ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``);
- ``cluster``: a real three-master Redis Cluster started on loopback for the session.

Without a reachable server the ``redis`` and ``cluster`` cases skip, unless
``RATELIMIT_REQUIRE_REDIS=1`` (CI sets it), which turns the skip into a failure.
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import fakeredis
import pytest
import redis
import redis.cluster

from ratelimit import ManualClock, MemoryBackend, RedisBackend
from ratelimit._stores.store import Backend

if TYPE_CHECKING:
    from servers import RedisServer

L = TypeVar("L")

#: The helpers the tests share (servers, clocks, providers, worker scripts), on
#: ``sys.path`` through pyproject.toml's ``pythonpath``; the tests start the workers by path.
SUPPORT = Path(__file__).resolve().parent / "support"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# The command line's --redis defaults to it: a developer's own must not steer the tests
# (those of RATELIMIT_REDIS_URL set it themselves).
os.environ.pop("RATELIMIT_REDIS_URL", None)
REQUIRE_REDIS = os.environ.get("RATELIMIT_REQUIRE_REDIS", "") not in ("", "0")

# Names unique to this run, so that runs sharing one server never see each other's keys.
_RUN = uuid.uuid4().hex[:8]
_names = itertools.count()


def unique_name(prefix: str = "test") -> str:
    return f"{prefix}-{_RUN}-{next(_names)}"


def state_keys(client: redis.Redis, name: str) -> list[str]:
    """The keys that hold limiter ``name``'s state, sorted: not what its code says
    (``:code``, kept a day) nor its counters for ``ratelimit top`` (``:top:<second>``)."""
    found = [key.decode() for key in client.scan_iter(match=f"ratelimit:{{{name}}}:*", count=1000)]
    return sorted(key for key in found if not key.endswith(":code") and ":top:" not in key)


def unavailable(reason: str) -> None:
    """Skip, or fail when CI requires the real servers."""
    if REQUIRE_REDIS:
        pytest.fail(f"RATELIMIT_REQUIRE_REDIS is set but {reason}")
    pytest.skip(reason)


def private_server(*extra: str, **options: Any) -> RedisServer:
    """A started ``redis-server`` of this test's own (``servers.RedisServer``): server-wide
    commands (flushes, configuration, statistics) touch nobody else. Clean it up."""
    from servers import RedisServer

    if shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")
    server = RedisServer(None, *extra, **options)
    try:
        server.start()
    except RuntimeError as exc:  # pragma: no cover - environment trouble
        server.cleanup()
        unavailable(f"could not start a private redis-server: {exc}")
    return server


def command_calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``; ``function|load``
    for a subcommand)."""
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.fixture(scope="session")
def quiet_redis() -> Iterator[RedisServer]:
    """A private server for the session, for tests that count commands server-wide
    (``INFO commandstats``): on the shared server other clients' calls land in the count."""
    server = private_server()
    yield server
    server.cleanup()


@pytest.fixture
def quiet_client(quiet_redis: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's private server."""
    client = redis.Redis.from_url(quiet_redis.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_client() -> Iterator[redis.Redis]:
    """A client of the real server at REDIS_URL."""
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        unavailable(f"no Redis server answers at {REDIS_URL}: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """A three-master Redis Cluster on free loopback ports, for the whole session."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        unavailable("redis-server / redis-cli are not installed")
    from servers import RedisCluster

    cluster = RedisCluster()
    try:
        cluster.start()
    except Exception as exc:  # pragma: no cover - environment trouble
        cluster.stop()
        unavailable(f"could not start a Redis Cluster: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def cluster_client(redis_cluster: Any) -> Iterator[redis.cluster.RedisCluster]:
    host, port = redis_cluster.startup_nodes[0]
    client = redis.cluster.RedisCluster(host=host, port=port, socket_timeout=2)
    yield client
    client.close()


STORES = ["memory", "fakeredis", "redis", "cluster"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(store: str, request: pytest.FixtureRequest) -> Backend:
    """Every store a limiter can keep its state in."""
    if store == "memory":
        return MemoryBackend()
    if store == "fakeredis":
        return RedisBackend(fakeredis.FakeRedis())
    if store == "redis":
        return RedisBackend(request.getfixturevalue("redis_client"))
    return RedisBackend(request.getfixturevalue("cluster_client"))


@pytest.fixture
def clock() -> ManualClock:
    # Not zero: scripts and algorithms must not rely on time starting at 0.
    return ManualClock(start=1_000.0)


@pytest.fixture
def make(backend: Backend, clock: ManualClock) -> Callable[..., Any]:
    """``make(TokenBucket, 3, 1)``: a limiter on the current store, with ``clock``
    (unless the test passes a ``clock`` or ``name`` of its own)."""

    def build(cls: Callable[..., L], *args: Any, **kwargs: Any) -> L:
        kwargs.setdefault("name", unique_name())
        kwargs.setdefault("clock", clock)
        return cls(*args, backend=backend, **kwargs)

    return build
