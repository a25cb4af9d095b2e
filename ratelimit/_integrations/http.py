"""What the HTTP client integrations share: the httpx transports, the requests adapter
and the aiohttp middleware each hold one :class:`Policy` and add only their I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._limiting.concurrency import ConcurrencyLimit
from .._resilience.retry import Retry

if TYPE_CHECKING:
    from .._limiting.front import Acquirer
    from .._resilience.breaker import CircuitBreaker

__all__ = ["Policy", "runner"]


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


class Policy:
    """An integration's decisions, none of which needs I/O: the runner each request
    goes through, and the slots its attempts hold.

    Args:
        owner: the integration's class name, for error messages.
        limiter, retry, breaker: as :func:`runner` takes them.
        concurrency: the :class:`~ratelimit.ConcurrencyLimit` each attempt holds a
            slot of, or ``None``.
    """

    __slots__ = ("concurrency", "once", "retry")

    def __init__(
        self,
        owner: str,
        limiter: Acquirer | None,
        retry: Retry | None,
        breaker: CircuitBreaker | None,
        concurrency: ConcurrencyLimit | None,
    ) -> None:
        if concurrency is not None and not isinstance(concurrency, ConcurrencyLimit):
            raise TypeError(f"concurrency must be a ratelimit.ConcurrencyLimit or None, got {concurrency!r}")
        self.retry = runner(owner, limiter, retry, breaker)
        # A body that cannot be sent twice still goes through the limiter, the
        # feedback and the breaker, and counts among the runner's calls.
        self.once = self.retry.once()
        self.concurrency = concurrency

    def runner(self, replayable: bool) -> Retry:
        """The runner for a request: one attempt only if its body cannot be sent again."""
        return self.retry if replayable else self.once

    def passes(self, response: object) -> bool:
        """Whether ``response`` is handed on untouched, still streaming.

        Any other is retried or handed back as a failure: its body (usually small) is
        read and its connection freed at once, for the next attempt.
        """
        return self.retry.classify(response, None) == "ok"
