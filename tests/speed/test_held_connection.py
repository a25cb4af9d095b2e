"""A Redis client's script calls sent straight on a connection held from its pool: the
same decisions as through the client, and none of the ways a held connection can go
wrong.

Those ways: a reply left unread (an exception at any step of a call, a server hung or
restarted under it, a call past its deadline), a connection killed by the server
(TCP, a unix socket, an ACL user), the scripts flushed under hundreds of threads, a
pool too small to hold from or shared with the caller, a fork (while a thread holds
the lock, with every call in flight), a backend dropped or collected unclosed,
clients that must not be held from (instrumented, other settings, other kinds), and
a retried call counted as redis-py counts its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.connection
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.redis import calls as redis_calls
from ratelimit._stores.redis.held_connection import AsyncHeldConnection

from conftest import REDIS_URL, private_server, unique_name

pytestmark = pytest.mark.redis

KINDS: dict[str, Callable[..., Any]] = {
    "token_bucket": lambda **kw: TokenBucket(5, 2, **kw),
    "leaky_bucket": lambda **kw: LeakyBucket(5, 2, **kw),
    "exact_window": lambda **kw: SlidingWindow(5, 2, **kw),
    "approximate_window": lambda **kw: SlidingWindow(5, 2, approximate=True, **kw),
}


class Counting(redis.Redis):
    """A client that sees its commands, as a tracing integration would: never wired."""

    commands = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        Counting.commands += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def wait_of(limiter: Any, timeout: float) -> float:
    """The wait a reservation was told, or minus the wait it needed when refused."""
    try:
        return float(limiter.reserve(1, timeout=timeout).wait)
    except AcquireTimeout as exc:
        return -exc.retry_after


def plain(**options: Any) -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL, **options)


@pytest.mark.parametrize("kind", list(KINDS))
def test_calls_on_a_held_connection_decide_as_through_the_client(kind: str) -> None:
    rng = random.Random(kind)
    wired, through = RedisBackend(plain(), coalesce=False), RedisBackend(Counting.from_url(REDIS_URL), coalesce=False)
    assert wired._held is not None
    assert through._held is None
    clock = ManualClock(1_000.0)
    limiters = [KINDS[kind](backend=b, name=unique_name(kind), clock=clock) for b in (wired, through)]
    for _ in range(300):
        tokens = rng.choice([1, 1, 1, 2, 3])
        outcomes = [limiter.try_acquire(tokens) for limiter in limiters]
        assert outcomes[0] == outcomes[1]
        timeout = rng.choice([0.0, 0.5, 3.0])
        waits = [wait_of(limiter, timeout) for limiter in limiters]
        assert waits[0] == pytest.approx(waits[1], abs=1e-9)
        clock.advance(rng.choice([0.0, 0.01, 0.1, 0.5, 1.0]))
    for b in (wired, through):
        b.close()


class Interrupted(Exception):
    """Raised as a signal handler would, between a command sent and its reply read."""


def test_a_call_interrupted_on_a_held_connection_leaves_no_reply_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    armed = [False]
    read = redis.connection.Connection.read_response

    def interrupting(self: Any, *args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] = False
            raise Interrupted
        return read(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "read_response", interrupting)
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    assert backend._held is not None
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock)
    assert limiter.try_acquire(10)
    armed[0] = True
    with pytest.raises(Interrupted):
        limiter.try_acquire(1)  # refused: its reply says so, unread
    clock.advance(1.0)
    assert limiter.try_acquire(1)  # one token refilled: granted, by its own reply
    assert not limiter.try_acquire(1)
    backend.close()


@pytest.mark.servers
def test_a_server_restarted_under_the_held_connection_is_not_seen_by_a_call() -> None:
    # The pool checks a connection before it lends it; the held one is checked the same
    # way, so the first call after a restart finds it closed before sending, not after.
    server = private_server()
    try:
        backend = RedisBackend.from_url(server.url, coalesce=False)
        limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        assert limiter.try_acquire(3)
        server.stop()
        server.start()
        assert limiter.try_acquire(10)  # a new, empty server: a full bucket, no failure
        assert backend.stats().failures == 0
        backend.close()
    finally:
        server.cleanup()


def test_a_forked_child_decides_on_connections_of_its_own() -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    limiter = TokenBucket(40, 0.001, backend=backend, name=unique_name("fork"), clock=clock)
    assert limiter.try_acquire()  # the parent holds a connection now
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            got = [limiter.try_acquire() for _ in range(20)]
            os.write(writing, bytes(int(g) for g in got))
            code = 0
        finally:
            os._exit(code)
    os.close(writing)
    mine = [limiter.try_acquire() for _ in range(19)]
    _, status = os.waitpid(pid, 0)
    theirs = [bool(b) for b in os.read(reading, 64)]
    os.close(reading)
    assert os.waitstatus_to_exitcode(status) == 0
    # One budget of 40, nobody's reply read by the other: 1 + 19 + 20 granted, then none.
    assert mine == [True] * 19
    assert theirs == [True] * 20
    assert not limiter.try_acquire()
    backend.close()


def decided(client: redis.Redis, pool_size: int) -> RedisBackend:
    """A backend on ``client`` that has made one decision (and so holds, if it may)."""
    backend = RedisBackend(client, pool_size=pool_size, coalesce=False)
    assert TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0)).try_acquire()
    return backend


def test_a_pool_with_no_connection_to_spare_is_not_held_from() -> None:
    client = plain(max_connections=2)
    backend = decided(client, pool_size=2)
    pool = client.connection_pool
    taken = [pool.get_connection(), pool.get_connection()]  # both the pool's to lend
    for conn in taken:
        pool.release(conn)
    backend.close()


def test_the_connection_held_leaves_the_pool_room_for_the_backends_own_commands() -> None:
    # from_url's pool is pool_size + 1: one held, pool_size as before for the calls in
    # flight, the library's loads and the admin commands.
    backend = RedisBackend.from_url(REDIS_URL, pool_size=1, coalesce=False)
    name = unique_name()
    limiter = TokenBucket(10, 1, backend=backend, name=name, clock=ManualClock(1_000.0))
    assert limiter.try_acquire()
    backend.set_limit(name, burst=20)
    assert backend.inspect(name).known
    assert limiter.try_acquire()
    backend.close()


def lent_again(client: redis.Redis, count: int) -> None:
    """Waits (at most 5 s) until ``client``'s pool lends ``count`` connections at once."""
    pool = client.connection_pool
    deadline = time.monotonic() + 5
    while True:
        taken = []
        try:
            taken += [pool.get_connection() for _ in range(count)]
            return
        except redis.exceptions.MaxConnectionsError:
            assert time.monotonic() < deadline, "the connection held never came back"
        finally:
            for conn in taken:
                pool.release(conn)
        time.sleep(0.01)


def test_a_backend_dropped_unclosed_gives_its_connection_back() -> None:
    client = plain(max_connections=3)
    backend = decided(client, pool_size=2)
    del backend
    gc.collect()
    # Given back from a thread of its own (never from inside the collector, which may
    # run where the pool's lock is held): all three lent again, soon.
    lent_again(client, 3)
    client.close()


def test_a_dropped_backends_finalizer_waits_for_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The collector runs a finalizer between any two bytecodes: a wait there (for a
    # lock, for a thread to start) is where a signal handler's exception is raised and
    # lost, and where a thread holding the pool's lock waits on itself.
    client = plain(max_connections=3)
    backend = decided(client, pool_size=2)
    assert backend._held is not None

    def waited(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("the finalizer waited")

    monkeypatch.setattr(threading.Condition, "wait", waited)
    backend._held._finalizer()  # as the collector calls it
    monkeypatch.undo()
    lent_again(client, 3)
    backend.close()
    client.close()


def test_a_client_whose_commands_are_seen_is_not_held_from(monkeypatch: pytest.MonkeyPatch) -> None:
    before = Counting.commands
    backend = RedisBackend(Counting.from_url(REDIS_URL), coalesce=False)
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
    for _ in range(5):
        assert limiter.try_acquire()
    assert Counting.commands - before >= 5
    backend.close()
    # Instrumentation that wraps redis-py's own method after this library was imported.
    seen = []
    original = redis.Redis.execute_command

    @functools.wraps(original)
    def traced(self: Any, *args: Any, **options: Any) -> Any:
        seen.append(args[0])
        return original(self, *args, **options)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    backend = RedisBackend(plain(), coalesce=False)
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
    assert limiter.try_acquire()
    assert "FCALL" in seen or "EVALSHA" in seen
    backend.close()


@pytest.mark.parametrize("options", [{"encoding": "latin-1"}, {"decode_responses": True}, {"protocol": 3}])
def test_a_client_of_other_settings_shares_one_budget_with_the_client_path(options: dict[str, Any]) -> None:
    # A tenant's name outside ASCII: the key must be the same bytes either way.
    name = unique_name("café-ü")
    clock = ManualClock(1_000.0)
    wired = RedisBackend(plain(**options), coalesce=False)
    through = RedisBackend(Counting.from_url(REDIS_URL, **options), coalesce=False)
    assert wired._held is not None
    assert through._held is None
    first = TokenBucket(4, 0.001, backend=wired, name=name, clock=clock)
    second = TokenBucket(4, 0.001, backend=through, name=name, clock=clock)
    assert first.try_acquire(3)
    assert second.try_acquire(1)
    assert not second.try_acquire(1)
    assert not first.try_acquire(1)
    assert wait_of(first, 2_000.0) == pytest.approx(1_000.0)
    for b in (wired, through):
        b.close()


def test_redis_pys_own_metrics_on_keep_every_call_through_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = pytest.importorskip("redis.observability.recorder")
    monkeypatch.setattr(recorder, "is_enabled", lambda: True)
    backend = RedisBackend(plain(), coalesce=False)
    assert backend._held is None
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
    assert limiter.try_acquire()
    backend.close()


# -- asyncio ------------------------------------------------------------------------------


class AsyncCounting(redis.asyncio.Redis):
    """An asyncio client that sees its commands: never wired."""

    commands = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        AsyncCounting.commands += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("kind", list(KINDS))
def test_calls_on_an_asyncio_held_connection_decide_as_through_the_client(kind: str) -> None:
    rng = random.Random(kind)

    async def run() -> None:
        wired = RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL), coalesce=False)
        through = RedisBackend(AsyncCounting.from_url(REDIS_URL), coalesce=False)
        clock = ManualClock(1_000.0)
        limiters = [KINDS[kind](backend=b, name=unique_name(kind), clock=clock) for b in (wired, through)]
        before = AsyncCounting.commands
        for _ in range(200):
            tokens = rng.choice([1, 1, 1, 2, 3])
            outcomes = [await limiter.try_acquire_async(tokens) for limiter in limiters]
            assert outcomes[0] == outcomes[1]
            clock.advance(rng.choice([0.0, 0.01, 0.1, 0.5, 1.0]))
        assert AsyncCounting.commands - before >= 200
        state = wired._loops[asyncio.get_running_loop()]
        assert state.held is not None
        assert through._loops[asyncio.get_running_loop()].held is None
        for b in (wired, through):
            await b.aclose()

    asyncio.run(run())


@pytest.mark.servers
def test_an_asyncio_call_past_its_deadline_leaves_no_reply_for_the_next() -> None:
    # The server stops answering (SIGSTOP) while a decision waits for its reply: the
    # call's deadline cancels it; the reply that comes once the server goes on must not
    # be read by the next call as its own.
    server = private_server()

    async def run() -> None:
        backend = RedisBackend.from_url(server.url, coalesce=False)
        limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        assert await limiter.try_acquire_async(10)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable):
                await limiter.try_acquire_async(1)  # refused, in a reply that comes late
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert not await limiter.try_acquire_async(1)  # its own reply: still empty
        await backend.aclose()

    try:
        asyncio.run(run())
    finally:
        server.cleanup()


def test_an_asyncio_backend_dropped_unclosed_gives_its_connection_back() -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, max_connections=3)
        backend = RedisBackend(client, pool_size=2, coalesce=False)
        limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        assert await limiter.try_acquire_async()
        assert backend._loops[asyncio.get_running_loop()].held is not None
        del backend, limiter
        gc.collect()
        await asyncio.sleep(0)  # the release, scheduled on this loop
        await asyncio.sleep(0)
        pool = client.connection_pool
        taken = [await pool.get_connection() for _ in range(3)]  # type: ignore[no-untyped-call]
        for conn in taken:
            await pool.release(conn)
        await client.aclose()

    asyncio.run(run())


# -- exceptions at each step, outages, flushes under threads, forks, other clients ----


class SignalRaised(BaseException):
    """Raised as a signal handler's exception would be, inside redis-py's connection."""


class Traced(redis.Redis):
    """Commands seen by a subclass: calls go through the client, for comparison."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


@pytest.fixture
def short_pool_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pool kept full by lost connections fails after this, not after 30 s.
    monkeypatch.setattr(redis_calls, "POOL_WAIT_SECONDS", 0.5)


def in_use(backend: RedisBackend) -> int:
    """The connections of the backend's pool lent out (the one held among them)."""
    client = backend._sync_client
    assert client is not None
    return len(client.connection_pool._in_use_connections)


def bucket(backend: RedisBackend, capacity: int = 10, clock: ManualClock | None = None) -> TokenBucket:
    return TokenBucket(capacity, 0.0001, backend=backend, name=unique_name("wire"), clock=clock or ManualClock(1_000.0))


# -- a connection held and lost -----------------------------------------------------


@pytest.mark.servers
@pytest.mark.usefixtures("short_pool_wait")
def test_outages_met_by_the_held_connection_do_not_take_it_from_the_pool() -> None:
    # pool_size=1: from_url's pool has two connections. The held one found dead
    # before a call (readable, then refused on reconnecting) goes back to the pool,
    # or one outage later the library's load after the restart would find it full.
    server = private_server()
    try:
        backend = RedisBackend.from_url(server.url, pool_size=1, coalesce=False)
        limiter = bucket(backend)
        for _ in range(3):
            assert limiter.try_acquire()
            server.stop()
            for _ in range(2):
                with pytest.raises(BackendUnavailable):
                    limiter.try_acquire()
            assert in_use(backend) == 0
            server.start()
        assert limiter.try_acquire()
        backend.close()
    finally:
        server.cleanup()


@pytest.mark.parametrize("step", ["connect", "can_read"])
@pytest.mark.usefixtures("short_pool_wait")
def test_an_exception_while_the_held_connection_is_readied_gives_it_back(
    monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    armed = [0]
    original = getattr(redis.connection.Connection, step)

    def interrupting(self: Any, *args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] -= 1
            raise SignalRaised
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, step, interrupting)
    backend = RedisBackend.from_url(REDIS_URL, pool_size=1, coalesce=False)
    limiter = bucket(backend)
    assert limiter.try_acquire()
    for _ in range(3):
        armed[0] = 1  # the held connection's check, before the command is sent
        with pytest.raises(SignalRaised):
            limiter.try_acquire()
        assert in_use(backend) == 0
        assert limiter.try_acquire()
    backend.close()


@pytest.mark.stress
@pytest.mark.parametrize("pool_size", [1, 2, 16])
@pytest.mark.usefixtures("short_pool_wait")
def test_exceptions_at_every_step_under_threads_cross_no_replies_and_lose_no_connection(
    monkeypatch: pytest.MonkeyPatch, pool_size: int
) -> None:
    # Half the threads' buckets are empty, half full: a reply read by the wrong thread
    # shows as a grant to an empty bucket or a refusal to a full one.
    # Not inside connect()'s handshake: redis-py's pool lends a connection interrupted
    # there with the handshake's reply unread, through the client as on the wire.
    rng = random.Random(pool_size)
    storm = threading.local()
    for step in ("connect", "can_read", "send_packed_command", "read_response"):
        original = getattr(redis.connection.Connection, step)

        def interrupting(self: Any, *args: Any, _original: Any = original, _step: str = step, **kwargs: Any) -> Any:
            if getattr(storm, "on", False) and not getattr(storm, "connecting", False) and rng.random() < 0.03:
                raise SignalRaised
            if _step != "connect":
                return _original(self, *args, **kwargs)
            storm.connecting = True
            try:
                return _original(self, *args, **kwargs)
            finally:
                storm.connecting = False

        monkeypatch.setattr(redis.connection.Connection, step, interrupting)
    backend = RedisBackend.from_url(REDIS_URL, pool_size=pool_size, coalesce=False)
    clock = ManualClock(1_000.0)
    wrong: list[Any] = []

    def work(full: bool) -> None:
        limiter = bucket(backend, capacity=1_000 if full else 1, clock=clock)
        if not full and not limiter.try_acquire():
            wrong.append("a new bucket refused")
        storm.on = True
        for _ in range(10):
            try:
                got = limiter.try_acquire()
            except SignalRaised:
                continue
            except Exception as exc:
                wrong.append(exc)
                continue
            if got is not full:
                wrong.append(got)

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(200)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20  # connections lost make each call wait for the pool
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []
    assert in_use(backend) <= 1
    backend.close()


# -- hundreds of threads, the scripts flushed under them ---------------------------


def _backend(kind: str, url: str, pool_size: int) -> RedisBackend:
    if kind == "from_url":
        return RedisBackend.from_url(url, pool_size=pool_size, coalesce=False)
    if kind == "blocking":
        pool = redis.BlockingConnectionPool.from_url(url, max_connections=pool_size + 1, timeout=5)
        return RedisBackend(redis.Redis(connection_pool=pool), pool_size=pool_size, coalesce=False)
    extra = {"bounded": 0, "bounded + 1": 1}[kind]
    client = redis.Redis.from_url(url, max_connections=pool_size + extra)
    return RedisBackend(client, pool_size=pool_size, coalesce=False)


@pytest.mark.servers
@pytest.mark.stress
@pytest.mark.parametrize("kind", ["from_url", "bounded", "bounded + 1", "blocking"])
@pytest.mark.parametrize("pool_size", [1, 16])
def test_threads_decide_exactly_while_the_scripts_are_flushed_under_them(kind: str, pool_size: int) -> None:
    # With one connection held, the library's load after a flush still finds one in
    # the pool: from_url's pool_size + 1, a user's max_connections of pool_size + 1.
    server = private_server()
    admin = redis.Redis.from_url(server.url, single_connection_client=True)
    try:
        backend = _backend(kind, server.url, pool_size)
        clock = ManualClock(1_000.0)
        wrong: list[Any] = []

        def work() -> None:
            limiter = bucket(backend, capacity=5, clock=clock)
            try:
                got = [limiter.try_acquire() for _ in range(7)]
            except Exception as exc:
                wrong.append(exc)
                return
            if got != [True] * 5 + [False] * 2:
                wrong.append(got)

        threads = [threading.Thread(target=work) for _ in range(100)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            admin.function_flush()
            admin.script_flush()
        assert wrong == []
        # The backend's connections and the admin's: none beyond its pool.
        assert len(admin.client_list()) <= pool_size + 2
        backend.close()
    finally:
        admin.close()
        server.cleanup()


# -- a server hung, a connection killed ---------------------------------------------


@pytest.mark.servers
def test_a_server_hung_mid_call_times_the_call_out_and_the_next_is_answered_by_its_own_reply() -> None:
    server = private_server()
    try:
        backend = RedisBackend.from_url(server.url, pool_size=2, coalesce=False)
        clock = ManualClock(1_000.0)
        full, empty = bucket(backend, clock=clock), bucket(backend, capacity=1, clock=clock)
        assert empty.try_acquire()
        assert full.try_acquire()
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable):
                empty.try_acquire()  # sent, unanswered within the socket timeout
        finally:
            os.kill(server.pid, signal.SIGCONT)
        # The refusal the hung server sends late is not read as this grant's reply.
        assert full.try_acquire()
        assert not empty.try_acquire()
        assert in_use(backend) == 1
        backend.close()
    finally:
        server.cleanup()


@pytest.mark.servers
@pytest.mark.parametrize("how", ["tcp", "unix socket", "acl user"])
def test_the_held_connection_killed_by_the_server_is_opened_afresh_unseen(how: str, tmp_path: Any) -> None:
    sock = tmp_path / "redis.sock"
    server = private_server("--unixsocket", str(sock), "--unixsocketperm", "700")
    try:
        url = server.url
        if how == "unix socket":
            url = f"unix://{sock}?db=0"
        elif how == "acl user":
            admin = redis.Redis.from_url(server.url)
            admin.acl_setuser("limiter", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
            admin.close()
            url = f"redis://limiter:s3cret@127.0.0.1:{server.port}/0"
        backend = RedisBackend.from_url(url, coalesce=False)
        assert backend._held is not None
        limiter = bucket(backend, capacity=3)
        assert limiter.try_acquire()
        admin = redis.Redis.from_url(server.url)
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        admin.close()
        assert limiter.try_acquire()
        assert limiter.try_acquire()
        assert not limiter.try_acquire()
        assert backend.stats().failures == 0
        backend.close()
    finally:
        server.cleanup()


# -- retries, clients of other kinds, close --------------------------------------


@pytest.mark.parametrize("retries", [0, 2])
def test_a_retried_call_counts_as_redis_pys_own_does(monkeypatch: pytest.MonkeyPatch, retries: int) -> None:
    # A reply read too late: the script ran, the call is retried (and counts twice)
    # or fails, the same through the client and on the wire.
    armed = [0]
    read = redis.connection.Connection.read_response

    def late(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = read(self, *args, **kwargs)
        if armed[0]:
            armed[0] -= 1
            raise redis.exceptions.TimeoutError("the reply came after the socket timeout")
        return reply

    monkeypatch.setattr(redis.connection.Connection, "read_response", late)
    outcomes = []
    for kind in (redis.Redis, Traced):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the library's warning about retries
            client = kind.from_url(REDIS_URL, retry=Retry(NoBackoff(), retries), retry_on_timeout=True)
            backend = RedisBackend(client, coalesce=False)
        assert (backend._held is not None) is (kind is redis.Redis)
        limiter = bucket(backend)
        assert limiter.try_acquire()
        armed[0] = 1
        try:
            outcome: Any = limiter.try_acquire()
        except BackendUnavailable:
            outcome = "unavailable"
        left = sum(limiter.try_acquire() for _ in range(12))
        outcomes.append((outcome, left))
        backend.close()
    assert outcomes[0] == outcomes[1]


def test_clients_that_must_not_be_held_from_are_not() -> None:
    backend = RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL))
    assert backend._held is None
    single = RedisBackend(redis.Redis.from_url(REDIS_URL, single_connection_client=True), coalesce=False)
    assert single._held is None
    assert bucket(single).try_acquire()
    single.close()


def test_close_then_reuse_holds_afresh_and_gives_back_again() -> None:
    backend = RedisBackend.from_url(REDIS_URL, pool_size=1, coalesce=False)
    limiter = bucket(backend, capacity=3)
    assert limiter.try_acquire()
    backend.close()
    assert in_use(backend) == 0
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    backend.close()
    assert in_use(backend) == 0


def test_a_shared_client_keeps_all_its_connections_where_the_backend_is_told_so() -> None:
    # Documented (docs/redis.md, "A connection held"): an idle backend holds one
    # connection of a bounded pool it shares, where the pool has room beyond its
    # pool_size; a pool_size of the pool's whole size leaves the application them all.
    client = redis.Redis.from_url(REDIS_URL, max_connections=3)
    pool = client.connection_pool
    for pool_size, free in ((2, 2), (3, 3)):
        backend = RedisBackend(client, pool_size=pool_size, coalesce=False)
        assert bucket(backend).try_acquire()
        taken: list[Any] = []
        try:
            for _ in range(free):  # the application's own commands at once
                taken.append(pool.get_connection())
            with pytest.raises(redis.exceptions.MaxConnectionsError):
                pool.get_connection()
        finally:
            for conn in taken:
                pool.release(conn)
        backend.close()
    client.close()


# -- fork and garbage collection ---------------------------------------------------


def test_a_fork_while_a_thread_holds_the_connections_lock_leaves_the_child_able_to_call() -> None:
    # A thread taking or giving back the held connection at the moment another forks:
    # the child inherits the lock held, by a thread it does not have.
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    limiter = bucket(backend)
    assert limiter.try_acquire()
    wire = backend._held
    assert wire is not None
    inside, leave = threading.Event(), threading.Event()

    def holding() -> None:
        with wire._lock:
            inside.set()
            leave.wait()

    thread = threading.Thread(target=holding)
    thread.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit code
        code = 3
        try:
            signal.alarm(5)  # hung: killed by the alarm, not left behind
            code = 0 if limiter.try_acquire() else 2
        finally:
            os._exit(code)
    leave.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    backend.close()


def test_a_child_forked_with_every_turn_in_flight_can_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # pool_size calls in flight in the parent's threads at the fork: the child has
    # none of those threads to give their turns back.
    backend = RedisBackend.from_url(REDIS_URL, pool_size=2, coalesce=False)
    clock = ManualClock(1_000.0)
    inside = threading.Semaphore(0)
    leave = threading.Event()
    read = redis.connection.Connection.read_response

    def stalled(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("in flight") and not leave.is_set():
            inside.release()
            leave.wait()
        return read(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "read_response", stalled)
    threads = [
        threading.Thread(target=bucket(backend, clock=clock).try_acquire, name=f"in flight {i}") for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for _ in threads:
        inside.acquire()
    limiter = bucket(backend, capacity=2, clock=clock)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit code
        code = 3
        try:
            signal.alarm(5)  # hung: killed by the alarm, not left behind
            got = [limiter.try_acquire() for _ in range(3)]
            code = 0 if got == [True, True, False] else 2
        finally:
            os._exit(code)
    leave.set()
    for thread in threads:
        thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not limiter.try_acquire()  # the child's two grants, in the one budget
    backend.close()


def test_a_backend_collected_while_its_blocking_pool_is_busy_does_not_deadlock_it() -> None:
    pool = redis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=4, timeout=2)
    backend = RedisBackend(redis.Redis(connection_pool=pool), pool_size=2, coalesce=False)
    assert bucket(backend).try_acquire()
    # Dropped unclosed, from an application's object in a reference cycle: only the
    # collector frees it.
    owner: dict[str, Any] = {"backend": backend}
    owner["self"] = owner
    del backend, owner
    queue = pool.pool
    take = queue._get

    def collecting() -> Any:
        item = take()
        gc.collect()  # as an allocation inside the queue's critical section may
        return item

    queue._get = collecting

    def application() -> None:
        pool.release(pool.get_connection())  # type: ignore[no-untyped-call]

    thread = threading.Thread(target=application, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(3)
    hung = thread.is_alive()
    queue._get = take
    assert not hung, f"the pool's user hung for {time.monotonic() - started:.1f} s"


# -- an asyncio held connection that writes and reads its calls itself ---------------


def _read_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many calls asyncio held connections write and read themselves, counted."""
    count = [0]
    exchange = AsyncHeldConnection._exchange

    async def counted(*args: Any) -> Any:
        count[0] += 1
        return await exchange(*args)

    monkeypatch.setattr(AsyncHeldConnection, "_exchange", staticmethod(counted))
    return count


@pytest.mark.parametrize("protocol", [2, 3])
def test_an_asyncio_held_connection_writes_and_reads_its_calls_itself(
    monkeypatch: pytest.MonkeyPatch, protocol: int
) -> None:
    # With hiredis's reader (the default where hiredis is installed), every call after
    # the connection's handshake is written and read here, and decides as through the client.
    pytest.importorskip("hiredis")
    count = _read_here(monkeypatch)

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, protocol=protocol)
        backend = RedisBackend(client, coalesce=False)
        through = RedisBackend(AsyncCounting.from_url(REDIS_URL, protocol=protocol), coalesce=False)
        clock = ManualClock(1_000.0)
        name = unique_name("owned")  # one budget, decided in turn through each client
        limiters = [TokenBucket(40, 0.0001, backend=b, name=name, clock=clock) for b in (backend, through)]
        for limiter in limiters:
            assert await limiter.try_acquire_async()  # connects (redis-py's own handshake)
        before = count[0]
        outcomes = [await limiters[i % 2].try_acquire_async() for i in range(48)]
        assert outcomes == [True] * 38 + [False] * 10
        assert count[0] - before == 24  # the wired client's calls, not the other's
        state = backend._loops[asyncio.get_running_loop()]
        assert state.held is not None
        # The connections' socket timeout (redis-py 8's default is 5 s), kept by the watch.
        conn = state.held._held[0]()  # the connection held between calls
        assert conn is not None
        assert (None if state.watch is None else state.watch.seconds) == conn.socket_timeout
        await backend.aclose()
        await through.aclose()

    asyncio.run(run())


@pytest.mark.servers
def test_a_call_read_here_keeps_its_clients_socket_timeout_and_the_next_reads_its_own_reply() -> None:
    # RedisBackend(client) with the client's own socket timeout: a call read here has
    # none of redis-py's, and the backend's watch keeps it.
    server = private_server()

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(server.url, socket_timeout=0.3)
        backend = RedisBackend(client, coalesce=False)
        clock = ManualClock(1_000.0)
        full, empty = bucket(backend, clock=clock), bucket(backend, capacity=1, clock=clock)
        assert await empty.try_acquire_async()
        assert await full.try_acquire_async()
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            with pytest.raises(BackendUnavailable, match=r"0\.3 s"):
                await empty.try_acquire_async()  # refused, in a reply that comes late
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert time.monotonic() - started < 3
        assert await full.try_acquire_async()  # its own reply, not the late refusal
        assert not await empty.try_acquire_async()
        await backend.aclose()
        await client.aclose()

    try:
        asyncio.run(run())
    finally:
        server.cleanup()


@pytest.mark.servers
@pytest.mark.parametrize("how", ["killed", "restarted"])
def test_an_asyncio_held_connection_closed_by_the_server_is_opened_afresh_unseen(how: str) -> None:
    server = private_server()

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(server.url, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))
        backend = RedisBackend(client, coalesce=False)
        limiter = bucket(backend, capacity=3)
        assert await limiter.try_acquire_async()
        if how == "killed":
            admin = redis.Redis.from_url(server.url)
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
            admin.close()
        else:
            server.stop()
            server.start()  # the budget and the library are gone with it
        await asyncio.sleep(0.05)  # the close reaches the connection
        outcomes = [await limiter.try_acquire_async() for _ in range(4)]
        assert outcomes == ([True, True, False, False] if how == "killed" else [True, True, True, False])
        assert backend.stats().failures == 0
        await backend.aclose()
        await client.aclose()

    try:
        asyncio.run(run())
    finally:
        server.cleanup()


@pytest.mark.parametrize("retries", [0, 1])
def test_a_connection_lost_mid_read_follows_the_clients_retry_policy(
    monkeypatch: pytest.MonkeyPatch, retries: int
) -> None:
    # The reply of a call read here is lost with its connection (reset): the script ran,
    # and the call is retried (counting twice, as redis-py's own retry does) or fails.
    pytest.importorskip("hiredis")
    armed = [0]
    read = asyncio.StreamReader.read

    async def reset(self: asyncio.StreamReader, n: int = -1) -> bytes:
        if armed[0]:
            armed[0] -= 1
            await read(self, n)  # the reply, lost
            raise ConnectionResetError(104, "Connection reset by peer")
        return await read(self, n)

    async def run() -> tuple[Any, int]:
        client = redis.asyncio.Redis.from_url(REDIS_URL, retry=redis.asyncio.retry.Retry(NoBackoff(), retries))
        backend = RedisBackend(client, coalesce=False)
        limiter = bucket(backend)
        assert await limiter.try_acquire_async()
        monkeypatch.setattr(asyncio.StreamReader, "read", reset)
        armed[0] = 1
        try:
            outcome: Any = await limiter.try_acquire_async()
        except BackendUnavailable:
            outcome = "unavailable"
        left = 0
        while await limiter.try_acquire_async():
            left += 1
        await backend.aclose()
        await client.aclose()
        return outcome, left

    outcome, left = asyncio.run(run())
    # Ten tokens: the first call's, the lost reply's, and a retry's (if any).
    assert (outcome, left) == ((True, 7) if retries else ("unavailable", 8))


def test_a_task_cancelled_while_its_reply_is_read_here_leaves_no_reply_for_the_next() -> None:
    pytest.importorskip("hiredis")

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        backend = RedisBackend(client, coalesce=False)
        clock = ManualClock(1_000.0)
        full, empty = bucket(backend, capacity=100, clock=clock), bucket(backend, capacity=1, clock=clock)
        assert await empty.try_acquire_async()
        for _ in range(20):
            task = asyncio.ensure_future(empty.try_acquire_async())  # refused, if it lands
            for _ in range(random.randrange(4)):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                assert not await task
            assert await full.try_acquire_async()  # its own reply, never the refusal
        await backend.aclose()
        await client.aclose()

    asyncio.run(run())


def test_connections_that_do_more_with_a_reply_are_read_through_their_own_methods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A health check due, the Python parser, a Sentinel's connection (which drops a
    # demoted master's on READONLY): redis-py sends and reads each call, and a cancel
    # is kept from stranding a grant by a task per call.
    from redis._parsers import _AsyncRESP3Parser

    from ratelimit._stores.redis.held_connection import _reads_itself

    sentinel = redis.asyncio.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
        "mymaster", redis.asyncio.sentinel.Sentinel([])
    )
    assert not _reads_itself(sentinel)
    count = _read_here(monkeypatch)

    async def run() -> None:
        for options in ({"health_check_interval": 30}, {"parser_class": _AsyncRESP3Parser}):
            client = redis.asyncio.Redis.from_url(REDIS_URL, **options)
            backend = RedisBackend(client, coalesce=False)
            limiter = bucket(backend, capacity=3)
            assert await limiter.try_acquire_async()
            state = backend._loops[asyncio.get_running_loop()]
            assert state.held is not None
            assert not state.held.reads_itself
            assert [await limiter.try_acquire_async() for _ in range(3)] == [True, True, False]
            assert count[0] == 0
            await backend.aclose()
            await client.aclose()

    asyncio.run(run())
