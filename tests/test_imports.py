"""The package's modules depend on each other one way: no import cycle, type-only imports included.

Read from the source (every ``import`` / ``from ... import`` anywhere in a module: top level,
inside functions, under ``if TYPE_CHECKING:``), not from ``sys.modules``, so an import that only
a type checker or a rarely called function performs still counts. A submodule importing its own
package (``from . import x`` names the package only when ``x`` is not a submodule) is the usual
parent edge and not a cycle by itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aecs_mongo

PACKAGE = Path(aecs_mongo.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = ["aecs_mongo", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports, resolved to module names in ``known``."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            targets = subs or [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of an attribute path
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_imports_one_that_imports_it_back() -> None:
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    assert "aecs_mongo.mail.sources" in graph["aecs_mongo.commands.ingest"]  # the walk sees real imports
    assert "aecs_mongo.results" in graph["aecs_mongo.errors"]  # ... and those under TYPE_CHECKING
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_type_only_cycle(tmp_path: Path) -> None:
    """The check itself can fail: two modules whose only link back is under TYPE_CHECKING."""
    (tmp_path / "a.py").write_text("from .b import B\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nclass B: ...\n"
    )
    graph = {}
    for name in ("a", "b"):
        path = tmp_path / f"{name}.py"
        graph[f"aecs_mongo.{name}"] = imports_of(f"aecs_mongo.{name}", path, {"aecs_mongo.a", "aecs_mongo.b"})
    assert find_cycle(graph) == ["aecs_mongo.a", "aecs_mongo.b", "aecs_mongo.a"]
