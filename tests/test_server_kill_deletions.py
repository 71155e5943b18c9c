"""The database server dies during an ``expire``, an ``erase_mailbox`` and a run of ``delete``s:
nothing the store acknowledged is lost (the method and the comparison are
tests/test_server_kill.py's, in a file of its own so that pytest-xdist runs it beside that one)."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pytest
from pymongo import MongoClient, WriteConcern

from aecs_mongo import MessageStore
from aecs_mongo.embedded.server import EmbeddedServer
from aecs_mongo.pure.keys import doc_id, thread_key

from .helpers.server_kill import (
    DELETED,
    KILLS,
    assert_same,
    block_writer,
    corpus_files,
    prepared,
    restartable,
    run_clean,
    run_with_kills,
    snapshot,
)
from .helpers.server_kill_workers import MAILBOX

pytestmark = [pytest.mark.slow]


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


def _note(n: int) -> bytes:
    return (
        f"From: Ann <ann@example.com>\r\nTo: bob@example.com\r\nSubject: note {n}\r\n"
        f"Date: Mon, 02 Nov 2026 09:0{n}:00 +0000\r\nMessage-ID: <note-{n}@example.com>\r\n\r\nbody {n}\r\n"
    ).encode()


def test_a_restart_between_a_thread_write_and_the_rest_of_an_expire_is_repaired(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server restarts while ``expire`` is between its statements: it removed the summary of
    a thread its batch empties, then its read of the batch's blobs was cut by the restart and
    retried by the driver on the new server, which never had the summary's removal (what a kill
    takes of writes not yet in the journal; put back here so that the loss is certain). The
    rest of the batch, its journaled ``messages`` delete included, ran there. The batch sees the
    restart (``hello``'s process id) and is deleted again: no summary of an empty thread is left
    (the kill test above left one once). A replica set: the driver retries a read on either,
    and its statements after a restart simply go to the new server."""

    between = dt.datetime(2026, 11, 2, 9, 1, 30, tzinfo=dt.UTC)  # note 1 is older, note 2 younger
    with restartable(tmp_path, request.config) as (server, writer, admin, sent):
        stores = {}
        for name in ("rehearsal", "restart"):
            stores[name] = MessageStore(writer[name], mailbox_id=MAILBOX)
            stores[name].ensure_indexes()
            assert [r.outcome for r in stores[name].store_many([_note(1), _note(2)])] == ["stored", "stored"]
        sent.commands.clear()
        assert stores["rehearsal"].expire(between).messages == 1  # the statements of the expire, in order
        thread = doc_id(MAILBOX, thread_key("note-1@example.com"))
        summary = admin["restart"].threads.find_one({"_id": thread})
        assert summary is not None
        blocked = block_writer(admin, sent, "find", skip=sent.collections("find").index("aecs.files"))
        expired: list[int] = []
        worker = threading.Thread(target=lambda: expired.append(stores["restart"].expire(between).messages))
        worker.start()
        blocked()  # the expire is in its blob read, which the driver retries
        threads = admin.get_database("restart", write_concern=WriteConcern(j=True)).threads
        assert threads.find_one({"_id": thread}) is None  # the summary's removal came before
        threads.insert_one(summary)  # the removal is lost with the server
        server.kill()
        server.start()
        worker.join(timeout=120)
        assert not worker.is_alive() and expired == [1]
        restart = writer["restart"]
        assert [m["messageId"] for m in restart.messages.find()] == ["note-2@example.com"]
        assert restart.threads.find_one({"_id": thread}) is None  # no summary of the emptied thread
