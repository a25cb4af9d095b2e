"""The grammar of rate-limit header values: numbers, durations, dates, lists.

Everything here reads one value a server sent, so from anyone: each function runs in
linear time and checks its kind's cap before any regular expression or scanner sees
the text. Anything over a cap, or malformed, comes back as ``None``; nothing raises.
What the values *mean* (which header, which provider) is the business of ``dialects.py``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import TypeAlias

__all__ = [
    "MAX_DURATION",
    "MAX_HTTP_DATE",
    "MAX_ITEMS",
    "MAX_NUMBER",
    "MAX_PARAMS",
    "MAX_RFC3339",
    "Item",
    "duration",
    "http_date",
    "number",
    "parameters",
    "pieces",
    "rfc3339",
]

# -- bounds on what a server can make us read (STYLE.md, practice 13) -------------------
# Each is well above the longest value that can mean something; past it nothing is read.

#: Comma-separated pieces of one value, or items of a structured-field list, looked at:
#: providers announce one to three policies.
MAX_ITEMS = 16
#: Parameters of one structured-field item looked at (the drafts define q, w, qu, pk).
MAX_PARAMS = 16
#: A number: epoch milliseconds with a fraction (``1700000000000.123456``) has 20
#: characters, and a float holds 17 significant digits, so nothing longer means more.
MAX_NUMBER = 32
#: A duration: OpenAI's are Go's ``time.Duration`` strings, the longest of which,
#: ``2562047h47m16.854775807s``, has 24 characters.
MAX_DURATION = 32
#: An HTTP-date: IMF-fixdate has 29 characters, asctime 24, and RFC 850's longest
#: (``Wednesday, 09-Nov-94 08:49:37 GMT``) 33.
MAX_HTTP_DATE = 40
#: An RFC 3339 time with nanoseconds and an offset (``2023-11-14T22:13:50.123456789+00:00``)
#: has 35 characters.
MAX_RFC3339 = 40


def pieces(text: str, separator: str, most: int = MAX_ITEMS) -> list[str]:
    """The first ``most`` pieces of ``text`` between ``separator``; the rest is never split."""
    return text.split(separator, most)[:most]


_NUMBER = re.compile(r"\+?[0-9]+(\.[0-9]+)?")


def number(text: str) -> float | None:
    """A finite, non-negative decimal, or ``None``."""
    text = text.strip()
    if len(text) > MAX_NUMBER or not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


_DIGITS = frozenset("0123456789")  # ASCII only, as in _NUMBER: str.isdigit() takes any script's
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration(text: str) -> float | None:
    """``6m0s``, ``1h2m3.5s``, ``20ms``, or a bare number of seconds."""
    text = text.strip()
    if len(text) > MAX_DURATION:
        return None
    plain = number(text)
    if plain is not None:
        return plain
    return _scan_duration(text)


def _scan_duration(text: str) -> float | None:
    """Parts ``<digits>[.<digits>](h|m|s|ms)``, one after the other, read in one pass.

    A scanner, not a regular expression: one for this grammar backtracks over every
    start of a long run of digits (quadratic time).
    """
    total, i, end = 0.0, 0, len(text)
    if not text:
        return None
    while i < end:
        start = i
        while i < end and text[i] in _DIGITS:
            i += 1
        if i == start:
            return None
        if i < end and text[i] == ".":
            i += 1
            fraction = i
            while i < end and text[i] in _DIGITS:
                i += 1
            if i == fraction:
                return None
        amount = float(text[start:i])
        unit = "ms" if text.startswith("ms", i) else text[i : i + 1]
        if unit not in _UNITS:
            return None
        i += len(unit)
        total += amount * _UNITS[unit]
    return total


_MONTHS = {
    m: i for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)
}
_IMF_FIXDATE = re.compile(r"[A-Za-z]{3}, (\d{2}) ([A-Za-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT")
_RFC850 = re.compile(r"[A-Za-z]+, (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT")
_ASCTIME = re.compile(r"[A-Za-z]{3} ([A-Za-z]{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})")


def http_date(text: str, now: float) -> float | None:
    """An HTTP-date (RFC 9110 section 5.6.7) as epoch seconds."""
    text = text.strip()
    if len(text) > MAX_HTTP_DATE:
        return None
    try:
        if match := _IMF_FIXDATE.fullmatch(text):
            day, month, year, hour, minute, second = match.groups()
        elif match := _RFC850.fullmatch(text):
            day, month, short_year, hour, minute, second = match.groups()
            # RFC 9110: a two-digit year more than 50 years ahead is in the past century.
            this_year = datetime.fromtimestamp(now, timezone.utc).year
            year_number = 2000 + int(short_year)
            if year_number > this_year + 50:
                year_number -= 100
            year = str(year_number)
        elif match := _ASCTIME.fullmatch(text):
            month, day, hour, minute, second, year = match.groups()
        else:
            return None
        month_number = _MONTHS.get(month.lower())
        if month_number is None:
            return None
        moment = datetime(int(year), month_number, int(day), int(hour), int(minute), int(second), tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return None
    return moment.timestamp()


def rfc3339(text: str) -> float | None:
    """An RFC 3339 time (``2023-11-14T22:13:50Z``) as epoch seconds.

    As loose as ``datetime.fromisoformat``: seconds may be left out (``22:13Z``), and
    Python 3.11 takes ISO 8601's other forms too. A time without an offset is ``None``:
    it could be any zone's.
    """
    text = text.strip()
    if len(text) > MAX_RFC3339:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


#: One item of a structured-field list: its name (``None`` for a bare ``k=v``) and
#: its parameters, keys lower-cased.
Item: TypeAlias = tuple[str | None, dict[str, str]]


def parameters(text: str) -> list[Item]:
    """Items of a structured-field list, ``"name";k=v;k=v, ...``, loosely."""
    items: list[Item] = []
    for part in pieces(text, ","):
        part = part.strip()
        if not part:
            continue
        head, _, rest = part.partition(";")
        head = head.strip()
        params: dict[str, str] = {}
        name: str | None = None
        if "=" in head:  # the older draft: "limit=100, remaining=50" or a bare "k=v"
            key, _, value = head.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        elif head:
            name = head.strip('"')
        for param in pieces(rest, ";", MAX_PARAMS):
            key, _, value = param.partition("=")
            if key.strip():
                params[key.strip().lower()] = value.strip().strip('"')
        items.append((name, params))
    return items
