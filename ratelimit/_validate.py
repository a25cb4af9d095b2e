"""Argument checks shared by every public constructor and method.

Each check raises ``TypeError`` for a value of the wrong type and ``ValueError`` for
a value out of range, and every message names the argument and repeats the value, so
that a bad config line is found from the traceback alone. A number given as text
says how to write it, and a provider's rate given as text (``"10/minute"``) points to
``ratelimit.for_limit``, which reads such rates with :func:`parse_rate` (so does the
command line's ``--limit``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "MAX_HORIZON",
    "MAX_NAME_LENGTH",
    "UNITS",
    "Rate",
    "duration",
    "horizon",
    "key",
    "name",
    "parse_rate",
    "positive",
    "rate",
    "real",
    "shown",
    "timeout_seconds",
    "tokens",
]

#: The longest a limiter's state may matter, in seconds (about 31.7 years): the time to
#: refill a bucket, one interval, a window. Every store keeps state that long (Redis
#: key expiries, sleeps), and no real provider's quota spans more.
MAX_HORIZON = 1e9


def real(name: str, value: object) -> float:
    # bool is an int, but `capacity=True` is always a mistake.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {shown(value)}{_written(name, value)}")
    try:
        result = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if math.isnan(result):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return result


def _written(name: str, value: object) -> str:
    """How to write a number given as text: a provider's rate (``"10/minute"``) goes to
    ``ratelimit.for_limit``, or becomes the numbers this argument takes; a number in
    quotes loses them. Empty when the text is neither."""
    if not isinstance(value, str) or len(value) > SHOWN_LENGTH:
        return ""
    try:
        given = parse_rate(value, None)
    except ValueError:
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            return ""
        return f": write it as a number, without quotes: {name}={number:g}" if math.isfinite(number) else ""
    sized = f": for a provider's limit as text use ratelimit.for_limit({value!r}), which sizes the limiter for it"
    count, window = f"{given.count:g}", f"{given.window:g}"
    if name.endswith("_per_sec"):
        return f"{sized}; or write {name}={count}/{window} (tokens per second)"
    if name in ("limit", "window_seconds"):
        return f"{sized}; or write limit={count}, window_seconds={window}"
    if name == "burst":  # for_limit's own argument too: a count at once, never a rate
        return f": a burst is a number of requests at once, not a rate: burst={count}"
    return f"{sized}; {name} takes a number"


def positive(name: str, value: object) -> float:
    """A finite number > 0 (capacities, rates, limits)."""
    result = real(name, value)
    if not (0 < result < math.inf):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return result


def rate(name: str, value: object, *, unlimited: bool = False, none: bool = False) -> float:
    """A rate > 0 whose interval (1 / rate) is still a finite number of seconds, or
    with ``unlimited`` ``math.inf`` too (a limit that never limits), or with ``none``
    0 too (a limit that never refills; ``-0.0`` is read as ``0.0``)."""
    if unlimited and isinstance(value, float) and value == math.inf:
        return value
    if none:
        result = real(name, value)
        if result == 0.0:
            return 0.0
        if not result > 0.0:
            raise ValueError(f"{name} must be >= 0 (0: never refilled), got {value!r}")
    result = positive(name, value)
    if not math.isfinite(1.0 / result) or not math.isfinite(1.0 / result * 1e6):
        raise ValueError(f"{name} must be > 0 and not so small that its interval overflows, got {value!r}")
    return result


def horizon(name: str, value: object, seconds: float, what: str) -> None:
    """Refuse a configuration whose state would matter longer than :data:`MAX_HORIZON`."""
    if not seconds <= MAX_HORIZON:
        raise ValueError(
            f"{name}={value!r} makes {what} {seconds:g} s; the most any store keeps state for is "
            f"{MAX_HORIZON:g} s (about 31 years)"
        )


#: The longest name a limiter or breaker may have: it goes into every key.
MAX_NAME_LENGTH = 200


def name(value: object, backend: object, *, shared: bool, found: bool = False) -> str | None:
    """A limiter's or breaker's ``name``: required with a ``shared`` backend, text of 1
    to :data:`MAX_NAME_LENGTH` characters that UTF-8 can encode (a Redis key is bytes).
    ``found``: a name as a store's keys read back (``ratelimit inspect``, ``top``), in
    which a byte that is not UTF-8 stands as its surrogate escape (U+DC80 to U+DCFF)."""
    if value is None:
        if shared:
            raise ValueError(f"name is required with a shared backend ({backend!r}): it names the shared budget")
        return None
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, got {type(value).__name__} {value!r}")
    if not value or len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"name must be 1 to {MAX_NAME_LENGTH} characters, got {value!r}")
    try:
        value.encode("utf-8", "surrogateescape" if found else "strict")
    except UnicodeEncodeError as exc:
        # A lone surrogate: Redis keys are bytes, and it has none.
        raise ValueError(f"name must be text UTF-8 can encode, got {value!r}: {exc.reason}") from None
    return value


#: How much of a value an error message repeats (a 10 MB string is shown by its ends).
SHOWN_LENGTH = 80


def shown(value: object) -> str:
    """``repr(value)``, cut to its first and last characters when long, with the length
    said: what an error message repeats of a value that may be huge."""
    text = value if isinstance(value, str) else None
    if text is not None and len(text) > SHOWN_LENGTH:
        half = SHOWN_LENGTH // 2
        return f"{text[:half]!r}...{text[-half // 2 :]!r} ({len(text):,} characters)"
    result = repr(value)
    if len(result) > 2 * SHOWN_LENGTH:
        return f"{result[:SHOWN_LENGTH]}... ({type(value).__name__}, {len(result):,} characters shown as repr)"
    return result


def key(value: object) -> str:
    """A key of ``limiter.for_key``: text of 1 to :data:`MAX_NAME_LENGTH` characters
    that UTF-8 can encode, as a name is; any characters at all (separators, braces,
    glob characters) are kept apart from every other key's."""
    if not isinstance(value, str):
        raise TypeError(f"key must be a str, got {type(value).__name__} {shown(value)}")
    if not value or len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"key must be 1 to {MAX_NAME_LENGTH} characters, got {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"key must be text UTF-8 can encode, got {shown(value)}: {exc.reason}") from None
    return value


def duration(name: str, value: object) -> float:
    """A finite duration > 0 given as seconds or a ``timedelta``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return positive(name, value)


def timeout_seconds(value: object) -> float:
    """``timeout``: ``None`` (wait as long as needed) or seconds >= 0."""
    if value is None:
        return math.inf
    if isinstance(value, timedelta):
        value = value.total_seconds()
    result = real("timeout", value)
    if result < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {value!r}")
    return result


def tokens(value: object, most: float, most_name: str, name: str = "tokens", *, zero: bool = False) -> float:
    """A request's weight (or a cost, called ``name``): > 0, or >= 0 where ``zero`` is
    allowed, and never more than the limiter can ever grant at once."""
    result = real(name, value)
    if not (result >= 0 if zero else result > 0):
        raise ValueError(f"{name} must be {'>=' if zero else '>'} 0, got {value!r}")
    if result == math.inf and most == math.inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if result > most:
        raise ValueError(
            f"{name} must be <= {most_name} ({most:g}), got {value!r}: such a request could never be granted"
        )
    return result


# -- rates as providers write them: ``1000/min``, ``20/s``, ``5000/hour``, ``100/10s`` --
#
# A rate is a count per window. The window keeps its own length (a "1,000 per minute"
# provider counts per minute, which is not the same promise as "16.7 per second"), and
# ``Rate.per_second`` gives the sustained rate.

#: Seconds per unit, under every spelling accepted.
UNITS: dict[str, float] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}

# A count (thousands may be grouped with "," or "_"), a slash, an optional number of
# units ("100/10s": 100 per ten seconds) and the unit, in ASCII digits and letters
# (``\d`` alone would take other scripts' digits, which float() then reads).
_RATE = re.compile(
    r"""^\s*
    (?P<count>\d[\d,_]*(?:\.\d+)?|\.\d+)
    \s*/\s*
    (?P<times>\d+(?:\.\d+)?|\.\d+)?
    \s*(?P<unit>[a-z]+)
    \s*$""",
    re.VERBOSE | re.IGNORECASE | re.ASCII,
)

_SHORT = {1.0: "s", 60.0: "min", 3600.0: "hour", 86400.0: "day"}


@dataclass(frozen=True)
class Rate:
    """``count`` requests per ``window`` seconds."""

    count: float
    window: float

    @property
    def per_second(self) -> float:
        return self.count / self.window

    def __str__(self) -> str:
        for seconds, unit in _SHORT.items():
            if self.window == seconds:
                return f"{self.count:g}/{unit}"
        return f"{self.count:g}/{self.window:g}s"


def parse_rate(text: str, argument: str | None = "rate") -> Rate:
    """Read ``N/unit`` (unit: s, min, hour, day, in long or short spellings) or ``N/Kunit``.

    Raises:
        ValueError: the text is not such a rate, or its count or window is not > 0;
            the message names ``argument`` (unless ``None``: argparse names it
            itself) and repeats the text.
    """
    prefix = "" if argument is None else f"{argument}: "
    match = _RATE.match(text)
    expected = "N/s, N/min, N/hour or N/day (e.g. 1000/min)"
    if match is None:
        raise ValueError(f"{prefix}expected a rate like {expected}, got {text!r}")
    unit = UNITS.get(match["unit"].lower())
    if unit is None:
        raise ValueError(f"{prefix}unknown unit {match['unit']!r} in {text!r}; expected {expected}")
    count = float(match["count"].replace(",", "").replace("_", ""))
    window = unit * (float(match["times"]) if match["times"] else 1.0)
    if not (0 < count < math.inf) or not (0 < window < math.inf):
        raise ValueError(f"{prefix}the count and the window must be > 0, got {text!r}")
    return Rate(count, window)
