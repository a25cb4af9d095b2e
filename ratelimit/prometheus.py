"""Prometheus metrics from ratelimit's events.

One line to set up, for every limiter, retry runner and breaker in the process::

    unsubscribe = PrometheusMetrics().install()

or ``obj.subscribe(PrometheusMetrics(registry))`` for one object's events only. Every
metric is labelled by the object's ``name`` (``""`` for an unnamed one); with the
default ``namespace`` they are::

    ==========================================  =========  =================================
    metric                                      type       labels (besides ``name``)
    ==========================================  =========  =================================
    ``ratelimit_grants_total``                  counter
    ``ratelimit_denials_total``                 counter
    ``ratelimit_acquire_wait_seconds``          histogram
    ``ratelimit_shadow_grants_total``           counter    (a limiter in shadow mode: what
    ``ratelimit_shadow_denials_total``          counter    it would have granted, refused,
    ``ratelimit_shadow_wait_seconds``           histogram  and made callers wait)
    ``ratelimit_feedback_pauses_total``         counter
    ``ratelimit_feedback_pause_seconds``        histogram
    ``ratelimit_feedback_throttles_total``      counter
    ``ratelimit_calls_total``                   counter    ``outcome``: ok, permanent,
                                                           gave_up, rejected
    ``ratelimit_call_attempts``                 histogram
    ``ratelimit_limiter_wait_seconds_total``    counter
    ``ratelimit_backoff_seconds_total``         counter
    ``ratelimit_in_call_seconds_total``         counter
    ``ratelimit_attempt_duration_seconds``      histogram
    ``ratelimit_responses_total``               counter    ``status``: ``"503"``, ...
    ``ratelimit_retries_total``                 counter    ``reason``, ``source``
    ``ratelimit_give_ups_total``                counter    ``reason``: attempts, deadline
    ``ratelimit_breaker_state``                 gauge
    ``ratelimit_breaker_transitions_total``     counter    ``previous``, ``state``
    ``ratelimit_breaker_rejections_total``      counter
    ==========================================  =========  =================================

Needs the ``prometheus`` extra: ``pip install 'ratelimit-fleet[prometheus]'``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ._events import (
    AttemptFinished,
    CallFinished,
    Denied,
    Event,
    GaveUp,
    Granted,
    Paused,
    Rejected,
    RetryScheduled,
    StateChanged,
    Throttled,
    subscribe,
)
from ._integrations.metrics import ATTEMPT_BUCKETS, BREAKER_STATES, WAIT_BUCKETS, attempt_status, retry_reason

__all__ = ["BREAKER_STATES", "PrometheusMetrics"]

_NAMESPACE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


class PrometheusMetrics:
    """Counters, histograms and gauges fed by ratelimit's events.

    Call it with an event (it is an event subscriber); :meth:`install` subscribes it to
    every object's events.

    Args:
        registry: where the metrics are registered (default: prometheus_client's
            global ``REGISTRY``). Two ``PrometheusMetrics`` with the same
            ``namespace`` cannot share a registry: subscribe one to many objects.
        namespace: the prefix of every metric name.

    Raises:
        TypeError: ``registry`` is not a ``CollectorRegistry``, or ``namespace`` not a str.
        ValueError: ``namespace`` is not a valid metric name prefix, or its metrics are
            already registered in ``registry``.

    ``ratelimit_breaker_state`` is 0 closed, 1 half-open, 2 open (:data:`BREAKER_STATES`);
    it appears once a breaker has changed state. ``ratelimit_responses_total`` counts
    every attempt by the HTTP status it got (``"error"`` when it raised without a
    response, ``"none"`` when it returned something that is not a response).
    ``ratelimit_retries_total`` counts scheduled retries by ``reason`` (the failed status,
    the exception's class name, or ``"returned"``) and by ``source`` of the delay
    (``"backoff"`` or ``"retry-after"``).
    """

    def __init__(self, registry: CollectorRegistry | None = None, namespace: str = "ratelimit") -> None:
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise TypeError(f"registry must be a prometheus_client CollectorRegistry or None, got {registry!r}")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {namespace!r}")
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"namespace must be a valid Prometheus metric name prefix, got {namespace!r}")
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        ns, reg = namespace, self.registry

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, ["name", *labels], namespace=ns, registry=reg)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, ["name"], namespace=ns, registry=reg, buckets=buckets)

        # prometheus_client appends the _total to a counter's name itself.
        self.grants = counter("grants", "Requests a limiter granted.")
        self.denials = counter("denials", "Requests a limiter refused (try_acquire said no, acquire timed out).")
        self.acquire_wait = histogram("acquire_wait_seconds", "Seconds each granted request waited.", WAIT_BUCKETS)
        # A limiter in shadow mode counts apart: its callers did not wait nor stop.
        self.shadow_grants = counter("shadow_grants", "Requests a limiter in shadow mode would have granted.")
        self.shadow_denials = counter("shadow_denials", "Requests a limiter in shadow mode would have refused.")
        self.shadow_wait = histogram(
            "shadow_wait_seconds",
            "Seconds a limiter in shadow mode would have made each granted request wait.",
            WAIT_BUCKETS,
        )
        self.pauses = counter("feedback_pauses", "Times a provider's response paused or lowered a limiter's budget.")
        self.pause_seconds = histogram(
            "feedback_pause_seconds", "How long each restriction from feedback lasts.", WAIT_BUCKETS
        )
        self.throttles = counter(
            "feedback_throttles", "Refusals fed back to a limiter that learns its rate (adaptive=)."
        )
        self.calls = counter("calls", "Calls through a retry runner, by how they ended.", "outcome")
        self.attempts = histogram("call_attempts", "Attempts each call through a retry runner made.", ATTEMPT_BUCKETS)
        self.limiter_wait = counter("limiter_wait_seconds", "Seconds retried calls spent waiting for the limiter.")
        self.backoff = counter("backoff_seconds", "Seconds retried calls spent asleep in backoff.")
        self.in_calls = counter("in_call_seconds", "Seconds retried calls spent inside their attempts.")
        self.attempt_duration = histogram(
            "attempt_duration_seconds", "Seconds each attempt took, from send to response.", WAIT_BUCKETS
        )
        self.responses = counter("responses", "Attempts by the HTTP status they got.", "status")
        self.retries = counter(
            "retries", "Retries scheduled, by what failed and what set the delay.", "reason", "source"
        )
        self.give_ups = counter("give_ups", "Calls a retry runner gave up on.", "reason")
        self.breaker_state = Gauge(
            "breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            ["name"],
            namespace=ns,
            registry=reg,
        )
        self.transitions = counter("breaker_transitions", "Circuit breaker state changes.", "previous", "state")
        self.rejections = counter("breaker_rejections", "Calls an open circuit failed fast.")

    def __repr__(self) -> str:
        return f"PrometheusMetrics(namespace={self.namespace!r})"

    def install(self) -> Callable[[], None]:
        """Subscribe to every limiter's, retry runner's and breaker's events; returns
        the function that unsubscribes again."""
        return subscribe(self)

    def __call__(self, event: Event) -> None:
        """Count one event; events of kinds it does not know are ignored."""
        name = getattr(event, "name", None) or ""
        if isinstance(event, Granted):
            if event.shadow:
                self.shadow_grants.labels(name).inc()
                self.shadow_wait.labels(name).observe(event.wait)
            else:
                self.grants.labels(name).inc()
                self.acquire_wait.labels(name).observe(event.wait)
        elif isinstance(event, Denied):
            (self.shadow_denials if event.shadow else self.denials).labels(name).inc()
        elif isinstance(event, Paused):
            self.pauses.labels(name).inc()
            self.pause_seconds.labels(name).observe(event.seconds)
        elif isinstance(event, Throttled):
            self.throttles.labels(name).inc()
        elif isinstance(event, AttemptFinished):
            self.responses.labels(name, attempt_status(event)).inc()
            self.attempt_duration.labels(name).observe(event.duration)
        elif isinstance(event, RetryScheduled):
            self.retries.labels(name, retry_reason(event), event.source).inc()
        elif isinstance(event, GaveUp):
            self.give_ups.labels(name, event.reason).inc()
        elif isinstance(event, CallFinished):
            self.calls.labels(name, event.outcome).inc()
            self.attempts.labels(name).observe(event.attempts)
            self.limiter_wait.labels(name).inc(event.waited)
            self.backoff.labels(name).inc(event.backoff)
            self.in_calls.labels(name).inc(event.in_calls)
        elif isinstance(event, StateChanged):
            self.breaker_state.labels(name).set(BREAKER_STATES[event.state])
            self.transitions.labels(name, event.previous, event.state).inc()
        elif isinstance(event, Rejected):
            self.rejections.labels(name).inc()
