"""What the operator commands cost a Redis holding many limiters.

Starts a private ``redis-server`` on loopback (so that the server's counters are ours
alone), fills it with N single limiters that each decided once, and runs
``ratelimit inspect`` (every name), ``inspect NAME``, ``set NAME`` and
``top --json``, each once. For each: the wall time, the commands the server ran, and
the SCANs among them (``INFO commandstats``).

::

    python benchmarks/operator_scale.py                 # 2,000 and 4,000 limiters
    python benchmarks/operator_scale.py --limiters 500
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ratelimit._stores.keys import key_for
from ratelimit._stores.scripts import single_script
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


def stats(client: redis.Redis) -> tuple[int, int]:
    """(commands run in all, SCANs) so far."""
    seen: dict[str, Any] = client.info("commandstats")
    total = sum(int(v.get("calls", 0)) for v in seen.values())
    return total, int(seen.get("cmdstat_scan", {}).get("calls", 0))


def measure(client: redis.Redis, argv: list[str]) -> tuple[float, int, int]:
    before = stats(client)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)
    elapsed = time.perf_counter() - start
    after = stats(client)
    # The two INFO calls of `stats` are not the command's.
    return elapsed, after[0] - before[0] - 1, after[1] - before[1]


def run(limiters: int) -> None:
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        names = fill(client, limiters)
        url = server.url
        print(f"{limiters} limiters")
        for label, argv in [
            ("inspect (all)", ["inspect", "--redis", url, "--json"]),
            ("inspect NAME", ["inspect", names[0], "--redis", url]),
            ("set NAME", ["set", names[1], "--rate", "5/s", "--redis", url]),
            ("top --json", ["top", "--redis", url, "--json"]),
        ]:
            elapsed, commands, scans = measure(client, argv)
            print(f"  {label:<15} {elapsed:8.3f} s {commands:8d} commands {scans:7d} SCANs")
        client.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limiters", type=int, nargs="*", default=[2000, 4000])
    for limiters in parser.parse_args().limiters:
        run(limiters)


if __name__ == "__main__":
    cli()
