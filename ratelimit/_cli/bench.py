"""``ratelimit bench``: run real workers through a limiter against a provider, and measure.

P worker processes of T threads (or T threads of K asyncio tasks each) acquire from
one limiter and then call the target, for a number of seconds or calls. The target
is the package's :class:`~ratelimit.testing.FakeProvider` on loopback unless a URL
is given. The limiter's state lives in the worker's own memory when there is one
worker process, in an embedded Redis-protocol server (fakeredis's TCP server,
running the real Lua scripts, in this process) for several, or in a real Redis
(``--redis``).

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
from typing import Any
from urllib.parse import urlsplit

import redis

from .._stores.scripts import ALGORITHMS, single_script
from ..testing import FakeProvider
from .bench_stats import allowed, jain, most_in_window, percentile, timeline
from .bench_worker import NO_ANSWER, LimiterSpec, WorkerPlan, WorkerReport, run_worker
from .rates import Rate
from .redact import redact_url, scrub, url_secrets
from .sizing import DEFAULT_GUARD, DEFAULT_HEADROOM, size

__all__ = ["DEFAULT_LIMIT", "BenchConfig", "BenchError", "BenchResult", "limiter_spec", "run_bench", "sweep_configs"]

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
    cluster: bool = False
    target: str | None = None

    @property
    def callers(self) -> int:
        return self.processes * self.threads * max(1, self.tasks)


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

    @property
    def achieved_rate(self) -> float:
        return self.grants / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def fairness(self) -> float:
        return jain(self.grants_per_caller)


def limiter_spec(config: BenchConfig) -> LimiterSpec:
    """The limiter ``ratelimit size`` recommends for this configuration."""
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
    if config.burst is None:
        provider = FakeProvider(limit, config.limit.window, mode="sliding_log" if config.strict else "fixed_window")
    else:
        provider = FakeProvider(limit, config.limit.window, mode="token_bucket", burst=_whole("--burst", config.burst))
    with provider:
        yield provider


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
            "several processes need a shared store: install the embedded one (pip install 'ratelimit[bench]') "
            "or pass --redis URL"
        )
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"redis://127.0.0.1:{server.server_address[1]}/0"
    try:
        # fakeredis's server hangs up on a connection after any error reply, NOSCRIPT
        # included, so the EVAL that follows a first EVALSHA would find it closed:
        # load every script before any worker asks.
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            for kind in ALGORITHMS:
                client.script_load(single_script(kind).source)
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
            config.seconds, os.getpid(),
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
            _collect(processes, results, reports, begin.value, config.seconds, stop, granted, progress)
        except KeyboardInterrupt:
            interrupted = True
        ended = time.monotonic()
        if interrupted or len(reports) < len(processes):
            stop.set()
            _collect(processes, results, reports, begin.value, 0.0, stop, granted, None, wait=EXIT_GRACE)
    finally:
        stop.set()
        _stop_all(processes)
    return [reports[i] for i in sorted(reports)], begin.value, ended, interrupted


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
    stop: Any, granted: Any, progress: Progress | None, wait: float | None = None,
) -> None:  # fmt: skip
    """Gather reports until every worker has sent one (or ``wait`` seconds pass)."""
    end = None if wait is None else time.monotonic() + wait
    give_up = None if seconds is None else begin + seconds + REPORT_GRACE
    while len(reports) < len(processes):
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
        if config.target is None:
            provider = stack.enter_context(_provider(config))
            target = provider.url
            target_name = f"built-in FakeProvider ({config.limit}" + (
                f", burst {config.burst:g})"
                if config.burst is not None
                else (", any sliding window)" if config.strict else ", fixed windows)")
            )
        else:
            _probe_target(config.target)
            target, target_name = config.target, redact_url(config.target)
        redis_url, backend_name = _backend_for(config, stack)
        # The embedded server shares this process's GIL with the provider: under load it
        # can answer more slowly than the 0.5 s a limiter allows a real Redis.
        store_timeout = EMBEDDED_TIMEOUT if redis_url is not None and config.redis is None else None
        reports, begin, ended, interrupted = _run_workers(
            config, spec, redis_url, store_timeout, target, provider.reset if provider else lambda: None, progress
        )
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
    return _summarize(config, spec, backend_name, target_name, reports, begin, elapsed, interrupted, stats)


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
