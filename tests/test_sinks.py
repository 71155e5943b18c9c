"""The export writers (``aecs_mongo.sinks``) read back by the ingest readers (``aecs_mongo.sources``).

No server: what is checked is the file formats, byte for byte, on messages built to break them.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

from aecs_mongo import EmlDirWriter, MaildirWriter, MboxWriter, open_writer, read_messages
from aecs_mongo.mail.sinks import mboxrd_quote
from aecs_mongo.mail.sources import RawMessage, iter_mbox

HEADER = b"From: a@example.com\nSubject: s\nMessage-ID: <%d@x>\n\n"

TRICKY = [
    HEADER % 1 + b"plain body\n",
    HEADER % 2 + b"\nFrom the start\n>From quoted\n>>From twice\nFrom\n",  # separator look-alikes
    b"From someone Mon Jan  1 00:00:00 2024\n" + HEADER % 3 + b"an .eml that starts with a From_ line\n",
    HEADER.replace(b"\n", b"\r\n") % 4 + b"crlf\r\n\r\nFrom crlf\r\n",
    HEADER % 5 + b"a CR inside\rFrom a line\n\n\n",  # ends in blank lines
    HEADER % 6 + bytes(range(256)) + b"\n",  # 8-bit and NUL
    HEADER % 7 + b"body\n\n",
]
NO_FINAL_NEWLINE = HEADER % 8 + b"no line break at the end"


def test_mboxrd_round_trip_is_byte_exact(tmp_path: Path) -> None:
    path = tmp_path / "out.mbox"
    with MboxWriter(path) as writer:
        for n, data in enumerate(TRICKY):
            writer.write(data, ts=1_700_000_000 + n, sender="Some One <a@example.com>")
        writer.write(NO_FINAL_NEWLINE)
    entries = [e.data for e in iter_mbox(path)]
    assert entries[: len(TRICKY)] == TRICKY
    # the one thing mboxrd cannot carry: the missing final line break comes back
    assert entries[-1] == NO_FINAL_NEWLINE + b"\n"
    assert writer.count == len(TRICKY) + 1
    assert writer.bytes_written == sum(map(len, TRICKY)) + len(NO_FINAL_NEWLINE)
    first = path.read_bytes().split(b"\n", 1)[0]
    assert first == b"From SomeOne<a@example.com> Tue Nov 14 22:13:20 2023"  # no blanks in the sender


def test_mboxrd_quoting_adds_one_quote_level() -> None:
    assert mboxrd_quote(b"From x\n>From y\nA From z\n") == b">From x\n>>From y\nA From z\n"
    assert mboxrd_quote(b"no separator\n") == b"no separator\n"


def test_mboxrd_quoting_is_the_line_by_line_rule() -> None:
    """On random runs of the pieces that matter, the quoting equals the rule read literally: the
    bytes split at LF, one more ``>`` before each line that starts with ``>*From ``."""

    def by_lines(data: bytes) -> bytes:
        lines = data.split(b"\n")
        return b"\n".join(b">" + line if re.match(rb">*From ", line) else line for line in lines)

    pieces = [b"\n", b"\r", b"\r\n", b">", b"From ", b"From", b"x", b" ", b"rom "]
    rng = random.Random(36)
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert mboxrd_quote(data) == by_lines(data), data


def test_maildir_is_atomic_and_read_back_in_write_order(tmp_path: Path) -> None:
    out = tmp_path / "Maildir"
    with MaildirWriter(out) as writer:
        for data in TRICKY:
            where = writer.write(data)
            assert Path(where).parent == out / "cur" and where.endswith(":2,")
    assert not os.listdir(out / "tmp") and not os.listdir(out / "new")
    read = [m.data for m in read_messages([out]) if isinstance(m, RawMessage)]
    assert read == TRICKY
    with MaildirWriter(out) as again:  # an existing Maildir is added to, never overwritten
        again.write(NO_FINAL_NEWLINE)
    assert len(os.listdir(out / "cur")) == len(TRICKY) + 1


TAGS = [
    (),
    ("$seen",),
    ("$flagged",),  # unread and flagged: still in cur/, the F kept
    ("$answered", "$draft", "$flagged", "$forwarded", "$seen", "deleted"),
    ("$seen", "todo"),  # a user tag has no Maildir letter: not carried
    ("$junk",),
    (),
]


def test_maildir_file_names_carry_the_flags_and_read_back_as_tags(tmp_path: Path) -> None:
    out = tmp_path / "Maildir"
    with MaildirWriter(out, fsync=False) as writer:
        names = [Path(writer.write(data, tags=tags)).name for data, tags in zip(TRICKY, TAGS, strict=True)]
        keyed = Path(writer.write(NO_FINAL_NEWLINE, ts=5, key="k1", tags=["$seen", "$flagged"])).name
    assert [n.rpartition(":")[2] for n in names] == ["2,", "2,S", "2,F", "2,DFPRST", "2,S", "2,", "2,"]
    assert keyed == "000000000005.Kk1.aecs:2,FS"
    assert os.listdir(out / "new") == []  # unread mail too goes to cur/: new/ can carry no flags
    read = [m for m in read_messages([out]) if isinstance(m, RawMessage)]
    assert [m.data for m in read] == [NO_FINAL_NEWLINE, *TRICKY]  # name order: the keyed name first
    expected = [tuple(t for t in tags if t not in ("todo", "$junk")) for tags in TAGS]
    assert [m.tags for m in read] == [("$flagged", "$seen"), *expected]
    assert {m.folders for m in read} == {("INBOX",)}
    with MaildirWriter(out) as again:  # a key already there, whatever its flags: not written again
        assert again.write(b"Subject: x\n\nchanged\n", key="k1") == ""


def test_mbox_status_headers_only_when_asked(tmp_path: Path) -> None:
    exact, with_status = tmp_path / "exact.mbox", tmp_path / "status.mbox"
    for path, status in ((exact, False), (with_status, True)):
        with open_writer("mbox", path, status_headers=status) as writer:
            for data, tags in zip(TRICKY, TAGS, strict=True):
                writer.write(data, tags=tags)
    plain = [m for m in read_messages([exact]) if isinstance(m, RawMessage)]
    assert [m.data for m in plain] == TRICKY and all(m.tags == () for m in plain)
    marked = [m for m in read_messages([with_status]) if isinstance(m, RawMessage)]
    assert [m.tags for m in marked] == [
        tuple(t for t in tags if t not in ("todo", "$junk", "$forwarded")) for tags in TAGS
    ]
    assert [m.data for m in marked] != TRICKY  # said so: not byte-exact
    # the fields go at the end of the header, in the message's own line breaks; the body as it was
    assert marked[3].data == TRICKY[3].replace(b"\r\n\r\ncrlf", b"\r\nStatus: RO\r\nX-Status: AFTD\r\n\r\ncrlf")
    assert marked[0].data == TRICKY[0].replace(b"\n\nplain", b"\nStatus: O\n\nplain")
    with pytest.raises(ValueError, match="mbox"):
        open_writer("maildir", tmp_path / "m", status_headers=True)


def test_eml_directory_is_exact_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "eml"
    with open_writer("eml", out) as writer:
        for data in [*TRICKY, NO_FINAL_NEWLINE]:
            writer.write(data)
    read = [m.data for m in read_messages([out]) if isinstance(m, RawMessage)]
    assert read == [*TRICKY, NO_FINAL_NEWLINE]
    with pytest.raises(FileExistsError), EmlDirWriter(out) as second:
        second.write(b"From: x\n\nbody\n")
    assert (out / "00000001.eml").read_bytes() == TRICKY[0]


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    (tmp_path / "exists.mbox").write_bytes(b"")
    with pytest.raises(FileExistsError):
        MboxWriter(tmp_path / "exists.mbox")
    with pytest.raises(ValueError, match="format must be one of"):
        open_writer("pst", tmp_path / "x")
    with pytest.raises(TypeError), open_writer("mbox", tmp_path / "y.mbox") as writer:
        writer.write("text, not bytes")  # type: ignore[arg-type]
