"""Print every benchmark as a multiple of the floor measured in the same run.

Absolute numbers on a shared, noisy machine say little; the ratio to a floor taken
minutes apart on the same machine says how much our code adds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

FLOOR_PREFIX = "test_floor"

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    """A client of the Redis at ``REDIS_URL``; the Redis benchmarks skip without one."""
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"no Redis at {URL}")
    yield client
    client.close()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = getattr(config, "_benchmarksession", None)
    results = getattr(session, "benchmarks", None) or []
    groups: dict[str, list[Any]] = {}
    for bench in results:
        groups.setdefault(bench.group or "", []).append(bench)
    for group, benches in sorted(groups.items()):
        floors = [b for b in benches if b.name.startswith(FLOOR_PREFIX)]
        if not floors:
            continue
        floor = min(b.stats.median for b in floors)
        floor_min = min(b.stats.min for b in floors)
        terminalreporter.write_sep(
            "-", f"{group}: as multiples of the floor (median {floor * 1e9:.0f} ns, best {floor_min * 1e9:.0f} ns)"
        )
        # The best round is the least disturbed by neighbours; the median, the typical.
        terminalreporter.write_line(f"{'':<48} {'median':>10} {'x':>7} {'best':>10} {'x':>7} {'median/s':>12}")
        for bench in sorted(benches, key=lambda b: b.stats.median):
            median, best = bench.stats.median, bench.stats.min
            terminalreporter.write_line(
                f"{bench.name:<48} {median * 1e9:>7.0f} ns {median / floor:>6.2f}x "
                f"{best * 1e9:>7.0f} ns {best / floor_min:>6.2f}x {1 / median:>12,.0f}"
            )
    from test_redis import REPORT

    if REPORT:
        terminalreporter.write_sep("-", "Redis script calls per grant under contention (16 threads, demand >> supply)")
        for line in REPORT:
            terminalreporter.write_line(line)
