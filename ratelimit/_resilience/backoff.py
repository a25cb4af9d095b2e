"""Backoff policies: how long to wait before each retry.

A :class:`Backoff` is a small immutable value; the randomness comes from a
``random.Random`` passed in, so a seeded one makes every delay reproducible.

The un-jittered delay before retry ``n`` (1-based) is ``min(max_delay, base *
multiplier ** (n - 1))``. Jitter spreads the workers that failed together so they do
not come back together:

* ``"none"``: exactly that delay;
* ``"full"``: uniform in ``[0, d]`` (the least total load, the widest spread);
* ``"equal"``: ``d/2 + uniform(0, d/2)`` (never less than half the delay);
* ``"decorrelated"``: ``min(max_delay, uniform(base, 3 * previous))``, starting from
  ``previous = base``; it grows from the last actual delay, never below ``base``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from .. import _validate

__all__ = ["Backoff", "Jitter"]

Jitter = Literal["none", "full", "equal", "decorrelated"]
JITTERS: tuple[Jitter, ...] = ("none", "full", "equal", "decorrelated")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter.

    Args:
        base: the first retry's un-jittered delay, seconds (> 0).
        multiplier: growth per retry (>= 1; 1 is a constant delay).
        max_delay: no delay is ever longer, seconds (>= ``base``).
        jitter: ``"none"``, ``"full"`` (default), ``"equal"`` or ``"decorrelated"``.
    """

    base: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: Jitter = "full"

    def __post_init__(self) -> None:
        _validate.positive("base", self.base)
        _validate.positive("max_delay", self.max_delay)
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, (int, float)):
            raise TypeError(f"multiplier must be a number, got {self.multiplier!r}")
        if not 1 <= self.multiplier < math.inf:
            raise ValueError(f"multiplier must be a finite number >= 1, got {self.multiplier!r}")
        if self.max_delay < self.base:
            raise ValueError(f"max_delay must be >= base ({self.base!r}), got {self.max_delay!r}")
        if self.jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {', '.join(map(repr, JITTERS))}, got {self.jitter!r}")

    def ceiling(self, retry: int) -> float:
        """The un-jittered delay before retry ``retry`` (1-based), capped at ``max_delay``."""
        if retry < 1:
            raise ValueError(f"retry must be >= 1, got {retry!r}")
        # base * multiplier**(n-1) overflows a float long before n gets silly; the cap
        # is reached far earlier, so compare logarithms instead of computing the power.
        if self.multiplier > 1 and (retry - 1) * math.log(self.multiplier) >= math.log(self.max_delay / self.base):
            return self.max_delay
        return min(self.max_delay, self.base * self.multiplier ** (retry - 1))

    def delay(self, retry: int, previous: float | None, rng: random.Random) -> float:
        """The delay before retry ``retry``; ``previous`` is the delay actually used
        before the retry before it (``None`` for the first), which only
        ``"decorrelated"`` reads."""
        if self.jitter == "decorrelated":
            last = self.base if previous is None else max(previous, self.base)
            return min(self.max_delay, rng.uniform(self.base, 3 * last))
        d = self.ceiling(retry)
        if self.jitter == "full":
            return rng.uniform(0.0, d)
        if self.jitter == "equal":
            return d / 2 + rng.uniform(0.0, d / 2)
        return d

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The endless sequence of delays this policy gives, for inspection and tests."""
        rng = rng or random.Random()
        previous: float | None = None
        retry = 1
        while True:
            previous = self.delay(retry, previous, rng)
            yield previous
            retry += 1
