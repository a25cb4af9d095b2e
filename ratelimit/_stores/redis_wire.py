"""A script call sent straight on a connection of the synchronous client's pool,
for :class:`~.redis_calls.RedisCalls`.

``client.fcall(...)`` spends most of an uncontended decision's client time around
the command rather than on it: a connection taken from the pool and given back (its
lock, its checks, its events), each argument encoded in Python, redis-py's metrics.
So a :class:`Wire` holds one connection of the pool between calls and sends each call
packed at once (hiredis's packer), reads the reply, and applies the connection's own
retry policy as redis-py does. Counted with callgrind, a token bucket's decision took
188 k client instructions through the client and 82 k this way; the empty
``EVALSHA`` through the client takes 140 k (``benchmarks/client_instructions.py``).

The connection held is checked as the pool checks one before lending it (connected,
nothing unread on it: a server restarted or failed over under it is found before
the call, not by it); one interrupted between its command and its reply is closed;
a forked child drops its parent's; a backend dropped unclosed gives it back. Calls
in flight at once beyond the first take connections from the pool for the call.

It is used only where it changes nothing a caller can see: a synchronous
``redis.Redis`` whose command path (``execute_command`` and what it calls, ``fcall``,
``evalsha``) is redis-py's own, neither overridden by a subclass nor wrapped by
instrumentation (tracing sees every call), with no single connection of its own, and
redis-py's own metrics off when the backend is made (they count what passes through
the client). A
connection is held only where the pool has one to spare beyond the backend's
``pool_size`` calls in flight (:meth:`RedisBackend.from_url
<ratelimit._stores.redis.RedisBackend.from_url>` makes its pool one larger for it);
otherwise each call takes one from the pool and gives it back.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import redis
import redis.exceptions

_pack: Callable[[tuple[str, ...]], bytes] | None
try:
    import hiredis

    _pack = cast("Callable[[tuple[str, ...]], bytes]", hiredis.pack_command)
except ImportError:  # pragma: no cover - hiredis is an extra; the connection's own packer then
    _pack = None

__all__ = ["Wire", "wire_for"]

#: The methods a command passes through in redis-py's client: a subclass that
#: overrides one of them, or instrumentation that wraps one, sees every call only if
#: the calls go through the client.
_COMMAND_PATH = ("execute_command", "_execute_command", "_send_command_parse_response", "parse_response",
                 "fcall", "evalsha")  # fmt: skip


_AS_IMPORTED = {name: getattr(redis.Redis, name, None) for name in _COMMAND_PATH}


def _plain_commands(client: Any) -> bool:
    """Whether ``client`` runs its commands as redis-py does: no method of the path
    overridden, nor replaced since this module was imported, nor a wrapper."""
    for name in _COMMAND_PATH:
        runs = getattr(type(client), name, None)
        if runs is None or runs is not _AS_IMPORTED[name] or hasattr(runs, "__wrapped__"):
            return False
    return True


def wire_for(client: Any, *, turns: int) -> Wire | None:
    """The wire of ``client``, or ``None`` where calls must go through the client.

    ``turns``: the most calls the backend has in flight at once. One connection is
    held between calls only where the pool has one to spare beyond them."""
    if not isinstance(client, redis.Redis) or not _plain_commands(client) or _observed():
        return None
    if getattr(client, "connection", None) is not None:  # single_connection_client
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or not callable(getattr(pool, "release", None)):
        return None
    limit = getattr(pool, "max_connections", None)
    spare = not isinstance(limit, int) or limit > turns
    return Wire(pool, hold=spare, utf8=_utf8(pool))


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


def _ready(conn: Any) -> None:
    """What redis-py's pool does to a connection before it lends it: connect it if it
    is not (a Sentinel's asks where the master is now), and if it is readable with no
    command sent (the server closed it: a restart, a failover, an idle timeout), open
    it afresh, so that a call is not the one to find it dead."""
    conn.connect()
    try:
        if conn.can_read():
            raise redis.exceptions.ConnectionError("a connection with data before its command")
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        conn.disconnect()
        conn.connect()


def _give_back(pool: Any, held: list[Any]) -> None:
    while held:
        # A pool already closed or reset has nothing to give back to.
        with contextlib.suppress(Exception):
            pool.release(held.pop())


class Wire:
    """One pool's connections, on which a command is sent packed and its reply read:
    one of them held between calls (``hold``), the others taken from the pool for a
    call and given back. Safe for any number of threads."""

    def __init__(self, pool: Any, *, hold: bool, utf8: bool) -> None:
        self._pool = pool
        self._hold = hold
        # hiredis packs text as UTF-8; another encoding is the connection's to apply.
        self._pack = _pack if utf8 else None
        # The held connection, if any, and who holds it: a forked child drops its
        # parent's (redis-py's pool starts afresh in a child the same way).
        self._held: list[Any] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # A backend dropped unclosed gives its connection back to the pool.
        self._finalizer = weakref.finalize(self, _give_back, pool, self._held)

    def _take(self) -> Any:
        if self._hold:
            with self._lock:
                if self._pid != os.getpid():
                    self._held.clear()
                    self._pid = os.getpid()
                conn = self._held.pop() if self._held else None
            if conn is not None:
                _ready(conn)
                return conn
        try:
            return self._pool.get_connection()
        except TypeError:  # redis-py 5 asks for a command's name
            return self._pool.get_connection("FCALL")

    def _give(self, conn: Any, *, failed: bool = False) -> None:
        reconnect: Callable[[], bool] | None = getattr(conn, "should_reconnect", None)
        if reconnect is not None and reconnect():  # the server moves (redis-py 8's notices)
            conn.disconnect()
        if self._hold and not failed:
            with self._lock:
                if not self._held and self._pid == os.getpid():
                    self._held.append(conn)
                    return
        self._pool.release(conn)

    def call(self, command: tuple[str, ...]) -> Any:
        """Send ``command`` and return its reply, as ``client.execute_command`` would
        for a command without a reply callback (``FCALL``, ``EVALSHA``, ``EVAL``), with
        the connection's retry policy; an error reply is raised as its ``ResponseError``."""
        conn = self._take()
        pack = self._pack
        packed = [pack(command)] if pack is not None else conn.pack_command(*command)

        def send() -> Any:
            conn.send_packed_command(packed)
            return conn.read_response()

        try:
            reply = conn.retry.call_with_retry(send, lambda _error: conn.disconnect())
        except redis.exceptions.ResponseError:
            # An error reply, read whole: the connection is as good as before.
            self._give(conn)
            raise
        except BaseException:
            # Anything else (a timeout, a signal's exception between sending and
            # reading) may leave a reply unread on it, which the next call would take
            # for its own.
            conn.disconnect()
            self._give(conn, failed=True)  # the pool's: the next call is lent one afresh
            raise
        self._give(conn)
        return reply

    def close(self) -> None:
        """Give the held connection back to its pool."""
        with self._lock:
            _give_back(self._pool, self._held)
