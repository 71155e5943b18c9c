"""A mailbox's whole life: export, expire, erase, on every backend and store flavor.

The corpus-scale checks, statement counts, plans and the SIGKILLed erase are in
``test_lifecycle_server.py`` (real servers only).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from aecs_mongo.errors import AecsMongoError
from aecs_mongo.pure import lifecycle
from aecs_mongo.pure.lifecycle import DATA_COLLECTIONS

from .helpers.factories import recomputed_threads, stored_threads
from .helpers.lifecycle import START, exported, fill, mailbox_mail, raw, snapshot, traces


@pytest.mark.server
def test_the_registry_knows_every_collection_the_store_writes(make_store: Callable[..., Any], db: Any) -> None:
    fill(make_store("alice"), db, 6)
    registry = {c.for_bucket("aecs").name for c in DATA_COLLECTIONS}
    assert set(traces(db, "alice")) <= registry
    written = {"messages", "bodies", "threads", "uidls", "vectors", "feed_checkpoints", "aecs.files", "aecs.chunks"}
    assert written <= set(traces(db, "alice"))


@pytest.mark.server
def test_erase_leaves_nothing_and_other_mailboxes_untouched(make_store: Callable[..., Any], db: Any) -> None:
    # the other mailbox's ids start with "erased:" too: only the mailboxId field tells them apart
    erased, kept = make_store("erased"), make_store("erased:kept")
    fill(erased, db, 12)
    fill(kept, db, 7)
    before = snapshot(db, "erased:kept")
    found = traces(db, "erased")
    progress: list[int] = []
    report = erased.erase_mailbox(batch_size=7, on_progress=lambda removed: progress.append(sum(removed.values())))
    assert progress == sorted(progress) and progress[-1] == report.total  # several batches per collection
    assert traces(db, "erased") == {}
    assert snapshot(db, "erased:kept") == before
    assert report.messages == 12
    assert report.removed == {name: len(docs) for name, docs in found.items()} | {
        name: 0 for name in report.removed if name not in found
    }
    assert report.blobs == len(found["aecs.files"]) and report.passes == 2 and report.remaining == 0
    again = erased.erase_mailbox()  # idempotent
    assert again.total == 0 and again.passes == 1
    assert make_store("never-used").erase_mailbox().total == 0
    assert snapshot(db, "erased:kept") == before
    assert kept.get_raw("n3@example.com") == mailbox_mail(4)[3]


@pytest.mark.server
def test_expire_keeps_younger_mail_with_exact_summaries(make_store: Callable[..., Any], db: Any) -> None:
    store, other = make_store("alice"), make_store("bob")
    fill(store, db, 15)
    fill(other, db, 15)
    other_before = snapshot(db, "bob")
    cutoff = START + dt.timedelta(days=8)  # n0..n7 are older
    expired = [f"n{n}@example.com" for n in range(8)]
    prefixes = [m["blobPrefix"] for m in db.messages.find({"mailboxId": "alice", "messageId": {"$in": expired}})]
    dry = store.expire(cutoff, dry_run=True)
    assert dry.dry_run and dry.messages == 8 and dry.threads_updated == 5 and dry.threads_removed == 0
    assert db.messages.count_documents({"mailboxId": "alice"}) == 15  # nothing changed
    report = store.expire(cutoff, batch_size=3)
    assert report.removed == dry.removed and report.messages == 8
    assert (report.threads_updated, report.threads_removed) == (5, 0)
    assert set(store.message_ids()) == {f"n{n}@example.com" for n in range(8, 15)}
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    leftovers = [f["_id"] for f in db["aecs.files"].find() if any(f["_id"].startswith(p) for p in prefixes)] + [
        c["_id"] for c in db["aecs.chunks"].find() if any(c["files_id"].startswith(p) for p in prefixes)
    ]
    assert leftovers == []
    assert db.bodies.count_documents({"mailboxId": "alice"}) == 7
    assert not store.contains_uidl("uidl-1")  # n0's UIDL went with it
    assert db.vectors.count_documents({"mailboxId": "alice"}) == 0  # n2's vector too
    assert store.expire(cutoff).messages == 0  # done: a re-run finds nothing
    # everything of one thread goes: the empty thread is removed, not left at zero
    last = store.expire(START + dt.timedelta(days=14))
    assert (last.messages, last.threads_removed) == (6, 4)
    assert [t["messageCount"] for t in stored_threads(db, "alice").values()] == [1]
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    assert snapshot(db, "bob") == other_before


def test_expire_takes_an_aware_datetime(store: Any) -> None:
    with pytest.raises(TypeError, match="aware"):
        store.expire(dt.datetime(2024, 1, 1))
    with pytest.raises(TypeError):
        store.expire("2024-01-01")
    with pytest.raises(ValueError):
        store.expire(START, batch_size=0)


@pytest.mark.server
def test_delete_goes_through_the_same_core(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store("alice")
    fill(store, db, 6)
    prefix = db.messages.find_one({"_id": {"$in": [f"alice:{m['messageKey']}" for m in db.messages.find()]}})
    assert prefix is not None
    assert store.delete("n1@example.com")  # with its variant
    assert not store.delete("n1@example.com")
    n1 = [f["_id"] for f in db["aecs.files"].find() if "/variants/" in f["_id"]]
    assert n1 == []
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    for mid in store.message_ids():
        assert store.delete(mid)
    # a consumer's position is not mail, nor is the change mark (servers without change streams),
    # nor the mailbox's extent (bounds of its mail's ts, which a delete leaves: pure/extents.py)
    assert traces(db, "alice").keys() <= {"feed_checkpoints", "change_marks", "mailbox_extents"}


@pytest.mark.server
def test_export_raw_streams_oldest_first_with_variants(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store("alice")
    fill(store, db, 6)
    copies = exported(store)
    assert [c.message_id for c in copies] == [f"n{n}@example.com" for n in range(6)]
    assert [c.data for c in copies] == mailbox_mail(6)
    assert [c.ts for c in copies] == sorted(c.ts for c in copies)
    with_variants = exported(store, variants=True)
    assert [(c.message_id, c.copy) for c in with_variants][1:3] == [("n1@example.com", 0), ("n1@example.com", 1)]
    assert with_variants[2].data == store.get_raw_variants("n1@example.com")[1]
    window = exported(store, since=START + dt.timedelta(days=2), until=START + dt.timedelta(days=4))
    assert [c.message_id for c in window] == ["n2@example.com", "n3@example.com"]
    missing: list[str] = []
    store.store({"messageId": "<no-raw@example.com>", "threadId": "t"})
    assert "no-raw@example.com" not in {c.message_id for c in exported(store, on_missing=missing.append)}
    assert missing == ["no-raw@example.com"]
    with pytest.raises(TypeError):
        exported(store, since=dt.datetime(2024, 1, 1))


def every_copy(store: Any, count: int) -> list[tuple[str, int, bytes]]:
    """Messages n0..n<count-1> (oldest first) with each raw copy, as ``get_raw_variants`` gives them."""
    return [
        (mid, number, data)
        for mid in (f"n{n}@example.com" for n in range(count))
        for number, data in enumerate(store.get_raw_variants(mid))
    ]


@pytest.mark.server
def test_export_reads_whole_blobs_across_page_and_statement_boundaries(
    make_store: Callable[..., Any], db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 3 messages and statements of 2 blobs or 300 kB: messages of 2 and 6 chunks, each
    larger than a statement alone, and variants (one of 2 chunks) after their first copy, all
    come back whole and in order, as they do with the default sizes. Raw messages are kept whole
    here (``whole_raw``), so their blobs are the large ones (packs are exported in
    test_stored_once.py)."""
    store = make_store("alice", whole_raw=True)
    mail = mailbox_mail(8)  # n0, n3, n6: 2 chunks
    mail[4] = raw(4, day=4, thread=4, attachment=bytes(range(256)) * 4000)  # 1.4 MB: 6 chunks
    store.store_many(mail)
    assert store.store(mail[3] + b"\r\nanother copy\r\n").variant
    assert store.store(mail[5] + b"\r\n").variant
    expected = every_copy(store, 8)
    assert [n for _, n, _ in expected].count(1) == 2
    assert max(db["aecs.chunks"].find({"files_id": {"$regex": "raw[.]eml$"}}).distinct("n")) == 5
    defaults = exported(store, variants=True)
    monkeypatch.setattr(lifecycle, "EXPORT_PAGE", 3)
    capabilities = store.capabilities  # the blobs one chunks read names: the store's dialect's
    capabilities.dialect = dataclasses.replace(capabilities.dialect, export_blobs=2)
    monkeypatch.setattr(lifecycle, "EXPORT_PAGE_BYTES", 300_000)
    for copies in (defaults, exported(store, variants=True)):
        assert [(c.message_id, c.copy, c.data) for c in copies] == expected
    assert [(c.message_id, c.data) for c in exported(store)] == [(m, d) for m, n, d in expected if n == 0]


@pytest.mark.server
def test_export_checks_each_copy_against_what_its_message_records(make_store: Callable[..., Any], db: Any) -> None:
    """A first copy's chunks are checked against its message's ``sizeBytes``; where they do not
    add up, its ``files`` document decides, as it did for every copy before: a chunk missing at
    the start or the end is an error, chunks gone with their files document make a message
    without a raw copy (``on_missing``), a message recorded without a size is read through its
    files document. Chunks all there whose files document is gone (a deletion cut short between
    the two) are exported: the message is still stored. Raw messages kept whole (``whole_raw``):
    what is checked is the chunks of one blob."""
    store = make_store("alice", whole_raw=True)
    store.store_many(mailbox_mail(7))  # n0, n3, n6: 2 chunks

    def key(n: int) -> str:
        return str(db.messages.find_one({"messageId": f"n{n}@example.com"})["blobPrefix"]) + "raw.eml"

    expected = every_copy(store, 7)
    for n in (0, 1):  # the first chunk of two, then the last
        chunk = db["aecs.chunks"].find_one({"files_id": key(3), "n": n})
        db["aecs.chunks"].delete_one({"_id": chunk["_id"]})
        with pytest.raises(AecsMongoError, match="missing chunks"):
            exported(store)
        db["aecs.chunks"].insert_one(chunk)
    db.messages.update_one({"messageId": "n2@example.com"}, {"$unset": {"sizeBytes": 1}})
    db["aecs.files"].delete_one({"_id": key(6)})
    db["aecs.files"].delete_one({"_id": key(1)})
    db["aecs.chunks"].delete_many({"files_id": key(1)})
    missing: list[str] = []
    copies = exported(store, on_missing=missing.append)
    assert missing == ["n1@example.com"]
    assert [(c.message_id, c.copy, c.data) for c in copies] == [e for e in expected if e[0] != "n1@example.com"]
