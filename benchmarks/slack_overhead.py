"""What the fleet's slack record (``fleet_slack`` in ``lua/_single.lua``) adds to each
decision, as ratios within one run.

Every single limiter's script reads the largest slack a process of its budget keeps
(one ``HMGET``); a decision with a slack in force keeps the record (its state's idle
time, and an ``HSET``/``PEXPIRE`` about once per slack). This measures a limiter's
``reserve`` (a token bucket, or ``--kind``) called by SHA from one thread, in rounds interleaved so that the
shared machine's noise falls on every variant alike:

- **before**: the record neither read nor kept (the script as before it);
- **plain**: as shipped, no slack anywhere (the common case: no record to find);
- **guarded**: as shipped, a slack of 0.05 s (a guard or a lease): the record kept;
- **plain+record**: as shipped, no slack of its own, deciding under another's record.

For each: the server's own microseconds per call (``INFO commandstats``).

::

    python benchmarks/slack_overhead.py            # about 30 seconds
    python benchmarks/slack_overhead.py --calls 50000 --rounds 5
    python benchmarks/slack_overhead.py --kind sliding_window
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import redis

from ratelimit._stores.keys import code_key, config_key, key_for
from ratelimit._stores.redis.scripts import ALGORITHMS, Script, single_script

READ = "local recorded = redis.call('HMGET', fleet_slack, 'slack', 'until')\n"
KEEP = "local function keep_slack(state)\n"


def variants(kind: str) -> dict[str, Script]:
    shipped = single_script(kind)
    assert READ in shipped.source, "the record moved: update this benchmark"
    assert KEEP in shipped.source, "the record moved: update this benchmark"
    before = shipped.source.replace(READ, "local recorded = {false, false}\n").replace(KEEP, KEEP + "  do return end\n")
    # Both scripts called by SHA: they differ in their text only.
    return {"before": Script.from_source("before", before), "shipped": Script.from_source("shipped", shipped.source)}


def script_usec(client: redis.Redis) -> tuple[int, float]:
    stats: dict[str, Any] = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    return int(evalsha.get("calls", 0)), float(evalsha.get("usec", 0))


def run(
    client: redis.Redis, script: Script, keys: list[str], params: list[str], slack: str, calls: int, other: str
) -> float:
    """Server microseconds per call; ``other``: a slack another process keeps (its
    record written before the calls, as a busy leased process would keep it)."""
    args = ["reserve", "", "1", "0", *params, slack, "0"]
    other_args = ["reserve", "", "1", "0", *params, other, "0"]
    script(client, keys, args)  # loaded
    if other:
        script(client, keys, other_args)
    before = script_usec(client)
    for _ in range(calls):
        script(client, keys, args)
    after = script_usec(client)
    return (after[1] - before[1]) / max(1, after[0] - before[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", default="token_bucket", choices=ALGORITHMS)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    scripts = variants(args.kind)
    # Never a wait: a huge burst (a window of a second keeps its log short).
    params = ["1000000000", "1" if args.kind in ("sliding_window", "sliding_window_counter") else "1000000000"]
    cases = {
        "before": (scripts["before"], "0", ""),
        "plain": (scripts["shipped"], "0", ""),
        "guarded": (scripts["shipped"], "0.05", ""),
        "plain+record": (scripts["shipped"], "0", "5"),
    }
    names = {case: f"slack-overhead-{uuid.uuid4().hex[:8]}" for case in cases}
    usecs: dict[str, list[float]] = {case: [] for case in cases}
    for _ in range(args.rounds):
        for case, (script, slack, other) in cases.items():
            name = names[case]
            keys = [key_for(name, args.kind), config_key(name), code_key(name)]
            usecs[case].append(run(client, script, keys, params, slack, args.calls, other))
    base = sorted(usecs["before"])[len(usecs["before"]) // 2]
    print(f"{'variant':<14} {'server us/call':>15} {'x before':>9}   (median of {args.rounds} rounds)")
    for case in cases:
        usec = sorted(usecs[case])[len(usecs[case]) // 2]
        print(f"{case:<14} {usec:>15.2f} {usec / base:>9.2f}")
    for name in names.values():
        for key in client.scan_iter(match=f"ratelimit:{{{name}}}*"):
            client.delete(key)


if __name__ == "__main__":
    main()
