"""Every ```python block of README.md and docs/ runs as written, each in a process of its own.

A block is a whole program: it imports what it uses and checks what it shows with
``assert``. The only exceptions are blocks that cannot run on this machine (a Redis
Cluster, a service to install); each says why in an HTML comment on the line before
its fence, which the pages do not render::

    <!-- not-run: needs a Redis Cluster on 127.0.0.1:7001-7003 -->

Such blocks are still compiled, so they cannot rot into invalid Python.

Blocks that use Redis run against ``REDIS_URL`` (the pages' address, ``DEFAULT_REDIS_URL``, by default),
also given to them as ``RATELIMIT_REDIS_URL``; they are skipped, or fail under
``RATELIMIT_REQUIRE_REDIS=1``, when no server answers. The shared server may be in use
by other runs, so every limiter name a block gives as ``name="..."`` gets a suffix of
this run's own before the block runs (the block's other mentions of it too).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from conftest import DEFAULT_REDIS_URL, REDIS_URL, unavailable, unique_name

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Seconds one block may take: the pages promise quick examples.
TIMEOUT = 60
# Few blocks may be exempt; a new one must be argued for here, not only on its page.
MOST_NOT_RUN = 3

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    flags=re.MULTILINE | re.DOTALL,
)
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
NAME = re.compile(r'\bname="(?P<name>[^"{}]+)"')


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    not_run: str | None

    @property
    def uses_redis(self) -> bool:
        return "RedisBackend" in self.code


def blocks() -> list[Block]:
    found: list[Block] = []
    for path in PAGES:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            reason = NOT_RUN.match(before)
            found.append(
                Block(
                    page=str(path.relative_to(ROOT)),
                    line=line,
                    code=textwrap.dedent(match["code"]),
                    not_run=reason["reason"] if reason else None,
                )
            )
    return found


BLOCKS = blocks()


def prepared(block: Block, run: str) -> str:
    """The block's code with this run's Redis and its own limiter names."""
    code = block.code.replace(DEFAULT_REDIS_URL, REDIS_URL)
    for name in sorted(set(NAME.findall(code)), key=len, reverse=True):
        code = code.replace(f'"{name}"', f'"{name}-{run}"')
    return code


def test_the_pages_have_examples_and_few_exemptions() -> None:
    """The pages are full of examples, and the ones not run are few and say why."""
    assert len(BLOCKS) >= 40, [f"{b.page}:{b.line}" for b in BLOCKS]
    exempt = [b for b in BLOCKS if b.not_run is not None]
    assert len(exempt) <= MOST_NOT_RUN, [f"{b.page}:{b.line}: {b.not_run}" for b in exempt]
    for block in exempt:
        assert block.not_run, f"{block.page}:{block.line}: a not-run block must say why"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_example_compiles(block: Block) -> None:
    """Every block is valid Python, the exempt ones too."""
    compile(block.code, f"{block.page}:{block.line}", "exec")


@pytest.mark.slow  # a process per block: out of the fast loop, which still compiles them
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.redis] if b.uses_redis else []) for b in BLOCKS if b.not_run is None],
    ids=[f"{b.page}:{b.line}" for b in BLOCKS if b.not_run is None],
)
def test_example_runs(block: Block, tmp_path: Path) -> None:
    """The block runs to its end in a fresh interpreter, within the time the pages promise."""
    if block.uses_redis:
        try:
            redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            unavailable(f"no Redis server answers at {REDIS_URL}: {exc}")
    script = tmp_path / "example.py"
    script.write_text(prepared(block, unique_name("docs")))  # the run's id: its keys go with the run
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": REDIS_URL, "RATELIMIT_REDIS_URL": REDIS_URL}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"{block.page}:{block.line} failed:\n{result.stdout}\n{result.stderr}"
