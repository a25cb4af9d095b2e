"""This release's function library against another's, side by side on one server.

A change to the Lua moves a decision's server time by a tenth or two, less than a
shared machine's drift between two runs. So both libraries are loaded on one fresh
server, and a batch of each (and of the floor, the least a shared token bucket can
do: one script of ``TIME``, ``GET`` and ``SET PX``) is taken in turn, round after
round. Each figure is the median over the rounds of a batch's time over its round's
floor, with the quartiles, and the ratio of this release's batch to the other's.

::

    git worktree add /tmp/before <rev>
    python benchmarks/versus.py --against /tmp/before --redis redis://127.0.0.1:6390/0

Point it at a Redis of its own: it flushes the server's functions, scripts and keys.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from hot_path import FLOOR

KINDS = ["token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter"]
#: A reserve's ARGV after the op (see lua/_single.lua): the server's clock, one token,
#: no wait, then a budget too large to refuse (a bucket; a window with its default
#: guard of 0.05 s), enforced.
ARGS = {
    "token_bucket": ["", "1.0", "0.0", "1000000000000.0", "1000000000000.0", "0.0", "0"],
    "leaky_bucket": ["", "1.0", "0.0", "1000000000000.0", "1000000000000.0", "0.0", "0"],
    "sliding_window": ["", "1.0", "0.0", "1000000000.0", "1.05", "0.05", "0"],
    "sliding_window_counter": ["", "1.0", "0.0", "1000000000.0", "1.05", "0.05", "0"],
}


def library_of(tree: Path) -> tuple[str, list[str]]:
    """The library text of the checkout at ``tree``, and its functions for KINDS."""
    # (Releases before the store folders kept the scripts in ratelimit/_stores/scripts.py.)
    code = (
        "import json, os; "
        "m = 'ratelimit._stores.redis.scripts' if os.path.isdir('ratelimit/_stores/redis') "
        "else 'ratelimit._stores.scripts'; "
        "l = __import__(m, fromlist=['library']).library(); "
        f"print(json.dumps([l.source, [l.function(k) for k in {KINDS!r}]]))"
    )
    out = subprocess.check_output([sys.executable, "-c", code], cwd=tree, env={"PYTHONPATH": str(tree)})
    source, functions = json.loads(out)
    return source, functions


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
    parser.add_argument("--against", type=Path, required=True, help="a checkout of the other release")
    parser.add_argument("--redis", default="redis://127.0.0.1:6390/0")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=500, help="calls in each batch")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which algorithms, comma-separated")
    parser.add_argument("--ops", default="reserve,~reserve", help="counted (reserve), counters off (~reserve)")
    parser.add_argument(
        "--carry",
        choices=["change", "reset"],
        help="a key's decision under a change by name (a rate too large to refuse), which the other release "
        "finds in the budget's hash and this one is also carried after the op (redis/name_changes.py); or "
        "this one carrying a reset by name, as for ten minutes after one",
    )
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    admin = redis.Redis.from_url(args.redis)
    admin.function_flush()
    admin.script_flush()
    admin.flushall()
    libraries = {"other": library_of(args.against), "this": library_of(here)}
    # Releases of one protocol name their libraries alike (ratelimit_p1): the other's is
    # renamed, so that loading this one does not replace it.
    source, functions = libraries["other"]
    name = source.splitlines()[0].partition("name=")[2].strip()
    if name and name == libraries["this"][0].splitlines()[0].partition("name=")[2].strip():
        renamed = [f.replace(name, "versus_other") for f in functions]
        libraries["other"] = (source.replace(name, "versus_other"), renamed)
    for source, _ in libraries.values():
        admin.function_load(source, replace=True)
    floor = admin.script_load(FLOOR)
    floor_key = f"versus-floor-{uuid.uuid4().hex[:8]}"
    print(f"server time per decision over the floor, median (quartiles) of {args.rounds} rounds")
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"--kinds: {kind!r} is none of {', '.join(KINDS)}")
    titles = {"reserve": "counted", "~reserve": "counters off"}
    for op in args.ops.split(","):
        if op not in titles:
            parser.error(f"--ops: {op!r} is none of {', '.join(titles)}")
        for i, kind in enumerate(KINDS):
            if kind not in kinds:
                continue
            title = titles[op]
            floors: list[float] = []
            times: dict[str, list[float]] = {name: [] for name in libraries}
            for _ in range(args.rounds):
                floors.append(per_call(admin, lambda: admin.evalsha(floor, 1, floor_key), args.calls))
                for name, (_, functions) in libraries.items():
                    key = f"ratelimit:{{versus-{name}-{kind}}}:{kind}"
                    sent = op
                    if args.carry == "change":
                        change: dict[Any, Any] = {"rate": "1e9", "burst": "", "by": "name", "v": "1"}
                        admin.hset(key.replace(kind, "config"), mapping=change)
                        if name == "this":
                            sent = f"{op} 1 1e9 - -"
                    elif args.carry == "reset" and name == "this":
                        sent = f"{op} 1"
                    call: list[Any] = [functions[i], 2, key, key.replace(kind, "config"), sent, *ARGS[kind]]

                    def decide(call: list[Any] = call) -> object:
                        return admin.fcall(*call)

                    times[name].append(per_call(admin, decide, args.calls))
            other = [t / f for t, f in zip(times["other"], floors, strict=True)]
            this = [t / f for t, f in zip(times["this"], floors, strict=True)]
            ratio = [t / o for t, o in zip(times["this"], times["other"], strict=True)]
            print(
                f"  {kind:24s} {title:13s} floor {statistics.median(floors):6.2f} us   "
                f"other {spread(other)}   this {spread(this)}   this/other {spread(ratio)}"
            )


if __name__ == "__main__":
    main()
