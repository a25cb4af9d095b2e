"""What the operator commands cost a Redis holding many limiters.

Starts a private ``redis-server`` on loopback (so that the server's counters are ours
alone), fills it with N single limiters that each decided once, and runs
``ratelimit inspect`` (every name), ``inspect NAME``, ``set NAME`` and
``top --json``, each once. For each: the wall time, the commands the server ran, and
the SCANs among them (``INFO commandstats``), and the server's CPU time.

::

    python benchmarks/operator_scale.py                 # 2,000 and 4,000 limiters
    python benchmarks/operator_scale.py --limiters 500 --other-keys 1000000  # a shared Redis
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.scripts import single_script
from ratelimit.cli import main

from servers import RedisServer


def fill(client: redis.Redis, limiters: int) -> list[str]:
    """``limiters`` token buckets, each granted once now, as their processes would."""
    names = [f"tenant-{i:06d}" for i in range(limiters)]
    script = single_script("token_bucket")
    pipe = client.pipeline(transaction=False)
    for name in names:
        keys = [key_for(name, "token_bucket"), f"ratelimit:{{{name}}}:config", f"ratelimit:{{{name}}}:code"]
        pipe.evalsha(script.sha, 3, *keys, "reserve", "", "1", "", "100", "1", "0", "0")
    client.script_load(script.source)
    pipe.execute()
    return names


def stats(client: redis.Redis) -> tuple[int, int, float]:
    """(commands run in all, SCANs, the server's CPU seconds) so far."""
    seen: dict[str, Any] = client.info("commandstats")
    cpu: dict[str, Any] = client.info("cpu")
    total = sum(int(v.get("calls", 0)) for v in seen.values())
    used = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return total, int(seen.get("cmdstat_scan", {}).get("calls", 0)), used


def measure(client: redis.Redis, argv: list[str]) -> tuple[float, int, int, float]:
    before = stats(client)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)
    elapsed = time.perf_counter() - start
    after = stats(client)
    # The INFO calls of `stats` are not the command's.
    return elapsed, after[0] - before[0] - 2, after[1] - before[1], after[2] - before[2]


def others(client: redis.Redis, count: int) -> None:
    """``count`` keys of other applications, as on a shared Redis."""
    for start in range(0, count, 10_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 10_000)):
            pipe.set(f"app:session:{i}", "x")
        pipe.execute()


def run(limiters: int, other: int) -> None:
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        names = fill(client, limiters)
        others(client, other)
        url = server.url
        print(f"{limiters} limiters, {other} other keys")
        for label, argv in [
            ("inspect (all)", ["inspect", "--redis", url, "--json"]),
            ("inspect NAME", ["inspect", names[0], "--redis", url]),
            ("set NAME", ["set", names[1], "--rate", "5/s", "--redis", url]),
            ("top --json", ["top", "--redis", url, "--json"]),
        ]:
            elapsed, commands, scans, cpu = measure(client, argv)
            print(f"  {label:<15} {elapsed:8.3f} s {commands:8d} commands {scans:7d} SCANs {cpu:7.3f} s Redis CPU")
        client.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limiters", type=int, nargs="*", default=[2000, 4000])
    parser.add_argument("--other-keys", type=int, default=0, help="keys of other applications beside them")
    args = parser.parse_args()
    for limiters in args.limiters:
        run(limiters, args.other_keys)


if __name__ == "__main__":
    cli()
