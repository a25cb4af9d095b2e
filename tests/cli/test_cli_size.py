"""``ratelimit size``: the rate parser, the sizing arithmetic and the command's output."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys

import pytest

from ratelimit import LeakyBucket, TokenBucket
from ratelimit._cli.sizing import expected_wait, md1_wait, size
from ratelimit._validate import Rate, parse_rate
from ratelimit.cli import main

# -- rates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "window"),
    [
        ("1000/min", 1000, 60),
        ("1,000/minute", 1000, 60),
        ("20/s", 20, 1),
        ("20 / second", 20, 1),
        ("2.5/sec", 2.5, 1),
        ("5000/hour", 5000, 3600),
        ("5_000/h", 5000, 3600),
        ("10000/day", 10000, 86400),
        ("100/10s", 100, 10),
        ("90/15min", 90, 900),
        ("7/Minutes", 7, 60),
    ],
)
def test_rates_parse(text: str, count: float, window: float) -> None:
    assert parse_rate(text) == Rate(count, window)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "expected a rate like N/s, N/min, N/hour or N/day (e.g. 1000/min), got 'abc'"),
        ("1000", "got '1000'"),
        ("1000/fortnight", "unknown unit 'fortnight' in '1000/fortnight'"),
        ("0/s", "must be > 0, got '0/s'"),
        ("5/0s", "must be > 0, got '5/0s'"),
        ("-5/s", "got '-5/s'"),
    ],
)
def test_bad_rates_name_the_argument_and_the_value(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^--limit: ") as info:
        parse_rate(text, argument="--limit")
    assert message in str(info.value)


def test_rates_print_as_written() -> None:
    assert [str(parse_rate(t)) for t in ("1000/min", "20/s", "5/hour", "3/day", "100/10s")] == [
        "1000/min",
        "20/s",
        "5/hour",
        "3/day",
        "100/10s",
    ]
    assert parse_rate("1000/min").per_second == pytest.approx(16.6667, rel=1e-4)


# -- sizing ----------------------------------------------------------------------------


def test_readme_example_30_workers_on_4_boxes_against_1000_per_min_burst_20() -> None:
    s = size(parse_rate("1000/min"), burst=20, workers=30, boxes=4, headroom=0.05)
    # The burst less the headroom: floor(20 x 0.95).
    assert s.token_bucket.capacity == 19
    assert s.token_bucket.capacity_rule == "burst"
    assert s.token_bucket.refill_per_sec == pytest.approx(1000 * 0.95 / 60)  # 15.83/s
    # 19 at once, then 15.83/s for the rest of the minute: 969 <= 1000.
    assert s.token_bucket.most_in_window == 969
    assert s.leaky_bucket.capacity == 31
    assert s.leaky_bucket.leak_per_sec == pytest.approx(15.8333, rel=1e-4)
    assert s.leaky_bucket.longest_wait == pytest.approx(30 / 15.8333, rel=1e-4)
    # A window as long as the bucket takes to refill: never more than 19 at once.
    assert s.sliding_window.limit == 19
    assert s.sliding_window.window_seconds == pytest.approx(19 / 15.8333, rel=1e-4)
    # The static split: 0.53/s and 0.63 of a token each, which no bucket can hold, so
    # the 30 workers really burst 30 (above the provider's 20).
    static = s.static
    assert static.refill_per_sec == pytest.approx(15.8333 / 30, rel=1e-4)
    assert static.capacity == pytest.approx(19 / 30)
    assert (static.usable_capacity, static.total_burst) == (1, 30)
    assert static.per_box_refill == pytest.approx(15.8333 / 4, rel=1e-4)
    # With one worker busy, the split leaves it 1/30 of the budget; shared, it has all.
    one = static.busy[0]
    assert (one.busy, one.shared_per_sec, one.static_per_sec) == (
        1,
        s.token_bucket.refill_per_sec,
        static.refill_per_sec,
    )
    assert [row.busy for row in static.busy] == [1, 7, 15, 30]
    assert static.busy[-1].static_per_sec == pytest.approx(static.busy[-1].shared_per_sec)


def test_without_a_burst_the_capacity_is_paid_for_by_the_headroom() -> None:
    s = size(parse_rate("1000/min"), headroom=0.05)
    assert (s.token_bucket.capacity, s.token_bucket.capacity_rule) == (50, "headroom")
    assert s.token_bucket.most_in_window == 1000
    assert (s.sliding_window.limit, s.sliding_window.window_seconds) == (950, 60)
    for limit in ("100/s", "1000/min", "5000/hour", "37/10s", "10000/day"):
        for headroom in (0.01, 0.05, 0.1, 0.15):
            bucket = size(parse_rate(limit), headroom=headroom).token_bucket
            assert bucket.capacity >= 1
            assert bucket.most_in_window <= parse_rate(limit).count, (limit, headroom)


def test_the_guard_becomes_part_of_the_headroom_without_a_burst() -> None:
    # 200/s at 5 %: 190/s; a window sees the burst plus 190 x (1 + guard) tokens.
    rate = parse_rate("200/s")
    assert [size(rate, guard=g).token_bucket.capacity for g in (0, 0.02, 0.05)] == [10, 7, 1]
    assert size(rate, guard=0.05).token_bucket.most_in_window == 200  # 1 + fit(190 x 1.05 = 199.5)
    # 20 per 0.1 s: the headroom's 190/s and a 50 ms guard leave no token: the rate is cut.
    short = size(Rate(20, 0.1), guard=0.05)
    assert (short.token_bucket.capacity, short.token_bucket.rate_cut) == (1, True)
    assert short.token_bucket.refill_per_sec == pytest.approx(19.999 / 0.15)
    assert short.leaky_bucket.leak_per_sec == pytest.approx(19.999 / 0.15)
    assert short.leaky_bucket.most_in_window == 20
    # A window counts each grant for window + guard, and passes the guard on.
    window = size(rate, guard=0.05).sliding_window
    assert (window.limit, window.window_seconds, window.guard) == (190, 1, 0.05)
    assert window.per_second == pytest.approx(190 / 1.05)


def test_with_a_burst_the_guard_comes_out_of_the_bursts_margin() -> None:
    rate = parse_rate("100/s")
    # The margin is the larger of headroom x burst (0.5) and refill x guard, for a
    # burst above the limit's count (5 per 50 ms, 100/s): the burst's rule alone.
    fine = parse_rate("5/0.05s")
    assert [size(fine, burst=10, guard=g).token_bucket.capacity for g in (0, 0.005, 0.02, 0.05)] == [9, 9, 8, 5]
    # A burst within the count: the window's rule keeps 100 - fit(95 x (1 + guard)) when that is less.
    within = [size(rate, burst=10, guard=g).token_bucket for g in (0, 0.005, 0.02, 0.05)]
    assert [(b.capacity, b.capacity_rule) for b in within] == [
        (5, "window"),
        (5, "window"),
        (4, "window"),
        (1, "window"),
    ]
    # A burst that cannot hold one token and the guard: one token, the rate cut to
    # the faster of (burst - 1) / guard and a spacing of 1 / rate + guard.
    tight = size(rate, burst=3, guard=0.05)
    assert tight.token_bucket.capacity == 1
    assert tight.token_bucket.refill_per_sec == pytest.approx(40.0)
    assert tight.leaky_bucket.leak_per_sec == pytest.approx(40.0)
    one = size(rate, burst=1, guard=0.05).token_bucket
    assert one.refill_per_sec == pytest.approx(1 / (0.01 + 0.05))
    # The window for a burst keeps its size; the guard costs it rate, never burst.
    window = size(rate, burst=10, guard=0.05).sliding_window
    assert (window.limit, window.guard) == (9, 0.05)
    assert window.window_seconds == pytest.approx(9 / 95)


def test_size_rejects_out_of_range_arguments() -> None:
    rate = parse_rate("10/s")
    with pytest.raises(ValueError, match="workers and boxes must be >= 1, got 0"):
        size(rate, workers=0)
    with pytest.raises(ValueError, match="headroom must be from 0 to below 1, got 1"):
        size(rate, headroom=1)
    with pytest.raises(ValueError, match="burst must be > 0 and finite, got -1"):
        size(rate, burst=-1)
    with pytest.raises(ValueError, match="guard must be seconds >= 0"):
        size(rate, guard=-0.1)


def test_demand_at_or_above_the_rate_waits_without_bound() -> None:
    s = size(parse_rate("1000/min"), burst=20, workers=30, demand=20.0)
    assert s.waits is not None
    assert not s.waits.bounded
    assert s.waits.backlog_growth == pytest.approx(20 - 15.8333, rel=1e-4)
    assert math.isinf(s.waits.token_bucket)
    assert math.isinf(s.waits.leaky_bucket)
    assert math.isinf(expected_wait(10, 10, 5))


class _StillClock:
    """Time that moves only when the test says; sleeping does not move it.

    So a limiter can be fed arrivals at chosen times while earlier callers "sleep"
    out their reservations: the waits it hands out are those of concurrent callers.
    """

    def __init__(self) -> None:
        self.t = 1_000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        pass

    async def sleep_async(self, seconds: float) -> None:
        pass


def _simulated_mean_wait(limiter_of: type[TokenBucket] | type[LeakyBucket], capacity: float, rho: float) -> float:
    rate = 10.0
    clock = _StillClock()
    limiter = limiter_of(capacity, rate, clock=clock)
    arrivals = random.Random(7)
    total, n = 0.0, 200_000
    for _ in range(n):
        clock.t += arrivals.expovariate(rho * rate)
        total += limiter.acquire()
    return total / n


@pytest.mark.stress
@pytest.mark.parametrize(("capacity", "rho"), [(1, 0.5), (1, 0.9), (3, 0.8), (5, 0.9), (10, 0.9)])
def test_the_wait_formula_matches_the_real_token_bucket_under_poisson_arrivals(capacity: float, rho: float) -> None:
    simulated = _simulated_mean_wait(TokenBucket, capacity, rho)
    assert expected_wait(rho * 10, 10, capacity) == pytest.approx(simulated, rel=0.15)


def test_the_leaky_bucket_wait_is_the_md1_queue() -> None:
    # A queue big enough never to overflow: then it is exactly M/D/1.
    simulated = _simulated_mean_wait(LeakyBucket, 10_000, 0.8)
    assert md1_wait(8, 10) == pytest.approx(simulated, rel=0.1)
    assert md1_wait(8, 10) == pytest.approx(0.8 / (2 * 10 * 0.2))


def test_pooling_one_budget_waits_far_less_than_the_static_split() -> None:
    s = size(parse_rate("1000/min"), burst=20, workers=30, boxes=4, demand=12.0)
    assert s.waits is not None
    assert s.waits.bounded
    assert s.waits.utilisation == pytest.approx(12 / 15.8333, rel=1e-4)
    assert s.waits.token_bucket < 0.001 < 0.05 < s.waits.leaky_bucket < 0.2 < 1 < s.waits.static_split


# -- the command -----------------------------------------------------------------------


def test_size_prints_the_recommendations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--limit", "1000/min", "--burst", "20", "--boxes", "4", "--workers", "30"]) == 0
    out = capsys.readouterr().out
    assert "TokenBucket(capacity=19, refill_per_sec=15.8333)" in out
    assert "LeakyBucket(capacity=31, leak_per_sec=15.8333)" in out
    assert "SlidingWindow(limit=19, window_seconds=1.2, guard=0.05)" in out
    assert "at most 969 requests in any 60 s (the provider allows 1000), sends up to 50 ms late included" in out
    assert "guard           50 ms: requests may leave up to that late after their grant" in out
    assert "so all together they burst 30 (shared: 19; the provider allows 20)" in out
    assert "30 workers on 4 boxes" in out


def test_size_json_has_stable_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--limit", "1000/min", "--burst", "20", "--boxes", "4", "--workers-per-box", "8"]
    assert main([*argv, "--headroom", "10%", "--demand", "12/s", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == [
        "provider",
        "workers",
        "boxes",
        "headroom",
        "guard_seconds",
        "token_bucket",
        "leaky_bucket",
        "sliding_window",
        "static_split",
        "demand",
    ]
    assert report["workers"] == 32
    assert report["headroom"] == 0.1
    assert report["guard_seconds"] == 0.05
    assert report["sliding_window"]["guard"] == 0.05
    assert report["token_bucket"]["refill_per_sec"] == pytest.approx(15.0)
    assert report["provider"] == {
        "limit": 1000,
        "window_seconds": 60,
        "per_second": pytest.approx(16.6667, rel=1e-4),
        "burst": 20,
    }
    assert set(report["demand"]) == {"per_second", "utilisation", "bounded", "backlog_growth_per_sec", "wait_seconds"}
    assert report["demand"]["bounded"] is True


def test_the_guard_option_takes_seconds_or_milliseconds(capsys: pytest.CaptureFixture[str]) -> None:
    for given in ("0.02", "0.02s", "20ms", "20 ms"):
        assert main(["size", "--limit", "200/s", "--guard", given, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["guard_seconds"] == pytest.approx(0.02), given
        assert report["token_bucket"]["capacity"] == 7
    assert main(["size", "--limit", "200/s", "--guard", "0"]) == 0
    out = capsys.readouterr().out
    assert "TokenBucket(capacity=10, refill_per_sec=190)" in out
    assert "SlidingWindow(limit=190, window_seconds=1, guard=0)" in out


def test_an_unbounded_wait_is_said_in_text_and_null_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--limit", "100/s", "--demand", "200/s"]) == 0
    assert "grows without bound" in capsys.readouterr().out
    assert main(["size", "--limit", "100/s", "--demand", "200/s", "--json"]) == 0
    demand = json.loads(capsys.readouterr().out)["demand"]
    assert demand["bounded"] is False
    assert demand["wait_seconds"]["token_bucket"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "lots/min"], "argument --limit: expected a rate like N/s, N/min, N/hour or N/day"),
        (["--limit", "10/fortnight"], "argument --limit: unknown unit 'fortnight'"),
        (["--limit", "10/s", "--workers", "0"], "argument --workers: expected a whole number > 0, got '0'"),
        (["--limit", "10/s", "--boxes", "-2"], "argument --boxes: '-2' is negative; expected a whole number > 0"),
        (["--limit", "10/s", "--headroom", "5"], "argument --headroom: expected a fraction from 0 to below 1"),
        (["--limit", "10/s", "--headroom", "lots"], "argument --headroom: expected a fraction or a percentage"),
        (["--limit", "10/s", "--burst", "0"], "argument --burst: expected a number > 0, got '0'"),
        (["--limit", "10/s", "--demand", "fast"], "argument --demand: expected a rate like"),
        (["--limit", "10/s", "--guard", "soon"], "argument --guard: expected seconds (0.02, 0.02s or 20ms)"),
        (
            ["--limit", "10/s", "--guard=-5ms"],
            "argument --guard: '-5ms' is negative; expected seconds",
        ),
        (
            ["--limit", "10/s", "--workers", "5", "--boxes", "2", "--workers-per-box", "3"],
            "--workers 5 disagrees with --boxes 2 x --workers-per-box 3",
        ),
        ([], "the following arguments are required: --limit"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["size", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("ratelimit size: error: ")
    assert message in err


@pytest.mark.slow
def test_python_m_ratelimit_size_exits_non_zero_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", "size", "--limit", "1000/mn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "ratelimit size: error: argument --limit: unknown unit 'mn' in '1000/mn'; "
        "expected N/s, N/min, N/hour or N/day (e.g. 1000/min)\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("argv", "rho", "guard"),
    [
        # headroom at its default: the rate is cut to the one-token rule and sits on
        # the provider's limit exactly; the printed 6 digits round it up.
        (["--limit", "10/s", "--burst", "1", "--guard", "0.5"], 10.0, 0.5),
        (["--limit", "5/0.1s", "--burst", "1", "--guard", "0.5"], 50.0, 0.5),
        # no headroom: the printed refill is above the provider's rate.
        (["--limit", "1/day", "--burst", "1", "--headroom", "0", "--guard", "0"], 1 / 86400, 0.0),
    ],
)
def test_the_printed_constructor_lines_keep_the_providers_limit(
    capsys: pytest.CaptureFixture[str], argv: list[str], rho: float, guard: float
) -> None:
    """Against a provider of burst 1 at rho, one-token grants must be 1/rho + guard
    apart. The lines printed to copy are rounded to 6 significant digits, and were
    rounded up (`--limit 10/s --burst 1 --guard 0.5` printed leak_per_sec=1.66667:
    grants 0.5999988 s apart, < 0.6); rates now round down."""
    assert main(["size", *argv]) == 0
    out = capsys.readouterr().out
    for kind, rate in re.findall(r"(TokenBucket|LeakyBucket)\([^)]*(?:refill|leak)_per_sec=([0-9.e+-]+)\)", out)[:2]:
        assert 1 / float(rate) >= 1 / rho + guard, f"{kind} at {rate}/s: {1 / float(rate)!r} s apart"
