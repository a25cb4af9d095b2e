"""``FairShare`` through Redis and SQLite, end to end: tenants in processes of their own
on one budget, in real time (generous bounds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import REDIS_URL, SUPPORT, unique_name

pytestmark = [pytest.mark.slow]

FAIR_WORKER = SUPPORT / "fair_worker.py"
RATE = 100.0


def run_tenants(
    name: str, tenants: Sequence[tuple[str, float, int, float, float]], url: str = REDIS_URL
) -> list[dict[str, Any]]:
    """``tenants``: (tenant, weight, threads, start, seconds), a process each, ``start``
    seconds after every process is ready. Each result's ``base``: when that was."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(FAIR_WORKER),
                REDIS_URL,
                name,
                str(RATE),
                tenant,
                str(weight),
                str(threads),
                str(seconds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tenant, weight, threads, _, seconds in tenants
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    base = time.time() + 0.2
    for proc, (_, _, _, start, _) in zip(procs, tenants, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(f"{base + start!r}\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        result = json.loads(out)
        result["base"] = base
        results.append(result)
    return results


@pytest.mark.parametrize("store", [pytest.param("redis", marks=pytest.mark.redis), "sqlite"])
def test_three_tenants_3_1_1_in_six_processes_split_60_20_20(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Each tenant in two processes of three threads, always waiting, for four
    seconds: counted over the seconds when all of them ran."""
    if store == "redis":
        request.getfixturevalue("redis_client")
        url = REDIS_URL
    else:
        url = f"sqlite:{tmp_path / 'fair.db'}"
    seconds = 4.0
    tenants = [(tenant, weight, 3, 0.0, seconds) for tenant, weight in (("a", 3), ("b", 1), ("c", 1)) for _ in range(2)]
    results = run_tenants(unique_name("fair"), tenants, url)
    base = results[0]["base"]
    start, end = base + 1.0, base + seconds - 0.5
    counted = {"a": 0, "b": 0, "c": 0}
    for (tenant, *_), result in zip(tenants, results, strict=True):
        counted[tenant] += sum(1 for g in result["grants"] if start <= g < end)
    total = sum(counted.values())
    assert total >= 0.9 * RATE * (end - start), counted
    # At most two store calls per grant: each tenant's two processes ask for its
    # next turn without knowing of each other, and the one that comes second takes a
    # ticket and asks once more. (A tenant in one process: one call per grant, as the
    # newcomer of the next test shows.)
    grants = sum(len(r["grants"]) for r in results)
    calls = sum(r["calls"] for r in results)
    assert calls <= 2 * grants, (calls, grants)
    for tenant, expected in (("a", 0.6), ("b", 0.2), ("c", 0.2)):
        assert counted[tenant] / total == pytest.approx(expected, abs=0.05), counted


@pytest.mark.redis
def test_a_lone_tenant_gets_the_rate_and_a_newcomer_goes_within_a_few_intervals(redis_client: redis.Redis) -> None:
    """One tenant floods from two processes of 20 threads; a newcomer asks two seconds
    in: the flood had the rate to itself, and the newcomer's first grant is not queued
    behind it."""
    results = run_tenants(unique_name("fair"), [("flood", 1, 20, 0.0, 4.0)] * 2 + [("newcomer", 1, 1, 2.0, 1.0)])
    base = results[0]["base"]
    alone = sum(1 for r in results[:2] for g in r["grants"] if base + 0.5 <= g < base + 2.0)
    assert alone >= 0.9 * RATE * 1.5
    # A few intervals of the budget (10 ms each), and a round trip or two of slack.
    assert results[2]["first"] is not None
    assert results[2]["first"] <= 8 / RATE + 0.05
    newcomer = results[2]
    assert newcomer["calls"] <= len(newcomer["grants"]) + 1
