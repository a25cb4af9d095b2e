"""What the LLM transports decide, with no I/O: how a call weighs on the limiter,
what of a response's headers it is fed, and what settles the call. ``ratelimit.llm``'s
transports each hold one :class:`Budget` and add only the I/O.

The limiter counts tokens, or is a :class:`~ratelimit.Composite` whose first limit
counts requests and the others tokens: a call then acquires ``[1, estimate, ...]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .._headers.parse import RateLimitInfo, parse_rate_limit_headers
from .._limiting.composite import Composite
from .._limiting.front import Acquirer
from .llm_costs import BodyUsage, Estimator, StreamUsage

__all__ = ["Budget", "Passage"]

#: What a limiter is asked for: one number, or one per member of a Composite.
Weights = float | Sequence[float]


class Budget:
    """The limiter an LLM transport acquires from and how it weighs a call.

    Args:
        limiter: a limiter of tokens, or a ``Composite`` whose first limit counts
            requests and the others tokens.
        estimator: reads a request's estimate from its body.

    Raises:
        TypeError: ``limiter`` or ``estimator`` of the wrong type.
        ValueError: a ``Composite`` of one limit (requests only: use
            ``ratelimit.httpx``'s transports).
    """

    __slots__ = ("_members", "estimator", "limiter")

    def __init__(self, limiter: Acquirer, estimator: Estimator) -> None:
        if not isinstance(limiter, Acquirer):
            raise TypeError(
                f"limiter must be a limiter of tokens or a Composite (requests, then tokens), got {limiter!r}"
            )
        if not isinstance(estimator, Estimator):
            raise TypeError(f"estimator must be an Estimator, got {estimator!r}")
        members = len(limiter) if isinstance(limiter, Composite) else 0
        if members == 1:
            raise ValueError(
                f"limiter {limiter!r} is a Composite of one limit: its first limit counts requests and the "
                f"others tokens, so give it a tokens limit too (or pass the tokens limiter alone)"
            )
        self.limiter = limiter
        self.estimator = estimator
        self._members = members

    def weights(self, tokens: float) -> Weights:
        """What the limiter is asked for a call of ``tokens``."""
        if not self._members:
            return tokens
        return (1.0, *((tokens,) * (self._members - 1)))

    def passage(self, content: bytes) -> Passage:
        """A call whose request body is ``content``: its estimate, to acquire."""
        return Passage(self, self.estimator(content))

    def feeds(self, headers: Any, status: int) -> RateLimitInfo:
        """What of a response's headers the limiter is fed: all for a Composite, the
        token budget and ``Retry-After`` for a limiter of tokens."""
        info = parse_rate_limit_headers(headers)
        if self._members:
            return info
        return replace(info.tokens or RateLimitInfo(), retry_after=info.retry_after)

    def __repr__(self) -> str:
        return f"Budget(limiter={self.limiter!r}, estimator={self.estimator!r})"


class Passage:
    """One call through the budget: acquires :attr:`asked`, then settles once.

    It settles at once (:meth:`refused`, :meth:`failed`) or when its watched body is
    closed (:meth:`closed`). Each returns the ``(asked, actual)`` weights to settle
    with, or ``None`` if the call was settled already.
    """

    __slots__ = ("_ended", "_usage", "asked", "budget", "estimate", "settled")

    def __init__(self, budget: Budget, estimate: float) -> None:
        self.budget = budget
        self.estimate = estimate
        self.asked = budget.weights(estimate)
        self.settled = False
        self._usage: BodyUsage | StreamUsage | None = None
        self._ended = False

    def _settle(self, tokens: float) -> tuple[Weights, Weights] | None:
        if self.settled:
            return None
        self.settled = True
        return self.asked, self.budget.weights(tokens)

    def refused(self) -> tuple[Weights, Weights] | None:
        """The provider answered without running the model (a 429, a 400, a 5xx):
        the request counts, its tokens are given back."""
        return self._settle(0.0)

    def failed(self, sent: bool) -> tuple[Weights, Weights] | None:
        """No response: a request never ``sent`` (no connection) uses no tokens; one
        that may have reached the provider (a read timeout, a cancellation) keeps its
        estimate, settled to itself (which frees the limiter's memory of the grant)."""
        return self._settle(self.estimate if sent else 0.0)

    def watch(self, headers: Mapping[str, str]) -> None:
        """A response with the model's answer: read its usage from the body as it
        passes (an event stream line by line, else a JSON body whole)."""
        kind = headers.get("content-type", "")
        self._usage = StreamUsage() if kind.startswith("text/event-stream") else BodyUsage()

    def feed(self, chunk: bytes) -> None:
        """A chunk of the body on its way to the client."""
        if self._usage is not None:
            self._usage.feed(chunk)

    def ended(self) -> None:
        """The body was read to its end."""
        if self._usage is not None and not self._ended:
            self._ended = True
            self._usage.end()

    def closed(self) -> tuple[Weights, Weights] | None:
        """The body is closed: settle with its usage if it reported its last one (a
        JSON body read to its end, a stream past its last usage); else (no usage,
        a stream closed before the end of its answer) the estimate stands."""
        usage = self._usage
        tokens = usage.tokens() if usage is not None and usage.final else None
        return self._settle(self.estimate if tokens is None else tokens)
