"""The function library: loaded once per server, reloaded when lost, scripts where it cannot be.

Each decision is one FCALL of the protocol's library (``ratelimit_p<protocol>``). These
tests take it where deployments go: a fresh server, ``FUNCTION FLUSH`` and ``SCRIPT
FLUSH`` mid-run, a server whose ``FUNCTION``/``FCALL`` is renamed away or refused by
an ACL, two releases side by side, a Sentinel failover to a master without the library,
a Cluster; a flush that lands between the load and the call sent again, a flush in a
loop while threads decide, a server that is full or restarted, a user who may call but
not load, a task cancelled while loading, many callers making their first decision at
once; and what a decision no longer pays for: the counters of ``ratelimit top`` when
they are off (through leases, batches, lanes and composites too), and what the code
says, written once a minute. Private servers on
free loopback ports; time is a :class:`ManualClock` wherever a decision is checked.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

from ratelimit import (
    BackendUnavailable,
    CircuitBreaker,
    Composite,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.keys import code_key
from ratelimit._stores.redis import handles as redis_handles
from ratelimit._stores.redis.held_connection import AsyncHeldConnection
from ratelimit._stores.redis.scripts import (
    ALGORITHMS,
    LANE_KINDS,
    Composed,
    Script,
    breaker_script,
    by_function,
    call_by_script,
    concurrency_script,
    fair_script,
    follow_script,
    group_script,
    lanes_script,
    library,
    live_script,
    refuses_functions,
    single_script,
)

from conftest import command_calls, private_server, unavailable, unique_name
from servers import RedisCluster, RedisSentinelSet, RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = private_server()
    yield made
    made.cleanup()


def _libraries(admin: redis.Redis) -> list[str]:
    """The names of the function libraries loaded on a server."""
    names = []
    for entry in admin.function_list():
        fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
        names.append(fields[b"library_name"].decode())
    return sorted(names)


def _bucket(backend: RedisBackend, clock: ManualClock, name: str | None = None) -> TokenBucket:
    # Three tokens and next to no refill: what a decision grants shows at once.
    return TokenBucket(3, 0.001, backend=backend, name=name or unique_name("fn"), clock=clock)


# -- loaded once, each decision one call ---------------------------------------------


@pytest.mark.servers
def test_a_fresh_server_gets_the_library_once_and_each_decision_is_one_fcall(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = _bucket(backend, ManualClock(1_000.0))
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert command_calls(admin, "function|load") == 1
    # The client's first call looks for the library, finds none and loads it: one FCALL
    # a decision, none answered "Function not found".
    assert command_calls(admin, "function|list") == 1
    assert command_calls(admin, "fcall") == 4
    assert command_calls(admin, "evalsha") == command_calls(admin, "eval") == 0
    assert _libraries(admin) == [library().name]
    backend.close()
    admin.close()


@pytest.mark.servers
def test_the_library_registers_every_driver_of_every_kind(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.function_load(library().source)
    (entry,) = admin.function_list()
    fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
    registered = set()
    for function in fields[b"functions"]:
        described = function if isinstance(function, dict) else dict(zip(function[::2], function[1::2], strict=True))
        registered.add(described[b"name"].decode())
    scripts = [
        *(single_script(kind) for kind in ALGORITHMS),
        *(follow_script(kind) for kind in ALGORITHMS),
        *(lanes_script(kind) for kind in LANE_KINDS),
        *(fair_script(kind) for kind in LANE_KINDS),
        group_script(),
        breaker_script(),
        concurrency_script(),
        live_script(),
    ]
    # ... and the flush of the counts held for `ratelimit top` and the revision
    # (docs/protocol.md), which no script has.
    assert registered == {script.function for script in scripts} | {
        library().function("top_flush"),
        library().function("revision"),
    }
    admin.close()


@pytest.mark.servers
def test_function_flush_mid_run_reloads_and_the_budget_holds(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    clock = ManualClock(1_000.0)
    bucket = _bucket(backend, clock)
    assert [bucket.try_acquire() for _ in range(2)] == [True, True]
    admin.function_flush()
    assert [bucket.try_acquire() for _ in range(2)] == [True, False]
    assert command_calls(admin, "function|load") == 2
    backend.close()
    admin.close()


@pytest.mark.servers
def test_function_flush_mid_run_for_an_asyncio_client(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)

    async def scenario() -> list[bool]:
        client = redis.asyncio.Redis.from_url(server.url)
        backend = RedisBackend(client, coalesce=False)
        bucket = _bucket(backend, ManualClock(1_000.0))
        got = [await bucket.try_acquire_async() for _ in range(2)]
        admin.function_flush()
        got += [await bucket.try_acquire_async() for _ in range(2)]
        await client.aclose()
        return got

    assert asyncio.run(scenario()) == [True, True, True, False]
    assert command_calls(admin, "function|load") == 2
    admin.close()


class _LateToHear(redis.Redis):
    """A client whose first FCALL hears "Function not found" though the library is
    there: as a call in flight while another process loaded it."""

    missed = False

    def fcall(self, function: str, numkeys: int, *keys_and_args: Any) -> Any:
        if not self.missed:
            self.missed = True
            raise redis.exceptions.ResponseError("Function not found")
        return super().fcall(function, numkeys, *keys_and_args)


@pytest.mark.servers
def test_a_call_that_finds_the_library_loaded_meanwhile_does_not_load_it_again(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.function_load(library().source)  # by another process, while this call was out
    backend = RedisBackend(_LateToHear.from_url(server.url), coalesce=False)
    bucket = _bucket(backend, ManualClock(1_000.0))
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert command_calls(admin, "function|load") == 1  # the other process's only
    # The client's first look (the revision loaded), and the one after the FCALL missed.
    assert command_calls(admin, "function|list") == 2
    assert by_function(backend.client)
    backend.close()
    admin.close()


@pytest.mark.servers
def test_script_flush_mid_run_on_a_client_that_calls_scripts(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    call_by_script(backend.client)
    bucket = _bucket(backend, ManualClock(1_000.0))
    assert [bucket.try_acquire() for _ in range(2)] == [True, True]
    admin.script_flush()
    assert [bucket.try_acquire() for _ in range(2)] == [True, False]
    assert command_calls(admin, "fcall") == 0
    assert command_calls(admin, "eval") == 2  # the first call, and the first after the flush
    backend.close()
    admin.close()


# -- servers without Functions --------------------------------------------------------


@pytest.mark.servers
@pytest.mark.parametrize(
    "extra",
    [
        ("--rename-command", "FUNCTION", ""),
        ("--rename-command", "FCALL", ""),
    ],
    ids=["no-FUNCTION", "no-FCALL"],
)
def test_a_server_without_functions_is_called_by_script_from_the_first_refusal_on(extra: tuple[str, ...]) -> None:
    server = private_server(*extra)
    try:
        admin = redis.Redis.from_url(server.url)
        backend = RedisBackend.from_url(server.url, coalesce=False)
        bucket = _bucket(backend, ManualClock(1_000.0))
        assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
        assert not by_function(backend.client)
        assert command_calls(admin, "fcall") <= 1  # asked once, never again
        assert command_calls(admin, "evalsha") == 4
        backend.close()
        admin.close()
    finally:
        server.cleanup()


@pytest.mark.servers
def test_an_acl_without_functions_is_called_by_script(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser(
        "scripts", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all", "-fcall", "-function"]
    )
    backend = RedisBackend.from_url(f"redis://scripts:secret@127.0.0.1:{server.port}/0", coalesce=False)
    bucket = _bucket(backend, ManualClock(1_000.0))
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert not by_function(backend.client)
    backend.close()
    admin.close()


# -- a rolling deploy: two releases on one server ------------------------------------------


@pytest.mark.servers
def test_two_releases_side_by_side_each_keep_their_own_library(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    # An "older release": the same pieces under another version's name, loaded first.
    old_name = "ratelimit_000000000000"
    old = Composed().add(f"#!lua name={old_name}")
    new_text = library().source
    old_text = new_text.replace(library().name, old_name)
    old.add(old_text.split("\n", 1)[1])
    admin.function_load(old.text)
    old_bucket = Script("token_bucket (old)", single_script("token_bucket").composed, f"{old_name}_token_bucket")

    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = _bucket(backend, ManualClock(1_000.0))
    old_key = f"ratelimit:{{{unique_name('old')}}}:token_bucket"
    args = ["reserve", "1000", "1", "0", "3", "0.001", "0", "0"]  # at once, or refused
    for _ in range(3):
        assert bucket.try_acquire()
        assert float(old_bucket(admin, [old_key], args)[0]) == 0.0
    assert not bucket.try_acquire()
    assert float(old_bucket(admin, [old_key], args)[0]) < 0  # each its own budget, both working
    assert _libraries(admin) == sorted([old_name, library().name])
    backend.close()
    admin.close()


# -- errors point into the files ---------------------------------------------------------


@pytest.mark.servers
@pytest.mark.parametrize("scripts", [False, True], ids=["function", "script"])
def test_an_error_names_the_file_and_line_it_came_from(server: RedisServer, scripts: bool) -> None:
    client = redis.Redis.from_url(server.url)
    if scripts:
        call_by_script(client)
    script = single_script("token_bucket")
    key = f"ratelimit:{{{unique_name('err')}}}:token_bucket"
    # Tokens that are no number: the algorithm's arithmetic fails on nil.
    with pytest.raises(redis.exceptions.ResponseError) as caught:
        script(client, [key], ["reserve", "1000", "many", "", "3", "1", "0", "0"])
    message = str(caught.value)
    assert "user_function:" not in message, message
    assert "user_script:" not in message, message
    assert ".lua:" in message, message
    client.close()


@pytest.mark.parametrize(
    ("message", "refuses"),
    [
        ("unknown command 'FCALL', with args beginning with: 'ratelimit_x_token_bucket' '1' ", True),
        ("ERR unknown command `FUNCTION`, with args beginning with: `LOAD` ", True),
        ("NOPERM User scripts has no permissions to run the 'fcall' command", True),
        ("NOPERM this user has no permissions to run the 'function|load' command", True),
        ("ERR FUNCTION is not supported on this service", True),
        # Not a refusal of Functions: a full server, a key the ACL denies, the library's own error.
        ("OOM command not allowed when used memory > 'maxmemory'.", False),
        ("NOPERM No permissions to access a key", False),
        ("ERR user_function:12: Write commands are not allowed from read-only scripts", False),
        ("ERR Function not found", False),
        ("BUSY Redis is busy running a script.", False),
    ],
)
def test_only_a_refusal_of_functions_turns_a_client_to_scripts(message: str, refuses: bool) -> None:
    assert refuses_functions(message) is refuses


def test_composed_text_maps_each_line_back_to_its_file() -> None:
    composed = Composed().add("-- glue").file("_prelude").add("local x = 1")
    prelude_lines = composed.text.count("\n") - 2
    assert composed.where(1) is None
    assert composed.where(2) == "lua/_prelude.lua:1"
    assert composed.where(1 + prelude_lines) == f"lua/_prelude.lua:{prelude_lines}"
    assert composed.where(2 + prelude_lines) is None
    assert composed.translate("ERR user_function:3: boom") == "ERR lua/_prelude.lua:2: boom"


# -- what a decision no longer pays for -------------------------------------------------


def _top_keys(admin: redis.Redis, name: str) -> list[bytes]:
    return list(admin.scan_iter(match=f"ratelimit:{{{name}}}:*top:*"))


@pytest.mark.servers
@pytest.mark.parametrize("counters", [True, False], ids=["counters", "no-counters"])
def test_counters_off_leave_no_trace_for_top(server: RedisServer, counters: bool) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, counters=counters)
    clock = ManualClock(1_000.0)
    names = [unique_name("single"), unique_name("composite"), unique_name("lanes")]
    single = _bucket(backend, clock, names[0])
    composite = Composite([TokenBucket(3, 1), SlidingWindow(5, 1)], backend=backend, name=names[1], clock=clock)
    lanes = TokenBucket(4, 1, low_share=0.5, backend=backend, name=names[2], clock=clock)
    for _ in range(5):
        single.try_acquire()
        composite.try_acquire()
        lanes.try_acquire()
        lanes.low.try_acquire()
    assert not single.try_acquire()
    assert not composite.try_acquire()
    for name in names:
        assert bool(_top_keys(admin, name)) is counters, name
    backend.close()
    admin.close()


def test_counters_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="counters must be a bool, got 'no'"):
        RedisBackend(redis.Redis(), counters="no")  # type: ignore[arg-type]


@pytest.mark.servers
def test_what_the_code_says_is_written_first_and_then_once_a_minute(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    name = unique_name("code")
    bucket = TokenBucket(1_000, 1, backend=backend, name=name, clock=ManualClock(1_000.0))
    assert bucket.try_acquire()
    assert admin.hgetall(code_key(name))[b"kind"] == b"token_bucket"
    admin.delete(code_key(name))
    for _ in range(20):
        assert bucket.try_acquire()
    assert not admin.exists(code_key(name))  # not rewritten, nor read, by each decision
    monkeypatch.setattr(redis_handles, "CODE_EVERY", 0.0)
    fresh = TokenBucket(1_000, 1, backend=backend, name=name, clock=ManualClock(1_000.0))
    assert fresh.try_acquire()  # its first decision writes it
    assert float(admin.hgetall(code_key(name))[b"p1"]) == 1_000
    backend.close()
    admin.close()


# -- failover and Cluster ------------------------------------------------------------------


@pytest.mark.servers
def test_a_failover_to_a_master_without_the_library_reloads_it() -> None:
    if shutil.which("redis-sentinel") is None and shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")
    sentinels = RedisSentinelSet()
    try:
        sentinels.start()
    except RuntimeError as exc:  # pragma: no cover - environment trouble
        sentinels.stop()
        unavailable(f"could not start a Sentinel set: {exc}")
    try:
        backend = RedisBackend.from_url(sentinels.url, coalesce=False)
        clock = ManualClock(1_000.0)
        bucket = _bucket(backend, clock)
        assert [bucket.try_acquire() for _ in range(2)] == [True, True]
        master = redis.Redis(host="127.0.0.1", port=sentinels.master.port, socket_timeout=2)
        assert master.execute_command("WAIT", 1, 2000) == 1  # type: ignore[no-untyped-call]
        master.close()
        new = sentinels.replica.port
        sentinels.kill_master()
        assert sentinels.wait_for_failover(deadline=15.0) == new
        promoted = redis.Redis(host="127.0.0.1", port=new, socket_timeout=2)
        promoted.function_flush()  # a new master that never had this release's library
        got = []
        for _ in range(200):  # the client finds the new master within a few tries
            try:
                got.append(bucket.try_acquire())
            except BackendUnavailable:  # while the client finds the new master
                continue
            if len(got) == 2:
                break
        assert got == [True, False]  # the replicated budget, decided by the reloaded library
        assert _libraries(promoted) == [library().name]
        promoted.close()
        backend.close()
    finally:
        sentinels.stop()


@pytest.mark.servers
def test_a_cluster_client_calls_scripts_and_a_master_without_them_reloads(cluster: RedisCluster) -> None:
    backend = RedisBackend.from_url(cluster.url, cluster=True, coalesce=False)
    clock = ManualClock(1_000.0)
    buckets = [_bucket(backend, clock) for _ in range(6)]  # names spread over the masters
    for bucket in buckets:
        assert bucket.try_acquire()
    assert not by_function(backend.client)
    for port in cluster.ports:
        node = redis.Redis(host="127.0.0.1", port=port)
        node.script_flush()  # as a master added later would be: knows no script
        node.close()
    for bucket in buckets:
        assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]
    backend.close()


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    """Three masters of a Redis Cluster of this test's own."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")
    made = RedisCluster()
    try:
        made.start()
    except RuntimeError as exc:  # pragma: no cover - environment trouble
        made.stop()
        unavailable(f"could not start a Redis Cluster: {exc}")
    yield made
    made.stop()


def _node_id(client: redis.Redis) -> str:
    return str(client.execute_command("CLUSTER", "MYID")).removeprefix("b'").removesuffix("'")  # type: ignore[no-untyped-call]


def _until_every_node_knows(newcomer: redis.Redis, ports: list[int]) -> None:
    """Wait for gossip: SETSLOT on a node that has not yet heard of the newcomer answers "Unknown node"."""
    wanted = _node_id(newcomer)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        missing = []
        for port in ports:
            node = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
            nodes = str(node.execute_command("CLUSTER", "NODES"))  # type: ignore[no-untyped-call]
            node.close()
            if wanted not in nodes or nodes.count("master") < len(ports):
                missing.append(port)
        if not missing and newcomer.cluster("INFO").get("cluster_state") == "ok":
            return
        time.sleep(0.05)
    raise AssertionError(f"nodes on ports {missing} had not heard of the newcomer {wanted} after 20 s")


def _move_slot(cluster: RedisCluster, slot: int, source: redis.Redis, target: redis.Redis, target_port: int) -> None:
    """Move one slot, and its keys, from ``source`` to ``target`` (a master that joined later)."""
    source_id, target_id = _node_id(source), _node_id(target)
    target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)  # type: ignore[no-untyped-call]
    source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)  # type: ignore[no-untyped-call]
    keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)  # type: ignore[no-untyped-call]
    if keys:
        source.execute_command("MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
    for port in [*cluster.ports, target_port]:
        node = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]
        node.close()


@pytest.mark.servers
def test_a_master_added_to_a_running_cluster_takes_a_limiter_over(cluster: RedisCluster) -> None:
    added = RedisServer(
        None, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"
    )
    try:
        added.start()
        backend = RedisBackend.from_url(cluster.url, cluster=True, coalesce=False)
        clock = ManualClock(1_000.0)
        name = unique_name("moved")
        bucket = _bucket(backend, clock, name)
        assert [bucket.try_acquire() for _ in range(2)] == [True, True]
        # A new master joins and takes over the slot of the limiter's keys, with them.
        newcomer = redis.Redis(host="127.0.0.1", port=added.port, socket_timeout=2)
        newcomer.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])  # type: ignore[no-untyped-call]
        slot = backend.client.keyslot(f"ratelimit:{{{name}}}:token_bucket")
        owner_port = backend.client.get_node_from_key(f"ratelimit:{{{name}}}:token_bucket").port
        owner = redis.Redis(host="127.0.0.1", port=owner_port, socket_timeout=2)
        _until_every_node_knows(newcomer, [*cluster.ports, added.port])
        _move_slot(cluster, slot, owner, newcomer, added.port)
        # The newcomer knows no script: the next decision is redirected there, loads it,
        # and spends what is left of the same budget.
        assert [bucket.try_acquire() for _ in range(2)] == [True, False]
        assert list(newcomer.scan_iter(match=f"ratelimit:{{{name}}}:*"))  # the state moved, and lives there
        assert newcomer.info("commandstats")["cmdstat_eval"]["calls"] == 1  # the script, loaded there once
        owner.close()
        newcomer.close()
        backend.close()
    finally:
        added.cleanup()


# -- flushes between a load and its call, threads and tasks at once, full or restarted
# servers, users who may call but not load, cancelled loads, counters off -------------


def _scant_bucket(backend: RedisBackend, capacity: int = 3, name: str | None = None) -> TokenBucket:
    # Next to no refill: what the budget grants shows at once.
    return TokenBucket(
        capacity, 0.001, backend=backend, name=name or unique_name("library"), clock=ManualClock(1_000.0)
    )


# -- the library lost again between its load and the call sent after it ------------------


def _is_load(command: Any) -> bool:
    """Whether a packed command (bytes, or a list of them) is a FUNCTION LOAD."""
    head = (command if isinstance(command, bytes) else b"".join(command))[:64]
    return b"FUNCTION" in head and b"LOAD" in head


def _watch_exchanges(
    monkeypatch: pytest.MonkeyPatch, sent: Callable[[Any, Any], object], answered: Callable[[Any], object]
) -> None:
    """``sent`` told of each command an asyncio held connection writes itself, once
    written; ``answered`` of its reply, once read (redis/held_connection.py)."""
    exchange = AsyncHeldConnection._exchange

    async def watched(conn: Any, parser: Any, packed: list[bytes]) -> Any:
        asyncio.get_running_loop().call_soon(sent, conn, packed)  # once written, not yet answered
        reply = await exchange(conn, parser, packed)
        answered(conn)
        return reply

    monkeypatch.setattr(AsyncHeldConnection, "_exchange", staticmethod(watched))


def _flush_after_each_load(monkeypatch: pytest.MonkeyPatch, admin: redis.Redis, asynchronous: bool) -> None:
    """Another process flushes right after each load's reply is read, whether the load
    went through the client or on a connection the backend holds: watched where every
    command goes."""
    loaded: set[Any] = set()
    cls: Any = redis.asyncio.connection.Connection if asynchronous else redis.connection.Connection
    send, read = cls.send_packed_command, cls.read_response

    def sent(conn: Any, command: Any) -> None:
        if _is_load(command):
            loaded.add(conn)

    def answered(conn: Any) -> None:
        if conn in loaded:
            loaded.discard(conn)
            admin.function_flush()

    if asynchronous:

        async def async_send(self: Any, command: Any, *args: Any, **kwargs: Any) -> None:
            await send(self, command, *args, **kwargs)
            sent(self, command)

        async def async_read(self: Any, *args: Any, **kwargs: Any) -> Any:
            reply = await read(self, *args, **kwargs)
            answered(self)
            return reply

        monkeypatch.setattr(cls, "send_packed_command", async_send)
        monkeypatch.setattr(cls, "read_response", async_read)
        _watch_exchanges(monkeypatch, sent, answered)
        return

    def sync_send(self: Any, command: Any, *args: Any, **kwargs: Any) -> None:
        send(self, command, *args, **kwargs)
        sent(self, command)

    def sync_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = read(self, *args, **kwargs)
        answered(self)
        return reply

    monkeypatch.setattr(cls, "send_packed_command", sync_send)
    monkeypatch.setattr(cls, "read_response", sync_read)


@pytest.mark.servers
def test_a_flush_between_the_load_and_the_second_call_reaches_no_caller(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = redis.Redis.from_url(server.url)
    client = redis.Redis.from_url(server.url)
    _flush_after_each_load(monkeypatch, admin, asynchronous=False)
    backend = RedisBackend(client, coalesce=False)
    bucket = _scant_bucket(backend)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert by_function(client)  # a lost library is no reason to give Functions up
    backend.close()
    admin.close()


@pytest.mark.servers
def test_a_flush_between_the_load_and_the_second_call_for_an_asyncio_client(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = redis.Redis.from_url(server.url)
    _flush_after_each_load(monkeypatch, admin, asynchronous=True)

    async def scenario() -> list[bool]:
        client = redis.asyncio.Redis.from_url(server.url)
        backend = RedisBackend(client, coalesce=False)
        bucket = _scant_bucket(backend)
        got = [await bucket.try_acquire_async() for _ in range(4)]
        assert by_function(client)
        await client.aclose()
        return got

    assert asyncio.run(scenario()) == [True, True, True, False]
    admin.close()


@pytest.mark.servers
def test_function_flush_in_a_loop_while_fifty_threads_decide(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    capacity = 300
    bucket = _scant_bucket(backend, capacity)
    stop = threading.Event()
    errors: list[BaseException] = []
    grants = [0] * 50

    def flusher() -> None:
        while not stop.is_set():
            admin.function_flush()

    def decider(index: int) -> None:
        try:
            for _ in range(10):
                grants[index] += bucket.try_acquire()
        except BaseException as exc:  # every error is the finding
            errors.append(exc)

    flushing = threading.Thread(target=flusher)
    flushing.start()
    deciders = [threading.Thread(target=decider, args=(i,)) for i in range(50)]
    for thread in deciders:
        thread.start()
    for thread in deciders:
        thread.join()
    stop.set()
    flushing.join()
    assert errors == []
    assert sum(grants) == capacity  # no refill at all: the budget, exactly
    backend.close()
    admin.close()


# -- many first decisions at once ----------------------------------------------------------


@pytest.mark.servers
def test_two_hundred_threads_deciding_first_at_once_load_at_most_once_per_connection(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = _scant_bucket(backend, 150)
    start = threading.Barrier(200)
    got: list[bool] = []
    errors: list[BaseException] = []

    def decide() -> None:
        start.wait()
        try:
            got.append(bucket.try_acquire())
        except BaseException as exc:  # every error is the finding
            errors.append(exc)

    threads = [threading.Thread(target=decide) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert got.count(True) == 150
    # Only the calls in flight before the first load finished load it again: no more
    # than the backend lets run at once.
    assert 1 <= command_calls(admin, "function|load") <= backend.pool_size
    backend.close()
    admin.close()


@pytest.mark.servers
@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_ten_thousand_tasks_deciding_first_at_once(server: RedisServer, coalesce: bool) -> None:
    admin = redis.Redis.from_url(server.url)

    async def scenario() -> tuple[list[object], int]:
        client = redis.asyncio.Redis.from_url(server.url)
        backend = RedisBackend(client, coalesce=coalesce)
        bucket = _scant_bucket(backend, 7_000)
        got = await asyncio.gather(*(bucket.try_acquire_async() for _ in range(10_000)), return_exceptions=True)
        await client.aclose()
        return list(got), backend.pool_size

    got, pool_size = asyncio.run(scenario())
    assert [each for each in got if not isinstance(each, bool)] == []
    assert got.count(True) == 7_000
    assert 1 <= command_calls(admin, "function|load") <= pool_size
    admin.close()


# -- a server that cannot take the library right now is not a server without Functions ---


def _fill(admin: redis.Redis) -> None:
    """Write until the server refuses writes (maxmemory under noeviction)."""
    blob = b"x" * 100_000
    for index in range(1_000):
        try:
            admin.set(f"filler:{index}", blob)
        except redis.exceptions.OutOfMemoryError:
            return
    raise AssertionError("the server never filled up")


@pytest.mark.servers
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "asyncio"])
def test_a_full_server_refusing_the_load_keeps_the_client_on_functions(use_async: bool) -> None:
    server = private_server(maxmemory="4mb", maxmemory_policy="noeviction")
    try:
        admin = redis.Redis.from_url(server.url)
        _fill(admin)

        def free() -> None:
            admin.delete(*admin.keys("filler:*"))

        async def scenario() -> tuple[list[bool], bool]:
            client = redis.asyncio.Redis.from_url(server.url)
            backend = RedisBackend(client, coalesce=False, on_unavailable="allow")
            bucket = _scant_bucket(backend)
            # Full: the load is refused (OOM), an outage, so the policy grants.
            got = [await bucket.try_acquire_async()]
            free()
            got += [await bucket.try_acquire_async() for _ in range(4)]
            functions = by_function(client)
            await client.aclose()
            return got, functions

        if use_async:
            got, functions = asyncio.run(scenario())
        else:
            backend = RedisBackend.from_url(server.url, coalesce=False, on_unavailable="allow")
            bucket = _scant_bucket(backend)
            got = [bucket.try_acquire()]
            free()
            got += [bucket.try_acquire() for _ in range(4)]
            functions = by_function(backend.client)
            backend.close()
        assert got == [True, True, True, True, False]
        assert functions  # OOM refused a write, not Functions
        assert admin.function_list(library=library().name) != []  # loaded once memory was freed
        admin.close()
    finally:
        server.cleanup()


@pytest.mark.servers
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "asyncio"])
def test_a_full_server_without_the_library_still_answers_what_only_reads(use_async: bool) -> None:
    # Before Functions, a script ran on a full server until its first write: a closed
    # breaker's allow() (a read) was answered. The library cannot be loaded there.
    server = private_server(maxmemory="4mb", maxmemory_policy="noeviction")
    try:
        admin = redis.Redis.from_url(server.url)
        _fill(admin)
        name = unique_name("full")

        async def scenario() -> bool:
            client = redis.asyncio.Redis.from_url(server.url)
            breaker = CircuitBreaker(min_calls=1, backend=RedisBackend(client), name=name, clock=ManualClock(1_000.0))
            await breaker.allow_async()
            functions = by_function(client)
            await client.aclose()
            return functions

        if use_async:
            functions = asyncio.run(scenario())
        else:
            backend = RedisBackend.from_url(server.url)
            CircuitBreaker(min_calls=1, backend=backend, name=name, clock=ManualClock(1_000.0)).allow()
            functions = by_function(backend.client)
            backend.close()
        assert functions  # this call went by script; the client keeps to functions
        admin.close()
    finally:
        server.cleanup()


@pytest.mark.servers
def test_a_user_who_may_call_but_not_load_uses_the_library_someone_loaded(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("caller", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all", "-function"])
    url = f"redis://caller:secret@127.0.0.1:{server.port}/0"
    # On a fresh server it cannot load the library: it calls scripts.
    alone = RedisBackend.from_url(url, coalesce=False)
    assert [_scant_bucket(alone).try_acquire() for _ in range(2)] == [True, True]
    assert not by_function(alone.client)
    alone.close()
    # Once an operator loaded the library, a new client calls it.
    admin.function_load(library().source)
    loaded = RedisBackend.from_url(url, coalesce=False)
    bucket = _scant_bucket(loaded)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert by_function(loaded.client)
    loaded.close()
    admin.close()


# -- a restart that keeps nothing --------------------------------------------------------


@pytest.mark.servers
@pytest.mark.parametrize("policy", ["raise", "local"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "asyncio"])
def test_a_restart_mid_run_reloads_the_library(server: RedisServer, policy: str, use_async: bool) -> None:
    name = unique_name("restart")

    async def decide(bucket: TokenBucket) -> bool | str:
        try:
            return await bucket.try_acquire_async() if use_async else bucket.try_acquire()
        except BackendUnavailable:
            return "unavailable"

    async def scenario() -> list[bool | str]:
        if use_async:
            client: Any = redis.asyncio.Redis.from_url(server.url)
            backend = RedisBackend(client, coalesce=False, on_unavailable=policy)  # type: ignore[arg-type]
        else:
            backend = RedisBackend.from_url(server.url, coalesce=False, on_unavailable=policy)  # type: ignore[arg-type]
        bucket = _scant_bucket(backend, name=name)
        got = [await decide(bucket)]
        server.stop()
        got.append(await decide(bucket))
        server.start()  # nothing on disk: no state, no library
        got += [await decide(bucket) for _ in range(4)]
        if use_async:
            await client.aclose()
        else:
            backend.close()
        return got

    got = asyncio.run(scenario())
    while_down: bool | str = "unavailable" if policy == "raise" else True
    assert got == [True, while_down, True, True, True, False]


# -- what the code says ------------------------------------------------------------------


@pytest.mark.servers
@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_the_code_is_written_once_the_store_answers_even_if_the_first_decision_failed(
    server: RedisServer, coalesce: bool
) -> None:
    backend = RedisBackend.from_url(server.url, coalesce=coalesce, on_unavailable="local")
    name = unique_name("code")
    bucket = _scant_bucket(backend, name=name)
    server.stop()
    assert bucket.try_acquire()  # decided locally: the store is down
    server.start()
    admin = redis.Redis.from_url(server.url)
    assert bucket.try_acquire()  # the store's first decision of this limiter
    # `ratelimit inspect` reads what the code says: a limiter that decided must show.
    assert admin.hgetall(code_key(name)).get(b"kind") == b"token_bucket"
    backend.close()
    admin.close()


# -- errors point into the files ---------------------------------------------------------


@pytest.mark.servers
def test_an_error_names_its_file_alike_whether_called_by_function_or_script(server: RedisServer) -> None:
    script = single_script("token_bucket")
    key = f"ratelimit:{{{unique_name('err')}}}:token_bucket"
    messages = []
    for scripts in (False, True):
        client = redis.Redis.from_url(server.url)
        if scripts:
            call_by_script(client)
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            script(client, [key], ["reserve", "1000", "many", "", "3", "1", "0", "0"])
        messages.append(str(caught.value))
        client.close()
    # Redis says "on @user_function:<line>" where a script's error says "on user_script:<line>".
    for message in messages:
        assert "on lua/_single.lua:" in message, message
        assert "@lua/" not in message, message


# -- cancelled while loading -------------------------------------------------------------


@pytest.mark.servers
def test_a_task_cancelled_while_loading_leaves_the_next_decisions_sound(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> list[bool]:
        client = redis.asyncio.Redis.from_url(server.url)
        loading = asyncio.Event()
        send = redis.asyncio.connection.Connection.send_packed_command

        # Watched where every command goes, through the client or on a connection held.
        async def watched(self: Any, command: Any, *args: Any, **kwargs: Any) -> None:
            await send(self, command, *args, **kwargs)
            if _is_load(command):
                loading.set()

        monkeypatch.setattr(redis.asyncio.connection.Connection, "send_packed_command", watched)

        def sent(_conn: Any, command: Any) -> None:
            if _is_load(command):
                loading.set()

        _watch_exchanges(monkeypatch, sent, lambda _conn: None)
        backend = RedisBackend(client, coalesce=False)
        bucket = _scant_bucket(backend)
        first = asyncio.create_task(bucket.try_acquire_async())
        await asyncio.wait_for(loading.wait(), 10)
        first.cancel()  # lands in the middle of FUNCTION LOAD, sent and not yet answered
        with pytest.raises(asyncio.CancelledError):
            await first
        got = [await bucket.try_acquire_async() for _ in range(4)]
        assert by_function(client)
        await client.aclose()
        return got

    assert asyncio.run(scenario()) == [True, True, True, False]


# -- counters off: nothing for `ratelimit top`, whatever path a decision takes -------------


@pytest.mark.servers
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "asyncio"])
def test_counters_off_leave_no_top_key_through_leases_batches_lanes_and_composites(
    server: RedisServer, use_async: bool
) -> None:
    admin = redis.Redis.from_url(server.url)
    clock = ManualClock(1_000.0)

    def limiters(backend: RedisBackend) -> list[Any]:
        return [
            TokenBucket(50, 1, backend=backend, name=unique_name("lease"), clock=clock, lease=0.05),
            TokenBucket(50, 1, backend=backend, name=unique_name("plain"), clock=clock),
            TokenBucket(50, 1, low_share=0.5, backend=backend, name=unique_name("lanes"), clock=clock),
            Composite(
                [TokenBucket(50, 1), SlidingWindow(50, 1)], backend=backend, name=unique_name("group"), clock=clock
            ),
        ]

    async def many(limiter: Any) -> None:
        # At once: coalesced into batches of more than one request.
        await asyncio.gather(*(limiter.try_acquire_async() for _ in range(30)))

    if use_async:

        async def scenario() -> None:
            client = redis.asyncio.Redis.from_url(server.url)
            backend = RedisBackend(client, counters=False)
            for limiter in limiters(backend):
                await many(limiter)
            await client.aclose()

        asyncio.run(scenario())
    else:
        backend = RedisBackend.from_url(server.url, counters=False)
        for limiter in limiters(backend):
            threads = [threading.Thread(target=limiter.try_acquire) for _ in range(30)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        backend.close()
    assert admin.dbsize() > 0
    assert list(admin.scan_iter(match="*:top:*")) == []
    admin.close()
