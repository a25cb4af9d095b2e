"""Print every benchmark as a multiple of the floor measured in the same run.

Absolute numbers on a shared, noisy machine say little; the ratio to a floor taken
minutes apart on the same machine says how much our code adds.
"""

from __future__ import annotations

from typing import Any

import pytest

FLOOR_PREFIX = "test_floor"


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
        terminalreporter.write_sep("-", f"{group}: median as a multiple of the floor ({floor * 1e9:.0f} ns)")
        for bench in sorted(benches, key=lambda b: b.stats.median):
            median = bench.stats.median
            terminalreporter.write_line(
                f"{bench.name:<55} {median * 1e9:>10.0f} ns {median / floor:>6.2f}x {1 / median:>14,.0f}/s"
            )
    from test_redis import REPORT

    if REPORT:
        terminalreporter.write_sep("-", "Redis script calls per grant under contention (16 threads, demand >> supply)")
        for line in REPORT:
            terminalreporter.write_line(line)
