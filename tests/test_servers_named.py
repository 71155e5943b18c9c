"""Where the package names a server, read from the source.

- No hand-written module names mongomock: the tests' fast tier runs the program users run, and
  what it cannot run is marked for a real server (the ``server`` marker).
- SecantusDB is named only in the dialect module (``pure/dialect.py``, which owns every way it
  differs from mongod) and in ``embedded/`` (the launcher of the embedded server).

``synchronous/`` is generated from ``asynchronous/`` and checked there. Each rule has a test that
shows it can fail, on a small tree in tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import aecs_mongo

PACKAGE = Path(aecs_mongo.__file__).resolve().parent
#: generated folders: what they say, their sources say
GENERATED = ("synchronous",)
#: where SecantusDB may be named
SECANTUS_PLACES = ("pure/dialect.py", "embedded/")


def hand_written(root: Path) -> Iterable[tuple[str, str]]:
    """(path relative to ``root``, text) of every hand-written Python module under ``root``."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] not in GENERATED:
            yield relative, path.read_text(encoding="utf-8")


def naming(root: Path, word: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """``<path>:<line>`` of each line of a hand-written module that names ``word`` (any case),
    outside the ``allowed`` files and folders (a folder ends with ``/``)."""
    found = []
    for relative, text in hand_written(root):
        if any(relative == place or (place.endswith("/") and relative.startswith(place)) for place in allowed):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if word.lower() in line.lower():
                found.append(f"{relative}:{number}")
    return found


def test_no_module_names_mongomock() -> None:
    assert naming(PACKAGE, "mongomock") == []


def test_secantusdb_is_named_only_by_the_dialect_and_the_embedded_server() -> None:
    assert naming(PACKAGE, "secantus", SECANTUS_PLACES) == []
    assert any(place.startswith("pure/dialect.py:") for place in naming(PACKAGE, "secantus"))


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_rules_find_a_named_server(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "asynchronous/store.py": 'UNIT = type(db).__module__.startswith("mongomock")\n',
            "synchronous/store.py": 'UNIT = type(db).__module__.startswith("mongomock")\n',
            "pure/queries.py": "# SecantusDB drops the bound of $gte\n",
            "pure/dialect.py": 'SECANTUSDB = Dialect("secantusdb")\n',
            "embedded/server.py": "import secantusdb\n",
            "cli.py": "print('using the embedded SecantusDB server')\n",
        },
    )
    assert naming(root, "mongomock") == ["asynchronous/store.py:1"]
    assert naming(root, "secantus", SECANTUS_PLACES) == ["cli.py:1", "pure/queries.py:1"]
