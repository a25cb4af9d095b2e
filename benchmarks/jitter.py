"""Send jitter: how late a granted request really leaves, quiet and with a busy neighbour.

A limiter decides a grant for a moment ``at`` and tells its caller to sleep until
then; the request leaves when the caller wakes and gets a core back, which on a
loaded machine is some milliseconds late, and not evenly: a strict provider sees
one late batch and the next punctual one closer together than they were granted.
``guard=`` (``ratelimit._limiting.guard``) is the margin against that; this script measures
what it must cover.

P processes of T threads (default 4 x 4) saturate one shared limiter (a token bucket
of capacity 1, so nearly every acquire sleeps): in-process state for one process, a
real Redis for several (``--redis``, default ``redis://127.0.0.1:6379/0``; without
one reachable, fakeredis's TCP server, as ``ratelimit bench`` does). Each caller
notes ``time.monotonic()`` just before ``acquire()``; the grant was planned for that
moment plus the wait ``acquire()`` returns, and the lateness is the time it returned
minus that plan. (The plan is taken on the caller's side of the round trip to
Redis, so the figure includes the trip: an upper bound, which is what a margin
wants.) With ``--http`` each caller then sends a GET to a loopback HTTP server in a
process of its own, which notes the lateness on arrival instead: what a provider
counts, with the connection and the server's own scheduling included.

Each condition runs twice over: ``quiet``, and ``loaded`` with one CPU-burning
process per core beside it. Absolute figures depend on the machine and on what else
it runs at the moment: run it where the limiter will run, and more than once::

    python benchmarks/jitter.py                      # 4 x 4, quiet then loaded
    python benchmarks/jitter.py --http --seconds 10  # lateness as the provider sees it
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis

from ratelimit import AcquireTimeout, RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import percentile

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class Figures:
    condition: str
    samples: int
    #: Seconds.
    p50: float
    p99: float
    p999: float
    most: float

    def row(self) -> str:
        ms = [f"{value * 1000:8.2f}" for value in (self.p50, self.p99, self.p999, self.most)]
        return f"{self.condition:<8} {self.samples:>8}  " + "  ".join(ms)


def _figures(condition: str, lateness: list[float]) -> Figures:
    return Figures(
        condition,
        len(lateness),
        percentile(lateness, 0.5),
        percentile(lateness, 0.99),
        percentile(lateness, 0.999),
        max(lateness, default=float("nan")),
    )


# -- the callers -----------------------------------------------------------------------


def _caller(limiter: TokenBucket, deadline: float, target: str | None, out: list[float]) -> None:
    # One kept-alive connection per caller, as an HTTP client pool would have it.
    connection = None if target is None else http.client.HTTPConnection(urlsplit(target).netloc, timeout=10)
    while True:
        asked = time.monotonic()
        try:
            wait = limiter.acquire(timeout=max(0.0, deadline - asked))
        except AcquireTimeout:
            return
        planned = asked + wait
        if connection is None:
            out.append(time.monotonic() - planned)
        else:
            # The server notes the lateness on arrival.
            connection.request("GET", f"/?planned={planned!r}")
            connection.getresponse().read()


def _worker(
    index: int, redis_url: str | None, name: str, rate: float, threads: int, target: str | None,
    ready: Any, start: Any, begin: Any, seconds: float, results: Any,
) -> None:  # fmt: skip
    backend = None if redis_url is None else RedisBackend.from_url(redis_url)
    limiter = TokenBucket(1, rate, backend=backend, name=name if backend is not None else None)
    if backend is not None:
        limiter.try_acquire()  # connects and loads the script before the clock starts
    ready.put(index)
    start.wait()
    deadline = begin.value + seconds
    lists: list[list[float]] = [[] for _ in range(threads)]
    running = [threading.Thread(target=_caller, args=(limiter, deadline, target, out)) for out in lists]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    results.put([value for out in lists for value in out])


def _burn() -> None:
    while True:
        pass


@contextlib.contextmanager
def _neighbours(count: int) -> Iterator[None]:
    context = multiprocessing.get_context("spawn")
    burners = [context.Process(target=_burn, daemon=True) for _ in range(count)]
    for burner in burners:
        burner.start()
    try:
        time.sleep(0.5)  # let them reach the busy loop before measuring
        yield
    finally:
        for burner in burners:
            burner.terminate()
        for burner in burners:
            burner.join(5)


# -- the provider's side ---------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    # The default backlog of 5 drops connections under a burst, and each dropped SYN
    # costs its client a one-second retransmit: that would measure the kernel.
    request_queue_size = 1024


def _serve(ready: Any, stop: Any, results: Any) -> None:
    seen: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle's algorithm the second
        # waits for the client's delayed ACK (40 ms), and so does its next request.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            arrived = time.monotonic()
            planned = float(parse_qs(urlsplit(self.path).query)["planned"][0])
            seen.append(arrived - planned)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    ready.put(f"http://127.0.0.1:{server.server_address[1]}/")
    stop.wait()
    server.shutdown()
    results.put(seen)


@contextlib.contextmanager
def _recorder(enabled: bool) -> Iterator[tuple[str | None, Any]]:
    if not enabled:
        yield None, None
        return
    context = multiprocessing.get_context("spawn")
    ready, stop, results = context.Queue(), context.Event(), context.Queue()
    process = context.Process(target=_serve, args=(ready, stop, results), daemon=True)
    process.start()
    try:
        yield ready.get(timeout=60), (stop, results)
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.terminate()


# -- a run -----------------------------------------------------------------------------


def _store(url: str) -> tuple[str, Any]:
    """A Redis URL for the workers: ``url`` if it answers, else an embedded server."""
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        return url, None
    except (redis.exceptions.RedisError, OSError):
        from fakeredis import TcpFakeServer

        server = TcpFakeServer(("127.0.0.1", 0))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"redis://127.0.0.1:{server.server_address[1]}/0", server


def measure(args: argparse.Namespace, condition: str, redis_url: str | None) -> Figures:
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    start = context.Event()
    begin = context.Value("d", 0.0, lock=False)
    name = f"jitter-{uuid.uuid4().hex[:8]}"
    with _recorder(args.http) as (target, server):
        workers = [
            context.Process(
                target=_worker,
                args=(i, redis_url, name, args.rate, args.threads, target, ready, start, begin, args.seconds, results),
                daemon=True,
            )
            for i in range(args.processes)
        ]
        for worker in workers:
            worker.start()
        for _ in workers:
            ready.get(timeout=60)
        begin.value = time.monotonic()
        start.set()
        lateness: list[float] = []
        for _ in workers:
            lateness.extend(results.get(timeout=args.seconds + 60))
        for worker in workers:
            worker.join(10)
        if server is not None:
            stop, seen = server
            stop.set()
            try:
                lateness = seen.get(timeout=30)
            except queue.Empty:
                raise SystemExit("the HTTP recorder did not report") from None
    return _figures(condition, lateness)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--threads", type=int, default=4, help="threads per process (default 4)")
    parser.add_argument("--rate", type=float, default=200.0, help="grants per second, all callers (default 200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per condition (default 10)")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help=f"the shared store (default {DEFAULT_REDIS})")
    parser.add_argument("--condition", choices=["quiet", "loaded", "both"], default="both")
    parser.add_argument("--http", action="store_true", help="measure on arrival at a loopback HTTP server")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    redis_url, embedded = (None, None) if args.processes == 1 else _store(args.redis)
    store = "in-process" if redis_url is None else ("embedded fakeredis" if embedded else redis_url)
    conditions = ["quiet", "loaded"] if args.condition == "both" else [args.condition]
    rows = []
    for condition in conditions:
        with _neighbours(os.cpu_count() or 1) if condition == "loaded" else contextlib.nullcontext():
            rows.append(measure(args, condition, redis_url))
    if embedded is not None:
        embedded.shutdown()
    where = "on arrival at a loopback HTTP server" if args.http else "when acquire() returns"
    if args.json:
        print(json.dumps({"store": store, "measured": where, "cpus": os.cpu_count(), "runs": [vars(r) for r in rows]}))
        return
    print(f"{args.processes} processes x {args.threads} threads, {args.rate:g}/s, store {store}; lateness {where}")
    print(f"{'':<8} {'samples':>8}  {'p50 ms':>8}  {'p99 ms':>8}  {'p99.9 ms':>8}  {'max ms':>8}")
    for row in rows:
        print(row.row())


if __name__ == "__main__":
    main()
