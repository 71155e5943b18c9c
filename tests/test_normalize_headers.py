"""Header side of the normalizer on real-mail patterns: the header block, dates,
addresses, encoded-words, Message-ID/References and logging. Pure: no database.

Every fixture is a small message written for its test.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest

from aecs_mongo.normalizer import parse_date
from aecs_mongo.normalizer.header_block import repair_header_block
from aecs_mongo.normalizer.headers import decode_header_value, parse_addresses
from aecs_mongo.normalizer.message_ids import normalize_message_id, parse_references

from .helpers.normalize import parse

BOM = b"\xef\xbb\xbf"


def meta(raw: bytes) -> dict[str, Any]:
    result: dict[str, Any] = parse(raw).email["metadata"]
    return result


def crlf(*lines: str) -> bytes:
    return "\r\n".join(lines).encode("utf-8", errors="surrogateescape")


WELL_FORMED_TAIL = (
    "To: Bob <bob@example.org>",
    "Subject: Quarterly numbers",
    "Date: Tue, 3 Mar 2026 10:00:00 +0000",
    "Message-ID: <q1@example.com>",
    "",
    "The numbers are in.",
    "",
)


# --- 1. byte-order mark -----------------------------------------------------------------------


def test_utf8_bom_before_first_header_is_ignored() -> None:
    raw = BOM + crlf(
        "From: Alice <alice@example.com>",
        "To: Bob <bob@example.org>",
        "Subject: Report attached",
        "Date: Tue, 3 Mar 2026 10:00:00 +0000",
        "Message-ID: <bom1@example.com>",
        "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="b1"',
        "",
        "--b1",
        "Content-Type: text/plain; charset=utf-8",
        "",
        "See the file.",
        "--b1",
        'Content-Type: application/pdf; name="r.pdf"',
        'Content-Disposition: attachment; filename="r.pdf"',
        "Content-Transfer-Encoding: base64",
        "",
        "JVBERi0=",
        "--b1--",
        "",
    )
    email = parse(raw).email
    assert email["messageId"] == "bom1@example.com"
    assert email["metadata"]["from"] == {"name": "Alice", "email": "alice@example.com"}
    assert email["metadata"]["subject"] == "Report attached"
    assert email["metadata"]["date"] == "2026-03-03T10:00:00Z"
    assert email["content"]["text"] == "See the file."
    assert [(a["filename"], a["size"]) for a in email["attachments"]] == [("r.pdf", 5)]
    # the stored original keeps every octet, the BOM included
    assert email["content"]["rawFull"].encode("utf-8") == raw


# --- 2. the header block read as mail clients read it --------------------------------------------


def test_obsolete_whitespace_before_colon() -> None:
    raw = crlf(
        "From : Alice <alice@example.com>",
        "Subject\t :  Spaced out",
        "Date    :  Tue, 3 Mar 2026 10:00:00 +0000",
        "To: bob@example.org",
        "",
        "Body line.",
        "",
    )
    email = parse(raw).email
    assert email["metadata"]["from"] == {"name": "Alice", "email": "alice@example.com"}
    assert email["metadata"]["subject"] == "Spaced out"
    assert email["metadata"]["date"] == "2026-03-03T10:00:00Z"
    assert email["metadata"]["to"] == [{"name": None, "email": "bob@example.org"}]
    assert email["content"]["text"] == "Body line."


def test_first_line_from_with_space_before_colon_is_a_field_not_an_envelope() -> None:
    raw = crlf("From  : Carol <carol@example.net>", *WELL_FORMED_TAIL)
    assert meta(raw)["from"] == {"name": "Carol", "email": "carol@example.net"}
    assert meta(raw)["subject"] == "Quarterly numbers"
    # a real mbox envelope line is still an envelope line, not a From field
    envelope = crlf("From carol@example.net Tue Mar  3 10:00:00 2026", "From: Dan <dan@example.net>", *WELL_FORMED_TAIL)
    assert meta(envelope)["from"] == {"name": "Dan", "email": "dan@example.net"}


def test_stray_word_before_a_field_name_does_not_end_the_header_block() -> None:
    raw = crlf(
        "Received: from relay.example.com by mx.example.org; Tue, 3 Mar 2026 10:00:01 +0000",
        "oops X-Original-To: bob@example.org",
        "From: Alice <alice@example.com>",
        *WELL_FORMED_TAIL,
    )
    email = parse(raw).email
    assert email["metadata"]["from"] == {"name": "Alice", "email": "alice@example.com"}
    assert email["metadata"]["subject"] == "Quarterly numbers"
    assert email["messageId"] == "q1@example.com"
    assert email["content"]["text"] == "The numbers are in."


def test_continuation_line_without_indentation_continues_the_field() -> None:
    raw = crlf(
        "Subject: A subject folded by a broken gateway",
        "that forgot the indentation",
        "Received: from a.example.com",
        "by b.example.com; Tue, 3 Mar 2026 10:00:01 +0000",
        "From: Alice <alice@example.com>",
        "Date: Tue, 3 Mar 2026 10:00:00 +0000",
        "",
        "Hello.",
        "",
    )
    email = parse(raw).email
    assert email["metadata"]["subject"] == "A subject folded by a broken gateway that forgot the indentation"
    assert email["metadata"]["from"] == {"name": "Alice", "email": "alice@example.com"}
    assert email["metadata"]["date"] == "2026-03-03T10:00:00Z"
    assert email["content"]["text"] == "Hello."


def test_field_name_alone_with_its_colon_on_the_next_line() -> None:
    raw = crlf("To: bob@example.org", "From", " : Eve <eve@example.com>", "Subject: Hi", "", "Body.", "")
    email = parse(raw).email
    assert email["metadata"]["from"] == {"name": "Eve", "email": "eve@example.com"}
    assert email["metadata"]["subject"] == "Hi"
    assert email["content"]["text"] == "Body."


def test_field_name_with_an_invalid_octet_does_not_end_the_header_block() -> None:
    raw = crlf("Subject: Before", "X-Inval\udcecd: a name with a raw 8-bit octet", "From: a@example.com", "", "Body.")
    email = parse(raw).email
    assert email["metadata"]["subject"] == "Before"
    assert email["metadata"]["from"] == {"name": None, "email": "a@example.com"}
    assert email["content"]["text"] == "Body."


def test_body_written_without_the_empty_line_stays_body() -> None:
    # No field follows the first non-field line before the empty line: that line starts the body.
    raw = crlf("From: a@example.com", "Subject: No separator", "Hello Bob,", "this is the body.", "", "Regards")
    email = parse(raw).email
    assert email["metadata"]["subject"] == "No separator"
    assert email["content"]["text"] == "Hello Bob,\nthis is the body.\n\nRegards"


def test_boundary_right_after_the_headers_still_starts_the_body() -> None:
    raw = crlf(
        "From: a@example.com",
        "Subject: Tight multipart",
        'Content-Type: multipart/mixed; boundary="zz"',
        "--zz",
        "Content-Type: text/plain",
        "",
        "Part one.",
        "--zz--",
        "",
    )
    email = parse(raw).email
    assert email["metadata"]["subject"] == "Tight multipart"
    assert email["content"]["text"] == "Part one."


def test_header_repairs_with_lf_line_endings() -> None:
    raw = BOM + (
        b"Received: from a.example.com\n"
        b"by b.example.com; Tue, 3 Mar 2026 10:00:01 +0000\n"
        b"Subject :  LF only\n"
        b"From\n"
        b" : Alice <alice@example.com>\n"
        b"Date: Tue, 3 Mar 2026 10:00:00 +0000\n"
        b"\n"
        b"Body.\n"
    )
    email = parse(raw).email
    assert email["metadata"]["subject"] == "LF only"
    assert email["metadata"]["from"] == {"name": "Alice", "email": "alice@example.com"}
    assert email["metadata"]["date"] == "2026-03-03T10:00:00Z"
    assert email["content"]["text"] == "Body."


def test_repair_leaves_the_original_bytes_and_the_synthetic_id_alone() -> None:
    raw = crlf("Subject : No id here", "From: a@example.com", "", "Body.", "")
    email = parse(raw).email
    assert email["metadata"]["subject"] == "No id here"
    assert email["content"]["rawFull"].encode("utf-8") == raw
    assert email["messageId"] == f"generated-{hashlib.sha256(raw).hexdigest()[:32]}@aecs.local"


def test_repair_header_block_fast_path_and_body_untouched() -> None:
    well_formed = crlf("From: a@example.com", " continued", "Subject: x", "", "Subject : in the body", "")
    assert repair_header_block(well_formed) is well_formed
    broken = crlf("Subject : x", "From: a@example.com", "", "Subject : in the body", "")
    assert repair_header_block(broken) == crlf("Subject: x", "From: a@example.com", "", "Subject : in the body", "")
    assert repair_header_block(BOM + well_formed) == well_formed
    assert repair_header_block(b"") == b""


def test_message_id_and_date_comments_and_folding_whitespace() -> None:
    raw = crlf(
        "From: a@example.com",
        "Message-ID: <1234 @ local(blah) .machine .example>",
        "Date: Fri, 21 Nov 1997 09(comment): 55 : 06 -0600",
        "",
        "Body.",
    )
    email = parse(raw).email
    assert email["messageId"] == "1234@local.machine.example"
    assert email["metadata"]["date"] == "1997-11-21T15:55:06Z"
    # a reply naming the same id in its References threads to the same id
    assert parse_references("<1234 @ local(blah) .machine .example> <x@y.example>") == [
        "1234@local.machine.example",
        "x@y.example",
    ]
    assert normalize_message_id('<"quoted part"@example.com> (relay note)') == '"quoted part"@example.com'


# --- 3. raw 8-bit octets inside an encoded-word ------------------------------------------------


def test_raw_8bit_octet_inside_q_word_is_decoded_in_the_declared_charset() -> None:
    raw = b"From: a@example.com\r\nSubject: =?iso-8859-1?Q?Fr\xf6sche_und_Kr=F6ten?=\r\n\r\nBody.\r\n"
    assert meta(raw)["subject"] == "Frösche und Kröten"
    value = b"=?windows-1252?q?caf\xe9?=".decode("ascii", errors="surrogateescape")
    assert decode_header_value(value) == "café"


# --- 5, 6, 7, 15. addresses --------------------------------------------------------------------


def test_words_before_a_bare_address_are_its_name() -> None:
    assert parse_addresses(["John Q Public john@example.com, jane@example.org"]) == [
        {"name": "John Q Public", "email": "john@example.com"},
        {"name": None, "email": "jane@example.org"},
    ]


def test_angle_address_wins_over_an_at_sign_in_the_display_name() -> None:
    assert parse_addresses(["a.b@host <A.B@real.example>, c@example.org"]) == [
        {"name": "a.b@host", "email": "a.b@real.example"},
        {"name": None, "email": "c@example.org"},
    ]


def test_angle_address_without_domain_is_kept() -> None:
    raw = crlf("From: Local User <postmaster>", "To: Team <ops>", "Subject: s", "", "Body.")
    assert meta(raw)["from"] == {"name": "Local User", "email": "postmaster"}
    assert meta(raw)["to"] == [{"name": "Team", "email": "ops"}]
    # a bare word without @ is still no address
    assert parse_addresses(["nobody"]) == []


def test_from_with_two_at_signs_keeps_the_whole_address() -> None:
    raw = crlf("From: gateway!user@relay@example.com", "Subject: bang path", "", "Body.")
    assert meta(raw)["from"] == {"name": None, "email": "gateway!user@relay@example.com"}


def test_address_comments_groups_and_quoted_names() -> None:
    assert parse_addresses(
        ['"Doe, John" <jd@example.com>, Team: x@example.com, y@example.com;, z@example.com (Zed)']
    ) == [
        {"name": "Doe, John", "email": "jd@example.com"},
        {"name": None, "email": "x@example.com"},
        {"name": None, "email": "y@example.com"},
        {"name": "Zed", "email": "z@example.com"},
    ]
    assert parse_addresses(["Pete(A nice \\) chap) <pete(his account)@silly.example(his host)>"]) == [
        {"name": "Pete", "email": "pete@silly.example"}
    ]
    assert parse_addresses(["<Undisclosed-Recipient:;>", "undisclosed-recipients:;"]) == []


def test_obsolete_space_around_the_dots_and_at_of_a_bare_address() -> None:
    # RFC 2822 Appendix A.6.1; RFC 5322 §4.4 obs-domain and obs-local-part allow CFWS there
    raw = crlf(
        "From: Joe Q. Public <john.q.public@example.com>",
        "To: Mary Smith <@machine.tld:mary@example.net>, , jdoe@test   . example",
        "Date: Tue, 1 Jul 2003 10:52:37 +0200",
        "Message-ID: <5678.21-Nov-1997@example.com>",
        "",
        "Hi everyone.",
        "",
    )
    assert meta(raw)["from"] == {"name": "Joe Q. Public", "email": "john.q.public@example.com"}
    assert meta(raw)["to"] == [
        {"name": "Mary Smith", "email": "mary@example.net"},
        {"name": None, "email": "jdoe@test.example"},
    ]
    assert parse_addresses(["john . doe @ example . org (John), jdoe@test (c) . example"]) == [
        {"name": "John", "email": "john.doe@example.org"},
        {"name": "c", "email": "jdoe@test.example"},
    ]
    # a name word that merely ends with a dot stays in the name
    assert parse_addresses(["Smith Jr. jdoe@example.org"]) == [{"name": "Smith Jr.", "email": "jdoe@example.org"}]


# --- 8, 9. dates ------------------------------------------------------------------------------


def test_three_digit_zone_is_read_with_its_leading_zero() -> None:
    assert parse_date("Tue, 3 Mar 2026 10:00:00 -600").date == "2026-03-03T16:00:00Z"
    assert parse_date("Tue, 3 Mar 2026 10:00:00 +530").date == "2026-03-03T04:30:00Z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tue, 3 Mar 2026 06:09:22 PM EDT", "2026-03-03T22:09:22Z"),
        ("Tue, 3 Mar 2026 06:09:22 AM EDT", "2026-03-03T10:09:22Z"),
        ("Tue, 3 Mar 2026 12:30:00 AM +0000", "2026-03-03T00:30:00Z"),
        ("Tue, 3 Mar 2026 12:30:00 PM +0000", "2026-03-03T12:30:00Z"),
        ("Tue, 3 Mar 2026 06:09:22PM -0400", "2026-03-03T22:09:22Z"),
        ("Tue, 3 Mar 2026 6:09 p.m. GMT", "2026-03-03T18:09:00Z"),
        ("Tue, 3 Mar 2026 18:09:22 PM +0000", "2026-03-03T18:09:22Z"),
    ],
)
def test_twelve_hour_times(value: str, expected: str) -> None:
    assert parse_date(value).date == expected


# --- References, logging ------------------------------------------------------------------------


def test_only_the_first_references_header_is_read() -> None:
    raw = crlf(
        "From: a@example.com",
        "Message-ID: <r3@example.com>",
        "References: <r1@example.com> <r2@example.com>",
        "References: invalid.",
        "",
        "Body.",
    )
    email = parse(raw).email
    assert email["thread"]["references"] == ["r1@example.com", "r2@example.com"]
    assert email["threadId"] == "r1@example.com"


def test_missing_message_id_and_fallback_thread_are_not_warnings(caplog: pytest.LogCaptureFixture) -> None:
    raw = crlf("From: a@example.com", "Subject: no ids at all", "", "Body.")
    with caplog.at_level(logging.DEBUG, logger="aecs_mongo"):
        parsed = parse(raw)
    assert parsed.email["messageId"].startswith("generated-")
    assert any("Message-ID missing" in defect for defect in parsed.defects)
    ours = [record for record in caplog.records if record.name.startswith("aecs_mongo")]
    assert ours, "the fallback thread hash is logged at DEBUG"
    assert all(record.levelno < logging.WARNING for record in ours)
