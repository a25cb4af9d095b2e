"""Time, injected.

Every limiter reads time and sleeps through a :class:`Clock`, so that tests (ours and
our users') can replace real time by a :class:`ManualClock` and never sleep.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock", "WallClock", "checked_clock"]

#: The longest single ``time.sleep`` a :class:`SystemClock` makes (about 11.6 days).
_LONGEST_SLEEP = 1e6


@runtime_checkable
class Clock(Protocol):
    """Where a limiter gets the time from and how it waits."""

    def now(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds``."""
        ...


def checked_clock(clock: object) -> Clock | None:
    """``clock`` as given (``None``: real time), or ``TypeError`` naming it."""
    # A class has the methods too (unbound): the protocol check alone would let
    # `clock=ManualClock` through, to fail at the first acquire.
    if clock is not None and (isinstance(clock, type) or not isinstance(clock, Clock)):
        raise TypeError(f"clock must be a clock instance providing now(), sleep() and sleep_async(), got {clock!r}")
    return clock


class SystemClock:
    """Real time: ``time.monotonic()``, ``time.sleep()`` and ``asyncio.sleep()``."""

    __slots__ = ()

    # Bound as an attribute rather than wrapped in a method: the hot path then pays
    # one C call instead of a Python frame plus a C call.
    now = staticmethod(time.monotonic)

    def sleep(self, seconds: float) -> None:
        # time.sleep refuses waits past the platform's time_t; a queue of reservations
        # can pile up further than that, so a long wait is slept in pieces.
        while seconds > _LONGEST_SLEEP:
            time.sleep(_LONGEST_SLEEP)
            seconds -= _LONGEST_SLEEP
        time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class WallClock(SystemClock):
    """Real time read as Unix time (``time.time()``): what a calendar quota's periods are
    counted on in process. Real time still, for every store (Redis reads its own clock)."""

    __slots__ = ()

    now = staticmethod(time.time)

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock:
    """A clock that only moves when told to, for tests.

    ``sleep()`` and ``sleep_async()`` do not block: they advance the clock by the
    requested amount and record it in :attr:`sleeps`, so a test can assert exactly
    which waits a limiter asked for.

    >>> clock = ManualClock()
    >>> clock.advance(1.5)
    >>> clock.now()
    1.5
    """

    def __init__(self, start: float = 0.0) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)):
            raise TypeError(f"start must be a number, got {type(start).__name__} {start!r}")
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite number, got {start!r}")
        self._now = float(start)
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (must be >= 0)."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        with self._lock:
            self._now += seconds

    def set(self, now: float) -> None:
        """Jump to ``now``; a clock that only goes forward refuses to go back."""
        with self._lock:
            if now < self._now:
                raise ValueError(f"now must be >= the current time {self._now!r}, got {now!r}")
            self._now = float(now)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    async def sleep_async(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)
        # Yield once, as a real sleep would, so other tasks get their turn.
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r})"
