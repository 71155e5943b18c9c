"""The embedded server's launcher (``python -m aecs_mongo.embedded.launcher``) and its patches of
SecantusDB: each patch does what it is for, and is left out, saying so, where the installed
release's internals are not the ones it knows."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aecs_mongo.embedded import secantus_patches
from aecs_mongo.embedded.launcher import MODULE
from aecs_mongo.embedded.secantus_patches import (
    CATALOG_MEMO,
    CATALOG_STATEMENTS,
    KNOWN_VERSION,
    Patch,
    apply,
    catalog_differences,
)
from aecs_mongo.embedded.server import EmbeddedServer, embedded_available

EMBEDDED = Path(__file__).resolve().parents[1] / "aecs_mongo" / "embedded"
needs_server = pytest.mark.skipif(not embedded_available(), reason="the embedded server is not installed")


def fake_storage() -> Any:
    """A ``secantus.storage`` of the known shape whose statements read the catalog as
    SecantusDB's do (several times each: once per document, twice for the others); ``reads``
    counts the catalog reads."""

    class Storage:
        reads = 0

        def _index_options_map(self, db: str, coll: str) -> dict[str, Any]:
            Storage.reads += 1
            return {"name_1": {"unique": Storage.reads}}

        def _insert_chunk(
            self,
            db: str,
            coll: str,
            prepared: Any,
            *,
            base_index: int,
            ordered: bool,
            sync: bool,
            fresh_id_keys: Any,
        ) -> list[Any]:
            return [self._index_options_map(db, coll) for _ in prepared]

    for name, parameters in CATALOG_STATEMENTS.items():
        if name != "_insert_chunk":
            read = "self._index_options_map(db, coll)"
            source = f"def {name}({', '.join(parameters)}):\n    return [{read}, {read}]\n"
            namespace: dict[str, Any] = {}
            exec(source, namespace)
            setattr(Storage, name, namespace[name])
    return SimpleNamespace(Storage=Storage)


# --- the check -------------------------------------------------------------------------------------


def test_the_known_release_has_no_differences() -> None:
    assert catalog_differences(fake_storage(), KNOWN_VERSION) == []


def test_the_check_names_each_difference() -> None:
    storage = fake_storage()
    del storage.Storage._delete_chunk
    storage.Storage._update_chunk = lambda self, db, coll, rids: None
    found = catalog_differences(storage, "0.8.0")
    assert found == [
        f"version 0.8.0, not {KNOWN_VERSION}",
        "Storage._update_chunk(self, db, coll, rids), not (self, db, coll, rids, filter, update, array_filters,"
        " let, collation_obj, validator, validator_moderate, journal, want_posts)",
        "no method Storage._delete_chunk",
    ]
    assert catalog_differences(None, KNOWN_VERSION) == ["no class storage.Storage"]
    assert catalog_differences(SimpleNamespace(Storage=object), "1.0") == [
        f"version 1.0, not {KNOWN_VERSION}",
        "no method Storage._index_options_map",
        *[f"no method Storage.{name}" for name in CATALOG_STATEMENTS],
    ]


def test_a_patch_whose_internals_differ_is_left_out_and_said_once() -> None:
    storage = fake_storage()
    original = storage.Storage._index_options_map
    said: list[str] = []
    assert apply(storage, "0.7.1", said.append) is True  # runs, without the patch
    assert storage.Storage._index_options_map is original
    assert said == [
        "aecs-mongo: SecantusDB 0.7.1 differs from the release this launcher knows "
        f"(version 0.7.1, not {KNOWN_VERSION}): running without the index-catalog memo"
    ]


def test_an_essential_patch_whose_internals_differ_stops_the_server() -> None:
    installed: list[object] = []
    essential = Patch("a fix", lambda storage, version: ["no class storage.Storage"], installed.append, essential=True)
    said: list[str] = []
    assert apply(None, "9", said.append, (essential, CATALOG_MEMO)) is False
    assert installed == [] and len(said) == 2
    assert said[0].endswith("(no class storage.Storage): not starting")


def test_the_launcher_checks_the_installed_release(tmp_path: Path) -> None:
    """End to end, on a release with other internals (a stand-in ``secantus`` package first on
    the path): ``--check`` says what differs and fails."""
    stand_in = tmp_path / "secantus"
    stand_in.mkdir()
    (stand_in / "__init__.py").write_text('__version__ = "0.9.0"\n')
    (stand_in / "storage.py").write_text("class Storage:\n    def _index_options_map(self, db): ...\n")
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--check"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("aecs-mongo: SecantusDB 0.9.0 differs from the release this launcher knows")
    assert "Storage._index_options_map(self, db), not (self, db, coll)" in done.stdout
    assert done.stdout.rstrip().endswith("running without the index-catalog memo")


def test_a_launcher_without_secantus_says_so_and_stops(tmp_path: Path) -> None:
    (tmp_path / "secantus.py").write_text('raise ImportError("a broken install")\n')
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--parent", str(os.getpid()), "--", "--port", "1"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (1, "aecs-mongo: SecantusDB is not installed (a broken install)\n")


@needs_server
def test_every_patch_applies_to_the_installed_release() -> None:
    """The installed SecantusDB is the release the patches know (the ``embedded`` extra pins it),
    and the launcher installs them: a release with other internals would run without them."""
    done = subprocess.run([sys.executable, "-m", MODULE, "--check"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "aecs-mongo: every patch applies to the installed SecantusDB\n")
    code = (
        "from aecs_mongo.embedded.launcher import patch_server\n"
        "assert patch_server()\n"
        "from secantus import storage\n"
        "print(storage.Storage._index_options_map.__qualname__, storage.Storage._insert_chunk.__qualname__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == [
        "memo_index_catalog.<locals>._index_options_map",
        "memo_index_catalog.<locals>.keeping.<locals>.run",
    ]


# --- the index-catalog memo ----------------------------------------------------------------------


def test_the_catalog_is_read_once_per_statement() -> None:
    """Three documents in one insert statement: one catalog read (three without the memo), and
    the next statement reads it anew; every other write statement keeps it likewise; a read
    outside any statement is never kept."""
    storage = fake_storage()
    secantus_patches.memo_index_catalog(storage)
    store = storage.Storage()
    kwargs = {"base_index": 0, "ordered": True, "sync": False, "fresh_id_keys": set()}
    first = store._insert_chunk("db", "people", [1, 2, 3], **kwargs)
    assert storage.Storage.reads == 1 and first == [{"name_1": {"unique": 1}}] * 3
    second = store._insert_chunk("db", "people", [1, 2], **kwargs)
    assert storage.Storage.reads == 2 and second == [{"name_1": {"unique": 2}}] * 2
    for count, (name, parameters) in enumerate(list(CATALOG_STATEMENTS.items())[1:], start=3):
        getattr(store, name)("db", "people", *[None] * (len(parameters) - 3))
        assert storage.Storage.reads == count, name
    store._index_options_map("db", "people")
    store._index_options_map("db", "people")
    assert storage.Storage.reads == len(CATALOG_STATEMENTS) + 3


# --- stopping ------------------------------------------------------------------------------------


def _stop_seconds(server: EmbeddedServer) -> float:
    server.start()
    started = time.monotonic()
    server.stop()
    return time.monotonic() - started


@needs_server
def test_a_clean_stop_takes_less_than_the_accept_threads_join(tmp_path: Path) -> None:
    """SecantusDB's stop joins its accept thread for up to 2 s, which closing the listening
    socket does not wake on Linux: the stopper connects to the port. The fastest of two stops is
    under that (a loaded machine can slow one)."""
    server = EmbeddedServer(tmp_path / "data", auth=False)
    times = [_stop_seconds(server)]
    if times[0] >= 1.8:
        times.append(_stop_seconds(server))
    assert min(times) < 1.8, times


@needs_server
def test_an_orphaned_server_stops_cleanly_and_quickly(tmp_path: Path) -> None:
    """The parent SIGKILLed: its server's watch sees it within 0.2 s and stops the server with
    SIGTERM, waking its own listener (a stop under 2 s), never reaching the hard exit."""
    parent_code = (
        "import sys, time\n"
        "from aecs_mongo.embedded.server import EmbeddedServer\n"
        "server = EmbeddedServer(sys.argv[1], auth=False)\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    took = []
    for _attempt in range(2):
        parent = subprocess.Popen(
            [sys.executable, "-c", parent_code, str(tmp_path / "data")], stdout=subprocess.PIPE, text=True
        )
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        started = time.monotonic()
        while time.monotonic() - started < 30:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except OSError:
                break  # gone
            time.sleep(0.02)
        took.append(time.monotonic() - started)
        log = (tmp_path / "data" / "server.log").read_text(errors="replace")
        assert "did not stop" not in log, log[-2000:]
        if took[-1] < 1.8:
            break
    assert min(took) < 1.8, took


# --- what the launcher imports -------------------------------------------------------------------

#: rooms above the embedded server: it imports none of them (they pass in what they need)
ABOVE = ("aecs_mongo.warm", "aecs_mongo.cli", "aecs_mongo.commands", "aecs_mongo.mail", "aecs_mongo.agents")


def imports(source: str, package: str, top_level_only: bool = False) -> set[str]:
    """The modules ``source`` (a module of ``package``) imports, relative imports resolved."""
    tree = ast.parse(source)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            found.update(f"{module}.{alias.name}" if node.level and not node.module else module for alias in node.names)
    return found


def test_the_import_checks_can_fail() -> None:
    source = "import os\nfrom ..warm import spawn\nfrom . import secantus_patches\ndef f():\n    import json\n"
    assert imports(source, "aecs_mongo.embedded") == {
        "os",
        "aecs_mongo.warm",
        "aecs_mongo.embedded.secantus_patches",
        "json",
    }
    assert imports(source, "aecs_mongo.embedded", top_level_only=True) == {
        "os",
        "aecs_mongo.warm",
        "aecs_mongo.embedded.secantus_patches",
    }


def test_the_embedded_server_imports_no_room_above_it() -> None:
    for path in sorted(EMBEDDED.glob("*.py")):
        above = [m for m in imports(path.read_text(), "aecs_mongo.embedded") if m.startswith(ABOVE)]
        assert above == [], path.name


def test_the_launcher_imports_the_standard_library_before_the_server() -> None:
    """On every start's path: nothing of the package's own but the launcher and its patches."""
    for name in ("launcher.py", "secantus_patches.py"):
        for module in imports((EMBEDDED / name).read_text(), "aecs_mongo.embedded", top_level_only=True):
            assert module.partition(".")[0] in sys.stdlib_module_names, (name, module)
