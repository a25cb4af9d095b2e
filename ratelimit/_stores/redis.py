"""Shared state in Redis (or Valkey, or a Redis Cluster): one budget for every worker.

Every decision is one script call: the script reads the state, decides, records the
reservation and returns the wait, atomically, with the server's clock. So each
``acquire`` is exactly one round trip, however many workers contend.

Keys: ``ratelimit:{<name>}:<algorithm>`` (a composite's members:
``ratelimit:{<name>}:<i>:<algorithm>``; the lanes of a budget with priorities:
``ratelimit:{<name>}:hi:<algorithm>`` and ``...:lo:<algorithm>``). The braces are a hash tag: all of one
limiter's keys live in one Cluster slot, which multi-key scripts need. Inside the tag
only ``{``, ``}`` and ``%`` are escaped (``%7B``, ``%7D``, ``%25``), so an operator
finds a limiter's keys by its name. Every key expires once idle. A limiter on an
injected test clock keeps its state under ``ratelimit:{<name>}:injected:...``: its
times are not the server's, and must never meet a real budget's.

Concurrency: one process may have thousands of callers on one backend. At most
``pool_size`` script calls are in flight at once (per event loop for asyncio); the
rest wait their turn, which is not a failure. When a call finds the store unavailable,
the callers that were waiting behind it fail at once instead of each waiting for its
own timeout.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from .. import _validate
from .._algorithms.algorithm import Algorithm
from .._algorithms.lanes import HIGH, LANES, LOW, Lanes, LaneTime, LastLane, charge_parts
from .._clock import Clock, SystemClock, checked_clock
from .._errors import BackendUnavailable
from .config import Inspection, Override, checked_override, read_override, reset_override, write_override
from .config import inspect as inspect_name
from .fallback_share import (
    AutoShare,
    Fallback,
    LocalShare,
    Rebuilt,
    checked_local_share,
    group_share,
    inner_handle,
    lanes_shares,
    single_share,
    throttle_fallback,
)
from .keys import code_key, config_key, key_for
from .lease_returns import LeaseReturns
from .live import LIVE_KEY, UNCOUNTED_SHARE, LiveCount
from .memory import MemoryBackend
from .promises import LOCAL, STORE, Promises
from .redis_calls import DEFAULT_POOL_SIZE, BackendStats, OnUnavailable, RedisCalls
from .redis_clients import url_clients
from .redis_errors import STORE_ERRORS, is_unavailable
from .redis_replies import at_arg, charged_of, decision_of, grant_time, num, wait_arg
from .rounds import Round, RoundReply, Rounds
from .scripts import Script, group_script, lanes_script, live_script, single_script
from .store import Pacing
from .tally import Tally, weight

__all__ = ["BackendStats", "RedisBackend", "RedisLaneHandle", "key_for"]

T = TypeVar("T")


def _injected(clock: Clock | None) -> bool:
    """Whether ``clock`` is a test clock, whose time the store must use instead of its own."""
    return clock is not None and not isinstance(clock, SystemClock)


def _test_time(clock: object) -> float | None:
    """The time of ``clock`` when it is a test clock (a change made to limiters on it
    is made at their time), ``None`` for real time (the server's)."""
    checked = checked_clock(clock)
    return None if checked is None or not _injected(checked) else checked.now()


class RedisBackend(RedisCalls):
    """Limiter state in Redis, shared by every process that uses the same keys.

    Args:
        client: a ``redis.Redis``, ``redis.asyncio.Redis`` or ``redis.cluster.RedisCluster``
            (Valkey speaks the same). A synchronous client also serves the ``_async``
            methods, from a worker thread; an asyncio client serves only them, on one
            event loop (use :meth:`from_url` to serve several).
        on_unavailable: what an acquire does when the store cannot be reached:
            ``"raise"`` (default) raises :class:`BackendUnavailable`; ``"allow"``
            grants and logs a warning (fail open); ``"local"`` decides with an
            in-process limiter of the same algorithm at ``local_share`` of its rate
            and burst (give each process its share of the budget).
        local_share: the fraction of the configured limits each process keeps for
            itself when falling back locally (0 < share <= 1); or ``"auto"`` (the
            safe mode): ``1 / N``, N the live processes last counted while Redis
            answered (see ``live.py``; :data:`~.live.UNCOUNTED_SHARE` before the first
            count). ``"auto"`` needs a synchronous client, which beats from a thread.
        time_source: ``"server"`` (default) reads the server's clock inside the
            script; ``"client"`` sends this machine's ``time.time()`` instead, for
            managed services that refuse ``TIME`` in scripts (keep the workers'
            clocks in sync, e.g. with NTP).
        pool_size: the most script calls this backend has in flight at once (per
            event loop for asyncio); more callers wait their turn. Capped by the
            client's own pool size.
        coalesce: whether the concurrent acquires of one limiter in this process
            share one script call per round (default ``True``; see ``rounds.py``):
            each still gets its own exact wait, and a limiter needs one connection
            per event loop (and one for its threads), however many callers it has.

    The client's own timeouts and retries apply; :meth:`from_url` sets ones that
    suit a limiter (see ``DEFAULT_SOCKET_TIMEOUT``). Do not give it a client that
    retries commands after a timeout: a script call is not idempotent.

    Use it as a context manager (``with`` or ``async with``), or call :meth:`close` /
    :meth:`aclose`, to release its connections.
    """

    shared = True

    def __init__(
        self,
        client: Any,
        *,
        on_unavailable: OnUnavailable = "raise",
        local_share: LocalShare = 1.0,
        time_source: Literal["server", "client"] = "server",
        pool_size: int = DEFAULT_POOL_SIZE,
        coalesce: bool = True,
    ) -> None:
        if not hasattr(client, "evalsha"):
            raise TypeError(
                f"client must be a redis-py client (Redis, RedisCluster, redis.asyncio.Redis), got {client!r}"
            )
        if on_unavailable not in ("raise", "allow", "local"):
            raise ValueError(f"on_unavailable must be 'raise', 'allow' or 'local', got {on_unavailable!r}")
        if time_source not in ("server", "client"):
            raise ValueError(f"time_source must be 'server' or 'client', got {time_source!r}")
        share = checked_local_share(local_share)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise TypeError(f"pool_size must be an int, got {type(pool_size).__name__} {pool_size!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size!r}")
        if not isinstance(coalesce, bool):
            raise TypeError(f"coalesce must be a bool, got {coalesce!r}")
        self.coalesce = coalesce
        # Handles spending a lease, whose rests go back at close, and as each lease
        # ends (from a thread that needs the synchronous client).
        self._leasing: weakref.WeakSet[RedisHandle] = weakref.WeakSet()
        super().__init__(client, on_unavailable=on_unavailable, pool_size=pool_size)
        if share == "auto" and self._sync_client is None:
            raise TypeError(
                "local_share='auto' needs a synchronous client, which counts the live processes from a thread: "
                "make the backend with RedisBackend.from_url(...) or RedisBackend(redis.Redis(...))"
            )
        self._returns = None if self._sync_client is None else LeaseReturns()
        #: As configured: a fraction, or ``"auto"`` (see :meth:`fallback_share`).
        self.local_share: LocalShare = share
        self.time_source = time_source
        self._local = MemoryBackend()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        cluster: bool = False,
        on_unavailable: OnUnavailable = "raise",
        local_share: LocalShare = 1.0,
        time_source: Literal["server", "client"] = "server",
        pool_size: int = DEFAULT_POOL_SIZE,
        coalesce: bool = True,
        **options: Any,
    ) -> RedisBackend:
        """A backend on ``url`` (``redis://``, ``rediss://``, ``unix://``, or
        ``redis+sentinel://`` for a master found through Redis Sentinel).

        Makes a synchronous client now and an asyncio one for each event loop that
        uses it (closed when that loop shuts down), all with limiter-friendly
        defaults: ``socket_timeout`` and ``socket_connect_timeout`` of 0.5 s, no
        retries, and a pool of ``pool_size`` connections. ``options`` go to the
        redis-py client and override those defaults. ``cluster=True`` uses a Redis
        Cluster client (``url`` names any one node).

        ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]``
        asks the sentinels at ``host:port`` (26379 by default) where the master of
        ``service`` is, and again after each failover; ``user`` and ``password`` are
        the master's. Options in the query: ``socket_timeout``,
        ``socket_connect_timeout``, ``sentinel_username``, ``sentinel_password``
        (see :mod:`ratelimit._stores.sentinel`). A malformed URL raises ``ValueError``
        naming the part, with its passwords shown as ``***``.
        """
        clients = url_clients(url, cluster=cluster, pool_size=pool_size, options=options)
        backend = cls(
            clients.sync,
            on_unavailable=on_unavailable,
            local_share=local_share,
            time_source=time_source,
            pool_size=pool_size,
            coalesce=coalesce,
        )
        backend._async_factory = clients.make_async
        backend._deadline = clients.deadline
        return backend

    # -- clients ------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The synchronous client (``None`` if this backend wraps an asyncio client)."""
        return self._sync_client

    def close(self) -> None:
        """Close the synchronous client's connections, and forget the asyncio clients
        of event loops that have closed. With ``local_share="auto"``, stop beating and
        leave the live processes first."""
        live = self._live
        if live is not None:
            live.stop()
        self._stop_leasing()
        if self._returns is not None:
            self._returns.stop()
        if self._sync_client is not None:
            for handle in list(self._leasing):
                handle.give_back_lease()
            self._sync_client.close()
        with self._lock:
            self._forget_closed_loops()

    async def aclose(self) -> None:
        """Close the running event loop's asyncio client (and the synchronous one).

        Clients of other event loops close when their loop shuts down.
        """
        self._stop_leasing()
        if self._sync_client is None:
            for handle in list(self._leasing):
                await handle.give_back_lease_async()
        with self._lock:
            state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None and state.client is not None:
            if state.closer is not None:
                await state.closer.aclose()  # closes the client it guards
            else:
                await state.client.aclose()
        self.close()

    def _stop_leasing(self) -> None:
        # A lease taken after close would never go back: the thread that returns them
        # has stopped, and the owner may never call again.
        for handle in list(self._leasing):
            if handle.rounds is not None:
                handle.rounds.stop_leasing()

    def __enter__(self) -> RedisBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> RedisBackend:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- binding limiters ---------------------------------------------------------

    def now_source(self, clock: Clock | None) -> Callable[[], str]:
        """What a script is told the time is: ``""`` (the server reads its own clock),
        this machine's epoch time (``time_source="client"``), or an injected test clock's."""
        if clock is not None and _injected(clock):
            now = clock.now
            return lambda: num(now())
        if self.time_source == "client":
            return lambda: num(time.time())
        return lambda: ""

    # -- run-time changes and inspection (config.py) -------------------------------

    def _admin_client(self) -> Any:
        if self._sync_client is None:
            raise TypeError(
                "this RedisBackend wraps an asyncio client: changing or inspecting a limit needs a sync one "
                "(RedisBackend.from_url(url) makes both)"
            )
        return self._sync_client

    def set_limit(
        self,
        name: str,
        *,
        rate: float | None = None,
        burst: float | None = None,
        ttl: float | timedelta | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Change limiter ``name``'s limit at run time, in every process.

        Every process follows it from its next decision: the limiter's script reads
        the change atomically with the decision. ``rate`` is in tokens per second
        (a token bucket's refill, a leaky bucket's leak; a window's limit becomes
        ``rate`` times its length), ``burst`` a bucket's capacity (windows have
        none); ``None`` keeps what the code says. ``ttl``: seconds (or a
        ``timedelta``) after which the change ends by itself. A new change replaces
        the last one whole. Bad values raise ``ValueError`` and change nothing.

        Only single limiters follow it. A name whose keys say it is a ``Composite``'s,
        an ``adaptive=`` limiter, a limiter with ``low_share`` or a
        ``ConcurrencyLimit`` raises ``UnchangeableLimit`` (a ``ValueError``) saying
        so, and nothing is stored. ``ratelimit set`` is the same from a shell.

        ``clock``: the limiter's, when it keeps time on a test clock (a
        ``ManualClock``): the change is then made at that clock's time, to the
        state kept on it, and a ``ttl`` runs on it. ``None``: real time (the
        server's), for every limiter on real time.
        """
        change = checked_override(rate, burst, ttl)
        _validate.name(name, self, shared=True)
        now = _test_time(clock)
        self._admin(lambda client: write_override(client, name, change, now))

    def reset_limit(self, name: str, *, clock: Clock | None = None) -> bool:
        """Return limiter ``name`` to what its code says, in every process from its
        next decision; ``True`` if a change was in force. ``clock`` as for
        :meth:`set_limit`."""
        _validate.name(name, self, shared=True)
        now = _test_time(clock)
        return bool(self._admin(lambda client: reset_override(client, name, now)))

    def limit_override(self, name: str, *, clock: Clock | None = None) -> Override | None:
        """The change in force for limiter ``name`` (``set_limit``), or ``None``; its
        ``ttl`` is what is left of it (on ``clock``, as for :meth:`set_limit`)."""
        _validate.name(name, self, shared=True)
        now = _test_time(clock)
        result: Override | None = self._admin(lambda client: read_override(client, name, now))
        return result

    def inspect(self, name: str) -> Inspection:
        """What this store holds of limiter ``name``: its configuration (as the code
        set it and as changed), what it could grant now, what is promised ahead, a
        pause from feedback, a breaker's state. ``ratelimit inspect`` prints it."""
        _validate.name(name, self, shared=True)
        result: Inspection = self._admin(lambda client: inspect_name(client, name))
        return result

    def _admin(self, call: Callable[[Any], Any]) -> Any:
        client = self._admin_client()
        try:
            return call(client)
        except STORE_ERRORS as exc:
            if is_unavailable(exc):
                raise BackendUnavailable(f"the Redis store is unavailable: {exc!r}") from exc
            raise

    def key(
        self, name: str, kind: str, member: int | None = None, *, clock: Clock | None = None, lane: str | None = None
    ) -> str:
        """The key of limiter ``name``'s state of algorithm ``kind`` on this store."""
        return key_for(name, kind, member, injected=_injected(clock), lane=lane)

    def fallback_share(self) -> float:
        """The share of each limit a local fallback takes if Redis fails now:
        ``local_share``, or with ``"auto"`` one over the live processes last counted
        (:data:`~.live.UNCOUNTED_SHARE` if none were)."""
        share = self.local_share
        if share != "auto":
            return share
        live = self._live
        return live.share() if live is not None else UNCOUNTED_SHARE

    @property
    def live_processes(self) -> int | None:
        """With ``local_share="auto"``: the live processes this process last counted,
        itself included (``None`` before its first count, or without ``"auto"``)."""
        live = self._live
        return None if live is None else live.count

    def _counting(self) -> LiveCount:
        """The heartbeat of ``"auto"``, beating from the first limiter bound."""
        with self._lock:
            live = self._live
            if live is None:
                script, keys, now = live_script(), (LIVE_KEY,), self.now_source(None)
                live = self._live = LiveCount(lambda args: self.run(script, keys, args), now)
        live.start()
        return live

    def _fallback_of(
        self, build: Callable[[float], Sequence[Fallback[Any]]], width: int = 1
    ) -> Sequence[Fallback[Any]] | None:
        """The ``width`` local fallbacks of one bind (one, or one per lane), as
        ``build`` makes them at a share; ``None`` without ``on_unavailable="local"``.

        A fixed share builds them now. ``"auto"`` builds them at the first failure,
        at the share of the live processes counted by then, and again whenever that
        count has changed (see :class:`Rebuilt`).
        """
        if self.on_unavailable != "local":
            return None
        share = self.local_share
        if share != "auto":
            return build(share)
        rebuilt = Rebuilt(self._counting(), build)
        return [AutoShare(rebuilt, i) for i in range(width)]

    def bind(
        self,
        name: str | None,
        alg: Algorithm[Any],
        clock: Clock | None,
        *,
        lease: float | None = None,
        shadow: bool = False,
    ) -> RedisHandle:
        """One limiter; ``lease``: the seconds of a lease it spends here (see
        ``rounds.py``), which its algorithm's guard must already include; ``shadow``:
        said in what the code says (``config.py``), for ``inspect`` and ``top``."""
        assert name is not None  # the front requires a name for a shared backend
        local = self._fallback_of(lambda share: [single_share(self._local, alg, clock, share)])
        handle = RedisHandle(
            self,
            alg,
            self.key(name, alg.kind, clock=clock),
            self.now_source(clock),
            None if local is None else local[0],
            name,
            shadow,
        )
        if local is not None:
            handle.promises = Promises((clock or SystemClock()).now)
        if lease is not None or self.coalesce:
            rounds = handle.rounds = Rounds(
                handle.decide,
                handle.decide_async,
                handle.refund,
                handle.refund_async,
                (clock or SystemClock()).now,
                lease,
                alg.most,
            )
            if lease is not None:
                self._leasing.add(handle)
                if self._returns is not None and not _injected(clock):
                    returns, give_back = self._returns, handle.give_back_ended
                    rounds.on_lease = lambda seconds: returns.watch(seconds, give_back)
        return handle

    def bind_group(self, name: str | None, algs: Sequence[Algorithm[Any]], clock: Clock | None) -> RedisGroupHandle:
        assert name is not None
        keys = [self.key(name, alg.kind, i, clock=clock) for i, alg in enumerate(algs)]
        local = self._fallback_of(lambda share: [group_share(self._local, algs, clock, share)])
        handle = RedisGroupHandle(self, algs, keys, self.now_source(clock), None if local is None else local[0])
        if local is not None:
            handle.promises = Promises((clock or SystemClock()).now)
        if self.coalesce:
            handle.rounds = Rounds(
                handle.decide,
                handle.decide_async,
                handle.refund,
                handle.refund_async,
                (clock or SystemClock()).now,
                None,
                math.inf,
            )
        return handle

    def bind_lanes(
        self, name: str | None, lanes: Lanes, clock: Clock | None, keep: float | None
    ) -> tuple[RedisLaneHandle, RedisLaneHandle]:
        """Both lanes of a budget with priorities, decided by one script call: the
        handle that acquires at high priority, and the one at low."""
        assert name is not None
        keys = [self.key(name, lanes.high.kind, clock=clock, lane=lane) for lane in LANES]
        local = self._fallback_of(lambda share: lanes_shares(self._local, lanes, clock, keep, share), width=2)
        high, low = (None, None) if local is None else (local[HIGH], local[LOW])
        now = self.now_source(clock)
        handles = (
            RedisLaneHandle(self, lanes, keys, now, high, HIGH, keep),
            RedisLaneHandle(self, lanes, keys, now, low, LOW, keep),
        )
        if local is not None:
            for handle in handles:
                handle.promises = Promises((clock or SystemClock()).now)
        return handles

    def __repr__(self) -> str:
        client = self._sync_client or self._async_client
        pool = getattr(client, "connection_pool", None)
        where = getattr(pool, "connection_kwargs", {}) if pool is not None else {}
        target = f"{where.get('host', '?')}:{where.get('port', '?')}" if where else type(client).__name__
        service = getattr(pool, "service_name", None)
        if isinstance(service, str):  # a master found through Sentinel: no fixed address
            target = f"sentinel service {service}"
        return f"RedisBackend({target}, on_unavailable={self.on_unavailable!r})"


class _ScriptHandle(ABC, Generic[T]):
    """A limiter (or a composite's limits) bound to its keys: each call, one script call.

    Subclasses say only how a request becomes the script's arguments.
    """

    __slots__ = ("_backend", "_keys", "_local", "_now", "_script", "promises", "rounds", "tally")

    suspends = True

    def __init__(
        self,
        backend: RedisBackend,
        script: Script,
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[T] | None,
    ) -> None:
        self.tally: Tally | None = None
        self._backend = backend
        self._script = script
        self._keys = tuple(keys)
        self._now = now
        self._local = local
        #: Coalescing and leases (``rounds.py``); ``None``: one call per reserve.
        self.rounds: Rounds | None = None
        #: With a local fallback: the grants still to go, carried at a switch
        #: (``promises.py``).
        self.promises: Promises | None = None

    @abstractmethod
    def _args(self, op: str, tokens: T, extra: str) -> list[str]:
        """The script's arguments for ``op`` on ``tokens``."""

    # -- rounds (see rounds.py) -------------------------------------------------------

    def _batch_args(self, rnd: Round) -> list[str]:
        """The script's arguments for a round of several requests (or a lease)."""
        raise NotImplementedError(f"{type(self).__name__} is not decided in rounds")

    def _round_args(self, rnd: Round) -> list[str]:
        if rnd.give_back is None and not rnd.want and len(rnd.asks) == 1:
            ask = rnd.asks[0]
            request: T = ask.request  # type: ignore[assignment]
            return self._args("reserve", request, wait_arg(ask.max_wait))
        return self._batch_args(rnd)

    @staticmethod
    def _round_reply(rnd: Round, args: Sequence[str], reply: Sequence[bytes | str]) -> RoundReply:
        if args[0] == "reserve":
            return RoundReply([decision_of(reply)], 0.0, math.nan)
        n = len(rnd.asks)
        decisions = [(float(reply[3 * i]), grant_time(reply[3 * i + 1], reply[3 * i + 2])) for i in range(n)]
        return RoundReply(decisions, float(reply[3 * n]), float(reply[3 * n + 1]))

    def decide(self, rnd: Round) -> RoundReply:
        """Make one round's call (``Rounds``' I/O, for threads)."""
        self._to_store()  # in the round: its callers wait behind a pause it sets
        args = self._round_args(rnd)
        return self._round_reply(rnd, args, self._backend.run(self._script, self._keys, args))

    async def decide_async(self, rnd: Round) -> RoundReply:
        """Make one round's call on the running event loop."""
        await self._to_store_async()
        args = self._round_args(rnd)
        return self._round_reply(rnd, args, await self._backend.run_async(self._script, self._keys, args))

    def _decision(self, reply: Sequence[bytes | str]) -> tuple[float, float]:
        """A reservation's reply as ``(signed_wait, at)``."""
        return decision_of(reply)

    def _refund_args(self, tokens: T, at: float | None) -> list[str]:
        """The script's arguments to give back ``tokens`` of the grant at ``at``."""
        return self._args("refund", tokens, at_arg(at))

    def _nothing(self) -> T:
        """No tokens: what is left to grant during a pause."""
        none: T = 0.0  # type: ignore[assignment]
        return none

    def _pause_store(self) -> tuple[float, list[str]] | None:
        """Before a decision of the store: if the local fallback decided last, the
        seconds until its promises are due and the restriction that leaves them to
        it (see ``promises.py``)."""
        promises = self.promises
        if promises is None or promises.side == STORE:
            return None
        ahead = promises.enter(STORE)
        if not ahead > 0:
            return None
        if self.rounds is not None:
            self.rounds.void()  # a lease is not to be spent through the pause
        return ahead, self._args("restrict", self._nothing(), num(ahead))

    def _to_store(self) -> None:
        pause = self._pause_store()
        if pause is not None:
            try:
                self._backend.run(self._script, self._keys, pause[1])
            except BaseException:
                assert self.promises is not None
                self.promises.undo(STORE, pause[0])
                raise

    async def _to_store_async(self) -> None:
        pause = self._pause_store()
        if pause is not None:
            try:
                await self._backend.run_async(self._script, self._keys, pause[1])
            except BaseException:
                assert self.promises is not None
                self.promises.undo(STORE, pause[0])
                raise

    def _decided(self, tokens: T, decision: tuple[float, float]) -> tuple[float, float]:
        """A decision of the store, its reach kept (see ``promises.py``), and counted."""
        if self.promises is not None:
            self.promises.made(STORE, decision[0])
        return self._count(tokens, decision)

    def _locally(self, local: Fallback[T], tokens: T, max_wait: float) -> tuple[float, float]:
        promises = self.promises
        if promises is not None:
            ahead = promises.enter(LOCAL)
            if ahead > 0:
                local.restrict(self._nothing(), ahead)  # the store's queue goes first
        decision = local.reserve(tokens, max_wait)
        if promises is not None:
            promises.made(LOCAL, decision[0])
        return decision

    def _fallback(self, tokens: T, max_wait: float, exc: BackendUnavailable) -> tuple[float, float]:
        local = self._local
        return self._backend.without_store(
            exc,
            self._keys[0],
            local=None if local is None else lambda: self._locally(local, tokens, max_wait),
            otherwise=lambda: (0.0, math.nan),
            says=(
                "Redis unavailable; deciding %r locally: %s",
                "Redis unavailable; granting %r without it (fail open): %s",
            ),
            decision=True,
        )

    def _count(self, tokens: T, decision: tuple[float, float]) -> tuple[float, float]:
        tally = self.tally
        if tally is not None:
            with tally.lock:
                tally.record(weight(tokens), decision[0])
        return decision

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        rounds = self.rounds
        try:
            if rounds is not None:
                decision = rounds.reserve(weight(tokens), max_wait, tokens)
            else:
                self._to_store()
                args = self._args("reserve", tokens, wait_arg(max_wait))
                decision = self._decision(self._backend.run(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._count(tokens, self._fallback(tokens, max_wait, exc))
        return self._decided(tokens, decision)

    def reserve_here(self, tokens: T, max_wait: float) -> tuple[float, float] | None:
        return None

    async def reserve_async(self, tokens: T, max_wait: float) -> tuple[float, float]:
        rounds = self.rounds
        if rounds is not None and self._backend.threaded:
            # A synchronous client serves this loop from threads: their rounds.
            return await asyncio.to_thread(self.reserve, tokens, max_wait)
        try:
            if rounds is not None:
                decision = await rounds.reserve_async(weight(tokens), max_wait, tokens)
            else:
                await self._to_store_async()
                args = self._args("reserve", tokens, wait_arg(max_wait))
                decision = self._decision(await self._backend.run_async(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._count(tokens, self._fallback(tokens, max_wait, exc))
        return self._decided(tokens, decision)

    def _unrecorded(self, what: str, exc: BackendUnavailable, local: Callable[[Fallback[T]], object]) -> None:
        # A refund or a restriction that cannot reach the store: on the local fallback
        # if there is one, and otherwise lost, which is said in the log.
        fallback = self._local
        self._backend.without_store(
            exc,
            self._keys[0],
            local=None if fallback is None else lambda: local(fallback),
            otherwise=lambda: None,
            says=("", f"Redis unavailable; the {what} on %r is lost: %s"),
        )

    def refund(self, tokens: T, at: float | None) -> None:
        try:
            self._backend.run(self._script, self._keys, self._refund_args(tokens, at))
        except BackendUnavailable as exc:
            self._unrecorded("refund", exc, lambda local: local.refund(tokens, None))

    async def refund_async(self, tokens: T, at: float | None) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._refund_args(tokens, at))
        except BackendUnavailable as exc:
            self._unrecorded("refund", exc, lambda local: local.refund(tokens, None))

    def charge(self, tokens: T) -> float | None:
        # Like a refund, a charge lost with the store is said in the log: a call that
        # was made and cost more than reserved goes uncounted by the shared budget.
        try:
            return charged_of(self._backend.run(self._script, self._keys, self._args("charge", tokens, "")))
        except BackendUnavailable as exc:
            self._unrecorded("charge", exc, lambda local: local.charge(tokens))
            return None

    async def charge_async(self, tokens: T) -> float | None:
        try:
            reply = await self._backend.run_async(self._script, self._keys, self._args("charge", tokens, ""))
        except BackendUnavailable as exc:
            self._unrecorded("charge", exc, lambda local: local.charge(tokens))
            return None
        return charged_of(reply)

    def restrict(self, remaining: T, seconds: float) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("restrict", remaining, num(seconds)))
        except BackendUnavailable as exc:
            self._unrecorded("restriction", exc, lambda local: local.restrict(remaining, seconds))

    async def restrict_async(self, remaining: T, seconds: float) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._args("restrict", remaining, num(seconds)))
        except BackendUnavailable as exc:
            self._unrecorded("restriction", exc, lambda local: local.restrict(remaining, seconds))


class RedisHandle(_ScriptHandle[float]):
    """One limiter: ``KEYS = [base, config, code]`` (see ``config.py``), ``ARGV = [op,
    now, tokens, extra, *params, slack, shadow]``.

    With ``rounds`` (coalescing, a lease: see ``rounds.py``) its reserves are decided
    in rounds, ``ARGV = ['batch', now, give_back, give_back_at, *params, slack, shadow, want, least,
    tokens, max_wait, ...]`` for more than one request or a lease.
    """

    __slots__ = ("__weakref__", "_params")

    def __init__(
        self,
        backend: RedisBackend,
        alg: Algorithm[Any],
        key: str,
        now: Callable[[], str],
        local: Fallback[float] | None,
        name: str | None = None,
        shadow: bool = False,
    ) -> None:
        # Without a name (tests driving the script), no change is read nor code written.
        keys = [key] if name is None else [key, config_key(name), code_key(name)]
        super().__init__(backend, single_script(alg.kind), keys, now, local)
        slack = num(getattr(alg, "slack", 0.0))
        self._params = (*(num(p) for p in alg.params()), slack, "1" if shadow else "0")

    def _args(self, op: str, tokens: float, extra: str) -> list[str]:
        return [op, self._now(), num(tokens), extra, *self._params]

    def _batch_args(self, rnd: Round) -> list[str]:
        back = ("", "") if rnd.give_back is None else (num(rnd.give_back[0]), at_arg(rnd.give_back[1]))
        args = ["batch", self._now(), *back, *self._params, num(rnd.want), num(rnd.least)]
        for ask in rnd.asks:
            args += [num(ask.tokens), wait_arg(ask.max_wait)]
        return args

    def reserve_here(self, tokens: float, max_wait: float) -> tuple[float, float] | None:
        rounds = self.rounds
        if rounds is None or rounds.lease is None:
            return None
        got = rounds.reserve_here(tokens, threads=self._backend.threaded)
        return None if got is None else self._count(tokens, got)

    def restrict(self, remaining: float, seconds: float) -> None:
        # The provider says how much more may go: what is left of a lease is not
        # the process's to spend any more.
        if self.rounds is not None:
            self.rounds.void()
        super().restrict(remaining, seconds)

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        if self.rounds is not None:
            self.rounds.void()
        await super().restrict_async(remaining, seconds)

    def give_back_ended(self) -> None:
        """Give back the rest of a lease that has ended (``lease_returns.py``)."""
        if self.rounds is not None:
            for tokens, at in self.rounds.take_ended():
                self.refund(tokens, at)

    def give_back_lease(self) -> None:
        """Give back what is left of this handle's leases (the backend closing)."""
        if self.rounds is not None:
            for tokens, at in self.rounds.take_voids():
                self.refund(tokens, at)

    async def give_back_lease_async(self) -> None:
        if self.rounds is not None:
            for tokens, at in self.rounds.take_voids():
                await self.refund_async(tokens, at)


class RedisGroupHandle(_ScriptHandle[Sequence[float]]):
    """A composite: ``ARGV = [op, now, extra]`` then ``kind, tokens, *params`` per member."""

    __slots__ = ("_members",)

    def __init__(
        self,
        backend: RedisBackend,
        algs: Sequence[Algorithm[Any]],
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[Sequence[float]] | None,
    ) -> None:
        super().__init__(backend, group_script(), keys, now, local)
        self._members = tuple((alg.kind, tuple(num(p) for p in alg.params())) for alg in algs)

    def _args(self, op: str, tokens: Sequence[float], extra: str) -> list[str]:
        args = [op, self._now(), extra]
        for (kind, params), n in zip(self._members, tokens, strict=True):
            args += [kind, num(n), *params]
        return args

    def _nothing(self) -> Sequence[float]:
        return [0.0] * len(self._members)

    def _batch_args(self, rnd: Round) -> list[str]:
        # The members with no tokens of their own, then each request: its max_wait
        # and one weight per member (see lua/_group.lua). A group takes no lease.
        args = self._args("batch", [0.0] * len(self._members), "")
        for ask in rnd.asks:
            request: Sequence[float] = ask.request  # type: ignore[assignment]
            args += [wait_arg(ask.max_wait), *(num(n) for n in request)]
        return args

    # -- a learned pace among the members (``adaptive=``, see _algorithms/adaptive.py) --

    def _throttle_args(self, decided: float | None, at: float | None) -> list[str]:
        known = "" if decided is None or at is None else f"{num(decided)} {num(at)}"
        return self._args("throttle", [0.0] * len(self._members), known)

    def throttle(self, decided: float | None, at: float | None) -> None:
        """A refusal of the request decided at store time ``decided`` to go at ``at``."""
        try:
            self._backend.run(self._script, self._keys, self._throttle_args(decided, at))
        except BackendUnavailable as exc:
            self._unrecorded("throttle", exc, lambda local: throttle_fallback(local, decided, at))

    async def throttle_async(self, decided: float | None, at: float | None) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._throttle_args(decided, at))
        except BackendUnavailable as exc:
            self._unrecorded("throttle", exc, lambda local: throttle_fallback(local, decided, at))

    def rate(self) -> float:
        """The learned pace's rate now; this process's own with the local fallback
        while the store is unavailable (otherwise ``BackendUnavailable``)."""
        try:
            reply = self._backend.run(self._script, self._keys, self._args("rate", [0.0] * len(self._members), ""))
        except BackendUnavailable:
            local = inner_handle(self._local) if self._local is not None else None
            if isinstance(local, Pacing):
                return local.rate()
            raise
        return float(reply[0])


class RedisLaneHandle(_ScriptHandle[float]):
    """One priority of a budget with two lanes: ``KEYS = [high, low]``, ``ARGV = [op,
    now, tokens, extra, lane, keep, low_share]`` then each lane's largest request and
    parameters (see ``lua/_lanes.lua``)."""

    __slots__ = ("_lane", "_lanes", "_last", "_tail")

    def __init__(
        self,
        backend: RedisBackend,
        lanes: Lanes,
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[float] | None,
        lane: int,
        keep: float | None,
    ) -> None:
        super().__init__(backend, lanes_script(lanes.high.kind), keys, now, local)
        self._lane = lane
        self._lanes = lanes
        self._last = LastLane(lane)
        self._tail = (
            "" if keep is None else num(keep),
            num(lanes.low_share),
            *(num(x) for alg in (lanes.high, lanes.low) for x in (alg.most, *alg.params())),
        )

    def _args(self, op: str, tokens: float, extra: str) -> list[str]:
        if op == "charge":
            # Both lanes' parts, split here once for both stores (see charge_parts).
            high, low = charge_parts(self._lanes, tokens)
            return [op, self._now(), num(high), num(low), LANES[self._lane], *self._tail]
        return [op, self._now(), num(tokens), extra, LANES[self._lane], *self._tail]

    def _decision(self, reply: Sequence[bytes | str]) -> tuple[float, float]:
        lane = LOW if reply[2] in (b"lo", "lo") else HIGH
        wait = float(reply[0])
        if wait >= 0:
            self._last.saw(lane)
        return wait, LaneTime(float(reply[1]), lane)

    def _refund_args(self, tokens: float, at: float | None) -> list[str]:
        # A reservation goes back to the lane it was taken from; a plain refund to the
        # lane of this caller's latest grant (see LastLane).
        lane = at.lane if isinstance(at, LaneTime) else self._last.lane()
        return ["refund", self._now(), num(tokens), at_arg(at), LANES[lane], *self._tail]
