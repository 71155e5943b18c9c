"""Flags in and out through the store: Maildir and mbox ingest set tags and folders,
the Maildir export names its files with the flags and the mbox export writes ``Status:`` only when
asked; a tagged mailbox exported and ingested into a fresh mailbox has the same tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import MessageStore

from .helpers.cli import Cli

pytestmark = pytest.mark.one_server


def message(n: int) -> bytes:
    return (
        f"From: Sender {n} <s{n}@example.com>\nTo: alice@example.com\nSubject: message {n}\n"
        f"Message-ID: <f{n}@flags.example>\nDate: Mon, 02 Nov 2026 09:{n:02d}:00 +0000\n\nHello {n}.\n"
    ).encode()


def tagged(db: Any, mailbox: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """messageId -> (tags, folders), sorted, of every message of ``mailbox``."""
    rows = db.messages.find({"mailboxId": mailbox}, {"messageId": 1, "tags": 1, "folders": 1})
    return {r["messageId"]: (tuple(sorted(r.get("tags") or ())), tuple(sorted(r.get("folders") or ()))) for r in rows}


def maildir(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for sub in ("cur", "new", "tmp"):
            (path.parent.parent / sub).mkdir(exist_ok=True)
        path.write_bytes(data)
    return root


def test_maildir_ingest_stores_flags_as_tags_and_the_folders(db: Any, cli: Cli, tmp_path: Path) -> None:
    box = maildir(
        tmp_path / "Maildir",
        {
            "new/1.M1P1.host": message(1),
            "cur/2.M2P1.host:2,FS": message(2),
            "cur/3.M3P1.host:2,RST": message(3),
            ".Sent/cur/4.M4P1.host:2,S": message(4),
            ".Lists.python/cur/5.M5P1.host:2,": message(5),
            ".Sent/cur/2.M2P9.host:2,S": message(2),  # the same message in Sent: one more folder
        },
    )
    run = cli("--json", "ingest", str(box))
    assert run.code == 0 and run.json()["stored"] == 5
    assert tagged(db, "default") == {
        "f1@flags.example": ((), ("INBOX",)),
        "f2@flags.example": (("$flagged", "$seen"), ("INBOX", "Sent")),
        "f3@flags.example": (("$answered", "$seen", "deleted"), ("INBOX",)),
        "f4@flags.example": (("$seen",), ("Sent",)),
        "f5@flags.example": ((), ("Lists/python",)),
    }


def test_mbox_status_is_read_and_the_bytes_stay(db: Any, cli: Cli, tmp_path: Path) -> None:
    read = message(1).replace(b"Subject:", b"Status: RO\nX-Status: AF\nSubject:")
    old = message(2).replace(b"Subject:", b"Status: O\nSubject:")
    path = tmp_path / "box.mbox"
    path.write_bytes(b"".join(b"From x Mon Nov  2 09:15:00 2026\n" + m + b"\n" for m in (read, old, message(3))))
    assert cli("ingest", str(path)).code == 0
    assert tagged(db, "default") == {
        "f1@flags.example": (("$answered", "$flagged", "$seen"), ()),
        "f2@flags.example": ((), ()),
        "f3@flags.example": ((), ()),
    }
    store = MessageStore(db, mailbox_id="default")
    assert store.get_raw("f1@flags.example") == read  # Status fields and all


TAGS = {
    1: (),
    2: ("$seen",),
    3: ("$flagged",),  # unread, flagged
    4: ("$answered", "$draft", "$flagged", "$forwarded", "$seen", "deleted"),
    5: ("$seen", "todo"),  # a user tag: no Maildir letter, not carried
}


def tagged_store(db: Any) -> MessageStore:
    store = MessageStore(db, mailbox_id="default")
    store.ensure_indexes()
    for n, tags in TAGS.items():
        store.store(message(n), tags=tags)
    store.tag([f"f{n}@flags.example" for n in (1, 3)], add=["$junk"])  # tagged after the store, too
    return store


def test_maildir_export_round_trip_keeps_the_tags(db: Any, cli: Cli, tmp_path: Path) -> None:
    tagged_store(db)
    out = tmp_path / "out"
    run = cli("export", "--format", "maildir", str(out))
    assert run.code == 0, run.err
    names = sorted(p.name.rpartition(":")[2] for p in (out / "cur").iterdir())
    assert names == sorted(["2,", "2,S", "2,F", "2,DFPRST", "2,S"])
    assert list((out / "new").iterdir()) == []  # unread mail goes to cur/ too, without S
    assert cli("--mailbox", "again", "ingest", str(out)).code == 0
    back = tagged(db, "again")
    carried = {"$seen", "$flagged", "$answered", "$draft", "$forwarded", "deleted"}
    assert back == {
        f"f{n}@flags.example": (tuple(t for t in tags if t in carried), ("INBOX",)) for n, tags in TAGS.items()
    }
    # the bytes are the stored ones
    again = MessageStore(db, mailbox_id="again")
    assert all(again.get_raw(f"f{n}@flags.example") == message(n) for n in TAGS)


def test_mbox_export_writes_status_only_when_asked(db: Any, cli: Cli, tmp_path: Path) -> None:
    tagged_store(db)
    exact, status = tmp_path / "exact.mbox", tmp_path / "status.mbox"
    assert cli("export", "--format", "mbox", str(exact)).code == 0
    run = cli("--json", "export", "--format", "mbox", "--status-headers", str(status))
    assert run.code == 0 and run.json()["statusHeaders"] is True
    assert b"Status:" not in exact.read_bytes()
    assert cli("--mailbox", "exact", "ingest", str(exact)).code == 0
    assert cli("--mailbox", "status", "ingest", str(status)).code == 0
    assert {tags for tags, _ in tagged(db, "exact").values()} == {()}
    carried = {"$seen", "$flagged", "$answered", "$draft", "deleted"}
    assert {k: v[0] for k, v in tagged(db, "status").items()} == {
        f"f{n}@flags.example": tuple(t for t in tags if t in carried) for n, tags in TAGS.items()
    }
    exact_store, status_store = MessageStore(db, mailbox_id="exact"), MessageStore(db, mailbox_id="status")
    assert all(exact_store.get_raw(f"f{n}@flags.example") == message(n) for n in TAGS)
    assert status_store.get_raw("f2@flags.example") == message(2).replace(b"\n\nHello", b"\nStatus: RO\n\nHello")
    # a Maildir carries its flags in the names: the option is refused there
    run = cli("export", "--format", "maildir", "--status-headers", str(tmp_path / "m"))
    assert run.code != 0 and "--status-headers" in run.err
