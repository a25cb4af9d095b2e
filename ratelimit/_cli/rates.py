"""Rates as providers write them: ``1000/min``, ``20/s``, ``5000/hour``, ``100/10s``.

A rate is a count per window. The window keeps its own length (a "1,000 per minute"
provider counts per minute, which is not the same promise as "16.7 per second"), and
:attr:`Rate.per_second` gives the sustained rate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["UNITS", "Rate", "parse_rate"]

#: Seconds per unit, under every spelling accepted.
UNITS: dict[str, float] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}

# A count (thousands may be grouped with "," or "_"), a slash, an optional number of
# units ("100/10s": 100 per ten seconds) and the unit.
_RATE = re.compile(
    r"""^\s*
    (?P<count>\d[\d,_]*(?:\.\d+)?|\.\d+)
    \s*/\s*
    (?P<times>\d+(?:\.\d+)?|\.\d+)?
    \s*(?P<unit>[a-z]+)
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
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
