"""pyproject.toml publishes the package under a name of its own, for the Pythons it supports,
with the development tools kept out of what users install."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import ratelimit.cli

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
NAME = "ratelimit-fleet"
# The newest minor version the classifiers must name; later ones may be added.
NEWEST = 13


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def extras() -> dict[str, list[str]]:
    found: dict[str, list[str]] = pyproject()["project"]["optional-dependencies"]
    return found


def dev_group() -> list[str]:
    group = pyproject()["dependency-groups"]["dev"]
    assert all(isinstance(entry, str) for entry in group), group
    return list(group)


def test_the_distribution_has_a_name_of_its_own() -> None:
    # `ratelimit` on the package index is another project; only the import name is ours.
    assert pyproject()["project"]["name"] == NAME
    assert pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["ratelimit"]


def test_the_classifiers_name_every_supported_minor_version() -> None:
    project = pyproject()["project"]
    floor = re.fullmatch(r">=\s*3\.(\d+)", project["requires-python"])
    assert floor, project["requires-python"]
    named = {
        int(m.group(1))
        for c in project["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
    }
    assert set(range(int(floor.group(1)), NEWEST + 1)) <= named
    assert min(named) == int(floor.group(1))


def test_the_console_script_is_the_cli() -> None:
    assert pyproject()["project"]["scripts"] == {"ratelimit": "ratelimit.cli:main"}
    assert callable(ratelimit.cli.main)


def test_the_project_urls_point_at_one_repository() -> None:
    urls = pyproject()["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith(urls["Homepage"]) for url in urls.values())
    assert urls["Homepage"].rstrip("/").endswith("/" + NAME)


def test_development_tools_are_a_dependency_group_not_an_extra() -> None:
    assert "dev" not in extras()
    published = {requirement_name(r) for requirements in extras().values() for r in requirements}
    assert not published & {"pytest", "ruff", "mypy"}
    assert {"pytest", "ruff", "mypy"} <= {requirement_name(r) for r in dev_group()}


def test_the_dev_group_holds_every_extra_so_the_tests_run_the_integrations() -> None:
    # A group naming this project's extras would fetch the project from the index, so it
    # repeats their requirements, and they must not drift apart.
    for extra, requirements in extras().items():
        for requirement in requirements:
            assert requirement in dev_group(), (extra, requirement)
    groups = pyproject()["dependency-groups"]
    named = {requirement_name(r) for group in groups.values() for r in group if isinstance(r, str)}
    assert NAME not in named
    assert "ratelimit" not in named
