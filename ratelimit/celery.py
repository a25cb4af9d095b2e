"""Celery tasks that keep one budget across every worker: :func:`limited`.

Who calls it: applications, on their task functions.

Celery's own ``rate_limit`` is per worker. ``limited`` reserves the slot
(``limiter.reserve``) from a limiter shared by every worker (through Redis, or a SQLite
file on one machine), and a task that would have to wait long does not hold its
worker slot sleeping: it is sent back to the broker for the moment its slot comes::

    geocode = TokenBucket(20, 1000 / 60, backend=RedisBackend.from_url(url), name="geocode")

    @app.task(bind=True)
    @limited(geocode, tokens=1, max_block=1.0)
    def lookup(self, address): ...

Each run of the task (in the worker, not an eager or direct call) goes this way:

1. It reserves ``tokens`` (``limiter.reserve``: in arrival order, never sleeping).
2. A wait of at most ``max_block`` seconds is slept in the task, then the body runs.
3. A longer wait *defers* the task: the same task (same id, arguments and options) is
   published again with an ``eta`` ``lead`` seconds before its grant, carrying the
   grant in a message header, and this run ends as ignored (neither a success nor a
   failure, and no retry: ``request.retries`` and ``max_retries`` are untouched). The
   re-run finds the grant, does not reserve again, sleeps what is left (a broker
   delivers early or late by a fraction of a second) and runs the body: a body never
   starts before its grant, and the fleet keeps the order in which tasks reserved.
   A re-run delivered more than ``late`` seconds after its grant reserves again
   instead: its slot is past, and late re-runs arriving together would reach the
   provider in one burst. The first such re-run in a process, for each limiter, is
   logged as a warning (logger ``ratelimit``). A grant serves one run: a retry of
   the body (``self.retry()``, whose message carries the headers of the run it
   retries) reserves anew, at once or after its countdown.
4. If the body raises after the provider refused it (a 429 or 503 fed back to this
   limiter in this run, which pauses the budget for every worker), or raises a
   :class:`~ratelimit.RateLimitError` that says when to come back (an integration's
   ``RetryError`` over a 429 with ``Retry-After``, ``CircuitOpen``,
   ``AcquireTimeout``), the task is deferred by that long and reserves again then.

A burst of tasks sent at once. Its first runs reserve the next slots and defer; a
re-run is published behind the first runs of the rest still queued, and a worker
holds the messages it prefetched ahead of a re-run that falls due. Re-runs of the
earliest grants then come late, reserve again, and their slots go unused while the
fleet takes the burst in (the longer, the more loaded the workers). Two settings
remove that wait. First, re-runs that pass the backlog: a priority queue (Celery's
``task_queue_max_priority``, on RabbitMQ), whose top priority a task deferred to its
grant is then sent at by default, or ``queue=``, a queue of deferrals only that the
workers consume too (any broker). Second, ``worker_prefetch_multiplier = 1``, so that
a re-run falling due is not queued in its worker behind prefetched messages. The
budget is never exceeded either way.

Acknowledgement modes. With Celery's default (early acknowledgement) a message is
acknowledged when its run starts: a worker that dies loses the runs it had started, as
it would without ``limited``, and their slots go unused; the deferred messages it held
(not yet started) go back to the queue and keep their grants. With ``acks_late=True``
a run that died is delivered again and may already have sent its request; a
redelivered message whose grant is already due therefore reserves again (a grant still
in the future cannot have been used: no body starts before its grant).

A limiter whose state lives in this process (no ``backend=``, or ``MemoryBackend``) is
refused: every worker process would have a whole budget of its own, and the fleet would
send as many times the limit as there are processes. ``local=True`` accepts it, for a
fleet of one worker process (the ``solo`` or ``threads`` pool, one worker).

Needs the ``celery`` extra: ``pip install 'ratelimit-fleet[celery]'``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar, cast

from celery import Task
from celery.exceptions import Ignore

from ._errors import RateLimitError, RetryError
from ._events import Event, Paused
from ._headers.parse import parse_rate_limit_headers
from ._limiting.feedback import PUSHBACK
from ._limiting.front import Limiter
from ._limiting.guard import DEFAULT_GUARD
from ._limiting.reservation import Reservation
from ._validate import MAX_HORIZON

__all__ = ["HEADER", "limited"]

logger = logging.getLogger("ratelimit")

P = ParamSpec("P")
R = TypeVar("R")

#: The message header that carries a deferred task's grant to its re-run: a mapping
#: ``{"name": limiter name, "due": epoch seconds (wall clock), "retries": the
#: request's retries when it was deferred}``. Celery copies a request's headers into
#: every message made from it (``self.retry()`` among them), so the grant names the
#: run it is for: a retry counts one more and reserves anew, and a grant is used once.
HEADER = "ratelimit_grant"

#: The default ``lead`` is this much of ``max_block``, and at most :data:`LEAD_MOST`.
LEAD_SHARE = 0.5
LEAD_MOST = 0.1

Tokens = float | Sequence[float]


def _seconds(name: str, value: object) -> float:
    """A duration >= 0, finite, as seconds or a ``timedelta``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (a number or a timedelta), got {type(value).__name__} {value!r}")
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be seconds >= 0 and finite, got {value!r}")
    return float(value)


def _short(value: object, most: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= most else f"{text[: most - 5]}...{text[-2:]}"


class _Spec:
    """One ``limited(...)``: the limiter, the cost and the times, checked once."""

    __slots__ = ("late", "lead", "limiter", "max_block", "priority", "queue", "tokens")

    def __init__(
        self,
        limiter: Limiter[Any],
        tokens: object,
        max_block: object,
        lead: object,
        late: object,
        priority: object,
        queue: object,
        local: object,
    ) -> None:
        if isinstance(limiter, Task):
            raise TypeError("limited(...) takes a limiter, got a Celery task")
        if not isinstance(limiter, Limiter):
            raise TypeError(f"limiter must be a ratelimit limiter (TokenBucket, Composite, ...), got {_short(limiter)}")
        if not isinstance(local, bool):
            raise TypeError(f"local must be a bool, got {type(local).__name__} {local!r}")
        if not local and not limiter.backend.shared:
            raise ValueError(
                f"limiter {limiter!r} keeps its budget in this process ({type(limiter.backend).__name__}): every "
                "Celery worker process would get a whole budget of its own. Share it through a RedisBackend "
                "(or a SQLiteBackend for workers on one machine), or pass local=True if a single worker "
                "process runs these tasks"
            )
        # Any: a Composite's methods take one number per member where a limiter's take one.
        self.limiter: Any = cast(Any, limiter)
        if not callable(tokens):
            self.limiter.decorate(tokens)  # checks the cost against the limiter, raising as acquire would
        self.tokens = tokens
        self.max_block = _seconds("max_block", max_block)
        default = min(LEAD_MOST, LEAD_SHARE * self.max_block)
        self.lead = default if lead is None else _seconds("lead", lead)
        if self.lead > self.max_block:
            raise ValueError(f"lead must be <= max_block ({self.max_block:g}), got {lead!r}")
        guard = getattr(limiter, "guard", 0.0)
        default_late = max(DEFAULT_GUARD, guard if isinstance(guard, float) else 0.0)
        self.late = default_late if late is None else _seconds("late", late)
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or priority < 0):
            raise TypeError(f"priority must be an int >= 0 or None, got {_short(priority)}")
        self.priority = priority
        if queue is not None and not isinstance(queue, str):
            raise TypeError(f"queue must be a queue's name (a str) or None, got {_short(queue)}")
        if queue is not None and not queue.strip():
            raise ValueError(f"queue must be a queue's name, not empty, got {queue!r}")
        self.queue = queue

    def cost(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tokens:
        """The tokens this run asks for: ``tokens``, or what it returns for the arguments."""
        tokens = self.tokens
        if not callable(tokens):
            return tokens  # type: ignore[return-value]
        result = tokens(*args, **kwargs)
        name = getattr(tokens, "__name__", None) or _short(tokens)
        if isinstance(result, bool) or not (
            isinstance(result, (int, float))
            or (
                isinstance(result, Sequence)
                and not isinstance(result, (str, bytes))
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in result)
            )
        ):
            raise TypeError(
                f"tokens={name} must return a number (or one per member of a Composite), "
                f"got {type(result).__name__} {_short(result)}"
            )
        try:
            self.limiter.decorate(result)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"tokens={name} returned {_short(result)}: {exc}") from None
        return result


def limited(
    limiter: Limiter[Any],
    tokens: float | Sequence[float] | Callable[..., float | Sequence[float]] = 1,
    max_block: float | timedelta = 1.0,
    *,
    lead: float | timedelta | None = None,
    late: float | timedelta | None = None,
    priority: int | None = None,
    queue: str | None = None,
    local: bool = False,
) -> Callable[[Callable[Concatenate[Any, P], R]], Callable[Concatenate[Any, P], R]]:
    """Rate-limit a bound Celery task on ``limiter``, deferring long waits to the broker.

    Put it under ``@app.task(bind=True)``::

        @app.task(bind=True)
        @limited(geocode, tokens=1, max_block=1.0)
        def lookup(self, address): ...

    Args:
        limiter: a limiter shared by every worker (on a ``RedisBackend``, or a
            ``SQLiteBackend`` for workers on one machine); any kind, ``Composite``
            included.
        tokens: the run's cost, or a function of the task's arguments (without
            ``self``) returning it: ``tokens=lambda prompt: [1, len(prompt) // 4]``
            for a ``Composite`` of requests and tokens per minute.
        max_block: the longest wait slept in the worker slot, in seconds; a longer
            one defers the task to the broker.
        lead: how long before its grant a deferred task is delivered again, to
            absorb a broker's lateness; it sleeps the rest. Default: half of
            ``max_block``, at most 0.1 s. At most ``max_block``.
        late: how long past its grant a deferred task may still use it. One delivered
            later (a busy worker, a slow broker) reserves again: run late, many of them
            would reach the provider together, above its limit. Default: the
            limiter's ``guard``, at least 0.05 s (the lateness the guard absorbs).
        priority: the message priority of deferred tasks. ``None``: a task deferred
            to its grant goes at the app's ``task_queue_max_priority`` if it declares
            priority queues on an AMQP broker (so that it passes a backlog of first
            runs: see the module's documentation); otherwise, and when deferred by a
            refusal (it reserves again when it comes back), at the priority its
            message came with.
        queue: the queue a task deferred to its grant is sent to (``None``: the one
            it came from). A queue of deferrals only, which the workers consume too
            (``celery worker -Q tasks,tasks-deferred``), is not held up by a backlog
            of first runs, on any broker. Workers that do not consume it never run
            those tasks.
        local: accept a limiter whose budget lives in this process (see the module's
            documentation): only right for a fleet of one worker process.

    Raises:
        TypeError: ``limiter`` is not a limiter, ``limited`` was put above
            ``@app.task``, a function is ``async def`` (Celery runs plain ones),
            ``priority`` is not an int >= 0 or ``queue`` not a str.
        ValueError: ``tokens`` the limiter can never grant, a negative
            ``max_block``, ``lead > max_block``, an empty ``queue``, or a limiter in
            this process only.

    A task that is not bound (``@app.task`` without ``bind=True``) raises
    ``TypeError`` at its first run, before reserving anything.
    """
    spec = _Spec(limiter, tokens, max_block, lead, late, priority, queue, local)

    def decorate(fn: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
        if isinstance(fn, Task):
            raise TypeError(
                f"limited(...) must go below @app.task(bind=True), on the function, got the task {fn.name!r}"
            )
        if not callable(fn):
            raise TypeError(f"limited(...) decorates a function, got {_short(fn)}")
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"limited(...) decorates a plain function (Celery runs no async def tasks), got {fn!r}")

        @functools.wraps(fn)
        def run(task: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if not isinstance(task, Task):
                raise TypeError(
                    f"{fn.__qualname__} is decorated with limited(...) but its task is not bound: declare it with "
                    f"@app.task(bind=True) and take the task as the first argument (got {_short(task)} there)"
                )
            return _Run(spec, task).through(fn, args, kwargs)

        return run

    return decorate


class _Run:
    """One run of a limited task in a worker: reserve or take the carried grant,
    sleep or defer, then the body, deferring it on a refusal."""

    __slots__ = ("request", "spec", "task")

    def __init__(self, spec: _Spec, task: Any) -> None:
        self.spec = spec
        self.task = task
        self.request = task.request

    def through(self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        limiter = self.spec.limiter
        if self.request.called_directly or self.request.is_eager:
            # A direct call or apply(): there is no broker to defer through.
            limiter.acquire(self.spec.cost(args, kwargs))
            return fn(self.task, *args, **kwargs)
        due = self.carried()
        if due is None:
            reservation: Reservation[Any] | None = limiter.reserve(self.spec.cost(args, kwargs))
            assert reservation is not None
            wait = reservation.wait
            due = reservation.due.timestamp()
        else:
            reservation = None
            wait = due - time.time()
        if wait > self.spec.max_block:
            self.defer(max(0.0, wait - self.spec.lead), due, reservation)
        if wait > 0:
            limiter.clock.sleep(wait)
        return self.body(fn, args, kwargs)

    def carried(self) -> float | None:
        """The grant this message carries, if it is still good to use."""
        grant = (self.request.headers or {}).get(HEADER)
        if not isinstance(grant, dict) or grant.get("name") != self.spec.limiter.name:
            return None
        # A retry (or any message copied from the run that used the grant) counts
        # another retry than the deferral did: that run's grant is spent. (A header
        # without the count is a deferral of a first run.)
        if grant.get("retries", 0) != self.request.retries:
            return None
        due = grant.get("due")
        if isinstance(due, bool) or not isinstance(due, (int, float)) or not math.isfinite(due):
            return None
        now = time.time()
        if not due <= now + MAX_HORIZON:
            return None  # no store promises that far ahead: not a grant of ours
        if now > due + self.spec.late:
            # Too late to use: its slot has passed, and run now it would join later
            # grants' requests at the provider.
            _tell_late(self.spec.limiter.name, now - due)
            return None
        redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
        if redelivered and self.task.acks_late and due <= now:
            # Delivered again after a worker died while running it (late
            # acknowledgement): its request may have gone out already.
            return None
        return float(due)

    def defer(self, delay: float, due: float | None, reservation: Reservation[Any] | None) -> NoReturn:
        """Publish this task again ``delay`` seconds from now, carrying ``due`` (or no
        grant: the re-run reserves), and end this run as ignored."""
        headers = {key: value for key, value in (self.request.headers or {}).items() if key != HEADER}
        if due is not None:
            headers[HEADER] = {"name": self.spec.limiter.name, "due": due, "retries": self.request.retries}
        eta = datetime.now(timezone.utc) + timedelta(seconds=min(delay, MAX_HORIZON))
        options: dict[str, Any] = {"eta": eta, "retries": self.request.retries, "headers": headers}
        priority = self.spec.priority
        if priority is None and due is not None:
            priority = _top_priority(self.task)
        if priority is not None:
            options["priority"] = priority
        queue = self.spec.queue if due is not None else None
        again = self.task.signature_from_request(self.request, queue=queue, **options)
        try:
            again.apply_async()
        except BaseException:
            if reservation is not None:
                reservation.cancel()
            raise
        raise Ignore()

    def body(self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        pauses: list[float] = []
        here = threading.get_ident()

        def heard(event: Event) -> None:
            if isinstance(event, Paused) and event.status in PUSHBACK and threading.get_ident() == here:
                pauses.append(event.seconds)

        unsubscribe = self.spec.limiter.subscribe(heard)
        try:
            return fn(self.task, *args, **kwargs)
        except Exception as exc:
            delay = max(pauses) if pauses else _come_back_in(exc)
            if delay is None:
                raise
            self.defer(delay, None, None)
        finally:
            unsubscribe()


#: The limiters whose late re-runs this process has warned of (once each).
_WARNED_LATE: set[str] = set()


def _tell_late(name: str, late: float) -> None:
    """Warn once per process and limiter that a re-run came too late to use its grant:
    the first sign of a queue whose backlog holds deferred tasks up."""
    if name in _WARNED_LATE or late > 3600:  # an hour: a stale message, not a backlog
        return
    _WARNED_LATE.add(name)
    logger.warning(
        "a task deferred on limiter %r came %.2f s after its grant and reserves again (its slot goes unused); "
        "if this happens in bursts, let deferred tasks pass the queue's backlog (a priority queue, or "
        "limited(..., queue=...)) and set worker_prefetch_multiplier = 1: see ratelimit.celery (warned once)",
        name,
        late,
    )


#: Each app's broker transport (``driver_type``: "amqp", "redis", ...), found once.
_DRIVERS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _top_priority(task: Any) -> int | None:
    """The highest priority of the app's priority queues, or ``None``: it declares none
    (``task_queue_max_priority``), or its broker is not AMQP (Celery declares priority
    queues on RabbitMQ only; on Redis a higher number is a lower priority)."""
    app = task.app
    top = app.conf.task_queue_max_priority
    if isinstance(top, bool) or not isinstance(top, int) or top <= 0:
        return None
    driver = _DRIVERS.get(app)
    if driver is None:
        try:
            # Lazy: names the transport without connecting.
            driver = str(app.connection_for_write().transport.driver_type)
        except Exception:
            driver = "unknown"
        _DRIVERS[app] = driver
    return top if driver == "amqp" else None


def _come_back_in(exc: BaseException) -> float | None:
    """How long the provider (or the library) asks a failed run to wait, if it says."""
    if not isinstance(exc, RateLimitError):
        return None
    seconds: object = getattr(exc, "retry_after", None)
    if isinstance(exc, RetryError):
        response = exc.result
        last = exc.attempts[-1] if exc.attempts else None
        headers = getattr(response, "headers", None)
        if last is None or last.status not in PUSHBACK or headers is None:
            return None
        seconds = parse_rate_limit_headers(headers).retry_after
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        return None
    return float(seconds)
