"""``ratelimit bench --adaptive``: its measures on made-up timelines, its defaults, and a real run.

The measures are pure functions of times (seconds from the start), so each test
builds a timeline whose answer can be counted by hand.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ratelimit._cli.bench import (
    BenchConfig,
    adaptive_ceiling,
    drop_plan,
    hidden_burst,
    limiter_spec,
    run_bench,
)
from ratelimit._cli.bench_adaptive import (
    GOAL_REFUSED,
    SETTLE,
    adaptive_stats,
    back_under,
    count_between,
    stretch,
    time_to_reach,
)
from ratelimit._cli.bench_report import bench_json, bench_text
from ratelimit._cli.bench_worker import LimiterSpec, _Target
from ratelimit._cli.plot import can_plot, plot
from ratelimit._validate import Rate
from ratelimit.testing import FakeProvider


def spread(start: float, count: int, seconds: float = 1.0) -> list[float]:
    """``count`` times evenly inside ``(start, start + seconds)``, none on an edge."""
    return [start + (i + 0.5) * seconds / count for i in range(count)]


# -- the pieces ------------------------------------------------------------------------


def test_count_between_is_half_open() -> None:
    times = [0.0, 0.5, 1.0, 1.5, 2.0]
    assert count_between(times, 0.5, 2.0) == 3  # 0.5, 1.0 and 1.5
    assert count_between(times, 2.5, 3.0) == 0


def test_time_to_reach_is_the_end_of_the_first_full_second() -> None:
    steady = [i / 100 for i in range(200)]  # 100/s from the start
    # (t - 1, t] holds 90 served first at t = 0.89: the 90th request's own time.
    assert time_to_reach(steady, 90) == 0.89
    assert time_to_reach(steady, 90, end=0.5) is None
    assert time_to_reach(steady, 101) is None
    assert time_to_reach([], 1) is None


def test_time_to_reach_slides_over_a_ramp() -> None:
    # 10/s for a second, then 100/s: a window ending at 1 + k/100 holds the k + 1
    # fast ones and the slow ones after k/100 (9 - floor(k/10) of 0.1 .. 0.9).
    ramp = [i / 10 for i in range(10)] + [1 + k / 100 for k in range(200)]
    assert time_to_reach(ramp, 90) == 1 + 88 / 100  # 89 + 9 - 8
    # Counting only from 1.0 on: the slow ones no longer help.
    assert time_to_reach(ramp, 90, start=1.0) == 1 + 89 / 100


def test_a_stretch_counts_its_shares() -> None:
    served, refused = spread(0, 190, 2.0), spread(0, 10, 2.0)
    s = stretch("steady", served, refused, 0.0, 2.0, 100)
    assert (s.seconds, s.served, s.refused) == (2.0, 190, 10)
    assert s.throughput == 0.95
    assert s.refused_share == 0.05
    empty = stretch("steady", [], [], 3.0, 3.0, 100)
    assert (empty.throughput, empty.refused_share) == (0.0, 0.0)


def _after_a_drop(buckets: list[tuple[int, int]], drop: float = 10.0) -> tuple[list[float], list[float]]:
    """Served and refused times, each second from ``drop`` holding ``(served, refused)``."""
    served: list[float] = []
    refused: list[float] = []
    for k, (ok, bad) in enumerate(buckets):
        served += spread(drop + k, ok)
        refused += spread(drop + k, bad)
    return sorted(served), sorted(refused)


def test_back_under_is_the_start_of_two_clean_seconds_in_a_row() -> None:
    # Over, over, exactly 2 % (not over), over, clean, clean.
    served, refused = _after_a_drop([(60, 30), (60, 5), (49, 1), (50, 2), (60, 0), (60, 0)])
    assert back_under(served, refused, 10.0, 16.0) == 4.0
    # A partial second at the end is left out, whatever it holds.
    assert back_under(served, [*refused, 16.1, 16.2], 10.0, 16.5) == 4.0
    assert back_under(served, [], 10.0, 16.0) == 0.0
    # Never two clean seconds in a row: not back under at all.
    assert back_under(served, refused, 10.0, 14.0) is None
    assert back_under(served, refused, 10.0, 10.9) is None
    assert GOAL_REFUSED == 0.02


def test_a_later_probe_is_not_the_drop_s_doing() -> None:
    # Over for a second, then clean, then the few 429s of a probe above the new limit
    # (3 of 63: over 2 %), as a learning limiter draws every few seconds.
    served, refused = _after_a_drop([(60, 10), (60, 0), (60, 0), (60, 3), (60, 0)])
    assert back_under(served, refused, 10.0, 15.0) == 1.0


# -- a whole run -----------------------------------------------------------------------

# Nothing for 2 s, then 100/s from 2.0 (times 2.005, 2.015, ...) up to the drop at
# 10 s, less three around 3.895 so that no request sits on the steady stretch's
# start; one 429 a second from 3.5. Then at 60/s: 60 + 20 429s, 60 + 3, 49 + 1
# (exactly 2 %: clean), and 57 a second with one 429 at 15.5 up to 20 s.
BEFORE = [2 + (j + 0.5) / 100 for j in range(800) if j not in (188, 189, 190)]
BEFORE_429 = [3.5 + k for k in range(7)]
AFTER, AFTER_429 = _after_a_drop([(60, 20), (60, 3), (49, 1)] + [(57, 0)] * 7)
AFTER_429 = sorted([*AFTER_429, 15.5])


def test_a_run_that_finds_the_limit_and_follows_its_drop() -> None:
    s = adaptive_stats([*BEFORE, *AFTER], [*BEFORE_429, *AFTER_429], 20.0, 100, 10.0, 60)
    # (1.895, 2.895] is the first second holding 90.
    assert s.reached == 2.895
    before, after = s.stretches
    assert (before.name, before.start, before.end) == ("before the drop", 2.895 + SETTLE, 10.0)
    assert (before.served, before.refused) == (609, 6)  # j = 191 .. 799; 4.5 .. 9.5
    assert before.throughput == 609 / 610.5
    assert before.refused_share == 6 / 615
    assert s.back_under == 2.0
    assert (after.name, after.start, after.end, after.limit) == ("after the drop", 13.0, 20.0, 60)
    assert (after.served, after.refused) == (399, 1)
    assert after.throughput == pytest.approx(0.95)
    assert after.refused_share == 1 / 400
    assert (s.served, s.refused) == (797 + 60 + 60 + 49 + 399, 7 + 20 + 3 + 1 + 1)
    assert s.refused_share == 32 / 1397
    assert (s.throughput_ok, s.refused_ok, s.back_under_ok) == (True, True, True)
    assert (s.drop_at, s.new_limit) == (10.0, 60)


def test_a_run_without_a_drop_has_one_steady_stretch() -> None:
    s = adaptive_stats(BEFORE, BEFORE_429, 10.0, 100)
    (steady,) = s.stretches
    assert (steady.name, steady.served, steady.refused) == ("steady", 609, 6)
    assert (s.drop_at, s.new_limit, s.back_under, s.back_under_ok) == (None, None, None, None)
    # A drop planned after the end (a run cut short) is no drop either.
    assert adaptive_stats(BEFORE, BEFORE_429, 10.0, 100, 12.0, 60) == s
    # 1.9 s from reaching the limit (and settling) to the end is no steady state.
    assert adaptive_stats(BEFORE, BEFORE_429, 5.795, 100).stretches == ()
    assert len(adaptive_stats(BEFORE, BEFORE_429, 5.9, 100).stretches) == 1


def test_goals_fail_honestly() -> None:
    # 85/s: never 90 in a second, so no steady stretch and no goal met.
    slow = adaptive_stats(spread(0, 850, 10.0), [], 10.0, 100)
    assert (slow.reached, slow.stretches, slow.throughput_ok, slow.refused_ok) == (None, (), False, False)
    # 429s to the very end after the drop: never back under, no stretch after it.
    served, refused = _after_a_drop([(60, 10)] * 10)
    stuck = adaptive_stats([*BEFORE, *served], [*BEFORE_429, *refused], 20.0, 100, 10.0, 60)
    assert (stuck.back_under, stuck.back_under_ok) == (None, False)
    assert [x.name for x in stuck.stretches] == ["before the drop"]
    # 3 % 429s in the steady stretch: the share goal fails, the throughput one holds.
    noisy = adaptive_stats(BEFORE, sorted([*BEFORE_429, *spread(4.0, 13, 6.0)]), 10.0, 100)
    assert noisy.stretches[0].refused_share == 19 / 628
    assert (noisy.throughput_ok, noisy.refused_ok) == (True, False)


# -- defaults --------------------------------------------------------------------------


def test_the_adaptive_defaults() -> None:
    config = BenchConfig(adaptive=True, seconds=20.0)
    assert hidden_burst(config) == 5  # 5 % of a second's worth of 100/s
    assert adaptive_ceiling(config) == 200
    assert drop_plan(config) == (Rate(60, 1), 10.0)
    assert limiter_spec(config) == LimiterSpec("token-bucket", 1.0, 200.0, adaptive_floor=1.0)
    assert limiter_spec(config).describe() == "TokenBucket(capacity=1, refill_per_sec=200, adaptive=Adaptive(floor=1))"
    assert drop_plan(replace(config, drop=False)) is None
    custom = replace(config, burst=3, ceiling=150.0, drop_to=Rate(30, 1), drop_at=4.0)
    assert (hidden_burst(custom), adaptive_ceiling(custom), drop_plan(custom)) == (3, 150, (Rate(30, 1), 4.0))


def test_the_adaptive_defaults_of_other_limits() -> None:
    small = BenchConfig(adaptive=True, limit=Rate(7, 1), seconds=8.0)
    assert (hidden_burst(small), drop_plan(small)) == (1, (Rate(4, 1), 4.0))  # at least 1; 4.2 rounded
    per_minute = BenchConfig(adaptive=True, limit=Rate(6000, 60), seconds=20.0)
    assert (hidden_burst(per_minute), adaptive_ceiling(per_minute)) == (5, 200)
    assert drop_plan(per_minute) == (Rate(3600, 60), 10.0)


# -- what the workers feed back --------------------------------------------------------


def test_the_workers_read_each_answers_headers_sync_and_async() -> None:
    with FakeProvider(1, 60, headers="ietf") as provider:
        target = _Target(provider.url)
        connection = target.connection()
        try:
            status, headers = target.answer(connection)
        finally:
            connection.close()
        assert status == 200
        assert ("RateLimit-Limit", "1") in headers
        status, headers = asyncio.run(target.answer_async())
        assert status == 429
        assert ("RateLimit-Remaining", "0") in headers
        assert dict(headers)["Retry-After"] == "60"
    with FakeProvider(1, 60, headers="none") as hidden:
        target = _Target(hidden.url)
        assert asyncio.run(target.call_async()) == 200
        status, headers = asyncio.run(target.answer_async())
        assert status == 429
        assert not any("ratelimit" in name.lower() or name.lower() == "retry-after" for name, _ in headers)


# -- a real run ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_run_learns_the_hidden_limit_and_follows_its_drop(tmp_path: Path) -> None:
    # 100/s hidden, 60/s from 4 s; two processes through the embedded store, so the
    # learned rate is shared as in production, and sampled on a limiter of its own.
    # Bounds are loose: 8 s is two short stretches, on a machine busy with others.
    config = BenchConfig(adaptive=True, seconds=8.0, drop_at=4.0, processes=2, threads=2)
    result = run_bench(config)
    assert result.adaptive is not None
    report = bench_json(result)["adaptive"]
    assert result.errors == ()
    assert (report["hidden_limit_per_sec"], report["hidden_burst"], report["ceiling_per_sec"]) == (100, 5, 200)
    assert report["drop_at_seconds"] == pytest.approx(4.0, abs=0.1)
    assert report["drop_to_per_sec"] == 60
    # 90/s within the 4 s before the drop (seen from 1.0 to 2.6 s: how deep the first
    # cuts from the ceiling go decides it).
    assert report["reached_90_seconds"] is not None
    # Learned, shared, and below the ceiling it started from; lower after the drop.
    learned = [(x["seconds"], x["per_sec"]) for x in report["learned"]]
    assert len(learned) > 40  # every 100 ms for 8 s, give or take a busy machine
    assert all(1 <= rate <= 200 for _, rate in learned)
    before = [rate for t, rate in learned if 2 <= t < 4]
    after = [rate for t, rate in learned if t >= 6]
    assert 60 < sum(before) / len(before) < 130
    assert 30 < sum(after) / len(after) < 80
    # Few 429s: the first cuts at the start and at the drop, then a probe now and then.
    assert report["refused_share"] < 0.1
    served_before = sum(report["timeline"]["served_per_sec"][4:8]) * 0.5  # 2 s to 4 s
    assert served_before >= 0.7 * 100 * 2
    # The text report marks each goal, and the plot draws.
    text = bench_text(result)
    assert text.startswith("ratelimit bench --adaptive: 2 processes x 2 threads (4 callers)")
    assert "adaptive=Adaptive(floor=1)" in text
    # (Reaching 90/s after 1 s or more leaves under 2 s of it before the drop.)
    stretch_line = r"^before drop +(\d+\.\d\d to 4\.\d\d s: .* \[(PASS|FAIL)\]|none \(shorter than 2 s: run longer\))$"
    assert re.search(stretch_line, text, re.MULTILINE)
    assert re.search(r"^back under +(within \d s of the drop \[(PASS|FAIL)\]|not by the end)", text, re.MULTILINE)
    assert re.search(r"^goals +(PASS|FAIL)  steady throughput", text, re.MULTILINE)
    assert re.search(r"^ {17}(PASS|FAIL)  back under a lowered limit within 5 s$", text, re.MULTILINE)
    if can_plot():
        plot(result, str(tmp_path / "adaptive.png"))
        assert (tmp_path / "adaptive.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_four_processes_sharing_one_learned_rate_draw_no_more_429s_than_one() -> None:
    """The fleet learns as one client: the same callers, split over four processes
    sharing the budget through a store, are refused about as often as in one process
    (same seconds, same hidden limit; a little slack for a machine busy with others)."""

    def refused(processes: int, threads: int) -> int:
        result = run_bench(BenchConfig(adaptive=True, seconds=6.0, drop_at=3.0, processes=processes, threads=threads))
        assert result.errors == ()
        count = bench_json(result)["adaptive"]["refused_429"]
        assert isinstance(count, int)
        return count

    alone, fleet = refused(1, 4), refused(4, 1)
    assert fleet <= 1.5 * alone + 5, (fleet, alone)
