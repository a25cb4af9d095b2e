"""What a calendar quota's decision costs the Redis server, against the floor.

The floor is the least a shared token bucket can do: one script of ``TIME``, ``GET``
and ``SET PX``. Against it, in rounds taken in turn on one server (a shared machine
drifts between runs): a token bucket's reserve (its fast path), a quota's reserve
(the full path: the quota has no fast path, and parses the boundaries it is sent,
which the function library caches between calls), a quota's refusal once spent, and a
composite of a bucket and a quota against a composite of two buckets. Each figure is
the median over the rounds of a batch's server time over its round's floor, with the
quartiles.

::

    python benchmarks/quota_cost.py --redis redis://127.0.0.1:6391/0

Point it at a Redis of its own: it flushes the server's functions, scripts and keys,
and reads ``INFO commandstats``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from hot_path import FLOOR

from ratelimit._algorithms.quota import Calendar
from ratelimit._stores.redis.scripts import library


def per_call(admin: redis.Redis, call: Callable[[], object], calls: int) -> float:
    admin.config_resetstat()
    for _ in range(calls):
        call()
    stats: dict[str, Any] = admin.info("commandstats")
    found = stats.get("cmdstat_fcall") or stats["cmdstat_evalsha"]
    return float(found["usec"]) / float(found["calls"])


def spread(xs: list[float]) -> str:
    low, _, high = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):5.2f} ({low:4.2f}-{high:4.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6391/0")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=2000, help="calls in each batch")
    args = parser.parse_args()
    admin = redis.Redis.from_url(args.redis)
    admin.function_flush()
    admin.script_flush()
    admin.flushall()
    lib = library()
    admin.function_load(lib.source, replace=True)
    floor = admin.script_load(FLOOR)
    run = uuid.uuid4().hex[:8]
    floor_key = f"quota-floor-{run}"
    # What a client sends around now: the day's boundaries in New York.
    days = Calendar("day", "America/New_York").boundaries(time.time())[1]

    def single(kind: str, name: str, p1: str, p2: str) -> Callable[[], object]:
        key = f"ratelimit:{{{name}}}:{kind}"
        call: list[Any] = [
            lib.function(kind),
            2,
            key,
            f"ratelimit:{{{name}}}:config",
            "reserve",
            "",
            "1",
            "0",
            p1,
            p2,
            "0",
            "0",
        ]
        return lambda: admin.fcall(*call)

    def group(name: str, members: list[tuple[str, str, str]]) -> Callable[[], object]:
        keys = [f"ratelimit:{{{name}}}:{i}:{kind}" for i, (kind, _, _) in enumerate(members)]
        call: list[Any] = [lib.function("group"), len(keys), *keys, "reserve", "", "0"]
        for kind, p1, p2 in members:
            call += [kind, "1", p1, p2]
        return lambda: admin.fcall(*call)

    spent = f"quota-spent-{run}"
    measured = {
        "token bucket, reserve (fast path)": single("token_bucket", f"tb-{run}", "1e12", "1e12"),
        "quota, reserve": single("quota", f"q-{run}", "1e12", days),
        "quota, refused (spent)": single("quota", spent, "1", days),
        "composite: bucket + bucket": group(f"gb-{run}", [("token_bucket", "1e12", "1e12")] * 2),
        "composite: bucket + quota": group(f"gq-{run}", [("token_bucket", "1e12", "1e12"), ("quota", "1e12", days)]),
    }
    measured["quota, refused (spent)"]()  # spends it: every call after is refused
    floors: list[float] = []
    times: dict[str, list[float]] = {label: [] for label in measured}
    for _ in range(args.rounds):
        floors.append(per_call(admin, lambda: admin.evalsha(floor, 1, floor_key), args.calls))
        for label, call in measured.items():
            times[label].append(per_call(admin, call, args.calls))
    print(f"server time per decision over the floor (TIME, GET, SET PX), median (quartiles) of {args.rounds} rounds")
    print(f"  floor {statistics.median(floors):6.2f} us")
    for label, each in times.items():
        ratios = [t / f for t, f in zip(each, floors, strict=True)]
        print(f"  {label:36s} {statistics.median(each):6.2f} us   {spread(ratios)}x the floor")


if __name__ == "__main__":
    main()
