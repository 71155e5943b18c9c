"""aecs_mongo.pure.flags: Maildir, IMAP and mbox flags <-> tags, both ways, on their own."""

from __future__ import annotations

import pytest

from aecs_mongo.pure import flags
from aecs_mongo.pure.flags import (
    dovecot_keywords,
    imap_flags,
    imap_tags,
    maildir_base,
    maildir_flags,
    maildir_folder,
    maildir_name,
    maildir_subfolder,
    maildir_tags,
    mbox_header_tags,
    mbox_status,
    mbox_tags,
    parse_imap_flags,
    split_maildir_name,
    with_status_headers,
)

BASE = "1700000000.M123P456.host"


@pytest.mark.parametrize(
    ("name", "base", "sep", "info", "letters"),
    [
        (f"{BASE}:2,FRS", BASE, ":", "2,FRS", "FRS"),
        (f"{BASE}:2,", BASE, ":", "2,", ""),
        (f"{BASE}!2,S", BASE, "!", "2,S", "S"),  # file systems without ':' in names
        (f"{BASE};2,DS", BASE, ";", "2,DS", "DS"),
        (BASE, BASE, "", "", ""),  # new/: no info yet
        (f"{BASE}:1,experimental", BASE, ":", "1,experimental", ""),
        ("a:b:2,S", "a:b", ":", "2,S", "S"),  # only the last separator starts the info
        ("odd:2,S1", "odd:2,S1", "", "", ""),  # not an info: the whole name is the base
        (f"{BASE}:2,Sab", BASE, ":", "2,Sab", "Sab"),  # Dovecot keyword letters
    ],
)
def test_maildir_names_split_into_base_and_info(name: str, base: str, sep: str, info: str, letters: str) -> None:
    parsed = split_maildir_name(name)
    assert (parsed.base, parsed.sep, parsed.info, parsed.flags) == (base, sep, info, letters)
    assert maildir_base(name) == base


def test_a_renamed_file_keeps_its_identity() -> None:
    # what a mail reader does when it reads, answers and flags a message
    names = [BASE, f"{BASE}:2,", f"{BASE}:2,S", f"{BASE}:2,RS", f"{BASE}:2,FRS", f"{BASE}!2,FRS"]
    assert {maildir_base(n) for n in names} == {BASE}


def test_maildir_flags_to_tags_and_back() -> None:
    assert maildir_tags(f"{BASE}:2,DFPRST") == (
        "$answered",
        "$draft",
        "$flagged",
        "$forwarded",
        "$seen",
        "deleted",
    )
    assert maildir_tags(f"{BASE}:2,") == ()
    assert maildir_tags(BASE) == ()
    assert maildir_tags(f"{BASE}:2,XYZS") == ("$seen",)  # unknown letters mean nothing
    # new/ is mail no reader has seen: never $seen, other flags kept
    assert maildir_tags(f"{BASE}:2,FS", new=True) == ("$flagged",)
    assert maildir_tags(BASE, new=True) == ()
    # ASCII order, as the spec asks; tags without a letter are left out
    assert maildir_flags(["$seen", "$flagged", "todo", "$junk", "deleted"]) == "FST"
    assert maildir_name(BASE, ["$seen", "$answered"]) == f"{BASE}:2,RS"
    assert maildir_name(BASE, []) == f"{BASE}:2,"
    assert maildir_name(BASE, ["$draft"], sep="!") == f"{BASE}!2,D"
    with pytest.raises(ValueError):
        maildir_name(BASE, [], sep="/")
    for letters in ["", "S", "FS", "DFPRST", "PR"]:
        tags = maildir_tags(f"{BASE}:2,{letters}")
        assert maildir_flags(tags) == letters
        assert maildir_tags(maildir_name(BASE, tags)) == tags


def test_dovecot_keyword_letters() -> None:
    keywords = dovecot_keywords("0 $Forwarded\n1 Junk\n2 $MDNSent\nbad line\n3 \n30 toofar\n4 has(paren\n")
    assert keywords == {"a": "$Forwarded", "b": "Junk", "c": "$MDNSent", "e": "has(paren"}
    assert maildir_tags(f"{BASE}:2,Sabce", keywords=keywords) == ("$forwarded", "$mdnsent", "$seen", "junk")
    assert maildir_tags(f"{BASE}:2,Sab") == ("$seen",)  # without the file: ignored


@pytest.mark.parametrize(
    ("directory", "parent", "folder"),
    [
        (None, "INBOX", "INBOX"),
        (".Sent", "INBOX", "Sent"),
        (".a.b", "INBOX", "a/b"),
        (".Entw&APw-rfe", "INBOX", "Entwürfe"),  # modified UTF-7 on disk, as Dovecot writes it
        (".Archive.2024", "INBOX", "Archive/2024"),
        (".Sent", "work", "work/Sent"),  # a Maildir++ folder of a Maildir found at work/
        (None, "work", "work"),
    ],
)
def test_maildir_folder_names(directory: str | None, parent: str, folder: str) -> None:
    assert maildir_folder(directory, parent) == folder


def test_maildir_subfolder_is_the_way_back() -> None:
    assert maildir_subfolder("INBOX") == ""
    for directory in [".Sent", ".a.b", ".Entw&APw-rfe"]:
        assert maildir_subfolder(maildir_folder(directory)) == directory


def test_imap_flags_to_tags_and_back() -> None:
    assert imap_tags(["\\Seen", "\\Flagged", "\\Answered", "\\Draft"]) == ("$answered", "$draft", "$flagged", "$seen")
    # \Recent is a session's, not the message's; \Deleted as Maildir's T
    assert imap_tags(["\\Recent", "\\Deleted"]) == ("deleted",)
    # keywords are case-insensitive: lowercased; registered ones and free ones alike
    assert imap_tags([b"$Forwarded", b"$Junk", b"$NotJunk", b"$MDNSent", b"NonJunk", b"Work"]) == (
        "$forwarded",
        "$junk",
        "$mdnsent",
        "$notjunk",
        "nonjunk",
        "work",
    )
    # system flags are case-insensitive too; unknown system flags and keywords that are no tags: out
    assert imap_tags(["\\SEEN", "\\seen", "\\*", "\\Important", 'bad"quote', "x" * 256, ""]) == ("$seen",)
    assert imap_flags(["$seen", "$flagged", "$answered", "$draft", "deleted"]) == (
        "\\Answered",
        "\\Deleted",
        "\\Draft",
        "\\Flagged",
        "\\Seen",
    )
    assert imap_flags(["$forwarded", "$junk", "$notjunk", "todo"]) == ("$Forwarded", "$Junk", "$NotJunk", "todo")
    for tags in [(), ("$seen",), ("$answered", "$forwarded", "$junk", "$seen", "deleted", "todo")]:
        assert imap_tags(imap_flags(tags)) == tags


def test_flags_are_read_from_a_fetch_response() -> None:
    line = b'12 FETCH (UID 7 MODSEQ (42) FLAGS (\\Seen $Junk) INTERNALDATE "01-Dec-2026 10:00:00 +0000")'
    assert parse_imap_flags(line) == ["\\Seen", "$Junk"]
    assert parse_imap_flags(b"3 FETCH (UID 9 FLAGS ())") == []
    assert parse_imap_flags(b"3 FETCH (UID 9 RFC822.SIZE 10)") is None


def test_mbox_status_to_tags_and_back() -> None:
    assert mbox_tags("RO", "AF") == ("$answered", "$flagged", "$seen")
    assert mbox_tags("O", None) == ()  # old, not read: unread
    assert mbox_tags(None, "TD") == ("$draft", "deleted")
    assert mbox_tags(" ro ", "x") == ("$seen",)
    assert mbox_status(["$seen", "$flagged", "$answered"]) == ("RO", "AF")
    assert mbox_status([]) == ("O", "")
    assert mbox_status(["deleted", "$draft", "todo"]) == ("O", "TD")
    for tags in [(), ("$seen",), ("$answered", "$draft", "$flagged", "$seen", "deleted")]:
        assert mbox_tags(*mbox_status(tags)) == tags


def test_status_headers_are_read_from_the_header_only() -> None:
    raw = b"From: a@example.com\nStatus: RO\nX-Status: F\nSubject: s\n\nStatus: D\nX-Status: D\n"
    assert mbox_header_tags(raw) == ("$flagged", "$seen")
    assert mbox_header_tags(b"Subject: s\n\nStatus: RO\n") == ()
    assert mbox_header_tags(b"status: r\r\nx-status:  a \r\n\r\n") == ("$answered", "$seen")
    assert mbox_header_tags(b"Subject: x\n Status: RO\n\n") == ()  # a continuation, not a field
    assert mbox_header_tags(b"") == ()


def test_status_headers_written_for_the_export() -> None:
    raw = b"From: a@example.com\nStatus: O\nX-Status: D\n  folded\nSubject: s\n\nStatus: keep\n"
    out = with_status_headers(raw, ["$seen", "$answered"])
    assert out == b"From: a@example.com\nSubject: s\nStatus: RO\nX-Status: A\n\nStatus: keep\n"
    assert mbox_header_tags(out) == ("$answered", "$seen")
    crlf = b"From: a@example.com\r\nSubject: s\r\n\r\nbody\r\n"
    assert with_status_headers(crlf, []) == b"From: a@example.com\r\nSubject: s\r\nStatus: O\r\n\r\nbody\r\n"
    # a header without a body, with and without its last line break
    assert with_status_headers(b"Subject: s\n", ["$seen"]) == b"Subject: s\nStatus: RO\n\n"
    assert with_status_headers(b"Subject: s", ["$seen"]) == b"Subject: s\nStatus: RO\n\n"
    # again on its own output: the same bytes (the old fields are replaced, not added to)
    assert with_status_headers(out, ["$seen", "$answered"]) == out


def test_every_mapped_tag_is_a_system_flag_or_deleted() -> None:
    system = {"$seen", "$flagged", "$answered", "$draft", "$forwarded", "$junk", "$notjunk"}
    assert set(flags.MAILDIR_FLAGS.values()) <= system | {flags.DELETED}
    assert set(imap_tags(imap_flags(system | {flags.DELETED}))) == system | {flags.DELETED}
