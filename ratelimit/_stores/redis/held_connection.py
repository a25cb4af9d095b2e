"""A script call sent straight on a connection of the client's pool, for
:class:`~.calls.RedisCalls`: :class:`HeldConnection` for a synchronous client,
:class:`AsyncHeldConnection` for each event loop's asyncio client.

Most of ``client.fcall(...)``'s client time goes around the command (taking a
connection from the pool and giving it back, encoding each argument in Python). So
the backend holds one pooled connection between calls, sends each call packed at once
(hiredis's packer), reads the reply, and applies the connection's retry policy as
redis-py does (``benchmarks/client_instructions.py`` counts the difference). An
asyncio connection read by hiredis's reader is written and read here, with that reader
(``AsyncHeldConnection``): redis-py's asyncio send and read each cost a timer, and on
Python before 3.12 a task, per call.

The held connection is checked as the pool checks one before lending it (connected,
nothing unread: a failed-over server is found before the call), and goes back when
that fails; one interrupted between command and reply is closed; a forked child drops
its parent's; a backend dropped unclosed gives it back from a thread (never from the
garbage collector, which may run where the pool's lock is held). Concurrent calls
beyond the first take pooled connections.

It is used only where replies, errors and tracing stay redis-py's: a ``redis.Redis``
or ``redis.asyncio.Redis`` whose command path is neither overridden nor wrapped, with
no single connection, and redis-py's metrics off; and only where the pool has a
connection to spare beyond the backend's ``pool_size`` (``RedisBackend.from_url``
makes its pools one larger for it).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import inspect
import os
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.exceptions

from ..landing import keep_running

_pack: Callable[[tuple[str, ...]], bytes] | None
try:
    import hiredis

    _pack = cast("Callable[[tuple[str, ...]], bytes]", hiredis.pack_command)
except ImportError:  # pragma: no cover - hiredis is an extra; the connection's own packer then
    _pack = None

# An asyncio connection whose replies redis-py reads with hiredis's reader is read here
# with that same reader (see AsyncHeldConnection._exchange); any other, through its own
# methods. What "not a reply yet" is to that reader, and the push notices' class.
_HIREDIS_PARSER: Any
_NOT_ENOUGH_DATA: object
try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
    from redis._parsers.hiredis import _AsyncHiredisParser as _HIREDIS_PARSER
    from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR as _SERVER_CLOSED
except ImportError:  # pragma: no cover - an older redis-py, or no hiredis: the connection reads
    _HIREDIS_PARSER, _NOT_ENOUGH_DATA, _SERVER_CLOSED = None, object(), "Connection closed by server."

__all__ = ["AsyncHeldConnection", "HeldConnection", "async_held_connection_for", "held_connection_for"]

#: The methods a command passes through in redis-py's clients: one overridden or
#: wrapped sees every call only if calls go through the client.
_COMMAND_PATH = ("execute_command", "_execute_command", "_send_command_parse_response", "parse_response",
                 "fcall", "evalsha")  # fmt: skip

_AS_IMPORTED: dict[type, dict[str, Any]] = {
    base: {name: getattr(base, name, None) for name in _COMMAND_PATH} for base in (redis.Redis, redis.asyncio.Redis)
}

#: What a connection's failure to send or read may raise: the call found the server
#: gone, and the connection is closed before it goes back.
_BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def _plain_commands(client: Any, base: type) -> bool:
    """Whether ``client`` runs its commands as redis-py's ``base`` does: no method of
    the path overridden, nor replaced since this module was imported, nor a wrapper."""
    imported = _AS_IMPORTED[base]
    for name in _COMMAND_PATH:
        runs = getattr(type(client), name, None)
        if runs is not imported[name] or hasattr(runs, "__wrapped__"):
            return False
    return True


def _observed() -> bool:
    """Whether redis-py's own metrics are on (redis-py 8's observability), which count
    the commands that pass through its client."""
    try:
        from redis.observability.recorder import is_enabled
    except ImportError:
        return False
    try:
        return bool(is_enabled())
    except Exception:  # a broken metrics set-up is not this call's to report
        return False


def _utf8(pool: Any) -> bool:
    """Whether the pool's connections encode text as hiredis's packer does: UTF-8, strictly."""
    kwargs = getattr(pool, "connection_kwargs", None)
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    try:
        encoding = codecs.lookup(kwargs.get("encoding", "utf-8")).name
    except (LookupError, TypeError):
        return False
    return encoding == "utf-8" and kwargs.get("encoding_errors", "strict") == "strict"


def _held_pool(client: Any, base: type, in_flight: int) -> tuple[Any, bool] | None:
    """``client``'s pool and whether a connection may be held (the pool has one to
    spare beyond ``in_flight``), or ``None``: calls go through the client."""
    if not isinstance(client, base) or not _plain_commands(client, base) or _observed():
        return None
    if getattr(client, "connection", None) is not None:  # single_connection_client
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or not callable(getattr(pool, "release", None)):
        return None
    limit = getattr(pool, "max_connections", None)
    return pool, not isinstance(limit, int) or limit > in_flight


def held_connection_for(client: Any, *, in_flight: int) -> HeldConnection | None:
    """The held connection of a synchronous ``client``, or ``None`` where calls go through it."""
    found = _held_pool(client, redis.Redis, in_flight)
    return None if found is None else HeldConnection(*found)


def async_held_connection_for(client: Any, *, in_flight: int) -> AsyncHeldConnection | None:
    """The held connection of an asyncio ``client`` (one event loop's), or ``None``."""
    found = _held_pool(client, redis.asyncio.Redis, in_flight)
    return None if found is None else AsyncHeldConnection(*found)


class _Held:
    """The connection held between calls, for either kind of client: at most one, kept
    only by the process that took it (a forked child drops its parent's, see
    `_forked`, as redis-py's pool starts afresh in a child)."""

    def __init__(self, pool: Any, hold: bool) -> None:
        self._pool = pool
        self._hold = hold
        # hiredis packs text as UTF-8; another encoding is the connection's to apply.
        self._pack = _pack if _utf8(pool) else None
        # Weakly: the pool keeps every connection it lent, so one held lives as long as
        # its pool, and a pool left to the garbage collector goes with its connections
        # at once (nothing here keeps them for a finalizer).
        self._held: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()
        _everyone.add(self)

    def _pop(self) -> Any:
        """The held connection, taken (``None``: take one from the pool)."""
        if not self._hold:
            return None
        with self._lock:
            return self._held.pop()() if self._held else None

    def _keep(self, conn: Any) -> bool:
        """Hold ``conn`` if none is held; ``False``: it goes back to the pool."""
        if not self._hold:
            return False
        with self._lock:
            if self._held:
                return False
            self._held.append(weakref.ref(conn))
            return True

    def _packed(self, conn: Any, command: tuple[str, ...]) -> list[bytes]:
        pack = self._pack
        return [pack(command)] if pack is not None else list(conn.pack_command(*command))

    @staticmethod
    def _moving(conn: Any) -> bool:
        """Whether the server asked this connection to move (redis-py 8's notices)."""
        reconnect: Callable[[], bool] | None = getattr(conn, "should_reconnect", None)
        return reconnect is not None and reconnect()


#: Every held connection made, for the fork handler.
_everyone: weakref.WeakSet[_Held] = weakref.WeakSet()


def _forked() -> None:
    # The parent's connection is the parent's: the child's pool lends it its own (a
    # socket shared by two processes would hand each the other's replies). A lock held
    # by a thread of the parent at the fork (taking or giving back the held connection)
    # would stay held in the child for ever: the child's is new. (Here, not a process
    # id compared at each call: two system calls a decision.)
    global _giver, _giver_lock
    _giver, _giver_lock = None, threading.Lock()  # (the parent's thread is not the child's)
    for made in list(_everyone):
        made._held.clear()
        made._lock = threading.Lock()
        if isinstance(made, HeldConnection) and made._hold:
            _start_giver()


os.register_at_fork(after_in_child=_forked)


def _give_back(pool: Any, held: list[weakref.ref[Any]]) -> None:
    while held:
        conn = held.pop()()
        # A pool already closed or reset has nothing to give back to.
        if conn is not None:
            with contextlib.suppress(Exception):
                pool.release(conn)


# A finalizer may run inside the garbage collector, set off by an allocation in any
# thread: one that holds the pool's lock (a BlockingConnectionPool's queue, an older
# redis-py's pool) would wait on itself for ever, and a wait of any kind there (even a
# thread's start) is where a signal handler's exception is lost. So a dropped held connection's
# connection is only put on a queue (SimpleQueue.put never waits: made for
# finalizers), and given back by one thread that waits for them, started with the
# first held connection that may hold one (and again in a forked child).
_returns: queue.SimpleQueue[tuple[Any, list[weakref.ref[Any]]]] = queue.SimpleQueue()
_giver: threading.Thread | None = None
_giver_lock = threading.Lock()


def _give_back_ever() -> None:
    while True:
        _give_back(*_returns.get())


def _start_giver() -> None:
    global _giver
    with _giver_lock:
        if _giver is None or not _giver.is_alive():
            _giver = threading.Thread(target=_give_back_ever, name="ratelimit-held-returns", daemon=True)
            _giver.start()


def _give_back_later(pool: Any, held: list[weakref.ref[Any]]) -> None:
    if held:
        _returns.put((pool, held))


class HeldConnection(_Held):
    """A synchronous pool's connections, on which a command is sent packed and its
    reply read: one held between calls (where the pool has one to spare), the others
    taken from the pool for a call and given back. Safe for any number of threads."""

    def __init__(self, pool: Any, hold: bool) -> None:
        super().__init__(pool, hold)
        # A backend dropped unclosed gives its connection back to the pool.
        if hold:
            _start_giver()
        self._finalizer = weakref.finalize(self, _give_back_later, pool, self._held)

    def _take(self) -> Any:
        conn = self._pop()
        if conn is not None:
            # What the pool does to a connection before it lends it: connect it if it
            # is not (a Sentinel's asks where the master is now), and if it is readable
            # with no command sent (the server closed it: a restart, a failover, an
            # idle timeout), open it afresh, so that a call is not the one to find it dead.
            try:
                conn.connect()
                try:
                    if conn.can_read():
                        raise redis.exceptions.ConnectionError("a connection with data before its command")
                except _BROKEN:
                    conn.disconnect()
                    conn.connect()
            except BaseException:
                # The server down, the connection refused, a signal's exception: the
                # pool's again, as the pool gives back one it could not ready, or each
                # failure would keep one of its connections from it.
                self._lose(conn)
                raise
            return conn
        try:
            return self._pool.get_connection()
        except TypeError:  # redis-py 5 asks for a command's name
            return self._pool.get_connection("FCALL")

    def _give(self, conn: Any, *, failed: bool = False) -> None:
        if self._moving(conn):
            conn.disconnect()
        if failed or not self._keep(conn):
            self._pool.release(conn)

    def _lose(self, conn: Any) -> None:
        # Closed and the pool's: the next call that needs one is lent one afresh.
        conn.disconnect()
        self._give(conn, failed=True)

    def call(self, command: tuple[str, ...]) -> Any:
        """Send ``command`` and return its reply, as ``client.execute_command`` would
        for a command without a reply callback (``FCALL``, ``EVALSHA``, ``EVAL``), with
        the connection's retry policy; an error reply is raised as its ``ResponseError``."""
        conn = self._take()
        packed: list[bytes] = []

        def send() -> Any:
            conn.send_packed_command(packed)
            return conn.read_response()

        try:
            # Packed with the connection taken, so that a failure to pack (or a
            # signal's exception meanwhile) gives it back too.
            packed += self._packed(conn, command)
            reply = conn.retry.call_with_retry(send, lambda _error: conn.disconnect())
        except redis.exceptions.ResponseError:
            # An error reply, read whole: the connection is as good as before.
            self._give(conn)
            raise
        except BaseException:
            # Anything else (a timeout, a signal's exception between sending and
            # reading) may leave a reply unread on it, which the next call would take
            # for its own.
            self._lose(conn)
            raise
        self._give(conn)
        return reply

    def close(self) -> None:
        """Give the held connection back to its pool."""
        with self._lock:
            _give_back(self._pool, self._held)


def _give_back_on(
    on: weakref.ref[asyncio.AbstractEventLoop], of: weakref.ref[Any], held: list[weakref.ref[Any]]
) -> None:
    # The asyncio pool's release is a coroutine: run on the connection's own loop, if
    # it still runs, to the pool, if it is still used (one that closed has closed its
    # client's connections, or left them to the garbage collector, which takes them
    # sooner when nothing here keeps the loop or the pool alive).
    loop, pool = on(), of()
    if not held or loop is None or pool is None or loop.is_closed():
        return
    lent: Any = pool

    def release() -> None:
        while held:
            if (conn := held.pop()()) is not None:
                _releasing.add(task := asyncio.ensure_future(lent.release(conn)))
                task.add_done_callback(_releasing.discard)

    with contextlib.suppress(RuntimeError):  # closed meanwhile
        loop.call_soon_threadsafe(release)


#: Releases started by a finalizer, kept until done (the loop holds tasks weakly).
_releasing: set[asyncio.Future[Any]] = set()


def _socket_timeout(pool: Any) -> float | None:
    """The socket timeout of ``pool``'s connections: the pool's setting, or the
    connection class's default (redis-py 8's is 5 s, older ones' none)."""
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict) and "socket_timeout" in kwargs:
        timeout = kwargs["socket_timeout"]
    else:
        timeout = None
        for cls in getattr(getattr(pool, "connection_class", None), "__mro__", ()):
            try:
                found = inspect.signature(cls.__init__).parameters.get("socket_timeout")
            except (TypeError, ValueError):
                continue
            if found is not None and found.default is not inspect.Parameter.empty:
                timeout = found.default
                break
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


#: The asyncio connection's own send and read, as imported.
_PLAIN_IO = {
    name: getattr(redis.asyncio.connection.AbstractConnection, name)
    for name in ("send_packed_command", "read_response")
}


def _reads_itself(pool: Any) -> bool:
    """Whether ``pool`` makes connections of redis-py's own, read with hiredis's
    reader, with no health checks: those whose calls are written and read here."""
    if _HIREDIS_PARSER is None:
        return False
    kwargs = getattr(pool, "connection_kwargs", None)
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    parser = kwargs.get("parser_class", getattr(redis.asyncio.connection, "DefaultParser", None))
    made = getattr(pool, "connection_class", None)
    return (
        parser is _HIREDIS_PARSER
        and not kwargs.get("health_check_interval")
        and isinstance(made, type)
        and made.__module__.startswith("redis.")
        # What a connection does with a reply of its own (a Sentinel's drops a demoted
        # master's) happens only through its methods.
        # (or that something wraps, as a tracer might, since this module was imported).
        and all(getattr(made, name, None) is method for name, method in _PLAIN_IO.items())
    )


class AsyncHeldConnection(_Held):
    """:class:`HeldConnection` for one event loop's asyncio client. A task cancelled between its
    command and its reply (a deadline, the caller) leaves its connection closed, as
    redis-py's own path does; or, for a call read here and given ``late``, the reply is
    read on in a task of its own and handed to ``late`` (``_read_on``), so that a grant
    the call made for a task that left is given back with no task per call to keep.

    Where redis-py reads a connection's replies with hiredis's reader (its default
    with hiredis installed), a call is written to the connection's transport and its
    reply read with that same reader here (:meth:`_exchange`): redis-py's own send and
    read each add a timer, and on Python before 3.12 a task, to every call. A call so
    made has no socket timeout of its own: its deadline is the backend's watch of its
    calls (``loops.Watch``, ``read_timeout`` seconds); a connection held otherwise is read
    through its own methods, with its own timeouts.
    """

    def __init__(self, pool: Any, hold: bool) -> None:
        super().__init__(pool, hold)
        self._ensure: Callable[[Any], Awaitable[None]] | None = getattr(pool, "ensure_connection", None)
        on, of = weakref.ref(asyncio.get_running_loop()), weakref.ref(pool)
        self._finalizer = weakref.finalize(self, _give_back_on, on, of, self._held)
        #: The deadline of a call read here, in seconds (``None``: none), which the
        #: backend keeps (``loops.Watch``): the connections' own socket timeout.
        self.read_timeout = _socket_timeout(pool)
        #: The deadline the backend keeps for this loop's calls (``RedisCalls``), and so
        #: for a reply read on once its task has left.
        self.deadline: float | None = None
        #: Whether the pool's connections are read here (see the class's doc): then a
        #: call given ``late`` hands it a reply that lands once its task has left.
        self.reads_itself = _reads_itself(pool)

    def _readable(self, conn: Any) -> Any:
        """``conn``'s hiredis parser if its replies may be read here (see the class's doc):
        connected, with nothing unread, and no health check due; else ``None``."""
        parser: Any = getattr(conn, "_parser", None)
        if parser.__class__ is not _HIREDIS_PARSER or not self.reads_itself:
            return None
        try:
            if conn.health_check_interval:
                return None
            writer = conn._writer
            if writer is None or not parser._connected or writer.transport.is_closing():
                return None
            # A socket's bytes (not, say, a test double's replies read off already).
            return parser if parser._stream.__class__ is asyncio.StreamReader else None
        except AttributeError:  # a redis-py that keeps them otherwise: read through its methods
            return None

    @staticmethod
    def _clean(parser: Any) -> bool:
        """Whether ``parser``'s connection has nothing to read before its command: what
        the pool's check of a connection finds without awaiting (``can_read`` false)."""
        stream = parser._stream
        try:
            unread = parser._reader.has_data() or stream._buffer
            return not (unread or stream.at_eof() or stream.exception() is not None)
        except AttributeError:  # an older hiredis: the pool's own check
            return False

    async def _ready(self, conn: Any) -> Any:
        """The held connection ``conn``, taken, made ready as the pool readies one it lends
        (as HeldConnection._take, with the asyncio pool's own check where it has one)."""
        ensure = self._ensure
        try:
            stream = getattr(conn, "_reader", None)
            if isinstance(stream, asyncio.StreamReader) and (stream.at_eof() or stream.exception() is not None):
                # Closed by the server (a restart, a kill) with nothing unread: opened
                # afresh, which not every pool's check does (redis-py 8.1's takes such
                # a connection for one with notices to read).
                await conn.disconnect(nowait=True)
            await (ensure(conn) if ensure is not None else conn.connect())
        except BaseException:
            await self._lose(conn)
            raise
        return conn

    async def _take(self) -> Any:
        """A connection of the pool, the held one being taken by another call."""
        try:
            return await self._pool.get_connection()
        except TypeError:  # redis-py 5 asks for a command's name
            return await self._pool.get_connection("FCALL")

    async def _give(self, conn: Any, *, failed: bool = False) -> None:
        if self._moving(conn):
            await conn.disconnect()
        if failed or not self._keep(conn):
            await self._pool.release(conn)

    async def _lose(self, conn: Any) -> None:
        # Closed without awaiting the transport's end: a cancelled task must not be
        # held up, and nothing here may be cancelled again half-way.
        await conn.disconnect(nowait=True)
        await self._give(conn, failed=True)

    @staticmethod
    async def _exchange(conn: Any, parser: Any, packed: list[bytes]) -> Any:
        """``packed`` written to ``conn``'s transport and its reply read with its parser's
        reader, as redis-py's ``send_packed_command`` and ``read_response`` would (but for
        their timeouts); a failure raised as theirs are, the connection closed. Cancelled,
        it leaves the reply unread, ready to be read on (``_reply``)."""
        conn._writer.writelines(packed)
        return await AsyncHeldConnection._reply(conn, parser)

    @staticmethod
    async def _reply(conn: Any, parser: Any) -> Any:
        push = getattr(parser, "_hiredis_PushNotificationType", None)
        try:
            reader = parser._reader
            reply = reader.gets()
            while reply is _NOT_ENOUGH_DATA or (push is not None and reply.__class__ is push):
                if reply is _NOT_ENOUGH_DATA:
                    # The one await between a command and its reply: a cancellation
                    # here leaves what has come in the stream's buffer or the reader.
                    data = await parser._stream.read(parser._read_size)
                    if not data:
                        raise redis.exceptions.ConnectionError(_SERVER_CLOSED)
                    reader.feed(data)
                else:  # a notice pushed ahead of the reply (RESP3): the parser's to handle
                    await parser.handle_push_response(reply)
                reply = reader.gets()
        except OSError as exc:
            await conn.disconnect(nowait=True)
            said = f"Error while reading from {conn._host_error()} : {exc.args}"
            raise redis.exceptions.ConnectionError(said) from exc
        except redis.exceptions.ConnectionError:
            await conn.disconnect(nowait=True)
            raise
        if isinstance(reply, redis.exceptions.ResponseError):
            raise reply
        if isinstance(reply, redis.exceptions.ConnectionError):
            await conn.disconnect(nowait=True)
            raise reply
        return reply

    async def _read_on(self, conn: Any, parser: Any, late: Callable[[Any], Awaitable[None]]) -> None:
        """The reply of a call whose task left before it landed, read on (within the
        backend's deadline) and handed to ``late``; the connection then kept or given
        back as after any call. An error reply decided nothing, and a failure is
        nobody's to hear: the connection goes, as a call's would."""
        try:
            reply = await asyncio.wait_for(self._reply(conn, parser), self.deadline)
        except redis.exceptions.ResponseError:
            await self._give(conn)
            return
        except Exception:
            await self._lose(conn)
            return
        except BaseException:
            await self._lose(conn)
            raise
        await self._give(conn)
        await late(reply)

    async def _retried(self, conn: Any, packed: list[bytes], failed: BaseException | None, reading: list[Any]) -> Any:
        """``packed``'s reply under the connection's retry policy, from ``failed`` on (the
        first attempt's failure, replayed to it) or from a first attempt through the
        connection's own methods; an attempt on a connection read here is made here,
        its parser in ``reading`` while its reply is awaited."""
        first = [failed] if failed is not None else []

        async def attempt() -> Any:
            if first:
                raise first.pop()
            if not conn.is_connected:
                await conn.connect()
            parser = self._readable(conn)
            if parser is None:
                await conn.send_packed_command(packed)
                return await conn.read_response()
            reading.append(parser)
            reply = await self._exchange(conn, parser, packed)
            reading.clear()
            return reply

        async def broken(_error: BaseException) -> None:
            reading.clear()
            await conn.disconnect()

        return await conn.retry.call_with_retry(attempt, broken)

    async def call(self, command: tuple[str, ...], late: Callable[[Any], Awaitable[None]] | None = None) -> Any:
        """:meth:`HeldConnection.call`, awaited. With ``late``: if the task leaves
        (cancelled) while a reply read here is awaited, the reply is read on in a task
        of its own and handed to ``late`` (``_read_on``)."""
        # The usual ends of a call (the held connection taken, checked, and kept again)
        # are made here: a coroutine each would cost more than the rest of their work.
        conn = self._pop()
        if conn is None:
            conn = await self._take()
            parser = self._readable(conn)
        elif (parser := self._readable(conn)) is None or not self._clean(parser):
            conn = await self._ready(conn)
            parser = self._readable(conn)
        # The parser of an exchange under way here, its reply unread: this call's own
        # attempt's (``reading``), or a retried one's (``retrying``).
        reading: Any = None
        retrying: list[Any] = []
        try:
            packed = self._packed(conn, command)
            if parser is None:
                reply = await self._retried(conn, packed, None, retrying)
            else:
                reading = parser
                try:
                    reply = await self._exchange(conn, parser, packed)
                except _BROKEN as error:
                    reading = None
                    reply = await self._retried(conn, packed, error, retrying)
                reading = None
        except redis.exceptions.ResponseError:
            await self._give(conn)
            raise
        except asyncio.CancelledError:
            under_way = reading if reading is not None else (retrying[0] if retrying else None)
            if late is not None and under_way is not None:
                keep_running(asyncio.ensure_future(self._read_on(conn, under_way, late)))
            else:
                await self._lose(conn)
            raise
        except BaseException:
            await self._lose(conn)
            raise
        if self._moving(conn):
            await self._give(conn)
        elif not self._keep(conn):
            await self._pool.release(conn)
        return reply

    async def close(self) -> None:
        """Give the held connection back to its pool."""
        while (conn := self._pop()) is not None:
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
