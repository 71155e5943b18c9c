"""Nothing refused that MongoDB can hold: the hot-row policy, and round trips as given.

Real mail has 137 KB subjects, thousands of recipients, very long References chains. The hot
``messages`` row cuts what is only for display (subject, names, forAI, filenames) and keeps
the arrays the indexes answer from whole; ``bodies`` keep every value whole, so ``get_message``
returns what was given. Only a message whose hot document would pass 16 MiB is refused.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from aecs_mongo.errors import DocumentTooLargeError
from aecs_mongo.pure.documents import HOT_TEXT_CHARS

from .helpers.cli import Cli
from .helpers.factories import email

COLLECTIONS = ("messages", "bodies", "threads", "aecs.files", "aecs.chunks")


def long_subject(size: int) -> str:
    words = [f"word{n}" for n in range(size // 8)]
    return " ".join(words)[:size].strip()


def raw_with_subject(subject: str) -> bytes:
    words = subject.split(" ")
    folded = "\r\n ".join(" ".join(words[i : i + 8]) for i in range(0, len(words), 8))  # unfolds to the subject
    return (
        "From: Bob <bob@example.com>\r\nTo: alice@example.com\r\nMessage-ID: <long@example.com>\r\n"
        f"Date: Mon, 29 Jun 2026 14:32:00 +0000\r\nSubject: {folded}\r\n\r\nhello\r\n"
    ).encode()


def comparable(value: Any) -> Any:
    """null and omitted alike (AECS-1 §10.2): drop None-valued keys, recursively."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


@pytest.mark.server
def test_a_one_megabyte_subject_is_stored_and_comes_back_whole(store: Any, db: Any) -> None:
    subject = long_subject(1024 * 1024)
    result = store.store(raw_with_subject(subject))
    assert result.inserted
    hot = db.messages.find_one()
    assert len(hot["subject"]) == HOT_TEXT_CHARS["subject"] and subject.startswith(hot["subject"])
    back = store.get_message("long@example.com")
    assert back["metadata"]["subject"] == subject
    assert store.find("Subject", subject) == ["long@example.com"]  # the key is cut the same way on both sides
    assert store.list_messages().messages[0]["subject"] == hot["subject"]


def test_twenty_thousand_recipients_are_all_findable(store: Any) -> None:
    e = email(1, to=tuple(f"r{n}@example.org" for n in range(20_000)))
    assert store.store(e).inserted
    page = store.with_participant("r19999@example.org")
    assert [m["messageId"] for m in page.messages] == ["m1@example.com"]
    back = store.get_message("m1@example.com")
    assert back["metadata"]["to"] == e["metadata"]["to"]


def test_ten_thousand_references_are_kept(store: Any) -> None:
    refs = [f"ref{n}@example.net" for n in range(10_000)]
    e = email(1, references=refs, in_reply_to=refs[-1])
    assert store.store(e).inserted
    assert [m["messageId"] for m in store.replies_to("ref5000@example.net")] == ["m1@example.com"]
    assert store.get_message("m1@example.com")["thread"]["references"] == refs


@pytest.mark.server
def test_display_fields_are_cut_in_the_hot_row_and_whole_in_get_message(store: Any, db: Any) -> None:
    e = email(1)
    e["content"]["forAI"] = "x" * 300_000
    e["metadata"]["from"]["name"] = "N" * 5_000
    e["attachments"] = [
        {"id": "m1@example.com:0", "filename": "f" * 3_000 + ".pdf", "contentType": "application/pdf", "size": 3}
    ]
    assert store.store(e, attachments=[b"pdf"]).inserted
    hot = db.messages.find_one()
    assert len(hot["forAI"]) == HOT_TEXT_CHARS["forAI"]
    assert len(hot["from"]["name"]) == HOT_TEXT_CHARS["name"]
    assert len(hot["attachments"][0]["filename"]) == HOT_TEXT_CHARS["filename"]
    assert len(store.thread_context("root@example.com")[0]["forAI"]) == HOT_TEXT_CHARS["forAI"]
    back = store.get_message("m1@example.com")
    assert back["content"]["forAI"] == e["content"]["forAI"]
    assert back["metadata"]["from"]["name"] == e["metadata"]["from"]["name"]
    assert back["attachments"][0]["filename"] == e["attachments"][0]["filename"]
    assert store.get_attachment("m1@example.com", 0) == b"pdf"
    store.reindex()  # the lookup fields it re-derives agree with the cut hot row
    assert db.messages.find_one()["from"] == hot["from"]


def test_only_what_mongodb_cannot_hold_is_refused_and_nothing_is_written(store: Any, db: Any) -> None:
    store.store(email(1))
    before = {c: db[c].count_documents({}) for c in COLLECTIONS}
    e = email(2)
    e["x_archive"] = "z" * (17 * 1024 * 1024)
    with pytest.raises(DocumentTooLargeError) as info:
        store.store(e)
    assert info.value.field == "x" and info.value.limit == 16 * 1024 * 1024
    assert {c: db[c].count_documents({}) for c in COLLECTIONS} == before


def reference_sdk_email(n: int) -> dict[str, Any]:
    """An object in the shape the TypeScript reference SDK emits: empty strings, nulls, and
    ``processing.attachmentErrors`` (outside the schema)."""
    return {
        "messageId": f"sdk{n}@example.com",
        "threadId": "sdk-thread@example.com",
        "metadata": {
            "from": {"name": "", "email": "sdk@example.com"},
            "to": [{"name": None, "email": "alice@example.com"}],
            "cc": [],
            "bcc": [],
            "subject": "",
            "date": None,
            "timestamp": None,
        },
        "content": {"rawFull": None, "raw": "", "html": None, "text": "", "clean": "", "forAI": ""},
        "thread": {"position": None, "inReplyTo": None, "references": []},
        "attachments": [
            {"id": f"sdk{n}@example.com:0", "filename": "", "contentType": "", "size": 0, "cid": None},
            {"id": None, "filename": "a.bin", "contentType": "application/octet-stream", "size": 4, "cid": "c1"},
        ],
        "processing": {
            "processedAt": "2026-06-29T14:32:00Z",
            "specVersion": "1.1",
            "cleanFallback": False,
            "attachmentErrors": [],
        },
    }


def test_reference_sdk_output_round_trips_and_unknown_fields_are_said_once(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aecs_mongo")
    given = [reference_sdk_email(n) for n in range(50)]
    store.store_many(copy.deepcopy(given))
    for original in given:
        back = store.get_message(original["messageId"])
        expected = copy.deepcopy(original)
        del expected["processing"]["attachmentErrors"]  # ignored, as AECS-1 §10.6 asks
        assert comparable(back) == comparable(expected)
        assert back["attachments"][0]["contentType"] == ""  # not replaced by a default
    ignored = [r for r in caplog.records if "attachmentErrors" in r.getMessage()]
    assert len(ignored) == 1 and ignored[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.server
def test_ingest_command_stores_a_message_with_a_huge_subject(db: Any, cli: Cli, tmp_path: Any) -> None:
    path = tmp_path / "long.eml"
    path.write_bytes(raw_with_subject(long_subject(140_000)))
    assert cli("ingest", str(path), "--no-progress").code == 0
    assert db.messages.count_documents({}) == 1
