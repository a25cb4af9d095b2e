"""Reading a provider's rate-limit headers into one shape: :class:`RateLimitInfo`.

Providers say the same four things in a dozen dialects, each read by one function of
``dialects.py`` (its docstring names the provider's documentation and holds a
sample): ``X-RateLimit-*`` and ``X-Rate-Limit-*`` (GitHub, Discord, Okta, Twitter,
Reddit, Jira Cloud), the IETF drafts' ``RateLimit`` headers (and GitLab's use of them),
OpenAI's and Groq's, Anthropic's, Shopify's, HubSpot's, Salesforce's, Zendesk's, and
``Retry-After``. Header names are case-insensitive. This module collects a response's
headers, within bounds, and walks the registry, ``DIALECTS``, in its order.

Every numeric reset (``X-RateLimit-Reset``, ``RateLimit-Reset``, a ``RateLimit``
item's ``t``, Zendesk's ``resets``) may be epoch seconds, epoch milliseconds or a
delay in seconds: a value above 10^12 is read as epoch milliseconds, above 10^9 as
epoch seconds (no provider announces a delay of 31 years), anything else as a delay.
Discord's ``-Reset-After`` and ``Retry-After`` are delays by definition.

Garbage never raises: a malformed field comes back as ``None``, a wait is never
negative and never longer than ``cap`` seconds (an hour unless told otherwise). Where
a header is repeated, the most conservative value wins (the lowest limit and
remaining, the latest reset).

One response may report several budgets: the items of a ``RateLimit`` list, HubSpot's
interval and second, Salesforce's org and app, Zendesk's account and endpoints, or
one budget in two dialects. Each reading that has a remaining and a time (a reset, or
a window) is a budget, and the result is the *binding* one, whole: its limit,
remaining, reset and window together, never a field of one budget beside a field of
another. Binding means it runs out first:

1. a spent budget (remaining 0, its reset not due now) binds, since nothing may go
   until it refills; of several, the one with the latest reset;
2. otherwise the lowest pace binds: ``remaining / seconds``, the most one may send per
   second and still have that budget last until it refills, with ``seconds`` the
   reset, or the window when no reset is given (a window's budget refills within one
   window, so the pace is never overstated). A tie goes to the longer time;
3. a budget refilling now (a reset of 0) binds only when no other does.

So ``"default";r=50;t=30, "daily";r=1000;t=3600`` reads as the daily policy: 1,000
over an hour is 0.28 a second against the default's 1.7, and at the default's pace
the day's budget would be gone in ten minutes. A reading with no remaining or no time
cannot be paced against the others; it is merged into the binding budget field by
field, most conservatively (a lower remaining still caps what may go), and a limit
always keeps its own window.

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
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .budgets import binding
from .dialects import DIALECTS
from .fields import MAX_REPEATS, Fields, RateLimitInfo

__all__ = ["DEFAULT_CAP", "RateLimitInfo", "parse_rate_limit_headers"]

#: The longest wait a header may impose, in seconds, unless the caller says otherwise.
DEFAULT_CAP = 3600.0

# -- bounds on what a server can make us read (STYLE.md, practice 13) -------------------
# Each figure is well above the longest value that can mean something, and small enough
# that a hostile response costs microseconds: everything past it is never looked at.

#: Header pairs looked at. http.client refuses a response with more than 100 headers and
#: h11 one whose header block passes 16 KiB: a response with more is not a real one.
_MAX_HEADERS = 1024
#: A longer header name is none of ours: the longest we read by name,
#: ``x-hubspot-ratelimit-interval-milliseconds``, has 41 characters, and Zendesk's
#: longest documented endpoint, ``zendesk-ratelimit-tickets-index-deep-pagination``, 47.
_MAX_NAME = 64
#: Values kept for one header name (the dialects bound what they read by prefix with it).
_MAX_REPEATS = MAX_REPEATS
#: A longer value is dropped whole, before it is stripped or split. The longest that
#: can mean something is a structured-field list of a few policies
#: (``"default";q=100;w=60;pk=:...:``), each under a hundred characters.
_MAX_VALUE = 1024


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
    fields = Fields(_collect(headers), clock, float(cap))
    readings = [dialect(fields) for dialect in DIALECTS]
    # The token budgets (OpenAI's, Anthropic's) are bound among themselves, apart from
    # the requests: a response's budgets of requests and of tokens are both kept.
    primary = binding(replace(reading, tokens=None) for reading in readings)
    tokens = binding(reading.tokens for reading in readings if reading.tokens is not None)
    return replace(primary, tokens=tokens if tokens != RateLimitInfo() else None)


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
