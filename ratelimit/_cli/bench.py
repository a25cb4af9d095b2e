"""``ratelimit bench``: run real workers through a limiter against a provider, and measure.

P worker processes of T threads (or T threads of K asyncio tasks each) acquire from
one limiter and then call the target, for a number of seconds or calls. The target
is the package's :class:`~ratelimit.testing.FakeProvider` on loopback unless a URL
is given. The limiter's state lives in the worker's own memory when there is one
worker process, in an embedded Redis-protocol server (fakeredis's TCP server,
running the real Lua scripts, in this process) for several, or in a real Redis
(``--redis``).

With ``adaptive`` (``--adaptive``) the run asks another question: can a limiter that
is told no limit find one? The built-in provider then enforces a *hidden* token
bucket (no rate-limit header, bare 429s), the workers' limiter starts from a
ceiling above it and learns the rate from the 429s they feed back, and the provider
lowers its limit halfway through; :mod:`ratelimit._cli.bench_adaptive` measures
how fast and how cleanly the limiter followed.

Workers are started with the spawn context, ignore SIGINT and stop when this
process says so; on Ctrl-C the run is cut short, every worker still reports what it
did, and whatever has not exited within a few seconds is terminated, so no worker
outlives the command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

import redis

from .._errors import RateLimitError
from .._redact import redact_url, scrub, url_secrets
from .._stores.keys import tag
from .._stores.redis import RedisBackend, check_url, preload
from .._stores.sqlite import SQLiteBackend
from .._validate import Rate
from ..testing import FakeProvider
from .bench_adaptive import AdaptiveStats, adaptive_stats
from .bench_stats import allowed, jain, most_in_window, percentile, timeline
from .bench_worker import NO_ANSWER, LimiterSpec, WorkerPlan, WorkerReport, run_worker
from .sizing import DEFAULT_GUARD, DEFAULT_HEADROOM, size
from .stores import sqlite_path_hint

__all__ = [
    "ADAPTIVE_BIN",
    "ADAPTIVE_BURST_SHARE",
    "ADAPTIVE_CAPACITY",
    "ADAPTIVE_DROP_SHARE",
    "ADAPTIVE_SECONDS",
    "DEFAULT_LIMIT",
    "AdaptiveRun",
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "adaptive_ceiling",
    "drop_plan",
    "hidden_burst",
    "limiter_spec",
    "run_bench",
    "sweep_configs",
]

#: After the run's end, how long workers get to report before they are stopped.
REPORT_GRACE = 15.0
#: After being told to stop, how long a worker gets to exit before it is terminated.
EXIT_GRACE = 3.0
#: Socket timeouts of workers' connections to the embedded store, seconds.
EMBEDDED_TIMEOUT = 5.0
#: How long workers may take to start (import, connect) before the run is abandoned.
START_TIMEOUT = 60.0


class BenchError(Exception):
    """A run that cannot start or go on (unreachable store or target, a dead worker)."""


#: The provider ``ratelimit bench`` assumes without ``--limit``.
DEFAULT_LIMIT = Rate(100, 1)

#: ``--adaptive``'s hidden bucket holds this share of a second's worth of its rate
#: (at least 1) unless ``--burst`` says otherwise: 5 at 100/s, small enough that
#: sending faster than the limit is refused within a few dozen milliseconds.
ADAPTIVE_BURST_SHARE = 0.05
#: ``--adaptive``'s provider drops to this share of its limit (rounded) by default.
ADAPTIVE_DROP_SHARE = 0.6
#: The adaptive limiter's capacity: one, so that its grants are evenly spaced (who
#: does not know the limit does not know the burst either).
ADAPTIVE_CAPACITY = 1.0
#: How long an adaptive run lasts without ``--seconds``.
ADAPTIVE_SECONDS = 20.0
#: The bins of the adaptive timelines (served and refused per second), seconds.
ADAPTIVE_BIN = 0.5


@dataclass(frozen=True)
class BenchConfig:
    algorithm: str = "token-bucket"
    limit: Rate = DEFAULT_LIMIT
    burst: float | None = None
    headroom: float = DEFAULT_HEADROOM
    #: Seconds of send jitter the sized limiter allows for (``ratelimit size --guard``).
    guard: float = DEFAULT_GUARD
    #: The built-in provider without a burst: ``False`` counts fixed windows, ``True``
    #: any sliding window (a strict sliding log).
    strict: bool = False
    #: A sliding window's approximate (sub-window counter) variant.
    approximate: bool = False
    #: Overrides the sized capacity (the sweep tries several).
    capacity: float | None = None
    processes: int = 2
    threads: int = 4
    #: asyncio tasks per thread; 0: plain threads.
    tasks: int = 0
    seconds: float | None = 5.0
    calls: int | None = None
    redis: str | None = None
    #: A SQLite file the workers share (``sqlite:///PATH``), instead of a Redis.
    store: str | None = None
    cluster: bool = False
    target: str | None = None
    #: Seconds the built-in provider holds each answer back (requests in flight).
    latency: float = 0.0
    #: A hidden limit the workers' limiter learns from the 429s (``--adaptive``).
    adaptive: bool = False
    #: The adaptive limiter's ceiling, per second; ``None``: twice the hidden limit.
    ceiling: float | None = None
    #: The adaptive limiter's floor, per second.
    floor: float = 1.0
    #: Whether the hidden limit drops during the run, to what and when (seconds from
    #: the start); ``None``: ``ADAPTIVE_DROP_SHARE`` of it, at half the run.
    drop: bool = True
    drop_to: Rate | None = None
    drop_at: float | None = None

    @property
    def callers(self) -> int:
        return self.processes * self.threads * max(1, self.tasks)


def hidden_burst(config: BenchConfig) -> float:
    """The adaptive run's hidden bucket: ``--burst``, or a small share of a second's worth."""
    if config.burst is not None:
        return config.burst
    return float(max(1, round(ADAPTIVE_BURST_SHARE * config.limit.per_second)))


def adaptive_ceiling(config: BenchConfig) -> float:
    """The adaptive limiter's ceiling, per second: ``--ceiling`` or twice the hidden limit."""
    return config.ceiling if config.ceiling is not None else 2 * config.limit.per_second


def drop_plan(config: BenchConfig) -> tuple[Rate, float] | None:
    """What the hidden limit drops to and when (seconds from the start); ``None``: no drop."""
    if not config.drop:
        return None
    to = config.drop_to or Rate(float(max(1, round(ADAPTIVE_DROP_SHARE * config.limit.count))), config.limit.window)
    at = config.drop_at if config.drop_at is not None else (config.seconds or ADAPTIVE_SECONDS) / 2
    return to, at


@dataclass(frozen=True)
class AdaptiveRun:
    """What an adaptive run adds to its result: the measures and the timelines."""

    stats: AdaptiveStats
    #: The hidden bucket's capacity, and the adaptive limiter's ceiling and floor.
    burst: float
    ceiling: float
    floor: float
    #: Served and refused (429s of the limit) per second, in ``bin_seconds`` bins.
    served: tuple[float, ...]
    refused: tuple[float, ...]
    bin_seconds: float
    #: ``(seconds from the start, learned rate per second)``, sampled as the run went.
    learned: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class BenchResult:
    config: BenchConfig
    limiter: LimiterSpec
    backend: str
    target: str
    interrupted: bool
    elapsed: float
    grants: int
    #: What a perfect limiter with this configuration allows in ``elapsed``.
    allowed: float
    configured_rate: float
    provider_rate: float
    statuses: dict[int, int]
    #: 429 answers seen by the callers.
    refused: int
    #: Calls that got no HTTP answer.
    no_answer: int
    #: The most calls the provider served in any interval of its window.
    most_in_window: int
    #: Acquire latency, seconds: p50, p95, p99, max.
    wait: tuple[float, float, float, float]
    round_trips: int | None
    #: Every acquire made: granted, cut off by the run's end, or refused by a full bucket.
    acquires: int
    #: Acquires refused at once by a full leaky bucket (each asked again after).
    overflows: int
    cpu: float
    grants_per_caller: tuple[int, ...]
    timeline: tuple[float, ...]
    timeline_width: float
    errors: tuple[str, ...]
    #: ``--adaptive`` only.
    adaptive: AdaptiveRun | None = None

    @property
    def achieved_rate(self) -> float:
        return self.grants / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def fairness(self) -> float:
        return jain(self.grants_per_caller)


def limiter_spec(config: BenchConfig) -> LimiterSpec:
    """The limiter ``ratelimit size`` recommends for this configuration.

    With ``adaptive``: a token bucket of ``ADAPTIVE_CAPACITY`` refilled at the
    ceiling, learning its rate down to the floor: sized from nothing, as its user
    does not know the limit.
    """
    if config.adaptive:
        return LimiterSpec("token-bucket", ADAPTIVE_CAPACITY, adaptive_ceiling(config), adaptive_floor=config.floor)
    sizing = size(config.limit, config.burst, config.callers, 1, config.headroom, guard=config.guard)
    if config.algorithm == "token-bucket":
        bucket = sizing.token_bucket
        return LimiterSpec("token-bucket", config.capacity or bucket.capacity, bucket.refill_per_sec)
    if config.algorithm == "leaky-bucket":
        leaky = sizing.leaky_bucket
        return LimiterSpec("leaky-bucket", config.capacity or leaky.capacity, leaky.leak_per_sec)
    window = sizing.sliding_window
    if config.capacity is not None:
        # The same limit per second of window with a different limit per window.
        seconds = config.capacity * window.window_seconds / window.limit
        return LimiterSpec("sliding-window", config.capacity, seconds, window.guard, config.approximate)
    return LimiterSpec("sliding-window", window.limit, window.window_seconds, window.guard, config.approximate)


# -- what the workers talk to ----------------------------------------------------------


def _whole(name: str, value: float) -> int:
    if value != int(value):
        raise BenchError(f"the built-in provider needs a whole {name}, got {value:g} (or pass --target URL)")
    return int(value)


@contextlib.contextmanager
def _provider(config: BenchConfig) -> Iterator[FakeProvider]:
    limit = _whole("--limit count", config.limit.count)
    window, latency = config.limit.window, config.latency
    if config.adaptive:
        drop = drop_plan(config)
        if drop is not None:
            _whole("--drop-to count", drop[0].count)
        burst = _whole("--burst", hidden_burst(config))
        provider = FakeProvider(limit, window, mode="token_bucket", burst=burst, headers="none", latency=latency)
    elif config.burst is None:
        mode: Literal["sliding_log", "fixed_window"] = "sliding_log" if config.strict else "fixed_window"
        provider = FakeProvider(limit, window, mode=mode, latency=latency)
    else:
        burst = _whole("--burst", config.burst)
        provider = FakeProvider(limit, window, mode="token_bucket", burst=burst, latency=latency)
    with provider:
        yield provider


class _Drop:
    """Lowers the provider's limit ``at`` seconds after it is started, and notes when."""

    def __init__(self, provider: FakeProvider, to: Rate, at: float) -> None:
        self.provider, self.to = provider, to
        self.done_at: float | None = None
        self._timer = threading.Timer(at, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def _fire(self) -> None:
        self.provider.set_limit(int(self.to.count), self.to.window)
        self.done_at = time.monotonic()

    def cancel(self) -> None:
        self._timer.cancel()


def _probe_target(url: str) -> None:
    # A connection only, not a request: a real provider's budget is not ours to spend.
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"--target must be an http:// or https:// URL, got {redact_url(url)!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=5).close()
    except OSError as exc:
        reason = scrub(str(exc.strerror or exc), url_secrets(url))
        raise BenchError(f"--target {redact_url(url)}: cannot connect: {reason}") from None


def _probe_redis(url: str, cluster: bool) -> None:
    try:
        check_url(url, query_names=not cluster)
        if cluster:
            client: Any = redis.cluster.RedisCluster.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        else:
            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.exceptions.RedisError, OSError, ValueError) as exc:
        # redis-py's messages name the host, not the password; scrubbed all the same.
        raise BenchError(f"--redis {redact_url(url)}: cannot connect: {scrub(str(exc), url_secrets(url))}") from None


@contextlib.contextmanager
def _embedded_redis() -> Iterator[str]:
    # fakeredis runs Lua scripts only with lupa installed.
    if importlib.util.find_spec("fakeredis") is None or importlib.util.find_spec("lupa") is None:
        raise BenchError(
            "several processes need a shared store: install the embedded one (pip install 'ratelimit-fleet[bench]') "
            "or pass --redis URL"
        )
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"redis://127.0.0.1:{server.server_address[1]}/0"
    try:
        # fakeredis's server hangs up on a connection after any error reply, NOSCRIPT
        # and "Function not found" included, so the call that follows a first miss
        # would find it closed: load the library, and every script for a client that
        # calls scripts, before any worker asks (the group's decides for an adaptive
        # limiter: its own algorithm and the learned pace).
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            preload(client)
        finally:
            client.close()
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- the run ---------------------------------------------------------------------------


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    # A Ctrl-C reaches every process in the terminal's group; one arriving while a
    # worker is still importing would kill it with a traceback. Children inherit the
    # blocked mask, and unblock it once they ignore SIGINT.
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _sigint_noted() -> Iterator[threading.Event]:
    # Ctrl-C as a flag that the collecting loop reads, not a KeyboardInterrupt raised
    # wherever the main thread is: one raised inside a finalizer is printed and
    # dropped, and the run would go on to its end. (A run in another thread, as tests
    # make, keeps the default.)
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, frame: object) -> None:
        noted.set()

    old = signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, old)


def _stop_all(processes: list[Any]) -> None:
    end = time.monotonic() + EXIT_GRACE
    for process in processes:
        process.join(timeout=max(0.0, end - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=EXIT_GRACE)
        if process.is_alive():
            process.kill()
            process.join(timeout=EXIT_GRACE)


Progress = Callable[[float, int], None]


def _run_workers(
    config: BenchConfig,
    spec: LimiterSpec,
    redis_url: str | None,
    store_timeout: float | None,
    target: str,
    on_start: Callable[[], None],
    progress: Progress | None,
) -> tuple[list[WorkerReport], float, float, bool]:
    context = multiprocessing.get_context("spawn")
    ready: Any = context.Queue()
    results: Any = context.Queue()
    start, stop = context.Event(), context.Event()
    begin = context.Value("d", 0.0, lock=False)
    granted = context.Value("q", 0)
    calls_left = None if config.calls is None else context.Value("q", config.calls)
    name = f"bench-{uuid.uuid4().hex[:12]}"
    processes = []
    for index in range(config.processes):
        plan = WorkerPlan(
            index, spec, redis_url, config.cluster, store_timeout, name, target, config.threads, config.tasks,
            config.seconds, os.getpid(), feedback=config.adaptive,
        )  # fmt: skip
        args = (plan, ready, start, begin, stop, results, granted, calls_left)
        processes.append(context.Process(target=run_worker, args=args, name=f"ratelimit-bench-{index}", daemon=True))
    reports: dict[int, WorkerReport] = {}
    interrupted = False
    try:
        with _sigint_blocked():
            for process in processes:
                process.start()
        _await_ready(processes, ready)
        on_start()
        begin.value = time.monotonic()
        start.set()
        try:
            with _sigint_noted() as ctrl_c:
                _collect(processes, results, reports, begin.value, config.seconds, stop, granted, progress, ctrl_c)
        except KeyboardInterrupt:
            interrupted = True
        ended = time.monotonic()
        if interrupted or len(reports) < len(processes):
            stop.set()
            _collect(processes, results, reports, begin.value, 0.0, stop, granted, None, wait=EXIT_GRACE)
    finally:
        stop.set()
        _stop_all(processes)
        if config.redis is not None and redis_url == config.redis:
            _forget_budget(redis_url, config.cluster, name)
    return [reports[i] for i in sorted(reports)], begin.value, ended, interrupted


def _forget_budget(url: str, cluster: bool, name: str) -> None:
    """Delete the run's keys from the user's Redis: the budget is the run's own (a name
    no one else uses), and what its script keeps would stay (what the code says, a
    day). One SCAN pass (on a Cluster, of each master), after the workers are gone; a
    failure leaves the keys to their TTLs."""
    with contextlib.suppress(RateLimitError, redis.exceptions.RedisError, OSError, ValueError):
        backend = RedisBackend.from_url(url, cluster=cluster, coalesce=False)
        try:
            client: Any = backend.client
            keys = list(client.scan_iter(match=f"ratelimit:{{{tag(name)}*", count=1000))
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.unlink(key)  # one key a call: a Cluster's keys of keyed budgets sit in many slots
            pipe.execute()
        finally:
            backend.close()


def _await_ready(processes: list[Any], ready: Any) -> None:
    waiting = set(range(len(processes)))
    end = time.monotonic() + START_TIMEOUT
    while waiting:
        try:
            index, error = ready.get(timeout=0.1)
            if error is not None:
                raise BenchError(error)
            waiting.discard(index)
        except queue.Empty:
            for index in waiting:
                code = processes[index].exitcode
                if code is not None:
                    raise BenchError(f"worker {index} exited with code {code} before the run started") from None
            if time.monotonic() > end:
                raise BenchError(f"workers {sorted(waiting)} did not start within {START_TIMEOUT:g} s") from None


def _collect(
    processes: list[Any], results: Any, reports: dict[int, WorkerReport], begin: float, seconds: float | None,
    stop: Any, granted: Any, progress: Progress | None, ctrl_c: threading.Event | None = None,
    wait: float | None = None,
) -> None:  # fmt: skip
    """Gather reports until every worker has sent one (or ``wait`` seconds pass); a
    KeyboardInterrupt once ``ctrl_c`` is set."""
    end = None if wait is None else time.monotonic() + wait
    give_up = None if seconds is None else begin + seconds + REPORT_GRACE
    while len(reports) < len(processes):
        if ctrl_c is not None and ctrl_c.is_set():
            raise KeyboardInterrupt
        now = time.monotonic()
        if end is not None and now > end:
            return
        if give_up is not None and now > give_up:
            stop.set()
        try:
            report: WorkerReport = results.get(timeout=0.2)
            reports[report.index] = report
            continue
        except queue.Empty:
            pass
        if progress is not None:
            progress(time.monotonic() - begin, int(granted.value))
        dead = [i for i, process in enumerate(processes) if i not in reports and process.exitcode is not None]
        if dead and wait is None:
            raise BenchError(f"worker {dead[0]} exited with code {processes[dead[0]].exitcode} without a report")
        if dead and len(reports) + len(dead) == len(processes):
            return  # cut short: report what the others did


def _backend_for(config: BenchConfig, stack: contextlib.ExitStack) -> tuple[str | None, str]:
    if config.store is not None:
        try:
            path = SQLiteBackend.from_url(config.store).path  # made (or checked) before the workers start
        except (OSError, ValueError, RateLimitError) as exc:
            hint = sqlite_path_hint(config.store)
            raise BenchError(f"--store {config.store}: {exc}" + ("" if hint is None else f" ({hint})")) from None
        return config.store, f"SQLite file {path}"
    if config.redis is not None:
        _probe_redis(config.redis, config.cluster)
        kind = "Redis Cluster" if config.cluster else "Redis"
        return config.redis, f"{kind} at {redact_url(config.redis)}"
    if config.processes == 1:
        return None, "in-process memory (one process)"
    url = stack.enter_context(_embedded_redis())
    return url, "embedded Redis-protocol server (fakeredis, real Lua scripts)"


def run_bench(config: BenchConfig, progress: Progress | None = None) -> BenchResult:
    """Run the benchmark ``config`` describes; ``progress(elapsed, grants)`` is told as it goes.

    Raises:
        BenchError: the store or the target cannot be reached, or a worker died.
    """
    spec = limiter_spec(config)
    with contextlib.ExitStack() as stack:
        provider: FakeProvider | None = None
        drop: _Drop | None = None
        on_start = _then()  # nothing to do for a target of the user's
        if config.target is None:
            provider = stack.enter_context(_provider(config))
            target, target_name = provider.url, _provider_name(config)
            on_start = provider.reset
            plan = drop_plan(config) if config.adaptive else None
            if plan is not None:
                drop = _Drop(provider, *plan)
                stack.callback(drop.cancel)
                on_start = _then(provider.reset, drop.start)
        else:
            _probe_target(config.target)
            target, target_name = config.target, redact_url(config.target)
        redis_url, backend_name = _backend_for(config, stack)
        # The embedded server shares this process's GIL with the provider: under load it
        # can answer more slowly than the 0.5 s a limiter allows a real Redis.
        embedded = redis_url is not None and config.redis is None and config.store is None
        store_timeout = EMBEDDED_TIMEOUT if embedded else None
        reports, begin, ended, interrupted = _run_workers(
            config, spec, redis_url, store_timeout, target, on_start, progress
        )
        if drop is not None:
            drop.cancel()  # a run cut short before the drop: none after the report either
        stats = None if provider is None else provider.stats()
    calls = [call for report in reports for record in report.calls for call in record]
    if interrupted:
        elapsed = ended - begin
    elif config.calls is not None:
        # Up to the last grant: what came after it was the last call and reporting.
        elapsed = max((call[0] for call in calls), default=ended) - begin
        if config.seconds is not None:
            elapsed = min(elapsed, config.seconds)
    else:
        elapsed = config.seconds or ended - begin
    result = _summarize(config, spec, backend_name, target_name, reports, begin, elapsed, interrupted, stats)
    if config.adaptive and stats is not None:
        dropped = None if drop is None or drop.done_at is None else drop.done_at - begin
        result = replace(result, adaptive=_adaptive(config, stats, begin, elapsed, dropped, reports))
    return result


def _then(*steps: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        for step in steps:
            step()

    return run


def _provider_name(config: BenchConfig) -> str:
    if config.adaptive:
        name = f"built-in FakeProvider (hidden: {config.limit}, burst {hidden_burst(config):g}, no rate-limit headers"
        plan = drop_plan(config)
        if plan is not None:
            name += f"; drops to {plan[0]} at {plan[1]:g} s"
    elif config.burst is not None:
        name = f"built-in FakeProvider ({config.limit}, burst {config.burst:g}"
    else:
        name = f"built-in FakeProvider ({config.limit}, " + ("any sliding window" if config.strict else "fixed windows")
    if config.latency:
        name += f", answers {config.latency * 1000:g} ms late"
    return name + ")"


def _adaptive(
    config: BenchConfig, stats: Any, begin: float, elapsed: float, dropped: float | None, reports: list[WorkerReport]
) -> AdaptiveRun:
    """The adaptive measures, from the provider's timeline (moved to seconds from ``begin``)."""
    served = [t - begin for t in stats.served_at]
    refused = [t - begin for t in stats.refused_at]
    plan = drop_plan(config)
    new_limit = None if plan is None else plan[0].per_second
    measured = adaptive_stats(served, refused, elapsed, config.limit.per_second, dropped, new_limit)
    learned = sorted(sample for report in reports for sample in report.learned)
    return AdaptiveRun(
        stats=measured,
        burst=hidden_burst(config),
        ceiling=adaptive_ceiling(config),
        floor=config.floor,
        served=tuple(timeline(served, 0.0, elapsed, ADAPTIVE_BIN)),
        refused=tuple(timeline(refused, 0.0, elapsed, ADAPTIVE_BIN)),
        bin_seconds=ADAPTIVE_BIN,
        learned=tuple(learned),
    )


def _summarize(
    config: BenchConfig, spec: LimiterSpec, backend: str, target: str, reports: list[WorkerReport], begin: float,
    elapsed: float, interrupted: bool, stats: Any,
) -> BenchResult:  # fmt: skip
    calls = [call for report in reports for record in report.calls for call in record]
    times = sorted(call[0] for call in calls)
    statuses: dict[int, int] = {}
    for call in calls:
        statuses[call[2]] = statuses.get(call[2], 0) + 1
    served_times = sorted(call[0] for call in calls if 200 <= call[2] < 300)
    window = config.limit.window
    most = stats.max_in_window if stats is not None else most_in_window(served_times, window)
    waits = [call[1] for call in calls]
    trips = [report.round_trips for report in reports]
    width = 1.0 if elapsed >= 5 else 0.25
    errors = tuple(dict.fromkeys(error for report in reports for error in report.errors))
    return BenchResult(
        config=config,
        limiter=spec,
        backend=backend,
        target=target,
        interrupted=interrupted,
        elapsed=elapsed,
        grants=len(calls),
        allowed=allowed(spec.algorithm, spec.first, spec.second, elapsed),
        configured_rate=spec.rate,
        provider_rate=config.limit.per_second,
        statuses=dict(sorted(statuses.items())),
        refused=statuses.get(429, 0),
        no_answer=statuses.get(NO_ANSWER, 0),
        most_in_window=most,
        wait=(percentile(waits, 0.5), percentile(waits, 0.95), percentile(waits, 0.99), max(waits, default=0.0)),
        round_trips=None if any(t is None for t in trips) or not trips else sum(t for t in trips if t is not None),
        acquires=len(calls) + sum(report.unfinished + report.overflows for report in reports),
        overflows=sum(report.overflows for report in reports),
        cpu=sum(report.cpu for report in reports),
        grants_per_caller=tuple(len(record) for report in reports for record in report.calls),
        timeline=tuple(timeline(times, begin, elapsed, width)),
        timeline_width=width,
        errors=errors,
    )


def sweep_configs(config: BenchConfig) -> list[BenchConfig]:
    """The settings ``--sweep`` tries.

    Headroom 0 %, 2.5 %, 5 %, 10 % and 15 % at the configured guard and the sized
    capacity; then, at the configured headroom, no guard (if one is configured: what
    send jitter costs without the margin); for a token bucket also the provider's
    whole burst, half the sized capacity and 1 (a smaller burst is the other way to
    stay clear of the limit).
    """
    runs = [replace(config, headroom=h) for h in (0.0, 0.025, 0.05, 0.1, 0.15)]
    if config.guard > 0:
        runs.append(replace(config, guard=0.0))
    sized = limiter_spec(config).first
    if config.algorithm == "token-bucket":
        others = {max(1.0, float(int(sized / 2))), 1.0}
        if config.burst is not None:
            others.add(float(config.burst))
        for capacity in sorted(others - {sized}, reverse=True):
            runs.append(replace(config, capacity=capacity))
    return runs
