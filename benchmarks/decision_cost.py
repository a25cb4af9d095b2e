"""What one decision costs the Redis server, against the least a bucket can do.

The floor is one script of ``TIME``, ``GET`` and ``SET PX``: a shared token bucket can
do no less per decision. Against it, in the same run and on the same server: a token
bucket's ``reserve`` by SHA, uncontended (every grant at once) and contended (each
grant queued behind the last, so that the script names it), and a named refund of
half a grant with a queue behind it (a settle under contention).

::

    python benchmarks/decision_cost.py --redis redis://127.0.0.1:6390/0 [--calls 20000] [--rounds 3]

Point it at a Redis of its own: it reads ``INFO commandstats``, which counts every
client of the server, and resets it (``CONFIG RESETSTAT``) between measures.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from typing import Any

import redis

from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.scripts import single_script

FLOOR = """
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PX', 60000)
return v
"""


def _server_usec(client: redis.Redis) -> float:
    """Microseconds per script or function call since the last reset (each measure
    makes calls of one kind: the floor a script, the limiter's a function)."""
    stats = client.info("commandstats")
    usec = calls = 0.0
    for command in ("fcall", "evalsha"):
        usec += float(stats.get(f"cmdstat_{command}", {}).get("usec", 0))
        calls += float(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return usec / calls if calls else float("nan")


def _measure(client: redis.Redis, call: object, calls: int) -> float:
    client.config_resetstat()
    for _ in range(calls):
        call()  # type: ignore[operator]
    return _server_usec(client)


def _round(client: redis.Redis, floor: Any, script: Any, calls: int) -> dict[str, float]:
    name = f"cost-{uuid.uuid4().hex[:8]}"
    key = key_for(name, "token_bucket")
    slow = key_for(name + "-q", "token_bucket")
    fkey = f"cost:{name}"
    # Parameters: capacity, rate, slack, shadow. A bucket too big to empty, and one that
    # queues every grant behind the last (1 token, one a thousand seconds).
    fast_args = ["reserve", "", "1", "", "1e12", "1e12", "0", "0"]
    slow_args = ["reserve", "", "1", "", "1", "1e-3", "0", "0"]
    out = {
        "floor (TIME, GET, SET PX)": _measure(client, lambda: floor(keys=[fkey]), calls),
        "reserve, uncontended": _measure(client, lambda: script(client, [key], fast_args), calls),
        "reserve, queued (named)": _measure(client, lambda: script(client, [slow], slow_args), calls),
    }
    # A named refund with a queue behind: the grant at the queue's head gives half back.
    at = float(script(client, [slow], slow_args)[1])
    refund_args = ["refund", "", "0.5", f"{at!r} 1", "1", "1e-3", "0", "0"]
    out["refund, named, queue behind"] = _measure(client, lambda: script(client, [slow], refund_args), calls // 10)
    client.delete(key, slow, fkey, slow + ":holes")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis)
    floor = client.register_script(FLOOR)
    script = single_script("token_bucket")
    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for label, usec in _round(client, floor, script, args.calls).items():
            results.setdefault(label, []).append(usec)
    base = statistics.median(results["floor (TIME, GET, SET PX)"])
    for label, values in results.items():
        med = statistics.median(values)
        print(f"{label:32} {med:6.2f} us/call  {med / base:5.2f}x the floor")
    client.close()


if __name__ == "__main__":
    main()
