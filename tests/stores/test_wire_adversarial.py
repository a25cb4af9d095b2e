"""The held connection of ``ratelimit/_stores/redis/wire.py`` attacked: exceptions at
each step of a call, outages met by the connection held, hundreds of threads with
the server's scripts flushed under them, a server stopped mid-call, a fork while a
thread holds the wire's lock, clients of other kinds, and a retried call compared
with redis-py's own.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import threading
import time
import warnings
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratelimit import BackendUnavailable, ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.redis import calls as redis_calls

from conftest import REDIS_URL, private_server, unique_name

pytestmark = pytest.mark.redis


class Interrupted(BaseException):
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
    # before a call (readable, then refused on reconnecting) was once kept from the
    # pool: one outage later the library's load after the restart found it full.
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
            raise Interrupted
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, step, interrupting)
    backend = RedisBackend.from_url(REDIS_URL, pool_size=1, coalesce=False)
    limiter = bucket(backend)
    assert limiter.try_acquire()
    for _ in range(3):
        armed[0] = 1  # the held connection's check, before the command is sent
        with pytest.raises(Interrupted):
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
                raise Interrupted
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
            except Interrupted:
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
        assert backend._wire is not None
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
        assert (backend._wire is not None) is (kind is redis.Redis)
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


def test_clients_that_must_not_be_wired_are_not() -> None:
    backend = RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL))
    assert backend._wire is None
    single = RedisBackend(redis.Redis.from_url(REDIS_URL, single_connection_client=True), coalesce=False)
    assert single._wire is None
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


def test_a_fork_while_a_thread_holds_the_wires_lock_leaves_the_child_able_to_call() -> None:
    # A thread taking or giving back the held connection at the moment another forks:
    # the child inherits the lock held, by a thread it does not have.
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    limiter = bucket(backend)
    assert limiter.try_acquire()
    wire = backend._wire
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
