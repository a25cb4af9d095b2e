"""The events limiters, retry runners and circuit breakers emit.

Subscribe to one object's with ``obj.subscribe(callback)``, or to every object's with
:func:`ratelimit.subscribe`; each callback receives one of these frozen values::

    def on_event(event: ratelimit.events.Event) -> None:
        if isinstance(event, ratelimit.events.StateChanged) and event.state == "open":
            page_someone(event.name)
"""

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

__all__ = [
    "AttemptFinished",
    "CallFinished",
    "Denied",
    "Event",
    "GaveUp",
    "Granted",
    "Paused",
    "Rejected",
    "RetryScheduled",
    "StateChanged",
    "Throttled",
    "subscribe",
]
