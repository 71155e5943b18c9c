"""The database server dies: nothing the store acknowledged is lost.

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

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern

from aecs_mongo import MessageStore, normalize
from aecs_mongo.embedded.server import EmbeddedServer
from aecs_mongo.pure.keys import blob_prefix, message_key
from aecs_mongo.pure.variants import variant_blob_key

from .helpers.server_kill import (
    KILLS,
    STORED,
    assert_same,
    block_writer,
    corpus_files,
    file_blobs,
    prepared,
    restartable,
    run_clean,
    run_with_kills,
    snapshot,
)
from .helpers.server_kill_workers import MAILBOX, blobs_for, vector_for

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("blob_store", ["gridfs", "file"])
def test_store_many_acknowledged_is_kept_when_the_server_dies(
    killable: EmbeddedServer, tmp_path: Path, blob_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On GridFS and on the file store (``file:///DIR``, one directory per database): the file
    store's blobs are compared too, and no message may name a blob its store lacks. (The file
    store runs on the replica set only: its blob path does not depend on transactions.)"""
    if blob_store == "file":
        if killable.standalone:
            pytest.skip("the file store's kill test runs on the replica set")
        monkeypatch.setenv("AECS_TEST_BLOBS_DIR", str(tmp_path / "blobs"))
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
        store = MessageStore(killed, mailbox_id=MAILBOX, blobs=blobs_for("killed"))
        for path in files[-50:]:  # the last batch: acknowledged just before the last kill
            assert store.get_raw(normalize(path.read_bytes())["messageId"]) is not None
        assert {m: vector_for(m) for m in acknowledged}.keys() == {
            m for m in acknowledged if store.semantic_search(vector_for(m), limit=1)
        }
        if killable.standalone:  # no transactions: a summary can be short until reindex
            store.reindex()
        assert_same(snapshot(killed), snapshot(clean))
        stored, expected = file_blobs(killed), file_blobs(clean)
        assert stored.get("rows without their blob", []) == []
        assert stored.get("file blobs") == expected.get("file blobs")
        if blob_store == "file":
            assert len(expected["file blobs"]) >= len(files) and not list(killed["aecs.files"].find())


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


def _copy(body: str) -> bytes:
    return (
        "From: Ann <ann@example.com>\r\nTo: bob@example.com\r\nSubject: launch\r\n"
        "Date: Mon, 02 Nov 2026 09:00:00 +0000\r\nMessage-ID: <launch@example.com>\r\n\r\n" + body + "\r\n"
    ).encode()


def test_a_restart_between_a_variant_blob_and_its_record_is_repaired(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server restarts after a copy's blob was uploaded and before its record was written:
    the driver retries the record's update on the new server, which never had the blob (what a
    kill takes of writes not yet in the journal; deleted here so that the loss is certain, not a
    matter of when the log was flushed). The batch sees the restart (``hello``'s process id)
    and writes again: the copy's blob is uploaded again. It was left missing before, with its
    record present (seen by the kill test above). On a replica set only: the driver retries
    writes there, not on a standalone server (there the batch fails and is delivered again)."""
    first, other = _copy("the plan"), _copy("the plan, as the list sent it")
    key = variant_blob_key(blob_prefix(MAILBOX, message_key("launch@example.com")), hashlib.sha256(other).hexdigest())
    with restartable(tmp_path, request.config) as (server, writer, admin, sent):
        store = MessageStore(writer["restart"], mailbox_id=MAILBOX)
        store.ensure_indexes()
        assert store.store(first).outcome == "stored"
        blocked = block_writer(admin, sent, "update")  # the copy's record
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(store.store_many([other])))
        worker.start()
        blocked()
        durably = admin.get_database("restart", write_concern=WriteConcern(j=True))
        files, chunks = durably["aecs.files"], durably["aecs.chunks"]
        assert files.find_one({"_id": key}) is not None  # the copy's blob came before its record
        files.delete_one({"_id": key})
        chunks.delete_many({"files_id": key})
        server.kill()
        server.start()
        worker.join(timeout=120)
        assert not worker.is_alive()
        ((result,),) = outcome
        assert result.outcome == "variant"
        assert store.get_raw_variants("launch@example.com") == [first, other]


def test_a_restart_between_two_records_of_a_batch_keeps_the_batch_order(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A batch brings two other copies of a stored message; the server restarts after the
    first's record was written and before the second's, which the driver retries on the new
    server, where the first's record is gone (taken back here so the loss is certain). The pass
    after the restart records the first again, and puts the two in the batch's order, as one
    clean delivery leaves them: it appended the first after the second (the kill test found the
    order changed once)."""
    first, one, two = _copy("the plan"), _copy("the plan, once more"), _copy("the plan, and again")
    with restartable(tmp_path, request.config) as (server, writer, admin, sent):
        store = MessageStore(writer["restart"], mailbox_id=MAILBOX)
        store.ensure_indexes()
        assert store.store(first).outcome == "stored"
        blocked = block_writer(admin, sent, "update", skip=1)  # the second copy's record
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(store.store_many([one, two])))
        worker.start()
        blocked()
        messages = admin.get_database("restart", write_concern=WriteConcern(j=True)).messages
        assert (messages.find_one({}, {"variantHashes": 1}) or {}).get("variantHashes")  # the first's record
        messages.update_one({}, {"$unset": {"variants": "", "variantHashes": ""}})  # lost with the server
        server.kill()
        server.start()
        worker.join(timeout=120)
        assert not worker.is_alive()
        ((a, b),) = outcome
        assert (a.outcome, b.outcome) == ("variant", "variant")
        assert store.get_raw_variants("launch@example.com") == [first, one, two]
