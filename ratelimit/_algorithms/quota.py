"""A calendar quota: at most ``limit`` tokens per calendar period of a time zone.

The periods are minutes, hours, days, ISO weeks (from Monday) or months of local time
in an IANA zone, so a day runs from one local midnight to the next: 23 or 25 hours
across a clock change. Times are Unix seconds (``clock=`` readings, a store's time).

The state is two numbers, ``(first, used)``: the earliest time a grant may go in the
latest period that holds grants (its start, or later where a provider's pause ends in
it) and the tokens granted in it. A request that fits what is left goes then (now,
or at that period's start when it is a period ahead, reserved); one that does not goes
at the start of the period after it, which it opens. Grants come out in arrival order
and no period ever holds more than ``limit``, whatever the calls. The queue reaches at
most two periods past the current one (:data:`AHEAD`): a request that would need a later
one is refused with the wait to it, whatever its timeout (its plan's ``admit_at``).
Once the queue has moved to a later period, what is left of an earlier one stays
unused (arrival order), and a give-back counts only in the period it was granted in.

The Lua twin (``lua/quota.lua``) has no time-zone database: the client sends it the
period boundaries around its own time (:meth:`Calendar.boundaries`, the second
parameter) and the script picks the period by the server's clock. Both decide on those
same boundaries, which is what keeps them twins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .algorithm import EPSILON, decide, exact_room

__all__ = ["AHEAD", "BEFORE", "PERIODS", "Calendar", "CalendarQuota", "period_seconds"]

#: The periods a quota counts over, and their usual length in seconds (a month's, 30
#: days): what a rate is multiplied by to become a limit per period (a change at run
#: time, ``configured``), and the long-run rate (``sustained_rate``).
PERIODS: dict[str, float] = {"minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0, "month": 2592000.0}

#: How many periods past the current one a reservation may reach.
AHEAD = 2
#: How many periods before the client's the boundaries sent to Redis start: the server's
#: clock may be that far behind the client's and still find its period.
BEFORE = 2

_UTC = timezone.utc


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA time zone name (a str such as 'America/New_York'), got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"tz must be an IANA time zone name such as 'UTC' or 'America/New_York', got {tz!r}: no such zone "
            f"in this machine's time-zone database (install the tzdata package where there is none)"
        ) from None


def _next_start(per: str, start: datetime) -> datetime:
    """The local wall time the period after the one starting at ``start`` starts at."""
    if per == "day":
        return start + timedelta(days=1)
    if per == "week":
        return start + timedelta(days=7)
    # month
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


@dataclass(frozen=True)
class Calendar:
    """The periods of ``per`` in the zone named ``tz``: :meth:`period` of a time."""

    per: str
    tz: str
    zone: ZoneInfo = field(init=False, compare=False, repr=False)
    #: The period found last and the boundaries sent last (a busy limiter asks for the
    #: same one at every decision), each replaced whole.
    _last: list[tuple[float, float]] = field(default_factory=lambda: [(math.inf, -math.inf)], compare=False, repr=False)
    _said: list[tuple[float, float, str]] = field(
        default_factory=lambda: [(math.inf, -math.inf, "")], compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.per, str) or self.per not in PERIODS:
            raise ValueError(f"per must be one of {', '.join(map(repr, PERIODS))}, got {self.per!r}")
        object.__setattr__(self, "zone", _zone(self.tz))

    @property
    def seconds(self) -> float:
        """The period's usual length."""
        return PERIODS[self.per]

    def _start(self, t: float) -> float:
        local = datetime.fromtimestamp(t, self.zone)
        if self.per in ("minute", "hour"):
            # An hour of local time whose clock is turned back is two periods, one per
            # real hour (the local reading keeps its fold); zones whose offset is not
            # whole hours start theirs off the UTC hour.
            cut = local.replace(second=0, microsecond=0)
            if self.per == "hour":
                cut = cut.replace(minute=0)
            return cut.timestamp()
        day = datetime(local.year, local.month, local.day, tzinfo=self.zone)
        if self.per == "week":
            day = (day.replace(tzinfo=None) - timedelta(days=local.weekday())).replace(tzinfo=self.zone)
        elif self.per == "month":
            day = day.replace(day=1)
        # A local midnight that does not exist (a clock turned forward at 00:00) reads
        # at the offset before the change: the instant of the change, when the day starts.
        return day.timestamp()

    def _end(self, start: float) -> float:
        if self.per in ("minute", "hour"):
            span = PERIODS[self.per]
            end = self._start(start + span)
            # An offset turned by less than the period (half an hour) starts the next
            # period that much sooner; never none.
            return end if end > start else start + span
        local = datetime.fromtimestamp(start, self.zone)
        begin = datetime(local.year, local.month, local.day)
        return _next_start(self.per, begin).replace(tzinfo=self.zone).timestamp()

    def period(self, t: float) -> tuple[float, float]:
        """``(start, end)`` of the period holding time ``t``."""
        last = self._last[0]
        if last[0] <= t < last[1]:
            return last
        start = self._start(t)
        end = self._end(start)
        while t >= end:
            # A local reading turned back (a clock that falls back, by less than the
            # period or at its boundary) reads as a period already over: the period
            # holding t is a later one, from the change on.
            start, end = end, self._end(end)
        found = (start, end)
        self._last[0] = found
        return found

    def boundaries(self, t: float) -> tuple[float, str]:
        """What the Lua twin is sent around time ``t``: the text of the period's usual
        length, then the boundaries of :data:`BEFORE` periods before ``t``'s, ``t``'s
        and :data:`AHEAD` after it, as whole seconds; and until when (the end of ``t``'s
        period) the same text holds."""
        said = self._said[0]
        if said[0] <= t < said[1]:
            return said[1], said[2]
        start, end = self.period(t)
        before = [start]
        for _ in range(BEFORE):
            before.append(self.period(before[-1] - 1.0)[0])
        after = [end]
        for _ in range(AHEAD):
            after.append(self._end(after[-1]))
        text = " ".join(_whole(b) for b in [self.seconds, *reversed(before), *after])
        self._said[0] = (start, end, text)
        return end, text


def period_seconds(text: str) -> float | None:
    """The length of the period a text of boundaries (:meth:`Calendar.boundaries`) was
    sent around; ``None`` for a text that is not one."""
    try:
        _, *bounds = [float(word) for word in text.split()]
    except ValueError:
        return None
    if len(bounds) != BEFORE + 2 + AHEAD or not all(math.isfinite(b) for b in bounds):
        return None
    return bounds[BEFORE + 1] - bounds[BEFORE]


def _whole(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


@dataclass(frozen=True)
class CalendarQuota:
    """At most ``limit`` tokens per period of ``calendar``; the state ``(start, used)``."""

    limit: float
    calendar: Calendar
    #: Seconds of guard (and lease) kept back: none, a period's count holds no time.
    slack: float = 0.0
    #: The most a period may hold: the limit and a rounding's worth (as Allowance.bound).
    bound: float = field(init=False, compare=False, repr=False)

    kind = "quota"
    slotted = False
    most_name = "limit"

    def __post_init__(self) -> None:
        least = self.limit if self.limit < 1.0 else 1.0
        object.__setattr__(self, "bound", self.limit + EPSILON * least)

    @property
    def most(self) -> float:
        return self.limit

    @property
    def sustained_rate(self) -> float:
        return self.limit / self.calendar.seconds

    def new_state(self) -> tuple[float, float]:
        return (-math.inf, 0.0)

    def _open(self, state: tuple[float, float], now: float) -> tuple[float, float, float]:
        """``(first, end, used)`` of the period a request at ``now`` fills first: the
        earliest a grant may go in it, its end and the tokens used in it. That is the
        state's period when it is now's or one reserved ahead, else now's, unused."""
        begin, end = self.calendar.period(now)
        first, used = state
        if first < begin:
            return begin, end, 0.0
        if first < end:
            return first, end, used
        return first, self.calendar.period(first)[1], used

    def _same(self, at: float, first: float) -> bool:
        """Whether time ``at`` falls in the period of a state whose first time is ``first``."""
        return first != -math.inf and self.calendar.period(at)[0] == self.calendar.period(first)[0]

    def _reach(self, now: float) -> float:
        """The start of the first period a reservation at ``now`` may not take."""
        end = self.calendar.period(now)[1]
        for _ in range(AHEAD):
            end = self.calendar.period(end)[1]
        return end

    def plan(self, state: tuple[float, float], now: float, tokens: float) -> tuple[float, float]:
        if not tokens > 0:
            return now, now  # a composite's request that gives it nothing goes by it
        first, end, used = self._open(state, now)
        if used + tokens <= self.bound:
            return now, first if first > now else now
        if tokens > self.bound:
            return now, math.inf
        if end >= self._reach(now):
            # Past the queue's reach: refused, whatever the caller would wait, with the
            # wait it would have needed (a retry then finds it in reach).
            return end, end
        return now, end

    def commit(self, state: tuple[float, float], now: float, tokens: float, at: float) -> tuple[float, float]:
        if not tokens > 0:
            return state
        first, end, used = self._open(state, now)
        if at < end:
            return (first, used + tokens)
        return (self.calendar.period(at)[0], tokens)

    def refund(self, state: tuple[float, float], now: float, tokens: float, at: float) -> tuple[float, float]:
        # Given back to the period the grant was counted in, while it is the state's:
        # a period over has nothing left to give back to.
        if not tokens > 0:
            return state
        first, used = state
        if not self._same(at, first):
            return state
        left = used - tokens
        return (first, left if left > 0.0 else 0.0)

    def tail(self, state: tuple[float, float], tokens: float, at: float) -> bool:
        # Any grant of the state's period comes back whole; one of an earlier period
        # is no longer counted anywhere (a hole at its own time: exact_room).
        return self._same(at, state[0])

    def cancel(self, state: tuple[float, float], now: float, tokens: float, at: float) -> tuple[float, float]:
        return self.refund(state, now, tokens, at)

    def latest(self, state: tuple[float, float]) -> float:
        # Grants of the state's period go at its start or later: no later than the truth.
        first, used = state
        return self.calendar.period(first)[0] if used > 0.0 else -math.inf

    def next_free(self, at: float, tokens: float) -> float:
        return at

    def room(self, at: float, tokens: float, t: float) -> float:
        return exact_room(at, tokens, t)

    def idle_until(self, state: tuple[float, float]) -> float:
        # The end of the state's period: a new state from then on.
        first, _used = state
        if first == -math.inf:
            return -math.inf
        return self.calendar.period(first)[1]

    def restrict(self, state: tuple[float, float], now: float, remaining: float, until: float) -> tuple[float, float]:
        # Less than a token before `until` (a provider's pause, remaining 1 or more is a
        # pace beside the state: holes.restrict): no grant before it. Within the period
        # the state's first time moves to it and the period's own count goes on after
        # it; past its end, the period is over and the one holding `until` starts
        # then. Only ever later: only ever stricter.
        first, end, used = self._open(state, now)
        if until <= first:
            return state
        if until < end:
            return (until, used)
        return (until, 0.0)

    def params(self) -> tuple[float, ...]:
        # The limit and the period's usual length: what the code says (``inspect``);
        # the Lua twin is sent the boundaries instead (``arguments``).
        return (self.limit, self.calendar.seconds)

    def arguments(self, t: float) -> tuple[float, str]:
        """The Lua twin's two parameters for a call made around time ``t``: the limit
        and the text of the boundaries (:meth:`Calendar.boundaries`)."""
        return self.limit, self.calendar.boundaries(t)[1]

    def slowed(self, share: float) -> CalendarQuota:
        return CalendarQuota(self.limit * share, self.calendar)

    def split(self, low_share: float) -> tuple[CalendarQuota, CalendarQuota]:
        raise ValueError(
            f"low_share={low_share!r}: a Quota has no priority lanes; give the low priority a Quota of its own "
            f"(a Composite of it and the shared one)"
        )

    def guarded(self, seconds: float) -> CalendarQuota:
        # A period's count holds no time to widen: a grant sent late is counted where
        # the provider sees it, which a guard cannot move.
        return self

    def configured(self, rate: float | None, burst: float | None) -> CalendarQuota:
        # A change at run time: `rate` tokens a second over the period's usual length
        # (as a window's limit becomes rate x window): "5000/day" is 5000 a day. A quota
        # has no burst of its own. Twin of quota.configured.
        if rate is None:
            return self
        return CalendarQuota(rate * self.calendar.seconds, self.calendar, self.slack)

    def rescale(self, new: CalendarQuota, state: tuple[float, float], now: float) -> tuple[float, float]:
        # The tokens used keep their count under the new limit.
        return state

    def step(
        self, state: tuple[float, float], now: float, tokens: float, max_wait: float
    ) -> tuple[tuple[float, float], float]:
        # The usual case inlined (a grant at once in now's period: plan, decide and
        # commit say the same), which is every in-process acquire; the rest as step().
        begin = self.calendar.period(now)[0]
        first, used = state
        if first <= begin:
            if first < begin:
                used = 0.0
            if used + tokens <= self.bound:
                return (begin, used + tokens), 0.0
        admit_at, at = self.plan(state, now, tokens)
        wait = decide(admit_at, at, now, max_wait)
        if wait < 0:
            return state, wait
        return self.commit(state, now, tokens, at), wait
