"""What the HTTP client integrations share (internal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .retry import Retry

if TYPE_CHECKING:
    from .._limiting.front import Acquirer
    from .breaker import CircuitBreaker

__all__ = ["runner"]


def runner(owner: str, limiter: Acquirer | None, retry: Retry | None, breaker: CircuitBreaker | None) -> Retry:
    """The retry runner an integration sends through: ``retry``, or a default one
    around ``limiter`` and ``breaker`` (never both: one would be silently ignored)."""
    if retry is None:
        return Retry(limiter=limiter, breaker=breaker)
    if not isinstance(retry, Retry):
        raise TypeError(f"retry must be a ratelimit.Retry or None, got {retry!r}")
    beside = [f"{name}={value!r}" for name, value in (("limiter", limiter), ("breaker", breaker)) if value is not None]
    if beside:
        raise ValueError(
            f"{owner}: pass the limiter and breaker to the Retry, not beside it: with retry= the retry's own "
            f"are used, so {' and '.join(beside)} would be ignored"
        )
    return retry
