"""What the server-kill tests share (tests/test_server_kill*.py): the corpus they store, the
worker run under kills and its clean twin, and the collection-by-collection comparison."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore, normalize
from aecs_mongo.embedded.server import EmbeddedServer
from aecs_mongo.pure.lifecycle import blob_keys

from .budgets import budget
from .children import start_worker
from .paths import SHARED
from .server_kill_workers import MAILBOX, blobs_for

CORPUS = SHARED / "corpus" / "eml"
KILLS = budget("AECS_SERVER_KILLS", big=4, small=2)
ROUNDS = budget("AECS_SERVER_KILL_ROUNDS", big=2, small=1)
#: messages stored under kills (0: the whole corpus, ROUNDS times), and stored before a deletion
STORED = budget("AECS_SERVER_KILL_MESSAGES", big=0, small=150)
DELETED = budget("AECS_SERVER_KILL_DELETIONS", big=100, small=60)
_MESSAGE_ID = re.compile(rb"^message-id:", re.IGNORECASE | re.MULTILINE)


def corpus_files(tmp_path: Path) -> list[Path]:
    """The corpus's dated messages (the sort key of undated mail is the time it is stored, which
    no two runs share), ROUNDS times: each round's copy under Message-IDs of its own."""
    if not CORPUS.is_dir():
        pytest.skip("needs ../shared/corpus")
    dated = [p for p in sorted(CORPUS.glob("*.eml")) if normalize(p.read_bytes())["metadata"].get("timestamp")]
    files = list(dated)
    for round_ in range(1, ROUNDS):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        for path in dated:
            raw = _MESSAGE_ID.sub(b"X-Earlier-Message-ID:", path.read_bytes())
            tag = hashlib.sha256(raw).hexdigest()[:20]
            copy = folder / path.name
            copy.write_bytes(f"Message-ID: <r{round_}.{tag}@kill.test>\r\n".encode() + raw)
            files.append(copy)
    return files


def run_with_kills(
    server: EmbeddedServer, job: str, db_name: str, work: Path, *extra: str, kills: int, seed: int
) -> tuple[list[dict[str, Any]], int]:
    """Run ``job`` in a worker while the server is SIGKILLed ``kills`` times at random moments,
    then once more right after the worker's last acknowledgement. Returns the acknowledgements
    and how many kills landed while the worker was working."""
    acks = work / f"{job}-{db_name}.acks"
    worker = start_worker("server_kill_workers", job, server.uri, db_name, str(acks), *extra)
    rng = random.Random(seed)
    landed = 0
    for _ in range(kills):
        time.sleep(rng.uniform(0.2, 1.5))
        if worker.poll() is not None:
            break
        server.kill()
        landed += 1
        time.sleep(rng.uniform(0.0, 0.4))
        server.start()
    out, _ = worker.communicate(timeout=900)
    assert worker.returncode == 0, out
    server.kill()  # right after the last acknowledgement: it must hold
    server.start()
    return [json.loads(line) for line in acks.read_text().splitlines()], landed


def run_clean(server: EmbeddedServer, job: str, db_name: str, work: Path, *extra: str) -> None:
    acks = work / f"{job}-{db_name}.acks"
    worker = start_worker("server_kill_workers", job, server.uri, db_name, str(acks), *extra)
    out, _ = worker.communicate(timeout=900)
    assert worker.returncode == 0, out


def snapshot(db: Any) -> dict[str, Any]:
    """Every collection of the database, comparable between two runs of the same work: without
    the times of the run (``processedAt``, a variant's ``receivedAt`` and ``delivery`` id, an
    upload's date) and
    without the vector bookkeeping that depends on when blocks were sealed (each vector's bytes
    are kept). Blobs as the bytes of their chunks, in order; chunks of no file are listed."""
    messages = {}
    for m in db.messages.find():
        m.pop("processedAt", None)
        for variant in m.get("variants") or ():
            variant.pop("receivedAt", None)
            variant.pop("delivery", None)
        messages[m["_id"]] = m
    files = {f["_id"]: {k: v for k, v in f.items() if k != "uploadDate"} for f in db["aecs.files"].find()}
    chunks: dict[str, list[Any]] = {}
    for c in db["aecs.chunks"].find().sort([("files_id", 1), ("n", 1)]):
        chunks.setdefault(c["files_id"], []).append(c)
    blobs = {key: b"".join(bytes(c["data"]) for c in parts) for key, parts in chunks.items() if key in files}
    gaps = {key for key, parts in chunks.items() if [c["n"] for c in parts] != list(range(len(parts)))}
    short = {key for key, f in files.items() if len(blobs.get(key, b"")) != f["length"]}
    return {
        "messages": messages,
        "bodies": {b["_id"]: b for b in db.bodies.find()},
        "threads": {t["_id"]: t for t in db.threads.find()},
        "uidls": {u["_id"]: u for u in db.uidls.find()},
        "files": files,
        "blobs": blobs,
        "chunks without a file": sorted(set(chunks) - set(files)),
        "files with missing or extra chunks": sorted(gaps | short),
        "blob damage": {
            key: {
                "length": files.get(key, {}).get("length"),
                "chunks": [(c["n"], len(c["data"])) for c in chunks.get(key, [])],
            }
            for key in sorted(gaps | short)[:5]
        },
        "vectors": {v["_id"]: bytes(v["embedding"]) for v in db.vectors.find()},
    }


def assert_same(killed: dict[str, Any], clean: dict[str, Any]) -> None:
    assert killed["chunks without a file"] == [], killed["chunks without a file"][:5]
    assert killed["files with missing or extra chunks"] == [], killed["blob damage"]
    for name, expected in clean.items():
        if not isinstance(expected, dict):
            continue
        got = killed[name]
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        assert not missing and not extra, (name, missing[:3], extra[:3])
        for key, want in expected.items():
            if got[key] == want:
                continue
            if not isinstance(want, dict):
                raise AssertionError(f"{name} {key}: {len(got[key])} bytes, {len(want)} in the clean run")
            fields = sorted(f for f in set(want) | set(got[key]) if want.get(f) != got[key].get(f))
            raise AssertionError(f"{name} {key}: {[(f, got[key].get(f), want.get(f)) for f in fields]} (killed, clean)")


def prepared(server: EmbeddedServer, *names: str) -> MongoClient[dict[str, Any]]:
    client: MongoClient[dict[str, Any]] = MongoClient(server.uri)
    for name in names:
        MessageStore(client[name], mailbox_id=MAILBOX, blobs=blobs_for(name)).ensure_indexes()
    return client


def file_blobs(db: Any) -> dict[str, Any]:
    """The file store of a database (``blobs_for``): every complete blob's bytes by key, the
    keys its messages name that it lacks, and the temporary files interrupted writes left."""
    url = blobs_for(db.name)
    if url is None:
        return {}
    store = MessageStore(db, mailbox_id=MAILBOX, blobs=url)
    stored = {key: store.blobs.get(key) for key, _ in store.blobs.list_keys("aecs/")}
    named = {key for m in db.messages.find() for key in blob_keys(m)}
    return {"file blobs": stored, "rows without their blob": sorted(named - set(stored))}


# --- one restart at a chosen statement ---------------------------------------------------------


class Sent(monitoring.CommandListener):
    """The writer's commands in the order it sends them: (command, collection)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, str(event.command.get(event.command_name, ""))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def collections(self, command: str) -> list[str]:
        return [collection for name, collection in self.commands if name == command]


@contextlib.contextmanager
def restartable(tmp_path: Path, config: pytest.Config) -> Iterator[tuple[EmbeddedServer, Any, Any, Sent]]:
    """A replica-set server of the test's own (failpoints on, a fixed port: ``kill()`` then
    ``start()`` keeps its address), a client named ``writer`` (failpoints aim at it; ``Sent``
    records its commands) and an admin client. Replica sets only: the driver retries writes there."""
    from aecs_mongo.embedded.server import _free_port

    from ..conftest import enabled_backends

    if "rs" not in enabled_backends(config):
        pytest.skip("the rs backend is not requested")
    server = EmbeddedServer(tmp_path / "data", test_commands=True, port=_free_port("127.0.0.1"))
    server.start()
    sent = Sent()
    writer: Any = MongoClient(server.uri, appName="writer", event_listeners=[sent])
    admin: Any = MongoClient(server.uri)
    try:
        yield server, writer, admin, sent
    finally:
        writer.close()
        admin.close()
        server.stop()


def block_writer(admin: Any, sent: Sent, command: str, skip: int = 0) -> Callable[[], None]:
    """The writer's next ``command`` after ``skip`` of them blocks (a minute): the test restarts
    the server meanwhile. Returns the wait for the writer to have sent it: a restart before then
    would cut the statements ahead of it (a ``delete_many`` no driver retries), not this one."""
    data = {"failCommands": [command], "blockConnection": True, "blockTimeMS": 60_000, "appName": "writer"}
    admin.admin.command("configureFailPoint", "failCommand", mode={"skip": skip, "times": 1}, data=data)
    before = len(sent.collections(command))
    return lambda: wait_for(lambda: len(sent.collections(command)) > before + skip, f"the writer never sent {command}")


def wait_for(done: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
