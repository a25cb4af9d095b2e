"""``for_limit``'s promise under what users do with a limiter besides acquire.

A provider enforcing exactly the limit ``for_limit`` was given never refuses a request
it grants, sent up to the guard late: with several workers on one shared name, with
``for_key`` views of one key, with refunds of grants whose request never went, with
reservations cancelled, and as a member of a ``Composite``. The grants are made on a
manual clock; each request that goes arrives on time or the whole guard late, as the
strategy picks, and the provider's count is checked on the arrivals.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import Composite, ManualClock, MemoryBackend, RedisBackend, SQLiteBackend, TokenBucket, for_limit
from ratelimit._validate import parse_rate

GUARD = 0.05
LIMITS = ["5/s", "10/min", "3/2s", "7/s", "100/min", "2/s"]


def _within(arrivals: list[float], limit: str, burst: int | None) -> bool:
    """Whether a provider enforcing ``limit`` (with ``burst``) accepts every arrival:
    at most the count in any closed window, or with a burst above the count, a bucket
    of the burst refilled at the rate."""
    rate = parse_rate(limit)
    times = sorted(arrivals)
    windowed = burst is None or burst <= rate.count
    if windowed and any(bisect.bisect_right(times, t + rate.window) - i > rate.count for i, t in enumerate(times)):
        return False
    most = burst if burst is not None else rate.count
    return all(
        j - i + 1 <= most + rate.per_second * (times[j] - times[i]) + 1e-6
        for i in range(len(times))
        for j in range(i, len(times))
    )


@contextmanager
def _store(kind: str, folder: Path) -> Iterator[Any]:
    if kind == "memory":
        yield MemoryBackend()
    else:
        backend = RedisBackend(fakeredis.FakeRedis()) if kind == "redis" else SQLiteBackend(folder / "promise.db")
        yield backend
        backend.close()


#: What a worker does: (worker, action, seconds to let pass first, late).
Step = tuple[int, str, float, bool]

_STEPS = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["acquire", "acquire", "acquire", "try", "refund", "cancel"]),
        st.just(0.0) | st.floats(0, 1.5),
        st.booleans(),
    ),
    max_size=40,
)


def _run(workers: list[Any], clock: ManualClock, steps: list[Step], window: float) -> list[float]:
    """The arrivals of the requests that went."""
    arrivals: list[float] = []
    latest: dict[int, int] = {}  # worker -> index of its latest arrival still counted
    for worker, action, gap, late in steps:
        clock.advance(gap * window)
        limiter = workers[worker % len(workers)]
        sent = None
        if action == "acquire":
            limiter.acquire()
            sent = clock.now()
        elif action == "try":
            if limiter.try_acquire():
                sent = clock.now()
        elif action == "refund":
            # The worker's latest grant did not go after all (its request was dropped
            # before it was sent): it is given back and not counted.
            index = latest.pop(worker, None)
            if index is not None and arrivals[index] >= clock.now():
                arrivals[index] = float("nan")
                limiter.refund(1)
        else:
            reservation = limiter.reserve(1)
            if not reservation.cancel():  # due at once: it goes
                sent = clock.now()
        if sent is not None:
            latest[worker] = len(arrivals)
            arrivals.append(sent + (GUARD if late else 0.0))
    return [t for t in arrivals if t == t]


@settings(deadline=None, max_examples=60)
@given(
    limit=st.sampled_from(LIMITS),
    burst=st.none() | st.integers(1, 12),
    store=st.sampled_from(["memory", "redis", "sqlite"]),
    views=st.booleans(),
    steps=_STEPS,
)
def test_workers_on_one_name_stay_within_the_provider_s_limit(
    tmp_path_factory: pytest.TempPathFactory, limit: str, burst: int | None, store: str, views: bool, steps: list[Step]
) -> None:
    clock = ManualClock(1000.0)
    window = parse_rate(limit).window
    with _store(store, tmp_path_factory.mktemp("s")) as backend:
        make: Callable[[], TokenBucket] = lambda: for_limit(  # noqa: E731
            limit, burst=burst, backend=backend, name="provider", clock=clock
        )
        # Two workers: two limiters on the name, or two for_key views of one key.
        workers = [make().for_key("tenant"), make().for_key("tenant")] if views else [make(), make()]
        arrivals = _run(workers, clock, steps, window)
    assert _within(arrivals, limit, burst), (limit, burst, arrivals)


@settings(deadline=None, max_examples=60)
@given(
    first=st.sampled_from(LIMITS),
    second=st.sampled_from(LIMITS),
    steps=_STEPS,
)
def test_a_composite_of_two_stays_within_both(first: str, second: str, steps: list[Step]) -> None:
    clock = ManualClock(1000.0)
    composite = Composite([for_limit(first), for_limit(second)], clock=clock)
    window = min(parse_rate(first).window, parse_rate(second).window)
    arrivals = _run([composite], clock, steps, window)
    assert _within(arrivals, first, None), (first, arrivals)
    assert _within(arrivals, second, None), (second, arrivals)


@pytest.mark.parametrize(("before", "after"), [("1000/min", "10/min"), ("5/s", "2/s"), ("10/min", "100/min")])
def test_a_new_limit_set_at_run_time_as_for_limit_sizes_it_keeps_the_promise(
    tmp_path: Path, before: str, after: str
) -> None:
    """A provider changes its limit: the store gets the refill and capacity that
    ``for_limit`` (and ``ratelimit size``) give for the new one, not its rate as written."""
    clock = ManualClock(1000.0)
    with _store("sqlite", tmp_path) as backend:
        limiter = for_limit(before, backend=backend, name="changed", clock=clock)
        assert limiter.try_acquire()
        clock.advance(3600.0)  # the provider's windows before the change are long over
        sized = for_limit(after)
        backend.set_limit("changed", rate=sized.refill_per_sec, burst=sized.capacity, clock=clock)
        arrivals = []
        for i in range(30):
            limiter.acquire()
            arrivals.append(clock.now() + (GUARD if i % 2 else 0.0))
    assert _within(arrivals, after, None), (after, arrivals)
