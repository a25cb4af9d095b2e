"""``guard=``: each limiter keeps its promise for requests that leave up to ``guard`` late.

Decisions on a :class:`ManualClock`, through every store of the backend matrix; the
defaults on real and injected time; what the properties and ``repr`` report.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ratelimit import AcquireTimeout, Composite, LeakyBucket, ManualClock, SlidingWindow, TokenBucket
from ratelimit._cli.sizing import size
from ratelimit._clock import SystemClock
from ratelimit._limiting.guard import DEFAULT_GUARD
from ratelimit._validate import MAX_HORIZON, Rate

LIMITERS: list[tuple[type[Any], tuple[float, float]]] = [
    (TokenBucket, (50, 10)),
    (LeakyBucket, (5, 10)),
    (SlidingWindow, (5, 10)),
]
IDS = ["token-bucket", "leaky-bucket", "sliding-window"]

# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "args"), LIMITERS, ids=IDS)
@pytest.mark.parametrize(
    ("guard", "error", "message"),
    [
        (-0.01, ValueError, "guard must be seconds >= 0 and at most 1e+09, got -0.01"),
        (math.nan, ValueError, "guard must be a number, got nan"),
        (math.inf, ValueError, "guard must be seconds >= 0 and at most 1e+09, got inf"),
        (2e9, ValueError, "guard must be seconds >= 0 and at most 1e+09, got 2000000000.0"),
        (True, TypeError, "guard must be a number, got bool True"),
        ("0.05", TypeError, "guard must be a number, got str '0.05': write it as a number, without quotes: guard=0.05"),
    ],
)
def test_a_bad_guard_is_refused_naming_it_and_its_value(
    cls: type[Any], args: tuple[float, float], guard: object, error: type[Exception], message: str
) -> None:
    for clock in (None, ManualClock()):
        with pytest.raises(error) as info:
            cls(*args, guard=guard, clock=clock)
        assert str(info.value) == message


def test_a_token_bucket_guard_that_leaves_less_than_one_request_is_refused() -> None:
    # Less than one token kept would refuse every unit request, for ever.
    with pytest.raises(ValueError, match=r"^guard=0\.5 keeps back 5 tokens at 10/s, leaving 0 of capacity=5: less"):
        TokenBucket(5, 10, guard=0.5)
    with pytest.raises(ValueError, match=r"^guard=0\.05 keeps back 0\.5 tokens at 10/s, leaving 0\.5 of capacity=1"):
        TokenBucket(1, 10, guard=0.05)
    with pytest.raises(ValueError, match=r"^guard=0\.6 "):
        TokenBucket(5, 10, guard=0.6, clock=ManualClock())
    assert TokenBucket(5, 10, guard=0.4).guard == 0.4  # one whole token is left


def test_zero_is_no_guard() -> None:
    assert SlidingWindow(5, 10, guard=0).guard == 0.0
    # On real time, where the default is not zero, the repr says so.
    assert repr(SlidingWindow(5, 10, guard=0.0)) == "SlidingWindow(limit=5, window_seconds=10, guard=0)"
    assert repr(SlidingWindow(5, 10, guard=0.0, clock=ManualClock())) == "SlidingWindow(limit=5, window_seconds=10)"
    assert repr(TokenBucket(5, 10, guard=0)) == "TokenBucket(capacity=5, refill_per_sec=10)"


# -- what a guard does to decisions ------------------------------------------------------


def test_a_window_counts_a_grant_for_window_plus_guard(make: Callable[..., Any], clock: ManualClock) -> None:
    window = make(SlidingWindow, 2, 10, guard=1.5)
    assert [window.acquire(), window.acquire()] == [0.0, 0.0]
    clock.advance(10)
    assert not window.try_acquire()  # aged out of the window, not of window + guard
    clock.advance(1.5)
    assert window.try_acquire()
    assert window.acquire() == pytest.approx(0.0)  # the second grant of t=0 is out too
    assert window.acquire() == pytest.approx(11.5)  # behind the two of t=11.5


def test_a_bucket_keeps_guard_times_rate_of_its_burst_back(make: Callable[..., Any], clock: ManualClock) -> None:
    bucket = make(TokenBucket, 5, 10, guard=0.2)  # 2 of the 5 tokens kept back
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert bucket.acquire() == pytest.approx(0.1)  # then one interval apart, as before
    assert bucket.acquire() == pytest.approx(0.1)
    # Idle long enough to refill, the burst is again capacity - guard x rate.
    clock.advance(10)
    assert sum(bucket.try_acquire() for _ in range(5)) == 3


def test_a_leaky_bucket_spaces_each_token_by_its_interval_plus_guard(make: Callable[..., Any]) -> None:
    leaky = make(LeakyBucket, 3, 10, guard=0.1)
    assert [leaky.acquire() for _ in range(3)] == pytest.approx([0.0, 0.2, 0.2])
    assert leaky.acquire(tokens=2) == pytest.approx(0.2)
    # Two tokens occupy two spaced intervals: the next grant is 0.4 s behind.
    assert not leaky.try_acquire()
    with pytest.raises(AcquireTimeout) as info:
        leaky.acquire(tokens=2, timeout=10)  # 1 queued + 2 > 3: the queue is full
    assert info.value.retry_after > 0


def test_without_a_guard_the_same_calls_decide_as_before(make: Callable[..., Any], clock: ManualClock) -> None:
    window = make(SlidingWindow, 2, 10, guard=0)
    window.acquire()
    window.acquire()
    assert window.acquire() == pytest.approx(10.0)
    bucket = make(TokenBucket, 5, 10)
    assert sum(bucket.try_acquire() for _ in range(6)) == 5


# -- defaults ----------------------------------------------------------------------------


def test_windows_default_to_the_guard_on_real_time_only() -> None:
    assert SlidingWindow(5, 10).guard == DEFAULT_GUARD
    assert SlidingWindow(5, 10, clock=SystemClock()).guard == DEFAULT_GUARD
    assert SlidingWindow(5, 10, approximate=True).guard == DEFAULT_GUARD
    assert SlidingWindow(5, 10, clock=ManualClock()).guard == 0.0
    assert SlidingWindow(5, 10, clock=ManualClock(), guard=0.5).guard == 0.5


def test_buckets_default_to_no_guard() -> None:
    for limiter in (TokenBucket(5, 10), LeakyBucket(5, 10), TokenBucket(5, 10, clock=ManualClock())):
        assert limiter.guard == 0.0
    assert TokenBucket(5, 10, guard=0.1).guard == 0.1


def test_guard_for_resolves_the_default_on_the_clock_asked_about() -> None:
    window = SlidingWindow(5, 10)
    assert window.guard_for(None) == DEFAULT_GUARD
    assert window.guard_for(ManualClock()) == 0.0
    assert SlidingWindow(5, 10, guard=0.3).guard_for(ManualClock()) == 0.3
    # The algorithm in force is widened only when a guard is: 10 + guard seconds.
    assert window.algorithm_for(None).params() == (5, 10 + DEFAULT_GUARD)
    assert window.algorithm_for(ManualClock()).params() == (5, 10)


def test_a_composite_on_an_injected_clock_decides_with_its_members_defaults_resolved_there(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    # The members were built on real time (default guard); the composite keeps time
    # on the manual clock, where nobody leaves late: no guard.
    plain = make(Composite, [SlidingWindow(2, 10), TokenBucket(5, 10)])
    assert [plain.acquire(), plain.acquire()] == [0.0, 0.0]
    assert plain.acquire() == pytest.approx(10.0)
    # A guard given explicitly is kept wherever the member is used.
    guarded = make(Composite, [SlidingWindow(2, 10, guard=1.0)])
    guarded.acquire()
    guarded.acquire()
    assert guarded.acquire() == pytest.approx(11.0)


# -- what is reported ------------------------------------------------------------------


def test_properties_report_the_configuration_and_the_rate_the_guard_leaves() -> None:
    window = SlidingWindow(190, 1, guard=0.05)
    assert (window.limit, window.window_seconds, window.guard) == (190, 1, 0.05)
    assert window.sustained_rate == pytest.approx(190 / 1.05)
    assert repr(window) == "SlidingWindow(limit=190, window_seconds=1, guard=0.05)"
    bucket = TokenBucket(10, 100, guard=0.02)
    assert (bucket.capacity, bucket.refill_per_sec, bucket.sustained_rate) == (10, 100, 100)
    assert repr(bucket) == "TokenBucket(capacity=10, refill_per_sec=100, guard=0.02)"
    leaky = LeakyBucket(3, 10, guard=0.1)
    assert (leaky.capacity, leaky.leak_per_sec) == (3, 10)
    assert leaky.sustained_rate == pytest.approx(5.0)
    assert repr(leaky) == "LeakyBucket(capacity=3, leak_per_sec=10, guard=0.1)"
    assert repr(SlidingWindow(5, 10)) == f"SlidingWindow(limit=5, window_seconds=10, guard={DEFAULT_GUARD:g})"
    assert repr(SlidingWindow(5, 10, clock=ManualClock())) == "SlidingWindow(limit=5, window_seconds=10)"


# -- the sizing rules, checked against the real limiters --------------------------------


def _grant_times(limiter: Any, clock: ManualClock, count: int) -> list[float]:
    times = []
    for _ in range(count):
        limiter.acquire()  # a saturated caller: the manual clock sleeps out each wait
        times.append(clock.now())
    return times


def _most_in_span(times: list[float], span: float) -> int:
    # Half-open: a send exactly `guard` late beside one exactly on time is the limit
    # of the promise, not inside it (a window grants at exactly window + guard).
    return max(bisect.bisect_left(times, t + span - 1e-9) - i for i, t in enumerate(times))


@pytest.mark.parametrize("limit", [Rate(200, 1), Rate(100, 0.5), Rate(20, 0.1), Rate(1000, 60), Rate(37, 10)])
@pytest.mark.parametrize("guard", [0.0, 0.02, 0.05, 0.2])
def test_sized_limiters_keep_the_limit_for_sends_up_to_the_guard_late(limit: Rate, guard: float) -> None:
    # Requests leaving less than `guard` after their grants reach a provider window
    # of T from grants in a span of T + guard: the real limiters, saturated, never
    # put more than the provider's limit into one.
    sizing = size(limit, workers=16, guard=guard)
    span = limit.window + guard
    count = int(3 * limit.count) + 20
    bucket, leaky, window = sizing.token_bucket, sizing.leaky_bucket, sizing.sliding_window
    makers: list[Callable[[ManualClock], Any]] = [
        lambda clock: TokenBucket(bucket.capacity, bucket.refill_per_sec, clock=clock),
        lambda clock: LeakyBucket(leaky.capacity, leaky.leak_per_sec, clock=clock),
        lambda clock: SlidingWindow(window.limit, window.window_seconds, guard=window.guard, clock=clock),
    ]
    for make_one in makers:
        clock = ManualClock(1_000.0)
        limiter = make_one(clock)
        assert _most_in_span(_grant_times(limiter, clock, count), span) <= limit.count, limiter


def test_guard_takes_a_timedelta_like_every_other_duration() -> None:
    limiter = SlidingWindow(10, timedelta(seconds=1), guard=timedelta(milliseconds=50))
    assert limiter.guard == 0.05


def test_a_window_and_its_guard_together_stay_within_the_horizon() -> None:
    # A window counts a grant for window + guard: both together are held to the
    # horizon, as a leaky bucket's interval and its guard are.
    with pytest.raises(ValueError, match=r"^guard=1000000000\.0 makes the window with its guard 2e\+09 s"):
        SlidingWindow(1, MAX_HORIZON, guard=MAX_HORIZON)


def test_a_request_the_guarded_bucket_can_never_hold_names_the_guard() -> None:
    # With 5 of its 20 tokens kept back, a bucket can never hold 20: such a request
    # would wait for ever, so it is refused at once, and the message says why.
    limiter = TokenBucket(20, 100, guard=0.05)
    assert limiter.capacity == 20
    assert limiter.try_acquire(15)
    with pytest.raises(
        ValueError, match=r"^tokens must be <= capacity less what guard=0\.05 keeps back \(15\), got 20"
    ):
        limiter.try_acquire(20)


def test_a_composite_names_the_guard_of_a_member_that_keeps_tokens_back() -> None:
    limiter = Composite([TokenBucket(20, 100, guard=0.05), SlidingWindow(50, 1)], clock=ManualClock())
    assert limiter.try_acquire(15)
    needed = r"^tokens must be <= capacity less what guard=0\.05 keeps back \(15\), got 20"
    with pytest.raises(ValueError, match=needed):
        limiter.try_acquire(20)
    with pytest.raises(ValueError, match=r"^tokens must be <= limit \(50\), got 51"):
        limiter.try_acquire([1, 51])
