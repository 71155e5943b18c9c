"""What only a real server can show: query plans, GridFS interoperability, fault injection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gridfs
import pytest
from pymongo import MongoClient, monitoring
from pymongo.collation import Collation
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from aecs_mongo import MessageStore
from aecs_mongo.pure.explain import plan_stages
from aecs_mongo.pure.keys import blob_prefix, message_key

from .helpers.factories import email
from .helpers.failpoints import failpoint
from .helpers.monitoring import DRIVER_FIELDS, Recorder

pytestmark = pytest.mark.server

DATA_COLLECTIONS = {"messages", "bodies", "threads", "uidls"}


SELECTING_FIELDS = {
    "threadKey": "aecs_messages_thread",
    "lookups": "aecs_messages_lookups",
    "participants": "aecs_messages_participant",
    "references": "aecs_messages_references",
}


def expected_index(command: dict[str, Any]) -> str | None:
    """The index an unhinted read must land on: the one its distinguishing equality selects."""
    if command.get("find") == "threads":
        return "_id_" if "_id" in (command.get("filter") or {}) else "aecs_threads_recent"
    selector = command.get("filter") or {}
    clauses = selector.get("$and", [selector])
    for clause in clauses:
        for field, index in SELECTING_FIELDS.items():
            if field in clause:
                return index
    return None


def test_every_read_uses_an_index(recorded: tuple[MessageStore, Recorder], db: Any) -> None:
    store, recorder = recorded
    for n in range(1, 13):
        store.store(
            email(n, thread=f"t{n % 3}@x", in_reply_to=f"m{n - 1}@example.com", references=[f"m{n - 1}@example.com"])
        )
    store.tag(["m4@example.com"], add=["work"])  # a tagged message: list_threads reads thread tags
    recorder.commands.clear()
    store.get_message("m3@example.com")
    store.get_thread("t1@x")
    store.thread_context("t1@x", limit=2)
    page = store.list_messages(limit=5)
    store.list_messages(cursor=page.next_cursor, limit=5)
    store.list_messages(sender="bob@example.com", limit=5)
    store.list_messages(thread_id="t2@x", limit=5)
    assert {t["threadId"]: t["tags"] for t in store.list_threads(limit=3).threads}["t1@x"] == ["work"]
    store.with_participant("alice@example.com", limit=5)
    store.replies_to("m4@example.com")
    store.stale("1.0")
    store.find("Subject", "Re: topic")
    store.find("Date", "2026-06-29")
    store.walk_thread("m5@example.com")
    store.message_ids()
    checked = 0
    for command in recorder.commands:
        name = next(iter(command))
        if command[name] not in DATA_COLLECTIONS:
            continue
        body = {k: v for k, v in command.items() if k not in DRIVER_FIELDS}
        explained = db.command({"explain": body, "verbosity": "queryPlanner"})
        kinds = {s["stage"] for s in plan_stages(explained)}
        assert "COLLSCAN" not in kinds, (body, kinds)
        assert kinds & {"IXSCAN", "IDHACK", "EXPRESS_IXSCAN", "EXPRESS_IDHACK", "COUNT_SCAN"}, (body, kinds)
        used = {s.get("indexName") for s in plan_stages(explained)}
        expected = body.get("hint") or expected_index(body)
        if expected:
            assert expected in used, (body, used)
        checked += 1
    assert checked >= 16


def test_blobs_are_readable_by_gridfs(store: MessageStore, db: Any) -> None:
    raw = bytes(range(256)) * 3100  # 793,600 bytes: four chunks of 255 KiB
    e = email(1)
    e["content"]["rawFull"] = None
    store.store(e, attachments=None)
    e2 = email(2)
    e2["attachments"] = [
        {
            "id": "m2@example.com:0",
            "filename": "b.bin",
            "contentType": "application/octet-stream",
            "size": len(raw),
            "cid": None,
        }
    ]
    store.store(e2, attachments=[raw])
    bucket = gridfs.GridFSBucket(db, bucket_name="aecs")
    key = blob_prefix("alice", message_key("m2@example.com")) + "att/0"
    assert bucket.open_download_stream(key).read() == raw
    assert db["aecs.chunks"].count_documents({"files_id": key}) == 4


def test_interrupted_upload_is_completed_by_a_retry(store: MessageStore, db: Any, failpoints: Any) -> None:
    raw = b"x" * (600 * 1024)  # three chunks, written by one insert
    e = email(1)
    e["attachments"] = [{"id": None, "filename": "x", "contentType": "text/plain", "size": len(raw), "cid": None}]
    # the store's first use records its blob location (the settings document, an insert), then
    # the chunks' insert succeeds and the third insert (the files document) fails
    failpoint(failpoints, mode={"skip": 2, "times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
    with pytest.raises(PyMongoError):
        store.store(e, attachments=[raw])
    key = blob_prefix("alice", message_key("m1@example.com")) + "att/0"
    assert db["aecs.chunks"].count_documents({"files_id": key}) == 3  # orphan chunks, no files doc
    assert db["aecs.files"].count_documents({}) == 0
    assert db.messages.count_documents({}) == 0  # nothing points at the missing blob
    result = store.store(e, attachments=[raw])
    assert result.inserted
    assert store.get_attachment("m1@example.com", 0) == raw
    assert db["aecs.chunks"].count_documents({"files_id": key}) == 3


def test_failed_thread_update_rolls_back_or_is_repaired(
    store: MessageStore, db: Any, failpoints: Any, backend: str
) -> None:
    store.store(email(1))
    failpoint(failpoints, mode={"times": 1}, data={"failCommands": ["update"], "errorCode": 2})
    with pytest.raises(PyMongoError):
        store.store(email(2))
    if db.client.admin.command("hello").get("setName"):
        # a transaction: the message, its body and the summary roll back together
        assert db.messages.count_documents({}) == 1 and db.bodies.count_documents({}) == 1
        assert store.store(email(2)).inserted is True
    else:
        # standalone: the message insert is the commit point; the summary is one short ...
        assert db.messages.count_documents({}) == 2
        assert db.threads.find_one()["messageCount"] == 1
        assert store.store(email(2)).inserted is False
        store.reindex()  # ... until the documented recovery rebuilds it
    assert db.threads.find_one()["messageCount"] == 2


def test_transient_transaction_errors_are_retried(make_store: Any, db: Any, failpoints: Any) -> None:
    if not db.client.admin.command("hello").get("setName"):
        pytest.skip("no transactions on a standalone server")
    store = make_store()
    store.store(email(1))
    conflict = {"failCommands": ["insert"], "errorCode": 112, "errorLabels": ["TransientTransactionError"]}
    failpoint(failpoints, mode={"times": 12}, data=conflict)
    assert store.store(email(2)).inserted is True  # twelve write conflicts, then success
    assert db.threads.find_one()["messageCount"] == 2
    failpoint(failpoints, mode="alwaysOn", data=conflict)
    bounded = make_store(retry_seconds=1.0)
    started = time.monotonic()
    with pytest.raises(PyMongoError):  # bounded by its time budget: it gives up
        bounded.store(email(3))
    assert 1.0 <= time.monotonic() - started < 10
    failpoint(failpoints, mode={"times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
    started = time.monotonic()
    with pytest.raises(PyMongoError):  # not transient: no retry at all
        store.store(email(3))
    assert time.monotonic() - started < 1
    failpoint(failpoints, mode="off")
    assert db.messages.count_documents({}) == 2


def test_a_batch_that_keeps_conflicting_is_split(make_store: Any, db: Any, failpoints: Any) -> None:
    if not db.client.admin.command("hello").get("setName"):
        pytest.skip("no transactions on a standalone server")
    store = make_store()
    mail = [email(n, thread="t@example.com") for n in range(4)]
    conflict = {"failCommands": ["insert"], "errorCode": 112, "errorLabels": ["TransientTransactionError"]}
    failpoint(failpoints, mode={"times": 5}, data=conflict)  # every attempt of the 4-message batch
    results = store.store_many(mail, batch_size=4)
    assert [r.inserted for r in results] == [True] * 4  # the halves went through
    assert db.messages.count_documents({}) == 4 and db.bodies.count_documents({}) == 4
    assert db.threads.find_one()["messageCount"] == 4
    failpoint(failpoints, mode="alwaysOn", data=conflict)
    with pytest.raises(PyMongoError):  # bounded: out of time, the last single message raises
        make_store(retry_seconds=1.0).store_many([email(n, thread="t@example.com") for n in range(4, 8)], batch_size=4)
    failpoint(failpoints, mode="off")
    assert db.messages.count_documents({}) == 4 and db.threads.find_one()["messageCount"] == 4


# --- the write path: every statement on an index -------------------------------------------

WRITE_PATH_COMMANDS = {"find", "update", "delete", "aggregate", "count", "distinct", "findAndModify"}
SESSION_FIELDS = DRIVER_FIELDS | {"autocommit", "startTransaction", "ordered", "writeConcern", "stmtIds"}


class WriteRecorder(monitoring.CommandListener):
    """Every statement that selects documents (finds, updates, deletes), as sent."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in WRITE_PATH_COMMANDS:
            self.commands.append({k: v for k, v in event.command.items() if k not in SESSION_FIELDS})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def as_finds(command: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each statement's filter as a ``find`` on its collection.

    The test server's ``explain`` of an update or delete always reports a collection scan, even
    for ``{_id: ...}``, which it executes as a point lookup (measured: flat from 1k to 50k
    documents); its ``find`` plans are the real ones. So each filter is explained as a find.
    """
    if "findAndModify" in command:  # the change mark's (standalone): by _id
        yield {"find": command["findAndModify"], "filter": command["query"]}
        return
    for name, field in (("update", "updates"), ("delete", "deletes")):
        if name in command:
            for statement in command[field]:
                yield {"find": command[name], "filter": statement["q"]}
            return
    yield command


def raw_mail(n: int, attachment: bytes) -> bytes:
    """A multipart message with text, HTML and one attachment: every tier is written."""
    import base64

    encoded = base64.encodebytes(attachment).decode()
    return (
        f"Message-ID: <w{n}@example.com>\r\nFrom: Bob <bob@example.com>\r\nTo: alice@example.com\r\n"
        f"Subject: write path {n % 3}\r\nDate: Mon, 29 Jun 2026 14:{n % 60:02d}:00 +0000\r\n"
        f"References: <w{n - 1}@example.com>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        '--b\r\nContent-Type: multipart/alternative; boundary="a"\r\n\r\n'
        f"--a\r\nContent-Type: text/plain\r\n\r\nplain {n}\r\n"
        f"--a\r\nContent-Type: text/html\r\n\r\n<p>html {n}</p>\r\n--a--\r\n"
        f"--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=a{n}.bin\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{encoded}\r\n--b--\r\n"
    ).encode()


def test_every_write_path_statement_uses_an_index(servers: Any, backend: str, db: Any, failpoints: Any) -> None:
    recorder = WriteRecorder()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[recorder])
    try:
        store = MessageStore(client[db.name], mailbox_id="alice")
        store.ensure_indexes()
        big = bytes(range(256)) * 1200  # two chunks
        store.store_many([raw_mail(n, big if n % 4 == 0 else b"small %d" % n) for n in range(12)], batch_size=5)
        store.store_many([raw_mail(n, b"again") for n in range(10, 14)])  # some stored, some new
        # an interrupted upload of a longer copy, so the leftover path runs too: its first
        # statement's chunks stay, kept where they hold the same bytes, replaced or dropped
        failpoint(failpoints, mode={"skip": 1, "times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
        with pytest.raises(PyMongoError):
            store.store(raw_mail(20, big * 2))
        failpoint(failpoints, mode="off")
        store.store(raw_mail(20, big + b"longer"))
        store.add("uidl-1", raw_mail(21, b"pop3"))
        store.add("uidl-2", raw_mail(21, b"pop3"))  # a second download of a stored message
        assert store.store(raw_mail(21, b"other bytes")).variant  # and a variant of it
        store.store(raw_mail(22, b""))  # an empty attachment: a blob without chunks
        assert store.get_raw("w20@example.com") == raw_mail(20, big + b"longer")
    finally:
        client.close()
    kinds_seen = {next(iter(c)) for c in recorder.commands}
    assert {"find", "update", "delete"} <= kinds_seen, kinds_seen
    for statement in [s for c in recorder.commands for s in as_finds(c)]:
        explained = db.command({"explain": statement, "verbosity": "queryPlanner"})
        kinds = {s["stage"] for s in plan_stages(explained)}
        assert "COLLSCAN" not in kinds, (statement, kinds)


def test_index_options_changed_between_writes_hold_for_the_next(db: Any) -> None:
    """The embedded server's launcher keeps SecantusDB's index catalog for one write statement
    (``embedded.secantus_patches.memo_index_catalog``), never longer: an index created or made unique
    between two writes holds for the next insert, bulk insert and update of the same
    connection. A catalog kept across statements let the second ``B`` in."""
    people = db.people
    people.create_index("x")
    people.insert_one({"name": "A", "x": 1})  # the catalog is read with one index besides _id
    people.create_index("name", unique=True, collation=Collation("en", strength=2))
    with pytest.raises(DuplicateKeyError):
        people.insert_one({"name": "a"})
    with pytest.raises(BulkWriteError) as refused:
        people.insert_many([{"name": "b"}, {"name": "B"}], ordered=False)
    assert [e["index"] for e in refused.value.details["writeErrors"]] == [1]
    with pytest.raises(DuplicateKeyError):
        people.update_one({"name": "b"}, {"$set": {"name": "a"}})
    people.create_index("tag", sparse=True)
    people.insert_one({"tag": 1})
    db.command("collMod", "people", index={"keyPattern": {"tag": 1}, "prepareUnique": True})
    with pytest.raises(DuplicateKeyError):
        people.insert_one({"tag": 1})
    assert sorted(d.get("name", "") for d in people.find({}, {"_id": 0, "name": 1})) == ["", "A", "b"]
    # a multi-document update runs in chunks of its own
    people.insert_many([{"name": "c", "n": 1}, {"name": "d", "n": 1}])
    people.create_index("nick", unique=True, sparse=True, collation=Collation("en", strength=2))
    with pytest.raises(DuplicateKeyError):
        people.update_many({"n": 1}, [{"$set": {"nick": {"$cond": [{"$eq": ["$name", "c"]}, "G", "g"]}}}])
    assert people.count_documents({"nick": {"$exists": True}}) == 1
