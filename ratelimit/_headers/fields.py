"""What a response's rate-limit headers are read into, and how one field is read.

:class:`RateLimitInfo` is the shape every dialect is read into. :class:`Fields` is one
parse's headers, time and cap, with the readings every dialect shares (the lowest of
several numbers, a reset in any form providers send, a wait made safe).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from .values import http_date, number, pieces, rfc3339

__all__ = ["MAX_REPEATS", "Fields", "RateLimitInfo", "from_now"]

#: Values kept for one header name: a provider repeats one at most a few times. Headers
#: read by prefix are bounded by it in all, whatever their names.
MAX_REPEATS = 16

_EPOCH_SECONDS = 1e9
_EPOCH_MILLISECONDS = 1e12


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """What a response said about the rate limit; ``None`` where it said nothing usable.

    Attributes:
        limit: requests (or tokens) allowed per window.
        remaining: how many are left in the current window.
        reset_after: seconds until the window resets (the budget is full again).
        retry_after: seconds the provider asked us to wait (``Retry-After``).
        window: the policy's window in seconds, when a header names it.
        tokens: for APIs that also limit tokens (OpenAI, Anthropic), the same fields
            for the token budget; the main fields then describe requests.
        gradual: the budget comes back evenly over ``reset_after`` (a token bucket, as
            OpenAI and Anthropic document theirs), rather than whole at the reset: the
            reset is when it is *full* again, and with ``limit`` known one more comes
            back every ``reset_after / (limit - remaining)`` seconds. Only set when the
            reset was not cut to the cap (a cut reset says nothing of the pace).
        refills: the reset is when *more* comes back, not when the budget is whole,
            and it comes back at ``limit`` per ``window`` (the IETF structured fields'
            ``t``, with the ``q`` and ``w`` of their ``RateLimit-Policy``).
    """

    limit: float | None = None
    remaining: float | None = None
    reset_after: float | None = None
    retry_after: float | None = None
    window: float | None = None
    tokens: RateLimitInfo | None = None
    gradual: bool = False
    refills: bool = False


class Fields:
    """One parse: the headers by lower-cased name, the time, and the cap on any wait."""

    __slots__ = ("by_name", "cap", "now")

    def __init__(self, by_name: dict[str, list[str]], now: float, cap: float) -> None:
        self.by_name = by_name
        self.now = now
        self.cap = cap

    def texts(self, name: str) -> list[str]:
        """Every value of one header, as sent (each already stripped and bounded)."""
        return self.by_name.get(name, [])

    def prefixed(self, prefix: str) -> Iterator[str]:
        """The values of every header whose name starts with ``prefix``: at most
        ``MAX_REPEATS`` in all, since no one name's bound holds them."""
        found = (text for name, texts in self.by_name.items() if name.startswith(prefix) for text in texts)
        return itertools.islice(found, MAX_REPEATS)

    def values(self, *names: str) -> list[str]:
        found: list[str] = []
        for name in names:
            for value in self.texts(name):
                # A repeated header may arrive folded into one, comma-separated.
                found.extend(piece for piece in pieces(value, ",") if piece.strip())
        return found

    def least(self, *names: str) -> float | None:
        numbers = [n for n in map(number, self.values(*names)) if n is not None]
        return min(numbers) if numbers else None

    def wait(self, seconds: float | None) -> float | None:
        """A delay made safe: ``None`` if absent or past, at most ``cap``."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0:
            return None
        return min(seconds, self.cap)

    def numeric_reset(self, value: float | None) -> float | None:
        """A numeric reset (see ``from_now``) as a safe wait."""
        return None if value is None else self.wait(from_now(value, self.now))

    def reset(self, *names: str) -> float | None:
        """The latest of the resets named: a number (see ``from_now``), an ISO 8601
        time with its offset (Jira Cloud) or an HTTP-date (GitLab). One already past is
        no reset."""
        delays = []
        for name in names:
            for text in self.texts(name):
                # An HTTP-date holds a comma itself: the whole value first, then its
                # pieces (a repeated header folded into one).
                moment = http_date(text, self.now)
                if moment is not None:
                    delays.append(moment - self.now)
                    continue
                for piece in pieces(text, ","):
                    value = number(piece)
                    if value is not None:
                        delays.append(from_now(value, self.now))
                    elif (moment := rfc3339(piece)) is not None:
                        delays.append(moment - self.now)
        return self.wait(max(delays)) if delays else None

    def bucket(self, limit: float | None, remaining: float | None, seconds: float | None) -> RateLimitInfo:
        """A bucket refilled evenly, full again in ``seconds``: ``gradual`` unless the
        reset is cut to the cap, which would overstate the pace of its refill."""
        reset = self.wait(seconds)
        gradual = reset is not None and seconds is not None and seconds <= self.cap
        return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, gradual=gradual)


def from_now(value: float, now: float) -> float:
    """A numeric reset as seconds from ``now``: epoch milliseconds above 10^12, epoch
    seconds above 10^9 (no provider announces a delay of 31 years, while GitHub and
    GitLab send UNIX times), else a delay."""
    if value > _EPOCH_MILLISECONDS:
        return value / 1000.0 - now
    if value > _EPOCH_SECONDS:
        return value - now
    return value
