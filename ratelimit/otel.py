"""OpenTelemetry metrics from ratelimit's events: what :mod:`ratelimit.prometheus` counts,
under the same names, with the same attributes.

One line to set up, for every limiter, retry runner and breaker in the process::

    unsubscribe = OpenTelemetryMetrics().install()

or ``obj.subscribe(OpenTelemetryMetrics(meter_provider))`` for one object's events only. The
instruments come from the global ``MeterProvider`` unless one (or a ``Meter``) is
passed: wire that provider to your SDK and exporter as usual; this module needs only
the API. Every measurement has the attribute ``name``, the object's name (``""`` for an
unnamed one). With the default ``namespace``::

    ======================================  ================  ================  ========================================
    OpenTelemetry instrument                kind              unit              Prometheus metric
    ======================================  ================  ================  ========================================
    ``ratelimit_grants``                    counter           ``{request}``     ``ratelimit_grants_total``
    ``ratelimit_denials``                   counter           ``{request}``     ``ratelimit_denials_total``
    ``ratelimit_acquire_wait_seconds``      histogram         ``s``             ``ratelimit_acquire_wait_seconds``
    ``ratelimit_shadow_grants``             counter           ``{request}``     ``ratelimit_shadow_grants_total``
    ``ratelimit_shadow_denials``            counter           ``{request}``     ``ratelimit_shadow_denials_total``
    ``ratelimit_shadow_wait_seconds``       histogram         ``s``             ``ratelimit_shadow_wait_seconds``
    ``ratelimit_feedback_pauses``           counter           ``{pause}``       ``ratelimit_feedback_pauses_total``
    ``ratelimit_feedback_pause_seconds``    histogram         ``s``             ``ratelimit_feedback_pause_seconds``
    ``ratelimit_feedback_throttles``        counter           ``{response}``    ``ratelimit_feedback_throttles_total``
    ``ratelimit_calls``                     counter           ``{call}``        ``ratelimit_calls_total``
    ``ratelimit_call_attempts``             histogram         ``{attempt}``     ``ratelimit_call_attempts``
    ``ratelimit_limiter_wait_seconds``      counter           ``s``             ``ratelimit_limiter_wait_seconds_total``
    ``ratelimit_backoff_seconds``           counter           ``s``             ``ratelimit_backoff_seconds_total``
    ``ratelimit_in_call_seconds``           counter           ``s``             ``ratelimit_in_call_seconds_total``
    ``ratelimit_attempt_duration_seconds``  histogram         ``s``             ``ratelimit_attempt_duration_seconds``
    ``ratelimit_responses``                 counter           ``{response}``    ``ratelimit_responses_total``
    ``ratelimit_retries``                   counter           ``{retry}``       ``ratelimit_retries_total``
    ``ratelimit_give_ups``                  counter           ``{call}``        ``ratelimit_give_ups_total``
    ``ratelimit_breaker_state``             observable gauge  (none)            ``ratelimit_breaker_state``
    ``ratelimit_breaker_transitions``       counter           ``{transition}``  ``ratelimit_breaker_transitions_total``
    ``ratelimit_breaker_rejections``        counter           ``{call}``        ``ratelimit_breaker_rejections_total``
    ======================================  ================  ================  ========================================

So the Prometheus name is the OpenTelemetry one with ``_total`` after a counter's, which
is what OpenTelemetry's own Prometheus exporters write: they add ``_total`` to a
monotonic sum, add a unit's suffix only where the name does not already end in it
(``_seconds`` for ``s``), and drop the annotations in braces. The attributes are the
Prometheus labels: ``name`` everywhere, and ``outcome`` (calls), ``status``
(responses), ``reason`` and ``source`` (retries), ``reason`` (give_ups), ``previous``
and ``state`` (breaker_transitions), with the same values.

The histograms ask for the Prometheus module's buckets through the API's advice
(``explicit_bucket_boundaries_advisory``, API 1.23 and later; an SDK of that age
follows it). With an older API, give them with a View:
:data:`WAIT_BOUNDARIES` for the ``*_seconds`` histograms, :data:`ATTEMPT_BOUNDARIES`
for ``call_attempts``.

Needs the ``otel`` extra: ``pip install 'ratelimit-fleet[otel]'``.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    from opentelemetry.metrics import (
        CallbackOptions,
        Counter,
        Histogram,
        Meter,
        MeterProvider,
        Observation,
        get_meter_provider,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "ratelimit.otel needs the OpenTelemetry API: pip install 'ratelimit-fleet[otel]'", name=exc.name
    ) from exc

from . import __version__
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

__all__ = ["ATTEMPT_BOUNDARIES", "BREAKER_STATES", "WAIT_BOUNDARIES", "OpenTelemetryMetrics"]

#: The bucket boundaries of the ``*_seconds`` histograms (those of ratelimit.prometheus).
WAIT_BOUNDARIES: tuple[float, ...] = WAIT_BUCKETS
#: The bucket boundaries of ``call_attempts``.
ATTEMPT_BOUNDARIES: tuple[float, ...] = ATTEMPT_BUCKETS

# OpenTelemetry's instrument name grammar, less the room the longest suffix takes.
_NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9_./-]{0,200}\Z")
_ADVISORY = "explicit_bucket_boundaries_advisory"


class OpenTelemetryMetrics:
    """Counters, histograms and a gauge fed by ratelimit's events.

    Call it with an event (it is an event subscriber); :meth:`install` subscribes it to
    every object's events, :meth:`close` ends it.

    Args:
        meter_provider: where the meter comes from (default: the global one,
            ``opentelemetry.metrics.get_meter_provider()``).
        meter: a meter to use instead (then ``meter_provider`` must be None).
        namespace: the prefix of every instrument name.

    Raises:
        TypeError: ``meter_provider`` is not a ``MeterProvider``, ``meter`` not a
            ``Meter``, or ``namespace`` not a str.
        ValueError: both ``meter_provider`` and ``meter`` are given, or ``namespace`` is
            not a valid instrument name prefix.

    ``ratelimit_breaker_state`` is observed at each collection: 0 closed, 1 half-open,
    2 open (:data:`BREAKER_STATES`), for each breaker that has changed state.
    """

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        *,
        meter: Meter | None = None,
        namespace: str = "ratelimit",
    ) -> None:
        if meter_provider is not None and not isinstance(meter_provider, MeterProvider):
            raise TypeError(f"meter_provider must be an OpenTelemetry MeterProvider or None, got {meter_provider!r}")
        if meter is not None and not isinstance(meter, Meter):
            raise TypeError(f"meter must be an OpenTelemetry Meter or None, got {meter!r}")
        if meter is not None and meter_provider is not None:
            raise ValueError("pass meter_provider or meter, not both")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {namespace!r}")
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"namespace must be a valid OpenTelemetry instrument name prefix, got {namespace!r}")
        if meter is None:
            provider = get_meter_provider() if meter_provider is None else meter_provider
            meter = provider.get_meter("ratelimit", __version__)
        self.meter = meter
        self.namespace = namespace
        self._lock = threading.Lock()
        self._states: dict[str, int] = {}
        self._unsubscribes: list[Callable[[], None]] = []
        self._closed = False
        ns = namespace
        # An older API has no advice; its histograms take the SDK's default buckets.
        advises = _ADVISORY in inspect.signature(meter.create_histogram).parameters

        def counter(name: str, unit: str, doc: str) -> Counter:
            return meter.create_counter(f"{ns}_{name}", unit=unit, description=doc)

        def histogram(name: str, unit: str, doc: str, boundaries: Sequence[float]) -> Histogram:
            advice: dict[str, Any] = {_ADVISORY: list(boundaries)} if advises else {}
            return meter.create_histogram(f"{ns}_{name}", unit=unit, description=doc, **advice)

        # The descriptions are the Prometheus module's help texts, word for word.
        self.grants = counter("grants", "{request}", "Requests a limiter granted.")
        self.denials = counter(
            "denials", "{request}", "Requests a limiter refused (try_acquire said no, acquire timed out)."
        )
        self.acquire_wait = histogram(
            "acquire_wait_seconds", "s", "Seconds each granted request waited.", WAIT_BOUNDARIES
        )
        self.shadow_grants = counter(
            "shadow_grants", "{request}", "Requests a limiter in shadow mode would have granted."
        )
        self.shadow_denials = counter(
            "shadow_denials", "{request}", "Requests a limiter in shadow mode would have refused."
        )
        self.shadow_wait = histogram(
            "shadow_wait_seconds",
            "s",
            "Seconds a limiter in shadow mode would have made each granted request wait.",
            WAIT_BOUNDARIES,
        )
        self.pauses = counter(
            "feedback_pauses", "{pause}", "Times a provider's response paused or lowered a limiter's budget."
        )
        self.pause_seconds = histogram(
            "feedback_pause_seconds", "s", "How long each restriction from feedback lasts.", WAIT_BOUNDARIES
        )
        self.throttles = counter(
            "feedback_throttles", "{response}", "Refusals fed back to a limiter that learns its rate (adaptive=)."
        )
        self.calls = counter("calls", "{call}", "Calls through a retry runner, by how they ended.")
        self.attempts = histogram(
            "call_attempts", "{attempt}", "Attempts each call through a retry runner made.", ATTEMPT_BOUNDARIES
        )
        self.limiter_wait = counter("limiter_wait_seconds", "s", "Seconds retried calls spent waiting for the limiter.")
        self.backoff = counter("backoff_seconds", "s", "Seconds retried calls spent asleep in backoff.")
        self.in_calls = counter("in_call_seconds", "s", "Seconds retried calls spent inside their attempts.")
        self.attempt_duration = histogram(
            "attempt_duration_seconds", "s", "Seconds each attempt took, from send to response.", WAIT_BOUNDARIES
        )
        self.responses = counter("responses", "{response}", "Attempts by the HTTP status they got.")
        self.retries = counter("retries", "{retry}", "Retries scheduled, by what failed and what set the delay.")
        self.give_ups = counter("give_ups", "{call}", "Calls a retry runner gave up on.")
        # The oldest API this supports has no synchronous gauge, and the state only
        # matters when it is read: observe the latest one at collection.
        self.breaker_state = meter.create_observable_gauge(
            f"{ns}_breaker_state",
            callbacks=[self._observe_states],
            description="Circuit breaker state: 0 closed, 1 half-open, 2 open.",
        )
        self.transitions = counter("breaker_transitions", "{transition}", "Circuit breaker state changes.")
        self.rejections = counter("breaker_rejections", "{call}", "Calls an open circuit failed fast.")

    def __repr__(self) -> str:
        return f"OpenTelemetryMetrics(namespace={self.namespace!r})"

    def install(self) -> Callable[[], None]:
        """Subscribe to every limiter's, retry runner's and breaker's events; returns
        the function that unsubscribes again (:meth:`close` does too)."""
        unsubscribe = subscribe(self)
        with self._lock:
            self._unsubscribes.append(unsubscribe)
        return unsubscribe

    def close(self) -> None:
        """Stop: unsubscribe what :meth:`install` subscribed, ignore events still sent
        by objects subscribed one by one, and observe no more breaker states.

        OpenTelemetry cannot remove an instrument: what was counted stays in the SDK.
        Closing twice does nothing more.
        """
        with self._lock:
            self._closed = True
            self._states.clear()
            unsubscribes, self._unsubscribes = self._unsubscribes, []
        for unsubscribe in unsubscribes:
            unsubscribe()

    def __call__(self, event: Event) -> None:
        """Count one event; events of kinds it does not know are ignored."""
        if self._closed:
            return
        name = getattr(event, "name", None) or ""
        at = {"name": name}
        if isinstance(event, Granted):
            if event.shadow:
                self.shadow_grants.add(1, at)
                self.shadow_wait.record(event.wait, at)
            else:
                self.grants.add(1, at)
                self.acquire_wait.record(event.wait, at)
        elif isinstance(event, Denied):
            (self.shadow_denials if event.shadow else self.denials).add(1, at)
        elif isinstance(event, Paused):
            self.pauses.add(1, at)
            self.pause_seconds.record(event.seconds, at)
        elif isinstance(event, Throttled):
            self.throttles.add(1, at)
        elif isinstance(event, AttemptFinished):
            self.responses.add(1, {"name": name, "status": attempt_status(event)})
            self.attempt_duration.record(event.duration, at)
        elif isinstance(event, RetryScheduled):
            self.retries.add(1, {"name": name, "reason": retry_reason(event), "source": event.source})
        elif isinstance(event, GaveUp):
            self.give_ups.add(1, {"name": name, "reason": event.reason})
        elif isinstance(event, CallFinished):
            self.calls.add(1, {"name": name, "outcome": event.outcome})
            self.attempts.record(event.attempts, at)
            self.limiter_wait.add(event.waited, at)
            self.backoff.add(event.backoff, at)
            self.in_calls.add(event.in_calls, at)
        elif isinstance(event, StateChanged):
            with self._lock:
                if not self._closed:
                    self._states[name] = BREAKER_STATES[event.state]
            self.transitions.add(1, {"name": name, "previous": event.previous, "state": event.state})
        elif isinstance(event, Rejected):
            self.rejections.add(1, at)

    def _observe_states(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            states = list(self._states.items())
        return [Observation(value, {"name": name}) for name, value in states]
