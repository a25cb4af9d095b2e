"""The suite itself: it runs on whatever Redis ``REDIS_URL`` names (a developer's own,
often, shared with other runs) and leaves nothing there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from conftest import private_server

ROOT = Path(__file__).resolve().parents[2]

#: A client made for the default server's address written out, not for REDIS_URL.
_SHARED = re.compile(r"""from_url\(\s*f?["']rediss?://(127\.0\.0\.1|localhost)(:6379)?[/"']|port=(6379)\b""")


def test_nothing_connects_to_the_default_server_by_its_address() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _SHARED.search(line)
    ]
    assert found == [], "use REDIS_URL (conftest.REDIS_URL), the server the run checks through"


@pytest.mark.servers
@pytest.mark.slow
def test_a_run_leaves_no_key_in_the_redis_it_ran_on() -> None:
    """Tests of the fast loop that write the most kinds of keys (a day's ``:code``,
    counters, changes, names through a latin-1 client, database 1), run on a server
    of their own: every database is empty at the end."""
    server = private_server()
    try:
        env = {**os.environ, "REDIS_URL": server.url, "RATELIMIT_REQUIRE_REDIS": "1"}
        files = ["tests/cli/test_operator_edges.py", "tests/stores/test_run_time_limits.py"]
        files.append("tests/speed/test_remembered_lookups.py")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *files,
             "-m", "not slow and not cluster and not servers and not stress", "--hypothesis-profile=fast"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        client = redis.Redis.from_url(server.url)
        try:
            assert client.info("keyspace") == {}
        finally:
            client.close()
    finally:
        server.cleanup()


#: The lines git writes around a merge's conflict, built here so that this file has none.
_CONFLICT = re.compile("^(" + "<" * 7 + " |" + "=" * 7 + "$|" + ">" * 7 + " )", re.MULTILINE)


def test_no_file_keeps_a_merge_conflict() -> None:
    # Inside a docstring or a Markdown page a conflict still parses and builds: only a look finds it.
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    ).stdout.split("\0")
    found = []
    for name in tracked:
        path = ROOT / name
        if not name or path.suffix not in {".py", ".md", ".lua", ".ts", ".toml", ".yml", ".yaml", ".cfg", ".txt"}:
            continue
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in _CONFLICT.finditer(text)]
    assert found == []
