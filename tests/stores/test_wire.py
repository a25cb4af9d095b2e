"""A synchronous client's script calls sent straight on a connection of its pool
(``ratelimit/_stores/redis/wire.py``): the same decisions as through the client, and
none of the ways a held connection can go wrong (a reply left unread, a server
restarted under it, a fork, a pool too small to hold from, instrumentation that
must see every call, a text encoding other than UTF-8).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.connection
import redis.exceptions

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)

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
def test_the_wire_decides_as_the_client_does(kind: str) -> None:
    rng = random.Random(kind)
    wired, through = RedisBackend(plain(), coalesce=False), RedisBackend(Counting.from_url(REDIS_URL), coalesce=False)
    assert wired._wire is not None
    assert through._wire is None
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


def test_a_call_interrupted_on_the_wire_leaves_no_reply_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert backend._wire is not None
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
    assert backend._wire is not None

    def waited(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("the finalizer waited")

    monkeypatch.setattr(threading.Condition, "wait", waited)
    backend._wire._finalizer()  # as the collector calls it
    monkeypatch.undo()
    lent_again(client, 3)
    backend.close()
    client.close()


def test_a_client_whose_commands_are_seen_is_not_wired(monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert wired._wire is not None
    assert through._wire is None
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
    assert backend._wire is None
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
def test_the_asyncio_wire_decides_as_the_client_does(kind: str) -> None:
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
        assert state.wire is not None
        assert through._loops[asyncio.get_running_loop()].wire is None
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
        assert backend._loops[asyncio.get_running_loop()].wire is not None
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
