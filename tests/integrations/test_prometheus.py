"""The Prometheus exporter: real limiters, retry runners and breakers on a ManualClock,
their events counted into a fresh registry and read back exactly."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ratelimit import (
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    ManualClock,
    Retry,
    RetryError,
    TokenBucket,
)
from ratelimit.events import Event, RetryScheduled
from ratelimit.prometheus import BREAKER_STATES, PrometheusMetrics


class Reply:
    """Shaped like an HTTP response, which is all the retry runner looks at."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> PrometheusMetrics:
    return PrometheusMetrics(registry)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_000.0)


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    """A sample's value; 0 for a series never touched (a counter that did not move)."""
    found = registry.get_sample_value(metric, labels)
    return 0.0 if found is None else found


def test_limiter_grants_waits_denials_and_pauses(
    metrics: PrometheusMetrics, registry: CollectorRegistry, clock: ManualClock
) -> None:
    bucket = TokenBucket(capacity=2, refill_per_sec=1, name="geo", clock=clock)
    bucket.subscribe(metrics)
    waits = [bucket.acquire() for _ in range(3)]  # the burst of 2, then one a second later
    assert waits == [0.0, 0.0, 1.0]
    assert bucket.try_acquire() is False
    bucket.feedback({"Retry-After": "5"}, status=429)

    assert value(registry, "ratelimit_grants_total", name="geo") == 3
    assert value(registry, "ratelimit_acquire_wait_seconds_count", name="geo") == 3
    assert value(registry, "ratelimit_acquire_wait_seconds_sum", name="geo") == 1.0
    assert value(registry, "ratelimit_acquire_wait_seconds_bucket", name="geo", le="0.5") == 2
    assert value(registry, "ratelimit_acquire_wait_seconds_bucket", name="geo", le="1.0") == 3
    assert value(registry, "ratelimit_denials_total", name="geo") == 1
    assert value(registry, "ratelimit_feedback_pauses_total", name="geo") == 1
    assert value(registry, "ratelimit_feedback_pause_seconds_sum", name="geo") == 5.0


def test_a_retried_call_its_attempts_statuses_retries_and_time_split(
    metrics: PrometheusMetrics, registry: CollectorRegistry, clock: ManualClock
) -> None:
    bucket = TokenBucket(capacity=1, refill_per_sec=2, clock=clock)
    retry = Retry(
        max_attempts=5,
        backoff=Backoff(base=1.0, multiplier=2.0, jitter="none"),
        limiter=bucket,
        name="api",
        clock=clock,
        rng=random.Random(7),
    )
    retry.subscribe(metrics)
    outcomes: list[Any] = [
        Reply(503),
        ConnectionError("refused"),
        Reply(429, {"Retry-After": "3"}),
        Reply(200),
    ]

    def call() -> Reply:
        clock.advance(0.25)  # each attempt takes a quarter of a second
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, Reply)
        return outcome

    assert retry.call(call).status_code == 200

    def sample(metric: str, **labels: str) -> float:
        return value(registry, metric, name="api", **labels)

    assert sample("ratelimit_calls_total", outcome="ok") == 1
    assert sample("ratelimit_call_attempts_count") == 1
    assert sample("ratelimit_call_attempts_sum") == 4
    assert sample("ratelimit_call_attempts_bucket", le="3.0") == 0
    assert sample("ratelimit_call_attempts_bucket", le="4.0") == 1
    for status in ("503", "error", "429", "200"):
        assert sample("ratelimit_responses_total", status=status) == 1
    assert sample("ratelimit_attempt_duration_seconds_count") == 4
    assert sample("ratelimit_attempt_duration_seconds_sum") == 1.0
    assert sample("ratelimit_retries_total", reason="503", source="backoff") == 1
    assert sample("ratelimit_retries_total", reason="ConnectionError", source="backoff") == 1
    assert sample("ratelimit_retries_total", reason="429", source="retry-after") == 1
    assert sample("ratelimit_give_ups_total", reason="attempts") == 0

    # Time in calls against time in backoff against time waiting for the limiter:
    # the same split the runner's own stats() keep, to the last digit.
    stats = retry.stats()
    assert sample("ratelimit_in_call_seconds_total") == 1.0 == stats.in_calls
    assert sample("ratelimit_backoff_seconds_total") == stats.backoff
    # 1 s, then 2 s of backoff, then Retry-After's 3 s plus up to 10 % jitter.
    assert 6.0 <= stats.backoff <= 6.3
    assert sample("ratelimit_limiter_wait_seconds_total") == stats.waited
    # The limiter's waits are not the retry runner's grants: those go to the limiter's
    # own subscribers, and this test subscribed to the runner only.
    assert value(registry, "ratelimit_grants_total", name="") == 0


def test_give_ups_permanent_failures_and_breaker_rejections_by_outcome(
    metrics: PrometheusMetrics, registry: CollectorRegistry, clock: ManualClock
) -> None:
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.6, cooldown=10, name="cb", clock=clock)
    retry = Retry(max_attempts=2, backoff=Backoff(base=0.5, jitter="none"), breaker=breaker, name="cb", clock=clock)
    retry.subscribe(metrics)
    breaker.subscribe(metrics)

    assert retry.call(lambda: Reply(404)).status_code == 404
    with pytest.raises(RetryError):
        retry.call(lambda: Reply(503))
    # 404 is an answer (a success to the breaker), the 503s two failures of three.
    assert breaker.state == "open"
    with pytest.raises(CircuitOpen):
        retry.call(lambda: Reply(200))

    def sample(metric: str, **labels: str) -> float:
        return value(registry, metric, name="cb", **labels)

    assert sample("ratelimit_calls_total", outcome="permanent") == 1
    assert sample("ratelimit_calls_total", outcome="gave_up") == 1
    assert sample("ratelimit_calls_total", outcome="rejected") == 1
    assert sample("ratelimit_calls_total", outcome="ok") == 0
    assert sample("ratelimit_give_ups_total", reason="attempts") == 1
    assert sample("ratelimit_call_attempts_count") == 3
    assert sample("ratelimit_call_attempts_sum") == 1 + 2 + 0
    assert sample("ratelimit_responses_total", status="404") == 1
    assert sample("ratelimit_responses_total", status="503") == 2
    assert sample("ratelimit_breaker_rejections_total") == 1
    assert sample("ratelimit_breaker_state") == BREAKER_STATES["open"] == 2
    assert sample("ratelimit_breaker_transitions_total", previous="closed", state="open") == 1


def test_breaker_state_gauge_and_transitions_through_a_recovery(
    metrics: PrometheusMetrics, registry: CollectorRegistry, clock: ManualClock
) -> None:
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.5, cooldown=10, name="db", clock=clock)
    breaker.subscribe(metrics)

    def fail() -> None:
        raise ConnectionError("down")

    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(fail)
    assert value(registry, "ratelimit_breaker_state", name="db") == 2
    clock.advance(10)
    states: list[float] = []

    def probe() -> Reply:
        # Inside the probe the breaker is half-open, and the gauge says so.
        states.append(value(registry, "ratelimit_breaker_state", name="db"))
        return Reply(200)

    breaker.call(probe)
    assert states == [1]
    assert value(registry, "ratelimit_breaker_state", name="db") == 0

    transitions = [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    for previous, state in transitions:
        assert value(registry, "ratelimit_breaker_transitions_total", name="db", previous=previous, state=state) == 1
    assert value(registry, "ratelimit_breaker_transitions_total", name="db", previous="closed", state="half_open") == 0


def test_install_hears_every_object_until_unsubscribed(
    metrics: PrometheusMetrics, registry: CollectorRegistry, clock: ManualClock
) -> None:
    unnamed = TokenBucket(capacity=5, refill_per_sec=1, clock=clock)
    named = TokenBucket(capacity=5, refill_per_sec=1, clock=clock, name="b")
    unsubscribe = metrics.install()
    try:
        unnamed.acquire()
        named.acquire()
        named.acquire()
    finally:
        unsubscribe()
    unnamed.acquire()  # no longer heard

    assert value(registry, "ratelimit_grants_total", name="") == 1
    assert value(registry, "ratelimit_grants_total", name="b") == 2


def test_retry_reasons_become_labels_of_few_values(metrics: PrometheusMetrics, registry: CollectorRegistry) -> None:
    metrics(RetryScheduled("r", 1, 0.5, "status 503; backoff", status=503))
    metrics(RetryScheduled("r", 1, 0.5, "ValueError('x'); retry-after", error="ValueError", source="retry-after"))
    metrics(RetryScheduled("r", 1, 0.5, "returned; backoff"))

    assert value(registry, "ratelimit_retries_total", name="r", reason="503", source="backoff") == 1
    assert value(registry, "ratelimit_retries_total", name="r", reason="ValueError", source="retry-after") == 1
    assert value(registry, "ratelimit_retries_total", name="r", reason="returned", source="backoff") == 1


def test_events_of_unknown_kinds_are_ignored(metrics: PrometheusMetrics, registry: CollectorRegistry) -> None:
    class Future:
        name = "new"

    event: Any = Future()
    metrics(event)
    assert value(registry, "ratelimit_grants_total", name="new") == 0


def test_namespace_and_argument_checks(registry: CollectorRegistry, clock: ManualClock) -> None:
    custom = PrometheusMetrics(registry, namespace="myapp")
    bucket = TokenBucket(capacity=1, refill_per_sec=1, clock=clock, name="x")
    bucket.subscribe(custom)
    bucket.acquire()
    assert value(registry, "myapp_grants_total", name="x") == 1
    assert registry.get_sample_value("ratelimit_grants_total", {"name": "x"}) is None

    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusMetrics(registry, namespace="myapp")
    with pytest.raises(TypeError, match=r"registry must be a prometheus_client CollectorRegistry or None, got 'r'"):
        PrometheusMetrics("r")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"namespace must be a str, got 3"):
        PrometheusMetrics(CollectorRegistry(), namespace=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"namespace must be a valid Prometheus metric name prefix, got '1x'"):
        PrometheusMetrics(CollectorRegistry(), namespace="1x")


def test_a_subscriber_is_an_event_callback(metrics: PrometheusMetrics) -> None:
    callback: Any = metrics
    event: Event = RetryScheduled(None, 1, 0.1, "status 500; backoff")
    assert callback(event) is None
    assert repr(metrics) == "PrometheusMetrics(namespace='ratelimit')"
