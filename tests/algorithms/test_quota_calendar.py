"""A quota's calendar: its periods tile time, each one from a local boundary to the next.

The periods are worked out from the time-zone database (``zoneinfo``); the Lua twin is
sent their boundaries (``Calendar.boundaries``), so these are the periods both decide by.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit._algorithms.quota import AHEAD, BEFORE, PERIODS, Calendar

ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "Europe/London"]


@settings(max_examples=300, deadline=None)
@given(
    per=st.sampled_from(list(PERIODS)),
    tz=st.sampled_from(ZONES),
    t=st.floats(min_value=1_600_000_000, max_value=1_900_000_000),
)
def test_the_periods_tile_time(per: str, tz: str, t: float) -> None:
    calendar = Calendar(per, tz)
    start, end = calendar.period(t)
    assert start <= t < end
    # The next one starts where this one ends, the previous one ends where it starts.
    assert calendar.period(end)[0] == end
    assert calendar.period(start - 1e-3)[1] == start
    # Each boundary is a local boundary, but where a clock change moves it (it then
    # starts at the change).
    local = datetime.fromtimestamp(start, ZoneInfo(tz))
    usual = PERIODS[per]
    assert usual / 2 <= end - start <= usual * 1.2 if per != "month" else end - start >= 28 * 86400 - 3600
    if per in ("day", "week", "month"):
        assert (local.hour, local.minute) == (0, 0) or local.dst() != datetime.fromtimestamp(
            start - 1, ZoneInfo(tz)
        ).dst()


@pytest.mark.parametrize(
    ("per", "tz", "local", "hours"),
    [
        ("day", "America/New_York", (2026, 3, 8), 23),
        ("day", "America/New_York", (2026, 11, 1), 25),
        ("day", "Europe/London", (2026, 3, 29), 23),
        ("day", "Australia/Lord_Howe", (2026, 4, 5), 24.5),
        ("week", "America/New_York", (2026, 3, 2), 7 * 24 - 1),
        ("month", "America/New_York", (2026, 2, 1), 28 * 24),
        ("month", "America/New_York", (2026, 3, 1), 31 * 24 - 1),
        ("month", "UTC", (2028, 2, 1), 29 * 24),
    ],
)
def test_a_period_across_a_clock_change_is_as_long_as_local_time_says(
    per: str, tz: str, local: tuple[int, int, int], hours: float
) -> None:
    t = datetime(*local, 12, tzinfo=ZoneInfo(tz)).timestamp()
    start, end = Calendar(per, tz).period(t)
    assert start == datetime(*local, tzinfo=ZoneInfo(tz)).timestamp()
    assert end - start == hours * 3600


def test_an_hour_whose_clock_is_turned_back_half_an_hour_is_two_periods() -> None:
    # Lord Howe, 2026-04-05 02:00 (+11) becomes 01:30 (+10:30).
    calendar = Calendar("hour", "Australia/Lord_Howe")
    change = datetime(2026, 4, 4, 15, tzinfo=ZoneInfo("UTC")).timestamp()
    assert calendar.period(change - 1) == (change - 3600, change)
    assert calendar.period(change) == (change, change + 1800)


def test_the_boundaries_sent_to_the_script_are_periods_around_the_clients_time() -> None:
    calendar = Calendar("day", "America/New_York")
    t = datetime(2026, 3, 8, 0, 30, tzinfo=ZoneInfo("America/New_York")).timestamp()
    until, text = calendar.boundaries(t)
    usual, *bounds = [float(word) for word in text.split()]
    assert usual == 86400
    assert len(bounds) == BEFORE + 2 + AHEAD
    assert bounds[BEFORE : BEFORE + 2] == list(calendar.period(t))
    assert until == bounds[BEFORE + 1]
    assert bounds == sorted(bounds)
    assert all(calendar.period(b)[0] == b for b in bounds)
    assert text == calendar.boundaries(t + 3600)[1]  # the same day, the same text


@pytest.mark.parametrize(("per", "tz"), [("fortnight", "UTC"), ("Day", "UTC"), ("day", "Nowhere/Land"), ("day", "")])
def test_an_unknown_period_or_zone_is_refused_by_name(per: str, tz: str) -> None:
    with pytest.raises(ValueError, match="per must be one of" if tz == "UTC" else "tz must be an IANA"):
        Calendar(per, tz)
