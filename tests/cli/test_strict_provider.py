"""What ``ratelimit size`` recommends, used as is, against a strict sliding-log provider.

Real time, real processes, a real Redis: 4 worker processes x 4 threads saturate one
shared limiter and call a provider that refuses any request making more than ``L``
in ANY interval of ``T`` seconds, counted on arrival (``strict_provider.py``). A
request leaves when its caller wakes, some milliseconds after its grant; the sizing
keeps a guard against exactly that (``ratelimit._limiting.sizing``), so the provider must
refuse nothing. A 429 here means the guard is smaller than this machine's send
jitter: a finding about ``DEFAULT_GUARD`` (measure with ``benchmarks/jitter.py``),
never a reason to allow a few.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import redis
from strict_provider import StrictProvider, StrictStats

from ratelimit._cli.bench import BenchConfig, BenchResult, limiter_spec, run_bench
from ratelimit._cli.sizing import DEFAULT_GUARD, size
from ratelimit._validate import Rate
from ratelimit.testing import FakeProvider

from conftest import REDIS_URL

# Windows from 0.1 s to 1 s, each at 200/s: the guard is 2 % of the longest and a
# fifth of the shortest, where the sizing must cut the rate to make room for it.
CASES = {
    "sliding-window": Rate(200, 1.0),
    "token-bucket": Rate(100, 0.5),
    "leaky-bucket": Rate(20, 0.1),
}
PROCESSES, THREADS, SECONDS = 4, 4, 6.0


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_strict_provider_counts_any_interval_of_its_window() -> None:
    # 3 per 0.3 s: three pass, the fourth is refused; once the first ages out,
    # exactly one more passes (the other two are still inside the window).
    with StrictProvider(3, 0.3) as provider:
        assert [_status(provider.url) for _ in range(4)] == [200, 200, 200, 429]
        time.sleep(0.35)
        assert [_status(provider.url) for _ in range(4)][-1] == 429
    assert provider.stats is not None
    assert provider.stats.refused == 2
    assert provider.stats.served == 6
    assert provider.stats.most_in_window == 3


def _run(algorithm: str, guard: float, out: dict[str, Any]) -> None:
    limit = CASES[algorithm]
    with StrictProvider(int(limit.count), limit.window) as provider:
        config = BenchConfig(
            algorithm=algorithm, limit=limit, guard=guard, processes=PROCESSES, threads=THREADS,
            seconds=SECONDS, redis=REDIS_URL, target=provider.url,
        )  # fmt: skip
        try:
            out[algorithm] = run_bench(config)
        except Exception as exc:  # reported by the test, not lost in a thread
            out[algorithm] = exc
    out[f"{algorithm} provider"] = provider.stats


def run_in_parallel(algorithms: list[str], guard: float) -> dict[str, Any]:
    """One bench per algorithm, all at once (``benchmarks``-style comparisons use it)."""
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=_run, args=(name, guard, out)) for name in algorithms]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def test_the_sized_settings_are_what_size_recommends() -> None:
    callers = PROCESSES * THREADS
    for algorithm, limit in CASES.items():
        spec = limiter_spec(BenchConfig(algorithm=algorithm, limit=limit, processes=PROCESSES, threads=THREADS))
        sizing = size(limit, workers=callers)
        expected = {
            "token-bucket": (sizing.token_bucket.capacity, sizing.token_bucket.refill_per_sec, 0.0),
            "leaky-bucket": (sizing.leaky_bucket.capacity, sizing.leaky_bucket.leak_per_sec, 0.0),
            "sliding-window": (sizing.sliding_window.limit, sizing.sliding_window.window_seconds, DEFAULT_GUARD),
        }[algorithm]
        assert (spec.first, spec.second, spec.guard) == expected
    # The short windows are where the guard costs: 100 per 0.5 s pays for it out of
    # the burst; 20 per 0.1 s has no room for the headroom's rate and a guard of a
    # fifth of its window, and is slowed.
    bucket, unguarded = (size(CASES["token-bucket"], workers=callers, guard=g).token_bucket for g in (DEFAULT_GUARD, 0))
    assert bucket.capacity < unguarded.capacity
    assert bucket.most_in_window <= 100
    leaky = size(CASES["leaky-bucket"], workers=callers).leaky_bucket
    assert leaky.rate_cut
    assert leaky.leak_per_sec == pytest.approx((20 - 0.001) / (0.1 + DEFAULT_GUARD))


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("algorithm", list(CASES))
def test_sized_limiters_draw_no_429_from_a_strict_sliding_log(algorithm: str, redis_client: redis.Redis) -> None:
    # One algorithm at a time: the load (16 callers and a provider on one
    # machine), not three of them, whose scheduling delays at the provider's door
    # reached 100 ms on a 2-core box.
    out = run_in_parallel([algorithm], DEFAULT_GUARD)
    limit = CASES[algorithm]
    result = out[algorithm]
    if isinstance(result, Exception):
        raise result
    assert isinstance(result, BenchResult)
    stats = out[f"{algorithm} provider"]
    assert isinstance(stats, StrictStats)
    summary = f"{algorithm}: {result.limiter.describe()} against {limit}: {stats}"
    assert result.errors == (), summary
    assert result.no_answer == 0, summary
    assert result.refused == 0, summary
    assert stats.refused == 0, summary
    assert stats.most_in_window <= limit.count, summary
    # Saturated: the limiter, not the machine, set the pace.
    assert result.grants >= 0.9 * result.configured_rate * SECONDS, summary


@pytest.mark.slow
@pytest.mark.redis
def test_the_approximate_window_sized_as_recommended_draws_no_429(redis_client: redis.Redis) -> None:
    limit = CASES["sliding-window"]
    with StrictProvider(int(limit.count), limit.window) as provider:
        config = BenchConfig(
            algorithm="sliding-window", limit=limit, approximate=True, processes=PROCESSES, threads=THREADS,
            seconds=SECONDS, redis=REDIS_URL, target=provider.url,
        )  # fmt: skip
        result = run_bench(config)
    assert provider.stats is not None
    assert result.refused == provider.stats.refused == 0
    assert provider.stats.most_in_window <= limit.count


def test_the_fake_providers_sliding_log_counts_any_interval_of_its_window() -> None:
    now = [100.0]
    with FakeProvider(2, 1.0, mode="sliding_log", clock=lambda: now[0]) as provider:
        answers = []
        for moment in (100.0, 100.6, 101.0, 101.5, 101.6, 102.7):
            now[0] = moment
            answers.append(_status(provider.url))
        stats = provider.stats()
    # 101.0 would be the third in [100.0, 101.0] (both ends count); a fixed window
    # would have let it in. 101.6 is the third in [100.6, 101.6].
    assert answers == [200, 200, 429, 200, 429, 200]
    assert (stats.served, stats.refused, stats.max_in_window) == (4, 2, 2)


def test_the_fake_provider_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode must be 'fixed_window', 'sliding_log' or 'token_bucket', got 'log'"):
        FakeProvider(2, 1.0, mode="log")  # type: ignore[arg-type]
