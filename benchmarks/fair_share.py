"""What a fair share's decision costs, against the plain limiter's and the floors.

Two parts, each a ratio to a floor measured in the same run, candidates and floor
taking turns round after round (the median over the rounds of each round's ratio):

- **in process**: one ``acquire()`` (which never waits here) over ``with Lock():
  monotonic()``: the plain ``TokenBucket``, and a ``FairShare`` of one, for one tenant
  and for 100 tenants taking turns.
- **server**: the Redis server's microseconds per decision (``INFO commandstats``) over
  the least a shared token bucket can do, one script of ``TIME``, ``GET`` and ``SET
  PX``: the plain token bucket's function, and the fair share's, for one tenant and
  for 100 taking turns.

The budget refills so fast (1e9 a second, a burst of 1e12) that nothing waits, and each
tenant's pace has passed by its next request: every fair decision ages one tenant out
and paces one, the work of a busy budget's decision without its sleeps. ``lead`` is a
second, so that no request is deferred. With ``--redis`` it starts a redis-server of its
own on ``--port`` (in a temporary folder, stopped after), whose statistics it resets::

    python benchmarks/fair_share.py [--parts in-process,server] [--port 6391]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from itertools import cycle, repeat
from typing import Any

import redis

from ratelimit import FairShare, TokenBucket
from ratelimit._stores.redis.scripts import library

#: The least a shared token bucket can do (as ``benchmarks/hot_path.py``'s).
FLOOR = """
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PX', 60000)
return v
"""
RATE, BURST = 1e9, 1e12
Call = Callable[[], object]


def _spread(xs: list[float]) -> str:
    low, _, high = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):5.2f} ({low:4.2f}-{high:4.2f})"


def _timed(call: Call, calls: int) -> float:
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in repeat(None, calls):
            call()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def _in_process(rounds: int, calls: int) -> None:
    lock = threading.Lock()
    monotonic = time.monotonic

    def floor() -> None:
        with lock:
            monotonic()

    plain = TokenBucket(BURST, RATE)
    one = FairShare(TokenBucket(BURST, RATE), lead=1.0).for_key("a")
    many_share = FairShare(TokenBucket(BURST, RATE), lead=1.0)
    views = cycle([many_share.for_key(f"tenant-{i}") for i in range(100)])

    def many() -> None:
        next(views).acquire()

    candidates: dict[str, Call] = {
        "plain TokenBucket.acquire()": plain.acquire,
        "FairShare, one tenant": one.acquire,
        "FairShare, 100 tenants in turn": many,
    }
    floors: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        floors.append(_timed(floor, calls))
        for name, call in candidates.items():
            ratios[name].append(_timed(call, calls) / floors[-1])
    plain_cost = ratios["plain TokenBucket.acquire()"]
    print(f"in process: over `with Lock(): monotonic()` ({statistics.median(floors) * 1e9:.0f} ns), {rounds} rounds")
    for name, xs in ratios.items():
        over_plain = [x / p for x, p in zip(xs, plain_cost, strict=True)]
        print(f"  {name:32s} floor x {_spread(xs)}   plain x {_spread(over_plain)}")


def _per_call(admin: redis.Redis, call: Call, calls: int, command: str) -> float:
    admin.config_resetstat()
    for _ in range(calls):
        call()
    stats: dict[str, Any] = admin.info("commandstats")
    found = stats[f"cmdstat_{command}"]
    return float(found["usec"]) / float(found["calls"])


def _server(port: int, rounds: int, calls: int) -> None:
    folder = tempfile.mkdtemp(prefix="fair-bench-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )
    try:
        admin = redis.Redis(port=port)
        for _ in range(100):
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        lib = library()
        admin.function_load(lib.source, replace=True)
        floor = admin.script_load(FLOOR)
        plain_key = "ratelimit:{bench-plain}:token_bucket"
        plain: list[Any] = [lib.function("token_bucket"), 2, plain_key, "ratelimit:{bench-plain}:config"]
        plain_args = ["reserve", "", "1.0", "0.0", repr(BURST), repr(RATE), "0.0", "0"]
        line = "ratelimit:{bench-fair}:fair:token_bucket"
        fair: list[Any] = [lib.function("fair_token_bucket"), 3, line, f"{line}:tenants", f"{line}:weights"]
        tail = ["", "", "1.0", "10000", repr(RATE), repr(BURST), repr(RATE)]
        tenants = cycle([f"tenant-{i}" for i in range(100)])

        candidates: dict[str, Call] = {
            "plain token_bucket": lambda: admin.fcall(*plain, *plain_args),
            "fair, one tenant": lambda: admin.fcall(*fair, "ask", "", "a", "1.0", "1.0", *tail),
            "fair, 100 tenants in turn": lambda: admin.fcall(*fair, "ask", "", next(tenants), "1.0", "1.0", *tail),
        }
        floors: list[float] = []
        per: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):
            floors.append(_per_call(admin, lambda: admin.evalsha(floor, 1, "bench-floor"), calls, "evalsha"))
            for name, call in candidates.items():
                per[name].append(_per_call(admin, call, calls, "fcall"))
        floor_us = statistics.median(floors)
        print(f"server: us per decision over the floor TIME/GET/SET PX ({floor_us:.2f} us), {rounds} rounds")
        for name, xs in per.items():
            over_floor = [x / f for x, f in zip(xs, floors, strict=True)]
            over_plain = [x / p for x, p in zip(xs, per["plain token_bucket"], strict=True)]
            print(
                f"  {name:28s} {statistics.median(xs):5.2f} us   floor x {_spread(over_floor)}"
                f"   plain x {_spread(over_plain)}"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="in-process,server")
    parser.add_argument("--port", type=int, default=6391, help="a free port for the server part's redis-server")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "in-process" in parts:
        _in_process(args.rounds, args.calls * 5)
    if "server" in parts:
        _server(args.port, args.rounds, args.calls)


if __name__ == "__main__":
    main()
