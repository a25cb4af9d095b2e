"""Scaling on a real Redis Cluster: many limiters against 1, 2 and 3 masters, and one hot one.

For each cluster size a Cluster of that many masters (no replicas) is started on
loopback in a temporary folder. ``--processes`` worker processes then run for
``--seconds`` each:

- **floor**: an empty script (``return 0``) called by SHA on a key picked at random
  from the limiters' keys: the most script calls per second these processes can make
  against this cluster, measured in the same run;
- **many**: ``try_acquire`` on one of ``--limiters`` token buckets picked at random
  (their keys spread over every master's slots);
- **hot**: ``try_acquire`` on one token bucket that every process shares (one key:
  one master's one thread, whatever the cluster's size);
- **leased**: the same hot bucket with ``lease=0.05``: each process spends a batch of
  it locally between script calls (see docs/fleets.md, "Hot limiters").

Printed: acquires per second in all, and as a share of the floor::

    python benchmarks/cluster_scale.py                  # 1, 2 and 3 masters, 4 processes, 5 s
    python benchmarks/cluster_scale.py --masters 3 --processes 8 --seconds 10

The machine's cores bound the clients as much as the servers: on two cores the
worker processes and the masters share them, and the figures say how far that goes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from redis.cluster import RedisCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from ratelimit import RedisBackend, TokenBucket
from ratelimit._stores.redis.backend import key_for

from servers import RedisCluster as ClusterProcesses

HUGE = 1e15


def _client(ports: list[int]) -> RedisCluster:
    # One node is enough to start from: the client learns the others' slots from it.
    return RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=5)


def _work(ports: list[int], mode: str, names: list[str], seconds: float, start: float, out: Any) -> None:
    client = _client(ports)
    rng = random.Random()
    count = 0
    if mode == "floor":
        sha = client.script_load("return 0")
        keys = [key_for(name, "token_bucket") for name in names]
        while time.time() < start:
            time.sleep(0.001)
        stop = start + seconds
        while time.time() < stop:
            client.evalsha(sha, 1, rng.choice(keys))
            count += 1
    else:
        backend = RedisBackend(client)
        lease = 0.05 if mode == "leased" else None
        limiters = [TokenBucket(HUGE, HUGE, backend=backend, name=name, lease=lease) for name in names]
        while time.time() < start:
            time.sleep(0.001)
        stop = start + seconds
        while time.time() < stop:
            rng.choice(limiters).try_acquire()
            count += 1
    client.close()
    out.put(count)


def _run(ports: list[int], mode: str, names: list[str], processes: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    start = time.time() + 2.0  # every worker connected and ready first
    workers = [ctx.Process(target=_work, args=(ports, mode, names, seconds, start, out)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    total = sum(int(out.get(timeout=seconds + 60)) for _ in workers)
    for worker in workers:
        worker.join()
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--limiters", type=int, default=1000)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:6]
    many = [f"scale-{run}-{i}" for i in range(args.limiters)]
    hot = [f"scale-{run}-hot"]
    leased = [f"scale-{run}-leased"]
    print(f"{args.processes} processes x {args.seconds:g} s; {args.limiters} limiters for 'many'")
    print(
        f"{'masters':>7}  {'floor/s':>9}  {'many/s':>9} {'of floor':>8}  {'hot/s':>9} {'of floor':>8}  "
        f"{'leased/s':>10} {'of floor':>8}"
    )
    for masters in args.masters:
        with ClusterProcesses(masters) as cluster:
            ports = cluster.ports
            probe = _client(ports)
            probe.ping()
            probe.close()
            floor = _run(ports, "floor", many, args.processes, args.seconds)
            spread = _run(ports, "many", many, args.processes, args.seconds)
            single = _run(ports, "hot", hot, args.processes, args.seconds)
            local = _run(ports, "leased", leased, args.processes, args.seconds)
            print(
                f"{masters:>7}  {floor:>9,.0f}  {spread:>9,.0f} {spread / floor:>8.2f}  "
                f"{single:>9,.0f} {single / floor:>8.2f}  {local:>10,.0f} {local / floor:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
