"""The client's instructions per uncontended decision through Redis, against the empty
call's, counted rather than timed (a count does not move with the machine's load).

Each candidate runs in a fresh Python under ``valgrind --tool=callgrind``, once with
``--calls`` calls and once with twice as many: the difference over ``--calls`` is its
instructions per call, start-up and imports cancelled out. The floor is the empty
``EVALSHA`` on a plain ``redis.Redis`` client; each decision's ratio is the floor's
count over its own (the rate it would reach against the empty call's, if the client's
CPU were all that counted). ``--against PATH`` counts another checkout's library too,
on the same server, for a before/after.

::

    python benchmarks/client_instructions.py --redis redis://127.0.0.1:6391/0 [--against ../before]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

# Each candidate's limiter, made in the child (BIG, NAME, client and URL are its own).
UNCOALESCED = "backend=RedisBackend(client, coalesce=False), name=NAME"
CANDIDATES = {
    "empty EVALSHA (the floor)": "floor",
    "TokenBucket.try_acquire, coalesce=False": f"TokenBucket(BIG, BIG, {UNCOALESCED})",
    "LeakyBucket": f"LeakyBucket(BIG, BIG, {UNCOALESCED})",
    "SlidingWindow (exact)": f"SlidingWindow(BIG, 1, {UNCOALESCED})",
    "SlidingWindow(approximate=True)": f"SlidingWindow(BIG, 1, approximate=True, {UNCOALESCED})",
    "TokenBucket.try_acquire, coalesce=True (the default)": (
        "TokenBucket(BIG, BIG, backend=RedisBackend(client), name=NAME)"
    ),
    "TokenBucket, RedisBackend.from_url": "TokenBucket(BIG, BIG, backend=RedisBackend.from_url(URL), name=NAME)",
}

#: The same on one ``redis.asyncio`` client, against its own empty ``await evalsha``.
ASYNC_CANDIDATES = {
    "asyncio: empty await evalsha (its floor)": "floor",
    "await TokenBucket.try_acquire_async(), coalesce=False": f"TokenBucket(BIG, BIG, {UNCOALESCED})",
    "await SlidingWindow.try_acquire_async() (exact)": f"SlidingWindow(BIG, 1, {UNCOALESCED})",
    "the same TokenBucket, coalesce=True": "TokenBucket(BIG, BIG, backend=RedisBackend(client), name=NAME)",
}

# The child: builds the candidate, warms it (the library loaded, the state made), then
# makes the calls counted.
CHILD = """
import sys, uuid
import redis
from ratelimit import LeakyBucket, RedisBackend, SlidingWindow, TokenBucket
URL, what, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
BIG = 1e9
NAME = "instructions-" + uuid.uuid4().hex[:8]
client = redis.Redis.from_url(URL)
if what == "floor":
    sha = client.script_load("return 1")
    call = lambda: client.evalsha(sha, 0)
else:
    limiter = eval(what)
    call = limiter.try_acquire
for _ in range(200):
    call()
for _ in range(calls):
    call()
"""

ASYNC_CHILD = """
import asyncio, sys, uuid
import redis.asyncio
from ratelimit import LeakyBucket, RedisBackend, SlidingWindow, TokenBucket
URL, what, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
BIG = 1e9
NAME = "instructions-" + uuid.uuid4().hex[:8]

async def main():
    client = redis.asyncio.Redis.from_url(URL)
    if what == "floor":
        sha = await client.script_load("return 1")
        call = lambda: client.evalsha(sha, 0)
    else:
        call = eval(what).try_acquire_async
    for _ in range(200):
        await call()
    for _ in range(calls):
        await call()

asyncio.run(main())
"""


def instructions(python: str, path: str | None, url: str, what: str, calls: int, child: str = CHILD) -> int:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    # Run from the checkout: ``python -c`` puts the working directory first on the path.
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, "-c", child, url, what, str(calls)],
        env=env,
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise RuntimeError(f"no count in valgrind's output: {run.stderr[-500:]}")
    return int(found.group(1))


def per_call(python: str, path: str | None, url: str, what: str, calls: int, child: str = CHILD) -> float:
    twice = instructions(python, path, url, what, 2 * calls, child)
    return (twice - instructions(python, path, url, what, calls, child)) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--against", help="another checkout of this repository, counted beside this one")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    checkouts = {"this": here}
    if args.against:
        checkouts["against"] = str(Path(args.against).resolve())
    print(f"instructions per call ({args.calls} and {2 * args.calls} calls), floor/candidate in brackets")
    print(f"{'candidate':58}" + "".join(f"{name:>20}" for name in checkouts))
    for candidates, child in ((CANDIDATES, CHILD), (ASYNC_CANDIDATES, ASYNC_CHILD)):
        floor = per_call(sys.executable, here, args.redis, "floor", args.calls, child)
        for label, what in candidates.items():
            cells = []
            for path in checkouts.values():
                count = (
                    floor if what == "floor" else per_call(sys.executable, path, args.redis, what, args.calls, child)
                )
                cells.append(f"{count / 1000:.0f} k ({floor / count:.2f})")
            print(f"{label:58}" + "".join(f"{cell:>20}" for cell in cells), flush=True)


if __name__ == "__main__":
    main()
