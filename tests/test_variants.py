"""Same Message-ID, other bytes: one message, every copy's bytes kept (issue: keep every variant).

The Message-ID stays the identity (one ``messages`` document, the thread counted once), but a
copy whose raw bytes differ from every copy kept (a mailing list's copy with its footer, or
software that reuses Message-IDs) is kept as a variant blob under the message's prefix.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.pure.keys import blob_prefix, message_key

from .helpers.cli import Cli


def direct_copy(mid: str = "launch@example.com") -> bytes:
    return (
        f"From: Carol <carol@example.com>\r\nTo: team@lists.example.org\r\nCc: alice@example.com\r\n"
        f"Subject: Launch plan\r\nDate: Mon, 29 Jun 2026 09:00:00 +0000\r\nMessage-ID: <{mid}>\r\n\r\n"
        "We launch on Thursday.\r\n"
    ).encode()


def list_copy(mid: str = "launch@example.com") -> bytes:
    """The same message as the list delivered it: List-Id and a footer added."""
    head, body = direct_copy(mid).split(b"\r\n\r\n", 1)
    footer = b"-- \r\nTeam list: https://lists.example.org/team\r\n"
    return head + b"\r\nList-Id: Team <team.lists.example.org>\r\n\r\n" + body + footer


def unrelated(mid: str = "launch@example.com") -> bytes:
    return (
        f"From: Printer <printer@office.example>\r\nTo: alice@example.com\r\nSubject: Toner low\r\n"
        f"Date: Tue, 30 Jun 2026 10:00:00 +0000\r\nMessage-ID: <{mid}>\r\n\r\nReplace the toner.\r\n"
    ).encode()


def blob_count(db: Any, mid: str, mailbox: str = "alice") -> int:
    prefix = blob_prefix(mailbox, message_key(mid))
    return db["aecs.files"].count_documents({"_id": {"$regex": f"^{prefix}"}})


@pytest.mark.server
def test_a_list_copy_of_a_stored_message_is_kept_as_a_variant(store: Any, db: Any) -> None:
    first = store.store(direct_copy())
    second = store.store(list_copy())
    assert (first.outcome, second.outcome) == ("stored", "variant")
    assert not second.inserted and second.variant
    assert db.messages.count_documents({}) == 1
    assert db.threads.find_one()["messageCount"] == 1  # the thread counts the message once
    assert store.get_raw("launch@example.com") == direct_copy()
    assert store.get_raw_variants("launch@example.com") == [direct_copy(), list_copy()]
    (variant,) = db.messages.find_one()["variants"]
    assert variant["size"] == len(list_copy()) and variant["uidl"] is None and variant["receivedAt"]


@pytest.mark.server
def test_two_unrelated_messages_sharing_a_message_id_keep_both(store: Any) -> None:
    store.store(direct_copy())
    assert store.store(unrelated()).outcome == "variant"
    assert store.get_message("launch@example.com")["metadata"]["subject"] == "Launch plan"  # the first
    assert store.get_raw_variants("launch@example.com")[1] == unrelated()


@pytest.mark.server
def test_the_same_bytes_three_times_add_nothing(store: Any, db: Any) -> None:
    outcomes = [store.store(direct_copy()).outcome for _ in range(3)]
    assert outcomes == ["stored", "present", "present"]
    assert "variants" not in db.messages.find_one()
    assert store.get_raw_variants("launch@example.com") == [direct_copy()]
    # and a variant delivered again is not kept twice
    assert [store.store(list_copy()).outcome for _ in range(2)] == ["variant", "present"]
    assert len(store.get_raw_variants("launch@example.com")) == 2


@pytest.mark.server
def test_store_many_counts_the_cases_apart_within_one_batch(store: Any) -> None:
    results = store.store_many([direct_copy(), list_copy(), direct_copy(), unrelated(), list_copy()])
    assert [r.outcome for r in results] == ["stored", "variant", "present", "variant", "present"]
    assert store.get_raw_variants("launch@example.com") == [direct_copy(), list_copy(), unrelated()]


@pytest.mark.server
def test_pop3_add_records_the_uidl_of_a_variant(store: Any, db: Any) -> None:
    assert store.add("uidl-direct", direct_copy()) == "launch@example.com"
    assert store.add("uidl-list", list_copy()) == "launch@example.com"
    assert store.contains_uidl("uidl-direct") and store.contains_uidl("uidl-list")
    (variant,) = db.messages.find_one()["variants"]
    assert variant["uidl"] == "uidl-list"


@pytest.mark.server
def test_reindex_and_reparse_keep_variants_and_delete_removes_every_blob(store: Any, db: Any) -> None:
    store.store(direct_copy())
    store.store(list_copy())
    store.store(unrelated())
    store.reindex()
    assert len(store.get_raw_variants("launch@example.com")) == 3
    db.messages.update_one({}, {"$set": {"specVersion": "0.9"}})
    assert store.reparse_stale("1.1")["reparsed"] == 1  # only the first copy is parsed again
    assert store.get_message("launch@example.com")["metadata"]["subject"] == "Launch plan"
    assert len(store.get_raw_variants("launch@example.com")) == 3
    assert blob_count(db, "launch@example.com") == 3
    assert store.delete("launch@example.com")
    assert blob_count(db, "launch@example.com") == 0
    assert db["aecs.chunks"].count_documents({}) == 0
    assert store.get_raw_variants("launch@example.com") == []


def variant_of(n: int) -> bytes:
    return direct_copy().replace(b"Thursday.", f"Thursday. (copy {n})".encode())


@pytest.mark.server
def test_concurrent_writers_delivering_variants_keep_each_once(servers: Any, backend: str, db: Any) -> None:
    """Four writers each deliver the first copy and ten variants (eight shared, two their own),
    at once: every distinct copy is kept once, and the outcomes say so exactly."""
    MessageStore(db, mailbox_id="alice").ensure_indexes()
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def writer(w: int) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend))
        store = MessageStore(client[db.name], mailbox_id="alice")
        mine = [direct_copy()] + [variant_of(n) for n in range(8)] + [variant_of(100 + 10 * w + k) for k in range(2)]
        barrier.wait()
        results = [store.store(raw) for raw in mine[:4]] + store.store_many(mine[4:], batch_size=3)
        with lock:
            outcomes.extend(r.outcome for r in results)
        client.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = (
        {direct_copy()}
        | {variant_of(n) for n in range(8)}
        | {variant_of(100 + 10 * w + k) for w in range(4) for k in range(2)}
    )
    copies = MessageStore(db, mailbox_id="alice").get_raw_variants("launch@example.com")
    assert len(copies) == len(set(copies)) == len(expected) and set(copies) == expected
    assert outcomes.count("stored") == 1
    assert outcomes.count("variant") == len(expected) - 1
    assert db.threads.find_one()["messageCount"] == 1


@pytest.mark.server
def test_cli_counts_variants_and_shows_each_copy(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    (folder / "1-direct.eml").write_bytes(direct_copy())
    (folder / "2-list.eml").write_bytes(list_copy())
    (folder / "3-direct-again.eml").write_bytes(direct_copy())
    run = cli("ingest", str(folder), "--no-progress")
    assert run.code == 0
    assert "1 stored, 2 already present, of them 1 kept as variants, 0 failed" in run.out
    run = cli("show", "launch@example.com", "--raw", "--variant", "1")
    assert run.code == 0
    assert run.stdout == list_copy()
    run = cli("show", "launch@example.com", "--raw")
    assert run.code == 0
    assert run.stdout == direct_copy()
    run = cli("show", "launch@example.com", "--raw", "--variant", "2")
    assert run.code == 1
    assert b"2 copies stored" in run.stderr
