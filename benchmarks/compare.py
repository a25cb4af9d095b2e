"""The same workload through ``ratelimit``, ``limits`` and ``pyrate-limiter``, side by side.

Threads share one limiter kept in Redis, acquire, then call the package's
``FakeProvider`` (a token bucket of ``--burst`` refilled at ``--limit``, or fixed
windows of ``--limit`` without a burst), for ``--seconds``. Each library is
configured as its documentation suggests for the provider's terms less the
headroom, and used the way its users would:

- ``ratelimit``: ``TokenBucket(capacity, refill)`` as ``ratelimit size`` sizes it;
  ``acquire()`` reserves and sleeps exactly the wait.
- ``limits``: a moving window of ``floor(limit x (1 - headroom))`` per second (its
  finest unit) and the usual recipe around a non-blocking ``hit()``: on a refusal,
  sleep until ``get_window_stats()``'s reset and try again.
- ``pyrate-limiter``: GCRA with its Redis state store, the same rate and burst, and
  its blocking ``try_acquire`` (which re-checks after the wait plus ``buffer_ms``).

Round trips are counted at the clients (every request sent on a connection, a
pipeline counting once, the connection's own set-up not counted): the server's
``total_commands_processed`` would count the commands a Lua script runs inside as
well. Without ``--redis`` a private ``redis-server`` is started on a free loopback
port (and stopped). Run it with the ``compare`` dependency group (pip >= 25.1)::

    pip install -e . --group compare
    python benchmarks/compare.py --limit 100/s --burst 10 --threads 8 --seconds 5
"""

from __future__ import annotations

import argparse
import math
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from ratelimit import RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import most_in_window, percentile
from ratelimit._cli.bench_worker import _Target
from ratelimit._cli.sizing import token_bucket_size
from ratelimit._validate import Rate, parse_rate
from ratelimit.testing import FakeProvider

Acquire = Callable[[float], bool]
"""Blocks until granted (``True``) or until the run's end has passed (``False``)."""


@dataclass(frozen=True)
class Row:
    name: str
    grants: int
    seconds: float
    refused: int
    most_in_window: int
    commands: int
    p99_wait: float


@contextmanager
def private_redis() -> Iterator[str]:
    """A ``redis-server`` of our own on a free loopback port, for honest command counts."""
    if shutil.which("redis-server") is None:
        sys.exit("compare.py: redis-server is not installed: pass --redis URL")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = tempfile.mkdtemp(prefix="ratelimit-compare-")
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen([*command, "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one round trip per send."""

    sent = 0
    _lock = threading.Lock()

    def on_connect_check_health(self, check_health: bool = True) -> None:
        # HELLO, CLIENT SETINFO and the like are the connection's, not the limiter's.
        self._setting_up = True
        try:
            super().on_connect_check_health(check_health)
        finally:
            self._setting_up = False

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not getattr(self, "_setting_up", False):
            with CountingConnection._lock:
                CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_pool(url: str) -> redis.ConnectionPool:
    # The same socket settings for every library: those RedisBackend.from_url uses.
    return redis.ConnectionPool.from_url(
        url, connection_class=CountingConnection, socket_timeout=0.5, socket_connect_timeout=0.5
    )


# -- the contenders ----------------------------------------------------------------------


def ours(url: str, limit: Rate, burst: int | None, headroom: float) -> Acquire:
    bucket = token_bucket_size(limit, burst, headroom)
    backend = RedisBackend(redis.Redis(connection_pool=counting_pool(url)))
    limiter = TokenBucket(bucket.capacity, bucket.refill_per_sec, backend=backend, name=f"compare-{uuid.uuid4().hex}")

    def acquire(deadline: float) -> bool:
        try:
            limiter.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return False
        return True

    return acquire


def limits_moving_window(url: str, limit: Rate, burst: int | None, headroom: float) -> Acquire:
    from limits import RateLimitItemPerSecond
    from limits.storage import RedisStorage
    from limits.strategies import MovingWindowRateLimiter

    # One second is the finest window it offers: the provider's rate less the headroom.
    item = RateLimitItemPerSecond(max(1, math.floor(limit.per_second * (1 - headroom))))
    limiter = MovingWindowRateLimiter(RedisStorage(url, connection_pool=counting_pool(url)))
    key = f"compare-{uuid.uuid4().hex}"

    def acquire(deadline: float) -> bool:
        while not limiter.hit(item, key):
            if time.monotonic() > deadline:
                return False
            stats = limiter.get_window_stats(item, key)
            time.sleep(max(0.0, float(stats.reset_time) - time.time()))
        return time.monotonic() <= deadline

    return acquire


def pyrate_gcra(url: str, limit: Rate, burst: int | None, headroom: float) -> Acquire:
    from pyrate_limiter import GCRA, Duration, Limiter, RedisStateStore, StateBucket
    from pyrate_limiter import Rate as PyrateRate

    bucket = token_bucket_size(limit, burst, headroom)
    # Its rates are whole requests per interval: the refill per second, rounded down.
    rate = PyrateRate(math.floor(bucket.refill_per_sec), Duration.SECOND, burst=int(bucket.capacity))
    store = RedisStateStore(redis.Redis(connection_pool=counting_pool(url)), f"compare-{uuid.uuid4().hex}")
    limiter = Limiter(StateBucket([rate], algorithm=GCRA(), store=store))

    def acquire(deadline: float) -> bool:
        granted = limiter.try_acquire("compare", blocking=True)
        return bool(granted) and time.monotonic() <= deadline

    return acquire


CONTENDERS: dict[str, Callable[[str, Rate, int | None, float], Acquire]] = {
    "ratelimit TokenBucket": ours,
    "limits moving window + sleep": limits_moving_window,
    "pyrate-limiter GCRA": pyrate_gcra,
}


# -- one run -------------------------------------------------------------------------------


def run(name: str, url: str, args: argparse.Namespace) -> Row:
    acquire = CONTENDERS[name](url, args.limit, args.burst, args.headroom)
    limit: Rate = args.limit
    if args.burst is None:
        provider = FakeProvider(int(limit.count), limit.window)
    else:
        provider = FakeProvider(int(limit.count), limit.window, mode="token_bucket", burst=args.burst)
    with provider:
        target = _Target(provider.url)
        calls: list[tuple[float, float, int]] = []
        before = CountingConnection.sent
        provider.reset()
        begin = time.monotonic()
        deadline = begin + args.seconds

        def caller() -> None:
            connection = target.connection()
            try:
                while True:
                    asked = time.monotonic()
                    if not acquire(deadline):
                        return
                    granted = time.monotonic()
                    calls.append((granted, granted - asked, target.call(connection)))
            finally:
                connection.close()

        threads = [threading.Thread(target=caller, daemon=True) for _ in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.seconds + 30)
        commands = CountingConnection.sent - before
        stats = provider.stats()
    served = sorted(t for t, _, status in calls if status == 200)
    return Row(
        name=name,
        grants=len(calls),
        seconds=args.seconds,
        refused=sum(1 for call in calls if call[2] == 429),
        most_in_window=max(stats.max_in_window, most_in_window(served, limit.window)),
        commands=commands,
        p99_wait=percentile([wait for _, wait, _ in calls], 0.99),
    )


def table(rows: list[Row], args: argparse.Namespace) -> str:
    limit: Rate = args.limit
    lines = [
        f"{args.threads} threads, {args.seconds:g} s, provider {limit}"
        + (" in fixed windows," if args.burst is None else f" with burst {args.burst},")
        + f" headroom {args.headroom:g}; round trips to Redis counted at the clients",
        "",
        f"{'':<30} {'granted':>8} {'rate/s':>8} {'429s':>6} {'max/window':>11} {'trips/grant':>11} {'p99 wait':>10}",
    ]
    for row in rows:
        per = f"{row.commands / row.grants:.2f}" if row.grants else "-"
        p99 = "-" if math.isnan(row.p99_wait) else f"{row.p99_wait * 1000:.1f} ms"
        lines.append(
            f"{row.name:<30} {row.grants:>8} {row.grants / row.seconds:>8.1f} {row.refused:>6}"
            f" {row.most_in_window:>11} {per:>11} {p99:>10}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--limit", type=parse_rate, default=Rate(100, 1), help="the provider's rate (default 100/s)")
    parser.add_argument("--burst", type=int, help="the provider's burst (default: none, fixed windows)")
    parser.add_argument("--headroom", type=float, default=0.05, help="fraction of the rate left unused (0.05)")
    parser.add_argument("--threads", type=int, default=8, help="callers sharing the limiter (default 8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run (default 5)")
    parser.add_argument("--redis", metavar="URL", help="a Redis of your own (default: a private redis-server)")
    args = parser.parse_args()
    missing = [name for name in ("limits", "pyrate_limiter") if not _importable(name)]
    if missing:
        sys.exit(f"compare.py: {', '.join(missing)} missing: pip install -e . --group compare")
    rows = []
    with private_redis() if args.redis is None else _given(args.redis) as url:
        for name in CONTENDERS:
            rows.append(run(name, url, args))
    print(table(rows, args))


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()
