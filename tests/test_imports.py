"""The package's layout rules, read from the source.

- The modules depend on each other one way: no import cycle, type-only imports included.
- The pure modules (``pure/``, ``normalizer/``) import no I/O module, and the public-surface
  modules they may import (``errors``, ``types``, ``results``) are held to the same rule.
- ``asynchronous/`` and ``synchronous/`` never import each other, and ``synchronous/`` is exactly
  what ``scripts/unasync.py`` generates (a hand edit fails here, not only in CI's ``--check``).
- The rooms above the store (``mail/``, ``commands/``, ``agents/``, ``warm/``, ``cli``) import no
  driver (``pymongo``, ``bson``, ``gridfs``, ``motor``) and name no collection (no ``.db``
  attribute, no ``db[...]``): they use the store's API.
- No room imports a room above it (``ROOMS``, bottom first).
- No test module imports another: what tests share is in tests/helpers/ or conftest.py.

Every ``import`` / ``from ... import`` anywhere in a module counts (top level, inside functions,
under ``if TYPE_CHECKING:``), not what ``sys.modules`` holds, so an import that only a type checker
or a rarely called function performs still counts. A submodule importing its own package (``from .
import x`` names the package only when ``x`` is not a submodule) is the usual parent edge and not a
cycle by itself. Each rule has a test that shows it can fail, on a small tree in tmp_path.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import aecs_mongo

PACKAGE = Path(aecs_mongo.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def module_name(path: Path, root: Path = PACKAGE, prefix: str = "aecs_mongo") -> str:
    parts = [prefix, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE, prefix: str = "aecs_mongo") -> dict[str, Path]:
    return {module_name(p, root, prefix): p for p in sorted(root.rglob("*.py"))}


def imported_names(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports, dotted: relative imports resolved, ``from pkg import sub``
    as ``pkg.sub`` where that is a module in ``known`` (else ``pkg``), outside imports as written."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            found.update(subs or [base])
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports, resolved to module names in ``known``."""
    found: set[str] = set()
    for target in imported_names(name, path, known):
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


# --- the pure modules import no I/O module ------------------------------------------------------

#: the pure folders: no I/O, no driver calls
PURE = ("aecs_mongo.pure", "aecs_mongo.normalizer")
#: the public-surface modules a pure module may import (so they are held to the same rule)
SURFACE = ("aecs_mongo.errors", "aecs_mongo.types", "aecs_mongo.results")
#: outside modules that do I/O (``bson`` is allowed: types only)
IO_MODULES = frozenset(
    {
        "pymongo",
        "motor",
        "gridfs",
        "socket",
        "ssl",
        "subprocess",
        "imaplib",
        "poplib",
        "sqlite3",
        "urllib",
        "http",
        "asyncio",
        "threading",
        "concurrent",
        "mongomock",
    }
)


def within(name: str, packages: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def pure_violations(found: dict[str, Path]) -> list[str]:
    """``<module> imports <target>`` for each import of a pure or surface module that is not
    allowed: in the package, anything but the pure folders and the surface modules (the I/O
    folders, ``cli``, ``commands``, the package root that imports them all); outside it, an
    ``IO_MODULES`` module."""
    known = set(found)
    bad = []
    for name, path in found.items():
        if not within(name, PURE + SURFACE):
            continue
        for target in sorted(imported_names(name, path, known)):
            if within(target, ("aecs_mongo",)):
                allowed = within(target, PURE + SURFACE)
            else:
                allowed = target.partition(".")[0] not in IO_MODULES
            if not allowed:
                bad.append(f"{name} imports {target}")
    return bad


def test_the_pure_modules_import_no_io_module() -> None:
    found = modules()
    checked = [name for name in found if within(name, PURE + SURFACE)]
    assert {"aecs_mongo.pure.keys", "aecs_mongo.normalizer.parse", "aecs_mongo.results"} <= set(checked)
    assert pure_violations(found) == []


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_pure_rule_finds_io_imports(tmp_path: Path) -> None:
    """The check itself can fail: I/O imported at the top, in a function, under TYPE_CHECKING,
    from an I/O folder, from a package not written yet, and by a surface module."""
    tree = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "class AecsError(Exception): ...\n",
            "results.py": "import socket\n",
            "cli.py": "import socket\n",  # not pure: free to do I/O
            "asynchronous/__init__.py": "",
            "asynchronous/store.py": "import pymongo\n",
            "normalizer/__init__.py": "from concurrent.futures import ThreadPoolExecutor\n",
            "normalizer/parse.py": "",
            "pure/__init__.py": "",
            "pure/other.py": "",
            "pure/fine.py": (
                "from __future__ import annotations\nimport bson\nimport json\n"
                "from .. import errors\nfrom ..normalizer import parse\nfrom . import other\n"
                "from aecs_mongo.errors import AecsError\n"
            ),
            "pure/bad.py": (
                "from typing import TYPE_CHECKING\n"
                "import urllib.parse\n"
                "from ..asynchronous import store\n"
                "from aecs_mongo.commands import ingest\n"
                "from aecs_mongo import MessageStore\n"
                "if TYPE_CHECKING:\n    from pymongo import MongoClient\n"
                "def later() -> None:\n    import threading\n"
            ),
        },
    )
    assert sorted(pure_violations(modules(tree))) == [
        "aecs_mongo.normalizer imports concurrent.futures",
        "aecs_mongo.pure.bad imports aecs_mongo",
        "aecs_mongo.pure.bad imports aecs_mongo.asynchronous.store",
        "aecs_mongo.pure.bad imports aecs_mongo.commands",
        "aecs_mongo.pure.bad imports pymongo",
        "aecs_mongo.pure.bad imports threading",
        "aecs_mongo.pure.bad imports urllib.parse",
        "aecs_mongo.results imports socket",
    ]


# --- asynchronous/ and its generated twin synchronous/ -------------------------------------------

TWINS = ("aecs_mongo.asynchronous", "aecs_mongo.synchronous")


def twin_violations(found: dict[str, Path]) -> list[str]:
    """``<module> imports <target>`` for each import from one twin folder of the other."""
    known = set(found)
    bad = []
    for name, path in found.items():
        for side, other in (TWINS, TWINS[::-1]):
            if within(name, (side,)):
                bad += [f"{name} imports {t}" for t in sorted(imported_names(name, path, known)) if within(t, (other,))]
    return bad


def test_the_async_and_sync_folders_never_import_each_other() -> None:
    found = modules()
    assert "aecs_mongo.asynchronous.deletion" in imports_of(
        "aecs_mongo.asynchronous.store", found["aecs_mongo.asynchronous.store"], set(found)
    )  # the walk sees the folder's own imports: the sync twin has the mirror of each
    assert twin_violations(found) == []


def test_the_twin_rule_finds_a_crossing_import(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        {
            "asynchronous/__init__.py": "",
            "asynchronous/store.py": "from ..synchronous.store import MessageStore\nfrom .deletion import erase\n",
            "asynchronous/deletion.py": "",
            "synchronous/__init__.py": "",
            "synchronous/store.py": "from .deletion import erase\n",
            "synchronous/deletion.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from aecs_mongo.asynchronous import deletion\n"
            ),
        },
    )
    assert sorted(twin_violations(modules(tree))) == [
        "aecs_mongo.asynchronous.store imports aecs_mongo.synchronous.store",
        "aecs_mongo.synchronous.deletion imports aecs_mongo.asynchronous.deletion",
    ]


def load_unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated_drift(expected: dict[str, str], target: Path) -> list[str]:
    """How the folder ``target`` differs from the generator's ``expected`` {file name: text}."""
    present = {p.relative_to(target).as_posix(): p for p in sorted(target.rglob("*.py"))}
    drift = [f"{name}: missing" for name in sorted(expected.keys() - present.keys())]
    drift += [f"{name}: not generated (no source in asynchronous/)" for name in sorted(present.keys() - expected)]
    drift += [
        f"{name}: not what scripts/unasync.py writes (edited by hand? run python scripts/unasync.py)"
        for name in sorted(expected.keys() & present.keys())
        if present[name].read_text(encoding="utf-8") != expected[name]
    ]
    return drift


def test_the_sync_folder_is_exactly_what_unasync_generates() -> None:
    unasync = load_unasync()
    expected = unasync.expected_files()
    assert {"__init__.py", "store.py"} <= set(expected)
    assert Path(unasync.TARGET).resolve() == (ROOT / "aecs_mongo" / "synchronous").resolve()
    assert generated_drift(expected, unasync.TARGET) == []


def test_the_agents_sync_folder_is_exactly_what_unasync_generates() -> None:
    """The agent tools' twin: written once over the async store, the sync folder generated."""
    unasync = load_unasync()
    ((source, target),) = [(s, t) for s, t in unasync.PAIRS if s.parent.name == "agents"]
    expected = unasync.expected_files(source)
    assert {"__init__.py", "tools.py", "retrieval.py"} <= set(expected)
    assert generated_drift(expected, target) == []


def test_the_generated_folder_check_finds_a_hand_edit(tmp_path: Path) -> None:
    unasync = load_unasync()
    source = "async def ping(client: AsyncMongoClient) -> None:\n    await client.admin.command('ping')\n"
    expected = {"store.py": unasync.generate(source, "store.py"), "deletion.py": unasync.generate("", "deletion.py")}
    assert "def ping(client: MongoClient) -> None:\n    client.admin" in expected["store.py"]
    target = tmp_path / "synchronous"
    target.mkdir()
    (target / "store.py").write_text(expected["store.py"])
    assert generated_drift(expected, target) == ["deletion.py: missing"]
    (target / "deletion.py").write_text(expected["deletion.py"])
    assert generated_drift(expected, target) == []
    (target / "store.py").write_text(expected["store.py"].replace("'ping'", "'hello'"))  # a hand edit
    (target / "extra.py").write_text("")
    assert generated_drift(expected, target) == [
        "extra.py: not generated (no source in asynchronous/)",
        "store.py: not what scripts/unasync.py writes (edited by hand? run python scripts/unasync.py)",
    ]


# --- the rooms above the store use its API ----------------------------------------------------------

#: the rooms that reach the database only through the store's API
ABOVE_STORE = ("aecs_mongo.mail", "aecs_mongo.commands", "aecs_mongo.agents", "aecs_mongo.warm", "aecs_mongo.cli")
#: the driver's packages
DRIVER = frozenset({"pymongo", "bson", "gridfs", "motor"})


def driver_violations(found: dict[str, Path]) -> list[str]:
    """``<module> imports <target>`` for each import of the driver by a module above the store
    (every import statement: top level, in a function, under TYPE_CHECKING)."""
    known = set(found)
    bad = []
    for name, path in found.items():
        if within(name, ABOVE_STORE):
            targets = imported_names(name, path, known)
            bad += [f"{name} imports {t}" for t in sorted(targets) if t.partition(".")[0] in DRIVER]
    return bad


def collection_violations(found: dict[str, Path]) -> list[str]:
    """``<module>:<line> names a collection`` for each ``.db`` attribute and each ``db[...]``
    subscript in a module above the store."""
    bad: list[tuple[str, int]] = []
    for name, path in found.items():
        if not within(name, ABOVE_STORE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named = (isinstance(node, ast.Attribute) and node.attr == "db") or (
                isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "db"
            )
            if named:
                bad.append((name, getattr(node, "lineno", 0)))
    return [f"{name}:{line} names a collection" for name, line in sorted(bad)]


def test_the_rooms_above_the_store_import_no_driver() -> None:
    found = modules()
    assert "aecs_mongo.mail.follow" in found and "aecs_mongo.cli" in found
    bad = driver_violations(found)
    assert sorted(bad) == []


def test_the_rooms_above_the_store_name_no_collection() -> None:
    assert collection_violations(modules()) == []


def test_the_driver_rule_finds_driver_imports(tmp_path: Path) -> None:
    """The check itself can fail: the driver imported at the top, in a function, under
    TYPE_CHECKING, as ``bson`` or ``gridfs``; the store and the embedded server may."""
    tree = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": "def run() -> None:\n    from pymongo.errors import PyMongoError\n",
            "asynchronous/__init__.py": "",
            "asynchronous/store.py": "import pymongo\n",
            "embedded/__init__.py": "",
            "embedded/server.py": "from pymongo import MongoClient\n",
            "mail/__init__.py": "",
            "mail/follow.py": "from pymongo import ReplaceOne\n",
            "mail/fine.py": "import json\nfrom ..synchronous.store import MessageStore\n",
            "commands/__init__.py": "",
            "commands/base.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pymongo.database import Database\n"
            ),
            "agents/__init__.py": "",
            "agents/tools.py": "import bson\n",
            "warm/__init__.py": "",
            "warm/host.py": "import gridfs, motor.motor_asyncio\n",
        },
    )
    assert driver_violations(modules(tree)) == [
        "aecs_mongo.agents.tools imports bson",
        "aecs_mongo.cli imports pymongo.errors",
        "aecs_mongo.commands.base imports pymongo.database",
        "aecs_mongo.mail.follow imports pymongo",
        "aecs_mongo.warm.host imports gridfs",
        "aecs_mongo.warm.host imports motor.motor_asyncio",
    ]


def test_the_collection_rule_finds_db_access(tmp_path: Path) -> None:
    """The check itself can fail: ``store.db[...]``, ``ctx.db.name``, ``db[...]``; the store may."""
    tree = write_tree(
        tmp_path,
        {
            "asynchronous/context.py": "def f(ctx):\n    return ctx.db['messages']\n",
            "mail/imap.py": "def f(store):\n    return store.db['imap_sources'].find()\n",
            "commands/reading.py": "def f(ctx, db):\n    x = ctx.db.name\n    return db['threads']\n",
            "commands/fine.py": "def f(ctx, dbs):\n    return ctx.database.name, ctx.store.views, dbs['x']\n",
        },
    )
    assert collection_violations(modules(tree)) == [
        "aecs_mongo.commands.reading:2 names a collection",
        "aecs_mongo.commands.reading:3 names a collection",
        "aecs_mongo.mail.imap:2 names a collection",
    ]


# --- the rooms, one way --------------------------------------------------------------------------

#: The package's rooms, bottom first: a module imports modules of its own room and of the rooms
#: below it, never of one above (imports inside functions count). The warm path sits above the
#: command line: its client runs the command in-process when no host answers, and its host runs
#: ``cli.main``. The package root (``aecs_mongo``: the version, and the public names, each loaded
#: on first use) is outside the order: any module may read ``__version__`` there.
ROOMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the public surface", ("aecs_mongo.errors", "aecs_mongo.types", "aecs_mongo.results")),
    ("the pure core", ("aecs_mongo.pure",)),
    ("the normalizer", ("aecs_mongo.normalizer",)),
    ("the attachment extractors", ("aecs_mongo.extraction",)),
    ("the search index", ("aecs_mongo.search_index",)),
    ("the store", ("aecs_mongo.asynchronous", "aecs_mongo.synchronous")),
    ("the embedded server", ("aecs_mongo.embedded",)),
    ("the mail adapters", ("aecs_mongo.mail",)),
    ("the agents", ("aecs_mongo.agents",)),
    ("the commands", ("aecs_mongo.commands",)),
    ("the command line", ("aecs_mongo.cli",)),
    ("the warm path", ("aecs_mongo.warm",)),
    ("the package", ("aecs_mongo.__main__",)),
)


def room_of(name: str) -> int | None:
    """The index in ``ROOMS`` of the room of module ``name``; None when it is in none."""
    return next((i for i, (_, members) in enumerate(ROOMS) if within(name, members)), None)


def package_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """``imports_of`` with the imports of a parent package kept (the package root's too)."""
    found: set[str] = set()
    for target in imported_names(name, path, known):
        while target and target not in known:  # ``import a.b.c`` of an attribute path
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def room_violations(found: dict[str, Path]) -> list[str]:
    """``<module> imports <target>`` for each import of a module in a room above the importer's,
    and ``<module> is in no room`` for a module that ``ROOMS`` does not place."""
    known = set(found)
    bad = []
    for name, path in found.items():
        if name == "aecs_mongo":
            continue
        mine = room_of(name)
        if mine is None:
            bad.append(f"{name} is in no room")
            continue
        for target in sorted(package_imports(name, path, known)):
            theirs = room_of(target)
            if theirs is not None and theirs > mine:
                bad.append(f"{name} imports {target}")
    return bad


def test_no_room_imports_one_above_it() -> None:
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    assert "aecs_mongo.cli" in graph["aecs_mongo.warm.client"]  # the walk sees lazy imports
    assert room_violations(found) == []


def test_the_room_rule_finds_an_import_upwards(tmp_path: Path) -> None:
    """The check itself can fail: an import of a higher room at the top, in a function, under
    TYPE_CHECKING; a module in no room. The package root and its version are outside the order."""
    tree = write_tree(
        tmp_path,
        {
            "__init__.py": "from .cli import main\n",
            "__main__.py": "from .warm.client import run\n",
            "errors.py": "",
            "cli.py": "from .commands.base import Context\nfrom .errors import AecsMongoError\n",
            "commands/__init__.py": "",
            "commands/base.py": "def f() -> None:\n    from ..cli import main\n",
            "embedded/__init__.py": "",
            "embedded/background.py": "def start() -> None:\n    from ..warm import spawn\n",
            "warm/__init__.py": "",
            "warm/spawn.py": "",
            "warm/client.py": "def run() -> None:\n    from ..cli import main\n",
            "pure/__init__.py": "",
            "pure/keys.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from ..synchronous.store import MessageStore\n"
            ),
            "pure/version.py": "from .. import __version__\n",
            "synchronous/__init__.py": "",
            "synchronous/store.py": "from ..pure import keys\n",
            "stray/__init__.py": "",
        },
    )
    assert room_violations(modules(tree)) == [
        "aecs_mongo.commands.base imports aecs_mongo.cli",
        "aecs_mongo.embedded.background imports aecs_mongo.warm.spawn",
        "aecs_mongo.pure.keys imports aecs_mongo.synchronous.store",
        "aecs_mongo.stray is in no room",
    ]


# --- the tests themselves ---------------------------------------------------------------------------


def imports_of_test_modules(root: Path, package: str = "tests") -> list[str]:
    """Every import of a test module (``test_*``) by a module under ``root``."""
    found = modules(root, package)
    known = set(found)
    bad = []
    for name, path in found.items():
        for target in sorted(imported_names(name, path, known)):
            parts = target.split(".")
            if parts[0].startswith("test_") or (parts[0] == package and any(p.startswith("test_") for p in parts[1:])):
                bad.append(f"{name} imports {target}")
    return bad


def test_no_test_module_imports_another() -> None:
    assert "tests.helpers.cli" in modules(TESTS, "tests")
    assert imports_of_test_modules(TESTS) == []


def test_the_test_import_check_finds_one(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "conftest.py": "from .helpers.cli import Cli\n",
            "helpers/__init__.py": "",
            "helpers/cli.py": "from ..test_b import thing\n",
            "test_a.py": "from .test_b import thing\nfrom .helpers.cli import Cli\n",
            "test_b.py": "import tests.test_a\nthing = 1\n",
            "test_c.py": "def f() -> None:\n    from tests import test_b\n    import test_a\n",
        },
    )
    assert imports_of_test_modules(tree) == [
        "tests.helpers.cli imports tests.test_b",
        "tests.test_a imports tests.test_b",
        "tests.test_b imports tests.test_a",
        "tests.test_c imports test_a",
        "tests.test_c imports tests.test_b",
    ]
