"""A fleet that mixes leased and plain limiters of one name (a rollout of ``lease=``).

A leased token is granted by the shared budget and may be sent up to ``lease`` seconds
later, so a leased limiter keeps ``lease x rate`` of its burst back (a window counts
each grant that much longer). A plain process of the same name must keep the same
share back while leased tokens may still go, or the two together exceed the limit.
The script records the largest slack any process keeps (``lua/_single.lua``), and
every process decides with it.
"""

from __future__ import annotations

import fakeredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import AcquireTimeout, ManualClock, RedisBackend, SlidingWindow, TokenBucket

from conftest import unique_name


def within_bucket(times: list[float], capacity: float, rate: float) -> bool:
    """At most ``capacity + rate * (b - a)`` one-token grants in any interval ``[a, b]``."""
    times = sorted(times)
    return all(
        j - i + 1 <= capacity + rate * (times[j] - times[i]) + 1e-6
        for i in range(len(times))
        for j in range(i, len(times))
    )


def within_window(times: list[float], limit: float, window: float) -> bool:
    """At most ``limit`` grants in any interval of ``window`` seconds."""
    times = sorted(times)
    return all(sum(1 for u in times[i:] if u < t + window - 1e-9) <= limit for i, t in enumerate(times))


STEPS = st.lists(
    st.tuples(st.integers(0, 1), st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.1, 0.3]), st.booleans()),
    min_size=1,
    max_size=150,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_a_leased_and_a_plain_bucket_never_exceed_it_together(steps: list[tuple[int, float, bool]]) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("mixed")
    capacity, rate = 8.0, 20.0
    fleet = [
        TokenBucket(capacity, rate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name=name, clock=clock,
                    lease=0.1),
        TokenBucket(capacity, rate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name=name, clock=clock),
    ]  # fmt: skip
    sent: list[float] = []
    for who, later, wait in steps:
        clock.advance(later)
        if wait:
            try:
                fleet[who].acquire(timeout=0.5)  # the clock sleeps to the grant
            except AcquireTimeout:
                continue
            sent.append(clock.now())
        elif fleet[who].try_acquire():
            sent.append(clock.now())
    assert within_bucket(sent, capacity, rate)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, approximate=st.booleans())
def test_a_leased_and_a_plain_window_never_exceed_it_together(
    steps: list[tuple[int, float, bool]], approximate: bool
) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("mixed-window")
    limit, window = 6.0, 1.0
    fleet = [
        SlidingWindow(limit, window, approximate=approximate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
                      name=name, clock=clock, lease=0.2),
        SlidingWindow(limit, window, approximate=approximate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
                      name=name, clock=clock),
    ]  # fmt: skip
    sent: list[float] = []
    for who, later, _ in steps:
        clock.advance(later)
        if fleet[who].try_acquire():
            sent.append(clock.now())
    assert within_window(sent, limit, window)
