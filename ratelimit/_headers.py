"""Reading a provider's rate-limit headers into one shape: :class:`RateLimitInfo`.

Providers say the same four things in a dozen dialects. Understood, by header name
(case-insensitive):

- ``X-RateLimit-Limit / -Remaining / -Reset`` and the variants ``X-Rate-Limit-*``
  (Okta, Twitter), ``X-RateLimit-Used`` and ``-Resource`` (GitHub), ``-Reset-After``
  (Discord), float values (Reddit). ``Reset`` may be epoch seconds, epoch milliseconds
  or a delay in seconds: a value above 10^12 is read as epoch milliseconds, above 10^9
  as epoch seconds (no provider announces a delay of 31 years), anything else as a
  delay.
- The IETF drafts: ``RateLimit-Limit / -Remaining / -Reset`` with
  ``RateLimit-Policy: 10;w=1``; and the structured-field form
  ``RateLimit: "default";r=50;t=30`` with ``RateLimit-Policy: "default";q=100;w=60``.
- OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` with durations
  such as ``6m0s`` or ``20ms``; Anthropic's ``anthropic-ratelimit-{requests,tokens}-*``
  with RFC 3339 resets; Shopify's ``X-Shopify-Shop-Api-Call-Limit: 32/40``.
- ``Retry-After`` as delay-seconds or an HTTP-date (IMF-fixdate, RFC 850, asctime).

Garbage never raises: a malformed field comes back as ``None``, a wait is never
negative and never longer than ``cap`` seconds (an hour unless told otherwise). Where
a header is repeated, the most conservative value wins (the lowest limit and
remaining, the latest reset).

Headers come from servers, so from anyone: every parse here runs in linear time and
looks at a bounded amount of text, whatever it is sent. Only the first 1,024 header
pairs are looked at, 16 repeats of one name, 16 comma-separated pieces of one value
(or items of a structured-field list) and 16 parameters of one item; a value longer
than 1,024 characters is dropped whole, before it is stripped or split. Each kind of
field then has a cap of its own, checked before any regular expression or scanner
sees it: 32 characters for a number or a duration, 40 for an HTTP-date or an RFC 3339
time. Anything over a cap is garbage: ``None``, as any other malformed value.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._header_values import duration, http_date, number, parameters, pieces, rfc3339

__all__ = ["DEFAULT_CAP", "RateLimitInfo", "parse_rate_limit_headers"]

#: The longest wait a header may impose, in seconds, unless the caller says otherwise.
DEFAULT_CAP = 3600.0

_EPOCH_SECONDS = 1e9
_EPOCH_MILLISECONDS = 1e12

# -- bounds on what a server can make us read (STYLE.md, practice 13) -------------------
# Each figure is well above the longest value that can mean something, and small enough
# that a hostile response costs microseconds: everything past it is never looked at.

#: Header pairs looked at. http.client refuses a response with more than 100 headers and
#: h11 one whose header block passes 16 KiB: a response with more is not a real one.
_MAX_HEADERS = 1024
#: A longer header name is none of ours: the longest we read,
#: ``anthropic-ratelimit-requests-remaining``, has 38 characters.
_MAX_NAME = 64
#: Values kept for one header name: a provider repeats one at most a few times.
_MAX_REPEATS = 16
#: A longer value is dropped whole, before it is stripped or split. The longest that
#: can mean something is a structured-field list of a few policies
#: (``"default";q=100;w=60;pk=:...:``), each under a hundred characters.
_MAX_VALUE = 1024


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
    """

    limit: float | None = None
    remaining: float | None = None
    reset_after: float | None = None
    retry_after: float | None = None
    window: float | None = None
    tokens: RateLimitInfo | None = None


def parse_rate_limit_headers(headers: Any, now: float | None = None, *, cap: float = DEFAULT_CAP) -> RateLimitInfo:
    """Read the rate-limit headers of a response.

    Args:
        headers: a mapping (``dict``, ``httpx.Headers``, ``requests``' headers, an
            ``email.message.Message``) or an iterable of ``(name, value)`` pairs.
        now: the current time as epoch seconds, for absolute resets and HTTP-dates
            (default: ``time.time()``).
        cap: the longest wait, in seconds, any header may impose; longer values are
            cut to it.

    Returns:
        The :class:`RateLimitInfo`; every field the headers do not give, or give in a
        form that cannot be trusted, is ``None``.
    """
    if not (isinstance(cap, (int, float)) and cap > 0):
        raise ValueError(f"cap must be a number > 0, got {cap!r}")
    clock = time.time() if now is None else float(now)
    fields = _collect(headers)
    reader = _Reader(fields, clock, float(cap))
    return reader.read()


def _collect(headers: Any) -> dict[str, list[str]]:
    """Lower-cased names to every value given, whatever container they came in."""
    pairs: Iterable[Any]
    if hasattr(headers, "multi_items"):  # httpx keeps repeated headers apart there
        pairs = headers.multi_items()
    elif hasattr(headers, "items"):
        pairs = headers.items()
    elif headers is None:
        pairs = ()
    else:
        pairs = headers
    fields: dict[str, list[str]] = {}
    try:
        for pair in itertools.islice(pairs, _MAX_HEADERS):
            try:
                name, value = pair
            except (TypeError, ValueError):
                continue
            # Lengths first: nothing longer than a cap is decoded, stripped or lowered.
            if not isinstance(name, (str, bytes)) or len(name) > _MAX_NAME:
                continue
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            text = _text(value)
            if text is None:
                continue
            values = fields.setdefault(name.strip().lower(), [])
            if len(values) < _MAX_REPEATS:
                values.append(text)
    except TypeError:
        return {}
    return fields


def _text(value: Any) -> str | None:
    """A header's value as stripped text, or ``None`` if it is too long or no text."""
    if isinstance(value, (str, bytes)):
        if len(value) > _MAX_VALUE:
            return None
        return (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if isinstance(value, int) and not isinstance(value, bool):
        # An int past 128 bits (39 digits) is longer than any number read here, and
        # printing a huge one takes quadratic time (and raises past 4,300 digits).
        return str(value) if value.bit_length() <= 128 else None
    if isinstance(value, float):
        return str(value)
    return None


class _Reader:
    """One parse: the fields, the time, the cap, and the rules for each dialect."""

    def __init__(self, fields: dict[str, list[str]], now: float, cap: float) -> None:
        self.fields = fields
        self.now = now
        self.cap = cap

    # -- values -------------------------------------------------------------------

    def values(self, *names: str) -> list[str]:
        found: list[str] = []
        for name in names:
            for value in self.fields.get(name, []):
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

    def reset(self, *names: str) -> float | None:
        """The latest of the resets named, with the epoch / delay heuristic."""
        delays = []
        for text in self.values(*names):
            value = number(text)
            if value is None:
                continue
            if value > _EPOCH_MILLISECONDS:
                value = value / 1000.0 - self.now
            elif value > _EPOCH_SECONDS:
                value = value - self.now
            delays.append(value)
        return self.wait(max(delays)) if delays else None

    # -- dialects -----------------------------------------------------------------

    def read(self) -> RateLimitInfo:
        primary = self.x_ratelimit()
        for other in (self.ietf(), self.openai("requests"), self.anthropic("requests"), self.shopify()):
            primary = _merge(primary, other)
        tokens = _merge(self.openai("tokens"), self.anthropic("tokens"))
        return RateLimitInfo(
            limit=primary.limit,
            remaining=primary.remaining,
            reset_after=primary.reset_after,
            retry_after=self.retry_after(),
            window=primary.window,
            tokens=tokens if tokens != RateLimitInfo() else None,
        )

    def retry_after(self) -> float | None:
        waits = []
        for text in self.fields.get("retry-after", []):
            # An HTTP-date holds a comma itself, so try the whole value as one first;
            # otherwise it may be repeated values folded together ("10, 20").
            moment = http_date(text, self.now)
            if moment is not None:
                # A date already past means "now": no wait, but the header was valid.
                waits.append(max(0.0, moment - self.now))
                continue
            waits.extend(n for n in map(number, pieces(text, ",")) if n is not None)
        return self.wait(max(waits)) if waits else None

    def x_ratelimit(self) -> RateLimitInfo:
        def names(suffix: str) -> tuple[str, str]:
            return (f"x-ratelimit-{suffix}", f"x-rate-limit-{suffix}")

        limit = self.least(*names("limit"))
        remaining = self.least(*names("remaining"))
        used = self.least(*names("used"))
        if remaining is None and used is not None and limit is not None:
            remaining = max(0.0, limit - used)  # GitHub gives Used alongside
        reset = self.wait(self.least(*names("reset-after")))  # Discord: a precise delay
        if reset is None:
            reset = self.reset(*names("reset"))
        return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset)

    def ietf(self) -> RateLimitInfo:
        limit = self.least("ratelimit-limit")
        remaining = self.least("ratelimit-remaining")
        reset = self.wait(self.least("ratelimit-reset"))
        window = None
        policies = [item for text in self.fields.get("ratelimit-policy", []) for item in parameters(text)]
        for name, params in policies:
            # Draft 6/7 writes the quota first ("10;w=1"); the structured form as q=.
            quota = number(name) if name is not None else None
            if quota is None:
                quota = number(params.get("q", ""))
            if quota is None:
                continue
            # With several policies, the one whose quota is the announced limit.
            if limit is None or quota == limit:
                limit = quota
                window = number(params.get("w", ""))
                break
        for text in self.fields.get("ratelimit", []):
            for _, params in parameters(text):
                remaining = _low(remaining, number(params.get("r", params.get("remaining", ""))))
                reset = _high(reset, self.wait(number(params.get("t", params.get("reset", "")))))
                limit = _low(limit, number(params.get("limit", "")))
        return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, window=window)

    def openai(self, kind: str) -> RateLimitInfo:
        resets = [d for d in map(duration, self.values(f"x-ratelimit-reset-{kind}")) if d is not None]
        return RateLimitInfo(
            limit=self.least(f"x-ratelimit-limit-{kind}"),
            remaining=self.least(f"x-ratelimit-remaining-{kind}"),
            reset_after=self.wait(max(resets)) if resets else None,
        )

    def anthropic(self, kind: str) -> RateLimitInfo:
        moments = [m for m in map(rfc3339, self.values(f"anthropic-ratelimit-{kind}-reset")) if m is not None]
        return RateLimitInfo(
            limit=self.least(f"anthropic-ratelimit-{kind}-limit"),
            remaining=self.least(f"anthropic-ratelimit-{kind}-remaining"),
            reset_after=self.wait(max(moments) - self.now) if moments else None,
        )

    def shopify(self) -> RateLimitInfo:
        for text in self.fields.get("x-shopify-shop-api-call-limit", []):
            used, _, limit = text.partition("/")
            used_n, limit_n = number(used), number(limit)
            if used_n is not None and limit_n is not None and limit_n > 0:
                return RateLimitInfo(limit=limit_n, remaining=max(0.0, limit_n - used_n))
        return RateLimitInfo()


def _low(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else min(x, y)


def _high(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else max(x, y)


def _merge(a: RateLimitInfo, b: RateLimitInfo) -> RateLimitInfo:
    """Two readings of one response: the most conservative of each field."""
    low, high = _low, _high
    return RateLimitInfo(
        limit=low(a.limit, b.limit),
        remaining=low(a.remaining, b.remaining),
        reset_after=high(a.reset_after, b.reset_after),
        retry_after=high(a.retry_after, b.retry_after),
        window=a.window if a.window is not None else b.window,
    )
