"""Shared state in Redis (or Valkey, or a Redis Cluster): one budget for every worker.

Every decision is one script call: the script reads the state, decides, records the
reservation and returns the wait, atomically, with the server's clock. So each
``acquire`` is exactly one round trip, however many workers contend.

Keys: ``ratelimit:{<name>}:<algorithm>`` (see ``_stores/keys.py``): one hash tag per
limiter, so its keys share a Cluster slot. Every key expires once idle. A limiter on
an injected test clock keeps its state under ``ratelimit:{<name>}:injected:...``: its
times are not the server's, and must never meet a real budget's.

This module is the backend: what it binds, and what an operator changes and reads at
run time. It extends ``redis/calls.py``'s :class:`~.calls.RedisCalls` (calls in
flight, ``on_unavailable``); the other parts sit beside it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal

from ... import _validate
from ..._algorithms.algorithm import Algorithm
from ..._algorithms.breaker import Policy
from ..._algorithms.fair import Fair
from ..._algorithms.lanes import HIGH, LANES, LOW, Lanes
from ..._clock import Clock, SystemClock, checked_clock
from ..._redact import redact_url
from ..keys import Keyed, key_for
from ..memory.backend import MemoryBackend
from ..memory.breaker import MemoryStore
from ..memory.fallback import (
    AutoShare,
    Fallback,
    LocalShare,
    Rebuilt,
    checked_local_share,
    group_share,
    lanes_shares,
    single_share,
)
from ..records import FleetRow, Inspection, Override, checked_override
from ..store import Views
from .allotment_returns import AllotmentReturns
from .breaker import RedisStore
from .calls import DEFAULT_POOL_SIZE, BackendStats, OnUnavailable, RedisCalls
from .clients import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    REDIS_URL_ENV,
    client_secrets,
    retries,
    url_clients,
    url_from_env,
)
from .config import (
    eviction_risk,
    inspect_all,
    inspect_many,
    keys_of,
    member_override,
    read_override,
    reset_override,
    write_member,
    write_override,
)
from .errors import STORE_ERRORS, is_unavailable, misconfigured
from .fair import RedisFairHandle
from .fleet import fleet
from .handles import RedisGroupHandle, RedisHandle, RedisLaneHandle
from .key_survey import probe
from .live import LIVE_KEY, UNCOUNTED_SHARE, LiveCount
from .name_changes import EVERY as NAMES_READ_EVERY
from .name_changes import NameChanges
from .pending import PendingGrants
from .replies import num
from .rounds import Rounds
from .scripts import live_script
from .slots import RedisSlots

logger = logging.getLogger("ratelimit")

# Names importable from here for the package's public modules; each is defined in the
# module beside this one it is imported from.
__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SOCKET_TIMEOUT",
    "REDIS_URL_ENV",
    "BackendStats",
    "RedisBackend",
    "RedisGroupHandle",
    "RedisHandle",
    "RedisLaneHandle",
    "key_for",
]


def _injected(clock: Clock | None) -> bool:
    """Whether ``clock`` is a test clock, whose time the store must use instead of its own."""
    return clock is not None and not isinstance(clock, SystemClock)


def _test_time(clock: object) -> float | None:
    """The time of ``clock`` when it is a test clock (a change made to limiters on it
    is made at their time), ``None`` for real time (the server's)."""
    checked = checked_clock(clock)
    return None if checked is None or not _injected(checked) else checked.now()


def _member(member: object) -> int:
    """A composite member's index, or a ValueError naming it."""
    if not isinstance(member, int) or isinstance(member, bool) or member < 0:
        raise ValueError(f"member must be a composite member's index (an int >= 0), got {member!r}")
    return member


def _targets(backend: object, names: Sequence[str], key: str | None) -> list[str | Keyed]:
    """What ``inspect`` reads: each name (a name read back from a key may hold the
    surrogate escapes of bytes that are not UTF-8), or its budget for ``key``."""
    checked = [_validate.name(name, backend, shared=True, found=True) or "" for name in names]
    if key is None:
        return list(checked)
    return [Keyed(name, _validate.key(key)) for name in checked]


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
            answered (see ``redis/live.py``; :data:`~.live.UNCOUNTED_SHARE` before the first
            count). ``"auto"`` needs a synchronous client, which beats from a thread.
        time_source: ``"server"`` (default) reads the server's clock inside the
            script; ``"client"`` sends this machine's ``time.time()`` instead, for
            managed services that refuse ``TIME`` in scripts (keep the workers'
            clocks in sync, e.g. with NTP).
        pool_size: the most script calls this backend has in flight at once (per
            event loop for asyncio); more callers wait their turn. Capped by the
            client's own pool size.
        counters: whether each decision also counts itself for ``ratelimit top``
            (default ``True``): one ``HINCRBY`` on the server per decision. With
            ``False`` nothing is counted, and ``top`` shows nothing of the limiters
            of this backend.
        coalesce: whether the concurrent acquires of one limiter in this process
            share one script call per round (default ``True``; see ``redis/rounds.py``):
            each still gets its own exact wait, and a limiter needs one connection
            per event loop (and one for its threads), however many callers it has.

    The client's own timeouts and retries apply; :meth:`from_url` sets ones that
    suit a limiter (see ``DEFAULT_SOCKET_TIMEOUT``). Do not give it a client that
    retries commands after a timeout: a script call is not idempotent.

    Use it as a context manager (``with`` or ``async with``), or call :meth:`close` /
    :meth:`aclose`, to release its connections.

    Its script calls (:meth:`run`, :meth:`run_async`, :meth:`without_store`,
    :meth:`stats`) are those of :class:`~.calls.RedisCalls`.
    """

    shared = True
    #: A composite's member's change (``set_limit(..., member=i)``) is kept too.
    changes_members = True
    #: A change by name is written into the keys in use (each key decides in a slot of
    #: its own), and each process reads it for its keys' decisions to carry to the keys
    #: first used later (``redis/name_changes.py``), once a second.
    later_keys_follow = True
    later_keys_after = NAMES_READ_EVERY

    def __init__(
        self,
        client: Any,
        *,
        on_unavailable: OnUnavailable = "raise",
        local_share: LocalShare = 1.0,
        time_source: Literal["server", "client"] = "server",
        pool_size: int = DEFAULT_POOL_SIZE,
        coalesce: bool = True,
        counters: bool = True,
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
        if not isinstance(counters, bool):
            raise TypeError(f"counters must be a bool, got {counters!r}")
        if n := retries(client):
            # Not changed behind the caller's back (the client is theirs), but said once:
            # against a dead server each decision waits out every retry before the
            # failure policy is heard, and a script call that reached the server before
            # its connection failed is recorded again when retried.
            logger.warning(
                "the Redis client given to RedisBackend retries failed calls %d times (redis-py's default): "
                "against an unreachable server each decision waits out the retries before on_unavailable "
                "applies, and a retried decision may be recorded twice; make the client with "
                "retry=Retry(NoBackoff(), 0), or the backend with RedisBackend.from_url(...)",
                n,
            )
        self.coalesce = coalesce
        #: Whether decisions count themselves for ``ratelimit top``.
        self.counters = counters
        # Handles spending an allotment, whose rests go back at close, and as each allotment
        # ends (from a thread that needs the synchronous client).
        self._allotting: weakref.WeakSet[RedisHandle] = weakref.WeakSet()
        super().__init__(client, on_unavailable=on_unavailable, pool_size=pool_size)
        if share == "auto" and self._sync_client is None:
            raise TypeError(
                "local_share='auto' needs a synchronous client, which counts the live processes from a thread: "
                "make the backend with RedisBackend.from_url(...) or RedisBackend(redis.Redis(...))"
            )
        self._returns = None if self._sync_client is None else AllotmentReturns()
        #: As configured: a fraction, or ``"auto"`` (see :meth:`fallback_share`).
        self.local_share: LocalShare = share
        self.time_source = time_source
        self._local = MemoryBackend()
        #: Each name's change by name, as its keys' decisions carry it (``redis/name_changes.py``).
        self.name_changes = NameChanges(None if self._sync_client is None else self._read, self._read_async)

    def _read(self, key: str) -> Any:
        """GET ``key`` (``redis/name_changes.py``)."""
        assert self._sync_client is not None
        return self._sync_client.get(key)

    async def _read_async(self, key: str) -> Any:
        """GET ``key`` from the running loop (``redis/name_changes.py``)."""
        if self.threaded:
            assert self._sync_client is not None
            return await asyncio.to_thread(self._sync_client.get, key)
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop) or await self._attach(loop)
        return await state.client.get(key)

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
        counters: bool = True,
        **options: Any,
    ) -> RedisBackend:
        """A backend on ``url`` (``redis://``, ``rediss://``, ``unix://``, or
        ``redis+sentinel://`` for a master found through Redis Sentinel).

        Makes a synchronous client now and an asyncio one for each event loop that
        uses it (closed when that loop shuts down), all with limiter-friendly
        defaults: ``socket_timeout`` and ``socket_connect_timeout`` of 0.5 s, no
        retries, and a pool of ``pool_size`` + 1 connections (one held between
        calls, see docs/performance.md). ``options`` go to the
        redis-py client and override those defaults. ``cluster=True`` uses a Redis
        Cluster client (``url`` names any one node).

        ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]``
        asks the sentinels at ``host:port`` (26379 by default) where the master of
        ``service`` is, and again after each failover; ``user`` and ``password`` are
        the master's. Options in the query: ``socket_timeout``,
        ``socket_connect_timeout``, ``sentinel_username``, ``sentinel_password``
        (see :mod:`ratelimit._stores.redis.sentinel`). A malformed URL raises ``ValueError``
        naming the part, with its passwords shown as ``***``: no scheme or another
        store's (a ``sqlite:`` URL is :class:`~ratelimit.SQLiteBackend`'s), a database
        number or a port that is not one, a timeout in the query that is not seconds
        > 0, a query option the connection does not take (but with ``cluster=True``);
        the same of ``options`` (``TypeError`` for an unknown name, its value unshown).
        Nothing is asked of the server here: a database it does not have, or
        credentials it refuses, fail the first call with a :class:`BackendUnavailable`
        that says so, whatever ``on_unavailable`` says.
        """
        clients = url_clients(url, cluster=cluster, pool_size=pool_size, options=options)
        backend = cls(
            clients.sync,
            on_unavailable=on_unavailable,
            local_share=local_share,
            time_source=time_source,
            pool_size=pool_size,
            coalesce=coalesce,
            counters=counters,
        )
        backend._async_factory = clients.make_async
        backend._deadline = clients.deadline
        backend._where = redact_url(url)
        backend._secrets = client_secrets(clients.sync, url)
        return backend

    @classmethod
    def from_env(cls, variable: str = REDIS_URL_ENV, **options: Any) -> RedisBackend:
        """A backend on the URL in environment variable ``variable``
        (``RATELIMIT_REDIS_URL`` by default, which the command line's ``--redis``
        also defaults to): :meth:`from_url` of it, ``options`` passed on (``cluster``,
        ``on_unavailable``, ``counters``, client options...). A password then stays out
        of the code and off command lines.

        Raises ``ValueError`` naming the variable if it is unset or blank, and as
        :meth:`from_url` does for a malformed URL (its passwords shown as ``***``).
        """
        if not isinstance(variable, str) or not variable:
            raise TypeError(f"variable must be the name of an environment variable, got {variable!r}")
        url = url_from_env(variable)
        if url is None:
            raise ValueError(
                f"the environment variable {variable} is not set: set it to the URL of the Redis the limiters "
                "share (redis://host:6379/0, rediss://..., redis+sentinel://...)"
            )
        return cls.from_url(url, **options)

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
        self._stop_allotting()
        if self._returns is not None:
            self._returns.stop()
        if self._sync_client is not None:
            for handle in list(self._allotting):
                handle.give_back_allotment()
            self._close_held()
            self._sync_client.close()
        with self._lock:
            self._forget_closed_loops()

    async def aclose(self) -> None:
        """Close the running event loop's asyncio client (and the synchronous one).

        Clients of other event loops close when their loop shuts down.
        """
        self._stop_allotting()
        if self._sync_client is None:
            for handle in list(self._allotting):
                await handle.give_back_allotment_async()
        with self._lock:
            state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None and state.client is not None:
            if state.held is not None:
                await state.held.close()
            if state.closer is not None:
                await state.closer.aclose()  # closes the client it guards
            else:
                await state.client.aclose()
        self.close()

    def _stop_allotting(self) -> None:
        # An allotment taken after close would never go back: the thread that returns them
        # has stopped, and the owner may never call again.
        for handle in list(self._allotting):
            if handle.rounds is not None:
                handle.rounds.stop_allotting()

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

    def key(
        self,
        name: str | Keyed,
        kind: str,
        member: int | None = None,
        *,
        clock: Clock | None = None,
        lane: str | None = None,
    ) -> str:
        """The key of limiter ``name``'s state of algorithm ``kind`` on this store (a
        ``Keyed`` name: of one of its keys)."""
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
        name: str | Keyed | None,
        alg: Algorithm[Any],
        clock: Clock | None,
        *,
        lease: float | None = None,
        shadow: bool = False,
    ) -> RedisHandle:
        """One limiter; ``lease``: the seconds of an allotment it spends here (see
        ``redis/rounds.py``), which its algorithm's guard must already include; ``shadow``:
        said in what the code says (``redis/config.py``), for ``inspect`` and ``top``."""
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
            counted=self.counters,
            follows=self.name_changes if isinstance(name, Keyed) else None,
        )
        if local is not None:
            handle.pending = PendingGrants((clock or SystemClock()).now)
        if lease is not None or self.coalesce:
            rounds = handle.rounds = Rounds(
                handle.decide,
                handle.decide_async,
                handle.refund,
                handle.refund_async,
                (clock or SystemClock()).now,
                lease,
                alg.most,
                handle.reserve_one,
                handle.reserve_one_async,
            )
            if lease is not None:
                self._allotting.add(handle)
                if self._returns is not None and not _injected(clock):
                    returns, give_back = self._returns, handle.give_back_ended
                    rounds.on_allotment = lambda seconds: returns.watch(seconds, give_back)
        return handle

    def bind_group(
        self, name: str | Keyed | None, algs: Sequence[Algorithm[Any]], clock: Clock | None
    ) -> RedisGroupHandle:
        assert name is not None
        keys = [self.key(name, alg.kind, i, clock=clock) for i, alg in enumerate(algs)]
        local = self._fallback_of(lambda share: [group_share(self._local, algs, clock, share)])
        handle = RedisGroupHandle(
            self, algs, keys, self.now_source(clock), None if local is None else local[0], counted=self.counters
        )
        if local is not None:
            handle.pending = PendingGrants((clock or SystemClock()).now)
        if self.coalesce:
            handle.rounds = Rounds(
                handle.decide,
                handle.decide_async,
                handle.refund,
                handle.refund_async,
                (clock or SystemClock()).now,
                None,
                math.inf,
                handle.reserve_one,
                handle.reserve_one_async,
            )
        return handle

    # -- what a front asks of any store (store.Backend) ------------------------------

    def keep_views(self, views: Views) -> None:
        return None  # its keys expire by themselves: nothing to sweep here

    def idle(self, handle: object) -> bool:
        return False  # its keys expire by themselves

    def calls_from_threads(self) -> bool:
        return self.client is not None  # not a store of an asyncio client alone

    def bind_lanes(
        self, name: str | Keyed | None, lanes: Lanes, clock: Clock | None, keep: float | None
    ) -> tuple[RedisLaneHandle, RedisLaneHandle]:
        """Both lanes of a budget with priorities, decided by one script call: the
        handle that acquires at high priority, and the one at low."""
        assert name is not None
        keys = [self.key(name, lanes.high.kind, clock=clock, lane=lane) for lane in LANES]
        local = self._fallback_of(lambda share: lanes_shares(self._local, lanes, clock, keep, share), width=2)
        high, low = (None, None) if local is None else (local[HIGH], local[LOW])
        now = self.now_source(clock)
        handles = (
            RedisLaneHandle(self, lanes, keys, now, high, HIGH, keep, counted=self.counters),
            RedisLaneHandle(self, lanes, keys, now, low, LOW, keep, counted=self.counters),
        )
        if local is not None:
            for handle in handles:
                handle.pending = PendingGrants((clock or SystemClock()).now)
        return handles

    def bind_fair(self, name: str | Keyed | None, fair: Fair, clock: Clock | None) -> RedisFairHandle:
        """A budget shared fairly among tenants (``redis/fair.py``): its line and its
        tenants' paces in three keys of one hash tag, each decision one script call."""
        assert name is not None  # the front requires a name for a shared backend
        line = self.key(name, fair.line.kind, clock=clock, lane="fair")
        return RedisFairHandle(self, (line, f"{line}:tenants", f"{line}:weights"), fair, self.now_source(clock))

    def bind_breaker(self, name: str | None, policy: Policy, clock: Clock | None) -> RedisStore:
        """A circuit breaker's state in one hash (``redis/breaker.py``), and the state in
        this process it goes on with while Redis cannot be reached."""
        assert name is not None  # a shared store: CircuitBreaker required it
        local = MemoryStore(policy, clock or SystemClock())
        return RedisStore(self, self.key(name, "breaker", clock=clock), policy, clock, local)

    def bind_slots(
        self, name: str | Keyed | None, most: int, lease: float, clock: Clock | None, *, member: int | None = None
    ) -> RedisSlots:
        """A ConcurrencyLimit's slots (``member`` of a composite), one key shared by
        every process (``redis/slots.py``)."""
        assert name is not None  # the front requires a name for a shared backend
        return RedisSlots(self, self.key(name, "concurrency", member, clock=clock), most, lease, clock)

    # -- run-time changes and inspection (redis/config.py) -------------------------------

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
        key: str | None = None,
        member: int | None = None,
    ) -> int:
        """Change limiter ``name``'s limit at run time, in every process.

        Every process follows it from its next decision: the limiter's script reads
        the change atomically with the decision. ``rate`` is in tokens per second
        (a token bucket's refill, a leaky bucket's leak; a window's limit becomes
        ``rate`` times its length), ``burst`` a bucket's capacity (windows have
        none); ``None`` keeps what the code says. ``ttl``: seconds (or a
        ``timedelta``) after which the change ends by itself. A new change replaces
        the last one whole. Bad values raise ``ValueError`` and change nothing.

        A change by name is written into the budget of each of its keys in use
        (``for_key``: each key decides in a slot of its own), but for a key with a
        change of its own (``key=``), which prevails: one SCAN and a call per key.
        Each process reads the change once a second (this one at once), and its
        keys' decisions carry it to the keys first used later, which take it; a
        reset by name takes them back alike. While no change by name is in force a
        keyed decision carries nothing. Returns how many keys in use it reached.
        ``key``: that key's budget alone.

        A ``Composite``'s members change one at a time: ``member`` is the index of
        one of its limits (as ``composite.set_limit`` takes one value per limit); the
        composite's next decision in any process moves that member's state to it, and
        decides on it. A change by member reaches the name's own budget, or ``key``'s
        alone, never the name's keys in use; it returns 0. Without ``member``, only
        single limiters follow it: a name whose keys say it is a ``Composite``'s, an
        ``adaptive=`` limiter, a limiter with ``low_share`` or a ``ConcurrencyLimit``
        raises ``UnchangeableLimit`` (a ``ValueError``) saying so, and nothing is
        stored. ``ratelimit set`` is the same from a shell, for single limiters.

        ``clock``: the limiter's, when it keeps time on a test clock (a
        ``ManualClock``): the change is then made at that clock's time, to the
        state kept on it, and a ``ttl`` runs on it. ``None``: real time (the
        server's), for every limiter on real time.

        ``name`` may be one ``ratelimit inspect`` read back from a key that is not
        UTF-8 (named through a client of another encoding), each such byte standing
        as its surrogate escape (``"caf\\udce9"``): it addresses the key of those
        bytes, here and in :meth:`reset_limit`, :meth:`limit_override` and
        :meth:`inspect`.
        """
        change = checked_override(rate, burst, ttl)
        (target,) = _targets(self, [name], key)
        now = _test_time(clock)
        if member is not None:
            index = _member(member)
            self._admin(lambda client: write_member(client, target, index, change, now))
            return 0
        reached = int(self._admin(lambda client: write_override(client, target, change, now)))
        self.name_changes.forget(name)
        risk = self._admin(lambda client: eviction_risk(client, change))
        if risk is not None:
            logger.warning("limiter %s: %s", target if isinstance(target, Keyed) else repr(target), risk)
        return reached

    def reset_limit(
        self, name: str, *, clock: Clock | None = None, key: str | None = None, member: int | None = None
    ) -> bool:
        """Return limiter ``name`` (``key``: that key's budget; ``member``: that member
        of a composite) to what its code says, in every process from its next
        decision; ``True`` if a change was in force. ``clock`` as for :meth:`set_limit`."""
        (target,) = _targets(self, [name], key)
        now = _test_time(clock)
        if member is not None:
            index = _member(member)
            return bool(self._admin(lambda client: write_member(client, target, index, None, now)))
        was = bool(self._admin(lambda client: reset_override(client, target, now)))
        self.name_changes.forget(name)
        return was

    def limit_override(
        self, name: str, *, clock: Clock | None = None, key: str | None = None, member: int | None = None
    ) -> Override | None:
        """The change in force for limiter ``name`` (``key``: for that key's budget;
        ``member``: for that member of a composite), or ``None``; its ``ttl`` is what
        is left of it (on ``clock``, as for :meth:`set_limit`)."""
        (target,) = _targets(self, [name], key)
        now = _test_time(clock)
        if member is not None:
            index = _member(member)
            found: Override | None = self._admin(lambda client: member_override(client, target, index, now))
            return found
        result: Override | None = self._admin(lambda client: read_override(client, target, now))
        return result

    def inspect(self, name: str, *, key: str | None = None) -> Inspection:
        """What this store holds of limiter ``name``: its configuration (as the code
        set it and as changed), what it could grant now, what is promised ahead, a
        pause from feedback, a breaker's state. ``key``: the budget of
        ``limiter.for_key(key)`` instead of the name's own. ``ratelimit inspect``
        prints it."""
        return self.inspect_many([name], key=key)[0]

    def inspect_many(self, names: Sequence[str], *, key: str | None = None) -> list[Inspection]:
        """:meth:`inspect` of each of ``names``, in a few pipelines whatever their number."""
        targets = _targets(self, names, key)
        result: list[Inspection] = self._admin(lambda client: inspect_many(client, targets))
        return result

    def holds(self, name: str) -> bool:
        """Whether Redis holds anything of limiter ``name`` itself: a state (a single
        limiter's, a member's, a lane's), what its code configured, a change, a
        breaker, a ConcurrencyLimit's slots. A keyed budget's keys are its key's, not
        the name's. One pipeline of ``EXISTS``, no scan (``key_survey.probe``)."""
        checked = _validate.name(name, self, shared=True, found=True) or ""
        roots: dict[str, frozenset[str]] = self._admin(lambda client: probe(client, [checked])[0])
        return bool(roots[checked])

    def keys_in_use(self, name: str) -> int:
        """How many keys of limiter ``name`` (``for_key``) have a budget in Redis:
        one SCAN (of every master on a Cluster)."""
        checked = _validate.name(name, self, shared=True, found=True) or ""
        return int(self._admin(lambda client: len(keys_of(client, checked))))

    def inspect_all(self) -> list[Inspection]:
        """:meth:`inspect` of every name with something to show (a limiter that decided
        in the last day, a composite's or a ConcurrencyLimit's state, a change in force,
        a breaker), sorted: one SCAN pass, then a few pipelines."""
        found: list[Inspection] = self._admin(inspect_all)
        # A name found by a key that says nothing (a garbled change): nothing to show.
        return [each for each in found if each.known]

    def top(self, window: float = 5.0, *, now: float | None = None) -> list[FleetRow]:
        """Every limiter active in the last minute, as ``ratelimit top`` shows it: the
        counts its script keeps per second (``redis/fleet.py``), over the last
        ``window`` whole seconds before ``now`` (the server's time when ``None``)."""
        rows: list[FleetRow] = self._admin(lambda client: fleet(client, window, now))
        return rows

    def _admin(self, call: Callable[[Any], Any]) -> Any:
        client = self._admin_client()
        try:
            return call(client)
        except STORE_ERRORS as exc:
            if is_unavailable(exc) or misconfigured(exc):
                raise self._unavailable_error(exc, client) from exc
            raise

    def __repr__(self) -> str:
        client = self._sync_client or self._async_client
        pool = getattr(client, "connection_pool", None)
        where = getattr(pool, "connection_kwargs", {}) if pool is not None else {}
        if where.get("path"):
            target = f"unix://{where['path']}"
        elif where:  # redis-py's defaults where the URL names no host or port
            host = str(where.get("host") or "localhost")
            target = f"{f'[{host}]' if ':' in host else host}:{where.get('port') or 6379}"
        else:
            target = type(client).__name__
        service = getattr(pool, "service_name", None)
        if isinstance(service, str):  # a master found through Sentinel: no fixed address
            target = f"sentinel service {service}"
        return f"RedisBackend({target}, on_unavailable={self.on_unavailable!r})"
