"""What the fleet's features add to each decision, as ratios within one run.

Every single limiter's script now reads a change made at run time (``ratelimit set``:
one ``HMGET``), writes what its code says when missing (one ``EXISTS``), and counts
what it decided for ``ratelimit top`` (``HINCRBY`` and ``PEXPIRE``, see ``tally`` in
``lua/_single.lua``). This measures three variants of the same token bucket's
``reserve``, called by SHA from one thread, interleaved in rounds so that the shared
machine's noise falls on all three alike:

- **bare**: no change read, nothing counted (the script as before these features);
- **changes**: the change read and the code's hash checked, nothing counted;
- **all**: as shipped, the counters too.

For each: calls per second from the client, and the server's own microseconds per
call (``INFO commandstats``), beside ``PING`` per second as the floor.

::

    python benchmarks/fleet_overhead.py            # about 20 seconds
    python benchmarks/fleet_overhead.py --calls 50000 --rounds 5
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import redis

from ratelimit._stores.keys import code_key, config_key, key_for
from ratelimit._stores.scripts import Script, single_script

TALLY = "local function tally_one(base, now, wait)\n"


def variants() -> dict[str, Script]:
    shipped = single_script("token_bucket")
    assert TALLY in shipped.source, "the script's counters moved: update this benchmark"
    silent = shipped.source.replace(TALLY, TALLY + "  do return end\n")
    # Each a script called by SHA, the shipped text too: the variants differ in their text only.
    return {
        "bare": Script.from_source("bare", silent),
        "changes": Script.from_source("changes", silent),
        "all": Script.from_source("all", shipped.source),
    }


def script_usec(client: redis.Redis) -> tuple[int, float]:
    stats: dict[str, Any] = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    return int(evalsha.get("calls", 0)), float(evalsha.get("usec", 0))


def run(client: redis.Redis, script: Script, keys: list[str], calls: int) -> tuple[float, float]:
    """(calls per second, server microseconds per call)."""
    args = ["reserve", "", "1", "0", "1000000000", "1000000000", "0", "0"]
    script(client, keys, args)  # loaded
    before = script_usec(client)
    start = time.perf_counter()
    for _ in range(calls):
        script(client, keys, args)
    elapsed = time.perf_counter() - start
    after = script_usec(client)
    made = max(1, after[0] - before[0])
    return calls / elapsed, (after[1] - before[1]) / made


def ping_rate(client: redis.Redis, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        client.ping()
    return calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    name = f"fleet-overhead-{uuid.uuid4().hex[:8]}"
    base = key_for(name, "token_bucket")
    keys = {"bare": [base], "changes": [base, config_key(name), code_key(name)]}
    keys["all"] = keys["changes"]
    scripts = variants()
    rates: dict[str, list[float]] = {v: [] for v in (*scripts, "ping")}
    usecs: dict[str, list[float]] = {v: [] for v in scripts}
    for _ in range(args.rounds):
        rates["ping"].append(ping_rate(client, args.calls))
        for variant, script in scripts.items():
            rate, usec = run(client, script, keys[variant], args.calls)
            rates[variant].append(rate)
            usecs[variant].append(usec)
    ping = sorted(rates["ping"])[len(rates["ping"]) // 2]
    print(f"PING floor: {ping:,.0f}/s (median of {args.rounds} rounds)")
    print(f"{'variant':<10} {'calls/s':>10} {'x PING':>8} {'server us/call':>15} {'x bare (server)':>16}")
    bare = sorted(usecs["bare"])[len(usecs["bare"]) // 2]
    for variant in scripts:
        rate = sorted(rates[variant])[len(rates[variant]) // 2]
        usec = sorted(usecs[variant])[len(usecs[variant]) // 2]
        print(f"{variant:<10} {rate:>10,.0f} {rate / ping:>8.2f} {usec:>15.2f} {usec / bare:>16.2f}")
    for key in client.scan_iter(match=f"ratelimit:{{{name}}}*"):
        client.delete(key)


if __name__ == "__main__":
    main()
