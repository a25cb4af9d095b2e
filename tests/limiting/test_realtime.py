"""Real time, real threads and tasks: the rates users get are the rates they configured.

The only tests of the suite that sleep for real (``SystemClock``, no ``ManualClock``);
each runs for 1.5 to 2 s. Workers call ``acquire`` in a loop until the run's end and
record, for every grant, the time they asked, the wait they were given and the time
``acquire`` returned (``time.monotonic()``, the limiters' own clock).

What the recorded times can and cannot show. A grant's *scheduled* moment is
``s = (time of the reservation) + wait``; ``acquire`` returns at ``r >= s`` (sleep
never ends early), a little late: ``time.sleep`` overshoots, and the woken thread must
take the GIL. That lateness is bounded for every grant by
``r - (time asked) - wait``, which we measure. The limiters' guarantees are about the
scheduled moments, so every bound below is the algorithm's bound widened by exactly the
lateness measured in that run, never by a fudge factor.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ratelimit import Acquirer, AcquireTimeout, LeakyBucket, SlidingWindow, SystemClock, TokenBucket

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Grant:
    asked: float  # time.monotonic() just before acquire
    wait: float  # what acquire returned
    at: float  # time.monotonic() just after acquire returned

    @property
    def lateness(self) -> float:
        """An upper bound on how long after its scheduled moment the grant was recorded."""
        return self.at - self.asked - self.wait


@dataclass(frozen=True)
class Run:
    start: float
    seconds: float
    grants: list[Grant]

    @property
    def times(self) -> list[float]:
        return sorted(grant.at for grant in self.grants)

    @property
    def lateness(self) -> float:
        return max(grant.lateness for grant in self.grants)

    def __str__(self) -> str:
        late = sorted(grant.lateness for grant in self.grants)
        return (
            f"{len(self.grants)} grants in {self.seconds} s; lateness median "
            f"{statistics.median(late) * 1e3:.3f} ms, max {late[-1] * 1e3:.3f} ms"
        )


def most_in_any_interval(times: list[float], width: float) -> int:
    """The most grants recorded in any closed interval ``[t, t + width]``."""
    return max(bisect.bisect_right(times, t + width) - i for i, t in enumerate(times))


def run_threads(limiter: Acquirer, threads: int, seconds: float) -> Run:
    """``threads`` threads acquiring one token at a time until ``seconds`` have passed.

    Each acquire's timeout is what is left of the run, so no grant is scheduled after
    its end: a thread whose next grant would come too late gets ``AcquireTimeout``,
    consuming nothing, and stops.
    """
    grants: list[Grant] = []
    lock = threading.Lock()
    ready = threading.Barrier(threads + 1)
    start = stop = 0.0

    def work() -> None:
        ready.wait()
        while True:
            asked = time.monotonic()
            try:
                wait = limiter.acquire(timeout=max(0.0, stop - asked))
            except AcquireTimeout:
                return
            at = time.monotonic()
            with lock:
                grants.append(Grant(asked, wait, at))

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    start = time.monotonic()
    stop = start + seconds
    ready.wait()
    for thread in pool:
        thread.join(timeout=seconds + 10)
        assert not thread.is_alive(), "a worker hung"
    return Run(start, seconds, grants)


def run_tasks(limiter: Acquirer, tasks: int, seconds: float) -> Run:
    """:func:`run_threads` with ``tasks`` asyncio tasks and ``acquire_async``."""
    grants: list[Grant] = []

    async def main() -> float:
        start = time.monotonic()
        stop = start + seconds

        async def work() -> None:
            while True:
                asked = time.monotonic()
                try:
                    wait = await limiter.acquire_async(timeout=max(0.0, stop - asked))
                except AcquireTimeout:
                    return
                grants.append(Grant(asked, wait, time.monotonic()))

        await asyncio.wait_for(asyncio.gather(*(work() for _ in range(tasks))), timeout=seconds + 10)
        return start

    start = asyncio.run(main())
    return Run(start, seconds, grants)


Runner = Callable[[Acquirer, int, float], Run]


def lateness_slack(run: Run, rate: float) -> int:
    """How many extra grants a counting interval of recorded times may show.

    An interval of width ``w`` over recorded times covers scheduled moments over
    ``w + lateness``: at ``rate`` grants a second that is up to ``rate * lateness``
    more grants. Timer granularity keeps lateness under one emission interval
    (10 ms at 100/s) on any sane machine, so this is normally 1; a run on an overloaded
    machine that woke a thread later than that is judged on what actually happened.
    """
    return max(1, math.ceil(rate * run.lateness))


@pytest.mark.parametrize(("run", "workers"), [(run_threads, 8), (run_tasks, 50)], ids=["8-threads", "50-tasks"])
def test_token_bucket_rate(run: Runner, workers: int) -> None:
    capacity, rate, seconds = 5, 100.0, 2.0
    limiter = TokenBucket(capacity=capacity, refill_per_sec=rate)
    assert isinstance(limiter.clock, SystemClock)
    result = run(limiter, workers, seconds)

    # The whole run: the burst plus what refills during it. The bound is for a closed
    # interval, so one grant due exactly at the end may count; one more for the
    # nanosecond tolerance with which a grant due "now" counts as on time.
    most = capacity + rate * seconds
    assert len(result.grants) <= most + 2, result
    # No waste: with workers always queued, every token that refills is used.
    assert len(result.grants) >= 0.95 * most, result

    # Any 1 s: at most the burst plus one second's refill (105); recorded times lag
    # their scheduled moments by the (measured) lateness, see lateness_slack.
    bound = capacity + rate * 1.0 + lateness_slack(result, rate)
    assert most_in_any_interval(result.times, 1.0) <= bound, result


def test_sliding_window_limit_with_threads() -> None:
    limit, window, seconds = 100, 0.5, 1.5
    result = run_threads(SlidingWindow(limit=limit, window_seconds=window), 8, seconds)

    # The exact log grants in batches: all `limit` at once when the window opens, the
    # next `limit` exactly one window later (future-dated entries), each batch a
    # millisecond or two wide. A count of grants over a full 0.5 s of recorded times
    # is therefore meaningless (a 0.1 ms timer slip moves a whole batch across its
    # edge); the slack has to be in time instead. Scheduled grants obey: at most
    # `limit` in any interval [a, a + window). Recorded times lag scheduled ones by at
    # most the measured lateness L, so any closed interval of recorded times shorter
    # than `window - L` holds scheduled grants of a span < `window`: at most `limit`.
    # (The 0.1 ms margin covers the nanosecond tolerance on "due now".)
    width = window - result.lateness - 1e-4
    assert width > 0.4, f"threads woke too late to judge anything: {result}"
    assert most_in_any_interval(result.times, width) <= limit, result

    # Three windows fit in the run (the first grant comes a moment after it starts):
    # 300 grants, no more, and no budget wasted.
    assert len(result.grants) <= limit * seconds / window + 2, result
    assert len(result.grants) >= 0.95 * limit * seconds / window, result


def test_leaky_bucket_spacing_with_threads() -> None:
    capacity, rate, seconds = 10, 100.0, 1.5
    result = run_threads(LeakyBucket(capacity=capacity, leak_per_sec=rate), 8, seconds)

    # Eight workers never fill a queue of ten: nothing overflowed, all grants leaked
    # out one interval apart. The median is immune to the odd late wake-up.
    times = result.times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.median(gaps) == pytest.approx(1 / rate, rel=0.10), result

    # No bursts: any 1 s holds one grant plus one second's worth (as a token bucket of
    # capacity 1), widened by the measured lateness.
    assert most_in_any_interval(times, 1.0) <= 1 + rate * 1.0 + lateness_slack(result, rate), result
    most = 1 + rate * seconds
    assert len(result.grants) <= most + 2, result
    assert len(result.grants) >= 0.95 * most, result
