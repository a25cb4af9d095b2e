"""The exceptions ratelimit raises.

Everything the library raises on its own account derives from one root, so a caller
can catch "anything the limiter decided" in one place::

    RateLimitError
     ├── AcquireTimeout        (also a TimeoutError)
     └── BackendUnavailable    (the shared store could not be reached; chains the cause)

Bad arguments are not among them: they raise the built-in ``ValueError`` or
``TypeError``, naming the argument and the value, at the moment they are passed.
"""

from __future__ import annotations

__all__ = ["AcquireTimeout", "BackendUnavailable", "RateLimitError"]


class RateLimitError(Exception):
    """Root of every exception that ratelimit raises on its own account."""


class AcquireTimeout(RateLimitError, TimeoutError):
    """The grant could not happen within the caller's ``timeout``.

    Raised before any sleeping and before anything is consumed: the budget is exactly
    as it was. ``retry_after`` says how long the grant would have needed, in seconds,
    so a caller can decide whether to come back later or give up.
    """

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message or f"the grant would need a wait of {retry_after:.6g} s, more than the timeout allows")


class BackendUnavailable(RateLimitError):
    """The store holding the shared budget could not be reached.

    The underlying error (a redis-py ``ConnectionError``, ``TimeoutError``, ...) is
    chained as ``__cause__``.
    """
