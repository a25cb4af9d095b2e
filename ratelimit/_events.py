"""Events: what limiters, retry runners and breakers tell the outside world.

Each event is a small frozen value. An object's ``subscribe(callback)`` hears that
object's events; :func:`subscribe` hears every object's. Every event is also logged
on the ``ratelimit`` logger at a level that fits it (an attempt at DEBUG, a retry or a
pause at INFO, giving up or a circuit opening at WARNING), so nothing is needed to see
them in ordinary logs; a limiter's grants and denials, one per request, are left to
subscribers.

A callback runs in the thread (or task) that caused the event, after the decision and
outside every lock, so it may be slow without slowing other workers; it should not
raise, and if it does the error is logged and the call it observed goes on unharmed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
    "AttemptFinished",
    "CallFinished",
    "Denied",
    "Emitter",
    "Event",
    "GaveUp",
    "Granted",
    "Paused",
    "Rejected",
    "RetryScheduled",
    "StateChanged",
    "subscribe",
]

logger = logging.getLogger("ratelimit")

Verdict = Literal["ok", "transient", "permanent"]
BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class Granted:
    """A limiter granted ``tokens`` after ``wait`` seconds.

    ``shadow``: the limiter is in shadow mode, and ``wait`` is what the caller would
    have waited (it went at once).
    """

    name: str | None
    tokens: float
    wait: float
    shadow: bool = False


@dataclass(frozen=True, slots=True)
class Denied:
    """A limiter refused ``tokens``: ``try_acquire`` said no, or ``acquire`` timed out.

    ``retry_after`` is the wait the grant would have needed. ``shadow``: the limiter is
    in shadow mode, and the caller went all the same.
    """

    name: str | None
    tokens: float
    retry_after: float
    shadow: bool = False


@dataclass(frozen=True, slots=True)
class Paused:
    """Feedback from the provider lowered a limiter's budget.

    ``seconds`` is how long the restriction lasts; ``remaining`` how many tokens it
    still allows in that time (0: a pause).
    """

    name: str | None
    status: int | None
    remaining: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Throttled:
    """A provider refused a request of a limiter that learns its rate (``adaptive=``)
    and it was fed back. ``status`` is the response's. The store cuts the shared rate
    once per congestion event, so several of these may stand for one cut."""

    name: str | None
    status: int | None


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """A retry runner's call returned or raised. ``status`` is the response's HTTP status
    when there was one; ``duration`` is the time spent inside the call."""

    name: str | None
    attempt: int
    status: int | None
    error: BaseException | None
    duration: float
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """A retry runner will try again after ``delay`` seconds.

    ``reason`` says why in words, for logs; the same as fields, for metrics: the failed
    attempt's ``status`` or ``error`` (the exception's class name), and the ``source``
    of the delay, ``"backoff"`` or ``"retry-after"`` (the provider's).
    """

    name: str | None
    attempt: int
    delay: float
    reason: str
    status: int | None = None
    error: str | None = None
    source: Literal["backoff", "retry-after"] = "backoff"


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A retry runner gave up (``reason``: ``"attempts"`` or ``"deadline"``)."""

    name: str | None
    reason: Literal["attempts", "deadline"]
    attempts: int
    elapsed: float


@dataclass(frozen=True, slots=True)
class CallFinished:
    """One call through a retry runner is over, however it ended.

    ``outcome`` is ``"ok"`` (a result the classifier accepted), ``"permanent"`` (a
    failure not worth retrying, passed to the caller), ``"gave_up"`` or ``"rejected"``
    (an open circuit). The seconds split the call's life: ``waited`` for the limiter,
    ``backoff`` asleep between attempts, ``in_calls`` inside the calls themselves.
    """

    name: str | None
    outcome: Literal["ok", "permanent", "gave_up", "rejected"]
    attempts: int
    waited: float
    backoff: float
    in_calls: float


@dataclass(frozen=True, slots=True)
class StateChanged:
    """A circuit breaker went from ``previous`` to ``state``."""

    name: str | None
    previous: BreakerState
    state: BreakerState


@dataclass(frozen=True, slots=True)
class Rejected:
    """A circuit breaker failed a call fast; a probe may go in ``retry_after`` seconds."""

    name: str | None
    retry_after: float


Event: TypeAlias = (
    Granted
    | Denied
    | Paused
    | Throttled
    | AttemptFinished
    | RetryScheduled
    | GaveUp
    | CallFinished
    | StateChanged
    | Rejected
)
Callback: TypeAlias = Callable[[Event], object]


def _level(event: Event) -> int:
    """The log level of an event; 0 for the per-call ones that are never logged (a
    limiter's grants and denials: one per request is too many lines, and testing the
    logger would cost the hot path more than the decision itself)."""
    if isinstance(event, GaveUp):
        return logging.WARNING
    if isinstance(event, StateChanged):
        return logging.WARNING if event.state == "open" else logging.INFO
    if isinstance(event, (Paused, Throttled, RetryScheduled)):
        return logging.INFO
    if isinstance(event, (Granted, Denied)):
        return 0
    return logging.DEBUG


class Subscribers:
    """A list of callbacks that threads can iterate while others change it.

    ``callbacks`` is a tuple that is replaced, never mutated, so an emit in flight
    keeps the list it saw, and a hot path can test it without a lock.
    """

    __slots__ = ("_lock", "callbacks")

    def __init__(self) -> None:
        self.callbacks: tuple[Callback, ...] = ()
        self._lock = threading.Lock()

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        if not callable(callback):
            raise TypeError(f"callback must be callable with one event, got {callback!r}")
        with self._lock:
            self.callbacks = (*self.callbacks, callback)

        def unsubscribe() -> None:
            with self._lock:
                kept = list(self.callbacks)
                if callback in kept:
                    kept.remove(callback)
                self.callbacks = tuple(kept)

        return unsubscribe


#: Everyone's subscribers: they hear every object's events.
EVERYONE = Subscribers()


def subscribe(callback: Callback) -> Callable[[], None]:
    """Call ``callback(event)`` for every event of every limiter, retry runner and breaker.

    Returns a function that unsubscribes it again.
    """
    return EVERYONE.subscribe(callback)


class Emitter(Subscribers):
    """One object's subscribers; :meth:`emit` also reaches everyone's and the log."""

    __slots__ = ()

    def hears(self, level: int) -> bool:
        """Would an event logged at ``level`` reach a subscriber or the log?"""
        return bool(self.callbacks or EVERYONE.callbacks) or logger.isEnabledFor(level)

    def emit(self, event: Event) -> None:
        level = _level(event)
        if level and logger.isEnabledFor(level):
            logger.log(level, "%s", event)
        for callback in (*self.callbacks, *EVERYONE.callbacks):
            try:
                callback(event)
            except Exception:
                logger.exception("an event callback failed on %r", event)


@dataclass(slots=True)
class Attempt:
    """One call made by a retry runner (treat as read-only)."""

    #: 1 for the first call.
    number: int
    #: Seconds asleep in backoff just before this attempt.
    backoff: float
    #: Seconds the limiter made this attempt wait.
    waited: float
    #: The response's HTTP status, if the call returned (or raised) a response.
    status: int | None
    #: What the call raised, if it raised.
    error: BaseException | None
    #: Seconds spent inside the call.
    duration: float
    #: The classifier's verdict.
    verdict: Verdict

    @property
    def outcome(self) -> str:
        """``"status 503"``, ``"ConnectionError('refused')"`` or ``"returned"``: for logs."""
        if self.error is not None:
            return repr(self.error)
        return f"status {self.status}" if self.status is not None else "returned"
