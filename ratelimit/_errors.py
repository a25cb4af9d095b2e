"""The exceptions ratelimit raises.

Everything the library raises on its own account derives from one root, so a caller
can catch "anything the limiter decided" in one place::

    RateLimitError
     ├── AcquireTimeout        (also a TimeoutError)
     ├── BackendUnavailable    (the shared store could not be reached; chains the cause)
     ├── CircuitOpen           (a circuit breaker refused the call without making it)
     └── RetryError            (a retry runner gave up; carries every attempt)

Bad arguments are not among them: they raise the built-in ``ValueError`` or
``TypeError``, naming the argument and the value, at the moment they are passed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ._events import Attempt

__all__ = ["AcquireTimeout", "BackendUnavailable", "CircuitOpen", "RateLimitError", "RetryError"]


class RateLimitError(Exception):
    """Root of every exception that ratelimit raises on its own account."""


class AcquireTimeout(RateLimitError, TimeoutError):
    """The grant could not happen within the caller's ``timeout``.

    Raised before any sleeping and before anything is consumed: the budget is exactly
    as it was. ``retry_after`` says how long the grant would have needed, in seconds,
    so a caller can decide whether to come back later or give up.

    From a :class:`~ratelimit.Composite`, ``failing_limit`` is the index (in the
    list the composite was built with) of the member that refused: the one whose own
    wait is the longest. ``None`` from any other limiter.
    """

    def __init__(self, retry_after: float, message: str | None = None, *, failing_limit: int | None = None) -> None:
        self.retry_after = retry_after
        self.failing_limit = failing_limit
        if message is None and retry_after == math.inf:
            # The store's answer for a request the limit in force can never hold.
            message = (
                "the request can never be granted: it is larger than the limit in force holds (its burst as "
                "changed at run time, or less what another process of the budget keeps back for its lease= or guard=)"
            )
        super().__init__(message or f"the grant would need a wait of {retry_after:.6g} s, more than the timeout allows")


class BackendUnavailable(RateLimitError):
    """The store holding the shared budget could not be reached, or not used.

    Its message names the store (a URL, its password shown as ``***``) and the reason
    on one line: ``the Redis store at redis://127.0.0.1:6999/0 is unavailable:
    connection refused: nothing listens there``. The underlying error (a redis-py
    ``ConnectionError`` or ``TimeoutError``, a ``sqlite3`` error on a file locked past
    its ``busy_timeout``, ...) is chained as ``__cause__``.
    """


class CircuitOpen(RateLimitError):
    """A circuit breaker is open (or its half-open probes are all taken): the call was
    not made.

    ``retry_after`` is how long until the breaker lets a probe through, in seconds;
    ``name`` is the breaker's.
    """

    def __init__(self, name: str | None, retry_after: float) -> None:
        self.name = name
        self.retry_after = retry_after
        label = f"circuit {name!r}" if name else "the circuit"
        super().__init__(f"{label} is open: calls fail fast for another {retry_after:.3g} s")


class RetryError(RateLimitError):
    """A retry runner gave up on a call that kept failing transiently.

    Everything a log line or a dead-letter store needs is here:

    * ``attempts``: one :class:`~ratelimit.Attempt` per call made, in order, with its
      status or exception, the wait before it, and how long it took;
    * ``reason``: ``"attempts"`` (``max_attempts`` used up) or ``"deadline"`` (the next
      wait, for backoff or for the limiter, would have crossed the deadline);
    * ``elapsed``: seconds from the first attempt's start to giving up;
    * ``result``: the last call's return value (an HTTP response, say), if it returned.

    The last exception, if the last attempt raised, is chained as ``__cause__``.
    """

    def __init__(
        self,
        reason: Literal["attempts", "deadline"],
        attempts: Sequence[Attempt],
        elapsed: float,
        result: object = None,
    ) -> None:
        self.reason = reason
        self.attempts = tuple(attempts)
        self.elapsed = elapsed
        self.result = result
        last = self.attempts[-1].outcome if self.attempts else "no attempt"
        why = "out of attempts" if reason == "attempts" else "the deadline would have passed"
        super().__init__(f"gave up after {len(self.attempts)} attempt(s) in {elapsed:.3g} s ({why}); last: {last}")
