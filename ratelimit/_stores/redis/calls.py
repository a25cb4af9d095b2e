"""How a :class:`~.redis.RedisBackend` calls its scripts, and what it does when a
call cannot reach the store.

At most ``pool_size`` script calls are in flight at once (per event loop for
asyncio); the rest wait their turn, which is not a failure. When a call finds the
store unavailable, the callers that were waiting behind it fail at once instead of
each waiting for its own timeout. ``on_unavailable`` is read in one place,
``FailurePolicy.without_store`` (``unavailable.py``), for every shared store.

A failure's ``BackendUnavailable`` says in its message where the store is (its URL
with the password shown as ``***``) and why the call failed (``errors.failure_reason``):
``the Redis store at redis://127.0.0.1:6999/0 is unavailable: connection refused:
nothing listens there``.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
import redis.exceptions

from ..._errors import BackendUnavailable
from ..._redact import scrub
from ..landing import Late
from ..unavailable import BackendStats, FailurePolicy, Misconfigured, OnUnavailable
from .clients import address, client_secrets, database, database_count, drop_idle_connections, pool_limit
from .errors import STORE_ERRORS, failure_reason, is_unavailable, misconfigured, no_master, wrong_database
from .held_connection import HeldConnection, async_held_connection_for, held_connection_for
from .live import LiveCount
from .loops import InFlight, LoopState, Watch, close_with_loop
from .scripts import Script

__all__ = ["DEFAULT_POOL_SIZE", "BackendStats", "OnUnavailable", "RedisCalls"]


#: Script calls in flight at once per backend (per event loop for asyncio). Redis runs
#: one script at a time and a client process is bound by its own CPU long before this:
#: more connections only queue inside the server (see docs/performance.md).
DEFAULT_POOL_SIZE = 16

#: How long a call waits for a connection that other code sharing the client's pool
#: holds, before it is reported as unavailable.
POOL_WAIT_SECONDS = 30.0


class RedisCalls(FailurePolicy):
    """The script calls of a :class:`~.redis.RedisBackend`, which extends it: its
    clients (a synchronous one, and an asyncio one per event loop), the calls in flight that
    keep at most ``pool_size`` calls in flight, :meth:`run` and :meth:`run_async`,
    and the failure policy ``on_unavailable``.
    """

    def __init__(self, client: Any, *, on_unavailable: OnUnavailable, pool_size: int) -> None:
        # evalsha itself is a plain method on both kinds of client; the class tells.
        self._is_async = isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster))
        self._sync_client = None if self._is_async else client
        self._async_client = client if self._is_async else None
        self._async_factory: Callable[[], Any] | None = None
        self._deadline: float | None = None
        super().__init__(on_unavailable)
        #: The heartbeat of ``local_share="auto"``, made when the first limiter binds:
        #: each call starts it again in a forked child.
        self._live: LiveCount | None = None
        self.pool_size = min(pool_size, pool_limit(client) or pool_size)
        #: The database the client selects: the library's counts held in Lua serve
        #: database 0's calls only (see lua/_top.lua).
        self.database = database(client)
        # Calls in flight to the store, taken and given back: a C queue costs a fraction of
        # a threading.Semaphore on this path.
        self._in_flight = _in_flight(self.pool_size)
        _backends.add(self)
        # Not weakly keyed: each entry's client and gate refer to their loop. An entry
        # goes when its loop shuts down (see close_with_loop), or once found closed.
        self._loops: dict[asyncio.AbstractEventLoop, LoopState] = {}
        # Failures of calls that reached for the store (not of waiters failed behind them).
        self._outages = 0
        # Where the store is, as errors name it (from_url puts its URL, redacted), the
        # secrets no error may show, and why the last call found it unavailable.
        self._where = address(client)
        self._secrets = client_secrets(client, None)
        self._last_reason = ""
        # How many databases the server has, asked once a SELECT was refused.
        self._databases: int | None = None
        #: How the synchronous client's calls are sent, where not through the client
        #: (see redis/held_connection.py).
        self._held: HeldConnection | None = (
            None if self._sync_client is None else held_connection_for(client, in_flight=self.pool_size)
        )

    def _close_held(self) -> None:
        if self._held is not None:
            self._held.close()

    # -- clients of each event loop -------------------------------------------------

    async def _attach(self, loop: asyncio.AbstractEventLoop) -> LoopState:
        """This backend's state for ``loop``, made on its first call there."""
        made = self._async_factory() if self._async_factory is not None else None
        with self._lock:
            self._forget_closed_loops()
            state = self._loops.get(loop)
            if state is None:
                client = made or self._async_client
                held = async_held_connection_for(client, in_flight=self.pool_size)
                # A call the held connection reads itself has no socket timeout: the
                # watch keeps the connections' own.
                deadline = self._deadline if self._deadline is not None or held is None else held.read_timeout
                watch = None if deadline is None else Watch(loop, deadline)
                if held is not None:
                    held.deadline = deadline
                state = LoopState(client, InFlight(self.pool_size), watch, held)
                self._loops[loop] = state
                made, closer = None, state
            else:
                closer = None
        if closer is not None and self._async_factory is not None:
            closer.closer = close_with_loop(closer.client, lambda: self._forget(loop, closer))
            await closer.closer.__anext__()
        if made is not None:  # another task of this loop got there first
            await made.aclose()
        return state

    def _forget(self, loop: asyncio.AbstractEventLoop, state: LoopState) -> None:
        with self._lock:
            if self._loops.get(loop) is state:
                del self._loops[loop]

    def _forget_closed_loops(self) -> None:
        # A loop closed without shutting down its async generators never closed its
        # client: dropping it lets the garbage collector close the sockets (with a
        # ResourceWarning, which is the loop's owner's to hear).
        for loop in [loop for loop in self._loops if loop.is_closed()]:
            del self._loops[loop]

    # -- running scripts ----------------------------------------------------------

    def _unavailable(self, exc: BaseException, client: Any = None) -> BackendUnavailable:
        lasting = misconfigured(exc)
        error = self._unavailable_error(exc, client)
        with self._lock:
            self._failures += 1
            if not lasting:
                # Waiters behind a misconfigured call meet it for themselves: failing
                # them as an outage would let on_unavailable grant them.
                self._outages += 1
                self._last_reason = str(error)
        return error

    def _unavailable_error(self, exc: BaseException, client: Any = None) -> BackendUnavailable:
        """The ``BackendUnavailable`` for ``exc``, a failure of a call through
        ``client``: its message names the store's address and the reason, and holds no
        secret; a :class:`~ratelimit._stores.unavailable.Misconfigured` for wrong
        credentials or a database the server does not have."""
        said = None if client is None else no_master(client, exc)
        if said is None:
            if wrong_database(exc) and self._databases is None and self._sync_client is not None:
                self._databases = database_count(self._sync_client)
            why = failure_reason(exc, database=self.database, databases=self._databases)
            said = f"the Redis store at {self._where} is unavailable: {why}"
        said = scrub(said, self._secrets)
        return Misconfigured(said) if misconfigured(exc) else BackendUnavailable(said)

    def _outage_seen(self, outages: int) -> BackendUnavailable | None:
        # A call that waited its turn while a call ahead of it found the store
        # unavailable fails at once: each waiter timing out on its own would take
        # pool_size at a time. Only calls that reached for the store count: a waiter
        # failed this way must not fail the ones behind it, or a queue that never
        # empties would never try the store again.
        if self._outages == outages:
            return None
        with self._lock:
            self._failures += 1
            said = self._last_reason or f"the Redis store at {self._where} is unavailable"
        return BackendUnavailable(f"{said} (met by a call ahead of this one)")

    def _pool_full(self, started: float) -> float:
        # The client's pool is shared with other code and full: busy, not down.
        waited = time.monotonic() - started
        if waited > POOL_WAIT_SECONDS:
            raise self._unavailable(
                redis.exceptions.MaxConnectionsError(f"the client's connection pool stayed full for {waited:.0f} s")
            )
        return min(0.05, 0.001 + waited / 10)

    def run(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        client = self._sync_client
        if client is None:
            raise TypeError("this RedisBackend wraps an asyncio client: use the _async methods")
        if self._live is not None:
            self._live.start()  # nothing, unless this is a forked child's first call
        in_flight = self._in_flight
        try:
            in_flight.get_nowait()
        except queue.Empty:
            outages = self._outages
            in_flight.get()
            if (outage := self._outage_seen(outages)) is not None:
                in_flight.put(None)
                raise outage from None
        held = self._held
        send = None if held is None else held.call
        try:
            started = None
            while True:
                try:
                    return script(client, keys, args, send)
                except redis.exceptions.MaxConnectionsError:
                    started = started or time.monotonic()
                    time.sleep(self._pool_full(started))
                except STORE_ERRORS as exc:
                    if not (is_unavailable(exc) or misconfigured(exc)):
                        raise  # a bug (in a script, in the deployment): not for the failure policy
                    raise self._unavailable(exc, client) from exc
                except BaseException:
                    drop_idle_connections(client)
                    raise
        finally:
            in_flight.put(None)

    @property
    def threaded(self) -> bool:
        """Whether asyncio callers are served by the synchronous client, from threads."""
        return self._sync_client is not None and self._async_factory is None

    def hands_over(self) -> bool:
        """Whether this loop's calls hand a reply that lands once their task has left to
        the ``late`` they are given (``run_async``): sent on a held connection that
        reads its replies itself. (Not yet known on a loop's first call: no.)"""
        state = self._loops.get(asyncio.get_running_loop())
        return state is not None and state.held is not None and state.held.reads_itself

    async def run_async(
        self, script: Script, keys: Sequence[str], args: Sequence[str], late: Late[Any] | None = None
    ) -> Any:
        """``script``'s reply; ``late``, where this loop's calls hand over (``hands_over``):
        given the reply if it lands once this task has left (cancelled, or timed out)."""
        if self._sync_client is not None and self._async_factory is None:
            # A synchronous client only: keep the event loop free while it blocks.
            return await asyncio.to_thread(self.run, script, keys, args)
        if self._live is not None:
            self._live.start()  # nothing, unless this is a forked child's first call
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop) or await self._attach(loop)
        gate = state.gate
        if not gate.take_now():
            outages = self._outages
            await gate.take()
            if (outage := self._outage_seen(outages)) is not None:
                gate.give()
                raise outage
        watch, held = state.watch, state.held
        task = None if watch is None else asyncio.current_task()
        if watch is not None and task is not None:
            watch.start(task)
        try:
            started = None
            while True:
                try:
                    return await script.call_async(state.client, keys, args, None if held is None else held.call, late)
                except asyncio.CancelledError:
                    if watch is None or task is None or not watch.timed_out(task):
                        raise
                    error = redis.exceptions.TimeoutError(f"no reply from Redis within {watch.seconds:g} s")
                    raise self._unavailable(error) from error
                except redis.exceptions.MaxConnectionsError:
                    started = started or time.monotonic()
                    await asyncio.sleep(self._pool_full(started))
                except STORE_ERRORS as exc:
                    if not (is_unavailable(exc) or misconfigured(exc)):
                        raise  # a bug (in a script, in the deployment): not for the failure policy
                    if wrong_database(exc) and self._databases is None and self._sync_client is not None:
                        # Asked here, off the loop, so that the error's text can say it.
                        self._databases = await asyncio.to_thread(database_count, self._sync_client)
                    raise self._unavailable(exc, state.client) from exc
        finally:
            if watch is not None and task is not None:
                watch.calls.pop(task, None)
            gate.give()


def _in_flight(count: int) -> queue.SimpleQueue[None]:
    in_flight: queue.SimpleQueue[None] = queue.SimpleQueue()
    for _ in range(count):
        in_flight.put(None)
    return in_flight


#: Every backend made, for the fork handler.
_backends: weakref.WeakSet[RedisCalls] = weakref.WeakSet()


def _forked() -> None:
    # The calls in flight that the parent's threads had taken at the fork (their calls in
    # flight) are never given back in the child, which has none of those threads: with
    # all of them taken, its calls would wait forever. Its lock, held by one of those
    # threads, would stay held: both are new.
    for calls in list(_backends):
        calls._in_flight = _in_flight(calls.pool_size)
        calls._lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)
