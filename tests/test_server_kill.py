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

from pathlib import Path

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore, normalize
from aecs_mongo.embedded.server import EmbeddedServer

from .helpers.server_kill import (
    KILLS,
    STORED,
    assert_same,
    corpus_files,
    prepared,
    run_clean,
    run_with_kills,
    snapshot,
)
from .helpers.server_kill_workers import MAILBOX, vector_for

pytestmark = [pytest.mark.slow]


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
