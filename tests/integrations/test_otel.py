"""The OpenTelemetry exporter: real limiters, retry runners and breakers on a ManualClock,
their events recorded through the SDK into an in-memory reader and read back exactly,
and held to what the Prometheus exporter says of the same events."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
    Sum,
)
from prometheus_client import CollectorRegistry

from ratelimit import (
    Adaptive,
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    ManualClock,
    Retry,
    RetryError,
    TokenBucket,
)
from ratelimit.events import Event, RetryScheduled
from ratelimit.otel import ATTEMPT_BOUNDARIES, BREAKER_STATES, WAIT_BOUNDARIES, OpenTelemetryMetrics
from ratelimit.prometheus import PrometheusMetrics


class Reply:
    """Shaped like an HTTP response, which is all the retry runner looks at."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class Read:
    """What the reader holds now, by instrument name."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        data = reader.get_metrics_data()
        self.metrics: dict[str, Metric] = {}
        if data is not None:
            for resource in data.resource_metrics:
                for scope in resource.scope_metrics:
                    self.metrics.update({m.name: m for m in scope.metrics})

    def points(self, metric: str) -> Sequence[Any]:
        found = self.metrics.get(metric)
        return [] if found is None else list(found.data.data_points)

    def value(self, metric: str, **attributes: str) -> float:
        """A counter's or gauge's value; 0 for a series never touched."""
        for point in self.points(metric):
            if dict(point.attributes) == attributes:
                assert isinstance(point, NumberDataPoint)
                return point.value
        return 0.0

    def histogram(self, metric: str, **attributes: str) -> HistogramDataPoint:
        for point in self.points(metric):
            if dict(point.attributes) == attributes:
                assert isinstance(point, HistogramDataPoint)
                return point
        raise AssertionError(f"no {metric} point with {attributes}")


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[reader])
    yield provider
    provider.shutdown()


@pytest.fixture
def metrics(provider: MeterProvider) -> Iterator[OpenTelemetryMetrics]:
    metrics = OpenTelemetryMetrics(provider)
    yield metrics
    metrics.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_000.0)


def test_limiter_grants_waits_denials_and_pauses(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """A limiter's grants, waits, refusals and a 429's pause, counted exactly."""
    bucket = TokenBucket(capacity=2, refill_per_sec=1, name="geo", clock=clock)
    bucket.subscribe(metrics)
    waits = [bucket.acquire() for _ in range(3)]  # the burst of 2, then one a second later
    assert waits == [0.0, 0.0, 1.0]
    assert bucket.try_acquire() is False
    bucket.feedback({"Retry-After": "5"}, status=429)

    read = Read(reader)
    assert read.value("ratelimit_grants", name="geo") == 3
    wait = read.histogram("ratelimit_acquire_wait_seconds", name="geo")
    assert (wait.count, wait.sum) == (3, 1.0)
    assert tuple(wait.explicit_bounds) == WAIT_BOUNDARIES
    # Per bucket, not cumulative: two waits of 0 in the first, one of 1 s in (0.5, 1].
    assert wait.bucket_counts[0] == 2
    assert wait.bucket_counts[WAIT_BOUNDARIES.index(1.0)] == 1
    assert sum(wait.bucket_counts) == 3
    assert read.value("ratelimit_denials", name="geo") == 1
    assert read.value("ratelimit_feedback_pauses", name="geo") == 1
    pause = read.histogram("ratelimit_feedback_pause_seconds", name="geo")
    assert (pause.count, pause.sum) == (1, 5.0)
    assert read.metrics["ratelimit_acquire_wait_seconds"].unit == "s"
    assert read.metrics["ratelimit_grants"].unit == "{request}"


def test_shadow_grants_denials_and_waits_count_apart(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """A limiter in shadow mode counts what it would have done, not as grants."""
    limiter = TokenBucket(1, 1, name="shadow", clock=clock, shadow=True)
    limiter.subscribe(metrics)
    limiter.acquire()
    limiter.acquire()  # would have waited a second
    limiter.try_acquire()  # would have been refused

    read = Read(reader)
    assert read.value("ratelimit_shadow_grants", name="shadow") == 2
    assert read.value("ratelimit_shadow_denials", name="shadow") == 1
    wait = read.histogram("ratelimit_shadow_wait_seconds", name="shadow")
    assert (wait.count, wait.sum) == (2, 1.0)
    assert read.value("ratelimit_grants", name="shadow") == 0
    assert read.value("ratelimit_denials", name="shadow") == 0


def test_each_refusal_fed_back_to_an_adaptive_limiter_is_a_throttle(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """A 429 fed back to a limiter that learns its rate counts; a 200 does not."""
    limiter = TokenBucket(1, 100, adaptive=Adaptive(), name="learner", clock=clock)
    limiter.subscribe(metrics)
    limiter.acquire()
    limiter.feedback({}, status=429)
    limiter.feedback({}, status=200)
    assert Read(reader).value("ratelimit_feedback_throttles", name="learner") == 1


def test_a_retried_call_its_attempts_statuses_retries_and_time_split(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """One call of four attempts: its outcome, statuses, retries and where its time went."""
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
    outcomes: list[Any] = [Reply(503), ConnectionError("refused"), Reply(429, {"Retry-After": "3"}), Reply(200)]

    def call() -> Reply:
        clock.advance(0.25)  # each attempt takes a quarter of a second
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, Reply)
        return outcome

    assert retry.call(call).status_code == 200

    read = Read(reader)
    assert read.value("ratelimit_calls", name="api", outcome="ok") == 1
    attempts = read.histogram("ratelimit_call_attempts", name="api")
    assert (attempts.count, attempts.sum) == (1, 4)
    assert tuple(attempts.explicit_bounds) == ATTEMPT_BOUNDARIES
    assert attempts.bucket_counts[ATTEMPT_BOUNDARIES.index(4.0)] == 1
    for status in ("503", "error", "429", "200"):
        assert read.value("ratelimit_responses", name="api", status=status) == 1
    duration = read.histogram("ratelimit_attempt_duration_seconds", name="api")
    assert (duration.count, duration.sum) == (4, 1.0)
    assert read.value("ratelimit_retries", name="api", reason="503", source="backoff") == 1
    assert read.value("ratelimit_retries", name="api", reason="ConnectionError", source="backoff") == 1
    assert read.value("ratelimit_retries", name="api", reason="429", source="retry-after") == 1
    assert read.value("ratelimit_give_ups", name="api", reason="attempts") == 0

    stats = retry.stats()
    assert read.value("ratelimit_in_call_seconds", name="api") == 1.0 == stats.in_calls
    assert read.value("ratelimit_backoff_seconds", name="api") == stats.backoff
    assert 6.0 <= stats.backoff <= 6.3
    assert read.value("ratelimit_limiter_wait_seconds", name="api") == stats.waited
    # The limiter's grants go to its own subscribers; this test heard the runner only.
    assert read.value("ratelimit_grants", name="") == 0


def test_give_ups_permanent_failures_and_breaker_rejections_by_outcome(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """A permanent failure, a call given up and one an open circuit refused."""
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.6, cooldown=10, name="cb", clock=clock)
    retry = Retry(max_attempts=2, backoff=Backoff(base=0.5, jitter="none"), breaker=breaker, name="cb", clock=clock)
    retry.subscribe(metrics)
    breaker.subscribe(metrics)

    assert retry.call(lambda: Reply(404)).status_code == 404
    with pytest.raises(RetryError):
        retry.call(lambda: Reply(503))
    assert breaker.state == "open"
    with pytest.raises(CircuitOpen):
        retry.call(lambda: Reply(200))

    read = Read(reader)
    for outcome, count in {"permanent": 1, "gave_up": 1, "rejected": 1, "ok": 0}.items():
        assert read.value("ratelimit_calls", name="cb", outcome=outcome) == count
    assert read.value("ratelimit_give_ups", name="cb", reason="attempts") == 1
    attempts = read.histogram("ratelimit_call_attempts", name="cb")
    assert (attempts.count, attempts.sum) == (3, 1 + 2 + 0)
    assert read.value("ratelimit_responses", name="cb", status="404") == 1
    assert read.value("ratelimit_responses", name="cb", status="503") == 2
    assert read.value("ratelimit_breaker_rejections", name="cb") == 1
    assert read.value("ratelimit_breaker_state", name="cb") == BREAKER_STATES["open"] == 2
    assert read.value("ratelimit_breaker_transitions", name="cb", previous="closed", state="open") == 1


def test_breaker_state_gauge_and_transitions_through_a_recovery(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """The gauge reads open, half-open inside the probe, then closed."""
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.5, cooldown=10, name="db", clock=clock)
    breaker.subscribe(metrics)

    def fail() -> None:
        raise ConnectionError("down")

    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(fail)
    assert Read(reader).value("ratelimit_breaker_state", name="db") == 2
    clock.advance(10)
    states: list[float] = []

    def probe() -> Reply:
        states.append(Read(reader).value("ratelimit_breaker_state", name="db"))
        return Reply(200)

    breaker.call(probe)
    assert states == [1]
    read = Read(reader)
    assert read.value("ratelimit_breaker_state", name="db") == 0
    assert isinstance(read.metrics["ratelimit_breaker_state"].data, Gauge)
    for previous, state in [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]:
        assert read.value("ratelimit_breaker_transitions", name="db", previous=previous, state=state) == 1
    assert read.value("ratelimit_breaker_transitions", name="db", previous="closed", state="half_open") == 0


def test_install_hears_every_object_until_unsubscribed(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """install() hears unnamed and named objects alike, and stops when unsubscribed."""
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

    read = Read(reader)
    assert read.value("ratelimit_grants", name="") == 1
    assert read.value("ratelimit_grants", name="b") == 2


def test_close_unsubscribes_ignores_later_events_and_stops_the_gauge(
    provider: MeterProvider, reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    """After close() nothing more is counted and no breaker state is observed."""
    metrics = OpenTelemetryMetrics(provider)
    metrics.install()
    bucket = TokenBucket(capacity=5, refill_per_sec=1, clock=clock, name="c")
    breaker = CircuitBreaker(min_calls=1, failure_threshold=0.5, cooldown=10, name="c", clock=clock)
    breaker.subscribe(metrics)  # one by one: close() cannot unsubscribe this one
    bucket.acquire()

    def fail() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        breaker.call(fail)
    assert Read(reader).value("ratelimit_breaker_state", name="c") == 2

    metrics.close()
    metrics.close()
    bucket.acquire()
    clock.advance(10)
    breaker.call(lambda: Reply(200))

    read = Read(reader)
    assert read.value("ratelimit_grants", name="c") == 1
    assert read.points("ratelimit_breaker_state") == []
    assert read.value("ratelimit_breaker_transitions", name="c", previous="open", state="half_open") == 0


def test_retry_reasons_become_attributes_of_few_values(
    metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader
) -> None:
    """A retry's reason is its status, its exception's class, or "returned"."""
    metrics(RetryScheduled("r", 1, 0.5, "status 503; backoff", status=503))
    metrics(RetryScheduled("r", 1, 0.5, "ValueError('x'); retry-after", error="ValueError", source="retry-after"))
    metrics(RetryScheduled("r", 1, 0.5, "returned; backoff"))

    read = Read(reader)
    assert read.value("ratelimit_retries", name="r", reason="503", source="backoff") == 1
    assert read.value("ratelimit_retries", name="r", reason="ValueError", source="retry-after") == 1
    assert read.value("ratelimit_retries", name="r", reason="returned", source="backoff") == 1


def test_events_of_unknown_kinds_are_ignored(metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader) -> None:
    """An event of a kind added later counts nowhere."""

    class Future:
        name = "new"

    event: Any = Future()
    metrics(event)
    assert Read(reader).metrics == {}


# -- the same story as ratelimit.prometheus ------------------------------------------


def everything(subscribers: Sequence[Callable[[Event], None]], clock: ManualClock) -> None:
    """Real activity that emits every kind of event, each heard by every subscriber."""
    objects: list[Any] = [
        TokenBucket(capacity=2, refill_per_sec=1, name="geo", clock=clock),
        TokenBucket(1, 1, name="shadow", clock=clock, shadow=True),
        TokenBucket(1, 100, adaptive=Adaptive(), name="learner", clock=clock),
    ]
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.6, cooldown=10, name="cb", clock=clock)
    retry = Retry(
        max_attempts=2,
        backoff=Backoff(base=0.5, jitter="none"),
        limiter=objects[0],
        breaker=breaker,
        name="cb",
        clock=clock,
    )
    for obj in [*objects, breaker, retry]:
        for subscriber in subscribers:
            obj.subscribe(subscriber)
    geo, shadow, learner = objects
    for _ in range(3):
        geo.acquire()
    geo.try_acquire()
    geo.feedback({"Retry-After": "5"}, status=429)
    shadow.acquire()
    shadow.acquire()
    shadow.try_acquire()
    learner.acquire()
    learner.feedback({}, status=429)
    clock.advance(10)
    attempts: list[Any] = [Reply(404), ConnectionError("x"), Reply(503)]

    def call() -> Reply:
        clock.advance(0.25)
        outcome = attempts.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, Reply)
        return outcome

    retry.call(call)
    with pytest.raises(RetryError):
        retry.call(call)
    with pytest.raises(CircuitOpen):
        retry.call(call)
    clock.advance(10)
    breaker.call(lambda: Reply(200))


def prometheus_families(registry: CollectorRegistry) -> dict[str, Any]:
    return {family.name: family for family in registry.collect()}


def test_every_prometheus_metric_has_its_twin_with_the_same_values() -> None:
    """The same events through both exporters: the same names (less ``_total``), help
    texts, kinds, attributes, values and buckets, so the two cannot drift apart."""
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel = OpenTelemetryMetrics(provider)
    everything([PrometheusMetrics(registry), otel], ManualClock(start=1_000.0))
    read = Read(reader)
    otel.close()
    provider.shutdown()

    families = prometheus_families(registry)
    # prometheus_client names a counter's family without its _total.
    assert set(read.metrics) == set(families)
    assert len(families) == 21
    compared = 0
    for name, family in families.items():
        metric = read.metrics[name]
        points = read.points(name)
        assert metric.description == family.documentation, name
        kind = {"counter": Sum, "histogram": Histogram, "gauge": Gauge}[family.type]
        assert isinstance(metric.data, kind), name
        if isinstance(metric.data, Sum):
            assert metric.data.is_monotonic, name
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            le = labels.pop("le", None)
            point = next(p for p in points if dict(p.attributes) == labels)
            compared += 1
            if sample.name.endswith("_bucket"):
                assert le is not None
                if le == "+Inf":
                    assert sum(point.bucket_counts) == sample.value, (name, labels)
                else:
                    assert float(le) in point.explicit_bounds, (name, le)
                    upto = point.explicit_bounds.index(float(le)) + 1
                    assert sum(point.bucket_counts[:upto]) == sample.value, (name, labels, le)
            elif sample.name.endswith("_count"):
                assert point.count == sample.value, (name, labels)
            elif sample.name.endswith("_sum") and family.type == "histogram":
                assert point.sum == sample.value, (name, labels)
            else:
                assert point.value == sample.value, (name, labels)
        # And no series the Prometheus side lacks.
        series = {frozenset((k, v) for k, v in s.labels.items() if k != "le") for s in family.samples}
        assert {frozenset(p.attributes.items()) for p in points} == series, name
    assert compared > 100


# -- set-up ---------------------------------------------------------------------------


def test_a_meter_or_the_global_provider_and_the_namespace(
    reader: InMemoryMetricReader, provider: MeterProvider, clock: ManualClock
) -> None:
    """A meter passed in is used as it is; the namespace prefixes every name."""
    custom = OpenTelemetryMetrics(meter=provider.get_meter("app"), namespace="myapp")
    bucket = TokenBucket(capacity=1, refill_per_sec=1, clock=clock, name="x")
    bucket.subscribe(custom)
    bucket.acquire()
    read = Read(reader)
    assert read.value("myapp_grants", name="x") == 1
    assert "ratelimit_grants" not in read.metrics
    assert repr(custom) == "OpenTelemetryMetrics(namespace='myapp')"
    # With nothing passed, the global provider's meter (the API's proxy until an SDK is set).
    default = OpenTelemetryMetrics()
    assert default.meter is not None
    default.close()


def test_argument_checks(provider: MeterProvider) -> None:
    with pytest.raises(TypeError, match=r"meter_provider must be an OpenTelemetry MeterProvider or None, got 'p'"):
        OpenTelemetryMetrics("p")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"meter must be an OpenTelemetry Meter or None, got 3"):
        OpenTelemetryMetrics(meter=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pass meter_provider or meter, not both"):
        OpenTelemetryMetrics(provider, meter=provider.get_meter("x"))
    with pytest.raises(TypeError, match=r"namespace must be a str, got 3"):
        OpenTelemetryMetrics(provider, namespace=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"namespace must be a valid OpenTelemetry instrument name prefix, got '1x'"):
        OpenTelemetryMetrics(provider, namespace="1x")


class OldMeter(NoOpMeter):
    """A meter of an API older than bucket advice (before 1.23)."""

    def __init__(self) -> None:
        super().__init__("old")
        self.histograms: list[str] = []

    def create_histogram(  # type: ignore[override]
        self, name: str, unit: str = "", description: str = ""
    ) -> Any:
        self.histograms.append(name)
        return super().create_histogram(name, unit, description)


def test_an_api_without_bucket_advice_still_gets_every_histogram() -> None:
    meter = OldMeter()
    OpenTelemetryMetrics(meter=meter)
    assert sorted(meter.histograms) == [
        "ratelimit_acquire_wait_seconds",
        "ratelimit_attempt_duration_seconds",
        "ratelimit_call_attempts",
        "ratelimit_feedback_pause_seconds",
        "ratelimit_shadow_wait_seconds",
    ]


def test_a_subscriber_is_an_event_callback(metrics: OpenTelemetryMetrics) -> None:
    callback: Callable[[Event], object] = metrics
    callback(RetryScheduled(None, 1, 0.1, "status 500; backoff"))
    assert repr(metrics) == "OpenTelemetryMetrics(namespace='ratelimit')"


def run_without_opentelemetry(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing opentelemetry fails."""
    blocker = textwrap.dedent(
        """
        import sys

        class Missing:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Missing())
        """
    )
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_ratelimit_imports_without_the_extra_and_otel_names_it() -> None:
    """``import ratelimit`` needs no OpenTelemetry; ``ratelimit.otel`` says what to install."""
    result = run_without_opentelemetry(
        """
        import ratelimit, ratelimit.events, ratelimit.prometheus
        assert not any(m.startswith("opentelemetry") for m in sys.modules)
        try:
            import ratelimit.otel
        except ImportError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ratelimit.otel needs the OpenTelemetry API: pip install 'ratelimit-fleet[otel]'\n"


def test_the_attributes_are_plain_strings(metrics: OpenTelemetryMetrics, reader: InMemoryMetricReader) -> None:
    """Every attribute value is a str, as Prometheus labels are."""
    everything([metrics], ManualClock(start=1_000.0))
    read = Read(reader)
    values: list[Mapping[str, Any]] = [dict(point.attributes) for name in read.metrics for point in read.points(name)]
    assert values
    assert all(isinstance(v, str) for attributes in values for v in attributes.values())
