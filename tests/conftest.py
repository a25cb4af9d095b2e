"""Fixtures shared by the whole suite.

Behaviour tests take ``make`` and build their limiter through it: the limiter then
runs on every store of the backend matrix with one injected :class:`ManualClock`, so
the same scenario must give the same decisions everywhere:

- ``memory``: the in-process store;
- ``fakeredis``: fakeredis with lupa, running the real ``lua/`` scripts, no server;
- ``redis``: a real server at ``REDIS_URL`` (default ``DEFAULT_REDIS_URL``);
- ``cluster``: a real three-master Redis Cluster started on loopback for the session;
- ``sqlite``: a ``SQLiteBackend`` on a file of the test's own.

Without a reachable server the ``redis`` and ``cluster`` cases skip, unless
``RATELIMIT_REQUIRE_REDIS=1`` (CI sets it), which turns the skip into a failure.

Two loops run the suite (the Makefile): ``make test-all`` runs every test, in one
process, with the examples each property test asks for, as CI does; ``make test`` is
the fast loop, ``-m "not slow and not cluster and not servers and not stress"
--hypothesis-profile=fast -n 2``: no real-time runs, no Cluster, no private servers
started and killed, no thousands of tasks at once, and at most ``FAST_EXAMPLES``
examples per property test, on two processes. The real server at ``REDIS_URL`` stays
in it: every ``redis`` case of the backend matrix runs there too.
"""

from __future__ import annotations

import gc
import itertools
import os
import re
import shutil
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import fakeredis
import pytest
import redis
import redis.cluster
from hypothesis import settings

from ratelimit import ManualClock, MemoryBackend, RedisBackend, SQLiteBackend
from ratelimit._stores.store import Backend

if TYPE_CHECKING:
    from servers import RedisServer

L = TypeVar("L")

#: The helpers the tests share (servers, clocks, providers, worker scripts), on
#: ``sys.path`` through pyproject.toml's ``pythonpath``; the tests start the workers by path.
SUPPORT = Path(__file__).resolve().parent / "support"

#: Where the documentation and ``docker compose`` put the server; the tests run on
#: ``REDIS_URL`` instead when it is set. Every test, helper and worker takes its URL from here.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_URL = os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)
# The command line's --redis defaults to it: a developer's own must not steer the tests
# (those of RATELIMIT_REDIS_URL set it themselves).
os.environ.pop("RATELIMIT_REDIS_URL", None)
REQUIRE_REDIS = os.environ.get("RATELIMIT_REQUIRE_REDIS", "") not in ("", "0")

# Names unique to this run, so that runs sharing one server never see each other's keys.
_RUN = uuid.uuid4().hex[:8]
_names = itertools.count()


#: The fast loop's cap on each property test's examples (``--hypothesis-profile=fast``).
FAST_EXAMPLES = 10
settings.register_profile("fast", max_examples=FAST_EXAMPLES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark what the markers select on, and cap the examples in the fast profile.

    A case parametrised on ``"cluster"`` (the backend matrix's, or a test file's own list
    of stores) or using the Cluster fixture is ``cluster``; one on ``"redis"`` or using
    ``redis_client`` is ``redis``. Under
    ``--hypothesis-profile=fast`` a property test runs at most ``FAST_EXAMPLES``
    examples, whatever its own ``@settings`` ask (those win over a profile otherwise).
    """
    fast = settings.get_current_profile_name() == "fast"
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = {value for value in callspec.params.values() if isinstance(value, str)} if callspec else set()
        fixtures = set(getattr(item, "fixturenames", ()))
        if "cluster" in params or fixtures & {"redis_cluster", "cluster_client"}:
            item.add_marker(pytest.mark.cluster)
        if "redis" in params or "redis_client" in fixtures:
            item.add_marker(pytest.mark.redis)
        if fast and isinstance(item, pytest.Function):
            _cap_examples(item)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Exempt what collection built (every module, case and example strategy) from the
    garbage collector's scans: the tests that call ``gc.collect()`` to see an object go
    paid for scanning all of it each time (about a second per test). What the tests
    allocate afterwards is collected as usual."""
    gc.freeze()


def _cap_examples(item: pytest.Function) -> None:
    # Hypothesis reads a test's settings from this attribute at each run; a second
    # @settings cannot replace the first, so the fast profile sets it here.
    test = item.function
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if own is not None and own.max_examples > FAST_EXAMPLES:
        test._hypothesis_internal_use_settings = settings(own, max_examples=FAST_EXAMPLES)


def stable_id(value: object) -> str:
    """A case's id from its ``repr``, less any memory address (``<object object at
    0x7f...>``): ids must be the same in every process, or ``-n 2`` refuses to run."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def unique_name(prefix: str = "test") -> str:
    """A name no other run uses: every key a test writes in a shared Redis holds one
    (``_forget_run`` deletes them at the end of the run)."""
    return f"{prefix}-{_RUN}-{next(_names)}"


#: What every key of this run matches (``unique_name``), as a SCAN pattern.
RUN_PATTERN = f"*-{_RUN}-*"


def _in_database(url: str, db: int) -> str:
    parts = urllib.parse.urlsplit(url)
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
    return urllib.parse.urlunsplit(parts._replace(path=f"/{db}", query=query))


def _unlink_all(client: Any, pattern: str) -> int:
    """Delete every key matching ``pattern`` (a Cluster's client scans each master),
    a pipeline of UNLINKs per thousand; how many there were."""
    found = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            found += _unlink(client, batch)
    return found + _unlink(client, batch)


def _unlink(client: Any, keys: list[bytes]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)  # one key a call: a Cluster's keys sit in many slots
    pipe.execute()
    count = len(keys)
    keys.clear()
    return count


def forget_run(url: str = REDIS_URL, pattern: str = RUN_PATTERN) -> int:
    """Delete this run's keys (``pattern``) from every database of the server at
    ``url`` that holds keys, or from every master of the Cluster it is a node of;
    how many. Nothing else is touched (other runs share the server), and a server
    that cannot be reached or refuses is left as it is."""
    try:
        probe = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=1)
        try:
            cluster = bool(probe.info("cluster").get("cluster_enabled"))
            databases = [0] if cluster else sorted(int(db[2:]) for db in probe.info("keyspace"))
        finally:
            probe.close()
        if cluster:
            nodes = redis.cluster.RedisCluster.from_url(url, socket_timeout=5)
            try:
                return _unlink_all(nodes, pattern)
            finally:
                nodes.close()
        deleted = 0
        for db in databases:
            client = redis.Redis.from_url(_in_database(url, db), socket_timeout=5, socket_connect_timeout=1)
            try:
                deleted += _unlink_all(client, pattern)
            finally:
                client.close()
        return deleted
    except redis.exceptions.RedisError:
        return 0


@pytest.fixture(scope="session", autouse=True)
def _leave_nothing_behind() -> Iterator[None]:
    """Tests leave nothing in the Redis at REDIS_URL (a developer's own, often): at the
    end of the run (of each ``-n`` worker: each has a run id of its own), every key
    holding this run's id goes, in every database the tests wrote to."""
    yield
    forget_run()


def state_keys(client: redis.Redis, name: str) -> list[str]:
    """The keys that hold limiter ``name``'s state, sorted: not what its code says
    (``:code``) nor its counters for ``ratelimit top`` (``:top:<second>``)."""
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


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Any:
    """A client of a server that runs the real ``lua/``: fakeredis (with lupa, no
    server) and the real Redis at REDIS_URL (``redis_client``). A file may define a
    ``client`` of its own."""
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("redis_client")


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


STORES = ["memory", "fakeredis", "redis", "cluster", "sqlite"]


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
    if store == "sqlite":
        return SQLiteBackend(request.getfixturevalue("tmp_path") / "store.db")
    return RedisBackend(request.getfixturevalue("cluster_client"))


@pytest.fixture
def clock() -> ManualClock:
    # Not zero: scripts and algorithms must not rely on time starting at 0.
    return ManualClock(start=1_000.0)


#: What the SQLite store does not hold yet: these tests skip there.
NOT_ON_SQLITE: dict[str, str] = {}


@pytest.fixture
def make(backend: Backend, clock: ManualClock, store: str) -> Callable[..., Any]:
    """``make(TokenBucket, 3, 1)``: a limiter on the current store, with ``clock``
    (unless the test passes a ``clock`` or ``name`` of its own)."""

    def build(cls: Callable[..., L], *args: Any, **kwargs: Any) -> L:
        if store == "sqlite":
            members = [m for arg in args if isinstance(arg, list) for m in arg]
            for kind in (getattr(cls, "__name__", ""), *(type(m).__name__ for m in members)):
                if kind in NOT_ON_SQLITE:
                    pytest.skip(NOT_ON_SQLITE[kind])
        kwargs.setdefault("name", unique_name())
        kwargs.setdefault("clock", clock)
        return cls(*args, backend=backend, **kwargs)

    return build
