"""feedback(): the provider's word lowers the budget, on every store, never raises it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Composite,
    LeakyBucket,
    ManualClock,
    SlidingWindow,
    TokenBucket,
    parse_rate_limit_headers,
)
from ratelimit._limiting.feedback import restriction

from conftest import unique_name

Make = Callable[..., Any]


def test_a_429_with_retry_after_pauses_then_resumes_at_the_configured_rate(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 5, 10)
    info = limiter.feedback({"Retry-After": "2"}, status=429)
    assert info.retry_after == 2.0
    assert not limiter.try_acquire()
    # The first grant lands on the end of the pause, the rest follow 0.1 s apart:
    # the burst that idled during the pause is not released all at once.
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([2.0, 0.1, 0.1])


def test_remaining_below_what_the_limiter_would_grant_lowers_it(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 1)
    limiter.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "5"}, status=200)
    # Two grants before the reset, spread evenly over it, at 2.5 s and 5 s: not the
    # limiter's own burst now, nor both at the end. From the reset on, the limiter's
    # own budget, whole again.
    assert not limiter.try_acquire()
    assert [limiter.acquire() for _ in range(2)] == pytest.approx([2.5, 2.5])
    assert clock.now() == pytest.approx(1_000.0 + 5.0)
    assert limiter.try_acquire()


def test_remaining_close_to_the_reset_is_spread_over_it(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 1)
    limiter.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1"}, status=200)
    assert not limiter.try_acquire()
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([1 / 3, 1 / 3, 1 / 3])


def test_a_higher_remaining_never_raises_the_budget(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 2, 1)
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    limiter.feedback({"X-RateLimit-Remaining": "100", "X-RateLimit-Reset": "60"}, status=200)
    assert not limiter.try_acquire()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-RateLimit-Remaining": "0"},  # no reset: nothing to wait for
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) - 100)},  # past
        {"Retry-After": "garbage"},
        {"X-RateLimit-Remaining": "-3", "X-RateLimit-Reset": "-10"},
    ],
)
def test_stale_or_garbage_headers_change_nothing(make: Make, clock: ManualClock, headers: dict[str, str]) -> None:
    limiter = make(TokenBucket, 2, 1)
    limiter.feedback(headers, status=429)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]


def test_a_pause_only_extends_to_the_later_deadline(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 1, 1)
    limiter.feedback({"Retry-After": "5"}, status=503)
    limiter.feedback({"Retry-After": "2"}, status=503)
    assert limiter.acquire() == 5.0


def test_remaining_zero_with_a_reset_pauses(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 3, 3)
    limiter.feedback({"RateLimit": '"default";r=0;t=4', "RateLimit-Policy": '"default";q=3;w=1'}, status=200)
    assert limiter.acquire() == 4.0


def test_of_several_policies_the_binding_one_paces_whole(make: Make, clock: ManualClock) -> None:
    # 1,000 of the day left for an hour binds (0.28/s) over 50 a minute for 30 s (1.7/s).
    # Its 1,000 are spread over the 3,600 s: one every 3.6 s, every grant; the minute's
    # 50 over the day's hour, a mix of the two, would have allowed one per 72 s.
    limiter = make(TokenBucket, 20, 5)
    headers = {
        "RateLimit": '"minute";r=50;t=30, "daily";r=1000;t=3600',
        "RateLimit-Policy": '"minute";q=100;w=60, "daily";q=5000;w=86400',
    }
    info = limiter.feedback(headers, status=200)
    assert (info.limit, info.remaining, info.reset_after, info.window) == (5000, 1000, 3600, 86400)
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([3.6, 3.6, 3.6])


def test_a_success_with_a_retry_after_does_not_pause(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 1, 1)
    limiter.feedback({"Retry-After": "30"}, status=200)
    assert limiter.try_acquire()


def test_waiters_queued_during_a_pause_go_after_it_in_order(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 3, 2)
    limiter.feedback({"Retry-After": "1"}, status=429)
    # Nothing sleeps here (try with a timeout that is too short), then all queue up.
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0.5)
    assert info.value.retry_after == pytest.approx(1.0)
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([1.0, 0.5, 0.5])


def test_leaky_bucket_pause(make: Make, clock: ManualClock) -> None:
    limiter = make(LeakyBucket, 10, 2)
    limiter.feedback({"Retry-After": "3"}, status=429)
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([3.0, 0.5, 0.5])


def test_sliding_window_pause_and_remaining(make: Make, clock: ManualClock) -> None:
    limiter = make(SlidingWindow, 4, 10)
    limiter.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "6"}, status=200)
    assert not limiter.try_acquire()
    assert limiter.acquire() == 6.0
    limiter.feedback({"Retry-After": "20"}, status=429)
    assert limiter.acquire() == 20.0


def test_approximate_window_pause(make: Make, clock: ManualClock) -> None:
    limiter = make(SlidingWindow, 4, 10, approximate=True)
    limiter.feedback({"Retry-After": "20"}, status=429)
    assert not limiter.try_acquire()
    assert limiter.acquire() >= 20.0


def test_composite_pauses_every_member_but_ignores_remaining(make: Make, clock: ManualClock) -> None:
    limiter = make(Composite, [TokenBucket(2, 1), SlidingWindow(10, 60)])
    limiter.feedback({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}, status=200)
    assert limiter.acquire() == 30.0
    limiter.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "5"}, status=200)
    assert limiter.acquire() == 1.0  # the bucket's own spacing; `remaining` is not applied


def test_a_provider_announcing_a_lower_rate_is_reported(
    make: Make, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = make(TokenBucket, 10, 5)
    headers = {"RateLimit-Limit": "60", "RateLimit-Remaining": "59", "RateLimit-Policy": "60;w=60"}
    with caplog.at_level(logging.WARNING, logger="ratelimit"):
        info = limiter.feedback(headers)
    assert info.limit == 60
    assert info.window == 60
    assert "provider announces 60 per 60 s" in caplog.text
    # The configuration is not changed by it.
    assert limiter.refill_per_sec == 5


def test_feedback_async(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 1, 1)

    async def scenario() -> float:
        await limiter.feedback_async({"Retry-After": "3"}, status=429)
        wait: float = await limiter.acquire_async()
        return wait

    assert asyncio.run(scenario()) == 3.0


@pytest.mark.parametrize("status", ["429", 429.0, True])
def test_status_must_be_an_int(status: Any) -> None:
    with pytest.raises(TypeError, match="status must be an int"):
        TokenBucket(1, 1).feedback({}, status=status)


def test_a_503_without_retry_after_is_an_outage_not_a_pause(make: Make) -> None:
    limiter = make(TokenBucket, 5, 10)
    # A 503's reset header (an hourly window, say) must not stop every worker until
    # the reset: only what it says remains counts, as on any response.
    limiter.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset-After": "2"}, status=503)
    assert limiter.acquire() < 2.0
    other = make(TokenBucket, 5, 10)
    # With Retry-After it is a refusal, like a 429: a pause.
    other.feedback({"Retry-After": "2"}, status=503)
    assert other.acquire() == pytest.approx(2.0)


def test_a_429_without_retry_after_pauses_until_the_reset(make: Make) -> None:
    limiter = make(TokenBucket, 5, 10)
    limiter.feedback({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset-After": "2"}, status=429)
    assert not limiter.try_acquire()
    assert limiter.acquire() == pytest.approx(2.0)


def test_a_far_reset_is_paced_evenly_not_stalled_for(make: Make, clock: ManualClock) -> None:
    # GitHub: 5,000 an hour; 4,000 left with 58 minutes to go. Placed as late as they
    # fit, the 4,000 grants would wait ten minutes with budget left. Spread evenly, each
    # goes at the even pace (3,480 / 4,000 s), whoever asks.
    limiter = make(TokenBucket, 20, 1000 / 60)
    limiter.feedback({"X-RateLimit-Remaining": "4000", "X-RateLimit-Reset-After": "3480"}, status=200)
    assert [limiter.acquire() for _ in range(4)] == pytest.approx([3480 / 4000] * 4)


def test_a_far_reset_fed_back_after_every_response_goes_at_its_pace(make: Make, clock: ManualClock) -> None:
    # Planned over stretches from each response's own moment, the grants placed at a
    # stretch's end kept moving away (one every 9.3 s where 1.15 a second was the
    # pace); planned a grant at a time from each response, the time a response takes to
    # come back was lost at each (0.81 of the pace). The pace is kept from grant to
    # grant instead.
    limiter = make(TokenBucket, 20, 1000 / 60)
    start, reset, left, latency = clock.now(), 3480.0, 4000, 0.2
    sent = []
    while clock.now() - start < 120:
        limiter.acquire()
        sent.append(clock.now() - start)
        left -= 1
        clock.advance(latency)
        elapsed = clock.now() - start
        headers = {"X-RateLimit-Remaining": str(left), "X-RateLimit-Reset-After": f"{reset - elapsed:.3f}"}
        limiter.feedback(headers, status=200)
    pace = 4000 / 3480
    # The first grant went before any response; from the second on, the even pace.
    paced = sent[1:]
    rate = (len(paced) - 1) / (paced[-1] - paced[0])
    assert 0.99 * pace <= rate <= pace * (1 + 1e-9)
    assert all(b - a >= 3480 / 4000 - 1e-6 for a, b in itertools.pairwise(paced))


def test_a_far_reset_with_little_left_spreads_it(make: Make, clock: ManualClock) -> None:
    # 30 left over 3,000 s: one grant per 100 s, not 30 at once then a 50-minute silence
    # (nor a 50-minute wait first).
    limiter = make(TokenBucket, 20, 5)
    limiter.feedback({"X-RateLimit-Remaining": "30", "X-RateLimit-Reset-After": "3000"}, status=200)
    assert limiter.acquire() <= 100.0
    assert not limiter.try_acquire()


# -- GitLab: an epoch RateLimit-Reset ---------------------------------------------------

GITLAB_NOW = 1_700_000_000.0


def gitlab(remaining: int, reset_in: float) -> dict[str, str]:
    """GitLab.com's headers: the draft's names, the reset a UNIX time and an HTTP-date."""
    reset = GITLAB_NOW + reset_in
    return {
        "RateLimit-Limit": "600",
        "RateLimit-Observed": str(600 - remaining),
        "RateLimit-Remaining": str(remaining),
        "RateLimit-Reset": f"{reset:.0f}",
        "RateLimit-ResetTime": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(reset)),
    }


def grants_before(limiter: Any, clock: ManualClock, seconds: float) -> int:
    start, granted = clock.now(), 0
    while True:
        limiter.acquire()
        if clock.now() - start >= seconds - 1e-9:
            return granted
        granted += 1


def test_gitlab_remaining_is_spread_up_to_its_epoch_reset(make: Make, clock: ManualClock) -> None:
    # 594 of 600 left for the 57 s to the reset, fed back after each response: one grant
    # per 57/594 s, 104 in the next 10 s. Read as a delay of 1.7e9 s (cut to an hour),
    # they got 1: 60 times too slow.
    limiter = make(TokenBucket, 200, 100)
    info = limiter.feedback(gitlab(594, 57), status=200, now=GITLAB_NOW)
    assert info.reset_after == 57
    start, left = clock.now(), 594
    granted = 0
    while True:
        limiter.acquire()
        elapsed = clock.now() - start
        if elapsed >= 10.0 - 1e-9:
            break
        granted += 1
        left -= 1
        limiter.feedback(gitlab(left, 57), status=200, now=GITLAB_NOW + elapsed)
    assert granted == 104


def test_gitlab_spent_pauses_until_its_epoch_reset_not_an_hour(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 20, 10)
    limiter.feedback(gitlab(0, 40), status=429, now=GITLAB_NOW)
    assert limiter.acquire() == pytest.approx(40.0)


def test_gitlab_fed_back_on_every_response_uses_its_budget(make: Make, clock: ManualClock) -> None:
    # Workers feeding back each response's headers, as the README asks: 594 left for the
    # 57 s to the reset, sent at the limiter's 5/s (its own rate binds: 20 + 5 x 57 at
    # most). Read as an hour, 5 went.
    limiter = make(TokenBucket, 20, 5)
    start, used = clock.now(), 6
    while True:
        elapsed = clock.now() - start
        limiter.feedback(gitlab(600 - used, 57), status=200, now=GITLAB_NOW + elapsed)
        limiter.acquire()
        if clock.now() - start >= 57:
            break
        used += 1
    assert 280 <= used - 6 <= 20 + 5 * 57


# -- OpenAI and Anthropic: a reset is when the bucket is full again -----------------------


def openai(limit: int, remaining: int, reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": "150000",
        "x-ratelimit-remaining-tokens": "149984",
        "x-ratelimit-reset-tokens": "6ms",
    }


def test_openai_spent_pauses_until_one_request_is_back_not_the_whole_bucket(make: Make, clock: ManualClock) -> None:
    # 20 a bucket, empty, full again in 2 s: it refills one every 0.1 s, so the next
    # request may go in 0.1 s, not 2 s; then at the configured pace.
    limiter = make(TokenBucket, 20, 10)
    info = limiter.feedback(openai(20, 0, "2s"), status=200)
    assert info.gradual
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([0.1, 0.1, 0.1])


def test_openai_spent_pauses_a_composite_until_one_request_is_back(make: Make, clock: ManualClock) -> None:
    # The README's pattern: requests and tokens as one Composite, fed OpenAI's headers.
    llm = make(Composite, [TokenBucket(20, 10), TokenBucket(150_000, 2_500)])
    llm.feedback(openai(20, 0, "2s"), status=429)
    # 0.1 s, and the 100 tokens paced in after the pause (no burst after it).
    assert 0.1 <= llm.acquire([1, 100]) <= 0.1 + 100 / 2_500


def test_openai_refused_pauses_until_one_request_is_back(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 20, 10)
    limiter.feedback(openai(60, 0, "6s"), status=429)
    assert limiter.acquire() == pytest.approx(0.1)


def test_openai_a_little_left_goes_before_the_next_one_is_back(make: Make, clock: ManualClock) -> None:
    # 1 of 60 left, full again in 59 s: one comes back each second. Spent evenly until
    # it would be full, that is 60 over the 59 s: one every 59/60 s, not one grant
    # placed at the end of 59 s.
    limiter = make(TokenBucket, 20, 1)
    limiter.feedback(openai(60, 1, "59s"), status=200)
    assert [limiter.acquire() for _ in range(2)] == pytest.approx([59 / 60, 59 / 60])


def test_anthropic_spent_pauses_until_one_request_is_back(make: Make, clock: ManualClock) -> None:
    # Anthropic's reset is when the bucket is fully replenished too: 50 over 60 s.
    limiter = make(TokenBucket, 20, 10)
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2023-11-14T22:14:20Z",
    }
    limiter.feedback(headers, status=200, now=GITLAB_NOW)
    assert limiter.acquire() == pytest.approx(60 / 50)


@pytest.mark.parametrize(
    ("headers", "status", "pause"),
    [
        # no remaining: how much is back is unknown, so the whole way, as before
        ({"x-ratelimit-limit-requests": "20", "x-ratelimit-reset-requests": "2s"}, 429, 2.0),
        # no limit: the pace of the refill is unknown
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}, 200, 2.0),
        # a limit of 0, or below what remains: nonsense, so the whole way
        (openai(0, 0, "2s"), 200, 2.0),
        (openai(5, 10, "2s"), 429, 2.0),
        # a retry-after still has the last word on a refusal
        ({**openai(20, 0, "2s"), "Retry-After": "3"}, 429, 3.0),
        # a reset past the cap is cut to it, so its pace is unknown: the cap, whole. A
        # day's bucket (Groq's requests) refills one in 6 s, not one per 3600 / 14400 s.
        (openai(14400, 0, "24h0m0s"), 200, 3600.0),
        (openai(2, 0, "2562047h47m16s"), 200, 3600.0),
        # up to the cap, the pace holds
        (openai(14400, 0, "1h0m0s"), 200, 0.25),
        # less than one to come back: not one more before it is full, so the reset
        (
            {
                "x-ratelimit-limit-requests": "1",
                "x-ratelimit-remaining-requests": "0.5",
                "x-ratelimit-reset-requests": "2s",
            },
            429,
            2.0,
        ),
    ],
    ids=[
        "no remaining",
        "no limit",
        "limit 0",
        "remaining above limit",
        "retry-after",
        "a day",
        "huge",
        "an hour",
        "a fraction to come back",
    ],
)
def test_openai_odd_headers_pause_no_less_than_the_provider_allows(
    make: Make, clock: ManualClock, headers: dict[str, str], status: int, pause: float
) -> None:
    limiter = make(TokenBucket, 20, 1000)
    limiter.feedback(headers, status=status)
    assert limiter.acquire() == pytest.approx(pause)


# -- odd headers, at random: never more budget, never a pause past the cap ---------------

CAP = 3600.0


def _date(offset: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(max(0.0, GITLAB_NOW + offset)))


_numbers = st.one_of(
    st.sampled_from(["0", "1", "5", "59", "60", "600", "0.5", "-1", "-1700000057", "NaN", "inf", "", "x", "9" * 31]),
    st.integers(min_value=0, max_value=10**6).map(str),
    # epochs around now, far past and far ahead, in seconds and milliseconds
    st.floats(min_value=-1e9, max_value=1e9).map(lambda d: f"{GITLAB_NOW + d:.3f}"),
    st.floats(min_value=-1e6, max_value=1e6).map(lambda d: str(int((GITLAB_NOW + d) * 1000))),
)
_durations = st.one_of(
    _numbers,
    st.sampled_from(["1s", "6m0s", "20ms", "2562047h47m16.854775807s", "24h0m0s", "0s", "1h", "-1s", "1x"]),
    st.floats(min_value=0, max_value=1e5).map(lambda d: f"{d:.3f}s"),
)
_dates = st.one_of(
    st.floats(min_value=-1e10, max_value=1e11).map(_date),
    st.sampled_from(["Fri, 31 Dec 9999 23:59:59 GMT", "Tue, 31 Feb 2023 25:61:00 GMT", "soon", "2023-11-14T22:14:17Z"]),
)
_rfc3339 = st.one_of(
    st.floats(min_value=-1e6, max_value=1e7).map(
        lambda d: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(GITLAB_NOW + d))
    ),
    st.sampled_from(["9999-12-31T23:59:59Z", "2023-11-14T22:15", "garbage"]),
)
_FIELDS: dict[str, Any] = {
    "RateLimit-Limit": _numbers,
    "RateLimit-Remaining": _numbers,
    "RateLimit-Observed": _numbers,
    "RateLimit-Reset": _numbers,
    "RateLimit-ResetTime": _dates,
    "X-RateLimit-Remaining": _numbers,
    "X-RateLimit-Reset": _numbers,
    "x-ratelimit-limit-requests": _numbers,
    "x-ratelimit-remaining-requests": _numbers,
    "x-ratelimit-reset-requests": _durations,
    "anthropic-ratelimit-requests-limit": _numbers,
    "anthropic-ratelimit-requests-remaining": _numbers,
    "anthropic-ratelimit-requests-reset": _rfc3339,
    "Retry-After": st.one_of(_numbers, _dates),
}
odd_headers = st.fixed_dictionaries({}, optional=_FIELDS)
statuses = st.sampled_from([None, 200, 429, 503])


@settings(max_examples=400, deadline=None)
@given(odd_headers, statuses)
def test_odd_headers_ask_for_no_more_than_they_say_and_never_past_the_cap(
    headers: dict[str, str], status: int | None
) -> None:
    info = parse_rate_limit_headers(headers, now=GITLAB_NOW)
    for wait in (info.reset_after, info.retry_after):
        assert wait is None or 0 <= wait <= CAP
    change = restriction(info, status)
    if change is None:
        return
    remaining, seconds = change
    assert 0 < seconds <= CAP
    assert remaining >= 0
    if info.remaining is not None and remaining > 0:
        # Spread over the reset: what remains, or what the provider says comes back by
        # then (a bucket full again at its reset, a policy's quota per window).
        most = info.remaining
        if info.gradual and info.limit is not None:
            most = max(most, info.limit)
        if info.limit is not None and info.window:
            most = max(most, info.limit * seconds / info.window)
        assert remaining <= most * (1 + 1e-9)
    if remaining > 0:
        assert remaining >= 1
    if info.gradual and seconds != info.retry_after:
        assert info.reset_after is not None
        assert seconds <= info.reset_after


@settings(max_examples=150, deadline=None)
@given(odd_headers, statuses)
def test_odd_headers_never_give_a_limiter_more(headers: dict[str, str], status: int | None) -> None:
    clocks = [ManualClock(start=1_000.0), ManualClock(start=1_000.0)]
    plain, fed = (TokenBucket(5, 2, clock=c) for c in clocks)
    fed.feedback(headers, status=status, now=GITLAB_NOW)
    granted = [0, 0]
    for _ in range(120):  # 30 s, a try every 0.25 s
        for i, limiter in enumerate((plain, fed)):
            granted[i] += limiter.try_acquire()
            clocks[i].advance(0.25)
    assert granted[1] <= granted[0]
    # and the pause it set ends within the cap (plus one grant's spacing)
    assert fed.acquire() <= CAP + 0.5 + 1e-6


# -- what a response says bounds every grant until its reset, evenly ---------------------


def test_a_near_reset_is_spread_over_it_not_sent_at_its_end(make: Make, clock: ManualClock) -> None:
    # "11 left in 10 s" on a limiter that would send 20 a second: one every 10/11 s,
    # the last at the reset; not a wait of 9.3 s and then all 11 at once.
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "11", "X-RateLimit-Reset-After": "10"}, status=200)
    start = clock.now()
    sent = []
    for _ in range(11):
        limiter.acquire()
        sent.append(clock.now() - start)
    assert sent == pytest.approx([10 / 11 * k for k in range(1, 12)])


def test_one_response_bounds_the_grants_of_every_caller_sharing_the_budget(make: Make, clock: ManualClock) -> None:
    # Two limiters on one name (two processes, or two threads' handles): one response fed
    # back by one of them paces both, grant after grant, with no response of their own.
    name = unique_name("paced")
    first, second = make(TokenBucket, 40, 20, name=name), make(TokenBucket, 40, 20, name=name)
    first.feedback({"X-RateLimit-Remaining": "5", "X-RateLimit-Reset-After": "2"}, status=200)
    waits = [(first, second)[i % 2].acquire() for i in range(5)]
    assert waits == pytest.approx([0.4] * 5)
    # From the reset on, the limiter's own budget.
    assert second.try_acquire()


def test_a_pace_is_kept_from_grant_to_grant_across_responses(make: Make, clock: ManualClock) -> None:
    # Responses fed back while grants are queued keep the pace's next slot: the time a
    # response takes to come back is not added to every grant.
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "10", "X-RateLimit-Reset-After": "10"}, status=200)
    assert limiter.acquire() == pytest.approx(1.0)
    clock.advance(0.3)
    limiter.feedback({"X-RateLimit-Remaining": "9", "X-RateLimit-Reset-After": "8.7"}, status=200)
    assert limiter.acquire() == pytest.approx(0.7)


def test_a_later_response_sets_the_pace(make: Make, clock: ManualClock) -> None:
    # The latest word on what is left sets the interval from the next slot on, slower or
    # faster (never faster than the limiter's own rate).
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "10", "X-RateLimit-Reset-After": "1"}, status=200)
    limiter.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset-After": "1"}, status=200)
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([0.1, 0.5, 0.4])


def test_reset_forgets_the_pace(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "2", "X-RateLimit-Reset-After": "60"}, status=200)
    assert not limiter.try_acquire()
    limiter.reset()
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, True]


def test_a_pause_holds_inside_a_pace(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "100", "X-RateLimit-Reset-After": "10"}, status=200)
    limiter.feedback({"Retry-After": "3"}, status=429)
    assert limiter.acquire() == pytest.approx(3.0)
    assert limiter.acquire() == pytest.approx(0.1)


@pytest.mark.parametrize("kind", ["leaky", "window", "approximate"])
def test_every_algorithm_keeps_the_pace(make: Make, clock: ManualClock, kind: str) -> None:
    limiter = {
        "leaky": lambda: make(LeakyBucket, 10, 20),
        "window": lambda: make(SlidingWindow, 20, 1),
        "approximate": lambda: make(SlidingWindow, 20, 1, approximate=True),
    }[kind]()
    limiter.feedback({"X-RateLimit-Remaining": "4", "X-RateLimit-Reset-After": "2"}, status=200)
    assert [limiter.acquire() for _ in range(4)] == pytest.approx([0.5] * 4)


# -- the IETF fields: whole seconds, a policy's pace ------------------------------------


def ietf(remaining: int, seconds: int, quota: int = 20, window: int = 1) -> dict[str, str]:
    return {"RateLimit": f'"default";r={remaining};t={seconds}', "RateLimit-Policy": f'"default";q={quota};w={window}'}


def test_ietf_fields_pace_at_the_policy_not_at_the_end_of_the_second(make: Make, clock: ManualClock) -> None:
    # A bucket of 10 refilled at 20 a second says "3 left, more within the second"
    # (t is whole seconds, rounded up): its quota comes back at 20 a second, so the
    # grants go at that pace, not 3 placed at the end of the second.
    limiter = make(TokenBucket, 20, 40)
    limiter.feedback(ietf(3, 1), status=200)
    assert [limiter.acquire() for _ in range(4)] == pytest.approx([0.05] * 4)


def test_ietf_fields_spent_within_a_second_is_no_stall_of_a_second(make: Make, clock: ManualClock) -> None:
    # None left, t=1: a fraction of a second rounded up. At the policy's 20 a second,
    # the next is back in 0.05 s, not in a whole second.
    limiter = make(TokenBucket, 20, 40)
    limiter.feedback(ietf(0, 1), status=200)
    assert [limiter.acquire() for _ in range(3)] == pytest.approx([0.05] * 3)


def test_ietf_fields_spent_for_longer_pause_until_then(make: Make, clock: ManualClock) -> None:
    # None left for 30 s: a wait of more than the rounding; a window's budget comes
    # back at its reset, so nothing goes before it.
    limiter = make(TokenBucket, 20, 40)
    limiter.feedback(ietf(0, 30, quota=100, window=60), status=200)
    assert limiter.acquire() == pytest.approx(30.0)


def test_ietf_refusal_pauses_for_its_retry_after(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 20, 40)
    limiter.feedback({**ietf(0, 1), "Retry-After": "1"}, status=429)
    assert limiter.acquire() == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=50),
    st.floats(min_value=0.01, max_value=100),
    st.lists(st.tuples(st.floats(min_value=0, max_value=5), st.sampled_from([1, 2])), max_size=60),
)
def test_a_response_bounds_every_grant_until_its_reset(remaining: int, seconds: float, steps: Any) -> None:
    # Whatever callers ask and when: no more than `remaining` tokens go by the reset, and
    # never two closer than the even pace.
    clock = ManualClock(start=1_000.0)
    limiter = TokenBucket(100, 1000, clock=clock)
    limiter.feedback({"X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset-After": f"{seconds!r}"}, status=200)
    end = clock.now() + seconds
    interval = seconds / remaining
    granted: list[tuple[float, int]] = []
    for pause, tokens in steps:
        clock.advance(pause * interval)
        if limiter.try_acquire(tokens):
            granted.append((clock.now(), tokens))
    before = [(t, n) for t, n in granted if t < end - 1e-9]
    assert sum(n for _, n in before) <= remaining
    for (a, n), (b, _) in itertools.pairwise(before):
        assert b - a >= n * interval - 1e-6


# -- attacked: many callers at once, extreme figures -----------------------------------


def test_a_pace_holds_against_many_threads_at_once(make: Make, clock: ManualClock) -> None:
    # One response: 5 left for 10 s, one every 2 s. Thirty-two threads asking at once get
    # nothing now, and exactly one of them the slot at 2 s.
    name = unique_name("crowd")
    limiters = [make(TokenBucket, 100, 1000, name=name) for _ in range(4)]
    limiters[0].feedback({"X-RateLimit-Remaining": "5", "X-RateLimit-Reset-After": "10"}, status=200)

    def crowd() -> int:
        results: list[bool] = []
        lock = threading.Lock()

        def ask(limiter: Any) -> None:
            granted = limiter.try_acquire()
            with lock:
                results.append(granted)

        pool = [threading.Thread(target=ask, args=(limiters[i % 4],)) for i in range(32)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return sum(results)

    assert crowd() == 0
    clock.advance(2.0)
    assert crowd() == 1
    clock.advance(1.0)
    assert crowd() == 0


@pytest.mark.parametrize(
    ("remaining", "reset"),
    [("1e300", "3600"), ("1", "0.000001"), ("1", "3600"), ("999999999999", "0.001"), ("1.5", "0.0000001")],
)
def test_extreme_figures_never_raise_nor_stall_past_the_reset(
    make: Make, clock: ManualClock, remaining: str, reset: str
) -> None:
    limiter = make(TokenBucket, 10, 10)
    info = limiter.feedback({"X-RateLimit-Remaining": remaining, "X-RateLimit-Reset-After": reset}, status=200)
    assert info.reset_after is not None
    # The first grant comes no later than the reset, and the pace never outlives it.
    assert limiter.acquire() <= info.reset_after + 1e-6
    clock.advance(info.reset_after)
    assert limiter.acquire() <= 0.1 + 1e-9


def test_peek_tells_the_wait_a_pace_puts_on_a_request(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 40, 20)
    limiter.feedback({"X-RateLimit-Remaining": "4", "X-RateLimit-Reset-After": "2"}, status=200)
    assert limiter.peek() == pytest.approx(0.5)
    assert limiter.acquire() == pytest.approx(0.5)
    assert limiter.peek() == pytest.approx(0.5)
