"""One budget across languages: Python and Node.js processes on one Redis budget.

The Node client (``clients/node``, protocol 1: docs/protocol.md) calls the same
functions on the same keys as the Python one, so that both share one budget: two
processes of each on one ``TokenBucket(20, 100)`` stay within R + B in any second at
the configured rate, each language getting about half the grants; a shared sliding
window is never above its limit; a 429 fed back from either language pauses the other;
and ``ratelimit inspect``/``top`` show a limiter used only from Node.

Needs ``node`` and the Node client's packages (``npm ci`` in ``clients/node``, which CI
runs first); without them these tests skip, or fail where a real Redis is required.
"""

from __future__ import annotations

import bisect
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ratelimit import RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import jain

from conftest import REDIS_URL, REQUIRE_REDIS, SUPPORT, unique_name

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"
NODE_WORKER = SUPPORT / "node_worker.mjs"
SHARED_WORKER = SUPPORT / "shared_worker.py"
WINDOW_WORKER = SUPPORT / "window_worker.py"


@pytest.fixture(scope="module")
def node() -> str:
    """``node``, with the Node client built (``tsc``) from this checkout."""
    found = shutil.which("node")
    if found is None or not (NODE_CLIENT / "node_modules").is_dir():
        message = "node, or the Node client's packages (npm ci in clients/node), are missing"
        if REQUIRE_REDIS:
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run(["npm", "run", "--silent", "build"], cwd=NODE_CLIENT, check=True, timeout=120)
    return found


def most_in_any(times: list[float], width: float) -> int:
    """The most of the sorted ``times`` in any interval ``[t, t + width)``."""
    return max(bisect.bisect_left(times, t + width) - i for i, t in enumerate(times))


def _run(commands: list[list[str]]) -> list[dict[str, Any]]:
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def test_two_python_and_two_node_processes_share_one_token_bucket(node: str) -> None:
    capacity, rate, seconds = 20, 100.0, 6.0
    name = unique_name("languages")
    python = [sys.executable, str(SHARED_WORKER), REDIS_URL, name, str(capacity), str(rate), "4", str(seconds)]
    nodejs = [node, str(NODE_WORKER), REDIS_URL, name, "bucket", str(capacity), str(rate), "4", str(seconds)]
    results = _run([python, python, nodejs, nodejs])
    counts = [len(r["grants"]) for r in results]
    grants = sorted(t for r in results for t in r["grants"])
    # R + B in any second; a grant is timestamped after its sleep returns, so a late
    # wake-up may bring one a little closer to the next: one grant of slack for that.
    assert most_in_any(grants, 1.0) <= capacity + rate + 1, counts
    span = grants[-1] - grants[0]
    assert span > seconds - 1.0, span
    achieved = (len(grants) - capacity) / span
    assert abs(achieved - rate) / rate < 0.03, achieved
    # In arrival order, whatever the language: each about half, each process its share.
    python_share = sum(counts[:2]) / sum(counts)
    assert 0.35 <= python_share <= 0.65, counts
    assert jain(counts) >= 0.8, counts


def test_a_sliding_window_shared_across_languages_never_exceeds_its_limit(node: str) -> None:
    limit, window, seconds = 30, 1.0, 4.0
    name = unique_name("languages-window")
    python = [sys.executable, str(WINDOW_WORKER), REDIS_URL, name, str(limit), str(window), "3", str(seconds)]
    nodejs = [node, str(NODE_WORKER), REDIS_URL, name, "window", str(limit), str(window), "3", str(seconds)]
    results = _run([python, nodejs, nodejs, python])
    grants = sorted(t for r in results for t in r["grants"])
    assert most_in_any(grants, window) <= limit
    assert all(r["grants"] for r in results)
    # Busy throughout: each window of the run about full (the guard's 0.05 s aside).
    assert len(grants) >= limit * (seconds - 1.0) * 0.8, len(grants)


def test_a_429_fed_back_from_either_language_pauses_the_other(node: str) -> None:
    backend = RedisBackend.from_url(REDIS_URL)
    try:
        # From Node: the Python process's next grant waits the pause out.
        name = unique_name("languages-pause")
        bucket = TokenBucket(10, 10, backend=backend, name=name)
        assert bucket.try_acquire()
        subprocess.run([node, str(NODE_WORKER), REDIS_URL, name, "pause", "10", "10", "1"], check=True, timeout=30)
        assert not bucket.try_acquire()
        waited = bucket.acquire()
        assert 0.6 < waited <= 1.05, waited

        # From Python: the Node process's next grant waits it out.
        name = unique_name("languages-pause")
        bucket = TokenBucket(10, 10, backend=backend, name=name)
        bucket.feedback({"Retry-After": "1"}, 429)
        done = subprocess.run(
            [node, str(NODE_WORKER), REDIS_URL, name, "wait", "10", "10"],
            check=True,
            timeout=30,
            capture_output=True,
            text=True,
        )
        assert 0.6 < json.loads(done.stdout)["waited"] <= 1.05, done.stdout
    finally:
        backend.close()


def test_inspect_and_top_show_a_limiter_used_only_from_node(node: str) -> None:
    name = unique_name("languages-node-only")
    nodejs = [node, str(NODE_WORKER), REDIS_URL, name, "bucket", "20", "100", "2", "0.5"]
    (result,) = _run([nodejs])
    assert result["grants"]
    command = [sys.executable, "-m", "ratelimit"]
    shown = subprocess.run(
        [*command, "inspect", "--redis", REDIS_URL, "--json", name], check=True, capture_output=True, text=True
    )
    assert name in shown.stdout, shown.stdout
    assert "token_bucket" in shown.stdout, shown.stdout
    top = subprocess.run(
        [*command, "top", "--redis", REDIS_URL, "--iterations", "1", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    (row,) = [row for row in json.loads(top.stdout)["limiters"] if row["name"] == name]
    assert row["kind"] == "token_bucket", row
    assert row["grants_per_sec"] > 0, row
