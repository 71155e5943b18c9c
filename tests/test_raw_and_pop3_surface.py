"""Raw RFC 5322 input and a POP3 pipeline's store surface: add, UIDLs, find, walk_thread, reindex, reparse."""

from __future__ import annotations

import hashlib
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import NotFoundError, parse_email

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples" / "mailbox").glob("*.eml"))


def raw(
    mid: str | None,
    *,
    subject: str = "Live Wire",
    date: str = "Mon, 02 Nov 2026 09:15:00 +0000",
    sender: str = "Joe Bloggs <Joe@Example.com>",
    to: str = "jane@example.com",
    cc: str | None = None,
    in_reply_to: str | None = None,
    references: str | None = None,
    list_id: str | None = None,
    body: str = "hello",
) -> bytes:
    lines = [f"From: {sender}", f"To: {to}", f"Subject: {subject}", f"Date: {date}"]
    if mid:
        lines.append(f"Message-ID: <{mid}>")
    if cc:
        lines.append(f"Cc: {cc}")
    if in_reply_to:
        lines.append(f"In-Reply-To: <{in_reply_to}>")
    if references:
        lines.append(f"References: {references}")
    if list_id:
        lines.append(f"List-Id: {list_id}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body + "\r\n").encode("utf-8")


@pytest.mark.server
def test_raw_bytes_round_trip(store: Any) -> None:
    for path in SAMPLES:
        data = path.read_bytes()
        result = store.store(data)
        assert store.get_raw(result.message_id) == data  # byte-exact
        stored = store.get_message(result.message_id, include_raw=True)
        expected = parse_email(data, processed_at=stored["processing"]["processedAt"]).email
        for idx, att in enumerate(expected["attachments"]):  # and the text read from each attachment
            text = store.get_attachment_text(result.message_id, idx)
            if text is not None:
                att["extractedText"] = text[:4000]
        assert stored == expected, path.name
    latin = store.get_message("koeln-1@example.de")
    assert latin["metadata"]["subject"] == "Grüße aus Köln"
    assert "Köln" in latin["content"]["text"]
    news = store.get_message("sw42@lists.example.com", include_raw=True)
    assert news["content"]["html"].startswith("<html>")
    assert store.get_html("sw42@lists.example.com") == news["content"]["html"]
    assert store.get_attachment("budget-1@example.org", 0) == b"item,cost\nstorage,12000\ncompute,8000\n"
    assert store.get_message("budget-1@example.org")["attachments"][0]["extractedText"] == (
        "item,cost\nstorage,12000\ncompute,8000"
    )


@pytest.mark.server
def test_add_records_uidls_and_skips_known_message_ids(store: Any, db: Any) -> None:
    first = store.add("u1", raw("a@x"))
    again = store.add("u2", raw("a@x", body="a different copy"))
    assert first == again == "a@x"
    assert db.messages.count_documents({}) == 1
    assert store.contains_uidl("u1") and store.contains_uidl("u2") and not store.contains_uidl("u3")
    synthetic = raw(None, subject="no id")
    sid = store.add("u3", synthetic)
    assert sid == f"generated-{hashlib.sha256(synthetic).hexdigest()[:32]}@aecs.local"
    assert store.add("u4", synthetic) == sid
    assert store.uidls() == ["u1", "u2", "u3", "u4"]
    assert set(store.message_ids()) == {"a@x", sid}
    assert store.delete("a@x")
    assert store.uidls() == ["u3", "u4"]
    with pytest.raises(TypeError):
        store.add({"$ne": 1}, raw("b@x"))
    with pytest.raises(TypeError):
        store.add("u5", "not bytes")


@pytest.mark.server
def test_get_email(store: Any) -> None:
    store.add("1", (ROOT / "samples" / "mailbox" / "07-latin1.eml").read_bytes())
    msg = store.get_email("<koeln-1@example.de>")
    assert isinstance(msg, EmailMessage)
    assert msg["Subject"] == "Grüße aus Köln"
    assert store.get_email("missing@x") is None


@pytest.mark.server
def test_find_by_each_header(store: Any) -> None:
    store.add("1", raw("a@x", subject="Live Wire", date="Mon, 02 Nov 2026 23:30:00 -0200"))
    store.add(
        "2",
        raw(
            "b@x",
            subject="Re: Live  wire",
            cc="Bob <BOB@example.org>",
            in_reply_to="a@x",
            references="<a@x>",
            date="Tue, 03 Nov 2026 02:10:00 +0000",
        ),
    )
    store.add(
        "3",
        raw(
            "c@x",
            subject="Fwd: RE: live wire",
            sender="Jane <jane@example.com>",
            to="joe@example.com",
            references="<a@x> <b@x>",
            list_id="Wires <Wires.Lists.Example.COM>",
            date="Tue, 03 Nov 2026 08:00:00 +0000",
        ),
    )
    store.add("4", raw("d@x", subject="Other", date="not a date"))
    assert store.find("Subject", "Fwd: Re: Live Wire") == ["a@x", "b@x", "c@x"]
    assert store.find("subject", "live wire") == ["a@x", "b@x", "c@x"]
    assert store.find("From", "Joe Bloggs <joe@EXAMPLE.com> (home)") == ["a@x", "b@x", "d@x"]
    assert store.find("To", "bob@example.org") == ["b@x"]  # Cc counts as To
    assert store.find("To", "jane@example.com") == ["a@x", "b@x", "d@x"]
    assert store.find("Date", "2026-11-03") == ["a@x", "b@x", "c@x"]  # 23:30 -0200 is 01:30 UTC
    assert store.find("Date", "2026-11-02") == []
    assert store.find("In-Reply-To", "<a@x>") == ["b@x"]
    assert store.find("References", "a@x") == ["b@x", "c@x"]
    assert store.find("List-Id", "<wires.lists.example.com>") == ["c@x"]
    with pytest.raises(ValueError):
        store.find("X-Spam", "yes")
    with pytest.raises(ValueError):
        store.find("Date", "03/11/2026")
    with pytest.raises(TypeError):
        store.find("Subject", {"$regex": ".*"})


@pytest.mark.server
def test_walk_thread(store: Any) -> None:
    store.add("1", raw("a@x", date="Mon, 02 Nov 2026 09:00:00 +0000"))
    store.add("2", raw("b@x", in_reply_to="a@x", references="<a@x>", date="Mon, 02 Nov 2026 10:00:00 +0000"))
    store.add("3", raw("c@x", in_reply_to="b@x", references="<a@x> <b@x>", date="Mon, 02 Nov 2026 11:00:00 +0000"))
    store.add("4", raw("d@x", in_reply_to="b@x", date="Mon, 02 Nov 2026 10:30:00 +0000"))  # no References
    store.add("5", raw("e@x", in_reply_to="d@x", date="Mon, 02 Nov 2026 12:00:00 +0000"))
    store.add("9", raw("z@x", date="Mon, 02 Nov 2026 09:30:00 +0000"))  # unrelated
    whole = ["a@x", "b@x", "d@x", "c@x", "e@x"]
    assert store.walk_thread("c@x") == whole  # root from References
    assert store.walk_thread("<e@x>") == whole  # root by walking In-Reply-To back
    assert store.walk_thread("z@x") == ["z@x"]
    store.delete("b@x")  # a gap: the branch below b is no longer reachable from a
    assert store.walk_thread("a@x") == ["a@x"]
    assert store.walk_thread("e@x") == ["d@x", "e@x"]  # d's parent is gone: d is the earliest reachable
    assert store.walk_thread("c@x") == ["a@x", "c@x"]  # root a from References; the start is always included
    with pytest.raises(NotFoundError):
        store.walk_thread("missing@x")


def snapshot(db: Any, mailbox: str) -> dict[str, Any]:
    def rows(coll: str) -> list[dict[str, Any]]:
        return sorted(
            ({k: v for k, v in d.items() if k != "processedAt"} for d in db[coll].find({"mailboxId": mailbox})),
            key=lambda d: d["_id"],
        )

    return {coll: rows(coll) for coll in ("messages", "bodies", "threads", "uidls")}


@pytest.mark.server
def test_reindex_restores_every_derived_document(store: Any, db: Any) -> None:
    for i, path in enumerate(SAMPLES):
        store.add(f"u{i}", path.read_bytes())
    store.add("dup", SAMPLES[0].read_bytes())
    before = snapshot(db, "alice")
    db.threads.delete_many({})
    db.threads.insert_one({"_id": "alice:bogus", "mailboxId": "alice", "lastTs": 0, "messageCount": 9})
    db.uidls.delete_many({"uidl": {"$in": ["u0", "u3"]}})
    db.uidls.insert_one({"_id": "alice:ghost", "mailboxId": "alice", "uidl": "ghost", "messageKey": "0" * 64})
    db.messages.update_many({}, {"$set": {"subjectKey": "wrong", "participants": []}})
    report = store.reindex()
    assert report["threads"] == len(before["threads"])
    assert report["uidlsAdded"] == 2 and report["uidlsRemoved"] == 1
    assert report["messagesFixed"] == len(SAMPLES)
    assert snapshot(db, "alice") == before
    assert store.find("Subject", "re: quarterly planning") == [
        "plan-1@example.com",
        "plan-2@example.org",
        "plan-3@example.net",
    ]


@pytest.mark.server
def test_reparse_stale_rebuilds_from_raw_eml(store: Any, db: Any) -> None:
    for path in SAMPLES[:3]:
        store.store(path.read_bytes())
    store.store({"messageId": "dict-only@x", "threadId": "dict-only@x", "processing": {"specVersion": "1.0"}})
    db.messages.update_many({"messageId": {"$ne": "dict-only@x"}}, {"$set": {"specVersion": "1.0", "forAI": "old"}})
    assert len(store.stale("1.1")) == 4
    report = store.reparse_stale()
    assert report == {"reparsed": 3, "skipped": 1}
    assert store.stale("1.1") == ["dict-only@x"]
    assert store.get_message("plan-1@example.com")["content"]["forAI"].startswith("Hi Bob")
    assert db.threads.find_one({"threadId": "plan-1@example.com"})["messageCount"] == 3
