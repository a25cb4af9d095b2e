"""The package's shape, as ARCHITECTURE.md draws it: layers, one way down, no circle.

Every module under ``ratelimit/`` is read with ``ast`` (nothing is imported), and every
``import`` in it counts: at the top, inside functions, and under ``TYPE_CHECKING``.

- each module belongs to a layer, by its folder (or, at the top, by name), and imports
  only from its own layer or those below;
- no import circle, between modules or between folders;
- no module takes another module's private name (``from .front import _x``).

Run alone: ``pytest tests/api/test_layers.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ratelimit"

#: The private modules at the top, each one concern that any layer may use.
LEAVES = {"_clock", "_errors", "_events", "_redact", "_validate", "_wrap"}

#: Lowest first. A top-level module not named here is a public one, above them all.
LAYERS = [
    # leaves, and the one folder of leaves: what every layer may use, importing nothing above
    {*LEAVES, "_headers", "testing"},
    {"_algorithms"},
    {"_stores"},
    {"_limiting"},
    {"_resilience"},
    {"_integrations"},
    {"_cli"},
]
PUBLIC = len(LAYERS)


def modules() -> dict[str, Path]:
    """Every module, by its dotted name below ``ratelimit`` (``_stores.redis``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer(module: str) -> int:
    top = module.split(".")[0]
    for i, members in enumerate(LAYERS):
        if top in members:
            return i
    return PUBLIC


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """``(imported module, imported name or "", line)`` for each import of ``module``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module and node.module.split(".")[0] == "ratelimit":
                target = ".".join(node.module.split(".")[1:])
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".strip(".")
                if sub in known:
                    yield sub, "", node.lineno  # a module: from . import _validate
                else:
                    yield target, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ratelimit":
                    yield ".".join(alias.name.split(".")[1:]), "", node.lineno


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        module: {target for target, _, _ in imports(module, path, known) if target != module}
        for module, path in known.items()
    }


def test_every_module_imports_only_its_own_layer_or_below() -> None:
    known = modules()
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)}) at line {line}"
        for module, path in known.items()
        for target, _, line in imports(module, path, known)
        if target and layer(target) > layer(module)
    ]
    assert upward == []


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_circle_between_modules() -> None:
    assert _cycle(graph()) is None


def test_no_import_circle_between_folders() -> None:
    folders: dict[str, set[str]] = {}
    for module, targets in graph().items():
        here = module.split(".")[0]
        folders.setdefault(here, set()).update(t.split(".")[0] for t in targets if t.split(".")[0] != here)
    assert _cycle(folders) is None


def test_no_module_takes_another_ones_private_names() -> None:
    known = modules()
    taken = [
        f"{module} takes {name} from {target} at line {line}"
        for module, path in known.items()
        for target, name, line in imports(module, path, known)
        if name.startswith("_") and not name.startswith("__") and target != module
    ]
    assert taken == []


def test_the_top_holds_the_public_modules_and_the_leaves() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    public = [
        "__init__",
        "__main__",
        "aiohttp",
        "anthropic",
        "asgi",
        "celery",
        "cli",
        "django",
        "events",
        "httpx",
        "keys",
        "llm",
        "openai",
        "otel",
        "prometheus",
        "requests",
        "testing",
        "wsgi",
    ]
    assert top == sorted([*public, *LEAVES])
    private = [stem for stem in top if stem.startswith("_") and not stem.startswith("__")]
    assert len(private) <= 8, "a family of private modules at the top goes into a folder of its own"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))
def test_each_folder_says_what_it_holds(folder: str) -> None:
    init = PACKAGE / folder / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert docstring, f"{folder}/__init__.py has no docstring"


# -- the stores ---------------------------------------------------------------------

#: A folder per store. The files directly in ``_stores/`` are shared by them.
STORES = ("memory", "redis", "sqlite")


def _store_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "_stores" and len(parts) > 1 and parts[1] in STORES:
        return parts[1]
    return None


def _store_imports() -> Iterator[tuple[str, str, int]]:
    known = modules()
    for module, path in known.items():
        for target, _, line in imports(module, path, known):
            if target != module:
                yield module, target, line


def test_the_shared_store_files_import_no_store_folder() -> None:
    reached = [
        f"{module} imports {target} at line {line}"
        for module, target, line in _store_imports()
        if module.startswith("_stores") and _store_of(module) is None and _store_of(target) is not None
    ]
    assert reached == []


def test_store_folders_never_import_each_other_but_may_reuse_memory() -> None:
    crossed = [
        f"{module} imports {target} at line {line}"
        for module, target, line in _store_imports()
        if (here := _store_of(module)) is not None
        and (there := _store_of(target)) is not None
        and here != there
        and there != "memory"
    ]
    assert crossed == []


def test_above_the_stores_a_store_is_reached_through_its_face() -> None:
    # The face of a store is its folder's __init__ (``_stores.redis``); the shared files
    # of ``_stores/`` may be imported by name.
    reached = {
        (module, target)
        for module, target, _ in _store_imports()
        if not module.startswith("_stores") and _store_of(target) is not None and target.count(".") > 1
    }
    assert reached == set()


def test_only_the_redis_folder_reads_the_lua_scripts() -> None:
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if '"lua"' in path.read_text(encoding="utf-8") or "lua_source" in path.read_text(encoding="utf-8")
    )
    assert all(reader.startswith("_stores/redis/") for reader in readers), readers
