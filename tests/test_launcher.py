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
from typing import Any, ClassVar

import pytest
from pymongo import MongoClient

from aecs_mongo.embedded import secantus_patches
from aecs_mongo.embedded.launcher import JOURNAL_FILE_MAX, MODULE, storage_environment
from aecs_mongo.embedded.secantus_patches import (
    CATALOG_MEMO,
    CATALOG_STATEMENTS,
    KNOWN_VERSION,
    TABLE_COMPRESSOR,
    Patch,
    apply,
    catalog_differences,
    compression_differences,
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
    assert apply(storage, "0.7.1", said.append, (CATALOG_MEMO,)) is True  # runs, without the patch
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
    lines = done.stdout.splitlines()
    assert lines[0].endswith("running without the index-catalog memo")
    assert "no wiredtiger.Session.create in storage.wt" in lines[1]
    assert lines[1].endswith("running without the tables' compression")


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
        "print(storage.wt.Session.create.__qualname__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == [
        "memo_index_catalog.<locals>._index_options_map",
        "memo_index_catalog.<locals>.keeping.<locals>.run",
        "compress_tables.<locals>.create_compressed",
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


# --- the storage's fixed costs -------------------------------------------------------------------


def test_the_journal_files_are_sized_after_what_the_server_sets() -> None:
    """WiredTiger reads ``WIREDTIGER_CONFIG`` after the server's own settings: ours sizes the
    journal files, and what a user already set there comes after it (and wins)."""
    assert storage_environment({}) == {"WIREDTIGER_CONFIG": f"log=(file_max={JOURNAL_FILE_MAX})"}
    mine = storage_environment({"WIREDTIGER_CONFIG": "log=(file_max=2MB)"})
    assert mine == {"WIREDTIGER_CONFIG": f"log=(file_max={JOURNAL_FILE_MAX}),log=(file_max=2MB)"}


def fake_wiredtiger() -> Any:
    """A ``secantus.storage`` whose ``wt.Session.create`` records what it was asked."""

    class Session:
        created: ClassVar[list[tuple[Any, ...]]] = []

        def create(self, name: str, config: str | None = None) -> int:
            Session.created.append((name, config))
            return 0

    return SimpleNamespace(wt=SimpleNamespace(Session=Session), _OPLOG_TABLE="table:secantus_oplog")


def test_the_servers_tables_are_created_compressed_and_no_other() -> None:
    storage = fake_wiredtiger()
    assert compression_differences(storage, KNOWN_VERSION) == []
    secantus_patches.compress_tables(storage)
    session = storage.wt.Session()
    session.create("table:secantus_oplog", "key_format=q,value_format=u")
    session.create("table:secantus_documents_sh3", "key_format=SSq,value_format=u,block_compressor=lz4")
    session.create("table:secantus_users", "")
    session.create("table:other", "key_format=q,value_format=u")
    session.create("file:secantus_x.wt", "key_format=q")
    assert storage.wt.Session.created == [
        ("table:secantus_oplog", f"key_format=q,value_format=u,block_compressor={TABLE_COMPRESSOR}"),
        ("table:secantus_documents_sh3", "key_format=SSq,value_format=u,block_compressor=lz4"),  # its own kept
        ("table:secantus_users", f"block_compressor={TABLE_COMPRESSOR}"),
        ("table:other", "key_format=q,value_format=u"),
        ("file:secantus_x.wt", "key_format=q"),
    ]
    assert compression_differences(SimpleNamespace(), "0.8.0") == [
        f"version 0.8.0, not {KNOWN_VERSION}",
        "no wiredtiger.Session.create in storage.wt",
        "storage._OPLOG_TABLE is None, not a name starting 'table:secantus_'",
    ]


def _on_disk(path: Path) -> dict[str, int]:
    """Bytes on disk (allocated blocks) of each file under ``path``, by its path in it."""
    return {str(f.relative_to(path)): f.lstat().st_blocks * 512 for f in path.rglob("*") if f.is_file()}


#: The data directory of the sample mailbox, once its server stopped, stays under this: one
#: journal file (``JOURNAL_FILE_MAX``, 10 MiB), WiredTiger's metadata and the tables' first
#: pages (about 0.4 MB, compressed), and the eight messages with their indexes, blobs and search
#: index (0.2 MB), with room to spare.
SAMPLE_DATA_DIR_BOUND = 13_000_000


@needs_server
def test_the_sample_mailbox_takes_little_room_and_the_oplog_serves_its_readers(tmp_path: Path) -> None:
    """The command line's embedded default, end to end: ``ingest`` of the sample mailbox on a
    fresh data directory (a server of its own, stopped with the command), the directory
    measured once it stopped; then, on that directory's server, a feed consumer reads a
    message stored after it started, and, after a restart, resumes from its position in the
    (compressed) oplog."""
    from aecs_mongo import MessageStore

    from .helpers.cli import aecs, command_env

    samples = Path(__file__).resolve().parents[1] / "samples" / "mailbox"
    data = tmp_path / "data"
    env = command_env(("MONGODB_URI", "AECS_KEEP_SERVER"))
    done = aecs(
        "--data-dir", str(data), "--keep-server", "0", "ingest", "--no-progress", str(samples), cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr.decode()
    files = _on_disk(data)
    assert sum(files.values()) < SAMPLE_DATA_DIR_BOUND, sorted(files.items(), key=lambda kv: -kv[1])[:8]
    journal = {name: size for name, size in files.items() if Path(name).name.startswith("WiredTigerLog.")}
    assert journal and all(size <= 10 * 1024 * 1024 for size in journal.values()), journal
    raws = sorted(samples.glob("*.eml"))
    server = EmbeddedServer(data)
    try:
        server.start()
        with MongoClient(server.uri) as client:
            store = MessageStore(client["feeds"], mailbox_id="feed-test")
            store.store(raws[0].read_bytes())
            with store.watch("reader", since="now", max_await_ms=200) as feed:
                assert feed.next_batch(10) == []  # the position: after what is stored
                second = store.store(raws[1].read_bytes())
                got = feed.next_batch(10)
                assert [item.message_id for item in got] == [second.message_id]
            third = store.store(raws[2].read_bytes())
        server.stop(remove_tmp=False)
        server.start()
        with MongoClient(server.uri) as client:
            store = MessageStore(client["feeds"], mailbox_id="feed-test")
            with store.watch("reader", max_await_ms=200) as feed:
                assert [item.message_id for item in feed.next_batch(10)] == [third.message_id]
    finally:
        server.stop(remove_tmp=False)


@needs_server
def test_a_write_larger_than_a_journal_file_survives_a_crash(tmp_path: Path) -> None:
    """A batch whose transaction is one journal record of several megabytes (larger than
    ``JOURNAL_FILE_MAX``): acknowledged, the server killed (SIGKILL: no checkpoint), started
    again; recovery gives back its row and, byte for byte, its raw bytes. The server syncs its
    log on every commit, as the command line's own server does (``sync_on_commit=durable``)."""
    from email.message import EmailMessage

    from aecs_mongo import MessageStore

    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "a@example.com", "b@example.com", "big"
    message["Message-ID"] = "<big-journal-record@example.com>"
    message.set_content("the contract attached")
    message.add_attachment(os.urandom(3 * 1024 * 1024), maintype="application", subtype="pdf", filename="c.pdf")
    raw = message.as_bytes()
    server = EmbeddedServer(tmp_path / "data", auth=False, sync_on_commit=True)
    try:
        server.start()
        with MongoClient(server.uri) as client:
            stored = MessageStore(client["aecs"], mailbox_id="big").store_many([raw])
        server.kill()
        server.start()
        with MongoClient(server.uri) as client:
            store = MessageStore(client["aecs"], mailbox_id="big")
            assert store.get_message(stored[0].message_id) is not None  # the row, not only the blobs
            assert store.get_raw(stored[0].message_id) == raw
    finally:
        server.stop(remove_tmp=False)


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
