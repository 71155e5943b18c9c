"""Batch boundaries change nothing: ``store_many`` in any batch size gives one end state.

A later copy of a stored message (same Message-ID, other bytes) keeps only its raw bytes, as a
variant: it must not upload its attachments or HTML under the stored message's prefix, where
nothing would reference them. The corpus test stores real mail in batches of 1, 50 and all at
once and compares every collection, GridFS files and chunks included.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore
from aecs_mongo.normalizer import parse_email
from aecs_mongo.pure.documents import (
    build_documents,
    merge_thread_summaries,
    thread_summaries,
    thread_summary_from_messages,
)
from tests.helpers.budgets import budget
from tests.helpers.end_state import COLLECTIONS, canonical, unreferenced_blobs
from tests.helpers.factories import email, recomputed_threads, stored_threads
from tests.helpers.paths import require_corpus


def plain(mid: str) -> bytes:
    return (
        f"From: Carol <carol@example.com>\r\nTo: alice@example.com\r\nSubject: Plan\r\n"
        f"Date: Mon, 29 Jun 2026 09:00:00 +0000\r\nMessage-ID: <{mid}>\r\n\r\nThe plan.\r\n"
    ).encode()


def with_attachment_and_html(mid: str) -> bytes:
    """Another copy under the same Message-ID: an HTML part and an attachment the first lacks."""
    data = base64.encodebytes(b"%PDF-1.4 quarterly numbers").decode()
    return (
        f"From: Carol <carol@example.com>\r\nTo: alice@example.com\r\nSubject: Plan\r\n"
        f"Date: Mon, 29 Jun 2026 09:00:00 +0000\r\nMessage-ID: <{mid}>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        '--b\r\nContent-Type: multipart/alternative; boundary="a"\r\n\r\n'
        "--a\r\nContent-Type: text/plain\r\n\r\nThe plan.\r\n"
        "--a\r\nContent-Type: text/html\r\n\r\n<p>The plan.</p>\r\n--a--\r\n"
        "--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=plan.pdf\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{data}\r\n--b--\r\n"
    ).encode()


@pytest.mark.server
def test_a_later_copy_in_a_later_batch_uploads_only_its_raw_bytes(store: Any, db: Any) -> None:
    store.store_many([plain("plan@example.com"), plain("other@example.com")])
    (result,) = store.store_many([with_attachment_and_html("plan@example.com")])
    assert (result.outcome, result.variant) == ("variant", True)
    assert unreferenced_blobs(db) == []
    names = sorted(f["_id"].split("/", 2)[2] for f in db["aecs.files"].find({}, {"_id": 1}))
    sha = db.messages.find_one({"messageKey": result.message_key})["variantHashes"][0]
    other = db.messages.find_one({"messageKey": {"$ne": result.message_key}})["messageKey"]
    assert names == sorted(
        [f"{result.message_key}/raw.eml", f"{result.message_key}/variants/{sha}.eml", f"{other}/raw.eml"]
    )
    assert store.get_raw_variants("plan@example.com") == [
        plain("plan@example.com"),
        with_attachment_and_html("plan@example.com"),
    ]
    assert store.get_attachment("plan@example.com", 0) is None  # the stored message has none


# --- one thread write per thread per batch ----------------------------------------------------


def test_merging_batch_summaries_in_any_split_and_order_equals_a_recomputation() -> None:
    rng = random.Random(26)
    for _ in range(200):
        # ties on ts on purpose: the messageKey breaks them
        messages = [
            build_documents(email(n, thread=f"t{rng.randrange(3)}", ts=1000 + rng.randrange(4)), mailbox_id="a").message
            for n in range(rng.randrange(1, 12))
        ]
        rng.shuffle(messages)
        cuts = sorted(rng.sample(range(1, len(messages)), rng.randrange(len(messages))))
        batches = [messages[i:j] for i, j in zip([0, *cuts], [*cuts, len(messages)], strict=True)]
        merged: dict[str, dict[str, Any]] = {}
        for batch in batches:
            for summary in thread_summaries(batch):
                old = merged.get(summary["_id"])
                merged[summary["_id"]] = summary if old is None else merge_thread_summaries(old, summary)
        expected = {}
        for message in messages:
            expected.setdefault(message["threadKey"], []).append(message)
        assert merged == {s["_id"]: s for s in map(thread_summary_from_messages, expected.values()) if s}
        assert len(thread_summaries(messages)) == len(expected)  # one write per thread


def test_one_thread_write_per_thread_per_batch_and_the_summary_is_exact(make_store: Any, db: Any) -> None:
    store = make_store()
    # a batch holding three threads, one of them stored already, in shuffled order
    store.store(email(0, thread="a@example.com"))
    batch = [email(n, thread=f"{'abc'[n % 3]}@example.com") for n in range(1, 13)]
    random.Random(1).shuffle(batch)
    store.store_many(batch, batch_size=12)
    store.store_many([email(n, thread="c@example.com", ts=n) for n in range(13, 16)])  # earlier than the rest
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    assert {t["threadId"]: t["messageCount"] for t in db.threads.find()} == {
        "a@example.com": 5,
        "b@example.com": 4,
        "c@example.com": 7,
    }


class ThreadWrites(monitoring.CommandListener):
    """Every document inserted into, and statement updating, ``threads``; every command name."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.commands: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command.get(event.command_name) == "change_marks":
            return  # the change mark's begin and end (standalone: aecs_mongo/pure/change_marks.py)
        self.commands.append(event.command_name)
        if event.command.get(event.command_name) == "threads":
            if event.command_name == "insert":
                self.writes += [f"insert {d['threadId']}" for d in event.command["documents"]]
            elif event.command_name == "update":
                self.writes += [f"update {u['q']['_id']}" for u in event.command["updates"]]

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.server
def test_a_batch_sends_one_thread_write_per_thread(servers: Any, backend: str, db: Any) -> None:
    recorder = ThreadWrites()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[recorder])
    try:
        store = MessageStore(client[db.name], mailbox_id="alice")
        store.ensure_indexes()
        store.store(email(0, thread="a@example.com"))
        recorder.writes.clear()
        recorder.commands.clear()
        store.store_many([email(n, thread=f"{'abc'[n % 3]}@example.com") for n in range(1, 31)], batch_size=30)
        commands = list(recorder.commands)
    finally:
        client.close()
    assert sorted(w.split()[0] for w in recorder.writes) == ["insert", "insert", "update"], recorder.writes
    # and nothing else the batch's own data makes unnecessary: no blob lookups for mail without
    # blobs, one lookup of the batch's messages and one of its threads; and the two ``hello`` that
    # tell a server restart under the batch (then written again); the findAndModify widens the
    # mailbox's extent (its oldest and newest ts: pure/extents.py)
    assert sorted(commands) == sorted(
        ["hello", "find", "findAndModify", "insert", "insert", "find", "insert", "update", "hello"]
        + (["commitTransaction"] if backend == "rs" else [])
    ), recorder.commands
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")


# --- the corpus in three batch sizes ----------------------------------------------------------


def corpus_mail() -> list[bytes]:
    """The corpus in file order; by default (not ``CI=true``) every message that shares its
    Message-ID with another, and every fourth of the rest: the copies are what batch boundaries
    could change."""
    raws = [path.read_bytes() for path in sorted(require_corpus().iterdir()) if path.is_file()]
    every = budget("AECS_BATCH_CORPUS_EVERY", big=1, small=4)
    if every == 1:
        return raws
    ids = [parse_email(raw).email["messageId"] for raw in raws]
    shared = {mid for mid in ids if ids.count(mid) > 1}
    return [raw for i, (raw, mid) in enumerate(zip(raws, ids, strict=True)) if mid in shared or i % every == 0]


@pytest.fixture
def three_dbs(client: Any) -> Iterator[list[Any]]:
    names = [f"aecs_test_{uuid.uuid4().hex[:12]}" for _ in range(3)]
    yield [client[name] for name in names]
    for name in names:
        client.drop_database(name)


@pytest.mark.server
@pytest.mark.ci_every_server
def test_the_corpus_in_batches_of_1_50_and_all_gives_one_end_state(backend: str, three_dbs: list[Any]) -> None:
    raws = corpus_mail()
    raws += raws[:3]  # and a re-delivery of the same bytes: "present"
    outcomes = []
    for db, size in zip(three_dbs, (1, 50, len(raws)), strict=True):
        store = MessageStore(db, mailbox_id="alice")
        store.ensure_indexes()
        outcomes.append([r.outcome for r in store.store_many(raws, batch_size=size)])
        assert unreferenced_blobs(db) == [], f"batches of {size}"
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert {"stored", "variant", "present"} <= set(outcomes[0])  # the corpus holds copies of both kinds
    dumps = [canonical(db) for db in three_dbs]
    for name in COLLECTIONS:
        assert dumps[0][name] == dumps[1][name], f"{name}: batches of 1 vs 50"
        assert dumps[0][name] == dumps[2][name], f"{name}: batches of 1 vs all at once"
    assert dumps[0]["aecs.chunks"] and dumps[0]["threads"]
