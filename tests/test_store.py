"""MessageStore on every backend: writes, reads, pagination, deletion, isolation, injection."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from aecs_mongo import InvalidCursorError, InvalidEmailError, MessageStore, UnsafeFieldNameError
from aecs_mongo.pure.keys import blob_prefix, message_key

from .helpers.factories import BASE_TS, email, iso, recomputed_threads, stored_threads

THREAD = "root@example.com"


def strip_volatile(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("_id", "mailboxId", "blobPrefix")}


def test_store_twice_stores_once(store: MessageStore, db: Any) -> None:
    first = store.store(email(1))
    second = store.store(email(1))
    assert first.inserted and not second.inserted
    assert first.message_id == second.message_id == "m1@example.com"
    assert db.messages.count_documents({}) == 1
    assert db.bodies.count_documents({}) == 1
    (summary,) = db.threads.find()
    assert summary["messageCount"] == 1
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")


def test_thread_summary_is_independent_of_arrival_order(make_store: Any, db: Any) -> None:
    # m2 and m3 share a timestamp: the tie breaks on messageKey, whatever the order of arrival
    mails = [email(1), email(2, ts=BASE_TS + 500), email(3, ts=BASE_TS + 500)]
    results = []
    for i, order in enumerate(itertools.permutations(range(3))):
        box = f"box{i}"
        s = make_store(box)
        for j in order:
            s.store(mails[j])
        s.store(mails[order[0]])  # a re-delivery changes nothing
        messages = sorted(
            (strip_volatile(m) for m in db.messages.find({"mailboxId": box})), key=lambda m: m["messageKey"]
        )
        bodies = sorted((strip_volatile(b) for b in db.bodies.find({"mailboxId": box})), key=str)
        (summary,) = stored_threads(db, box).values()
        assert stored_threads(db, box) == recomputed_threads(db, box)
        results.append((messages, bodies, strip_volatile(summary)))
    assert all(r == results[0] for r in results)
    summary = results[0][2]
    assert summary["messageCount"] == 3
    assert summary["firstMessageKey"] == message_key("m1@example.com")
    assert summary["lastMessageKey"] == max(message_key("m2@example.com"), message_key("m3@example.com"))


def full_email() -> dict[str, Any]:
    e = email(
        7,
        in_reply_to="m6@example.com",
        references=["root@example.com", "m6@example.com", "not-a-valid-id"],
        x_source="test-suite",
    )
    e["metadata"]["cc"] = [{"name": "Carol", "email": "Carol@Example.org", "x_role": "cc"}]
    e["metadata"]["x_labels"] = ["inbox", "work"]
    e["content"]["html"] = "<p>body 7 \u2603</p>"
    e["content"]["rawFull"] = "Message-ID: <m7@example.com>\r\nSubject: snow \u2603\r\n\r\nbody 7\r\n"
    e["content"]["x_lang"] = "en"
    e["thread"]["x_depth"] = 2
    e["processing"]["cleanFallback"] = False
    e["processing"]["x_worker"] = {"host": "w1", "attempt": 1}
    e["attachments"] = [
        {"id": "m7@example.com:0", "filename": "a.txt", "contentType": "text/plain", "size": 5, "cid": None},
        {"id": "m7@example.com:1", "filename": "", "contentType": "image/png", "size": 3, "cid": "img1", "x_k": 1},
    ]
    return e


@pytest.mark.server
def test_get_message_round_trips_every_field(store: MessageStore) -> None:
    e = full_email()
    store.store(e, attachments=[b"hello", b"\x89PN"])
    back = store.get_message("<m7@example.com>", include_raw=True)
    expected = {**e, "messageId": "m7@example.com"}
    assert back == expected
    # without include_raw the cold tier is not read
    light = store.get_message("m7@example.com")
    assert light is not None
    assert light["content"]["rawFull"] is None and light["content"]["html"] is None
    assert light["content"]["clean"] == "body 7"
    assert store.get_raw("m7@example.com") == e["content"]["rawFull"].encode("utf-8")
    assert store.get_html("m7@example.com") == "<p>body 7 \u2603</p>"
    assert store.get_attachment("m7@example.com", 0) == b"hello"
    assert store.get_attachment("m7@example.com", 1) == b"\x89PN"
    assert store.get_attachment("m7@example.com", 2) is None
    assert store.get_message("missing@example.com") is None


def test_minimal_email_and_null_fields(store: MessageStore, db: Any) -> None:
    r = store.store({"messageId": "min@x", "threadId": "min@x", "metadata": None, "content": {"text": None}})
    assert r.inserted
    back = store.get_message("min@x")
    assert back is not None
    assert back["metadata"]["subject"] is None and back["metadata"]["to"] == []
    assert back["attachments"] == [] and back["thread"]["references"] == []
    (m,) = db.messages.find()
    assert m["ts"] == 0  # no date and no processedAt: sorts as the oldest


def test_date_text_that_does_not_rerender_is_kept(store: MessageStore) -> None:
    e = email(1)
    e["metadata"]["date"] = "2026-06-29T14:33:00.123456+00:00"
    store.store(e)
    back = store.get_message("m1@example.com")
    assert back is not None and back["metadata"]["date"] == "2026-06-29T14:33:00.123456+00:00"


def test_thread_reads_positions(store: MessageStore) -> None:
    for n in (3, 1, 2, 5, 4):
        store.store(email(n))
    thread = store.get_thread(THREAD)
    assert [m["messageId"] for m in thread] == [f"m{n}@example.com" for n in range(1, 6)]
    assert [m["thread"]["position"] for m in thread] == [0, 1, 2, 3, 4]
    ctx = store.thread_context(THREAD, limit=2)
    assert [(c["messageId"], c["position"]) for c in ctx] == [("m4@example.com", 3), ("m5@example.com", 4)]
    assert set(ctx[0]) >= {"messageId", "from", "date", "ts", "forAI", "position"}
    assert ctx[1]["forAI"] == "body 5" and ctx[1]["date"] == iso(BASE_TS + 300)
    whole = store.thread_context(THREAD, limit=50)
    assert [c["position"] for c in whole] == [0, 1, 2, 3, 4]
    assert store.thread_context("other@thread") == []


def test_list_threads_and_participants(store: MessageStore) -> None:
    store.store(email(1, thread="t1@x"))
    store.store(email(2, thread="t2@x", to=("carol@example.org",)))
    store.store(email(3, thread="t1@x", subject="Re: Re: First"))
    page = store.list_threads(limit=10)
    assert [t["threadId"] for t in page.threads] == ["t1@x", "t2@x"]
    assert page.threads[0]["messageCount"] == 2 and page.next_cursor is None
    carol = store.with_participant("CAROL@example.org")
    assert [m["messageId"] for m in carol.messages] == ["m2@example.com"]
    bob = store.list_messages(sender="bob@example.com")
    assert len(bob.messages) == 3
    one_thread = store.list_messages(thread_id="t1@x", order="asc")
    assert [m["messageId"] for m in one_thread.messages] == ["m1@example.com", "m3@example.com"]
    window = store.list_messages(since=BASE_TS + 120, until=BASE_TS + 181)
    assert [m["messageId"] for m in window.messages] == ["m3@example.com", "m2@example.com"]


def test_replies_to_and_stale(store: MessageStore) -> None:
    store.store(email(1))
    store.store(email(2, in_reply_to="m1@example.com", references=["m1@example.com"]))
    store.store(email(3, in_reply_to="m1@example.com"))  # In-Reply-To only
    store.store(email(4, references=["m1@example.com", "m2@example.com"]))
    old = email(5)
    old["processing"]["specVersion"] = "1.0"
    store.store(old)
    replies = store.replies_to("<m1@example.com>")
    assert [r["messageId"] for r in replies] == ["m2@example.com", "m3@example.com", "m4@example.com"]
    assert store.stale("1.1") == ["m5@example.com"]
    assert store.stale("1.0", limit=10) == sorted(
        [f"m{n}@example.com" for n in range(1, 5)], key=lambda mid: message_key(mid)
    )


def test_keyset_pagination_visits_each_message_once_while_mail_arrives(store: MessageStore) -> None:
    for n in range(1, 31):
        store.store(email(n, ts=BASE_TS + (n // 3) * 60))  # many ties on ts
    seen: list[str] = []
    cursor = None
    arriving = iter(range(100, 110))
    while True:
        page = store.list_messages(cursor=cursor, limit=7)
        seen.extend(m["messageId"] for m in page.messages)
        # new mail, newer and older than the page boundary, arrives between pages
        n = next(arriving, None)
        if n is not None:
            store.store(email(n, ts=BASE_TS + (n % 2) * 10_000))
        cursor = page.next_cursor
        if cursor is None:
            break
    original = {f"m{n}@example.com" for n in range(1, 31)}
    assert len(seen) == len(set(seen))
    assert original <= set(seen)


@pytest.mark.server
def test_delete_removes_every_tier(store: MessageStore, db: Any) -> None:
    e = full_email()
    store.store(e, attachments=[b"hello", b"\x89PN"])
    store.store(email(8, thread=e["threadId"]))
    prefix = blob_prefix("alice", message_key("m7@example.com"))
    assert db["aecs.files"].count_documents({"_id": {"$regex": "^" + prefix}}) == 4
    assert store.delete("<m7@example.com>") is True
    key = message_key("m7@example.com")
    for coll in ("messages", "bodies"):
        assert db[coll].count_documents({"messageKey": key}) == 0
        assert db[coll].count_documents({"_id": f"alice:{key}"}) == 0
    assert db["aecs.files"].count_documents({}) == 0
    assert db["aecs.chunks"].count_documents({}) == 0
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    assert store.delete("m7@example.com") is False
    assert store.delete("m8@example.com") is True
    assert db.threads.count_documents({}) == 0


@pytest.mark.server
def test_mailboxes_never_see_each_other(make_store: Any, db: Any) -> None:
    alice, bob = make_store("alice"), make_store("bob")
    alice.store(email(1))
    alice.store(email(2))
    bob.store(email(1, subject="bob's copy"))
    assert bob.get_message("m2@example.com") is None
    assert bob.get_raw("m2@example.com") is None
    assert [m["messageId"] for m in bob.list_messages().messages] == ["m1@example.com"]
    assert bob.get_message("m1@example.com")["metadata"]["subject"] == "bob's copy"  # type: ignore[index]
    assert len(bob.get_thread(THREAD)) == 1 and len(alice.get_thread(THREAD)) == 2
    assert bob.list_threads().threads[0]["messageCount"] == 1
    page = alice.list_messages(limit=1)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursorError):
        bob.list_messages(cursor=page.next_cursor, limit=1)
    with pytest.raises(InvalidCursorError):
        alice.with_participant("alice@example.com", cursor=page.next_cursor)
    assert bob.delete("m2@example.com") is False
    assert alice.get_message("m2@example.com") is not None


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get_message({"$ne": None}),
        lambda s: s.get_raw({"$gt": ""}),
        lambda s: s.get_thread({"$ne": None}),
        lambda s: s.thread_context({"$exists": True}),
        lambda s: s.list_messages(sender={"$regex": ".*"}),
        lambda s: s.list_messages(thread_id={"$ne": 1}),
        lambda s: s.list_messages(cursor={"$gt": 0}),
        lambda s: s.list_messages(limit="5"),
        lambda s: s.with_participant({"$regex": "."}),
        lambda s: s.replies_to({"$in": ["a"]}),
        lambda s: s.stale({"$ne": "1.1"}),
        lambda s: s.delete({"$ne": None}),
        lambda s: s.get_attachment("m1@example.com", "0"),
        lambda s: s.store({"messageId": "a@b", "threadId": "a@b"}, uidl={"$ne": 1}),
    ],
)
def test_non_string_arguments_are_type_errors(store: MessageStore, db: Any, call: Any) -> None:
    store.store(email(1))
    with pytest.raises(TypeError):
        call(store)
    assert db.messages.count_documents({}) == 1


def test_tampered_cursors_are_refused(store: MessageStore) -> None:
    for n in range(3):
        store.store(email(n))
    cursor = store.list_messages(limit=1).next_cursor
    assert cursor is not None
    for bad in ("", "!!!", cursor[:-2], cursor + "AAAA", "WzEsImFiYyIsMCwiYSJd"):
        with pytest.raises(InvalidCursorError):
            store.list_messages(cursor=bad, limit=1)
    with pytest.raises(InvalidCursorError):
        store.list_messages(cursor=cursor, limit=1, order="asc")  # made for another query


def test_bad_emails_are_refused_and_nothing_is_written(store: MessageStore, db: Any) -> None:
    bad = [
        {"threadId": "t"},
        {"messageId": "", "threadId": "t"},
        {"messageId": "<>", "threadId": "t"},
        {"messageId": "a@b", "threadId": 5},
        {"messageId": "a@b", "threadId": "t", "metadata": {"date": "yesterday"}},
        {"messageId": "a@b", "threadId": "t", "metadata": {"timestamp": "5"}},
        {"messageId": "a@b", "threadId": "t", "metadata": {"to": "bob@x"}},
        {"messageId": "a@b", "threadId": "t", "metadata": {"from": {"name": "no email"}}},
        {"messageId": "a@b", "threadId": "t", "content": {"text": 5}},
        {"messageId": "a@b", "threadId": "t", "attachments": [{"size": -1}]},
        {"messageId": "a@b", "threadId": "t", "content": {"clean": "lone \ud800 surrogate"}},
        {"messageId": "a@b", "threadId": "t", "content": {"rawFull": "lone \udfff"}},
    ]
    for e in bad:
        with pytest.raises(InvalidEmailError):
            store.store(e)
    for name in ("x_a.b", "x_nul\x00"):
        with pytest.raises(UnsafeFieldNameError):
            store.store({"messageId": "a@b", "threadId": "t", name: 1})
    with pytest.raises(UnsafeFieldNameError):
        store.store({"messageId": "a@b", "threadId": "t", "x_ok": {"$where": "1"}})
    with pytest.raises(TypeError):
        store.store(["not", "an", "email"])  # type: ignore[arg-type]
    for coll in ("messages", "bodies", "threads", "aecs.files", "aecs.chunks"):
        assert db[coll].count_documents({}) == 0


@pytest.mark.server
def test_large_body_spills_to_gridfs(store: MessageStore, db: Any) -> None:
    e = email(1)
    e["content"]["text"] = "t" * (7 * 1024 * 1024)
    e["content"]["clean"] = "c" * (6 * 1024 * 1024)
    store.store(e)
    (body,) = db.bodies.find()
    assert "text" not in body and body["spill"].endswith("body.json")
    back = store.get_message("m1@example.com")
    assert back is not None
    assert back["content"]["text"] == e["content"]["text"] and back["content"]["clean"] == e["content"]["clean"]


def test_bcc_is_kept_only_when_the_owner_sent_it(make_store: Any, db: Any) -> None:
    mine = email(1, sender="Alice@Example.com")
    mine["metadata"]["bcc"] = [{"name": None, "email": "secret@example.net"}]
    theirs = email(2)
    theirs["metadata"]["bcc"] = [{"name": None, "email": "hidden@example.net"}]
    s = make_store("alice", owner_addresses=["alice@example.com"])
    s.store(mine)
    s.store(theirs)
    assert s.get_message("m1@example.com")["metadata"]["bcc"] == [{"name": None, "email": "secret@example.net"}]  # type: ignore[index]
    assert s.get_message("m2@example.com")["metadata"]["bcc"] == []  # type: ignore[index]
    assert db.messages.count_documents({"participants": "hidden@example.net"}) == 0
    assert db.bodies.count_documents({"bcc.email": "hidden@example.net"}) == 0
    assert [m["messageId"] for m in s.with_participant("secret@example.net").messages] == ["m1@example.com"]


def test_ensure_indexes_is_idempotent(store: MessageStore, db: Any, backend: str) -> None:
    second = store.ensure_indexes()
    assert second.created == []
    assert second.ok
    names = {ix["name"] for ix in db.messages.list_indexes()}
    assert {
        "aecs_messages_thread",
        "aecs_messages_inbox",
        "aecs_messages_participant",
        "aecs_messages_references",
    } <= names
    assert "aecs_threads_recent" in {ix["name"] for ix in db.threads.list_indexes()}
    search = {ix["name"] for ix in db.bodies.list_indexes()}
    assert ("aecs_bodies_search" in search) == ("aecs_bodies_search" not in second.skipped)


def collection_state(db: Any, mailbox: str) -> dict[str, Any]:
    def rows(coll: str) -> list[Any]:
        return sorted((strip_volatile(d) for d in db[coll].find({"mailboxId": mailbox})), key=repr)

    return {c: rows(c) for c in ("messages", "bodies", "threads")}


@pytest.mark.server
def test_store_many_equals_one_by_one(make_store: Any, db: Any) -> None:
    import random

    mails = [email(n, thread=f"t{n % 4}@x", ts=BASE_TS + (n % 5) * 60) for n in range(40)]
    mails[3]["attachments"] = [{"id": None, "filename": "a", "contentType": "text/plain", "size": 3, "cid": None}]
    one = make_store("one")
    for m in mails:
        one.store(m)
    delivered = mails + mails[::3]  # re-deliveries, some inside the same batch
    random.Random(7).shuffle(delivered)
    bulk = make_store("bulk")
    results = bulk.store_many(delivered, batch_size=16)
    assert [r.message_id for r in results] == [m["messageId"].strip("<>") for m in delivered]
    assert sum(r.inserted for r in results) == 40
    first_seen: set[str] = set()
    for r in results:
        assert r.inserted == (r.message_id not in first_seen)
        first_seen.add(r.message_id)
    assert collection_state(db, "bulk") == collection_state(db, "one")
    assert stored_threads(db, "bulk") == recomputed_threads(db, "bulk")
    again = bulk.store_many(mails, batch_size=7)
    assert not any(r.inserted for r in again)


def test_store_many_reports_or_raises_on_bad_items(make_store: Any, db: Any) -> None:
    s = make_store("alice")
    items = [email(1), {"messageId": "bad"}, email(2), {"threadId": "x"}, email(3)]
    failures: list[tuple[int, str]] = []
    results = s.store_many(items, batch_size=2, on_error=lambda i, item, exc: failures.append((i, type(exc).__name__)))
    assert [r.message_id for r in results] == ["m1@example.com", "m2@example.com", "m3@example.com"]
    assert failures == [(1, "InvalidEmailError"), (3, "InvalidEmailError")]
    s2 = make_store("bob")
    with pytest.raises(InvalidEmailError):
        s2.store_many([email(1), email(2), {"messageId": "bad"}, email(3)], batch_size=2)
    assert db.messages.count_documents({"mailboxId": "bob"}) == 2  # the batch before the bad item landed
    with pytest.raises(ValueError):
        s2.store_many([email(1)], batch_size=0)


def test_shared_views_never_show_bcc(make_store: Any) -> None:
    mine = email(1, sender="alice@example.com")
    mine["metadata"]["bcc"] = [{"name": None, "email": "secret@example.net"}]
    owner = make_store("alice", owner_addresses=["alice@example.com"])
    owner.store(mine)
    shared = make_store("alice", owner_addresses=["alice@example.com"], shared_view=True)
    assert owner.get_message("m1@example.com")["metadata"]["bcc"] != []
    assert shared.get_message("m1@example.com")["metadata"]["bcc"] == []
    assert shared.get_thread(THREAD)[0]["metadata"]["bcc"] == []
    assert shared.get_message("m1@example.com", include_raw=True)["metadata"]["bcc"] == []
    assert shared.with_participant("secret@example.net").messages == []
    assert len(shared.with_participant("alice@example.com").messages) == 1
    assert len(owner.with_participant("secret@example.net").messages) == 1


def test_ensure_indexes_reports_conflicts_and_refused_atlas_indexes(make_store: Any, db: Any, backend: str) -> None:
    s = make_store("other")
    db.uidls.drop_index("aecs_uidls_mailbox")
    db.uidls.create_index([("mailboxId", 1), ("uidl", 1)], name="aecs_uidls_mailbox")  # not unique
    report = s.ensure_indexes()
    assert "unique=False" in report.skipped["aecs_uidls_mailbox"] and not report.ok
    if backend == "mongomock":
        return  # mongomock has no createSearchIndexes to refuse
    atlas = s.ensure_indexes(atlas=True)
    assert set(atlas.skipped) >= {"aecs_bodies_atlas", "aecs_vectors_atlas"}  # the test server is not Atlas
    assert "refused the Atlas index" in atlas.skipped["aecs_vectors_atlas"]
