"""The POP3 pipeline's header lookups as one ``lookups`` array on one multikey index, and the
upgrade of a database laid out by an earlier release (one index per header, no array)."""

from __future__ import annotations

from typing import Any

import pytest

from aecs_mongo import MessageStore
from aecs_mongo.pure import queries
from aecs_mongo.pure.indexes import INDEXES, RETIRED_INDEXES
from aecs_mongo.pure.keys import lookup_keys

#: the index the release before this one kept for the stale-row scan and the reads' sample
SPEC_VERSION_INDEX = "aecs_messages_spec_version"


def raw(
    mid: str,
    *,
    subject: str = "Live Wire",
    date: str = "Mon, 02 Nov 2026 09:15:00 +0000",
    sender: str = "Joe Bloggs <Joe@Example.com>",
    to: str = "jane@example.com",
    cc: str | None = None,
    in_reply_to: str | None = None,
    references: str | None = None,
    list_id: str | None = None,
) -> bytes:
    lines = [f"From: {sender}", f"To: {to}", f"Subject: {subject}", f"Date: {date}", f"Message-ID: <{mid}>"]
    for name, value in (("Cc", cc), ("In-Reply-To", in_reply_to and f"<{in_reply_to}>"), ("References", references)):
        if value:
            lines.append(f"{name}: {value}")
    if list_id:
        lines.append(f"List-Id: {list_id}")
    return ("\r\n".join(lines) + "\r\n\r\nhello\r\n").encode("utf-8")


#: the per-header indexes of the earlier layout, as it created them
OLD_LAYOUT = {
    "aecs_messages_from": [("mailboxId", 1), ("from.email", 1), ("ts", -1), ("messageKey", -1)],
    "aecs_messages_in_reply_to": [("mailboxId", 1), ("inReplyTo", 1), ("ts", 1), ("messageKey", 1)],
    "aecs_messages_subject": [("mailboxId", 1), ("subjectKey", 1), ("ts", 1), ("messageKey", 1)],
    "aecs_messages_list_id": [("mailboxId", 1), ("listId", 1), ("ts", 1), ("messageKey", 1)],
    "aecs_messages_recipients": [("mailboxId", 1), ("recipients", 1), ("ts", 1), ("messageKey", 1)],
}

LOOKUPS = [
    ("Subject", "Fwd: Re: Live Wire"),
    ("Subject", "other"),
    ("Subject", ""),
    ("From", "Joe Bloggs <joe@EXAMPLE.com> (home)"),
    ("From", "jane@example.com"),
    ("To", "bob@example.org"),
    ("To", "jane@example.com"),
    ("To", "joe@example.com"),
    ("In-Reply-To", "<a@x>"),
    ("In-Reply-To", "b@x"),
    ("List-Id", "<wires.lists.example.com>"),
    ("List-Id", ""),
    ("References", "a@x"),
    ("Date", "2026-11-03"),
]


def test_messages_keeps_at_most_eight_indexes_besides_id() -> None:
    names = [spec.name for spec in INDEXES if spec.collection == "messages"]
    assert len(names) <= 8
    assert "aecs_messages_lookups" in names
    assert not {name for _, name in RETIRED_INDEXES} & set(names)


def test_lookup_keys_are_the_pipelines_key_form() -> None:
    message = {
        "subjectKey": "live wire",
        "from": {"email": "joe@example.com", "name": "Joe"},
        "recipients": ["jane@example.com", "bob@example.org"],
        "inReplyTo": "a@x",
        "listId": "wires.lists.example.com",
    }
    assert lookup_keys(message) == [
        "subject:live wire",
        "from:joe@example.com",
        "to:jane@example.com",
        "to:bob@example.org",
        "in-reply-to:a@x",
        "list-id:wires.lists.example.com",
    ]
    assert lookup_keys({"subjectKey": "", "from": None, "recipients": [], "inReplyTo": None}) == ["subject:"]


def _fill(store: Any) -> None:
    store.add("1", raw("a@x", subject="Live Wire", date="Mon, 02 Nov 2026 23:30:00 -0200"))
    store.add(
        "2",
        raw("b@x", subject="Re: Live  wire", cc="Bob <BOB@example.org>", in_reply_to="a@x", references="<a@x>"),
    )
    store.add(
        "3",
        raw(
            "c@x",
            subject="Fwd: RE: live wire",
            sender="Jane <jane@example.com>",
            to="joe@example.com",
            in_reply_to="b@x",
            references="<a@x> <b@x>",
            list_id="Wires <Wires.Lists.Example.COM>",
            date="Tue, 03 Nov 2026 08:00:00 +0000",
        ),
    )
    store.add("4", raw("d@x", subject="Other", date="not a date"))
    store.add("5", raw("e@x", subject="", date="Tue, 03 Nov 2026 09:00:00 +0000"))


def _answers(store: Any) -> dict[str, Any]:
    out: dict[str, Any] = {f"{h}={v}": store.find(h, v) for h, v in LOOKUPS}
    out["sender"] = [m["messageId"] for m in store.list_messages(sender="joe@example.com", limit=50).messages]
    out["replies"] = [m["messageId"] for m in store.replies_to("a@x")]
    out["walk"] = store.walk_thread("c@x")
    return out


def _downgrade(db: Any) -> None:
    """The earlier release's layout: no ``lookups`` array, one index per header."""
    db.messages.update_many({}, {"$unset": {"lookups": ""}})
    names = {ix["name"] for ix in db.messages.list_indexes()}
    if "aecs_messages_lookups" in names:
        db.messages.drop_index("aecs_messages_lookups")
    for name, keys in OLD_LAYOUT.items():
        db.messages.create_index(keys, name=name)


@pytest.mark.server
def test_stored_messages_carry_their_lookups(store: Any, db: Any) -> None:
    _fill(store)
    row = db.messages.find_one({"messageId": "c@x"})
    assert row["lookups"] == [
        "subject:live wire",
        "from:jane@example.com",
        "to:joe@example.com",
        "in-reply-to:b@x",
        "list-id:wires.lists.example.com",
    ]
    names = [ix["name"] for ix in db.messages.list_indexes()]
    assert len(names) <= 9 and "aecs_messages_lookups" in names


@pytest.mark.server
@pytest.mark.parametrize("upgrade", ["ensure_indexes", "none"])
def test_the_previous_release_answers_the_same_without_its_spec_version_index(
    store: Any, db: Any, upgrade: str
) -> None:
    """The release before this one kept an index for the stale-row scan and the reads' sample;
    ``ensure_indexes`` drops it, and every read answers the same with or without it."""
    _fill(store)
    before = {**_answers(store), "stale": store.stale("1.0")}
    db.messages.create_index([("mailboxId", 1), ("specVersion", 1), ("messageKey", 1)], name=SPEC_VERSION_INDEX)
    fresh = MessageStore(db, mailbox_id=store.mailbox_id)
    if upgrade == "ensure_indexes":
        report = fresh.ensure_indexes()
        assert report.dropped == [SPEC_VERSION_INDEX]
        assert SPEC_VERSION_INDEX not in {ix["name"] for ix in db.messages.list_indexes()}
        assert fresh.ensure_indexes().dropped == []  # idempotent
    assert {**_answers(fresh), "stale": fresh.stale("1.0")} == before
    selector, hint = queries.find_query(store.mailbox_id, "To", "jane@example.com")
    assert hint is None and selector["lookups"] == "to:jane@example.com"


@pytest.mark.server
@pytest.mark.parametrize("upgrade", ["ensure_indexes", "reindex", "on_read"])
def test_an_old_layout_answers_the_same_after_the_upgrade(store: Any, db: Any, upgrade: str) -> None:
    _fill(store)
    before = _answers(store)
    assert before["Subject=Fwd: Re: Live Wire"] == ["b@x", "a@x", "c@x"]
    assert before["Subject="] == ["e@x"] and before["List-Id="] == ["b@x", "a@x", "e@x", "d@x"]
    MessageStore(db, mailbox_id="bob").add("b1", raw("bob-1@x"))  # another mailbox of the database
    _downgrade(db)
    fresh = MessageStore(db, mailbox_id=store.mailbox_id)  # learns the layout anew
    if upgrade == "ensure_indexes":
        report = fresh.ensure_indexes()
        assert sorted(report.dropped) == sorted(OLD_LAYOUT)
        assert report.upgraded == 6 and "aecs_messages_lookups" in report.created  # every mailbox's
        assert db.messages.count_documents({"lookups": None}) == 0
        assert fresh.ensure_indexes().dropped == []  # idempotent: nothing more to drop or fill
        assert {ix["name"] for ix in db.messages.list_indexes()}.isdisjoint(OLD_LAYOUT)
    elif upgrade == "reindex":
        assert fresh.reindex()["messagesFixed"] == 5
    assert _answers(fresh) == before  # on_read: the first read by lookups fills the mailbox first
    assert db.messages.count_documents({"mailboxId": store.mailbox_id, "lookups": None}) == 0
    assert MessageStore(db, mailbox_id="bob").find("Subject", "live wire") == ["bob-1@x"]
