"""ratelimit.celery: ``limited`` tasks.

The first part runs a task's decisions without a broker: a task whose sends are
recorded, a store in fakeredis, an injected clock. The second (``slow``) starts real
``celery worker`` processes on RabbitMQ (``celery_fleet.Fleet``, tasks in
``celery_app``) and judges what their task bodies recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import fakeredis
import pytest
from celery import Celery, Task
from celery.exceptions import Ignore, Retry

from ratelimit import (
    AcquireTimeout,
    Attempt,
    CircuitOpen,
    Composite,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    RetryError,
    TokenBucket,
)
from ratelimit.celery import HEADER, limited

from celery_fleet import Fleet, broker_reachable, most_in_any, rate_of, taken_in
from conftest import unavailable, unique_name

# ---------------------------------------------------------------------------------------
# Without a broker: one run of a task, its sends recorded.


class Recorder(Task):  # type: ignore[misc]
    """A task base whose sends are recorded instead of published."""

    sent: list[dict[str, Any]]

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        self.sent.append({"args": args, "kwargs": kwargs, **options})


@pytest.fixture
def app() -> Celery:
    return Celery(unique_name("celery-unit"), broker="memory://", set_as_current=False)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_000.0)


@pytest.fixture
def bucket(clock: ManualClock) -> TokenBucket:
    """A bucket of 1 refilling 1/s, shared in fakeredis, on the test's clock."""
    return TokenBucket(1, 1, backend=RedisBackend(fakeredis.FakeRedis()), name=unique_name("celery"), clock=clock)


def in_worker(
    task: Any, *args: Any, headers: dict[str, Any] | None = None, redelivered: bool = False, retries: int = 0
) -> Any:
    """Run ``task`` as a worker would run one message of it; its sends are in ``task.sent``."""
    if not hasattr(task, "sent"):
        task.sent = []
    task.push_request(
        id="task-1",
        args=list(args),
        kwargs={},
        headers=headers,
        delivery_info={"exchange": "", "routing_key": "q", "redelivered": redelivered},
        called_directly=False,
        is_eager=False,
        retries=retries,
    )
    try:
        return task.run(*args)
    finally:
        task.pop_request()


def grant_in(sent: dict[str, Any]) -> float:
    grant = sent["headers"][HEADER]
    assert isinstance(grant["due"], float)
    return float(grant["due"])


def test_a_short_wait_is_slept_in_the_task(app: Celery, bucket: TokenBucket, clock: ManualClock) -> None:
    """A wait within max_block is slept (on the limiter's clock) and the body runs."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=1.0)
    def lookup(self: Task, item: int) -> tuple[int, float]:
        return item, clock.now()

    assert in_worker(lookup, 1) == (1, 1_000.0)
    assert in_worker(lookup, 2) == (2, 1_001.0)
    assert lookup.sent == []


def test_a_long_wait_defers_the_task_with_its_grant_and_no_retry(app: Celery, bucket: TokenBucket) -> None:
    """A wait beyond max_block sends the same task again (same id and arguments, retries
    untouched) with an eta ``lead`` before its grant, the grant in a header, and ends
    the run as ignored without running the body."""
    ran = []

    @app.task(bind=True, base=Recorder, max_retries=0)
    @limited(bucket, max_block=0.5, lead=0.2)
    def lookup(self: Task, item: int) -> None:
        ran.append(item)

    in_worker(lookup, 1)
    before = time.time()
    for item in (2, 3):
        with pytest.raises(Ignore):
            in_worker(lookup, item)
    assert ran == [1]
    (second, third) = lookup.sent
    assert (list(second["args"]), list(third["args"])) == ([2], [3])
    assert second["task_id"] == "task-1"
    assert second["retries"] == 0
    assert grant_in(second) == pytest.approx(before + 1.0, abs=0.5)
    assert grant_in(third) - grant_in(second) == pytest.approx(1.0, abs=0.05)
    eta = second["eta"]
    assert isinstance(eta, datetime)
    assert eta.tzinfo is not None
    assert eta.timestamp() == pytest.approx(grant_in(second) - 0.2, abs=0.05)


def test_deferred_tasks_may_be_sent_at_a_priority_of_their_own(app: Celery, bucket: TokenBucket) -> None:
    """``priority=`` sets the deferred message's priority (a priority queue then puts
    it before a backlog of first runs); without it the message's own is kept."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5, priority=9)
    def urgent(self: Task, item: int) -> None: ...

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5)
    def plain(self: Task, item: int) -> None: ...

    in_worker(urgent, 1)
    with pytest.raises(Ignore):
        in_worker(urgent, 2)
    with pytest.raises(Ignore):
        in_worker(plain, 3)
    assert urgent.sent[0]["priority"] == 9
    assert plain.sent[0].get("priority") is None


def test_on_a_priority_queue_a_task_deferred_to_its_grant_goes_at_the_top_priority(bucket: TokenBucket) -> None:
    """With ``task_queue_max_priority`` set (the app declares priority queues) on an
    AMQP broker, a deferral carrying a grant is sent at that priority by default, so
    that it passes the queue's backlog and comes before its grant; a deferral by a
    refusal's Retry-After carries no grant and keeps its message's own. (Nothing connects:
    the sends are recorded.)"""
    app = Celery(unique_name("celery-unit"), broker="amqp://guest:guest@127.0.0.1:5672//", set_as_current=False)
    app.conf.task_queue_max_priority = 7

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None:
        if item == 3:
            bucket.feedback({"Retry-After": "5"}, status=429)
            raise RuntimeError("429 Too Many Requests")

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5, priority=2)
    def chosen(self: Task, item: int) -> None: ...

    in_worker(lookup, 1)
    with pytest.raises(Ignore):
        in_worker(lookup, 2)
    with pytest.raises(Ignore):
        in_worker(chosen, 4)
    assert lookup.sent[0]["priority"] == 7
    assert chosen.sent[0]["priority"] == 2
    bucket.reset()
    with pytest.raises(Ignore):
        in_worker(lookup, 3)
    assert HEADER not in lookup.sent[1]["headers"]
    assert lookup.sent[1].get("priority") is None


def test_deferrals_to_a_grant_may_go_to_a_queue_of_their_own(app: Celery, bucket: TokenBucket) -> None:
    """``queue=`` sends a task deferred to its grant to that queue (the workers consume
    it too); a deferral by a refusal carries no grant and goes back where it came from."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5, queue="lookups-deferred")
    def lookup(self: Task, item: int) -> None:
        if item == 3:
            bucket.feedback({"Retry-After": "5"}, status=429)
            raise RuntimeError("429 Too Many Requests")

    in_worker(lookup, 1)
    with pytest.raises(Ignore):
        in_worker(lookup, 2)
    assert lookup.sent[0]["queue"] == "lookups-deferred"
    bucket.reset()
    with pytest.raises(Ignore):
        in_worker(lookup, 3)
    assert lookup.sent[1]["queue"] == "q"  # the routing key it was delivered with


def test_the_top_priority_is_not_assumed_off_amqp(bucket: TokenBucket) -> None:
    """On another transport (Redis counts priorities the other way round) the setting
    is not Celery's to apply: deferrals keep their message's priority."""
    app = Celery(unique_name("celery-unit"), broker="redis://127.0.0.1:1/0", set_as_current=False)
    app.conf.task_queue_max_priority = 9

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None: ...

    in_worker(lookup, 1)
    with pytest.raises(Ignore):
        in_worker(lookup, 2)
    assert lookup.sent[0].get("priority") is None


def test_the_re_run_uses_its_grant_without_reserving_again(
    app: Celery, bucket: TokenBucket, clock: ManualClock
) -> None:
    """A message carrying a grant due soon sleeps the rest and runs; the budget is not
    touched (the next reservation is where it would have been)."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=1.0)
    def lookup(self: Task, item: int) -> float:
        return clock.now()

    in_worker(lookup, 1)  # the bucket is empty now
    started = clock.now()
    grant = {"name": bucket.name, "due": time.time() + 0.3}
    assert in_worker(lookup, 2, headers={HEADER: grant}) == pytest.approx(started + 0.3, abs=0.05)
    # Reserved nothing: the next request gets the second that was next before.
    assert bucket.reserve().wait == pytest.approx(1.0 - (clock.now() - started), abs=0.01)


def test_a_grant_still_far_is_deferred_again_carrying_the_same_grant(app: Celery, bucket: TokenBucket) -> None:
    """A re-run delivered too early (a broker's clock, a skewed box) defers again with
    the grant it holds, without reserving."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None: ...

    due = time.time() + 5
    with pytest.raises(Ignore):
        in_worker(lookup, 1, headers={HEADER: {"name": bucket.name, "due": due}})
    assert grant_in(lookup.sent[0]) == due
    assert bucket.try_acquire()  # the bucket's one token is still there


def test_a_retry_of_a_run_on_a_carried_grant_reserves_anew(app: Celery, bucket: TokenBucket) -> None:
    """``self.retry(countdown=0)`` copies the message's headers, the grant among them,
    into the retry: the retry must not run on the grant its first run used."""
    ran: list[int] = []

    @app.task(bind=True, base=Recorder, max_retries=3)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None:
        ran.append(self.request.retries)
        if self.request.retries == 0:
            raise self.retry(countdown=0)

    assert bucket.try_acquire()  # the bucket's one token: a second is a second away
    with pytest.raises(Retry):
        in_worker(lookup, 1, headers={HEADER: {"name": bucket.name, "due": time.time()}})
    (retry,) = lookup.sent
    assert retry["retries"] == 1
    assert HEADER in retry["headers"]  # Celery carried the spent grant along
    with pytest.raises(Ignore):  # it reserved: the next second, deferred to it
        in_worker(lookup, 1, headers=retry["headers"], retries=1)
    assert ran == [0]
    before = time.time()
    assert grant_in(lookup.sent[1]) == pytest.approx(before + 1.0, abs=0.5)
    # Its re-run, counting the same retries, takes that grant.
    deferred = lookup.sent[1]["headers"]
    deferred[HEADER]["due"] = time.time()
    in_worker(lookup, 1, headers=deferred, retries=1)
    assert ran == [0, 1]


@pytest.mark.parametrize(
    "grant",
    [
        pytest.param({"due": 0.0}, id="too-late"),
        pytest.param({"due": "soon"}, id="garbage"),
        pytest.param({"due": 1e300}, id="beyond-any-horizon"),
        pytest.param({"due": float("nan")}, id="nan"),
        pytest.param("garbage", id="not-a-mapping"),
    ],
)
def test_a_stale_or_foreign_grant_is_not_used(app: Celery, bucket: TokenBucket, grant: Any) -> None:
    """A grant past its time by more than ``late``, another limiter's, or garbage: the
    run reserves again."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> str:
        return "ran"

    if isinstance(grant, dict):
        grant = {"name": bucket.name, **grant}
    assert in_worker(lookup, 1, headers={HEADER: grant}) == "ran"
    assert not bucket.try_acquire()  # it took the token
    with pytest.raises(Ignore):
        in_worker(lookup, 2, headers={HEADER: {"name": "another", "due": time.time()}})


def test_the_first_late_re_run_is_warned_of_once(
    app: Celery, bucket: TokenBucket, caplog: pytest.LogCaptureFixture
) -> None:
    """A re-run past ``late`` says so once per process and limiter, naming the way out
    (a burst's backlog is the usual cause); a stale message hours old says nothing."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=5)
    def lookup(self: Task, item: int) -> None: ...

    with caplog.at_level("WARNING", logger="ratelimit"):
        for item in (1, 2):
            in_worker(lookup, item, headers={HEADER: {"name": bucket.name, "due": time.time() - 0.5}})
    (warning,) = [record.getMessage() for record in caplog.records]
    assert f"limiter {bucket.name!r} came 0.5" in warning
    assert "priority queue" in warning
    assert "worker_prefetch_multiplier = 1" in warning

    other = TokenBucket(1, 1, backend=bucket.backend, name=unique_name("celery-stale"), clock=bucket.clock)

    @app.task(bind=True, base=Recorder)
    @limited(other, max_block=5)
    def stale(self: Task, item: int) -> None: ...

    caplog.clear()
    with caplog.at_level("WARNING", logger="ratelimit"):
        in_worker(stale, 1, headers={HEADER: {"name": other.name, "due": time.time() - 7200}})
    assert caplog.records == []


def test_a_redelivered_late_acknowledged_task_reserves_again_once_its_grant_is_due(
    app: Celery, bucket: TokenBucket
) -> None:
    """With acks_late a redelivered message whose grant is due may have run its body
    already: it reserves again. One whose grant is still ahead cannot have: it keeps it."""

    @app.task(bind=True, base=Recorder, acks_late=True)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> str:
        return "ran"

    now = time.time()
    assert in_worker(lookup, 1, headers={HEADER: {"name": bucket.name, "due": now}}, redelivered=True) == "ran"
    assert not bucket.try_acquire()  # it reserved: the token is gone
    with pytest.raises(Ignore):
        in_worker(lookup, 2, headers={HEADER: {"name": bucket.name, "due": now + 5}}, redelivered=True)
    assert grant_in(lookup.sent[0]) == now + 5


def test_a_refusal_fed_back_in_the_body_defers_the_task_by_retry_after(app: Celery, bucket: TokenBucket) -> None:
    """A 429 fed back to the limiter pauses it for everyone; the body's exception then
    defers the task by Retry-After, carrying no grant (the re-run reserves), and uses
    no retry."""

    @app.task(bind=True, base=Recorder, max_retries=0)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None:
        bucket.feedback({"Retry-After": "30"}, status=429)
        raise RuntimeError("429 Too Many Requests")

    before = time.time()
    with pytest.raises(Ignore):
        in_worker(lookup, 1)
    (again,) = lookup.sent
    assert HEADER not in again["headers"]
    assert again["eta"].timestamp() == pytest.approx(before + 30, abs=1)
    assert bucket.reserve().wait >= 29


def test_an_error_that_says_when_to_come_back_defers_the_task(app: Celery, bucket: TokenBucket) -> None:
    """A RateLimitError with retry_after (an open circuit here) defers by it; any other
    error is the task's failure, as without limited."""
    errors: list[Exception] = [CircuitOpen("api", 7.0), KeyError("x")]

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=5)
    def lookup(self: Task, item: int) -> None:
        raise errors.pop(0)

    before = time.time()
    with pytest.raises(Ignore):
        in_worker(lookup, 1)
    assert lookup.sent[0]["eta"].timestamp() == pytest.approx(before + 7, abs=1)
    with pytest.raises(KeyError):
        in_worker(lookup, 2)
    assert len(lookup.sent) == 1


class Response:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


def gave_up(status: int, headers: dict[str, str]) -> RetryError:
    attempt = Attempt(1, 0.0, 0.0, status, None, 0.01, "transient")
    return RetryError("attempts", [attempt], 0.01, Response(status, headers))


@pytest.mark.parametrize(
    ("error", "deferred_by"),
    [
        pytest.param(gave_up(429, {"Retry-After": "12"}), 12, id="429-retry-after"),
        pytest.param(gave_up(503, {"Retry-After": "4"}), 4, id="503-retry-after"),
        pytest.param(gave_up(429, {}), None, id="429-without-retry-after"),
        pytest.param(gave_up(500, {"Retry-After": "4"}), None, id="500"),
        pytest.param(AcquireTimeout(3.0), 3, id="acquire-timeout"),
        pytest.param(AcquireTimeout(math.inf), None, id="never"),
    ],
)
def test_an_integration_giving_up_on_a_refusal_defers_by_its_retry_after(
    app: Celery, bucket: TokenBucket, error: Exception, deferred_by: float | None
) -> None:
    """An httpx/requests/aiohttp integration's RetryError whose last response was a 429
    or 503 with Retry-After defers by it; without one (or another status) it fails."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, max_block=5)
    def lookup(self: Task, item: int) -> None:
        raise error

    before = time.time()
    if deferred_by is None:
        with pytest.raises(type(error)):
            in_worker(lookup, 1)
        assert lookup.sent == []
    else:
        with pytest.raises(Ignore):
            in_worker(lookup, 1)
        assert lookup.sent[0]["eta"].timestamp() == pytest.approx(before + deferred_by, abs=1)


def test_a_failed_send_gives_the_reservation_back(app: Celery, bucket: TokenBucket) -> None:
    """The broker refusing the deferred message cancels the reservation, and the error
    is the run's."""

    class Down(Task):  # type: ignore[misc]
        def apply_async(self, *args: Any, **options: Any) -> None:
            raise ConnectionError("broker down")

    @app.task(bind=True, base=Down)
    @limited(bucket, max_block=0.5)
    def lookup(self: Task, item: int) -> None: ...

    in_worker(lookup, 1)
    with pytest.raises(ConnectionError):
        in_worker(lookup, 2)
    assert bucket.reserve().wait == pytest.approx(1.0, abs=0.01)


def test_tokens_may_be_a_function_of_the_arguments_and_a_composite_works(app: Celery, clock: ManualClock) -> None:
    """``tokens`` computed from the task's arguments, one per member of a Composite."""
    llm = Composite(
        [TokenBucket(10, 10), TokenBucket(1_000, 100)],
        backend=RedisBackend(fakeredis.FakeRedis()),
        name=unique_name("llm"),
        clock=clock,
    )

    @app.task(bind=True, base=Recorder)
    @limited(llm, tokens=lambda prompt: [1, len(prompt)], max_block=2)
    def complete(self: Task, prompt: str) -> float:
        return clock.now()

    assert in_worker(complete, "x" * 1_000) == 1_000.0
    assert in_worker(complete, "x" * 150) == pytest.approx(1_001.5)
    with pytest.raises(Ignore):
        in_worker(complete, "x" * 1_000)


def test_called_directly_or_eagerly_it_waits_in_place(app: Celery, bucket: TokenBucket, clock: ManualClock) -> None:
    """Outside a worker there is no broker to defer through: the call acquires."""

    @app.task(bind=True)
    @limited(bucket, max_block=0)
    def lookup(self: Task, item: int) -> float:
        return clock.now()

    assert lookup(1) == 1_000.0
    assert lookup.apply((2,)).get() == 1_001.0


# -- bad input ---------------------------------------------------------------------------


def test_a_task_that_is_not_bound_is_refused_at_its_first_run(app: Celery, bucket: TokenBucket) -> None:
    @app.task
    @limited(bucket)
    def lookup(item: int) -> None: ...

    with pytest.raises(TypeError, match=r"bind=True.*got 1"):
        lookup.apply((1,), throw=True)
    assert bucket.try_acquire()  # nothing reserved


def test_limited_above_the_task_decorator_is_refused(app: Celery, bucket: TokenBucket) -> None:
    def lookup(self: Task, item: int) -> None: ...

    task = app.task(bind=True)(lookup)
    with pytest.raises(TypeError, match=r"below @app.task\(bind=True\)"):
        limited(bucket)(task)
    with pytest.raises(TypeError, match="limiter, got a Celery task"):
        limited(task)


def test_async_functions_and_non_limiters_are_refused(bucket: TokenBucket) -> None:
    async def lookup(self: Task) -> None: ...

    with pytest.raises(TypeError, match="async def"):
        limited(bucket)(lookup)
    with pytest.raises(TypeError, match=r"limiter must be a ratelimit limiter .*, got 'geocode'"):
        limited("geocode")  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", [None, MemoryBackend()], ids=["default", "memory"])
def test_a_budget_in_this_process_is_refused_unless_local(backend: MemoryBackend | None) -> None:
    """Every worker process would have a whole budget: refused at decoration, naming
    the store; ``local=True`` accepts it for a fleet of one process."""
    limiter = TokenBucket(1, 1, backend=backend)
    with pytest.raises(ValueError, match=r"MemoryBackend.*every Celery worker process.*local=True"):
        limited(limiter)
    limited(limiter, local=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tokens": 0}, ValueError, "tokens must be > 0"),
        ({"tokens": "1"}, TypeError, "tokens must be a number"),
        ({"max_block": -1}, ValueError, "max_block must be seconds >= 0"),
        ({"max_block": float("nan")}, ValueError, "max_block must be seconds >= 0"),
        ({"max_block": "1"}, TypeError, "max_block must be seconds"),
        ({"max_block": 1, "lead": 2}, ValueError, r"lead must be <= max_block \(1\), got 2"),
        ({"late": -0.1}, ValueError, "late must be seconds >= 0"),
        ({"local": 1}, TypeError, "local must be a bool"),
        ({"priority": -1}, TypeError, "priority must be an int >= 0 or None, got -1"),
        ({"priority": "9"}, TypeError, "priority must be an int"),
        ({"queue": " "}, ValueError, r"queue must be a queue's name, not empty, got ' '"),
        ({"queue": 5}, TypeError, r"queue must be a queue's name \(a str\) or None, got 5"),
    ],
)
def test_bad_arguments_are_refused_at_decoration(
    bucket: TokenBucket, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        limited(bucket, **kwargs)


def test_a_weight_above_the_codes_capacity_is_decided_by_the_store(app: Celery, bucket: TokenBucket) -> None:
    """On a shared store a limit raised at run time (set_limit) may grant more than the
    code's capacity, so decoration accepts it; a run the limit in force refuses for ever
    fails clearly, naming the capacity."""

    @app.task(bind=True, base=Recorder)
    @limited(bucket, tokens=5)
    def lookup(self: Task, item: int) -> None: ...

    with pytest.raises(ValueError, match=r"tokens must be <= capacity \(1\), or the limit a change at run time"):
        in_worker(lookup, 1)
    assert bucket.try_acquire()


@pytest.mark.parametrize(
    ("returned", "error", "match"),
    [
        (-1, ValueError, r"tokens=<lambda> returned -1: tokens must be > 0"),
        (5, ValueError, r"tokens must be <= capacity \(1\), or the limit a change at run time"),
        (None, TypeError, r"tokens=<lambda> must return a number .* got NoneType None"),
        (True, TypeError, "must return a number"),
        ("x" * 10_000, TypeError, r"got str 'xxxx.*\.\.\.x'$"),
    ],
)
def test_a_tokens_function_returning_bad_values_fails_the_run_clearly(
    app: Celery, bucket: TokenBucket, returned: object, error: type[Exception], match: str
) -> None:
    @app.task(bind=True, base=Recorder)
    @limited(bucket, tokens=lambda item: returned)  # type: ignore[arg-type,return-value]
    def lookup(self: Task, item: int) -> None: ...

    with pytest.raises(error, match=match):
        in_worker(lookup, 1)
    assert bucket.try_acquire()


# ---------------------------------------------------------------------------------------
# Real workers on RabbitMQ.

#: How much longer than max_block a slot may be seen waiting: the reserve, the send of
#: a deferral, the records, and waking from the sleep on a shared two-core machine
#: (1.37 s for max_block=1 was seen at a load average of 10).
SLOT_MARGIN = 0.5


#: The configuration docs/task-queues.md recommends for bursts: a priority queue
#: (deferred tasks go at its top priority, past the backlog of tasks sent) and workers
#: that prefetch one message a slot (a deferred task due is not queued in the worker
#: behind messages it prefetched).
RECOMMENDED: dict[str, Any] = {"priority_queue": True, "prefetch": 1}
#: The other way docs/task-queues.md gives, on any broker: deferrals to a queue of
#: their own that the workers consume too, and prefetch 1.
DEFERRAL_QUEUE: dict[str, Any] = {"defer_queue": True, "prefetch": 1}


@pytest.fixture
def fleet(request: pytest.FixtureRequest, redis_client: object) -> Iterator[Fleet]:
    """Workers of this test's own (queue, limiter and records), cleaned up after it;
    ``Fleet``'s arguments from an indirect parameter (default: Celery's defaults)."""
    why = broker_reachable()
    if why is not None:
        unavailable(why)
    made = Fleet(**getattr(request, "param", {}))
    try:
        yield made
    finally:
        made.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize(
    "fleet",
    [
        pytest.param(RECOMMENDED, id="priority-queue"),
        pytest.param(DEFERRAL_QUEUE, id="deferral-queue"),
        pytest.param({}, id="plain-queue"),
    ],
    indirect=True,
)
def test_a_fleet_keeps_one_budget_and_waits_in_the_broker_not_in_its_slots(fleet: Fleet) -> None:
    """Three prefork workers (12 slots, more than R x max_block = 10) run 200 tasks
    sent at once: never more than R + B bodies in any second, no body before the grant
    it carried, each task once, no slot held longer than max_block (plus a margin),
    tasks really deferred, and the queue empty at the end.

    Throughput is counted over the whole run, from before the first task was sent to
    the last body: it includes sending the burst, the fleet's intake of it and the
    first body's latency, as a user waiting for the burst would count it. The bucket's
    burst lets the first bodies go at once, which can lift the figure above R by at
    most (B - guard x R) / count: 1.5% here.

    On the recommended configuration (a priority queue, prefetch 1) the re-runs pass
    the backlog of first runs and come on time: at least 0.9 R (0.99-1.01 R measured
    on this shared two-core machine at a load average of 3-6); so do they through a
    queue of deferrals that the workers consume too. On a plain queue with
    Celery's default prefetch, the re-runs of the first grants wait behind the first
    runs of the rest, come late, reserve again and lose their slots while the fleet
    takes the burst in: at least 0.9 R only after that, and 0.75 R over the whole
    run (0.98 R measured at a load average of 5-6; the more loaded the workers, the
    longer the intake and the lower the figure)."""
    recommended = fleet.priority_queue or fleet.deferred is not None
    fleet.start(3, concurrency=4)
    sent = time.time()
    count = fleet.send("call", ([i] for i in range(200)))
    bodies = fleet.wait_for(set(range(count)), timeout=count / fleet.rate + 30)
    times = [body["at"] for body in bodies]
    assert sorted(body["item"] for body in bodies) == list(range(count)), fleet.log()
    assert most_in_any(times) <= fleet.capacity + fleet.rate
    carried = [body for body in bodies if body["due"] is not None]
    assert len(carried) >= count // 2
    assert all(body["at"] >= body["due"] for body in carried)  # never before the grant
    slots = fleet.slots()
    whole = count / (times[-1] - sent)
    if recommended:
        assert whole >= 0.9 * fleet.rate
        if fleet.priority_queue:
            # Deferred at the queue's top priority (the app's task_queue_max_priority).
            assert {slot["priority"] for slot in slots if slot["early"] is not None} == {9}
        else:
            assert {slot["queue"] for slot in slots if slot["early"] is not None} == {fleet.deferred}
    else:
        assert rate_of([t for t in times if t >= taken_in(slots)]) >= 0.9 * fleet.rate
        assert whole >= 0.75 * fleet.rate
    assert max(slot["held"] for slot in slots) <= fleet.max_block + SLOT_MARGIN
    assert sum(not slot["body"] for slot in slots) >= count // 2  # deferred
    assert len({body["pid"] for body in bodies}) >= 6
    time.sleep(0.5)
    assert fleet.waiting() == 0


@pytest.mark.slow
@pytest.mark.parametrize("fleet", [pytest.param(RECOMMENDED, id="priority-queue")], indirect=True)
def test_the_rest_of_the_fleet_finishes_within_the_bound_after_a_worker_is_killed(fleet: Fleet) -> None:
    """SIGKILL one of three workers (with its pool) while it holds deferred tasks and
    runs others: with late acknowledgement every task still runs, the bound holds
    across all bodies (a redelivered run reserves again), the rest keep 0.9 R over the
    whole run (the runs the dead worker had started lose their slots: 1.00-1.02 R
    measured), no slot waits longer than max_block (plus a margin), and the queue
    ends empty."""
    fleet.start(3, concurrency=4)
    sent = time.time()
    count = fleet.send("call_late", ([i] for i in range(120)))
    deadline = time.monotonic() + 30
    while len(fleet.bodies()) < 30 and time.monotonic() < deadline:
        time.sleep(0.1)
    fleet.kill(0)
    bodies = fleet.wait_for(set(range(count)), timeout=count / fleet.rate + 30)
    times = [body["at"] for body in bodies]
    assert {body["item"] for body in bodies} == set(range(count)), fleet.log()
    assert most_in_any(times) <= fleet.capacity + fleet.rate
    assert count / (times[-1] - sent) >= 0.9 * fleet.rate
    assert max(slot["held"] for slot in fleet.slots()) <= fleet.max_block + SLOT_MARGIN
    killed = fleet.workers[0].pid
    assert killed not in {body["parent"] for body in bodies[-40:]}
    time.sleep(0.5)
    assert fleet.waiting() == 0


@pytest.mark.slow
def test_a_refused_task_pauses_the_fleet_and_comes_back_after_retry_after(fleet: Fleet) -> None:
    """Each task's first body is refused (429, Retry-After: 1): every task still runs
    once, none before the pause it was told of, with max_retries=0 untouched."""
    fleet.start(2, concurrency=2)
    sent = time.time()
    count = fleet.send("refused_once", ([i, 1.0] for i in range(10)))
    bodies = fleet.wait_for(set(range(count)), timeout=30)
    assert sorted(body["item"] for body in bodies) == list(range(count)), fleet.log()
    assert min(body["at"] for body in bodies) >= sent + 1.0
    assert most_in_any([body["at"] for body in bodies]) <= fleet.capacity + fleet.rate


@pytest.mark.slow
@pytest.mark.parametrize("fleet", [pytest.param({**RECOMMENDED, "rate": 4}, id="priority-queue")], indirect=True)
def test_a_task_retried_at_once_reserves_for_its_retry(fleet: Fleet) -> None:
    """Each task's body runs, then ``self.retry(countdown=0)``: a retry is a request of
    its own, so the fleet's bodies, retries included, stay within R + B in any second
    and at R over the run. (A retry copies its message's headers, the grant a deferred
    run carried among them, and its priority, the top one: it came on time and ran on
    that grant, about 2 R.)"""
    fleet.start(2, concurrency=4)
    count = fleet.send("retried_once", ([i] for i in range(30)))
    deadline = time.monotonic() + 2 * count / fleet.rate + 30
    while len(fleet.bodies()) < 2 * count and time.monotonic() < deadline:
        time.sleep(0.25)
    bodies = fleet.bodies()
    assert len(bodies) == 2 * count, fleet.log()
    times = [body["at"] for body in bodies]
    assert most_in_any(times) <= fleet.capacity + fleet.rate
    assert rate_of(times) <= 1.1 * fleet.rate


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "solo"])
def test_the_threads_and_solo_pools_with_a_composite(fleet: Fleet, pool: str) -> None:
    """A Composite (requests and tokens) with tokens from the arguments, on the threads
    or solo pool: the request bound holds and every task runs."""
    fleet.start(2, pool=pool, concurrency=4)
    count = fleet.send("complete", ([i, "x" * 50] for i in range(40)))
    bodies = fleet.wait_for(set(range(count)), timeout=count / fleet.rate + 30)
    times = [body["at"] for body in bodies]
    assert sorted(body["item"] for body in bodies) == list(range(count)), fleet.log()
    assert most_in_any(times) <= fleet.capacity + fleet.rate
    assert max(slot["held"] for slot in fleet.slots()) <= fleet.max_block + SLOT_MARGIN
