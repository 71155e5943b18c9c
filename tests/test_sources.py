"""``aecs_mongo.sources``: raw messages from files, directories, Maildir folders and mbox files,
on real files each test writes, and the ingest report a worker prints through ``store_iter``."""

from __future__ import annotations

import os
import re
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import InvalidEmailError, MessageStore
from aecs_mongo.mail.sources import (
    IngestReport,
    InputFile,
    Origin,
    RawMessage,
    Skipped,
    find_inputs,
    iter_mbox,
    not_mail,
    read_messages,
)

from .helpers.cli import Cli


def message(n: int, body: bytes = b"Hello.\n") -> bytes:
    return (
        f"From: Sender {n} <s{n}@example.com>\n"
        f"To: alice@example.com\n"
        f"Subject: message {n}\n"
        f"Message-ID: <m{n}@sources.example>\n"
        f"Date: Mon, 02 Nov 2026 09:{n % 60:02d}:00 +0000\n"
        "\n"
    ).encode() + body


QUOTING = message(
    99,
    b"A body line that starts like a separator:\n\n"
    b"From the start of the project we knew.\n"
    b">From an already quoted line.\n",
)


def mboxrd(messages: list[bytes]) -> bytes:
    """An mboxrd file: From_ lines, ``>``-quoted ``From `` lines, an empty line after each message."""
    out = []
    for raw in messages:
        body = b"".join(
            b">" + line if line.lstrip(b">").startswith(b"From ") else line for line in raw.splitlines(keepends=True)
        )
        out.append(b"From sender@example.com Mon Nov  2 09:15:00 2026\n" + body + b"\n")
    return b"".join(out)


def split(items: list[RawMessage | Skipped]) -> tuple[list[RawMessage], list[Skipped]]:
    return [i for i in items if isinstance(i, RawMessage)], [i for i in items if isinstance(i, Skipped)]


def unreadable(folder: Path, name: str) -> Path:
    """A file no process can read, root included: a symbolic link to itself (ELOOP)."""
    path = folder / name
    path.symlink_to(path)
    return path


# --- mbox ---------------------------------------------------------------------------------------


def test_mbox_reader_splits_and_unquotes(tmp_path: Path) -> None:
    originals = [message(1), message(2, b"line\n\n"), QUOTING]
    path = tmp_path / "box.mbox"
    path.write_bytes(mboxrd(originals))
    entries = list(iter_mbox(path))
    assert [e.number for e in entries] == [1, 2, 3]
    assert [e.data for e in entries] == originals  # byte-exact, quoting undone
    assert b"\n>From an already quoted line" in entries[-1].data
    assert entries[0].offset == 0 and sum(e.size for e in entries) == path.stat().st_size


def test_mbox_reader_keeps_an_unquoted_from_inside_a_paragraph(tmp_path: Path) -> None:
    path = tmp_path / "box"
    path.write_bytes(
        b"junk before\n\nFrom a b\nSubject: one\n\nline\nFrom here on, not a separator\n\nFrom c d\nSubject: two\n\nx\n"
    )
    entries = list(iter_mbox(path))
    assert [e.number for e in entries] == [0, 1, 2]
    assert entries[1].data == b"Subject: one\n\nline\nFrom here on, not a separator\n"
    assert entries[2].data == b"Subject: two\n\nx\n"


def test_mbox_messages_say_where_they_came_from(tmp_path: Path) -> None:
    data = b"stray bytes\n\n" + mboxrd([message(1), QUOTING, b"", b"just words\nno headers\n"])
    named = tmp_path / "archive.mbox"
    named.write_bytes(data)
    items = list(read_messages([named]))
    messages, skipped = split(items)
    assert [m.data for m in messages] == [message(1), QUOTING]
    assert [m.origin.message for m in messages] == [1, 2]
    for m in messages:
        assert m.origin.path == str(named)
        assert data[m.origin.offset or 0 :].startswith(b"From sender@example.com")
    reasons = {s.origin.message: s.reason for s in skipped}
    assert set(reasons) == {0, 3, 4}
    assert "before the first 'From '" in reasons[0]
    assert reasons[3].startswith("empty")
    assert "not an email message" in reasons[4]
    assert sum(i.size for i in items) == len(data)  # every byte accounted for, for progress
    assert str(messages[1].origin) == f"{named} (message 2 at byte {messages[1].origin.offset})"
    # without the .mbox name, a file that does not start with "From " is one message: here not mail
    path = tmp_path / "archive"
    path.write_bytes(data)
    assert [(type(i), i.origin.message) for i in read_messages([path])] == [(Skipped, None)]


def test_mbox_streams_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.mbox"
    body = b"".join(b"line %d of a longer body, From here on quoted\n" % i for i in range(100))
    with open(path, "wb") as f:
        for n in range(1000):
            f.write(mboxrd([message(n, body)]))
    size = path.stat().st_size
    assert size > 4_000_000
    tracemalloc.start()
    try:
        count = sum(1 for item in read_messages([path]) if isinstance(item, RawMessage))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 1000
    assert peak < size / 20, f"peak {peak} bytes while reading a {size}-byte mbox"


# --- files, directories, Maildir ------------------------------------------------------------------


def test_maildir_with_subfolders(tmp_path: Path) -> None:
    maildir = tmp_path / "Maildir"
    for folder in (maildir, maildir / ".Sent"):
        for sub in ("cur", "new", "tmp"):
            (folder / sub).mkdir(parents=True)
    (maildir / "new" / "2.M2P1.host").write_bytes(message(2))
    (maildir / "cur" / "1.M1P1.host:2,S").write_bytes(message(1))
    (maildir / "cur" / ".hidden").write_bytes(message(7))
    (maildir / "tmp" / "3.M3P1.host").write_bytes(b"Subject: half-delivered\n")  # tmp is never read
    (maildir / ".Sent" / "cur" / "4.M4P1.host:2,S").write_bytes(message(4))
    messages, skipped = split(list(read_messages([maildir])))
    assert skipped == []
    assert [(Path(m.origin.path).relative_to(maildir).as_posix(), m.data) for m in messages] == [
        ("new/2.M2P1.host", message(2)),
        ("cur/1.M1P1.host:2,S", message(1)),
        (".Sent/cur/4.M4P1.host:2,S", message(4)),
    ]
    assert all(m.origin.message is None and m.size == len(m.data) for m in messages)


def test_maildir_flags_and_folders_become_tags_and_folders(tmp_path: Path) -> None:
    """The info flags (new/ never $seen; Dovecot's keyword letters by dovecot-keywords), the
    Maildir++ folder names, and a Maildir found under a directory named by its path there."""
    maildir = tmp_path / "mail" / "Maildir"
    for folder in (maildir, maildir / ".Sent", maildir / ".Archive.2024", maildir / ".Entw&APw-rfe"):
        for sub in ("cur", "new", "tmp"):
            (folder / sub).mkdir(parents=True)
    (maildir / "new" / "1.M1P1.host").write_bytes(message(1))
    (maildir / "new" / "2.M2P1.host:2,FS").write_bytes(message(2))  # new/: flagged, not seen
    (maildir / "cur" / "3.M3P1.host:2,").write_bytes(message(3))
    (maildir / "cur" / "4.M4P1.host:2,DFPRSTab").write_bytes(message(4))
    (maildir / "dovecot-keywords").write_text("0 $Junk\n1 Work\n")
    (maildir / ".Sent" / "cur" / "5.M5P1.host!2,RS").write_bytes(message(5))
    (maildir / ".Archive.2024" / "cur" / "6.M6P1.host:2,S").write_bytes(message(6))
    (maildir / ".Entw&APw-rfe" / "cur" / "7.M7P1.host:2,Da").write_bytes(message(7))  # no keywords file here
    expected = [
        ("1", (), "INBOX"),
        ("2", ("$flagged",), "INBOX"),
        ("3", (), "INBOX"),
        ("4", ("$answered", "$draft", "$flagged", "$forwarded", "$junk", "$seen", "deleted", "work"), "INBOX"),
        ("6", ("$seen",), "Archive/2024"),
        ("7", ("$draft",), "Entwürfe"),
        ("5", ("$answered", "$seen"), "Sent"),
    ]

    def read(path: Path) -> list[tuple[str, tuple[str, ...], str]]:
        messages, skipped = split(list(read_messages([path])))
        assert skipped == []
        assert all(len(m.folders) == 1 for m in messages)
        return [(Path(m.origin.path).name.split(".")[0], m.tags, m.folders[0]) for m in messages]

    assert read(maildir) == expected
    # found under a directory: named by its path there, its Maildir++ folders below it
    assert read(tmp_path) == [(n, tags, "mail/Maildir" + ("" if f == "INBOX" else "/" + f)) for n, tags, f in expected]
    # other files carry neither
    (tmp_path / "one.eml").write_bytes(message(8))
    assert [(m.tags, m.folders) for m in read_messages([tmp_path / "one.eml"])] == [((), ())]


def test_mbox_status_fields_become_tags_and_the_bytes_stay(tmp_path: Path) -> None:
    seen = message(1).replace(b"Subject:", b"Status: RO\nX-Status: AF\nSubject:")
    old = message(2).replace(b"Subject:", b"Status: O\nSubject:")
    body_only = message(3, b"Status: R\n")  # in the body: not a field
    path = tmp_path / "box.mbox"
    path.write_bytes(mboxrd([seen, old, body_only]))
    messages, _ = split(list(read_messages([path])))
    assert [m.data for m in messages] == [seen, old, body_only]
    assert [m.tags for m in messages] == [("$answered", "$flagged", "$seen"), (), ()]
    assert all(m.folders == () for m in messages)


def test_directory_skips_what_is_not_mail_with_a_reason(tmp_path: Path) -> None:
    folder = tmp_path / "box"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.eml").write_bytes(message(1))
    (folder / "sub" / "b.EML").write_bytes(message(2))
    (folder / "sub" / "c.mbox").write_bytes(mboxrd([message(3)]))
    (folder / "notes.txt").write_text("not mail\n")
    (folder / ".DS_Store").write_bytes(b"\x00")
    (folder / "empty.eml").write_bytes(b"")
    (folder / "picture.eml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR binary\n")
    loop = unreadable(folder, "loop.eml")
    denied = folder / "denied.eml"
    denied.write_bytes(message(5))
    denied.chmod(0)
    missing = tmp_path / "missing.eml"
    messages, skipped = split(list(read_messages([folder, missing])))
    assert [m.data for m in messages] == [message(1), *([] if os.geteuid() else [message(5)]), message(2), message(3)]
    reasons = {Path(s.origin.path).name: s for s in skipped}
    expected = {"empty.eml", "picture.eml", "loop.eml", "notes.txt", "missing.eml"} | (
        {"denied.eml"} if os.geteuid() else set()  # root reads it anyway
    )
    assert set(reasons) == expected
    assert reasons["notes.txt"].ignored and not any(s.ignored for n, s in reasons.items() if n != "notes.txt")
    assert reasons["empty.eml"].reason.startswith("empty")
    assert "not an email message" in reasons["picture.eml"].reason
    assert reasons["loop.eml"].reason.startswith("cannot read: ") and reasons["loop.eml"].origin.path == str(loop)
    assert "no such file" in reasons["missing.eml"].reason
    if os.geteuid():
        assert "Permission denied" in reasons["denied.eml"].reason


def test_an_unreadable_path_named_directly_is_skipped_and_the_rest_still_read(tmp_path: Path) -> None:
    (tmp_path / "ok.eml").write_bytes(message(1))
    loop = unreadable(tmp_path, "loop")
    messages, skipped = split(list(read_messages([loop, tmp_path / "ok.eml"])))
    assert [m.data for m in messages] == [message(1)]
    assert [s.origin.path for s in skipped] == [str(loop)] and skipped[0].reason.startswith("cannot read")


def test_directories_are_walked_lazily(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "1.eml").write_bytes(message(1))
    inputs = find_inputs([tmp_path])
    first = next(inputs)
    assert isinstance(first, InputFile) and first.path == tmp_path / "a" / "1.eml"
    (tmp_path / "b" / "2.eml").write_bytes(message(2))  # b is listed only when reached
    assert [i.path.name for i in inputs if isinstance(i, InputFile)] == ["1.eml", "2.eml"]


def test_what_counts_as_not_mail() -> None:
    assert not_mail(b"Subject: hi\n\nbody\n") is None
    assert not_mail(b"   \r\nDelivered-To: bob@example.com\r\n\r\nbody") is None  # a line of blanks first
    assert not_mail(b"From x Mon Nov  2 09:15:00 2026\nSubject: hi\n") is None
    assert (not_mail(b"") or "").startswith("empty")
    assert (not_mail(b" \n\t\n") or "").startswith("empty")
    assert "not an email message" in (not_mail(b"\nWhat does Thunderbird do?\n") or "")
    assert "not an email message" in (not_mail(b"\x89PNG\r\n\x1a\n") or "")


# --- the report -----------------------------------------------------------------------------------


def test_report_of_refused_and_unconfirmed_messages() -> None:
    report = IngestReport()
    items: list[RawMessage | Skipped] = [
        RawMessage(message(1), Origin("a.mbox", 1, 0), 10),
        Skipped(Origin("notes.txt"), "not .eml or .mbox", ignored=True),
        RawMessage(message(2), Origin("a.mbox", 2, 10), 10),
        RawMessage(message(3), Origin("b.eml"), 10),
    ]
    handed = list(report.track(items))
    assert [h.data for h in handed] == [message(1), message(2), message(3)]
    report.refused(1, handed[1], InvalidEmailError("too large"))
    assert [str(o) for o in report.unconfirmed] == ["a.mbox (message 1 at byte 0)", "b.eml"]
    report.aborted = "AutoReconnect: gone"
    lines = report.lines()
    assert lines[0] == "failed: a.mbox (message 2 at byte 10): refused by the store: too large"
    assert lines[1] == "skipped: notes.txt: not .eml or .mbox"
    assert lines[-1] == "aborted: AutoReconnect: gone (2 messages of the last batch unconfirmed)"
    assert report.as_dict()["unconfirmed"] == ["a.mbox (message 1 at byte 0)", "b.eml"]


@pytest.mark.server
def test_store_iter_over_a_source_prints_the_cli_report(
    servers: Any, backend: str, db: Any, cli: Cli, tmp_path: Path
) -> None:
    """The README example, and the same report the ``ingest`` command prints for the same inputs."""
    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "a.eml").write_bytes(message(1))
    (folder / "b.mbox").write_bytes(mboxrd([message(1), message(2), b"no headers here\n"]))
    (folder / "notes.txt").write_text("not mail\n")
    unreadable(folder, "loop.eml")
    paths = [str(folder)]

    store = MessageStore(db, mailbox_id="worker")
    store.ensure_indexes()
    report = IngestReport()
    for result in store.store_iter(report.track(read_messages(paths)), batch_size=2, on_error=report.refused):
        report.count(result)
    assert (report.stored, report.present, len(report.failures), report.unconfirmed) == (2, 1, 2, [])
    assert {m["messageId"] for m in store.list_messages().messages} == {"m1@sources.example", "m2@sources.example"}

    other = f"aecs_src_{uuid.uuid4().hex[:12]}"
    try:
        run = cli("--db", other, "ingest", *paths, "--batch-size", "2")  # a database of its own
        assert run.code == 1
    finally:
        servers.client(backend).drop_database(other)
    timeless = re.compile(r" in \d+\.\d s:")
    *lines, files = run.out.splitlines()  # the command adds what happened to the files (mail/follow.py)
    assert [timeless.sub(" in T s:", line) for line in lines] == [
        timeless.sub(" in T s:", line) for line in report.lines()
    ]
    assert files == "3 files: 3 new, 0 flag changes, 0 gone (kept)"  # loop.eml is no file
    assert report.lines()[:2] == [
        f"failed: {folder / 'b.mbox'} (message 3 at byte {len(mboxrd([message(1), message(2)]))}): "
        "not an email message: no header field before the first empty line",
        f"failed: {folder / 'loop.eml'}: cannot read: Too many levels of symbolic links",
    ]
