"""What a page's examples may import: the package with the extras the page names, and no more.

The development environment holds every extra at once, so an example that imports a
client its page never asks the reader to install would still run there. To run it as
a reader's environment would, the docs test starts each example with
``sitecustomize.py`` from :func:`write_guard` first on its path: it hides every module
of an installed distribution that the page's install would not bring (``pip install
'ratelimit-fleet[<extras>]' <packages>``, followed through the requirements each
distribution declares), from imports and from ``importlib.util.find_spec`` alike, as
that environment would: optional imports inside the libraries (``try: import
hiredis``) take their usual way round.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "ratelimit-fleet"
#: Extension-module suffixes and the source suffix: what names an importable module.
MODULE_SUFFIXES = (".py", ".so", ".pyd")


def extras_of_project() -> dict[str, list[str]]:
    """The project's extras and their requirements, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return {"": project["dependencies"], **extras}


def allowed_distributions(extras: Iterable[str], packages: Iterable[str] = ()) -> set[str]:
    """Every distribution that ``pip install 'ratelimit-fleet[extras]' packages`` brings.

    Followed through each installed distribution's declared requirements, markers
    evaluated for this interpreter (and for the extras asked of it). A requirement not
    installed here is left out: nothing can import it anyway.
    """
    declared = extras_of_project()
    unknown = sorted(set(extras) - set(declared) - {""})
    if unknown:
        raise ValueError(f"not extras of {PROJECT}: {unknown}; its extras are {sorted(set(declared) - {''})}")
    wanted = [Requirement(text) for extra in ("", *extras) for text in declared[extra]]
    wanted += [Requirement(text) for text in packages]
    allowed = {PROJECT}
    seen: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        allowed.add(name)
        for text in distribution.requires or []:
            nested = Requirement(text)
            if nested.marker is None or any(
                nested.marker.evaluate({"extra": extra}) for extra in ("", *requirement.extras)
            ):
                wanted.append(nested)
    return allowed


def _module_path(file: PurePosixPath) -> tuple[str, ...] | None:
    """The dotted parts of the module a distribution's file is, or None if it is none."""
    parts = file.parts
    if not parts or parts[0] == ".." or "__pycache__" in parts:
        return None
    if parts[0].endswith((".dist-info", ".egg-info", ".data")) or not parts[-1].endswith(MODULE_SUFFIXES):
        return None
    stem = parts[-1].split(".", 1)[0]
    dotted = (*parts[:-1], stem) if stem != "__init__" else parts[:-1]
    if not dotted or not all(part.isidentifier() for part in dotted):
        return None
    return dotted


def blocked_modules(allowed: set[str]) -> set[str]:
    """The shortest module names that only distributions outside ``allowed`` provide.

    A namespace shared by both sides (``opentelemetry`` of the API and of the SDK) is
    refused below the part the allowed side provides (``opentelemetry.sdk``).
    """
    provided: set[tuple[str, ...]] = set()
    others: list[tuple[str, ...]] = []
    for distribution in metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"] or "")
        for file in distribution.files or []:
            dotted = _module_path(PurePosixPath(str(file)))
            if dotted is None:
                continue
            if name in allowed:
                provided.update(dotted[:k] for k in range(1, len(dotted) + 1))
            else:
                others.append(dotted)
    blocked: set[str] = set()
    for dotted in others:
        for k in range(1, len(dotted) + 1):
            if dotted[:k] not in provided:
                blocked.add(".".join(dotted[:k]))
                break
    return blocked


SITECUSTOMIZE = '''"""Hides the modules that the page's install would not bring (tests/support/extras_guard.py)."""
import json
import sys

_BLOCKED = frozenset(json.loads({blocked!r}))


def _blocked(name):
    parts = name.split(".")
    return any(".".join(parts[:k]) in _BLOCKED for k in range(1, len(parts) + 1))


class _Hiding:
    """A finder that finds nothing refused, and whatever else its inner finder finds."""

    def __init__(self, inner):
        self._inner = inner

    def find_spec(self, name, path=None, target=None):
        if _blocked(name) or not hasattr(self._inner, "find_spec"):
            return None
        return self._inner.find_spec(name, path, target)

    def __getattr__(self, attribute):
        return getattr(self._inner, attribute)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
'''


def write_guard(folder: Path, extras: Iterable[str], packages: Iterable[str] = ()) -> Path:
    """Write ``sitecustomize.py`` into ``folder`` for a page naming these extras; return the folder."""
    extras, packages = sorted(extras), sorted(packages)
    blocked = blocked_modules(allowed_distributions(extras, packages))
    install = f"pip install '{PROJECT}[{','.join(extras)}]'" if extras else f"pip install {PROJECT}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=json.dumps(sorted(blocked))))
    (folder / "install.txt").write_text(" ".join([install, *packages]))
    return folder
