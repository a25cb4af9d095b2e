"""Every ```python block of README.md and docs/ runs as written, each in a process of its own.

A block is a whole program: it imports what it uses and checks what it shows with
``assert``. The only exceptions are blocks that cannot run on this machine (a Redis
Cluster, a service to install); each says why in an HTML comment on the line before
its fence, which the pages do not render::

    <!-- not-run: needs a Redis Cluster on 127.0.0.1:7001-7003 -->

Such blocks are still compiled, so they cannot rot into invalid Python.

A block runs with only what its page asks the reader to install: every page with a
block names its extras in an HTML comment (``<!-- extras: httpx, requests -->``, or
``none``; packages beyond the extras after ``; packages:``), the docs pages name the same
extras where the reader sees them (``pip install 'ratelimit-fleet[httpx]'``), and each
block runs behind an import hook that refuses every module the page's install would
not bring (``tests/support/extras_guard.py``).

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
from extras_guard import extras_of_project, write_guard

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
NEEDS = re.compile(r"<!--\s*extras:\s*(?P<extras>[^;]*?)\s*(?:;\s*packages:\s*(?P<packages>.*?)\s*)?-->")
# The extras a page shows the reader: pip install 'ratelimit-fleet[a,b]', or [a] after it.
SHOWN = re.compile(r"ratelimit-fleet\[(?P<extras>[a-z0-9,]+)\]|`\[(?P<more>[a-z0-9,]+)\]`")


@dataclass(frozen=True)
class Needs:
    """What a page asks the reader to install: the package's extras, and other packages."""

    extras: tuple[str, ...]
    packages: tuple[str, ...]


def needs(text: str) -> Needs | None:
    found = NEEDS.search(text)
    if found is None:
        return None
    extras = tuple(sorted(e.strip() for e in found["extras"].split(",") if e.strip() not in ("", "none")))
    packages = tuple(sorted(p.strip() for p in (found["packages"] or "").split(",") if p.strip()))
    return Needs(extras, packages)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    not_run: str | None
    needs: Needs | None

    @property
    def uses_redis(self) -> bool:
        return "RedisBackend" in self.code


def blocks() -> list[Block]:
    found: list[Block] = []
    for path in PAGES:
        text = path.read_text()
        page_needs = needs(text)
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
                    needs=page_needs,
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


def test_every_page_with_examples_names_what_they_need() -> None:
    """A page with a block says which extras its examples need, and docs pages show the reader."""
    extras = set(extras_of_project()) - {""}
    for page in sorted({b.page for b in BLOCKS}):
        text = (ROOT / page).read_text()
        page_needs = needs(text)
        assert page_needs is not None, f"{page}: no <!-- extras: ... --> comment (none, or what its examples need)"
        assert set(page_needs.extras) <= extras, f"{page}: {sorted(set(page_needs.extras) - extras)} are not extras"
        if page == "README.md":
            continue  # the front page lists every extra in its install section
        visible = NEEDS.sub("", text)
        shown = {e for m in SHOWN.finditer(visible) for e in (m["extras"] or m["more"]).split(",")}
        missing = set(page_needs.extras) - shown
        assert not missing, f"{page}: examples need {sorted(missing)}, which the page never shows in a pip install"
        for package in page_needs.packages:
            assert package in visible, f"{page}: examples need {package}, which the page never names"


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
    """The block runs to its end in a fresh interpreter, within the time the pages promise,
    able to import only what its page's install brings."""
    assert block.needs is not None, f"{block.page}: no <!-- extras: ... --> comment"
    if block.uses_redis:
        try:
            redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            unavailable(f"no Redis server answers at {REDIS_URL}: {exc}")
    script = tmp_path / "example.py"
    script.write_text(prepared(block, unique_name("docs")))  # the run's id: its keys go with the run
    guard = write_guard(tmp_path / "guard", block.needs.extras, block.needs.packages)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(guard), str(ROOT)]),
        "REDIS_URL": REDIS_URL,
        "RATELIMIT_REDIS_URL": REDIS_URL,
    }
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    install = (guard / "install.txt").read_text()
    hint = f"\n(it may import only what {install} brings)" if "No module named" in result.stderr else ""
    assert result.returncode == 0, f"{block.page}:{block.line} failed:\n{result.stdout}\n{result.stderr}{hint}"


def test_the_guard_hides_what_a_page_does_not_install(tmp_path: Path) -> None:
    """Behind a page's guard a module of an extra it does not name cannot be imported, nor found."""
    probe = (
        "import importlib.util, redis, ratelimit\n"
        "assert importlib.util.find_spec('httpx') is None\n"
        "try:\n    import httpx\nexcept ModuleNotFoundError:\n    pass\n"
        "else:\n    raise SystemExit('httpx imported behind a guard without it')\n"
    )
    for extras, code in (((), probe), (("httpx",), "import httpx\n")):
        guard = write_guard(tmp_path / "-".join(("guard", *extras)), extras)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(guard), str(ROOT)])}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert result.returncode == 0, f"extras {extras}:\n{result.stderr}"
