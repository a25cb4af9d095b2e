"""Real ``celery worker`` processes on a queue of their own, and what their tasks recorded.

``Fleet`` starts workers importing ``celery_app`` (each in a process group of its own,
so that its pool's children go with it), sends tasks to them by name, reads the
records the tasks leave in Redis, and cleans up: the workers, the queue, the keys.
The figures a fleet's records are judged by are the functions below it.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from conftest import REDIS_URL, unique_name

HERE = Path(__file__).resolve().parent
BROKER = os.environ.get("RATELIMIT_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")


def broker_reachable() -> str | None:
    """``None`` if the broker answers, else why not."""
    app = Celery("probe", broker=BROKER, set_as_current=False)
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return f"no AMQP broker at {BROKER}: {exc}"
    return None


class Fleet:
    """Celery workers sharing one ``TokenBucket(capacity, rate, guard=guard)`` in Redis.

    ``priority_queue`` declares the queue with priorities (deferred tasks then pass the
    backlog of tasks sent), ``defer_queue`` sends ``call``'s deferrals to a queue of
    their own that the workers consume too, ``prefetch`` is the workers'
    ``worker_prefetch_multiplier``."""

    def __init__(
        self,
        *,
        capacity: float = 4,
        rate: float = 10,
        guard: float = 0.1,
        max_block: float = 1.0,
        prefix: str = "celery",
        priority_queue: bool = False,
        defer_queue: bool = False,
        prefetch: int = 4,
    ) -> None:
        # The run's id in it: what a worker leaves (the limiter's keys) goes with the run.
        self.run = unique_name(prefix)
        self.queue = self.run
        self.deferred = f"{self.run}-deferred" if defer_queue else None
        self.queues = [self.queue] if self.deferred is None else [self.queue, self.deferred]
        self.rate = rate
        self.capacity = capacity
        self.max_block = max_block
        self.priority_queue = priority_queue
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)]),
            "RATELIMIT_CELERY_BROKER": BROKER,
            "REDIS_URL": REDIS_URL,
            "RATELIMIT_CELERY_RUN": self.run,
            "RATELIMIT_CELERY_LIMIT": f"{capacity},{rate},{guard}",
            "RATELIMIT_CELERY_MAX_BLOCK": str(max_block),
            "RATELIMIT_CELERY_PRIORITY_QUEUE": "1" if priority_queue else "0",
            "RATELIMIT_CELERY_PREFETCH": str(prefetch),
            "RATELIMIT_CELERY_DEFER_QUEUE": self.deferred or "",
        }
        self.logs = Path(tempfile.mkdtemp(prefix="ratelimit-celery-"))
        self.workers: list[subprocess.Popen[bytes]] = []
        self.redis = redis.Redis.from_url(REDIS_URL)
        self.sender = Celery("sender", broker=BROKER, set_as_current=False)
        self.sender.conf.task_ignore_result = True
        if priority_queue:
            # The queue is declared as the workers declare it: a priority queue.
            self.sender.conf.task_queue_max_priority = 9
            self.sender.conf.task_default_priority = 0

    # -- workers ----------------------------------------------------------------

    def start(self, count: int, *, pool: str = "prefork", concurrency: int = 4, timeout: float = 60) -> None:
        """Start ``count`` workers and wait until each says it is ready."""
        started = []
        for _ in range(count):
            number = len(self.workers)
            log = self.logs / f"worker-{number}.log"
            command = [
                sys.executable, "-m", "celery", "-A", "celery_app", "worker",
                "-Q", ",".join(self.queues), "-P", pool, "-c", str(concurrency),
                "-n", f"w{number}-{self.run}@%h", "-l", "WARNING",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ]  # fmt: skip
            with log.open("wb") as out:
                worker = subprocess.Popen(
                    command, cwd=HERE, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            self.workers.append(worker)
            started.append((worker, log))
        deadline = time.monotonic() + timeout
        while int(self.redis.get(f"{self.run}:ready") or 0) < len(self.workers):
            for worker, log in started:
                if worker.poll() is not None:
                    raise RuntimeError(f"a celery worker exited with {worker.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the celery workers were not ready in {timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def kill(self, number: int) -> None:
        """SIGKILL worker ``number`` and its pool's processes, as a machine dying would."""
        worker = self.workers[number]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    def stop(self) -> None:
        """SIGKILL every worker and its pool: what they held unacknowledged goes back to
        the queue, which ``cleanup`` deletes."""
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace")[-4000:] for path in sorted(self.logs.glob("*.log")))

    # -- tasks and records --------------------------------------------------------

    def send(self, task: str, items: Iterable[Sequence[Any]]) -> int:
        """Send ``celery_app.<task>(*args)`` for each ``args``; return how many."""
        sent = 0
        with self.sender.producer_or_acquire() as producer:
            for args in items:
                self.sender.send_task(f"celery_app.{task}", args=tuple(args), queue=self.queue, producer=producer)
                sent += 1
        return sent

    def bodies(self) -> list[dict[str, Any]]:
        """What each body recorded, in order of start: ``at`` (wall clock), ``item``, ``pid``,
        ``parent`` and ``due`` (the grant its message carried, or ``None``)."""
        found = [json.loads(raw) for raw in self.redis.lrange(f"{self.run}:bodies", 0, -1)]
        return sorted(found, key=lambda body: body["at"])

    def slots(self) -> list[dict[str, Any]]:
        """For each run: ``held``, the seconds its worker slot waited; ``body``, whether it
        ran the body; ``early``, how long before the grant it carried it started (``None``:
        it carried none, a first run); ``end``, when it ended (wall clock); ``priority``
        and ``queue``, what its message was delivered with."""
        return [json.loads(raw) for raw in self.redis.lrange(f"{self.run}:slots", 0, -1)]

    def wait_for(self, items: set[Any], timeout: float) -> list[dict[str, Any]]:
        """Wait until a body ran for every one of ``items`` (or ``timeout``); the bodies."""
        deadline = time.monotonic() + timeout
        while True:
            bodies = self.bodies()
            if items <= {body["item"] for body in bodies} or time.monotonic() > deadline:
                return bodies
            time.sleep(0.25)

    def waiting(self) -> int:
        """Messages in the queues, ready or held by a worker without acknowledgement."""
        with self.sender.connection_for_write() as connection:
            channel = connection.default_channel
            return sum(int(channel.queue_declare(queue, passive=True).message_count) for queue in self.queues)

    def cleanup(self) -> None:
        self.stop()
        try:
            with self.sender.connection_for_write() as connection:
                for queue in self.queues:
                    connection.default_channel.queue_delete(queue)
        except Exception:  # pragma: no cover - the broker went away
            pass
        keys = [
            f"{self.run}:bodies",
            f"{self.run}:slots",
            f"{self.run}:ready",
            *self.redis.scan_iter(match=f"{self.run}:refusals:*"),
        ]
        self.redis.delete(*keys)
        self.redis.close()
        for path in self.logs.glob("*"):
            path.unlink()
        self.logs.rmdir()


def most_in_any(times: Sequence[float], seconds: float = 1.0) -> int:
    """The most of ``times`` (sorted) that fall in any interval of ``seconds``."""
    return max((bisect.bisect_right(times, t + seconds) - i for i, t in enumerate(times)), default=0)


def taken_in(slots: Sequence[dict[str, Any]]) -> float:
    """When the last run that carried no grant ended: the fleet had taken in a burst of
    tasks sent at once, and the re-runs no longer queue behind first runs."""
    return max(float(slot["end"]) for slot in slots if slot["early"] is None)


def rate_of(times: Sequence[float]) -> float:
    """Events per second in ``times`` (sorted), from the first to the last."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
