"""The function library under hostile and careless use.

What a deployment does to the library that ``test_functions.py`` does not: a flush
that lands between the load and the call sent again, a flush in a loop while threads
decide, a server that is full, restarted, or lets a user call but not load; many
callers making their first decision at once; and what the code key and ``counters=``
promise. Private servers on free loopback ports; time is a :class:`ManualClock`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
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
from ratelimit._stores.redis.scripts import by_function, call_by_script, library, single_script

from conftest import command_calls, private_server, unique_name
from servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.servers]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = private_server()
    yield made
    made.cleanup()


def _bucket(backend: RedisBackend, capacity: int = 3, name: str | None = None) -> TokenBucket:
    # Next to no refill: what the budget grants shows at once.
    return TokenBucket(capacity, 0.001, backend=backend, name=name or unique_name("adv"), clock=ManualClock(1_000.0))


# -- the library lost again between its load and the call sent after it ------------------


def _is_load(command: Any) -> bool:
    """Whether a packed command (bytes, or a list of them) is a FUNCTION LOAD."""
    head = (command if isinstance(command, bytes) else b"".join(command))[:64]
    return b"FUNCTION" in head and b"LOAD" in head


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


def test_a_flush_between_the_load_and_the_second_call_reaches_no_caller(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = redis.Redis.from_url(server.url)
    client = redis.Redis.from_url(server.url)
    _flush_after_each_load(monkeypatch, admin, asynchronous=False)
    backend = RedisBackend(client, coalesce=False)
    bucket = _bucket(backend)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert by_function(client)  # a lost library is no reason to give Functions up
    backend.close()
    admin.close()


def test_a_flush_between_the_load_and_the_second_call_for_an_asyncio_client(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = redis.Redis.from_url(server.url)
    _flush_after_each_load(monkeypatch, admin, asynchronous=True)

    async def scenario() -> list[bool]:
        client = redis.asyncio.Redis.from_url(server.url)
        backend = RedisBackend(client, coalesce=False)
        bucket = _bucket(backend)
        got = [await bucket.try_acquire_async() for _ in range(4)]
        assert by_function(client)
        await client.aclose()
        return got

    assert asyncio.run(scenario()) == [True, True, True, False]
    admin.close()


def test_function_flush_in_a_loop_while_fifty_threads_decide(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    capacity = 300
    bucket = _bucket(backend, capacity)
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


def test_two_hundred_threads_deciding_first_at_once_load_at_most_once_per_connection(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = _bucket(backend, 150)
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


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_ten_thousand_tasks_deciding_first_at_once(server: RedisServer, coalesce: bool) -> None:
    admin = redis.Redis.from_url(server.url)

    async def scenario() -> tuple[list[object], int]:
        client = redis.asyncio.Redis.from_url(server.url)
        backend = RedisBackend(client, coalesce=coalesce)
        bucket = _bucket(backend, 7_000)
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
            bucket = _bucket(backend)
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
            bucket = _bucket(backend)
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


def test_a_user_who_may_call_but_not_load_uses_the_library_someone_loaded(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("caller", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all", "-function"])
    url = f"redis://caller:secret@127.0.0.1:{server.port}/0"
    # On a fresh server it cannot load the library: it calls scripts.
    alone = RedisBackend.from_url(url, coalesce=False)
    assert [_bucket(alone).try_acquire() for _ in range(2)] == [True, True]
    assert not by_function(alone.client)
    alone.close()
    # Once an operator loaded the library, a new client calls it.
    admin.function_load(library().source)
    loaded = RedisBackend.from_url(url, coalesce=False)
    bucket = _bucket(loaded)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert by_function(loaded.client)
    loaded.close()
    admin.close()


# -- a restart that keeps nothing --------------------------------------------------------


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
        bucket = _bucket(backend, name=name)
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


@pytest.mark.parametrize("coalesce", [False, True], ids=["plain", "coalesced"])
def test_the_code_is_written_once_the_store_answers_even_if_the_first_decision_failed(
    server: RedisServer, coalesce: bool
) -> None:
    backend = RedisBackend.from_url(server.url, coalesce=coalesce, on_unavailable="local")
    name = unique_name("code")
    bucket = _bucket(backend, name=name)
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
        backend = RedisBackend(client, coalesce=False)
        bucket = _bucket(backend)
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
