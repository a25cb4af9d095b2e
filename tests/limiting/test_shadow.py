"""Shadow mode: a limiter that decides and records as usual, and counts what it would
have done, but never makes a caller wait nor refuses one (issue 16)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from ratelimit import AcquireTimeout, Composite, ConcurrencyLimit, LeakyBucket, ManualClock, SlidingWindow, TokenBucket
from ratelimit.events import Denied, Event, Granted
from ratelimit.prometheus import PrometheusMetrics

from conftest import unique_name

KINDS: dict[str, Callable[..., Any]] = {
    "token": lambda **kw: TokenBucket(3, 2, **kw),
    "leaky": lambda **kw: LeakyBucket(4, 2, **kw),
    "window": lambda **kw: SlidingWindow(3, 1.0, **kw),
    "approximate": lambda **kw: SlidingWindow(3, 1.0, approximate=True, **kw),
}

#: One step of a caller: acquire (with a timeout, or none) or try_acquire, and the
#: time that passes before it.
Step = tuple[str, float, float]


def steps() -> st.SearchStrategy[list[Step]]:
    call = st.sampled_from(["acquire", "acquire-0.5", "try"])
    return st.lists(st.tuples(call, st.sampled_from([1.0, 2.0]), st.sampled_from([0.0, 0.1, 0.4, 1.0])), max_size=40)


def decisions(limiter: Any, clock: ManualClock, plan: list[Step]) -> list[tuple[str, float]]:
    """What each step decided, read from the limiter's events (the wait it was told
    or would have been told, or the refusal and its retry_after)."""
    seen: list[Event] = []
    limiter.subscribe(seen.append)
    for call, tokens, later in plan:
        clock.advance(later)
        if call == "try":
            limiter.try_acquire(tokens)
            continue
        with contextlib.suppress(AcquireTimeout):
            limiter.acquire(tokens, timeout=0.5 if call == "acquire-0.5" else None)
    out = []
    for event in seen:
        if isinstance(event, Granted):
            out.append(("granted", round(event.wait, 9)))
        elif isinstance(event, Denied):
            out.append(("denied", round(event.retry_after, 9)))
    return out


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps())
def test_a_shadow_decides_as_the_limit_would_and_never_holds_a_caller(kind: str, plan: list[Step]) -> None:
    # The shadow's callers go at once; what it would have done is judged at the
    # times they really came: against an enforced twin on a clock that the same
    # steps advance but its callers' sleeps do not.
    enforced_clock, shadow_clock = StillClock(start=1_000.0), ManualClock(start=1_000.0)
    enforced = KINDS[kind](clock=enforced_clock)
    shadow = KINDS[kind](clock=shadow_clock, shadow=True)
    expected = decisions(enforced, enforced_clock, plan)
    seen = decisions(shadow, shadow_clock, plan)
    assert seen == expected
    assert shadow_clock.sleeps == []  # nobody waited
    stats = shadow.stats()
    assert stats.granted == sum(1 for what, _ in seen if what == "granted")
    assert stats.denied == sum(1 for what, _ in seen if what == "denied")
    assert stats.waited == pytest.approx(sum(w for what, w in seen if what == "granted"))


class StillClock(ManualClock):
    """A test clock whose sleeps do not move it: an enforced limiter on it decides at
    the same times as a shadow, whose callers never sleep."""

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def test_every_call_goes_at_once_and_the_counts_say_what_would_have_happened(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    limiter = make(TokenBucket, 2, 1, shadow=True)
    assert limiter.shadow
    assert "shadow=True" in repr(limiter)
    assert [limiter.acquire() for _ in range(4)] == [0.0] * 4  # would have been 0, 0, 1, 2
    assert limiter.try_acquire()  # would have been refused
    assert limiter.acquire(timeout=1) == 0.0  # would have timed out (needed 3 s)
    assert clock.sleeps == []
    stats = limiter.stats()
    assert (stats.granted, stats.denied) == (4, 2)
    assert stats.waited == pytest.approx(3.0)
    assert stats.max_wait == pytest.approx(2.0)


def test_asyncio_callers_never_wait_either(make: Callable[..., Any], clock: ManualClock) -> None:
    limiter = make(SlidingWindow, 2, 10.0, shadow=True)

    async def main() -> list[Any]:
        waits = await asyncio.gather(*(limiter.acquire_async() for _ in range(5)))
        tried = await limiter.try_acquire_async()
        return [*waits, tried]

    assert asyncio.run(main()) == [0.0] * 5 + [True]
    assert clock.sleeps == []
    stats = limiter.stats()
    assert (stats.granted, stats.denied) == (5, 1)
    assert stats.max_wait == pytest.approx(20.0)  # the fifth would have waited two windows


def test_shadow_events_and_metrics_are_kept_apart(clock: ManualClock) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = TokenBucket(1, 1, name=unique_name("shadow"), clock=clock, shadow=True)
    limiter.subscribe(metrics)
    seen: list[Event] = []
    limiter.subscribe(seen.append)
    limiter.acquire()
    limiter.acquire()
    limiter.try_acquire()
    assert seen == [
        Granted(limiter.name, 1.0, 0.0, shadow=True),
        Granted(limiter.name, 1.0, 1.0, shadow=True),
        Denied(limiter.name, 1.0, 2.0, shadow=True),
    ]

    def value(metric: str) -> float:
        found = registry.get_sample_value(metric, {"name": limiter.name or ""})
        return 0.0 if found is None else found

    assert value("ratelimit_shadow_grants_total") == 2
    assert value("ratelimit_shadow_denials_total") == 1
    assert value("ratelimit_shadow_wait_seconds_sum") == 1.0
    assert value("ratelimit_grants_total") == 0
    assert value("ratelimit_denials_total") == 0


def test_shadow_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="shadow must be a bool, got str 'yes'"):
        TokenBucket(1, 1, shadow="yes")  # type: ignore[arg-type]
    assert not TokenBucket(1, 1).shadow
    assert math.isfinite(TokenBucket(1, 1, shadow=True).capacity)


def test_the_low_priority_of_a_shadow_is_a_shadow_too(clock: ManualClock) -> None:
    limiter = TokenBucket(4, 1, clock=clock, low_share=0.5, shadow=True)
    assert limiter.low.shadow
    assert [limiter.low.acquire() for _ in range(4)] == [0.0] * 4
    assert limiter.low.try_acquire()
    assert clock.sleeps == []
    assert limiter.low.stats().denied == 1


def test_a_composite_can_be_a_shadow(make: Callable[..., Any], clock: ManualClock) -> None:
    llm = make(Composite, [TokenBucket(2, 1), TokenBucket(100, 10)], shadow=True)
    assert llm.shadow
    assert [llm.acquire([1, 30]) for _ in range(4)] == [0.0] * 4  # would have waited 0, 0, 1 and 2 s
    assert llm.try_acquire([1, 1])
    assert clock.sleeps == []
    stats = llm.stats()
    assert (stats.granted, stats.denied) == (4, 1)
    assert stats.max_wait == pytest.approx(2.0)
    with pytest.raises(ValueError, match="shadow=True with a ConcurrencyLimit"):
        Composite([TokenBucket(2, 1), ConcurrencyLimit(3)], shadow=True)
    with pytest.raises(TypeError, match="shadow must be a bool"):
        Composite([TokenBucket(2, 1)], shadow=1)  # type: ignore[arg-type]
