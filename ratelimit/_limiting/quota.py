"""``Quota``: at most ``limit`` tokens per calendar period of a time zone."""

from __future__ import annotations

from typing import Any

from .. import _validate
from .._algorithms.algorithm import Algorithm
from .._algorithms.quota import Calendar, CalendarQuota
from .._clock import Clock, SystemClock, WallClock, checked_clock
from .._stores.store import Backend
from .limiters import SingleLimiter

__all__ = ["Quota", "calendar_clock"]


def calendar_clock(algs: list[Algorithm[Any]], clock: Clock | None) -> Clock | None:
    """The clock limits ``algs`` keep time on: ``clock``, or real time read as Unix time
    where one of them counts calendar periods and real time was given (``None``, or a
    plain ``SystemClock``, whose monotonic readings are no calendar's)."""
    if (clock is None or type(clock) is SystemClock) and any(isinstance(alg, CalendarQuota) for alg in algs):
        return WallClock()
    return clock


class Quota(SingleLimiter):
    """At most ``limit`` tokens per calendar period: a minute, an hour, a day, an ISO
    week (from Monday) or a month, its boundaries in local time of the IANA zone ``tz``.

    A day runs from local midnight to the next (23 or 25 hours across a clock change).
    Spent, a request waits for the next boundary: ``acquire`` sleeps until then (or
    raises :class:`AcquireTimeout` at once with that wait as ``retry_after``),
    ``try_acquire`` returns ``False``, ``peek`` tells the wait. Reservations queue in
    arrival order up to two periods ahead. The state is two numbers whatever the
    limit (the period's start and the tokens used in it). ``limit=3, per="minute"``,
    four requests at 12:00:10::

        wait 0, wait 0, wait 0, wait 50   (goes at 12:01:00)

    Args:
        limit: the most tokens per period (> 0).
        per: ``"minute"``, ``"hour"``, ``"day"``, ``"week"`` or ``"month"``.
        tz: the IANA time zone the periods are counted in (``"UTC"`` by default,
            ``"America/Los_Angeles"`` for a provider that resets at midnight Pacific).
        backend, name: as for :class:`TokenBucket`; through Redis the periods are
            picked by the server's clock.
        clock: time source and sleeper; its readings are taken as Unix time (tests
            pass a :class:`ManualClock` started at a Unix time). ``None``: the wall
            clock.
        shadow: decide and count, but never wait nor refuse, as for :class:`TokenBucket`.

    A change at run time (``backend.set_limit(name, rate=...)``, ``ratelimit set
    --rate 5000/day``) is a rate, as for every limiter: the new limit is the rate times
    the period's usual length (a month counts 30 days); the tokens used in the period
    keep their count.
    """

    __slots__ = ()
    numbers = ("limit",)

    def __init__(
        self,
        limit: float,
        per: str,
        *,
        tz: str = "UTC",
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        shadow: bool = False,
    ) -> None:
        checked = _validate.positive("limit", limit)
        if not isinstance(per, str):
            raise TypeError(f"per must be a str ('minute', 'hour', 'day', 'week' or 'month'), got {per!r}")
        alg = CalendarQuota(checked, Calendar(per, tz))
        super().__init__(
            alg, guard=0.0, backend=backend, name=name, clock=calendar_clock([alg], checked_clock(clock)), shadow=shadow
        )

    @property
    def limit(self) -> float:
        return self._configured.most

    @property
    def per(self) -> str:
        return self._calendar.per

    @property
    def tz(self) -> str:
        return self._calendar.tz

    @property
    def _calendar(self) -> Calendar:
        alg = self._configured
        assert isinstance(alg, CalendarQuota)
        return alg.calendar

    def _describe(self) -> str:
        return f"limit={self.limit:g}, per={self.per!r}, tz={self.tz!r}"
