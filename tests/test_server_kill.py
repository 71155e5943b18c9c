"""The database server dies: nothing the store acknowledged is lost (issue 33).

A worker process (``tests/helpers/server_kill_workers.py``) consumes work at least once, the way a mail
queue does: ``store_many`` of the shared corpus in batches of 50 with the batch's vectors, an
``expire``, an ``erase_mailbox``, a run of ``delete``s. Whatever raises a database error is
delivered again. Meanwhile the test SIGKILLs the server (SecantusDB, the embedded default) at
seeded random moments and starts it again on the same data directory; once the worker has
acknowledged its last unit of work, the server is killed once more at once. Then the database
is compared, collection by collection, with a clean run of the same work on the same server:
messages (variant records too), bodies, threads, GridFS files and the bytes of their chunks,
vectors. Nothing acknowledged may be missing and no chunk may be left without its file.

Without transactions (``standalone``) a crash between a message insert and its thread update
leaves the summary short by one until ``reindex()`` (the documented recovery), which the
standalone comparison runs first; with transactions the summaries must match as they are.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore, normalize
from aecs_mongo.embedded.server import EmbeddedServer

from .helpers.budgets import budget
from .helpers.children import start_worker
from .helpers.paths import SHARED
from .helpers.server_kill_workers import MAILBOX, vector_for

pytestmark = [pytest.mark.slow]

CORPUS = SHARED / "corpus" / "eml"
KILLS = budget("AECS_SERVER_KILLS", big=6, small=2)
ROUNDS = budget("AECS_SERVER_KILL_ROUNDS", big=3, small=1)
#: messages stored under kills (0: the whole corpus, ROUNDS times), and stored before a deletion
STORED = budget("AECS_SERVER_KILL_MESSAGES", big=0, small=150)
DELETED = budget("AECS_SERVER_KILL_DELETIONS", big=150, small=60)
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
        "vectors": {v["_id"]: bytes(v["embedding"]) for v in db.vectors.find()},
    }


def assert_same(killed: dict[str, Any], clean: dict[str, Any]) -> None:
    assert killed["chunks without a file"] == [] and killed["files with missing or extra chunks"] == []
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
        MessageStore(client[name], mailbox_id=MAILBOX).ensure_indexes()
    return client


def test_store_many_acknowledged_is_kept_when_the_server_dies(killable: EmbeddedServer, tmp_path: Path) -> None:
    files = corpus_files(tmp_path)[: STORED or None]
    listing = tmp_path / "inputs.txt"
    listing.write_text("\n".join(map(str, files)))
    prepared(killable, "killed", "clean").close()
    acks, landed = run_with_kills(killable, "store", "killed", tmp_path, str(listing), kills=KILLS, seed=33)
    assert landed >= 1, "no kill landed while the worker was storing: the test proved nothing"
    assert len(acks) == -(-len(files) // 50)
    run_clean(killable, "store", "clean", tmp_path, str(listing))
    with MongoClient(killable.uri) as client:
        killed, clean = client["killed"], client["clean"]
        acknowledged = {mid for ack in acks for mid in ack["ids"]}
        stored = {m["messageId"] for m in killed.messages.find({}, {"messageId": 1})}
        assert acknowledged - stored == set()
        store = MessageStore(killed, mailbox_id=MAILBOX)
        for path in files[-50:]:  # the last batch: acknowledged just before the last kill
            assert store.get_raw(normalize(path.read_bytes())["messageId"]) is not None
        assert {m: vector_for(m) for m in acknowledged}.keys() == {
            m for m in acknowledged if store.semantic_search(vector_for(m), limit=1)
        }
        if killable.standalone:  # no transactions: a summary can be short until reindex
            store.reindex()
        assert_same(snapshot(killed), snapshot(clean))


@pytest.mark.parametrize("job", ["expire", "erase", "delete"])
def test_deletions_acknowledged_are_kept_when_the_server_dies(
    killable: EmbeddedServer, tmp_path: Path, job: str
) -> None:
    files = corpus_files(tmp_path)[:DELETED]
    listing = tmp_path / "inputs.txt"
    listing.write_text("\n".join(map(str, files)))
    prepared(killable, "killed", "clean").close()
    for name in ("killed", "clean"):
        run_clean(killable, "store", name, tmp_path, str(listing))
    with MongoClient(killable.uri) as client:
        stamps = sorted(m["ts"] for m in client["clean"].messages.find({}, {"ts": 1}))
        ids = sorted(m["messageId"] for m in client["clean"].messages.find({}, {"messageId": 1}))
    extra: list[str] = []
    if job == "expire":
        extra = [str(stamps[len(stamps) // 2])]
    elif job == "delete":
        doomed = tmp_path / "doomed.txt"
        doomed.write_text("\n".join(ids[::3]))
        extra = [str(doomed)]
    acks, _ = run_with_kills(killable, job, "killed", tmp_path, *extra, kills=max(1, KILLS // 2), seed=34)
    assert acks, "the worker acknowledged nothing"
    run_clean(killable, job, "clean", tmp_path, *extra)
    with MongoClient(killable.uri) as client:
        killed, clean = client["killed"], client["clean"]
        if job == "erase":
            assert killed.messages.count_documents({"mailboxId": MAILBOX}) == 0
        if killable.standalone:
            MessageStore(killed, mailbox_id=MAILBOX).reindex()
            MessageStore(clean, mailbox_id=MAILBOX).reindex()
        assert_same(snapshot(killed), snapshot(clean))
        if job == "expire":
            cutoff = dt.datetime.fromtimestamp(int(extra[0]), dt.UTC)
            assert killed.messages.count_documents({"ts": {"$lt": int(cutoff.timestamp())}}) == 0


def test_a_killed_run_proves_something(killable: EmbeddedServer, tmp_path: Path) -> None:
    """The comparison can fail: a store made with ``durable=False`` and the server killed right
    after it returned loses some of what it acknowledged (else the kill test would be blind)."""
    if killable.standalone:
        pytest.skip("once is enough: the replica set shows it")
    raws = [p.read_bytes() for p in corpus_files(tmp_path)[:150]]
    lost = attempts = 0
    while not lost and attempts < 5:
        attempts += 1
        with MongoClient(killable.uri) as client:
            durable = MessageStore(client["fast"], mailbox_id=MAILBOX)
            durable.ensure_indexes()
            durable.erase_mailbox()  # durably empty
            fast = MessageStore(client["fast"], mailbox_id=MAILBOX, durable=False)
            assert len(fast.store_many(raws, batch_size=50)) == len(raws)
        killable.kill()
        killable.start()
        with MongoClient(killable.uri) as client:
            lost = len(raws) - client["fast"].messages.count_documents({"mailboxId": MAILBOX})
    assert lost > 0, f"{attempts} kills right after a non-durable store lost nothing: the kill test is blind"
