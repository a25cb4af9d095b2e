"""Limiters' counters and events, on every store."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

import ratelimit
from ratelimit import AcquireTimeout, Composite, ManualClock, SlidingWindow, TokenBucket
from ratelimit.events import Denied, Event, Granted, Paused

Make = Callable[..., Any]


def test_grants_and_denials_are_counted_and_told(make: Make) -> None:
    bucket = make(TokenBucket, 2, 1)
    seen: list[Event] = []
    bucket.subscribe(seen.append)
    assert [bucket.try_acquire(), bucket.try_acquire(), bucket.try_acquire()] == [True, True, False]
    stats = bucket.stats()
    assert (stats.granted, stats.tokens, stats.denied) == (2, 2.0, 1)
    assert seen[:2] == [Granted(bucket.name, 1, 0.0)] * 2
    denied = seen[2]
    assert isinstance(denied, Denied)
    assert denied.retry_after == pytest.approx(1.0)


def test_waits_are_summed_and_the_longest_kept(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 1, 2)
    seen: list[Event] = []
    bucket.subscribe(seen.append)
    for _ in range(3):
        bucket.acquire()
    stats = bucket.stats()
    assert stats.granted == 3
    assert stats.waited == pytest.approx(1.0)
    assert stats.max_wait == pytest.approx(0.5)
    assert [e.wait for e in seen if isinstance(e, Granted)] == pytest.approx([0.0, 0.5, 0.5])


def test_a_timed_out_acquire_is_a_denial(make: Make) -> None:
    bucket = make(TokenBucket, 1, 0.5)
    bucket.acquire()
    with pytest.raises(AcquireTimeout):
        bucket.acquire(timeout=1)
    stats = bucket.stats()
    assert (stats.granted, stats.denied, stats.waited) == (1, 1, 0.0)


def test_weighted_requests_count_their_tokens(make: Make) -> None:
    window = make(SlidingWindow, 1_000, 60)
    window.acquire(600)
    window.try_acquire(2.5)
    assert window.stats().tokens == 602.5


def test_feedback_that_pauses_is_an_event_and_a_log_line(make: Make, caplog: pytest.LogCaptureFixture) -> None:
    bucket = make(TokenBucket, 10, 5)
    seen: list[Event] = []
    bucket.subscribe(seen.append)
    with caplog.at_level(logging.INFO, logger="ratelimit"):
        bucket.feedback({"Retry-After": "3"}, status=429)
        bucket.feedback({"X-RateLimit-Remaining": "50"}, status=200)  # above what we hold: nothing
    [paused] = seen
    assert paused == Paused(bucket.name, 429, 0.0, 3.0)
    assert bucket.stats().restricted == 1
    assert "Paused" in caplog.text


def test_grants_are_not_logged(make: Make, caplog: pytest.LogCaptureFixture) -> None:
    bucket = make(TokenBucket, 1, 1)
    with caplog.at_level(logging.DEBUG, logger="ratelimit"):
        bucket.try_acquire()
        bucket.try_acquire()
    assert caplog.records == []


def test_an_interrupted_wait_is_counted_as_cancelled() -> None:
    class Interrupting(ManualClock):
        def sleep(self, seconds: float) -> None:
            raise KeyboardInterrupt

    bucket = TokenBucket(1, 1, clock=Interrupting(1_000.0))
    bucket.acquire()
    with pytest.raises(KeyboardInterrupt):
        bucket.acquire()
    stats = bucket.stats()
    assert (stats.granted, stats.cancelled) == (2, 1)


def test_a_composite_counts_its_largest_member_weight(make: Make) -> None:
    both = make(Composite, [TokenBucket(10, 1), SlidingWindow(100, 60)])
    both.try_acquire([2, 7])
    stats = both.stats()
    assert (stats.granted, stats.tokens) == (1, 7.0)


def test_global_subscribers_hear_every_limiter() -> None:
    seen: list[Event] = []
    unsubscribe = ratelimit.subscribe(seen.append)
    try:
        TokenBucket(1, 1, name="a").try_acquire()
        TokenBucket(1, 1, name="b").try_acquire()
    finally:
        unsubscribe()
    TokenBucket(1, 1, name="c").try_acquire()
    assert [e.name for e in seen if isinstance(e, Granted)] == ["a", "b"]


def test_a_broken_callback_is_logged_and_the_grant_stands(caplog: pytest.LogCaptureFixture) -> None:
    bucket = TokenBucket(1, 1)

    def broken(event: Event) -> None:
        raise RuntimeError("bug in a metrics hook")

    bucket.subscribe(broken)
    assert bucket.try_acquire()
    assert "an event callback failed" in caplog.text
    assert "bug in a metrics hook" in caplog.text


def test_subscribe_wants_a_callable() -> None:
    with pytest.raises(TypeError, match="callback must be callable"):
        TokenBucket(1, 1).subscribe("print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callback must be callable"):
        ratelimit.subscribe(None)  # type: ignore[arg-type]
