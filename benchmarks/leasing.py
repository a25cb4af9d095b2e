"""Leases and coalescing through a real Redis, as ratios to floors of the same run.

Measures, in one run (the machine is shared and noisy: compare within a run):

- **floor**: an empty script (``return 0``) called by SHA, and ``PING``, per second,
  from one process and one thread: the most round trips one caller makes;
- **one process**: ``try_acquire`` per second in a loop, uncontended, on a hot
  ``TokenBucket`` (its rate never binds) with and without ``lease=0.05``, sync and
  asyncio; as a share of the empty-script floor;
- **eight processes**: the same hot bucket shared by ``--processes`` worker
  processes, each one thread calling ``try_acquire`` for ``--seconds``: acquires per
  second in all, and script calls per grant, with and without a lease;
- **accuracy**: 4 processes of 4 threads calling ``acquire()`` on one
  ``TokenBucket(400, 2000, guard=0.05)`` with demand far above supply, with and
  without ``lease=0.05``: the most grants in any one second against capacity + rate,
  the sustained rate (past the first second), each process's share of the grants, script calls per grant;
- **paced**: the same bucket, each process asking 450/s with ``try_acquire`` (1,800/s
  in all, under the rate): the budget has slack, and leases are taken;
- **coalescing**: 1,000 asyncio tasks (and 100 threads) acquiring on one limiter in
  one process, with ``coalesce`` on (the default) and off: script calls per grant,
  and the connections the process opened.

::

    python benchmarks/leasing.py                      # about two minutes, on REDIS_URL
    python benchmarks/leasing.py --processes 8 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import multiprocessing
import os
import threading
import time
import uuid
from typing import Any

import redis

from ratelimit import AcquireTimeout, RedisBackend, TokenBucket

#: The server measured: ``REDIS_URL`` (the spawned workers read it too).
URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HUGE = 1e12
#: Each paced process's demand per second (4 of them: 1,800/s against 2,000/s).
PACE = 450.0


def script_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    # A decision is an FCALL of the library, or a script where the server has no Functions.
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha", "eval"))


def per_second(call: Any, seconds: float) -> float:
    count, stop = 0, time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for _ in range(100):
            call()
        count += 100
    return count / seconds


async def per_second_async(call: Any, seconds: float) -> float:
    count, stop = 0, time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for _ in range(100):
            await call()
        count += 100
    return count / seconds


def floors(seconds: float) -> tuple[float, float]:
    client = redis.Redis.from_url(URL)
    sha = client.script_load("return 0")
    empty = per_second(lambda: client.evalsha(sha, 1, "ratelimit:{bench}:floor"), seconds)
    ping = per_second(client.ping, seconds)
    client.close()
    return empty, ping


def one_process(seconds: float) -> dict[str, float]:
    backend = RedisBackend.from_url(URL)
    run = uuid.uuid4().hex[:6]
    plain = TokenBucket(HUGE, HUGE, backend=backend, name=f"lease-{run}-plain")
    leased = TokenBucket(HUGE, HUGE, backend=backend, name=f"lease-{run}-leased", lease=0.05)
    rates = {"plain": per_second(plain.try_acquire, seconds), "leased": per_second(leased.try_acquire, seconds)}

    async def both() -> None:
        rates["plain async"] = await per_second_async(plain.try_acquire_async, seconds)
        rates["leased async"] = await per_second_async(leased.try_acquire_async, seconds)
        await backend.aclose()

    asyncio.run(both())
    return rates


def _hot_worker(name: str, lease: float | None, seconds: float, start: float, out: Any) -> None:
    backend = RedisBackend.from_url(URL)
    limiter = TokenBucket(HUGE, HUGE, backend=backend, name=name, lease=lease)
    limiter.try_acquire()  # connected, script loaded
    while time.time() < start:
        time.sleep(0.001)
    count, stop = 0, start + seconds
    while time.time() < stop:
        for _ in range(50):
            limiter.try_acquire()
        count += 50
    backend.close()
    out.put(count)


def _accuracy_worker(name: str, lease: float | None, seconds: float, start: float, out: Any) -> None:
    _grants_worker(name, lease, seconds, start, out, paced=False)


def _paced_worker(name: str, lease: float | None, seconds: float, start: float, out: Any) -> None:
    _grants_worker(name, lease, seconds, start, out, paced=True)


def _grants_worker(name: str, lease: float | None, seconds: float, start: float, out: Any, *, paced: bool) -> None:
    backend = RedisBackend.from_url(URL)
    limiter = TokenBucket(400, 2000, backend=backend, name=name, lease=lease, guard=0.05)
    while time.time() < start:
        time.sleep(0.001)
    stop = start + seconds
    grants: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            left = stop - time.time()
            if left <= 0:
                return
            if paced:
                # 4 threads x 1/PACE s: this process asks PACE/s, the fleet less than
                # the rate, in bursts when threads line up.
                time.sleep(4 / PACE)
                if not limiter.try_acquire():
                    continue
            else:
                try:
                    limiter.acquire(timeout=left)
                except AcquireTimeout:
                    return
            now = time.time()
            with lock:
                grants.append(now)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    backend.close()
    out.put(grants)


def fleet(target: Any, processes: int, seconds: float, lease: float | None) -> tuple[list[Any], int]:
    """What each of ``processes`` workers returned, and the script calls they made."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    name = f"lease-{uuid.uuid4().hex[:6]}"
    probe = redis.Redis.from_url(URL)
    before = script_calls(probe)
    start = time.time() + 2.0  # every worker connected and ready first
    workers = [ctx.Process(target=target, args=(name, lease, seconds, start, out)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    calls = script_calls(probe) - before
    probe.close()
    return results, calls


def most_in_any(times: list[float], width: float) -> int:
    return max(bisect.bisect_left(times, t + width) - i for i, t in enumerate(times))


def coalescing(coalesce: bool) -> tuple[float, int, float, int]:
    """Script calls per grant and connections opened: 1,000 tasks, then 100 threads."""
    probe = redis.Redis.from_url(URL)

    def connections(tag: str) -> int:
        return sum(1 for c in probe.client_list() if c.get("name") == tag)

    tag = f"lease-{uuid.uuid4().hex[:6]}"
    backend = RedisBackend.from_url(URL, coalesce=coalesce, client_name=tag)
    limiter = TokenBucket(100, 2_000, backend=backend, name=tag)
    seen: list[int] = []

    async def tasks() -> int:
        async def one() -> None:
            for _ in range(5):
                await limiter.acquire_async()

        before = script_calls(probe)
        await asyncio.gather(*(one() for _ in range(1_000)))
        seen.append(connections(tag))
        return script_calls(probe) - before

    task_calls = asyncio.run(tasks())
    before = script_calls(probe)
    threads = [threading.Thread(target=lambda: [limiter.acquire() for _ in range(20)]) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    thread_calls = script_calls(probe) - before
    thread_connections = connections(tag)
    backend.close()
    probe.close()
    return task_calls / 5_000, seen[0], thread_calls / 2_000, thread_connections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    empty, ping = floors(args.seconds)
    print(f"floor: empty EVALSHA {empty:,.0f}/s, PING {ping:,.0f}/s (one process, one thread)")

    print("\none process, uncontended try_acquire on a hot TokenBucket:")
    for what, rate in one_process(args.seconds).items():
        print(f"  {what:<14} {rate:>11,.0f}/s  {rate / empty:6.2f}x the empty EVALSHA")

    print(f"\n{args.processes} processes, one thread each, try_acquire on one hot TokenBucket:")
    for lease in (None, 0.05):
        counts, calls = fleet(_hot_worker, args.processes, args.seconds, lease)
        total = sum(counts)
        print(
            f"  lease={lease!s:<5} {total / args.seconds:>11,.0f}/s in all  {total / args.seconds / empty:6.2f}x "
            f"the empty EVALSHA  {calls / total:.4f} script calls per grant"
        )

    print("\naccuracy: 4 processes x 4 threads acquire() on TokenBucket(400, 2000, guard=0.05), demand >> supply:")
    for lease in (None, 0.05):
        results, calls = fleet(_accuracy_worker, 4, args.seconds, lease)
        grants = sorted(t for r in results for t in r)
        # The rate past the first second, once the burst is spent.
        settled = grants[bisect.bisect_left(grants, grants[0] + 1.0) :]
        sustained = len(settled) / (settled[-1] - settled[0])
        shares = [len(r) / len(grants) for r in results]
        print(
            f"  lease={lease!s:<5} most in any 1 s {most_in_any(grants, 1.0)} (capacity + rate = 2400)  "
            f"sustained {sustained:,.0f}/s  shares {min(shares):.3f}-{max(shares):.3f}  "
            f"{calls / len(grants):.3f} script calls per grant"
        )

    print(f"\npaced: the same bucket, 4 processes x 4 threads each asking {PACE:g}/s in all with try_acquire:")
    for lease in (None, 0.05):
        results, calls = fleet(_paced_worker, 4, args.seconds, lease)
        grants = sorted(t for r in results for t in r)
        print(
            f"  lease={lease!s:<5} most in any 1 s {most_in_any(grants, 1.0)} (capacity + rate = 2400)  "
            f"granted {len(grants) / args.seconds:,.0f}/s  {calls / len(grants):.3f} script calls per grant"
        )

    print("\ncoalescing: one TokenBucket(100, 2000), demand >> supply:")
    for coalesce in (True, False):
        task_calls, task_conns, thread_calls, thread_conns = coalescing(coalesce)
        print(
            f"  coalesce={coalesce!s:<5} 1,000 tasks: {task_calls:.3f} calls per grant, {task_conns} connections;  "
            f"100 threads: {thread_calls:.3f} calls per grant, {thread_conns} connections"
        )


if __name__ == "__main__":
    main()
