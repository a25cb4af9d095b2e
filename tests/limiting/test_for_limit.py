"""``ratelimit.for_limit``: the limiter ``ratelimit size`` recommends, from the provider's words."""

from __future__ import annotations

import bisect
import math
from typing import Any

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
    for_limit,
)
from ratelimit._cli.sizing import size
from ratelimit._validate import parse_rate

# Values of the wrong type, typed Any: the calls below are what mypy refuses already.
TEN_PER_MINUTE: Any = "10/minute"
FIVE_AS_TEXT: Any = "5"
FIVE: Any = 5


def _most_in_closed_window(times: list[float], window: float) -> int:
    """The most of ``times`` (sorted) in any closed interval of ``window`` seconds: a
    provider counting in any window, both ends included, sees no more."""
    return max((bisect.bisect_right(times, t + window) - i for i, t in enumerate(times)), default=0)


def _granted(limiter: TokenBucket, clock: ManualClock, steps: list[tuple[float, bool]]) -> list[float]:
    """Run ``steps`` (seconds to let pass, then ``acquire`` or ``try_acquire``) and
    return the moments of the grants."""
    times = []
    for gap, blocking in steps:
        clock.advance(gap)
        if blocking:
            limiter.acquire()  # the manual clock's sleep moves it to the grant
            times.append(clock.now())
        elif limiter.try_acquire():
            times.append(clock.now())
    return times


def test_the_docstrings_examples() -> None:
    """The values ``for_limit``'s docstring and the README show."""
    assert repr(for_limit("5/s")) == "TokenBucket(capacity=1, refill_per_sec=4.75)"
    assert repr(for_limit("1000/min", burst=20)) == "TokenBucket(capacity=19, refill_per_sec=15.8333)"


@pytest.mark.parametrize(
    ("limit", "burst"),
    [
        ("5/s", None),
        ("10/minute", None),
        ("1000/min", None),
        ("1000/min", 20),
        ("10000/day", None),
        ("5000/hour", 100),
        ("100/s", 10),
        ("10/s", 100),
        ("100/10s", None),
        ("0.5/s", None),
    ],
)
def test_it_is_the_token_bucket_ratelimit_size_recommends(limit: str, burst: float | None) -> None:
    """One set of rules: the command's recommendation and the limiter are the same numbers."""
    recommended = size(parse_rate(limit), burst).token_bucket
    limiter = for_limit(limit, burst=burst)
    assert (limiter.capacity, limiter.refill_per_sec) == (recommended.capacity, recommended.refill_per_sec)


@pytest.mark.parametrize("written", ["1000/min", "1000/minute", "1,000/min", "1000 / minutes", "1000/60s"])
def test_the_provider_s_spellings_read_alike(written: str) -> None:
    assert repr(for_limit(written)) == repr(for_limit("1000/min"))


def test_most_of_the_rate_is_used() -> None:
    """The refill is the provider's rate less the headroom (5 %) wherever the window
    leaves room for one token and the guard."""
    for limit in ("5/s", "1000/min", "10000/day", "5000/hour"):
        assert for_limit(limit).refill_per_sec == pytest.approx(parse_rate(limit).per_second * 0.95)
    assert for_limit("1000/min", headroom=0.1).refill_per_sec == pytest.approx(1000 / 60 * 0.9)


@settings(deadline=None, max_examples=300)
@given(
    count=st.integers(1, 40),
    window=st.sampled_from([0.5, 1.0, 10.0, 60.0, 3600.0]),
    burst=st.none() | st.integers(1, 40),
    # Mostly back to back and blocking (a saturated limiter is where a window fills),
    # with pauses of up to one and a half windows between.
    steps=st.lists(
        st.tuples(st.just(0.0) | st.just(0.0) | st.floats(0, 1.5), st.sampled_from([True, True, False])),
        max_size=150,
    ),
    scale=st.sampled_from([0.01, 0.1, 1.0]),
)
def test_no_window_of_the_period_sees_more_than_the_limit(
    count: int, window: float, burst: int | None, steps: list[tuple[float, bool]], scale: float
) -> None:
    """For any sequence of acquires and try_acquires, the grants in any closed interval
    of the provider's window number at most its count; with a burst above the count
    (a provider that is a bucket), at most the burst plus the rate times the span."""
    clock = ManualClock(1000.0)
    limit = f"{count}/{window:g}s"
    limiter = for_limit(limit, burst=burst, clock=clock)
    times = _granted(limiter, clock, [(gap * window * scale, blocking) for gap, blocking in steps])
    if burst is None or burst <= count:
        assert _most_in_closed_window(times, window) <= count, (limiter, times)
    rho = count / window
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            # Every provider that publishes this limit as a bucket of the burst at its rate.
            assert j - i + 1 <= (burst if burst is not None else count) + rho * (times[j] - first) + 1e-6


def test_sending_up_to_the_guard_late_stays_within_the_window() -> None:
    """Grants sent up to 50 ms late (the default guard) still land at most 5 in any
    second: the guard's time is folded into the sizes."""
    clock = ManualClock(0.0)
    limiter = for_limit("5/s", clock=clock)
    granted = [clock.now() for _ in range(200) if limiter.acquire() >= 0]
    # Worst case: alternate grants on time and 50 ms late.
    arrivals = sorted(t + (0.05 if i % 2 else 0.0) for i, t in enumerate(granted))
    assert _most_in_closed_window(arrivals, 1.0) <= 5


def test_it_shares_a_budget_through_a_backend_under_its_name() -> None:
    """Two workers on one shared budget: one limit between them."""
    clock = ManualClock(0.0)
    backend = RedisBackend(fakeredis.FakeRedis())
    one = for_limit("10/min", backend=backend, name="geocode", clock=clock)
    two = for_limit("10/min", backend=backend, name="geocode", clock=clock)
    assert one.name == "geocode"
    assert one.try_acquire()
    assert not two.try_acquire()  # capacity 1: the other worker's grant took it
    with pytest.raises(ValueError, match="name is required with a shared backend"):
        for_limit("10/min", backend=backend)
    memory = MemoryBackend()
    assert for_limit("5/s", backend=memory, name="a").for_key("k").key == "k"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: for_limit(FIVE), TypeError, r"limit must be the provider's rate as text, e.g. '5/s' .*got int 5"),
        (lambda: for_limit("5"), ValueError, r"limit: expected a rate like N/s.*got '5'"),
        (lambda: for_limit("5/fortnight"), ValueError, r"limit: unknown unit 'fortnight'"),
        (lambda: for_limit("0/s"), ValueError, r"limit: the count and the window must be > 0, got '0/s'"),
        # Digits of other scripts (here Arabic-Indic five) and look-alike letters are not a rate.
        (lambda: for_limit("\u0665/s"), ValueError, r"limit: expected a rate like N/s.*got '\u0665/s'"),
        (lambda: for_limit("5/\u212a"), ValueError, r"limit: expected a rate like N/s"),
        (lambda: for_limit("x" * 10_000), ValueError, r"limit must be a rate like '1000/min', got 'xxx.*characters"),
        (lambda: for_limit("5/s", burst=0), ValueError, r"burst must be > 0 and finite, got 0"),
        (lambda: for_limit("5/s", burst=FIVE_AS_TEXT), TypeError, r"burst must be a number, got str '5'"),
        (lambda: for_limit("5/s", headroom=1), ValueError, r"headroom must be from 0 to below 1, got 1"),
        (lambda: for_limit("5/s", guard=-1), ValueError, r"guard must be seconds >= 0"),
        (
            lambda: for_limit("5/s", burst=TEN_PER_MINUTE),
            TypeError,
            r"^burst must be a number, got str '10/minute': a burst is a number of requests at once, not a rate: "
            r"burst=10$",
        ),
        # Sizes no store keeps: the message names what the caller wrote, then why.
        (
            lambda: for_limit("5/1000000000000s"),
            ValueError,
            r"^limit='5/1000000000000s' calls for TokenBucket\(capacity=1, refill_per_sec=4.75e-12\), which no "
            r"limiter keeps: refill_per_sec=",
        ),
        (lambda: for_limit("5/s", burst=1e300), ValueError, r"^limit='5/s', burst=1e\+300 calls for TokenBucket"),
    ],
)
def test_bad_input_names_the_argument_and_the_value(call: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]


# -- a rate written where a number goes --------------------------------------------------

RATE_HINT = r"for a provider's limit as text use ratelimit\.for_limit\('10/minute'\)"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: TokenBucket(5, TEN_PER_MINUTE), rf"refill_per_sec must be a number, got str '10/minute': {RATE_HINT}"),
        (lambda: TokenBucket(5, refill_per_sec=TEN_PER_MINUTE), r"or write refill_per_sec=10/60 \(tokens per second\)"),
        (
            lambda: TokenBucket(TEN_PER_MINUTE),  # type: ignore[call-arg]
            rf"capacity must be a number, got str '10/minute': {RATE_HINT}",
        ),
        (
            lambda: TokenBucket(capacity=TEN_PER_MINUTE),  # type: ignore[call-arg]
            rf"capacity must be a number, got str '10/minute': {RATE_HINT}",
        ),
        (lambda: LeakyBucket(5, TEN_PER_MINUTE), r"leak_per_sec must be a number.*or write leak_per_sec=10/60"),
        (
            lambda: LeakyBucket(TEN_PER_MINUTE),  # type: ignore[call-arg]
            rf"capacity must be a number, got str '10/minute': {RATE_HINT}",
        ),
        (
            lambda: SlidingWindow(TEN_PER_MINUTE),  # type: ignore[call-arg]
            r"limit must be a number.*or write limit=10, window_seconds=60",
        ),
        (lambda: SlidingWindow(10, TEN_PER_MINUTE), r"window_seconds must be a number.*limit=10, window_seconds=60"),
        (
            lambda: TokenBucket(FIVE_AS_TEXT, 1),
            r"capacity must be a number, got str '5': write it as a number, without quotes",
        ),
    ],
)
def test_a_rate_where_a_number_goes_says_how_to_write_it(call: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()  # type: ignore[operator]


def test_text_that_is_no_rate_nor_number_gets_the_plain_message() -> None:
    with pytest.raises(TypeError, match=r"^refill_per_sec must be a number, got str 'fast'$"):
        TokenBucket(5, "fast")  # type: ignore[arg-type]
    assert math.isinf(TokenBucket(5, math.inf).refill_per_sec)
