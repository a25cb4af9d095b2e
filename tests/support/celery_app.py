"""The Celery app that the tests' ``celery worker`` processes import (``-A celery_app``).

Everything a run needs comes from the environment, set by ``celery_fleet.Fleet``:

- ``RATELIMIT_CELERY_BROKER``: the broker URL (RabbitMQ on loopback);
- ``REDIS_URL``: the Redis server holding the budget and the records;
- ``RATELIMIT_CELERY_RUN``: the run's name: the limiter's name, and the prefix of the
  Redis lists the tasks record into;
- ``RATELIMIT_CELERY_LIMIT``: ``capacity,rate,guard`` of the shared ``TokenBucket``;
- ``RATELIMIT_CELERY_MAX_BLOCK``: ``limited``'s ``max_block``;
- ``RATELIMIT_CELERY_PRIORITY_QUEUE``: ``1`` to declare the queue a priority queue
  (``task_queue_max_priority = 9``: deferred tasks go at 9, the tasks sent at 0);
- ``RATELIMIT_CELERY_DEFER_QUEUE``: the queue ``call`` sends deferrals to (none: the
  tasks' own);
- ``RATELIMIT_CELERY_PREFETCH``: ``worker_prefetch_multiplier`` (Celery's default, 4,
  unless given).

Each worker counts itself in ``<run>:ready`` once it consumes. Each run of a task
in a worker records, in the list ``<run>:slots``, how long it held
its worker slot before its body started (or, for a run that deferred, until it ended),
how early it came for the grant it carried (``None``: it carried none), when it ended
and the priority and routing key (its queue) its message was delivered with;
each body records in ``<run>:bodies`` when it started (wall clock), its argument, its
process id and its parent's (the worker's, in the prefork pool), and the grant its
message carried (``due``, or ``None``). ``Fleet`` reads both.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import task_postrun, task_prerun, worker_ready

from ratelimit import Composite, RedisBackend, TokenBucket
from ratelimit.celery import HEADER, limited

BROKER = os.environ.get("RATELIMIT_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ["REDIS_URL"]  # celery_fleet.Fleet sets it, from the suite's fixture
RUN = os.environ.get("RATELIMIT_CELERY_RUN", "celery-app-unconfigured")
CAPACITY, RATE, GUARD = (float(x) for x in os.environ.get("RATELIMIT_CELERY_LIMIT", "4,10,0.1").split(","))
MAX_BLOCK = float(os.environ.get("RATELIMIT_CELERY_MAX_BLOCK", "1.0"))
PRIORITY_QUEUE = os.environ.get("RATELIMIT_CELERY_PRIORITY_QUEUE") == "1"
DEFER_QUEUE = os.environ.get("RATELIMIT_CELERY_DEFER_QUEUE") or None
PREFETCH = int(os.environ.get("RATELIMIT_CELERY_PREFETCH", "4"))

app = Celery("celery_app", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    # Nothing but the tasks' own queue: no remote-control queues left behind.
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=PREFETCH,
)
if PRIORITY_QUEUE:
    app.conf.task_queue_max_priority = 9
    app.conf.task_default_priority = 0

backend = RedisBackend.from_url(REDIS_URL)
limiter = TokenBucket(CAPACITY, RATE, backend=backend, name=RUN, guard=GUARD)
# Requests and tokens per minute, as an LLM API counts them (per second here, to be quick).
llm = Composite(
    [TokenBucket(CAPACITY, RATE, guard=GUARD), TokenBucket(CAPACITY * 100, RATE * 100, guard=GUARD)],
    backend=backend,
    name=f"{RUN}-llm",
)
records = redis.Redis.from_url(REDIS_URL)

# When the current run of each thread's task started, and its body (threads pool).
_here = threading.local()


@worker_ready.connect
def _ready(**_: Any) -> None:
    records.incr(f"{RUN}:ready")


@task_prerun.connect
def _started(task: Task, **_: Any) -> None:
    _here.started = time.time()
    _here.body = None
    grant = (task.request.headers or {}).get(HEADER)
    _here.due = grant["due"] if isinstance(grant, dict) else None
    delivery = task.request.delivery_info or {}
    _here.priority = delivery.get("priority")
    _here.queue = delivery.get("routing_key")


@task_postrun.connect
def _ended(**_: Any) -> None:
    started = getattr(_here, "started", None)
    if started is None:
        return
    until = _here.body if _here.body is not None else time.time()
    due = _here.due
    record = {
        "held": until - started,
        "body": _here.body is not None,
        "early": None if due is None else due - started,
        "end": time.time(),
        "priority": _here.priority,
        "queue": _here.queue,
    }
    records.rpush(f"{RUN}:slots", json.dumps(record))
    _here.started = None


def _body(item: object) -> None:
    now = time.time()
    _here.body = now
    record = {"at": now, "item": item, "pid": os.getpid(), "parent": os.getppid(), "due": _here.due}
    records.rpush(f"{RUN}:bodies", json.dumps(record))


@app.task(bind=True)
@limited(limiter, max_block=MAX_BLOCK, queue=DEFER_QUEUE)
def call(self: Task, item: int) -> None:
    """One request to the provider, limited."""
    _body(item)


@app.task(bind=True, acks_late=True)
@limited(limiter, max_block=MAX_BLOCK)
def call_late(self: Task, item: int) -> None:
    """:func:`call` acknowledged after it ran: a worker's death redelivers it."""
    _body(item)


@app.task(bind=True)
def sleeping_call(self: Task, item: int) -> None:
    """The usual recipe without ``limited``: the slot sleeps until the grant."""
    limiter.acquire()
    _body(item)


@app.task(bind=True, max_retries=0)
@limited(limiter, max_block=MAX_BLOCK)
def refused_once(self: Task, item: int, retry_after: float) -> None:
    """Refused by the provider (429, ``Retry-After``) on its first run's body."""
    if records.incr(f"{RUN}:refusals:{item}") == 1:
        limiter.feedback({"Retry-After": str(retry_after)}, status=429)
        raise RuntimeError("429 Too Many Requests")
    _body(item)


@app.task(bind=True, max_retries=3)
@limited(limiter, max_block=MAX_BLOCK)
def retried_once(self: Task, item: int) -> None:
    """A request whose first answer asks for a retry at once: each run is a request."""
    _body(item)
    if self.request.retries == 0:
        raise self.retry(countdown=0)


@app.task(bind=True)
@limited(llm, tokens=lambda item, prompt: [1, len(prompt)], max_block=MAX_BLOCK)
def complete(self: Task, item: int, prompt: str) -> None:
    """An LLM call: one request and ``len(prompt)`` tokens."""
    _body(item)
