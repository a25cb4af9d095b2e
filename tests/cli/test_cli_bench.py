"""``ratelimit bench``: its statistics, real runs against the fake provider, errors and Ctrl-C.

The end-to-end runs are real time (marked ``slow``): a limiter's job is to make
workers wait, so nothing shorter than a few seconds says whether it holds a rate.
"""

from __future__ import annotations

import json
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from ratelimit import ManualClock, RedisBackend, TokenBucket
from ratelimit._cli.bench_stats import allowed, jain, most_in_window, percentile, timeline
from ratelimit._cli.bench_worker import CountingClient
from ratelimit._cli.plot import can_plot
from ratelimit.cli import main
from ratelimit.testing import FakeProvider

from conftest import REDIS_URL, private_server
from servers import free_port

# -- statistics ------------------------------------------------------------------------


def test_percentiles_interpolate() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.99) == pytest.approx(99.01)
    assert percentile([3.0], 0.95) == 3.0
    assert percentile(list(reversed(values)), 0.0) == 1.0


def test_jains_index() -> None:
    assert jain([5, 5, 5, 5]) == 1.0
    assert jain([20, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([1, 2, 3]) == pytest.approx(36 / 42)
    assert jain([]) == 1.0


def test_most_in_window_counts_half_open_intervals() -> None:
    times = [0.0, 0.1, 0.2, 1.0, 1.05, 1.1, 1.15, 2.5]
    assert most_in_window(times, 1.0) == 5  # [0.2, 1.2): 0.2, 1.0, 1.05, 1.1 and 1.15
    assert most_in_window(times, 0.2) == 4
    assert most_in_window([], 1.0) == 0


def test_timeline_bins_per_second() -> None:
    assert timeline([0.0, 0.1, 0.3, 0.6, 0.7, 0.8, 5.0], 0.0, 1.0, 0.5) == [6.0, 6.0]
    assert timeline([], 0.0, 1.0, 1.0) == [0.0]


def test_allowed_is_what_a_perfect_limiter_grants() -> None:
    assert allowed("token-bucket", 9, 95, 4.0) == 389  # the burst, then 95 a second
    assert allowed("leaky-bucket", 9, 95, 4.0) == 381  # no burst: one now, then 95 a second
    assert allowed("sliding-window", 10, 0.5, 4.0) == 80  # ten at the start of each half second


def test_the_counting_client_sees_one_script_call_per_acquire() -> None:
    client = CountingClient(fakeredis.FakeRedis())
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(3, 1, backend=RedisBackend(client), name="counted", clock=clock)
    limiter.acquire()  # looks for the library and loads it (not counted), then one FCALL
    assert client.calls == 1
    for _ in range(10):
        limiter.acquire()  # the burst, then waits: each one call however long it waits
    assert client.calls == 11
    assert client.ping()  # everything else passes through


# -- real runs -------------------------------------------------------------------------

# 100/s with a burst of 10, 5 % headroom and the default guard of 50 ms:
# TokenBucket(capacity=1, refill_per_sec=95) (a burst within the count keeps the
# window's rule too: 100 - fit(95 x 1.05) = 1). In 4 s a perfect limiter grants
# 1 + 95 x 4 = 381; a 5 % band around that is 19 calls, far more than start-up and
# scheduling noise can cost.
RUN = ["bench", "--limit", "100/s", "--burst", "10", "--processes", "2", "--threads", "4", "--seconds", "4"]


def _bench_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def _check_the_rate_holds(report: dict[str, Any]) -> None:
    assert report["limiter"] == {"algorithm": "token-bucket", "capacity": 1, "refill_per_sec": 95, "guard": 0}
    assert report["allowed"] == 381
    # A grant is decided when reserved but sent when its sleep ends, some ms late on
    # a busy machine; the sizing's guard keeps the provider's burst for sends that late
    # (issue 11). Without it this drew 1 of 389 in about one full suite run in three.
    assert report["refused_429"] == 0
    assert report["no_answer"] == 0
    assert set(report["responses"]) <= {"200", "429"}
    assert report["responses"]["200"] + report["responses"].get("429", 0) == report["grants"]
    # Never more than a perfect limiter, and within 5 % of it.
    assert 381 * 0.95 <= report["grants"] <= 381
    assert report["achieved_per_sec"] == pytest.approx(381 / 4, rel=0.05)
    # The provider (a bucket of 10 refilled at 100/s) never saw more than it allows in 1 s.
    assert report["max_in_provider_window"] <= 110
    # At most one script call per acquire (every grant, and each caller's last acquire,
    # refused at once because its grant would have come after the end of the run), and
    # fewer where a process's threads shared a round (issue 15's coalescing); plus, on
    # a server that has not seen the script yet, one EVAL after a refused EVALSHA in
    # each thread whose first call went out before any load had landed (2 processes x
    # 4 threads at most; 4 were seen on a fresh Cluster, before and after issue 10).
    assert 0 < report["round_trips"] <= report["acquires"] + 2 * 4
    assert report["acquires"] - report["grants"] <= 8
    assert report["fairness"]["jain"] > 0.95
    assert report["cpu_per_grant_seconds"] > 0
    assert report["wait_seconds"]["p50"] <= report["wait_seconds"]["p95"] <= report["wait_seconds"]["p99"]
    assert report["errors"] == []


@pytest.mark.slow
def test_two_processes_through_the_embedded_store(capsys: pytest.CaptureFixture[str]) -> None:
    report = _bench_json(capsys, *RUN)
    assert report["backend"].startswith("embedded Redis-protocol server")
    _check_the_rate_holds(report)


@pytest.mark.slow
@pytest.mark.redis
def test_two_processes_through_a_real_redis(capsys: pytest.CaptureFixture[str], redis_client: redis.Redis) -> None:
    report = _bench_json(capsys, *RUN, "--redis", REDIS_URL)
    assert report["backend"] == f"Redis at {REDIS_URL}"
    _check_the_rate_holds(report)


@pytest.mark.slow
@pytest.mark.cluster
def test_two_processes_through_a_redis_cluster(capsys: pytest.CaptureFixture[str], redis_cluster: Any) -> None:
    report = _bench_json(capsys, *RUN, "--redis", redis_cluster.url, "--cluster")
    assert report["backend"] == f"Redis Cluster at {redis_cluster.url}"
    _check_the_rate_holds(report)
    nodes = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    assert list(nodes.scan_iter(match="ratelimit:{bench-*")) == []  # the run's keys went with it
    nodes.close()


@pytest.mark.slow
@pytest.mark.servers
def test_a_run_leaves_nothing_in_the_users_redis(capsys: pytest.CaptureFixture[str]) -> None:
    """The budget is the run's own: what its script keeps (what the code says, a day;
    the counters of `top`) goes when the run ends."""
    server = private_server()
    try:
        argv = ["bench", "--limit", "100/s", "--burst", "5", "--processes", "2", "--threads", "2", "--calls", "40"]
        assert _bench_json(capsys, *argv, "--redis", server.url)["grants"] == 40
        client = redis.Redis.from_url(server.url)
        assert client.info("keyspace") == {}
        client.close()
    finally:
        server.cleanup()


@pytest.mark.slow
def test_the_text_report_of_one_process_bounded_by_calls(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--limit", "200/s", "--burst", "5", "--processes", "1", "--threads", "3", "--calls", "60"]
    assert main([*argv, "--algorithm", "leaky-bucket"]) == 0
    out = capsys.readouterr().out
    # A burst of 5 holds one token and a guard of 50 ms only below (5 - 1) / 0.05 = 80/s.
    assert "LeakyBucket(capacity=4, leak_per_sec=80)" in out
    assert "store          in-process memory (one process)" in out
    assert "granted          60 in " in out
    assert "429s             0 of 60 calls" in out
    assert "round trips      none: in-process state" in out
    # A queue grants in arrival order: three callers share 60 grants about evenly.
    shares = re.search(r"fairness +(\d+) to (\d+) grants per caller", out)
    assert shares is not None
    fewest, most = map(int, shares.groups())
    assert 15 <= fewest <= 20 <= most <= 25


@pytest.mark.slow
def test_asyncio_tasks_through_a_sliding_window(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--limit", "200/s", "--burst", "5", "--processes", "1", "--threads", "2", "--asyncio-tasks", "3"]
    report = _bench_json(capsys, *argv, "--calls", "60", "--algorithm", "sliding-window")
    assert report["config"]["callers"] == 6
    assert report["limiter"] == {
        "algorithm": "sliding-window",
        "limit": 4,
        "window_seconds": pytest.approx(4 / 190),
        "guard": 0.05,
    }
    assert report["grants"] == 60
    assert report["refused_429"] == 0


@pytest.mark.slow
@pytest.mark.redis
def test_asyncio_tasks_through_a_real_redis(capsys: pytest.CaptureFixture[str], redis_client: redis.Redis) -> None:
    argv = ["bench", "--limit", "200/s", "--burst", "5", "--processes", "2", "--threads", "1", "--asyncio-tasks", "3"]
    report = _bench_json(capsys, *argv, "--calls", "60", "--redis", REDIS_URL)
    assert report["grants"] == 60
    assert report["refused_429"] == 0
    # Counted on each thread's asyncio client: at most one script call per acquire,
    # fewer where the tasks shared a round (and at most one script load per process
    # on a server new to the script).
    assert report["acquires"] == 60
    assert 0 < report["round_trips"] <= 62


@pytest.mark.slow
def test_429s_are_counted_from_the_targets_answers(capsys: pytest.CaptureFixture[str]) -> None:
    # The target allows 10 per 10 s; the limiter believes in 100/s.
    with FakeProvider(10, 10) as target:
        url = target.url
        argv = ["bench", "--limit", "100/s", "--processes", "1", "--threads", "2", "--calls", "30"]
        report = _bench_json(capsys, *argv, "--target", url)
        stats = target.stats()
    assert report["target"] == url
    assert report["grants"] == 30
    assert report["refused_429"] == stats.refused == 20
    assert report["responses"] == {"200": 10, "429": 20}
    assert report["max_in_provider_window"] == 10  # counted from the answers: one window is 100/s's 1 s


@pytest.mark.slow
def test_the_sweep_marks_the_best_setting(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--sweep", "--limit", "100/s", "--burst", "10", "--processes", "1", "--threads", "2"]
    report = _bench_json(capsys, *argv, "--seconds", "0.5")
    runs = report["runs"]
    assert [run["config"]["headroom"] for run in runs[:5]] == [0, 0.025, 0.05, 0.1, 0.15]
    assert [run["config"]["guard_seconds"] for run in runs] == [0.05] * 5 + [0] + [0.05]
    # At 5 % without the guard the bucket holds 5: 100 - 95 in the window, below the
    # burst's 9 (its headroom's margin only).
    assert runs[5]["limiter"]["capacity"] == 5
    # Then, at 5 %: the provider's whole burst (half the sized capacity and 1 are the
    # sized capacity, 1, itself).
    assert [run["limiter"]["capacity"] for run in runs[6:]] == [10]
    best = runs[report["best"]]
    assert best["refused_429"] == 0
    clean = [run["grants"] for run in runs if run["refused_429"] == 0 and run["no_answer"] == 0]
    assert best["grants"] == max(clean)


@pytest.mark.slow
def test_the_sweep_shows_the_guard_against_a_strict_provider(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--sweep", "--limit", "100/s", "--strict-provider", "--processes", "1", "--threads", "2"]
    assert main([*argv, "--seconds", "0.5"]) == 0
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["headroom", "guard"]
    assert [row[2:].split()[1] for row in rows[:6]] == ["50.0"] * 5 + ["0.0"]
    assert "* best: the highest throughput with zero 429s" in out or "no setting ran without 429s" in out


@pytest.mark.slow
@pytest.mark.skipif(not can_plot(), reason="matplotlib (the plot extra) is not installed")
def test_the_plot_is_drawn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "grants.png"
    argv = ["bench", "--limit", "200/s", "--processes", "1", "--threads", "2", "--calls", "40"]
    assert main([*argv, "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(b"\x89PNG")
    assert f"plot             {path}" in capsys.readouterr().out


def test_plot_without_matplotlib_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("ratelimit.cli.can_plot", lambda: False)
    with pytest.raises(SystemExit) as info:
        main(["bench", "--plot", "out.png"])
    assert info.value.code == 2
    assert (
        capsys.readouterr().err
        == "ratelimit bench: error: --plot needs matplotlib: pip install 'ratelimit-fleet[plot]'\n"
    )


# -- bad arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--limit", "many/s"], 2, "argument --limit: expected a rate like N/s, N/min, N/hour or N/day"),
        (["--processes", "0"], 2, "argument --processes: expected a whole number > 0, got '0'"),
        (["--threads", "0"], 2, "argument --threads: expected a whole number > 0, got '0'"),
        (["--seconds", "-1"], 2, "argument --seconds: '-1' is negative; expected a number > 0"),
        (["--algorithm", "fifo"], 2, "argument --algorithm: invalid choice: 'fifo'"),
        (["--cluster"], 2, "--cluster needs --redis URL"),
        (["--sweep", "--plot", "x.png"], 2, "--plot draws one run: leave out --sweep"),
        (["--limit", "2.5/s"], 1, "the built-in provider needs a whole --limit count, got 2.5"),
        (["--target", "ftp://example.invalid/"], 1, "--target must be an http:// or https:// URL"),
        (["--redis", "nonsense://x"], 1, "--redis nonsense://x: cannot connect: "),
        (
            ["--latency", "-1"],
            2,
            "argument --latency: '-1' is negative; expected seconds from 0 to 60",
        ),
        # --adaptive and what goes with it
        (["--ceiling", "50/s"], 2, "--ceiling needs --adaptive"),
        (["--no-drop"], 2, "--no-drop needs --adaptive"),
        (["--adaptive", "--sweep"], 2, "--adaptive runs one setting: leave out --sweep"),
        (["--adaptive", "--target", "http://127.0.0.1:1/"], 2, "--adaptive needs the built-in provider"),
        (["--adaptive", "--calls", "10"], 2, "--adaptive runs for --seconds: leave out --calls"),
        (["--adaptive", "--strict-provider"], 2, "--adaptive hides a token bucket: leave out --strict-provider"),
        (["--adaptive", "--headroom", "5%"], 2, "--adaptive sizes nothing: leave out --headroom"),
        (["--adaptive", "--guard", "10ms"], 2, "--adaptive sizes nothing: leave out --guard"),
        (["--adaptive", "--algorithm", "leaky-bucket"], 2, "--adaptive learns with a token bucket"),
        (["--adaptive", "--no-drop", "--drop-at", "3"], 2, "--no-drop keeps the limit: leave out --drop-to"),
        (["--adaptive", "--seconds", "4", "--drop-at", "4"], 2, "--drop-at 4 must come before the end of the run"),
        (["--adaptive", "--drop-at", "25"], 2, "--drop-at 25 must come before the end of the run (--seconds 20)"),
        (["--adaptive", "--drop-to", "100/s"], 2, "--drop-to 100/s must be below --limit 100/s"),
        (["--adaptive", "--floor", "200/s"], 2, "--floor 200/s must be below the ceiling (200/s)"),
        (["--adaptive", "--drop-at", "0"], 2, "argument --drop-at: expected a number > 0, got '0'"),
        (["--adaptive", "--drop-to", "fast"], 2, "argument --drop-to: expected a rate like N/s"),
        (["--adaptive", "--drop-to", "50.5/s"], 1, "the built-in provider needs a whole --drop-to count, got 50.5"),
        (["--adaptive", "--burst", "2.5"], 1, "the built-in provider needs a whole --burst, got 2.5"),
    ],
)
def test_bad_arguments_exit_non_zero_with_one_line(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        result = main(["bench", *argv])
    except SystemExit as exc:
        result = exc.code  # type: ignore[assignment]
    assert result == code
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("ratelimit bench: error: ")
    assert message in captured.err
    assert captured.out == ""


def test_unreachable_redis_and_refusing_target_fail_fast(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    assert main(["bench", "--redis", f"redis://127.0.0.1:{port}/0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ratelimit bench: error: --redis redis://127.0.0.1:{port}/0: cannot connect: ")
    assert err.count("\n") == 1
    assert main(["bench", "--target", f"http://127.0.0.1:{port}/"]) == 1
    err = capsys.readouterr().err
    assert err == f"ratelimit bench: error: --target http://127.0.0.1:{port}/: cannot connect: Connection refused\n"


@pytest.mark.slow
def test_a_store_lost_after_the_check_is_one_line_from_the_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI's own check passes; the workers then find nothing there.
    monkeypatch.setattr("ratelimit._cli.bench._probe_redis", lambda url, cluster: None)
    port = free_port()
    assert main(["bench", "--redis", f"redis://127.0.0.1:{port}/0", "--seconds", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ratelimit bench: error: worker ")
    assert f" cannot reach the store at redis://127.0.0.1:{port}/0: " in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_python_m_ratelimit_bench_exits_1_without_a_traceback() -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", "bench", "--redis", f"redis://127.0.0.1:{port}/0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("ratelimit bench: error: --redis ")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


# -- Ctrl-C ----------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name (in parentheses) may hold spaces: read after it.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_prints_the_partial_report_and_leaves_no_worker_behind() -> None:
    command = [sys.executable, "-m", "ratelimit", "bench", "--burst", "10", "--seconds", "60", "--progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait for the first progress line: the workers are then running and granted.
        assert process.stderr is not None
        selector = selectors.DefaultSelector()
        selector.register(process.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 60
        line = ""
        while "grants" not in line:
            assert selector.select(timeout=max(0.0, deadline - time.monotonic())), "no progress line within 60 s"
            line = process.stderr.readline()
            assert line, "the bench ended before any progress line"
        workers = _children(process.pid)
        assert len(workers) >= 2  # two workers (and multiprocessing's resource tracker)
        interrupted_at = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert time.monotonic() - interrupted_at < 15
    assert "INTERRUPTED, partial report" in out
    granted = next(line for line in out.splitlines() if line.startswith("granted"))
    assert int(granted.split()[1]) > 0
    assert "Traceback" not in err
    # Every child is gone (re-parented ones are reaped by init a moment later).
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in workers if _running(pid)] == []
