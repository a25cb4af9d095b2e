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
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from ratelimit import RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import jain

from conftest import REDIS_URL, REQUIRE_REDIS, SUPPORT, unique_name

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"
NODE_WORKER = SUPPORT / "node_worker.mjs"
LANGUAGES_WORKER = SUPPORT / "languages_worker.py"


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


def most_surely_in_any(grants: list[tuple[float, float]], width: float) -> int:
    """The most grants surely granted in one interval of ``width``: those whose
    ``(earliest, latest)`` both lie in it. A process woken late (a loaded machine) only
    widens its grants' spans, so this never counts a grant twice over: a store that
    kept its bound is never seen above it."""
    spans = sorted(grants)
    most = 0
    for i, (start, _) in enumerate(spans):
        end = start + width
        inside = sum(1 for lo, hi in spans[i : bisect.bisect_left(spans, (end, end))] if hi < end)
        most = max(most, inside)
    return most


def _run(commands: list[list[str]]) -> list[dict[str, Any]]:
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def _spans(results: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(lo, hi) for r in results for lo, hi in r["grants"]]


def test_two_python_and_two_node_processes_share_one_token_bucket(node: str) -> None:
    capacity, rate, seconds = 20, 100.0, 6.0
    name = unique_name("languages")
    args = [REDIS_URL, name, "bucket", str(capacity), str(rate), "4", str(seconds)]
    python = [sys.executable, str(LANGUAGES_WORKER), *args]
    nodejs = [node, str(NODE_WORKER), *args]
    results = _run([python, python, nodejs, nodejs])
    counts = [len(r["grants"]) for r in results]
    # R + B in any second, as the store granted them (each grant between the time before
    # its call plus its wait and the time after its sleep).
    assert most_surely_in_any(_spans(results), 1.0) <= capacity + rate, counts
    went = sorted(hi for _, hi in _spans(results))
    span = went[-1] - went[0]
    assert span > seconds - 1.0, span
    achieved = (len(went) - capacity) / span
    assert abs(achieved - rate) / rate < 0.03, achieved
    # In arrival order, whatever the language: each about half, each process its share.
    python_share = sum(counts[:2]) / sum(counts)
    assert 0.35 <= python_share <= 0.65, counts
    assert jain(counts) >= 0.8, counts


def test_a_sliding_window_shared_across_languages_never_exceeds_its_limit(node: str) -> None:
    limit, window, seconds = 30, 1.0, 4.0
    name = unique_name("languages-window")
    # The store's own record: every grant is in the window's log, an entry per time on
    # the server's clock whose member ends in its weight ("<sum>|<weight>": grants
    # decided at one time in one call share an entry), kept a window after its time;
    # read often enough, the log shows every grant of the run.
    log = f"ratelimit:{{{name}}}:sliding_window"
    seen: dict[Any, float] = {}
    done = threading.Event()

    def watch() -> None:
        client = redis.Redis.from_url(REDIS_URL)
        while True:
            last = done.wait(0.2)
            entries: Any = client.zrange(log, 0, -1, withscores=True)
            seen.update(((member, float(score)), float(member.split(b"|")[1])) for member, score in entries)
            if last:
                break
        client.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    args = [REDIS_URL, name, "window", str(limit), str(window), "3", str(seconds)]
    python = [sys.executable, str(LANGUAGES_WORKER), *args]
    nodejs = [node, str(NODE_WORKER), *args]
    try:
        results = _run([python, nodejs, nodejs, python])
    finally:
        done.set()
        watcher.join()
    spans = _spans(results)
    assert all(r["grants"] for r in results)
    # Never above the limit in any window, as the store granted them ...
    granted = sorted(score for (_, score), weight in seen.items() for _ in range(round(weight)))
    assert len(granted) == len(spans), (len(granted), len(spans))
    assert most_in_any(granted, window) <= limit
    # ... and as the processes saw them.
    assert most_surely_in_any(spans, window) <= limit
    # Busy throughout: each window of the run about full.
    assert len(spans) >= limit * (seconds - 1.0) * 0.8, len(spans)


def test_a_429_fed_back_from_either_language_pauses_the_other(node: str) -> None:
    # A pause of 3 s, longer than a process takes to start on a loaded machine: the
    # other language's next grant comes no sooner than its end (a grant is timestamped
    # after its sleep, so a late clock read only makes it later), and had to wait.
    pause = 3.0
    backend = RedisBackend.from_url(REDIS_URL)
    try:
        # From Node: the Python process's next grant waits the pause out.
        name = unique_name("languages-pause")
        bucket = TokenBucket(10, 10, backend=backend, name=name)
        assert bucket.try_acquire()
        command = [node, str(NODE_WORKER), REDIS_URL, name, "pause", "10", "10", str(pause)]
        fed = json.loads(subprocess.run(command, check=True, timeout=30, capture_output=True, text=True).stdout)["fed"]
        assert not bucket.try_acquire()
        waited = bucket.acquire()
        assert waited > 0
        assert time.time() >= fed + pause - 0.05, (fed, time.time())

        # From Python: the Node process's next grant waits it out.
        name = unique_name("languages-pause")
        bucket = TokenBucket(10, 10, backend=backend, name=name)
        fed = time.time()
        bucket.feedback({"Retry-After": str(pause)}, 429)
        command = [node, str(NODE_WORKER), REDIS_URL, name, "wait", "10", "10"]
        done = json.loads(subprocess.run(command, check=True, timeout=30, capture_output=True, text=True).stdout)
        assert done["waited"] > 0, done
        assert done["at"] >= fed + pause - 0.05, (fed, done)
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
