"""One ``ratelimit bench`` worker process: threads (or asyncio tasks) that acquire, then call.

Started by :mod:`ratelimit._cli.bench` with the spawn context, so everything it is given
is plain picklable data. It ignores SIGINT: the CLI decides when the run stops (and
must still collect what every worker did), and tells it through the ``stop`` event.
Its callers record, for every grant, when it came, how long the acquire took and
the target's answer (and, with ``feedback``, hand each answer to
``limiter.feedback``); worker 0 of an adaptive run also samples the learned rate.
The process sends these back when the run ends or it is
stopped, without waiting for callers still asleep on a reservation.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
from redis.backoff import NoBackoff

from .._errors import AcquireTimeout, RateLimitError
from .._limiting.adaptive import Adaptive
from .._limiting.limiters import LeakyBucket, SingleLimiter, SlidingWindow, TokenBucket
from .._redact import redact_url, scrub, url_secrets
from .._stores.redis import RedisBackend
from .._stores.redis.clients import DEFAULT_SOCKET_TIMEOUT
from .._stores.sqlite import SQLiteBackend
from .._stores.store import Backend

__all__ = ["CountingClient", "LimiterSpec", "WorkerPlan", "WorkerReport", "run_worker"]

ALGORITHMS = ("token-bucket", "leaky-bucket", "sliding-window")

#: How long one call to the target may take before it counts as an error.
CALL_TIMEOUT = 10.0

#: A status recorded for a call that got no HTTP answer (refused, reset, timed out).
NO_ANSWER = 0

#: An answer's status and headers (none for ``NO_ANSWER``).
Answer = tuple[int, list[tuple[str, str]]]

#: How often worker 0 of an adaptive run reads the learned rate, seconds.
SAMPLE_EVERY = 0.1


@dataclass(frozen=True)
class LimiterSpec:
    """Which limiter, its two numbers (as in each constructor's order) and its guard."""

    algorithm: str
    first: float
    second: float
    #: Passed as ``guard=`` (seconds; ``ratelimit size`` folds the buckets' into their
    #: numbers and gives windows theirs).
    guard: float = 0.0
    #: A sliding window's O(1) sub-window counter variant.
    approximate: bool = False
    #: Learn the rate below ``second`` (a token bucket's ceiling) down to this floor,
    #: per second; ``None``: keep the configured rate.
    adaptive_floor: float | None = None

    def build(self, backend: Backend | None, name: str | None) -> SingleLimiter:
        if self.algorithm == "token-bucket":
            learn = None if self.adaptive_floor is None else Adaptive(floor=self.adaptive_floor)
            return TokenBucket(self.first, self.second, backend=backend, name=name, guard=self.guard, adaptive=learn)
        if self.algorithm == "leaky-bucket":
            return LeakyBucket(self.first, self.second, backend=backend, name=name, guard=self.guard)
        return SlidingWindow(
            self.first, self.second, approximate=self.approximate, backend=backend, name=name, guard=self.guard
        )

    def describe(self) -> str:
        return repr(self.build(None, None))

    @property
    def rate(self) -> float:
        """The sustained grants per second."""
        return self.build(None, None).sustained_rate


@dataclass(frozen=True)
class WorkerPlan:
    index: int
    limiter: LimiterSpec
    #: ``None``: in-process state (one process only); a ``sqlite:///`` URL: that file.
    redis_url: str | None
    cluster: bool
    #: Socket timeouts for the store, seconds; ``None``: ``RedisBackend.from_url``'s.
    store_timeout: float | None
    name: str
    target: str
    threads: int
    #: asyncio tasks per thread; 0: each thread is one caller.
    tasks: int
    #: How long the run lasts from ``begin``; ``None`` for a run bounded by calls only.
    seconds: float | None
    parent: int
    #: Hand every answer to ``limiter.feedback`` (``--adaptive``).
    feedback: bool = False

    @property
    def secrets(self) -> tuple[str, ...]:
        """What the URLs hold that no message may show (see ``ratelimit._cli.redact``)."""
        return url_secrets(self.redis_url or "") + url_secrets(self.target)


@dataclass
class WorkerReport:
    index: int
    #: One list per caller, of ``(granted_at, acquire_seconds, status)``.
    calls: list[list[tuple[float, float, int]]]
    #: Acquires that ended without a grant (the run's end reached, or an error).
    unfinished: int
    #: Acquires refused at once by a full leaky bucket (and asked again).
    overflows: int
    #: CPU seconds (user + system) this process spent from the start of the run.
    cpu: float
    #: Script calls sent to Redis (``None`` with in-process state).
    round_trips: int | None
    errors: list[str] = field(default_factory=list)
    #: ``(seconds from the start, learned rate per second)`` samples (``--adaptive``).
    learned: list[tuple[float, float]] = field(default_factory=list)


class CountingClient:
    """A redis-py client that counts the script calls (each is one round trip).

    ``RedisBackend`` calls ``fcall`` (or, without Functions, ``evalsha`` and ``eval``
    once per reload); everything else passes through untouched.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.calls = 0

    def count(self) -> None:
        with self._lock:
            self.calls += 1

    def evalsha(self, *args: Any, **kwargs: Any) -> Any:
        self.count()
        return self._client.evalsha(*args, **kwargs)

    def eval(self, *args: Any, **kwargs: Any) -> Any:
        self.count()
        return self._client.eval(*args, **kwargs)

    def fcall(self, *args: Any, **kwargs: Any) -> Any:
        self.count()
        return self._client.fcall(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


# asyncio callers get asyncio clients, as RedisBackend.from_url gives its users: the
# backend tells an asyncio client by its class, so these count by subclassing where
# the synchronous one is wrapped. Each serves one event loop: no lock of their own.


class _Counting:
    """Counts every script call, then passes it on to the client class beside it."""

    tally: CountingClient

    def evalsha(self, *args: Any, **kwargs: Any) -> Any:
        self.tally.count()
        return super().evalsha(*args, **kwargs)  # type: ignore[misc]

    def eval(self, *args: Any, **kwargs: Any) -> Any:
        self.tally.count()
        return super().eval(*args, **kwargs)  # type: ignore[misc]

    def fcall(self, *args: Any, **kwargs: Any) -> Any:
        self.tally.count()
        return super().fcall(*args, **kwargs)  # type: ignore[misc]


# redis-py's own bases disagree about command_info; mypy only notices once a mixin
# makes it re-check the class.
class _CountingAsyncRedis(_Counting, redis.asyncio.Redis):  # type: ignore[misc]
    pass


class _CountingAsyncCluster(_Counting, redis.asyncio.cluster.RedisCluster):  # type: ignore[misc]
    pass


def _async_client(plan: WorkerPlan, tally: CountingClient) -> Any:
    assert plan.redis_url is not None
    timeout = plan.store_timeout or DEFAULT_SOCKET_TIMEOUT
    # RedisBackend.from_url's settings: short timeouts, and no retry of a script call.
    settings: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": redis.asyncio.retry.Retry(NoBackoff(), 0),
    }
    kind = _CountingAsyncCluster if plan.cluster else _CountingAsyncRedis
    client: Any = kind.from_url(plan.redis_url, **settings)
    client.tally = tally
    return client


class _Target:
    """Calls the target URL with ``GET``; one connection per caller, reused when allowed."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.https = parts.scheme == "https"

    def connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=CALL_TIMEOUT)

    def call(self, connection: http.client.HTTPConnection) -> int:
        return self.answer(connection)[0]

    def answer(self, connection: http.client.HTTPConnection) -> Answer:
        """The status and headers of a ``GET`` (``NO_ANSWER`` and none if it got no answer)."""
        try:
            connection.request("GET", self.path)
            response = connection.getresponse()
            response.read()
            if response.will_close:
                connection.close()
            return response.status, response.getheaders()
        except (OSError, http.client.HTTPException):
            connection.close()
            return NO_ANSWER, []

    async def call_async(self) -> int:
        return (await self.answer_async())[0]

    async def answer_async(self) -> Answer:
        # A minimal HTTP/1.0 GET: the standard library has no asyncio HTTP client.
        try:
            connecting = asyncio.open_connection(self.host, self.port, ssl=True if self.https else None)
            reader, writer = await asyncio.wait_for(connecting, CALL_TIMEOUT)
            try:
                request = f"GET {self.path} HTTP/1.0\r\nHost: {self.host}:{self.port}\r\n\r\n"
                writer.write(request.encode("latin-1"))
                await writer.drain()
                answer = await asyncio.wait_for(reader.read(), CALL_TIMEOUT)
            finally:
                writer.close()
            head = answer.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            headers = [(name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in head[1:])]
            return int(head[0].split(" ", 2)[1]), headers
        except (OSError, asyncio.TimeoutError, ValueError, IndexError):
            return NO_ANSWER, []


class _Run:
    """The shared state of one worker's callers."""

    def __init__(
        self,
        plan: WorkerPlan,
        limiter: SingleLimiter,
        tally: CountingClient | None,
        begin: float,
        stop: Any,
        granted: Any,
        calls_left: Any,
    ) -> None:
        self.plan = plan
        self.limiter = limiter
        self.tally = tally
        self.target = _Target(plan.target)
        self.stop = stop
        self.granted = granted
        self.calls_left = calls_left
        self.deadline = None if plan.seconds is None else begin + plan.seconds
        self.unfinished = 0
        self.overflows = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def take_call(self) -> float | None:
        """The timeout for the next acquire, or ``None`` when this caller must stop."""
        if self.stop.is_set():
            return None
        if self.calls_left is not None:
            with self.calls_left.get_lock():
                if self.calls_left.value <= 0:
                    return None
                self.calls_left.value -= 1
        if self.deadline is None:
            return float("inf")
        left = self.deadline - time.monotonic()
        return left if left > 0 else None

    def failed(self, exc: BaseException | None) -> None:
        with self._lock:
            self.unfinished += 1
            if exc is not None and len(self.errors) < 5:
                self.errors.append(scrub(f"{type(exc).__name__}: {exc}", self.plan.secrets))

    def count(self) -> None:
        with self.granted.get_lock():
            self.granted.value += 1

    def told(self, exc: RateLimitError) -> None:
        """A feedback that failed (the store unreachable): noted, and the run goes on."""
        with self._lock:
            if len(self.errors) < 5:
                self.errors.append(scrub(f"feedback: {type(exc).__name__}: {exc}", self.plan.secrets))

    def left(self) -> float:
        """Seconds until the run's end (``inf`` for a run bounded by calls only)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def refused(self, exc: AcquireTimeout) -> float | None:
        """How long to wait before asking again, or ``None`` when the run is over.

        A leaky bucket refuses a request that finds it full at once, whatever its
        timeout: a caller waits for room, as a user would, and asks again.
        """
        if exc.retry_after < self.left() and not self.stop.is_set():
            with self._lock:
                self.overflows += 1
            return exc.retry_after
        self.failed(None)
        return None

    def caller(self, record: list[tuple[float, float, int]]) -> None:
        connection = self.target.connection()
        try:
            while (timeout := self.take_call()) is not None:
                asked = time.monotonic()
                while True:
                    try:
                        self.limiter.acquire(timeout=None if timeout == float("inf") else timeout)
                        break
                    except AcquireTimeout as exc:
                        pause = self.refused(exc)
                        if pause is None:
                            return
                        time.sleep(pause)
                        timeout = self.left()
                    except RateLimitError as exc:
                        self.failed(exc)
                        return
                granted = time.monotonic()
                status, headers = self.target.answer(connection)
                record.append((granted, granted - asked, status))
                self.count()
                if self.plan.feedback and status != NO_ANSWER:
                    try:
                        self.limiter.feedback(headers, status)
                    except RateLimitError as exc:
                        self.told(exc)
        finally:
            connection.close()

    async def async_caller(self, limiter: SingleLimiter, record: list[tuple[float, float, int]]) -> None:
        while (timeout := self.take_call()) is not None:
            asked = time.monotonic()
            while True:
                try:
                    await limiter.acquire_async(timeout=None if timeout == float("inf") else timeout)
                    break
                except AcquireTimeout as exc:
                    pause = self.refused(exc)
                    if pause is None:
                        return
                    await asyncio.sleep(pause)
                    timeout = self.left()
                except RateLimitError as exc:
                    self.failed(exc)
                    return
            granted = time.monotonic()
            status, headers = await self.target.answer_async()
            record.append((granted, granted - asked, status))
            self.count()
            if self.plan.feedback and status != NO_ANSWER:
                try:
                    await limiter.feedback_async(headers, status)
                except RateLimitError as exc:
                    self.told(exc)

    def async_thread(self, records: list[list[tuple[float, float, int]]]) -> None:
        async def tasks() -> None:
            limiter, client = self.limiter, None
            if self.tally is not None:
                # An asyncio client belongs to one event loop: one per thread, all of
                # them on the same shared budget (the limiter's name).
                client = _async_client(self.plan, self.tally)
                limiter = self.plan.limiter.build(RedisBackend(client), self.plan.name)
            try:
                await asyncio.gather(*(self.async_caller(limiter, record) for record in records))
            finally:
                if client is not None:
                    await client.aclose()

        asyncio.run(tasks())


def _plain_backend(plan: WorkerPlan) -> RedisBackend:
    assert plan.redis_url is not None
    options: dict[str, Any] = {}
    if plan.store_timeout is not None:
        options = {"socket_timeout": plan.store_timeout, "socket_connect_timeout": plan.store_timeout}
    return RedisBackend.from_url(plan.redis_url, cluster=plan.cluster, **options)


def is_sqlite(url: str | None) -> bool:
    """Whether a store URL names a SQLite file (``sqlite:///PATH``)."""
    return url is not None and url.startswith("sqlite:")


def _backend(plan: WorkerPlan) -> tuple[Backend | None, CountingClient | None]:
    if plan.redis_url is None:
        return None, None
    if is_sqlite(plan.redis_url):
        return SQLiteBackend.from_url(plan.redis_url), None  # no round trips to count
    client = CountingClient(_plain_backend(plan).client)
    # Connect before the run starts, so that the first grant is not a connection's setup.
    client.ping()
    return RedisBackend(client), client


def _sampler(plan: WorkerPlan, limiter: SingleLimiter) -> SingleLimiter:
    """What reads the learned rate: on a shared store, a limiter of the same name whose
    calls are not counted among the callers' round trips; in process, the callers' own."""
    if plan.redis_url is None:
        return limiter
    if is_sqlite(plan.redis_url):
        return plan.limiter.build(SQLiteBackend.from_url(plan.redis_url), plan.name)
    return plan.limiter.build(_plain_backend(plan), plan.name)


def _sample(limiter: SingleLimiter, begin: float, done: threading.Event, into: list[Any]) -> None:
    """Read the learned rate every ``SAMPLE_EVERY`` seconds until ``done``.

    ``done`` is this process's own event: a thread asleep in the shared ``stop``
    event's ``wait`` when its process exits leaves that event's condition counting
    a sleeper that never wakes, and the CLI's ``stop.set()`` then waits for it forever.
    """
    while True:
        try:
            rate = limiter.adaptive_rate()
        except RateLimitError:
            rate = None  # the store did not answer this time: a gap in the line
        if rate is not None:
            into.append((time.monotonic() - begin, rate))
        if done.wait(SAMPLE_EVERY):
            return


def run_worker(
    plan: WorkerPlan, ready: Any, start: Any, begin: Any, stop: Any, results: Any, granted: Any, calls_left: Any
) -> None:
    """The worker process's body (the target of ``multiprocessing.Process``).

    ``begin`` holds the run's start on the monotonic clock, which every process on
    the machine shares, so that all workers end the run at the same moment.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        # Blocked by the CLI while it started us (see ratelimit._cli.bench); ignored now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        backend, counter = _backend(plan)
    except (RateLimitError, redis.exceptions.RedisError, OSError) as exc:
        # Reachable when the CLI checked, not now: one line for the CLI to say.
        store = redact_url(plan.redis_url or "")
        ready.put((plan.index, scrub(f"worker {plan.index} cannot reach the store at {store}: {exc}", plan.secrets)))
        return
    # A shared backend needs a name; in-process state is private to this process anyway.
    limiter = plan.limiter.build(backend, plan.name if backend is not None else None)
    per_thread = max(1, plan.tasks)
    records: list[list[tuple[float, float, int]]] = [[] for _ in range(plan.threads * per_thread)]
    watch = _sampler(plan, limiter) if plan.index == 0 and plan.limiter.adaptive_floor is not None else None
    ready.put((plan.index, None))
    start.wait()
    cpu_start = os.times()
    run = _Run(plan, limiter, counter, begin.value, stop, granted, calls_left)
    learned: list[tuple[float, float]] = []
    sampled = threading.Event()
    sampler = None
    if watch is not None:
        args = (watch, begin.value, sampled, learned)
        sampler = threading.Thread(target=_sample, args=args, name="learned-rate", daemon=True)
        sampler.start()
    threads = []
    for i in range(plan.threads):
        mine = records[i * per_thread : (i + 1) * per_thread]
        if plan.tasks:
            thread = threading.Thread(target=run.async_thread, args=(mine,), daemon=True)
        else:
            thread = threading.Thread(target=run.caller, args=(mine[0],), daemon=True)
        threads.append(thread)
        thread.start()
    # Callers asleep on a reservation cannot be woken: when told to stop, report what
    # is done and leave them (daemon threads end with the process).
    while any(thread.is_alive() for thread in threads):
        if stop.wait(0.1) or os.getppid() != plan.parent:
            break
    sampled.set()
    if sampler is not None:
        sampler.join(timeout=CALL_TIMEOUT)  # at most one store call away
    cpu_end = os.times()
    cpu = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    calls = [list(record) for record in records]
    results.put(
        WorkerReport(
            index=plan.index,
            calls=calls,
            unfinished=run.unfinished,
            overflows=run.overflows,
            cpu=cpu,
            round_trips=None if counter is None else counter.calls,
            errors=list(run.errors),
            learned=list(learned),
        )
    )
