"""What a decision through Redis costs, as functions and as scripts, against floors of the same run.

Three figures, each a ratio to a floor measured in the same run on the same server:

- **server**: the Redis server's microseconds per decision (``INFO commandstats``: the
  FCALL's or EVALSHA's own time, which includes every command it runs) over the least a
  shared token bucket can do, one script of ``TIME``, ``GET`` and ``SET PX``. Each
  algorithm, a composite, a budget with priorities and an adaptive limiter; with the
  counters for ``ratelimit top`` on (the default) and off (``counters=False``); and beside
  the windows, their commands alone (``BARE``, a small library of its own, deleted after):
  the least a window's steady decision could cost with the commands it sends. Each is
  measured in batches (``--batches`` of ``--calls``) taken in turn with the floor's, and
  given as its least batch over the floor's least (and the ratio of the medians): on a
  shared machine the server is slowed by turns, and the least batch is the one least
  slowed. Every call runs its share of Lua's garbage collector, whose cost grows with
  what the Lua holds: the scripts measured (``EVALSHA``) sit beside the floor's, the
  libraries loaded beside ours (``FCALL``). So give it a fresh server (``FUNCTION
  FLUSH`` and ``SCRIPT FLUSH`` before a run compare two releases fairly), and
  ``--no-scripts`` for the functions' figures against a floor that holds nothing else.
- **client**: uncontended ``try_acquire`` calls per second through Redis over empty
  ``EVALSHA`` calls per second on the same client, the empty call measured just before
  and just after each candidate (median of rounds, and the range); and for asyncio, ``await
  try_acquire_async()`` over ``await evalsha()`` on one ``redis.asyncio`` client. Each
  algorithm one call per decision (``coalesce=False``), and a token bucket with the
  default ``coalesce=True`` (a caller alone, whose round is the same single call).
- **hot**: one hot limiter, 4 processes deciding as fast as they can: the aggregate
  decisions per second with the library's functions and with scripts.
- **turns** (not in the default parts): the uncontended decision one task makes
  through a ``RedisBackend`` of a ``redis.asyncio`` client (``await try_acquire_async()``
  and ``await acquire_async()``, the default ``coalesce=True``; and the ASGI
  middleware's decision, which also asks for the level), against an empty
  ``EVALSHA`` (``return 1``) and an empty ``FCALL`` (a library of its own, deleted after)
  on the same client, in blocks of ``--calls`` taken in turn (the order rotating each
  round) for ``--batches`` rounds: each round's ratio is its decision's calls per second
  over its own floors', so that what slows the machine for a while slows both. The
  median and the quartiles of the rounds' ratios; the same for a synchronous client's
  ``try_acquire``, for reference.

::

    python benchmarks/hot_path.py --redis redis://127.0.0.1:6390/0 [--parts server,client,hot,turns] [--no-scripts]

Point it at a Redis of its own: it resets the server's statistics between measures.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio

from ratelimit import Adaptive, Composite, LeakyBucket, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._limiting.front import acquire_level_async
from ratelimit._stores.redis.scripts import call_by_script

FLOOR = """
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PX', 60000)
return v
"""

BIG = 1e12

#: A window's steady decision, its commands alone: what its checked fast path sends to Redis
#: when a busy window grants at once (the window log: prune, its oldest and newest
#: entries, the grant; the counter: now's sub-window with `last` and `total`, and the
#: three written back), with only the arithmetic that feeds them. A library of its
#: own, called as the decisions are (two keys, eight arguments): the least those
#: commands could cost, to set a window's figure beside.
BARE = {
    "exact window": """local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 1.05)
redis.call('ZRANGE', KEYS[1], 0, 0)
local n = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local s = 0
if #n > 0 then s = tonumber(string.match(n[1], '^([^|]+)|')) end
redis.call('ZADD', KEYS[1], now, (s + 1) .. '|1')
return t[1] .. ' ' .. t[2]""",
    "approximate window": """local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local v = redis.call('HMGET', KEYS[1], 'last', 'total', 'c3')
redis.call('HSET', KEYS[1], 'last', now, 'total', (tonumber(v[2]) or 0) + 1, 'c3', (tonumber(v[3]) or 0) + 1)
return t[1] .. ' ' .. t[2]""",
}
BARE_LIBRARY = "ratelimit_bench_bare"


def _bare_calls(admin: redis.Redis) -> dict[str, Callable[[], object]]:
    """Each of BARE as a function of a library loaded here, on a key of its own (the
    approximate window's hash holds its 21 sub-windows, as a busy one's does)."""
    bodies = "\n".join(
        f"redis.register_function('bare_{i}', function(KEYS, ARGV)\n{body}\nend)"
        for i, body in enumerate(BARE.values())
    )
    admin.function_load(f"#!lua name={BARE_LIBRARY}\n{bodies}", replace=True)
    calls: dict[str, Callable[[], object]] = {}
    for i, label in enumerate(BARE):
        key = f"bare-{uuid.uuid4().hex[:8]}"
        if label == "approximate window":
            admin.hset(key, mapping={f"c{j}": 5 for j in range(21)})
        args: list[Any] = [f"bare_{i}", 2, key, f"{key}:config", *(["0"] * 8)]

        def call(args: list[Any] = args) -> object:
            return admin.fcall(*args)

        calls[f"{label} | its commands alone"] = call
    return calls


def _limiters(backend: RedisBackend) -> dict[str, Any]:
    """Each kind of limiter, with a budget too large to refuse."""

    def name() -> str:
        return f"hot-{uuid.uuid4().hex[:8]}"

    return {
        "token bucket": TokenBucket(BIG, BIG, backend=backend, name=name()),
        "leaky bucket": LeakyBucket(BIG, BIG, backend=backend, name=name()),
        "exact window": SlidingWindow(10**9, 1, backend=backend, name=name()),
        "approximate window": SlidingWindow(10**9, 1, approximate=True, backend=backend, name=name()),
        "composite (2 buckets)": Composite(
            [TokenBucket(BIG, BIG), TokenBucket(BIG, BIG / 2)], backend=backend, name=name()
        ),
        "priorities (high)": TokenBucket(BIG, BIG, low_share=0.5, backend=backend, name=name()),
        "adaptive": TokenBucket(BIG, BIG, adaptive=Adaptive(), backend=backend, name=name()),
    }


def _server_usec(admin: redis.Redis) -> float:
    """Server microseconds per script or function call since the last reset."""
    stats: dict[str, Any] = admin.info("commandstats")
    usec = calls = 0.0
    for command in ("fcall", "evalsha", "eval"):
        seen = stats.get(f"cmdstat_{command}", {})
        usec += float(seen.get("usec", 0))
        calls += float(seen.get("calls", 0))
    return usec / calls if calls else float("nan")


def _per_call(admin: redis.Redis, call: Callable[[], object], calls: int) -> float:
    admin.config_resetstat()
    for _ in range(calls):
        call()
    return _server_usec(admin)


def _rate(call: Callable[[], object], seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(100):
            call()
        done += 100
    return done / elapsed


async def _rate_async(call: Callable[[], Awaitable[object]], seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(100):
            await call()
        done += 100
    return done / elapsed


def _backend(url: str, *, scripts: bool, counters: bool = True, coalesce: bool = False) -> RedisBackend:
    # coalesce=False: one call per decision, which is what is measured here.
    backend = RedisBackend.from_url(url, coalesce=coalesce, counters=counters)
    if scripts:
        call_by_script(backend.client)
    return backend


def _server_round(url: str, admin: redis.Redis, calls: int, batches: int, scripts_too: bool) -> dict[str, list[float]]:
    """Each figure in `batches` batches of `calls` calls, taken in turn with the floor's
    (a shared machine slows the server by turns: the least batch of each is its cost
    with the least of that in it, and the floor's is measured among them)."""
    floor = admin.register_script(FLOOR)
    fkey = f"floor-{uuid.uuid4().hex[:8]}"
    measured: dict[str, Callable[[], object]] = {"floor": lambda: floor(keys=[fkey])}
    backends = []
    for mode, scripts, counters in (
        ("functions", False, True),
        ("functions, counters off", False, False),
        ("scripts", True, True),
    ):
        if scripts and not scripts_too:
            continue
        backend = _backend(url, scripts=scripts, counters=counters)
        backends.append(backend)
        for label, limiter in _limiters(backend).items():
            measured[f"{label} | {mode}"] = limiter.try_acquire
        if mode == "functions":
            measured.update(_bare_calls(admin))
    for call in measured.values():
        for _ in range(50):  # loads the library or script, and writes the code key
            call()
    out: dict[str, list[float]] = {label: [] for label in measured}
    for _ in range(batches):
        for label, call in measured.items():
            out[label].append(_per_call(admin, call, calls))
    for backend in backends:
        backend.close()
    admin.function_delete(BARE_LIBRARY)
    return out


def _client_round(url: str, admin: redis.Redis, seconds: float) -> dict[str, float]:
    """Each candidate's rate over the empty call's, measured just before and just after
    it (the machine is shared: a floor of the round's start drifts)."""
    sha = admin.script_load("return 1")

    def empty() -> object:
        return admin.evalsha(sha, 0)

    def over_floor(call: Callable[[], object]) -> float:
        before = _rate(empty, seconds / 2)
        rate = _rate(call, seconds)
        return 2 * rate / (before + _rate(empty, seconds / 2))

    out = {"empty EVALSHA": 1.0}
    for mode, scripts in (("functions", False), ("scripts", True)):
        backend = _backend(url, scripts=scripts)
        for label, limiter in list(_limiters(backend).items())[:4]:
            out[f"{label} | {mode}"] = over_floor(limiter.try_acquire)
        backend.close()
    backend = _backend(url, scripts=False, coalesce=True)
    bucket = _limiters(backend)["token bucket"]
    out["token bucket, coalesce=True | functions"] = over_floor(bucket.try_acquire)
    backend.close()
    return out


async def _async_client_round(url: str, seconds: float) -> dict[str, float]:
    client = redis.asyncio.Redis.from_url(url)
    sha = await client.script_load("return 1")

    def empty() -> Awaitable[object]:
        return client.evalsha(sha, 0)

    async def over_floor(call: Callable[[], Awaitable[object]]) -> float:
        before = await _rate_async(empty, seconds / 2)
        rate = await _rate_async(call, seconds)
        return 2 * rate / (before + await _rate_async(empty, seconds / 2))

    out = {"empty EVALSHA": 1.0}
    for coalesce in (False, True):
        backend = RedisBackend(client, coalesce=coalesce)
        limiters = list(_limiters(backend).items())[:4]
        for label, limiter in limiters if not coalesce else limiters[:1]:
            await limiter.try_acquire_async()  # loads the library on this client
            suffix = ", coalesce=True" if coalesce else ""
            out[f"{label}{suffix} | functions"] = await over_floor(limiter.try_acquire_async)
    await client.aclose()
    return out


#: An empty function, the floor of a decision by function (``--parts turns``).
EMPTY_LIBRARY = "ratelimit_bench_empty"
EMPTY = (
    f"#!lua name={EMPTY_LIBRARY}\n"
    f"redis.register_function{{function_name='{EMPTY_LIBRARY}', "
    "callback=function() return 1 end, flags={'no-writes'}}"
)
FLOORS = ("empty EVALSHA", "empty FCALL")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4)
    return low, median, high


def _turn(names: list[str], turn: int) -> list[str]:
    """The order of the blocks in round ``turn``: rotated by one each round."""
    shift = turn % len(names)
    return names[shift:] + names[:shift]


def _over_floors(rates: dict[str, float], ratios: dict[str, list[float]]) -> None:
    """One round's ratio of each decision's rate to each floor's, added to ``ratios``."""
    for name, rate in rates.items():
        if name not in FLOORS:
            for floor in FLOORS:
                ratios.setdefault(f"{name} / {floor}", []).append(rate / rates[floor])


async def _async_turns(url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    client = redis.asyncio.Redis.from_url(url)
    sha = await client.script_load("return 1")
    await client.function_load(EMPTY, replace=True)
    backend = RedisBackend(client)
    limiter = TokenBucket(BIG, BIG, backend=backend, name=f"turns-{uuid.uuid4().hex[:8]}")

    def block(call: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            started = time.perf_counter()
            for _ in range(calls):
                await call()
            return calls / (time.perf_counter() - started)

        return run

    blocks = {
        FLOORS[0]: block(lambda: client.evalsha(sha, 0)),
        FLOORS[1]: block(lambda: client.fcall(EMPTY_LIBRARY, 0)),
        "await try_acquire_async()": block(limiter.try_acquire_async),
        "await acquire_async()": block(limiter.acquire_async),
        # What a request through the ASGI middleware asks: the decision and its level.
        "await acquire_level_async() (middleware)": block(lambda: acquire_level_async(limiter, 1, None)),
    }
    for run in blocks.values():  # connects, loads the library, writes the code key
        await run()
    ratios: dict[str, list[float]] = {}
    for turn in range(rounds):
        _over_floors({name: await blocks[name]() for name in _turn(list(blocks), turn)}, ratios)
    await client.function_delete(EMPTY_LIBRARY)
    await backend.aclose()
    await client.aclose()
    return ratios


def _sync_turns(url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    sha = client.script_load("return 1")
    client.function_load(EMPTY, replace=True)
    backend = RedisBackend(client)
    limiter = TokenBucket(BIG, BIG, backend=backend, name=f"turns-{uuid.uuid4().hex[:8]}")

    def block(call: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            for _ in range(calls):
                call()
            return calls / (time.perf_counter() - started)

        return run

    blocks = {
        FLOORS[0]: block(lambda: client.evalsha(sha, 0)),
        FLOORS[1]: block(lambda: client.fcall(EMPTY_LIBRARY, 0)),
        "try_acquire()": block(limiter.try_acquire),
    }
    for run in blocks.values():
        run()
    ratios: dict[str, list[float]] = {}
    for turn in range(rounds):
        _over_floors({name: blocks[name]() for name in _turn(list(blocks), turn)}, ratios)
    client.function_delete(EMPTY_LIBRARY)
    backend.close()
    client.close()
    return ratios


def _report_turns(title: str, results: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    for label, values in results.items():
        low, median, high = _quartiles(values)
        print(f"  {label:44} {median:5.3f}x  (quartiles {low:.3f}-{high:.3f}, {len(values)} rounds)")


def _hot_worker(url: str, name: str, scripts: bool, seconds: float, start: Any, out: Any) -> None:
    backend = _backend(url, scripts=scripts)
    limiter = TokenBucket(BIG, BIG, backend=backend, name=name)
    limiter.try_acquire()
    start.wait()
    out.put(_rate(limiter.try_acquire, seconds))
    backend.close()


def _hot(url: str, scripts: bool, seconds: float, processes: int = 4) -> float:
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    name = f"hot-{uuid.uuid4().hex[:8]}"
    workers = [
        context.Process(target=_hot_worker, args=(url, name, scripts, seconds, start, out)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # every worker connected and loaded
    start.set()
    total = sum(out.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join()
    return float(total)


def _report_least(title: str, results: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    floor, floor_median = min(results["floor"]), statistics.median(results["floor"])
    for label, values in results.items():
        least, median = min(values), statistics.median(values)
        print(f"  {label:44} {least:8.2f} us  {least / floor:5.2f}x floor   (medians: {median / floor_median:5.2f}x)")


def _report_ratios(title: str, results: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    for label, values in results.items():
        print(f"  {label:44} {statistics.median(values):5.2f}x  ({min(values):.2f}-{max(values):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=500, help="calls in each batch of the server's figures")
    parser.add_argument("--batches", type=int, default=10, help="batches of each server figure in a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="each client-side rate's measure")
    parser.add_argument(
        "--no-scripts",
        action="store_true",
        help="no server figures by script: the floor's Lua then holds the floor alone (see the docstring)",
    )
    parser.add_argument(
        "--parts", default="server,client,hot", help="which figures, comma-separated (default: all three)"
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    admin = redis.Redis.from_url(args.redis)
    server: dict[str, list[float]] = {}
    client: dict[str, list[float]] = {}
    aclient: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        if "server" in parts:
            for label, values in _server_round(
                args.redis, admin, args.calls, args.batches, not args.no_scripts
            ).items():
                server.setdefault(label, []).extend(values)
        if "client" in parts:
            for label, value in _client_round(args.redis, admin, args.seconds).items():
                client.setdefault(label, []).append(value)
            for label, value in asyncio.run(_async_client_round(args.redis, args.seconds)).items():
                aclient.setdefault(label, []).append(value)
    if server:
        _report_least("Redis server time per decision (the least batch of each, and the ratio of medians)", server)
    if client:
        _report_ratios("Uncontended try_acquire per second through Redis, over the empty EVALSHA's", client)
        _report_ratios("Uncontended await try_acquire_async per second (redis.asyncio), over the empty's", aclient)
    if "turns" in parts:
        turns = asyncio.run(_async_turns(args.redis, args.calls, args.batches * args.rounds))
        _report_turns("One task's asyncio decision through Redis, in turns with empty calls (median of rounds)", turns)
        sync_turns = _sync_turns(args.redis, args.calls, args.batches * args.rounds)
        _report_turns("One thread's synchronous decision through Redis, the same way, for reference", sync_turns)
    if "hot" not in parts:
        admin.close()
        return
    hot = {
        mode: _hot(args.redis, scripts, 3 * args.seconds) for mode, scripts in (("scripts", True), ("functions", False))
    }
    print("\nOne hot limiter, 4 processes: decisions per second, all processes together")
    for mode, rate in hot.items():
        print(f"  {mode:44} {rate:10.0f} /s  {rate / hot['scripts']:5.2f}x scripts")
    admin.close()


if __name__ == "__main__":
    main()
