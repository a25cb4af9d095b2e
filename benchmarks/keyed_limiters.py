"""What ``limiter.for_key(key)`` costs, as ratios to the plain limiter in the same run.

- **in process**: a cached view's ``try_acquire`` over the plain limiter's (both named,
  on one ``MemoryBackend``), rounds taking turns; the target is at most 1.1x.
- **Redis, client**: the same through Redis, calls per second of the view over the
  plain limiter's; **Redis, server**: the server's microseconds per decision
  (``INFO commandstats``) of the view's script call over the plain one's.
- **100,000 keys**: one view per key, one decision each, through Redis: the script
  calls the server counted (one per decision), and the cost per key (the view built
  and one decision) over a plain decision.
- **memory**: the in-process store's memory (``tracemalloc``) before 100,000 keys,
  with them, and after they are idle and swept: what is left over the start.

::

    python benchmarks/keyed_limiters.py --redis redis://127.0.0.1:6391/0 [--calls 5000] [--rounds 5]

Point it at a Redis of its own: it resets the server's statistics between measures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import redis

from ratelimit import ManualClock, MemoryBackend, RedisBackend, TokenBucket

HUGE = 1e12
KEYS = 100_000


def _seconds(call: Callable[[], object], calls: int) -> float:
    began = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - began) / calls


def _turns(plain: Callable[[], object], view: Callable[[], object], calls: int, rounds: int) -> list[float]:
    """Each round's view cost over its plain cost, the plain one measured on both sides."""
    _seconds(plain, calls)
    _seconds(view, calls)
    ratios = []
    for _ in range(rounds):
        before = _seconds(plain, calls)
        cost = _seconds(view, calls)
        ratios.append(cost / ((before + _seconds(plain, calls)) / 2))
    return ratios


def in_process(calls: int, rounds: int) -> list[float]:
    backend = MemoryBackend()
    limiter = TokenBucket(HUGE, HUGE, backend=backend, name="plain")
    view = limiter.for_key("customer")
    return _turns(limiter.try_acquire, view.try_acquire, calls * 10, rounds)


def _usec_per_call(client: redis.Redis) -> tuple[int, float]:
    stats: dict[str, Any] = client.info("commandstats")
    calls = usec = 0.0
    for command in ("fcall", "evalsha"):
        found = stats.get(f"cmdstat_{command}", {})
        calls += found.get("calls", 0)
        usec += found.get("usec", 0)
    return int(calls), (usec / calls if calls else 0.0)


def through_redis(url: str, calls: int, rounds: int) -> tuple[list[float], list[float]]:
    """(client ratios, server ratios) of a cached view over the plain limiter."""
    client = redis.Redis.from_url(url)
    backend = RedisBackend(client)
    limiter = TokenBucket(HUGE, HUGE, backend=backend, name=f"plain-{uuid.uuid4().hex[:6]}")
    view = limiter.for_key("customer")
    client_ratios = _turns(limiter.try_acquire, view.try_acquire, calls, rounds)
    server_ratios = []
    for turn in range(rounds):
        # Each goes first in every other round: whatever else the server does falls on both.
        order = [("plain", limiter.try_acquire), ("view", view.try_acquire)]
        costs = {}
        for label, call in order if turn % 2 == 0 else order[::-1]:
            client.config_resetstat()
            _seconds(call, calls)
            costs[label] = _usec_per_call(client)[1]
        server_ratios.append(costs["view"] / costs["plain"])
    backend.close()
    return client_ratios, server_ratios


def many_keys(url: str, keys: int) -> tuple[int, float, float]:
    """(script calls counted, seconds per key with its view built, seconds per plain decision)."""
    client = redis.Redis.from_url(url)
    backend = RedisBackend(client)
    limiter = TokenBucket(1, 1e-3, backend=backend, name=f"customers-{uuid.uuid4().hex[:6]}")
    limiter.key_views = 1024
    limiter.try_acquire()
    client.config_resetstat()
    began = time.perf_counter()
    granted = sum(limiter.for_key(f"customer-{i}").try_acquire() for i in range(keys))
    per_key = (time.perf_counter() - began) / keys
    counted = _usec_per_call(client)[0]
    assert granted == keys, f"{keys - granted} keys found their budget spent: keys collided"
    plain = TokenBucket(HUGE, HUGE, backend=backend, name=f"plain-{uuid.uuid4().hex[:6]}")
    per_plain = _seconds(plain.try_acquire, 5_000)
    backend.close()
    return counted, per_key, per_plain


def memory(keys: int) -> tuple[int, int, int]:
    """Bytes traced at the start, with ``keys`` keys, and after they are idle and swept."""
    gc.collect()
    tracemalloc.start()
    backend = MemoryBackend()
    clock = ManualClock(start=1.0)
    limiter = TokenBucket(5, 1, backend=backend, name="customers", clock=clock)
    limiter.try_acquire()
    start = tracemalloc.get_traced_memory()[0]
    for i in range(keys):
        limiter.for_key(f"customer-{i}").try_acquire()
    full = tracemalloc.get_traced_memory()[0]
    clock.advance(60.0)
    limiter.key_views = 0  # views dropped (the cache is what a busy process keeps)
    gc.collect()
    backend.sweep()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return start, full, after


def asyncio_keys(url: str, keys: int) -> float:
    """Seconds per key through asyncio, 500 keys at once (informational)."""
    backend = RedisBackend.from_url(url, pool_size=64)
    limiter = TokenBucket(1, 1e-3, backend=backend, name=f"async-{uuid.uuid4().hex[:6]}")

    async def main() -> None:
        for start in range(0, keys, 500):
            views = [limiter.for_key(f"c-{i}") for i in range(start, min(keys, start + 500))]
            await asyncio.gather(*(view.try_acquire_async() for view in views))

    began = time.perf_counter()
    asyncio.run(main())
    backend.close()
    return (time.perf_counter() - began) / keys


def _line(label: str, values: list[float]) -> str:
    return f"{label:<44} median {statistics.median(values):.3f}x  min {min(values):.3f}x  max {max(values):.3f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6391/0", help="a Redis of the benchmark's own")
    parser.add_argument("--calls", type=int, default=5_000, help="calls per measure (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the median reported (default 5)")
    parser.add_argument("--keys", type=int, default=KEYS, help=f"keys through Redis (default {KEYS:,})")
    args = parser.parse_args()
    ratios = in_process(args.calls, args.rounds)
    print(_line("in process: view / plain try_acquire", ratios) + "  (target <= 1.1x)")
    client_ratios, server_ratios = through_redis(args.redis, args.calls, args.rounds)
    print(_line("Redis client: view / plain try_acquire", client_ratios) + "  (target <= 1.1x)")
    print(_line("Redis server: view / plain usec per call", server_ratios))
    counted, per_key, per_plain = many_keys(args.redis, args.keys)
    print(
        f"{args.keys:,} keys through Redis: {counted:,} script calls ({counted / args.keys:.3f} per decision); "
        f"{per_key * 1e6:.0f} us per key with its view built = {per_key / per_plain:.2f}x a plain decision "
        f"({per_plain * 1e6:.0f} us)"
    )
    print(f"the same through asyncio, 500 at once: {asyncio_keys(args.redis, args.keys) * 1e6:.0f} us per key")
    start, full, after = memory(args.keys)
    print(
        f"in-process memory: {start / 1e6:.2f} MB at the start, {full / 1e6:.2f} MB with {args.keys:,} keys, "
        f"{after / 1e6:.2f} MB after the sweep ({after - start:+,} bytes over the start)"
    )


if __name__ == "__main__":
    main()
