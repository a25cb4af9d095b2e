"""The README, the docs and docker-compose.yml tell the same story as the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import DEFAULT_REDIS_URL

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_compose_parses_and_names_the_documented_services() -> None:
    services = compose()["services"]
    readme = (ROOT / "docs" / "redis.md").read_text()
    assert set(services) == {"redis", "redis-cluster"}
    for name in services:
        assert f"docker compose up -d {name}" in readme or f"--profile cluster up -d {name}" in readme
    assert services["redis"]["ports"] == ["6379:6379"]
    assert DEFAULT_REDIS_URL in readme
    cluster_ports = [p.split(":")[0] for p in services["redis-cluster"]["ports"]]
    assert cluster_ports == ["7001", "7002", "7003"]
    assert "127.0.0.1:7001" in readme
    assert services["redis-cluster"]["profiles"] == ["cluster"]
    assert "--profile cluster" in readme
    # One image for both, a real Redis (not a third-party cluster image).
    assert {s["image"] for s in services.values()} == {"redis:7.2-alpine"}


def test_readme_set_up_commands_exist_in_the_makefile() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    first_screen = readme.split("---")[0]
    commands = re.findall(r"^make ([\w-]+)", first_screen, flags=re.MULTILINE)
    assert commands == ["demo", "test", "test-all"]
    for target in commands:
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE)
    # CI runs everything, with the command the README gives for it.
    assert re.search(r"^make test-all$", (ROOT / ".ci" / "run").read_text(), flags=re.MULTILINE)


@pytest.mark.slow
def test_a_short_bench_runs_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", "bench", "--seconds", "0.5", "--threads", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ratelimit bench: 2 processes x 3 threads (6 callers)" in result.stdout


@pytest.mark.slow
def test_bad_cli_arguments_exit_non_zero_with_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", "bench", "--seconds", "-3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "'-3' is negative; expected a number > 0" in result.stderr


def test_readme_is_a_front_page_that_links_into_the_docs() -> None:
    """The README stays short, and every docs page it links to exists (GitHub follows them)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_every_docs_page_is_in_the_navigation() -> None:
    """A page left out of mkdocs.yml's nav would be built but never found."""
    config = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert pages
    for page in pages:
        assert f": {page}" in config, page


def test_every_public_module_has_a_reference_page() -> None:
    """The API reference covers each public module (the CLI's is the command line, on Operating)."""
    modules = sorted(
        p.stem for p in (ROOT / "ratelimit").glob("*.py") if not p.stem.startswith("_") and p.stem != "cli"
    )
    assert "events" in modules
    for module in modules:
        page = ROOT / "docs" / "reference" / f"{module}.md"
        assert page.is_file(), page
        assert f"::: ratelimit.{module}" in page.read_text()


def test_the_sizing_page_shows_what_ratelimit_size_prints() -> None:
    """The report on the Sizing page is the command's output today, not a stale copy."""
    page = (ROOT / "docs" / "sizing.md").read_text()
    found = re.search(r"```bash\n(ratelimit size [^\n]+)\n```\n\n```text\n(.*?)```", page, flags=re.DOTALL)
    assert found, "the sizing page shows a ratelimit size command and its report"
    command, shown = found[1].split(), found[2]
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", *command[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == shown


@pytest.mark.slow
def test_the_cli_reference_lists_every_option_of_every_command() -> None:
    """Operating's command line section names exactly the options each command's parser has."""
    page = (ROOT / "docs" / "operating.md").read_text()
    reference = page.split("## The command line", 1)[1]
    sections = re.split(r"^### `ratelimit (\w+)", reference, flags=re.MULTILINE)[1:]
    documented = {
        command: set(re.findall(r"`(--[a-z-]+)", text))
        for command, text in zip(sections[::2], sections[1::2], strict=True)
    }
    assert set(documented) == {"inspect", "set", "top", "size", "bench"}
    for command, options in documented.items():
        result = subprocess.run(
            [sys.executable, "-m", "ratelimit", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        parsed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", result.stdout, flags=re.MULTILINE)) - {"--help"}
        assert options == parsed, command
