"""``ratelimit bench --adaptive``'s measures, as pure functions of the provider's timeline.

Every time here is seconds from the run's start. ``served`` and ``refused`` are the
provider's decision times of each request it served and of each 429 its (hidden)
limit caused, each sorted. A limit is in requests per second.

The definitions, as the report prints them:

- **reached**: the end of the first sliding ``WIDTH`` (1 s) of served requests that
  holds at least ``REACHED`` (90 %) of the limit's worth, before any drop.
- **steady stretches**: ``before the drop`` runs from ``reached + SETTLE`` to the
  drop (to the end without one); ``after the drop`` from ``drop + back under +
  SETTLE`` to the end; one shorter than ``SHORTEST`` (2 s) is no steady state and
  is left out. In each: the throughput as a share of the limit in force
  (served / (limit x seconds)) and the 429s as a share of the requests the provider
  saw (refused / (served + refused)).
- **back under**: after the drop, the run is cut in whole ``WIDTH`` buckets from the
  drop on; one is *over* when more than ``CLEAN`` (2 %) of its requests were
  refused. Back under is the start of the first ``HOLD`` buckets in a row that are
  not over, in seconds after the drop (0 if the first ones already are not);
  ``None`` if no such run comes before the end. (The provider never serves above
  its limit: the 429s are what tell a client that sends too fast.)

  Not "the end of the last bucket over": a limiter that learns keeps probing above
  the rate it last saw refused, and in steady state each probe draws a few 429s,
  which at 60/s is already more than 2 % of a second's requests. Those belong to
  the steady state (the stretch after the drop counts them); back under measures the
  answer to the drop.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CLEAN",
    "GOAL_BACK_UNDER",
    "GOAL_REFUSED",
    "GOAL_THROUGHPUT",
    "HOLD",
    "REACHED",
    "SETTLE",
    "SHORTEST",
    "WIDTH",
    "AdaptiveStats",
    "Stretch",
    "adaptive_stats",
    "back_under",
    "count_between",
    "stretch",
    "time_to_reach",
]

#: The bucket every rate here is counted in, seconds.
WIDTH = 1.0
#: The share of the limit that counts as having found it.
REACHED = 0.9
#: Seconds left out after reaching the limit (or getting back under it) before a
#: steady stretch starts: the approach is not the steady state.
SETTLE = 1.0
#: A steady stretch shorter than this says nothing: left out.
SHORTEST = 2.0
#: A bucket with a larger share of 429s than this is still over the limit.
CLEAN = 0.02
#: Buckets in a row, none over, that make a limiter back under a lowered limit.
HOLD = 2

#: Goals: the steady throughput at least this share of the limit ...
GOAL_THROUGHPUT = 0.9
#: ... with at most this share of 429s ...
GOAL_REFUSED = 0.02
#: ... and back under a lowered limit within this many seconds.
GOAL_BACK_UNDER = 5.0

# Float sums of steps (0.1 ten times) land a hair off the whole number they mean.
_EPSILON = 1e-9


def count_between(times: Sequence[float], start: float, end: float) -> int:
    """How many of ``times`` (sorted) fall in ``[start, end)``."""
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


def time_to_reach(
    served: Sequence[float], rate: float, start: float = 0.0, end: float = math.inf, width: float = WIDTH
) -> float | None:
    """The end of the first sliding ``width`` that holds ``rate x width`` served requests.

    Windows are ``(t - width, t]`` ending at each served time ``t`` in ``[start,
    end)``, counting only requests from ``start`` on; ``None`` if none holds enough.
    """
    need = rate * width - _EPSILON
    first = bisect.bisect_left(served, start)
    for i in range(first, bisect.bisect_left(served, end)):
        t = served[i]
        # A request a float's hair after t - width is the one at t - width: out.
        if i + 1 - max(first, bisect.bisect_right(served, t - width + _EPSILON)) >= need:
            return t
    return None


@dataclass(frozen=True)
class Stretch:
    """A stretch of the run and what the provider saw in it."""

    name: str
    start: float
    end: float
    #: The limit in force, per second.
    limit: float
    served: int
    refused: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def throughput(self) -> float:
        """Served as a share of what the limit allowed over the stretch."""
        return self.served / (self.limit * self.seconds) if self.seconds > 0 else 0.0

    @property
    def refused_share(self) -> float:
        """429s as a share of the requests the provider saw (0 with none)."""
        requests = self.served + self.refused
        return self.refused / requests if requests else 0.0


def stretch(
    name: str, served: Sequence[float], refused: Sequence[float], start: float, end: float, limit: float
) -> Stretch:
    """The stretch ``[start, end)`` of the timeline, under ``limit`` per second."""
    return Stretch(name, start, end, limit, count_between(served, start, end), count_between(refused, start, end))


def back_under(
    served: Sequence[float],
    refused: Sequence[float],
    drop: float,
    end: float,
    clean: float = CLEAN,
    width: float = WIDTH,
    hold: int = HOLD,
) -> float | None:
    """Seconds from ``drop`` to the first ``hold`` whole ``width`` buckets in a row with
    at most ``clean`` of their requests refused.

    Buckets are ``[drop + k x width, drop + (k + 1) x width)`` up to ``end`` (a last
    partial one is left out; one without requests is clean). ``None`` if no such run
    comes before the end.
    """
    buckets = math.floor((end - drop) / width + _EPSILON)
    run = 0
    for k in range(buckets):
        low, high = drop + k * width, drop + (k + 1) * width
        bad = count_between(refused, low, high)
        seen = bad + count_between(served, low, high)
        run = 0 if seen and bad / seen > clean else run + 1
        if run == hold:
            return (k + 1 - hold) * width
    return None


@dataclass(frozen=True)
class AdaptiveStats:
    """Everything the adaptive report says about one run."""

    #: The run's length, seconds.
    seconds: float
    #: The hidden limit at the start, per second.
    limit: float
    #: When the limit dropped (seconds from the start) and to what; ``None``: no drop.
    drop_at: float | None
    new_limit: float | None
    #: When the served rate first reached ``REACHED`` of the limit (before any drop).
    reached: float | None
    #: Seconds after the drop until the 429s stopped (see :func:`back_under`).
    back_under: float | None
    #: The steady stretches, in order (none if the limit was never reached).
    stretches: tuple[Stretch, ...]
    served: int
    refused: int

    @property
    def refused_share(self) -> float:
        requests = self.served + self.refused
        return self.refused / requests if requests else 0.0

    @property
    def throughput_ok(self) -> bool:
        """Every steady stretch (and at least one) at ``GOAL_THROUGHPUT`` of its limit."""
        return bool(self.stretches) and all(s.throughput >= GOAL_THROUGHPUT for s in self.stretches)

    @property
    def refused_ok(self) -> bool:
        """Every steady stretch (and at least one) with at most ``GOAL_REFUSED`` 429s."""
        return bool(self.stretches) and all(s.refused_share <= GOAL_REFUSED for s in self.stretches)

    @property
    def back_under_ok(self) -> bool | None:
        """Back under within ``GOAL_BACK_UNDER`` seconds; ``None`` without a drop."""
        if self.drop_at is None:
            return None
        return self.back_under is not None and self.back_under <= GOAL_BACK_UNDER


def adaptive_stats(
    served: Sequence[float],
    refused: Sequence[float],
    seconds: float,
    limit: float,
    drop_at: float | None = None,
    new_limit: float | None = None,
) -> AdaptiveStats:
    """Measure a run of ``seconds`` against a hidden ``limit`` that may drop at ``drop_at``.

    Only what happened in ``[0, seconds)`` counts.
    """
    if drop_at is not None and (new_limit is None or not 0 <= drop_at < seconds):
        drop_at = None  # a drop planned but not made within the run (cut short)
    first_end = seconds if drop_at is None else drop_at
    reached = time_to_reach(served, REACHED * limit, 0.0, first_end)
    stretches = []
    if reached is not None and first_end - (reached + SETTLE) >= SHORTEST:
        name = "steady" if drop_at is None else "before the drop"
        stretches.append(stretch(name, served, refused, reached + SETTLE, first_end, limit))
    back = None
    if drop_at is not None and new_limit is not None:
        back = back_under(served, refused, drop_at, seconds)
        if back is not None and seconds - (drop_at + back + SETTLE) >= SHORTEST:
            stretches.append(stretch("after the drop", served, refused, drop_at + back + SETTLE, seconds, new_limit))
    return AdaptiveStats(
        seconds=seconds,
        limit=limit,
        drop_at=drop_at,
        new_limit=new_limit if drop_at is not None else None,
        reached=reached,
        back_under=back,
        stretches=tuple(stretches),
        served=count_between(served, 0.0, seconds),
        refused=count_between(refused, 0.0, seconds),
    )
