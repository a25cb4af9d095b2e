"""Shared state in Redis (or Valkey, or a Redis Cluster): one budget for every worker.

Every decision is one script call: the script reads the state, decides, records the
reservation and returns the wait, atomically, with the server's clock. So each
``acquire`` is exactly one round trip, however many workers contend.

Keys: ``ratelimit:{<name>}:<algorithm>`` (a composite's members:
``ratelimit:{<name>}:<i>:<algorithm>``). The braces are a hash tag: all of one
limiter's keys live in one Cluster slot, which multi-key scripts need. Inside the tag
only ``{``, ``}`` and ``%`` are escaped (``%7B``, ``%7D``, ``%25``), so an operator
finds a limiter's keys by its name. Every key expires once idle.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _validate
from ._algorithm import Algorithm
from ._backend import Handle
from ._clock import Clock
from ._errors import BackendUnavailable
from ._memory import MemoryBackend
from ._scripts import Script, group_script, single_script
from ._tally import Tally, weight

__all__ = ["BackendStats", "RedisBackend", "key_for"]

logger = logging.getLogger("ratelimit")

OnUnavailable = Literal["raise", "allow", "local"]
T = TypeVar("T")

#: Errors that mean "the store cannot be reached", as opposed to a bug in a script.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    OSError,
)

#: Defaults for clients made by :meth:`RedisBackend.from_url`: a dead server costs an
#: acquire at most about half a second, and a script call is never retried (it is not
#: idempotent: a call that timed out after reaching the server may have been recorded).
DEFAULT_SOCKET_TIMEOUT = 0.5
DEFAULT_CONNECT_TIMEOUT = 0.5


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def key_for(name: str, kind: str, member: int | None = None) -> str:
    """The Redis key of limiter ``name`` (``member`` of a composite) of algorithm ``kind``."""
    middle = "" if member is None else f"{member}:"
    return f"ratelimit:{{{_escape(name)}}}:{middle}{kind}"


def _num(value: float) -> str:
    # repr() is the shortest text that reads back as the same double, in Lua too.
    return repr(float(value))


@dataclass(frozen=True)
class BackendStats:
    """Counters of a :class:`RedisBackend` since it was made."""

    #: Calls that could not reach the store.
    failures: int
    #: Of those, acquires granted without the store (``on_unavailable="allow"``).
    failed_open: int
    #: Of those, acquires decided by the local fallback (``on_unavailable="local"``).
    fell_back: int


class RedisBackend:
    """Limiter state in Redis, shared by every process that uses the same keys.

    Args:
        client: a ``redis.Redis``, ``redis.asyncio.Redis`` or ``redis.cluster.RedisCluster``
            (Valkey speaks the same). A synchronous client also serves the ``_async``
            methods, from a worker thread; an asyncio client serves only them.
        on_unavailable: what an acquire does when the store cannot be reached:
            ``"raise"`` (default) raises :class:`BackendUnavailable`; ``"allow"``
            grants and logs a warning (fail open); ``"local"`` decides with an
            in-process limiter of the same algorithm whose rate is scaled by
            ``local_share`` (give each process its share of the budget).
        local_share: the fraction of the configured limits each process keeps for
            itself when falling back locally (0 < share <= 1).
        time_source: ``"server"`` (default) reads the server's clock inside the
            script; ``"client"`` sends this machine's ``time.time()`` instead, for
            managed services that refuse ``TIME`` in scripts (keep the workers'
            clocks in sync, e.g. with NTP).

    The client's own timeouts and retries apply; :meth:`from_url` sets ones that
    suit a limiter (see ``DEFAULT_SOCKET_TIMEOUT``). Do not give it a client that
    retries commands after a timeout: a script call is not idempotent.
    """

    shared = True

    def __init__(
        self,
        client: Any,
        *,
        on_unavailable: OnUnavailable = "raise",
        local_share: float = 1.0,
        time_source: Literal["server", "client"] = "server",
    ) -> None:
        if not hasattr(client, "evalsha"):
            raise TypeError(
                f"client must be a redis-py client (Redis, RedisCluster, redis.asyncio.Redis), got {client!r}"
            )
        if on_unavailable not in ("raise", "allow", "local"):
            raise ValueError(f"on_unavailable must be 'raise', 'allow' or 'local', got {on_unavailable!r}")
        if time_source not in ("server", "client"):
            raise ValueError(f"time_source must be 'server' or 'client', got {time_source!r}")
        share = _validate.positive("local_share", local_share)
        if share > 1:
            raise ValueError(f"local_share must be <= 1, got {local_share!r}")
        # evalsha itself is a plain method on both kinds of client; the class tells.
        self._is_async = isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster))
        self._sync_client = None if self._is_async else client
        self._async_client = client if self._is_async else None
        self._async_factory: Callable[[], Any] | None = None
        self.on_unavailable: OnUnavailable = on_unavailable
        self.local_share = share
        self.time_source = time_source
        self._local = MemoryBackend()
        self._lock = threading.Lock()
        self._failures = self._failed_open = self._fell_back = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        cluster: bool = False,
        on_unavailable: OnUnavailable = "raise",
        local_share: float = 1.0,
        time_source: Literal["server", "client"] = "server",
        **options: Any,
    ) -> RedisBackend:
        """A backend on ``url`` (``redis://``, ``rediss://``, ``unix://``).

        Makes a synchronous client now and an asyncio one on first async use, both
        with limiter-friendly defaults: ``socket_timeout`` and
        ``socket_connect_timeout`` of 0.5 s and no retries. ``options`` go to the
        redis-py client and override those defaults. ``cluster=True`` uses a
        Redis Cluster client (``url`` names any one node).
        """
        if not isinstance(url, str) or not url:
            raise TypeError(f"url must be a non-empty str, got {url!r}")
        settings: dict[str, Any] = {
            "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
            "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        }
        settings.update(options)
        if cluster:
            settings.setdefault("retry", Retry(NoBackoff(), 0))
            sync_client: Any = redis.cluster.RedisCluster.from_url(url, **settings)

            def make_async() -> Any:
                async_settings = dict(settings, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))
                return redis.asyncio.cluster.RedisCluster.from_url(url, **async_settings)
        else:
            settings.setdefault("retry", Retry(NoBackoff(), 0))
            sync_client = redis.Redis.from_url(url, **settings)

            def make_async() -> Any:
                async_settings = dict(settings, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))
                return redis.asyncio.Redis.from_url(url, **async_settings)

        backend = cls(sync_client, on_unavailable=on_unavailable, local_share=local_share, time_source=time_source)
        backend._async_factory = make_async
        return backend

    # -- clients ------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The synchronous client (``None`` if this backend wraps an asyncio client)."""
        return self._sync_client

    def _async(self) -> Any:
        if self._async_client is None and self._async_factory is not None:
            with self._lock:
                if self._async_client is None:
                    self._async_client = self._async_factory()
        return self._async_client

    def close(self) -> None:
        """Close the synchronous client's connections."""
        if self._sync_client is not None:
            self._sync_client.close()

    async def aclose(self) -> None:
        """Close the asyncio client's connections (and the synchronous ones)."""
        if self._async_client is not None:
            await self._async_client.aclose()
        self.close()

    # -- running scripts ----------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        with self._lock:
            self._failures += 1
        return BackendUnavailable(f"the Redis store could not be reached: {exc!r}")

    def run(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        client = self._sync_client
        if client is None:
            raise TypeError("this RedisBackend wraps an asyncio client: use the _async methods")
        try:
            return script(client, keys, args)
        except UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc

    async def run_async(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        client = self._async()
        try:
            if client is None:
                # A synchronous client only: keep the event loop free while it blocks.
                return await asyncio.to_thread(script, self._sync_client, keys, args)
            return await script.call_async(client, keys, args)
        except UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc

    def _count(self, policy: OnUnavailable) -> None:
        with self._lock:
            if policy == "allow":
                self._failed_open += 1
            else:
                self._fell_back += 1

    def stats(self) -> BackendStats:
        """How often the store could not be reached, and what was done instead."""
        with self._lock:
            return BackendStats(self._failures, self._failed_open, self._fell_back)

    # -- binding limiters ---------------------------------------------------------

    def _now_source(self, clock: Clock | None) -> Callable[[], str]:
        if clock is not None:
            # An injected clock is the time, for the store as for the sleeps (tests).
            now = clock.now
            return lambda: _num(now())
        if self.time_source == "client":
            return lambda: _num(time.time())
        return lambda: ""

    def bind(self, name: str | None, alg: Algorithm[Any], clock: Clock | None) -> RedisHandle:
        assert name is not None  # the front requires a name for a shared backend
        local = None
        if self.on_unavailable == "local":
            # The fallback keeps the algorithm but only this process's share of the rate.
            local = self._local.bind(None, alg.slowed(self.local_share), clock)
        return RedisHandle(self, alg, key_for(name, alg.kind), self._now_source(clock), local)

    def bind_group(self, name: str | None, algs: Sequence[Algorithm[Any]], clock: Clock | None) -> RedisGroupHandle:
        assert name is not None
        keys = [key_for(name, alg.kind, i) for i, alg in enumerate(algs)]
        local = None
        if self.on_unavailable == "local":
            local = self._local.bind_group(None, [alg.slowed(self.local_share) for alg in algs], clock)
        return RedisGroupHandle(self, algs, keys, self._now_source(clock), local)

    def __repr__(self) -> str:
        client = self._sync_client or self._async_client
        pool = getattr(client, "connection_pool", None)
        where = getattr(pool, "connection_kwargs", {}) if pool is not None else {}
        target = f"{where.get('host', '?')}:{where.get('port', '?')}" if where else type(client).__name__
        return f"RedisBackend({target}, on_unavailable={self.on_unavailable!r})"


def _reply(reply: Sequence[bytes | str]) -> tuple[float, float]:
    return float(reply[0]), float(reply[1])


def _at(at: float | None) -> str:
    return "" if at is None or math.isnan(at) else _num(at)


def _max_wait(max_wait: float) -> str:
    return "" if max_wait == math.inf else _num(max_wait)


class _ScriptHandle(Generic[T]):
    """A limiter (or a composite's limits) bound to its keys: each call, one script call.

    Subclasses say only how a request becomes the script's arguments.
    """

    __slots__ = ("_backend", "_keys", "_local", "_now", "_script", "tally")

    suspends = True

    def __init__(
        self,
        backend: RedisBackend,
        script: Script,
        keys: Sequence[str],
        now: Callable[[], str],
        local: Handle[T] | None,
    ) -> None:
        self.tally: Tally | None = None
        self._backend = backend
        self._script = script
        self._keys = tuple(keys)
        self._now = now
        self._local = local

    def _args(self, op: str, tokens: T, extra: str) -> list[str]:
        raise NotImplementedError

    def _fallback(self, tokens: T, max_wait: float, exc: BackendUnavailable) -> tuple[float, float]:
        policy = self._backend.on_unavailable
        if policy == "raise":
            raise exc
        self._backend._count(policy)
        if self._local is None:
            logger.warning("Redis unreachable; granting %r without it (fail open): %s", self._keys[0], exc)
            return 0.0, math.nan
        logger.warning("Redis unreachable; deciding %r locally: %s", self._keys[0], exc)
        return self._local.reserve(tokens, max_wait)

    def _count(self, tokens: T, decision: tuple[float, float]) -> tuple[float, float]:
        tally = self.tally
        if tally is not None:
            with tally.lock:
                tally.record(weight(tokens), decision[0])
        return decision

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        args = self._args("reserve", tokens, _max_wait(max_wait))
        try:
            decision = _reply(self._backend.run(self._script, self._keys, args))
        except BackendUnavailable as exc:
            decision = self._fallback(tokens, max_wait, exc)
        return self._count(tokens, decision)

    async def reserve_async(self, tokens: T, max_wait: float) -> tuple[float, float]:
        args = self._args("reserve", tokens, _max_wait(max_wait))
        try:
            decision = _reply(await self._backend.run_async(self._script, self._keys, args))
        except BackendUnavailable as exc:
            decision = self._fallback(tokens, max_wait, exc)
        return self._count(tokens, decision)

    def _unrecorded(self, what: str, exc: BackendUnavailable) -> Handle[T] | None:
        # A refund or a restriction that cannot reach the store: under "raise" that is
        # an error like any other; otherwise it goes to the local fallback, if any,
        # and is otherwise lost, which is said in the log.
        if self._backend.on_unavailable == "raise":
            raise exc
        if self._local is None:
            logger.warning("Redis unreachable; the %s on %r is lost: %s", what, self._keys[0], exc)
        return self._local

    def refund(self, tokens: T, at: float | None) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("refund", tokens, _at(at)))
        except BackendUnavailable as exc:
            if (local := self._unrecorded("refund", exc)) is not None:
                local.refund(tokens, None)

    async def refund_async(self, tokens: T, at: float | None) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._args("refund", tokens, _at(at)))
        except BackendUnavailable as exc:
            if (local := self._unrecorded("refund", exc)) is not None:
                local.refund(tokens, None)

    def restrict(self, remaining: T, seconds: float) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("restrict", remaining, _num(seconds)))
        except BackendUnavailable as exc:
            if (local := self._unrecorded("restriction", exc)) is not None:
                local.restrict(remaining, seconds)

    async def restrict_async(self, remaining: T, seconds: float) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._args("restrict", remaining, _num(seconds)))
        except BackendUnavailable as exc:
            if (local := self._unrecorded("restriction", exc)) is not None:
                local.restrict(remaining, seconds)


class RedisHandle(_ScriptHandle[float]):
    """One limiter: ``KEYS = [base]``, ``ARGV = [op, now, tokens, extra, *params]``."""

    __slots__ = ("_params",)

    def __init__(
        self, backend: RedisBackend, alg: Algorithm[Any], key: str, now: Callable[[], str], local: Handle[float] | None
    ) -> None:
        super().__init__(backend, single_script(alg.kind), [key], now, local)
        self._params = tuple(_num(p) for p in alg.params())

    def _args(self, op: str, tokens: float, extra: str) -> list[str]:
        return [op, self._now(), _num(tokens), extra, *self._params]

    def peek(self) -> tuple[float, float]:
        """``(remaining, reset_after)`` as the store sees it now."""
        reply = self._backend.run(self._script, self._keys, self._args("peek", 1, ""))
        return float(reply[0]), float(reply[1])


class RedisGroupHandle(_ScriptHandle[Sequence[float]]):
    """A composite: ``ARGV = [op, now, extra]`` then ``kind, tokens, *params`` per member."""

    __slots__ = ("_members",)

    def __init__(
        self,
        backend: RedisBackend,
        algs: Sequence[Algorithm[Any]],
        keys: Sequence[str],
        now: Callable[[], str],
        local: Handle[Sequence[float]] | None,
    ) -> None:
        super().__init__(backend, group_script(), keys, now, local)
        self._members = tuple((alg.kind, tuple(_num(p) for p in alg.params())) for alg in algs)

    def _args(self, op: str, tokens: Sequence[float], extra: str) -> list[str]:
        args = [op, self._now(), extra]
        for (kind, params), n in zip(self._members, tokens, strict=True):
            args += [kind, _num(n), *params]
        return args
