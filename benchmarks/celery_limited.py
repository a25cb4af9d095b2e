"""A Celery fleet on one budget: ``limited`` against sleeping in the task, same run.

Starts real ``celery worker`` processes (``tests/support/celery_fleet.py``: prefork, on a
queue of their own, RabbitMQ and Redis on loopback) and sends them a burst of tasks
whose bodies are one request each, sharing ``TokenBucket(4, R, guard=0.1)``:

- **limited**: ``@limited(bucket, max_block=...)``, ``max_block`` (unless given) half
  the slots' share of a second, slots / 2R, at most 1, so that the fleet has more slots
  than R x ``max_block``: longer waits go back to the broker with their grant. Three
  times: on a plain queue with Celery's default prefetch (4), and the two ways
  docs/task-queues.md gives for bursts, with ``worker_prefetch_multiplier = 1``: a
  priority queue (``limited+pq``: ``task_queue_max_priority``, deferred tasks at its
  top priority), or a queue of deferrals that the workers consume too (``limited+dq``:
  ``limited(..., queue=...)``);
- **sleeping**: ``bucket.acquire()`` at the top of the task, as users do without it:
  the slot sleeps until the grant (plain queue, default prefetch).

For each, against R: the fleet's throughput (bodies per second over the whole run,
from before the burst was sent to the last body; from the first body to the last; and
``steady``, from when the fleet had taken the burst in: every first run done), the
most bodies in any one second (the bound is R + 4), and the time worker slots spent
waiting instead of working: in all (slot-seconds), per task, the longest, and as a
share of the slot-time the run had (slots x its duration). A slot not waiting is free
for any other task of the workers' queues.

::

    python benchmarks/celery_limited.py                     # about three minutes
    python benchmarks/celery_limited.py --rates 10 --seconds 10 --workers 3 --concurrency 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from celery_fleet import Fleet, broker_reachable, most_in_any, rate_of, taken_in

CAPACITY = 4


#: name: (task, Fleet options)
SETUPS: dict[str, tuple[str, dict[str, Any]]] = {
    "limited": ("call", {}),
    "limited+pq": ("call", {"priority_queue": True, "prefetch": 1}),
    "limited+dq": ("call", {"defer_queue": True, "prefetch": 1}),
    "sleeping": ("sleeping_call", {}),
}


def run(
    task: str, options: dict[str, Any], rate: float, seconds: float, workers: int, concurrency: int, max_block: float
) -> dict[str, Any]:
    fleet = Fleet(capacity=CAPACITY, rate=rate, max_block=max_block, prefix="bench-celery", **options)
    try:
        fleet.start(workers, concurrency=concurrency)
        count = int(rate * seconds)
        sent = time.time()
        fleet.send(task, ([i] for i in range(count)))
        bodies = fleet.wait_for(set(range(count)), timeout=seconds * 3 + 30)
        times = [body["at"] for body in bodies]
        slots = fleet.slots()
        waited = sum(slot["held"] for slot in slots)
        duration = times[-1] - sent
        return {
            "task": task,
            "rate": rate,
            "done": len({body["item"] for body in bodies}) / count,
            "whole": count / (times[-1] - sent) / rate,
            "throughput": rate_of(times) / rate,
            # Sleeping in the task, every run is a first run: nothing to take in.
            "steady": rate_of([t for t in times if t >= taken_in(slots)]) / rate if task == "call" else None,
            "most": most_in_any(times),
            "waited": waited,
            "per_task": waited / count,
            "longest": max(slot["held"] for slot in slots),
            "share": waited / (workers * concurrency * duration),
            "runs": len(slots) / count,
        }
    finally:
        fleet.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 20.0], help="R, requests per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="tasks sent: R x this")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--max-block", type=float, default=None, help="default: slots / 2R, at most 1 (so that tasks are deferred)"
    )
    args = parser.parse_args()
    why = broker_reachable()
    if why is not None:
        sys.exit(why)
    slots = args.workers * args.concurrency
    print(
        f"{args.workers} prefork workers x {args.concurrency} = {slots} slots; TokenBucket({CAPACITY}, R, guard=0.1); "
        f"a burst of R x {args.seconds:g} tasks"
    )
    print(
        f"{'R':>5} {'max_block':>9} {'task':<10} {'done':>5} {'whole/R':>7} {'1st-last':>8} {'steady':>6} "
        f"{'max/1s':>7} {'slot-s waiting':>15} "
        f"{'per task':>9} {'longest':>8} {'share':>6} {'runs/task':>9}"
    )
    for rate in args.rates:
        max_block = min(1.0, slots / rate / 2) if args.max_block is None else args.max_block
        for name, (task, options) in SETUPS.items():
            r = run(task, options, rate, args.seconds, args.workers, args.concurrency, max_block)
            steady = "-" if r["steady"] is None else f"{r['steady']:.2f}"
            print(
                f"{rate:>5g} {max_block:>9.2g} {name:<10} {r['done']:>5.0%} {r['whole']:>7.2f} {r['throughput']:>8.2f} "
                f"{steady:>6} "
                f"{r['most']:>4}/{rate + CAPACITY:<3g}"
                f"{r['waited']:>14.1f} {r['per_task']:>8.3f}s {r['longest']:>7.2f}s {r['share']:>6.0%} "
                f"{r['runs']:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
