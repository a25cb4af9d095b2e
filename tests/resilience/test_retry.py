"""The retry runner against a manual clock: attempts, deadline, classification,
Retry-After, history, limiter and breaker on every attempt."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from email.utils import formatdate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    ManualClock,
    Retry,
    RetryError,
    TokenBucket,
    classify,
)
from ratelimit.events import AttemptFinished, CallFinished, Event, GaveUp, RetryScheduled

NO_JITTER = Backoff(base=0.5, multiplier=2, max_delay=10, jitter="none")


class Response:
    """Shaped like an httpx / requests response, which is all the runner looks at."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}

    def __repr__(self) -> str:
        return f"Response({self.status_code})"


class Script:
    """A call that plays back outcomes (a status, an exception, or any value), taking
    ``duration`` seconds of the manual clock each time."""

    def __init__(self, clock: ManualClock, outcomes: Iterable[object], duration: float = 0.0) -> None:
        self.clock = clock
        self.outcomes = list(outcomes)
        self.duration = duration
        self.started_at: list[float] = []

    def __call__(self) -> object:
        self.started_at.append(self.clock.now())
        self.clock.advance(self.duration)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, int) and not isinstance(outcome, bool):
            return Response(outcome)
        return outcome


def run(retry: Retry, script: Script) -> object:
    return retry.call(script)


def test_a_first_success_is_returned_without_waiting() -> None:
    clock = ManualClock(100.0)
    script = Script(clock, [200])
    result = Retry(clock=clock).call(script)
    assert isinstance(result, Response)
    assert result.status_code == 200
    assert clock.sleeps == []


def test_transient_statuses_are_retried_with_the_backoff_delays() -> None:
    clock = ManualClock(100.0)
    script = Script(clock, [503, 500, 502, 504, 408, 200])
    result = Retry(max_attempts=6, backoff=NO_JITTER, clock=clock).call(script)
    assert isinstance(result, Response)
    assert result.status_code == 200
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert script.started_at == [100.0, 100.5, 101.5, 103.5, 107.5, 115.5]


def test_a_call_that_returns_none_is_a_success() -> None:
    clock = ManualClock()
    script = Script(clock, [None])
    assert Retry(clock=clock).call(script) is None
    assert len(script.started_at) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 418])
def test_permanent_statuses_are_returned_at_once(status: int) -> None:
    clock = ManualClock()
    script = Script(clock, [status, 200])
    result = Retry(clock=clock).call(script)
    assert isinstance(result, Response)
    assert result.status_code == status
    assert len(script.started_at) == 1


def test_a_permanent_exception_is_reraised_unchanged_without_retrying() -> None:
    clock = ManualClock()
    bug = KeyError("missing")
    script = Script(clock, [bug, 200])
    with pytest.raises(KeyError) as caught:
        Retry(clock=clock).call(script)
    assert caught.value is bug
    assert len(script.started_at) == 1


@pytest.mark.parametrize("error", [ConnectionResetError("reset"), TimeoutError("slow"), ConnectionError("refused")])
def test_connection_and_timeout_errors_are_transient(error: Exception) -> None:
    clock = ManualClock()
    script = Script(clock, [error, 200])
    result = Retry(backoff=NO_JITTER, clock=clock).call(script)
    assert isinstance(result, Response)
    assert len(script.started_at) == 2


def test_giving_up_carries_the_whole_history() -> None:
    clock = ManualClock(50.0)
    refused = ConnectionRefusedError("refused")
    script = Script(clock, [503, refused, 429], duration=0.25)
    with pytest.raises(RetryError) as caught:
        Retry(max_attempts=3, backoff=NO_JITTER, clock=clock, name="geocode").call(script)
    error = caught.value
    assert error.reason == "attempts"
    assert [a.number for a in error.attempts] == [1, 2, 3]
    assert [a.status for a in error.attempts] == [503, None, 429]
    assert [a.error for a in error.attempts] == [None, refused, None]
    assert [a.backoff for a in error.attempts] == [0.0, 0.5, 1.0]
    assert [a.duration for a in error.attempts] == [0.25, 0.25, 0.25]
    assert [a.verdict for a in error.attempts] == ["transient"] * 3
    assert [a.outcome for a in error.attempts] == ["status 503", repr(refused), "status 429"]
    # Three calls of 0.25 s and two sleeps.
    assert error.elapsed == pytest.approx(0.75 + 1.5)
    # The last call returned: its response is there; nothing was raised by it.
    assert isinstance(error.result, Response)
    assert error.result.status_code == 429
    assert error.__cause__ is None
    assert "gave up after 3 attempt(s)" in str(error)
    assert "status 429" in str(error)


def test_giving_up_after_an_exception_chains_it() -> None:
    clock = ManualClock()
    last = TimeoutError("read timed out")
    script = Script(clock, [ConnectionError("a"), last])
    with pytest.raises(RetryError) as caught:
        Retry(max_attempts=2, backoff=NO_JITTER, clock=clock).call(script)
    assert caught.value.__cause__ is last
    assert caught.value.result is None


def test_retry_after_in_seconds_is_preferred_over_the_backoff() -> None:
    clock = ManualClock()
    script = Script(clock, [Response(429, {"Retry-After": "7"}), 200])
    Retry(backoff=NO_JITTER, clock=clock, rng=random.Random(1)).call(script)
    [slept] = clock.sleeps
    # Never earlier than asked, and at most 10 % later (the jitter).
    assert 7.0 <= slept <= 7.7


def test_retry_after_as_an_http_date_is_honoured() -> None:
    clock = ManualClock()
    when = formatdate(time.time() + 30, usegmt=True)
    script = Script(clock, [Response(503, {"Retry-After": when}), 200])
    Retry(backoff=Backoff(max_delay=60, jitter="none"), clock=clock).call(script)
    [slept] = clock.sleeps
    # HTTP-dates have whole seconds; the test itself takes a moment.
    assert 28.0 <= slept <= 30 * 1.1 + 1


def test_retry_after_is_capped_by_max_delay() -> None:
    clock = ManualClock()
    script = Script(clock, [Response(429, {"Retry-After": "600"}), 200])
    Retry(backoff=NO_JITTER, clock=clock).call(script)
    assert clock.sleeps == [10.0]


def test_a_429_with_nothing_remaining_waits_for_the_reset() -> None:
    clock = ManualClock()
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "3"}
    script = Script(clock, [Response(429, headers), 200])
    Retry(backoff=NO_JITTER, clock=clock, rng=random.Random(2)).call(script)
    [slept] = clock.sleeps
    assert 3.0 <= slept <= 3.3


def test_the_deadline_is_never_slept_past() -> None:
    clock = ManualClock(10.0)
    script = Script(clock, [503] * 10)
    with pytest.raises(RetryError) as caught:
        Retry(max_attempts=None, deadline=1.0, backoff=Backoff(base=0.4, jitter="none"), clock=clock).call(script)
    # Attempts at 0 and 0.4; the next delay (0.8) would end at 1.2, past the deadline.
    assert caught.value.reason == "deadline"
    assert clock.sleeps == [0.4]
    assert clock.now() - 10.0 <= 1.0
    assert len(caught.value.attempts) == 2


@settings(max_examples=150, deadline=None)
@given(
    deadline=st.floats(0.1, 30),
    durations=st.lists(st.floats(0, 3), min_size=1, max_size=30),
    outcomes=st.lists(st.sampled_from([200, 503, 429, 404]), min_size=30, max_size=30),
    jitter=st.sampled_from(["none", "full", "equal", "decorrelated"]),
    seed=st.integers(0, 1000),
)
def test_no_wait_ever_crosses_the_deadline(
    deadline: float, durations: Sequence[float], outcomes: Sequence[int], jitter: str, seed: int
) -> None:
    clock = ManualClock(0.0)
    calls = iter(zip(outcomes, [*durations, *([0.0] * 30)], strict=False))

    def call() -> Response:
        status, duration = next(calls)
        started.append(clock.now())
        clock.advance(duration)
        return Response(status)

    started: list[float] = []
    retry = Retry(
        max_attempts=None,
        deadline=deadline,
        backoff=Backoff(base=0.2, max_delay=5, jitter=jitter),  # type: ignore[arg-type]
        clock=clock,
        rng=random.Random(seed),
    )
    outcome: object
    try:
        outcome = retry.call(call)
    except RetryError as error:
        outcome = error.reason
    assert outcome == "deadline" or isinstance(outcome, Response)
    # Every attempt starts by the deadline; a call may run past it, a sleep never does.
    assert all(t <= deadline + 1e-9 for t in started)
    assert all(t <= deadline + 1e-9 for t in [*started, *[sum(clock.sleeps)]])


def test_max_attempts_none_needs_a_deadline() -> None:
    with pytest.raises(ValueError, match="max_attempts=None needs a deadline"):
        Retry(max_attempts=None)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_attempts": 0}, ValueError, "max_attempts must be >= 1, got 0"),
        ({"max_attempts": 2.5}, TypeError, "max_attempts must be an int or None, got 2.5"),
        ({"deadline": -1}, ValueError, "deadline must be > 0"),
        ({"backoff": 0.5}, TypeError, "backoff must be a Backoff, got 0.5"),
        ({"classify": "yes"}, TypeError, "classify must be callable"),
        ({"limiter": object()}, TypeError, "limiter must be a limiter"),
        ({"breaker": object()}, TypeError, "breaker must be a CircuitBreaker"),
        ({"rng": 42}, TypeError, "rng must be a random.Random, got 42"),
        ({"name": 3}, TypeError, "name must be a str or None, got 3"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Retry(**kwargs)


def test_a_classifier_answer_outside_the_three_is_an_error() -> None:
    clock = ManualClock()
    retry = Retry(classify=lambda result, error: "maybe", clock=clock)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="classify must return 'ok', 'transient' or 'permanent', got 'maybe'"):
        retry.call(Script(clock, [200]))


def test_a_custom_classifier_decides() -> None:
    clock = ManualClock()

    def empty_is_transient(result: Any, error: BaseException | None) -> Any:
        if result == []:
            return "transient"
        return classify(result, error)

    script = Script(clock, [[], [], ["rows"]])
    assert Retry(classify=empty_is_transient, backoff=NO_JITTER, clock=clock).call(script) == ["rows"]
    assert len(script.started_at) == 3


def test_the_default_classifier() -> None:
    assert classify(None, None) == "ok"
    assert classify("anything", None) == "ok"
    assert classify(Response(201), None) == "ok"
    assert classify(Response(304), None) == "ok"
    for status in (408, 429, 500, 502, 503, 504):
        assert classify(Response(status), None) == "transient"
    for status in (400, 401, 403, 404, 422, 501, 505):
        assert classify(Response(status), None) == "permanent"
    assert classify(None, ConnectionRefusedError()) == "transient"
    assert classify(None, ValueError()) == "permanent"
    # Our own decisions are not flaky network: an acquire timing out inside the call.
    assert classify(None, AcquireTimeout(3.0)) == "permanent"
    # A certificate that does not verify will not verify next time either, however
    # the client wraps it (requests' SSLError is a ConnectionError; httpx chains it).
    bad_cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert classify(None, bad_cert) == "permanent"
    wrapped = ConnectionError("[SSL] handshake failed")
    wrapped.__cause__ = bad_cert
    assert classify(None, wrapped) == "permanent"

    class StatusError(Exception):
        def __init__(self, status: int) -> None:
            self.response = Response(status)

    assert classify(None, StatusError(503)) == "transient"
    assert classify(None, StatusError(404)) == "permanent"


# -- a limiter on the runner -----------------------------------------------------------


def test_every_attempt_acquires_so_retries_never_exceed_the_limit() -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity=1, refill_per_sec=1, clock=clock)
    script = Script(clock, [503, 503, 503, 200])
    retry = Retry(limiter=limiter, backoff=Backoff(base=0.1, jitter="none", multiplier=1), clock=clock)
    retry.call(script)
    # The backoff alone would retry after 0.1 s; the limiter spaces the attempts 1 s apart.
    gaps = [b - a for a, b in zip(script.started_at, script.started_at[1:], strict=False)]
    assert gaps == pytest.approx([1.0, 1.0, 1.0])
    assert limiter.stats().granted == 4


def test_the_history_records_limiter_waits() -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity=1, refill_per_sec=2, clock=clock)
    script = Script(clock, [503, 503])
    with pytest.raises(RetryError) as caught:
        Retry(max_attempts=2, limiter=limiter, backoff=Backoff(base=0.1, jitter="none"), clock=clock).call(script)
    assert [(a.backoff, a.waited) for a in caught.value.attempts] == [(0.0, 0.0), (0.1, pytest.approx(0.4))]


def test_an_acquire_past_the_deadline_gives_up_at_once_without_consuming() -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity=1, refill_per_sec=0.2, clock=clock)  # one grant per 5 s
    script = Script(clock, [503, 200])
    retry = Retry(deadline=2.0, limiter=limiter, backoff=Backoff(base=0.1, jitter="none"), clock=clock)
    with pytest.raises(RetryError) as caught:
        retry.call(script)
    assert caught.value.reason == "deadline"
    assert isinstance(caught.value.__cause__, AcquireTimeout)
    assert clock.sleeps == [0.1]  # the backoff; never the 4.9 s the limiter needed
    assert len(script.started_at) == 1
    assert limiter.stats().granted == 1
    assert limiter.stats().denied == 1


def test_responses_are_fed_back_to_the_limiter() -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity=10, refill_per_sec=10, clock=clock)
    script = Script(clock, [Response(429, {"Retry-After": "2"}), 200])
    Retry(limiter=limiter, backoff=NO_JITTER, clock=clock, rng=random.Random(5)).call(script)
    assert limiter.stats().restricted == 1
    # The pause ended before the retry (which slept at least the 2 s asked for).
    assert limiter.try_acquire()


def test_a_leaky_overflow_without_deadline_propagates() -> None:
    from ratelimit import LeakyBucket

    clock = ManualClock(1_000.0)
    limiter = LeakyBucket(capacity=1, leak_per_sec=1, clock=clock)
    # Fill the queue without sleeping: reserve as acquire would, but do not wait.
    while limiter._handle.reserve(1, math.inf)[0] >= 0:
        pass
    with pytest.raises(AcquireTimeout):
        Retry(limiter=limiter, clock=clock).call(Script(clock, [200]))


# -- a breaker on the runner -----------------------------------------------------------


def test_an_open_circuit_fails_fast_without_calling() -> None:
    clock = ManualClock(1_000.0)
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.5, cooldown=30, clock=clock)
    script = Script(clock, [503, 503, 200])
    with pytest.raises(CircuitOpen) as caught:
        Retry(max_attempts=5, breaker=breaker, backoff=NO_JITTER, clock=clock).call(script)
    assert len(script.started_at) == 2
    # Opened by the second failure; the third attempt asked 1 s (the backoff) later.
    assert caught.value.retry_after == pytest.approx(30 - 1.0)
    assert breaker.state == "open"


def test_a_429_does_not_count_against_the_circuit() -> None:
    clock = ManualClock(1_000.0)
    breaker = CircuitBreaker(min_calls=2, clock=clock)
    Retry(breaker=breaker, backoff=NO_JITTER, clock=clock).call(Script(clock, [429, 429, 429, 200]))
    stats = breaker.stats()
    assert stats.state == "closed"
    assert (stats.failures, stats.successes) == (0, 1)


# -- events and stats --------------------------------------------------------------------


def test_events_tell_the_story_of_a_call() -> None:
    clock = ManualClock()
    retry = Retry(max_attempts=2, backoff=NO_JITTER, clock=clock, name="api")
    seen: list[Event] = []
    retry.subscribe(seen.append)
    with pytest.raises(RetryError):
        retry.call(Script(clock, [503, ConnectionError("x")], duration=0.1))
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["AttemptFinished", "RetryScheduled", "AttemptFinished", "GaveUp", "CallFinished"]
    first = seen[0]
    assert isinstance(first, AttemptFinished)
    assert (first.name, first.attempt, first.status, first.verdict) == ("api", 1, 503, "transient")
    scheduled = seen[1]
    assert isinstance(scheduled, RetryScheduled)
    assert scheduled.delay == 0.5
    assert scheduled.reason == "status 503; backoff"
    assert (scheduled.status, scheduled.error, scheduled.source) == (503, None, "backoff")
    gave_up = seen[3]
    assert isinstance(gave_up, GaveUp)
    assert (gave_up.reason, gave_up.attempts) == ("attempts", 2)
    done = seen[4]
    assert isinstance(done, CallFinished)
    assert (done.outcome, done.attempts, done.backoff) == ("gave_up", 2, 0.5)
    assert done.in_calls == pytest.approx(0.2)


def test_stats_split_time_between_waits_backoff_and_calls() -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity=1, refill_per_sec=1, clock=clock)
    retry = Retry(limiter=limiter, backoff=Backoff(base=0.25, jitter="none", multiplier=1), clock=clock)
    retry.call(Script(clock, [503, 200], duration=0.5))
    retry.call(Script(clock, [404]))
    stats = retry.stats()
    assert (stats.calls, stats.succeeded, stats.permanent, stats.gave_up, stats.attempts) == (2, 1, 1, 0, 3)
    assert stats.backoff == 0.25
    assert stats.in_calls == pytest.approx(1.0)
    # The retry came 0.75 s after the first grant (0.5 s call, 0.25 s backoff) and
    # waited 0.25 s for its token; the next call came at 1.5 s and waited 0.5 s.
    assert stats.waited == pytest.approx(0.75)


def test_a_failing_event_callback_does_not_break_the_call(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    retry = Retry(clock=clock)

    def broken(event: Event) -> None:
        raise RuntimeError("callback bug")

    retry.subscribe(broken)
    assert retry.call(Script(clock, ["ok"])) == "ok"
    assert "an event callback failed" in caplog.text


# -- decorators and asyncio ----------------------------------------------------------------


def test_as_a_decorator_on_a_plain_function() -> None:
    clock = ManualClock()
    outcomes = [ConnectionError("x"), "done"]

    @Retry(backoff=NO_JITTER, clock=clock)
    def fetch(key: str) -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return f"{outcome}:{key}"

    assert fetch("k") == "done:k"
    assert fetch.__name__ == "fetch"


def make_async(script: Script) -> Callable[[], Any]:
    async def call() -> object:
        await asyncio.sleep(0)
        return script()

    return call


def test_async_runs_the_same_policy() -> None:
    clock = ManualClock(100.0)
    script = Script(clock, [503, 500, 200])
    result = asyncio.run(Retry(backoff=NO_JITTER, clock=clock).call_async(make_async(script)))
    assert isinstance(result, Response)
    assert clock.sleeps == [0.5, 1.0]


def test_async_gives_up_with_the_history_and_honours_the_deadline() -> None:
    clock = ManualClock(100.0)
    limiter = TokenBucket(capacity=1, refill_per_sec=0.1, clock=clock)
    script = Script(clock, [503, 503])
    retry = Retry(deadline=3, limiter=limiter, backoff=NO_JITTER, clock=clock)
    with pytest.raises(RetryError) as caught:
        asyncio.run(retry.call_async(make_async(script)))
    assert caught.value.reason == "deadline"
    assert clock.sleeps == [0.5]


def test_as_a_decorator_on_a_coroutine_function() -> None:
    clock = ManualClock()
    statuses = [503, 200]

    @Retry(backoff=NO_JITTER, clock=clock)
    async def fetch() -> Response:
        return Response(statuses.pop(0))

    assert asyncio.run(fetch()).status_code == 200


def test_an_interrupted_call_frees_its_probe_slot() -> None:
    clock = ManualClock(1_000.0)
    breaker = CircuitBreaker(min_calls=1, cooldown=1, clock=clock)
    with pytest.raises(RetryError):
        Retry(max_attempts=1, breaker=breaker, clock=clock).call(Script(clock, [503]))
    clock.advance(1)
    with pytest.raises(KeyboardInterrupt):
        Retry(breaker=breaker, clock=clock).call(Script(clock, [KeyboardInterrupt()]))
    # The probe never reported an outcome, but its slot is free again at once.
    assert breaker.state == "half_open"
    assert Retry(breaker=breaker, clock=clock).call(Script(clock, [200])) is not None
    assert breaker.stats().state == "closed"


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(1, 5),
    rate=st.floats(0.5, 20),
    outcomes=st.lists(st.sampled_from([200, 503, 429, 500]), min_size=1, max_size=40),
    calls=st.integers(1, 8),
    seed=st.integers(0, 1000),
)
def test_retries_never_push_past_the_limit(
    capacity: int, rate: float, outcomes: list[int], calls: int, seed: int
) -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(capacity, rate, clock=clock)
    retry = Retry(
        max_attempts=4, limiter=limiter, backoff=Backoff(base=0.01, max_delay=0.5), clock=clock, rng=random.Random(seed)
    )
    script = Script(clock, outcomes * calls * 4)
    for _ in range(calls):
        with contextlib.suppress(RetryError):
            retry.call(script)
    # A token bucket's promise: in any span of t seconds, at most capacity + rate * t.
    starts = script.started_at
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= capacity + rate * (starts[j] - first) + 1e-6
