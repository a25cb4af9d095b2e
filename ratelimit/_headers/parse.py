"""Reading a response's rate-limit headers into one :class:`RateLimitInfo`.

This module collects the headers within bounds (names lower-cased, so case-insensitive)
and reads them with every dialect of ``DIALECTS``, in order; ``budgets.binding`` keeps
the budget that runs out first. Garbage never raises: a malformed or over-long field is
``None``, a wait is never negative and never longer than ``cap``; of a repeated header,
the most conservative value wins.

Headers come from anyone, so every parse is linear and reads bounded text: the bounds
below for the headers, those of ``values.py`` for one value, each checked before any
regular expression or scanner sees the text.
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
# Each is well above the longest value that can mean something; past it nothing is read.

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
        form that cannot be trusted, is ``None``. Of several budgets in one response,
        the one that runs out first, whole; token budgets apart, in ``tokens``.

    Raises:
        ValueError: ``cap`` is not a number above 0.
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
