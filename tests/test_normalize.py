"""aecs_mongo.normalizer: conformance fixtures, API, headers, dates, attachments, content rules."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo.errors import InputTooLargeError, InvalidEmailError
from aecs_mongo.normalizer import (
    clean_text,
    compute_thread_id,
    is_valid_message_id,
    make_for_ai,
    normalize,
    parse_date,
    parse_email,
    parse_references,
    raw_full_from_bytes,
    raw_full_to_bytes,
    strip_quoted_chains,
    strip_signature,
    subject_key,
)

from .helpers.normalize import PROCESSED, SPEC, parse

FIXTURES = sorted((SPEC / "conformance").glob("*.json")) if (SPEC / "conformance").is_dir() else []


def assert_valid(validator: Any, email: dict[str, Any]) -> None:
    errors = [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(email)]
    assert errors == []


def message(*headers: str, body: str = "Hello.\r\n", crlf: bool = True) -> bytes:
    sep = "\r\n" if crlf else "\n"
    return (sep.join(headers) + sep + sep + body).encode("utf-8")


# --- conformance fixtures ---------------------------------------------------------------


def fixture_ids() -> list[str]:
    return [path.stem for path in FIXTURES]


@pytest.fixture(params=FIXTURES, ids=fixture_ids())
def fixture(request: pytest.FixtureRequest) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(request.param).read_text())
    return data


def test_conformance_fixtures_are_present() -> None:
    if not (SPEC / "conformance").is_dir():
        pytest.skip("shared/aecs-spec/conformance is absent")
    assert len(FIXTURES) == 8


def test_conformance_functions(fixture: dict[str, Any]) -> None:
    given, want = fixture["input"], fixture["expected"]
    thread_id = compute_thread_id(
        message_id=given["messageId"],
        in_reply_to=given["inReplyTo"],
        references=given["references"],
        from_email=given["from"],
        subject=given["subject"],
        date=given["date"],
    )
    assert thread_id == want["threadId"]
    assert parse_date(given["date"]) == (want["metadataDate"], want["metadataTimestamp"])


def fixture_message(given: dict[str, Any]) -> bytes:
    headers = [f"From: {given['from']}", "To: someone@example.org"]
    if given["subject"] is not None:
        headers.append(f"Subject: {given['subject']}")
    if given["date"] is not None:
        headers.append(f"Date: {given['date']}")
    if given["messageId"] is not None:
        headers.append(f"Message-ID: {given['messageId']}")
    if given["inReplyTo"] is not None:
        headers.append(f"In-Reply-To: {given['inReplyTo']}")
    if given["references"]:
        headers.append("References: " + " ".join(given["references"]))
    return message(*headers, body="Body text.\r\n")


def test_conformance_through_normalize(fixture: dict[str, Any], validator: Any) -> None:
    given, want = fixture["input"], fixture["expected"]
    raw = fixture_message(given)
    email = normalize(raw, processed_at=PROCESSED)
    assert_valid(validator, email)
    assert email["threadId"] == want["threadId"]
    assert email["metadata"]["date"] == want["metadataDate"]
    assert email["metadata"]["timestamp"] == want["metadataTimestamp"]
    assert email["thread"]["position"] is None
    if given["messageId"] is None:
        assert email["messageId"] == f"generated-{hashlib.sha256(raw).hexdigest()[:32]}@aecs.local"
    else:
        assert email["messageId"] == given["messageId"].strip().strip("<>").strip()


def test_rule_four_logs_at_debug_not_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="aecs_mongo.normalizer"):
        compute_thread_id(
            message_id="no-at-sign", in_reply_to=None, references=[], from_email="a@b.c", subject="x", date=None
        )
    assert [record.levelno for record in caplog.records if record.name == "aecs_mongo.normalizer"] == [logging.DEBUG]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="aecs_mongo.normalizer"):
        compute_thread_id(
            message_id="ok@example.com", in_reply_to=None, references=[], from_email=None, subject=None, date=None
        )
    assert not caplog.records


# --- threading details ----------------------------------------------------------------------


def test_message_id_validity() -> None:
    assert is_valid_message_id("<a@b>")
    assert is_valid_message_id("  a@b  ")
    for bad in (None, "", "<>", "ab", "@b", "a@", "a@@b", "a@b@c"):
        assert not is_valid_message_id(bad), bad


def test_references_keep_invalid_entries_but_skip_them_for_threading() -> None:
    raw = message(
        "From: a@example.com",
        "Message-ID: <me@example.com>",
        "References: garbage, <valid@example.com>\r\n <second@example.com>",
    )
    email = parse(raw).email
    assert email["thread"]["references"] == ["garbage", "valid@example.com", "second@example.com"]
    assert email["threadId"] == "valid@example.com"
    assert parse_references("<a@b> (comment) <c@d>") == ["a@b", "c@d"]


def test_in_reply_to_with_comment_and_invalid_own_id() -> None:
    raw = message("From: a@example.com", "Message-ID: <no-at-sign>", "In-Reply-To: <parent@example.com> (Bob's note)")
    parsed = parse(raw)
    assert parsed.email["thread"]["inReplyTo"] == "parent@example.com"
    assert parsed.email["threadId"] == "parent@example.com"
    assert parsed.email["messageId"].startswith("generated-")
    assert any("Message-ID invalid" in d for d in parsed.defects)


def test_synthetic_id_hashes_original_octets_not_a_decoded_copy() -> None:
    raw = b"From: a@example.com\r\nSubject: caf\xe9\r\n\r\nbody \xff\xfe\r\n"
    email = parse(raw).email
    assert email["messageId"] == "generated-" + hashlib.sha256(raw).hexdigest()[:32] + "@aecs.local"
    decoded_copy = raw.decode("utf-8", errors="replace").encode("utf-8")
    assert email["messageId"] != "generated-" + hashlib.sha256(decoded_copy).hexdigest()[:32] + "@aecs.local"


def test_fallback_hash_uses_decoded_nfc_lowercase_subject() -> None:
    # "É" as E + combining acute, RFC 2047 encoded; Turkish-sensitive "I".
    subject = "=?utf-8?b?" + base64.b64encode("  Ünïcode İ E\u0301  ".encode()).decode() + "?="
    raw = message("From: Bob <BOB@Example.COM>", f"Subject: {subject}", "Date: Mon, 29 Jun 2026 10:00:00 +0200")
    email = parse(raw).email
    expected_subject = "ünïcode i̇ é"  # locale-independent lower, NFC, trimmed
    basis = f"bob@example.com:{expected_subject}:2026-06-29T08:00:00Z"
    assert email["threadId"] == hashlib.sha256(basis.encode()).hexdigest()


# --- dates -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Sun, 29 Jun 2026 14:32:00 +0000", "2026-06-29T14:32:00Z"),
        ("Sun, 29 Jun 2026 16:32:00 +0200", "2026-06-29T14:32:00Z"),
        ("29 Jun 2026 14:32 -0000", "2026-06-29T14:32:00Z"),
        ("Sun, 29 Jun 2026 14:32:00", "2026-06-29T14:32:00Z"),
        ("Fri, 7 Jun 91 09:09:05 EDT", "1991-06-07T13:09:05Z"),
        ("Fri, 07 Oct 1994 16:15:05 -0700 (PDT)", "1994-10-07T23:15:05Z"),
        ("Mon Jan  1 10:00:00 2001", "2001-01-01T10:00:00Z"),
        ("1 Jan 49 00:00:00 +0000", "2049-01-01T00:00:00Z"),
        ("1 Jan 50 00:00:00 +0000", "1950-01-01T00:00:00Z"),
        ("1 Jan 2001 10:00:00 CET", "2001-01-01T10:00:00Z"),
        ("2026-03-10T12:00:00Z", "2026-03-10T12:00:00Z"),
        ("2026-03-10T13:30:00.987+01:30", "2026-03-10T12:00:00Z"),
        ("2026-03-10 12:00:00", "2026-03-10T12:00:00Z"),
    ],
)
def test_parse_date_accepts(value: str, expected: str) -> None:
    result = parse_date(value)
    assert result.date == expected
    assert isinstance(result.timestamp, int)
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(result.timestamp)) == expected


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "Whenever", "31 Feb 2020 10:00 +0000", "1 Jan 2001 24:00 +0000", "1 Foo 2001 10:00",
     "1 Jan 2001 10:00 +0popcorn", "2026-13-01T00:00:00Z", "1 Jan 2001 10:00 +0560"],
)  # fmt: skip
def test_parse_date_refuses(value: str | None) -> None:
    assert parse_date(value) == (None, None)


def test_dates_do_not_depend_on_local_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is not available on this platform")
    raw = message("From: a@example.com", "Date: Sun, 29 Jun 2026 14:32:00", "Message-ID: <x@y>")
    results = []
    for zone in ("UTC", "America/St_Johns", "Asia/Kolkata", "Pacific/Kiritimati"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        results.append(normalize(raw, processed_at=PROCESSED))
    monkeypatch.delenv("TZ")
    time.tzset()
    assert all(result == results[0] for result in results)
    assert results[0]["metadata"]["date"] == "2026-06-29T14:32:00Z"


def test_unparseable_date_is_null_and_recorded() -> None:
    parsed = parse(message("From: a@example.com", "Date: not a date"))
    assert parsed.email["metadata"]["date"] is None
    assert parsed.email["metadata"]["timestamp"] is None
    assert any("Date not parseable" in d for d in parsed.defects)


def test_processed_at_forms() -> None:
    raw = message("From: a@example.com")
    from datetime import UTC, datetime, timedelta, timezone

    assert normalize(raw, processed_at="2026-01-02T05:04:05.9+02:00")["processing"]["processedAt"] == (
        "2026-01-02T03:04:05Z"
    )
    aware = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert normalize(raw, processed_at=aware)["processing"]["processedAt"] == "2026-01-02T03:04:05Z"
    now = normalize(raw)["processing"]["processedAt"]
    assert abs(datetime.fromisoformat(now.replace("Z", "+00:00")) - datetime.now(UTC)) < timedelta(minutes=5)
    with pytest.raises(ValueError):
        normalize(raw, processed_at="yesterday")


# --- headers and addresses ---------------------------------------------------------------------


def test_addresses_and_encoded_words() -> None:
    raw = message(
        'From: "=?iso-8859-1?q?Andr=E9?= Smith" <Andre@Example.COM>',
        "To: =?utf-8?q?J=C3=BCrgen?= <j@example.de>, plain@example.org, Group: g1@example.org, g2@example.org;",
        "Cc: undisclosed-recipients:;",
        "Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?= aus =?utf-8?b?QmVybGlu?= =?utf-8?b?IQ==?= today",
        "List-Id: Debian <Debian-Announce.lists.debian.org>",
        "Message-ID: <m1@example.com>",
    )
    parsed = parse(raw)
    meta = parsed.email["metadata"]
    assert meta["from"] == {"name": "André Smith", "email": "andre@example.com"}
    assert meta["to"] == [
        {"name": "Jürgen", "email": "j@example.de"},
        {"name": None, "email": "plain@example.org"},
        {"name": None, "email": "g1@example.org"},
        {"name": None, "email": "g2@example.org"},
    ]
    assert meta["cc"] == []
    # whitespace between encoded-words goes, whitespace next to plain text stays (RFC 2047 §6.2)
    assert meta["subject"] == "Grüße aus Berlin! today"
    assert parsed.list_id == "debian-announce.lists.debian.org"


def test_split_multibyte_encoded_words_and_8bit_headers() -> None:
    word = "日本語".encode()
    first = base64.b64encode(word[:4]).decode()
    second = base64.b64encode(word[4:]).decode()
    raw = (
        f"From: =?utf-8?b?{first}?=\r\n =?utf-8?b?{second}?= <jp@example.jp>\r\n".encode()
        + "Subject: Grüße roh\r\n".encode()
        + b"To: Ren\xe9 <rene@example.fr>\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\nCaf\xe9\r\n"
    )
    parsed = parse(raw)
    meta = parsed.email["metadata"]
    assert meta["from"]["name"] == "日本語"
    assert meta["subject"] == "Grüße roh"
    assert meta["to"] == [{"name": "René", "email": "rene@example.fr"}]
    assert parsed.email["content"]["text"] == "Café"


def test_list_id_forms() -> None:
    assert parse(message("From: a@b.c", "List-Id: <dev.example.org>")).list_id == "dev.example.org"
    assert parse(message("From: a@b.c", "List-Id: plain.example.org")).list_id == "plain.example.org"
    assert parse(message("From: a@b.c")).list_id is None


@pytest.mark.parametrize(
    ("subject", "key"),
    [
        ("Re: Fwd: FW: Live  Wire", "live wire"),
        ("AW: WG: SV: VS: Antw: Hallo", "hallo"),
        ("Re[2]: RE: re(3):  Budget ", "budget"),
        ("Fwd:Re:x", "x"),
        ("Reply all: not a prefix", "reply all: not a prefix"),
        ("Release notes", "release notes"),
        (None, ""),
        ("", ""),
    ],
)
def test_subject_key(subject: str | None, key: str) -> None:
    assert subject_key(subject) == key


def test_missing_from_is_omitted_not_invalid(validator: Any) -> None:
    parsed = parse(message("To: a@example.com", "Subject: no sender"))
    assert "from" not in parsed.email["metadata"]
    assert_valid(validator, parsed.email)
    bad = parse(message("From: Mailer Daemon", "To: x"))
    assert "from" not in bad.email["metadata"]
    assert any("no usable addr-spec" in d for d in bad.defects)


# --- MIME: body choice and attachments -------------------------------------------------------------------

MIXED = (
    b"From: a@example.com\r\n"
    b"Message-ID: <mixed@example.com>\r\n"
    b"MIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="outer"\r\n'
    b"\r\n"
    b"--outer\r\n"
    b'Content-Type: multipart/alternative; boundary="alt"\r\n'
    b"\r\n"
    b"--alt\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b"Plain body.\r\n"
    b"--alt\r\n"
    b'Content-Type: multipart/related; boundary="rel"\r\n'
    b"\r\n"
    b"--rel\r\n"
    b"Content-Type: text/html; charset=utf-8\r\n"
    b"\r\n"
    b'<p>HTML <img src="cid:logo@x"></p>\r\n'
    b"--rel\r\n"
    b"Content-Type: image/png\r\n"
    b"Content-ID: <logo@x>\r\n"
    b"Content-Transfer-Encoding: base64\r\n"
    b"\r\n"
    b"iVBORw0KGgo=\r\n"
    b"--rel--\r\n"
    b"--alt--\r\n"
    b"--outer\r\n"
    b"Content-Type: text/plain; name=notes.txt\r\n"
    b"Content-Disposition: attachment; filename*=utf-8''n%C3%B6tes.txt\r\n"
    b"Content-ID: <unused@x>\r\n"
    b"\r\n"
    b"line one\r\n"
    b"line two\r\n"
    b"--outer\r\n"
    b"Content-Type: message/rfc822\r\n"
    b"Content-Disposition: attachment\r\n"
    b"\r\n"
    b"From: inner@example.com\r\n"
    b"Subject: inner\r\n"
    b"\r\n"
    b"Inner body.\r\n"
    b"--outer\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b'Content-Disposition: attachment; filename="=?utf-8?q?r=C3=A9sum=C3=A9.bin?="\r\n'
    b"Content-Transfer-Encoding: base64\r\n"
    b"\r\n"
    b"AAECAw==\r\n"
    b"--outer--\r\n"
)


def test_body_choice_and_attachments_in_mime_order(validator: Any) -> None:
    parsed = parse(MIXED)
    email = parsed.email
    assert_valid(validator, email)
    assert email["content"]["text"] == "Plain body."
    assert email["content"]["html"] is not None and "cid:logo@x" in email["content"]["html"]
    atts = email["attachments"]
    assert [a["contentType"] for a in atts] == ["image/png", "text/plain", "message/rfc822", "application/octet-stream"]
    assert [a["id"] for a in atts] == [f"mixed@example.com:{i}" for i in range(4)]
    assert [a["filename"] for a in atts] == ["", "nötes.txt", "", "résumé.bin"]
    assert atts[0]["cid"] == "logo@x"
    assert atts[1]["cid"] is None  # disposition attachment and not referenced from the HTML
    # sizes are decoded bytes; the CRLF before a boundary belongs to the boundary
    assert parsed.attachment_data[0] == base64.b64decode("iVBORw0KGgo=")
    assert parsed.attachment_data[1] == b"line one\r\nline two"
    assert atts[1]["size"] == len(b"line one\r\nline two")
    assert parsed.attachment_data[2] == b"From: inner@example.com\r\nSubject: inner\r\n\r\nInner body."
    assert parsed.attachment_data[3] == b"\x00\x01\x02\x03"
    assert [a["size"] for a in atts] == [len(d) for d in parsed.attachment_data]


def test_html_only_message_gets_text_from_html() -> None:
    raw = message(
        "From: a@example.com",
        "Content-Type: text/html; charset=utf-8",
        body="<html><head><style>p{color:red}</style></head><body><p>Hi&nbsp;there &amp; welcome</p>"
        "<blockquote>old <b>quoted</b> text</blockquote><div>Reply&#33;</div></body></html>",
    )
    content = parse(raw).email["content"]
    assert content["html"].startswith("<html>")
    assert content["text"] == "Hi there & welcome\n\n> old quoted text\n\nReply!"
    assert "color:red" not in content["text"]


def test_delivery_status_parts_are_attachments() -> None:
    raw = (
        b"From: MAILER-DAEMON@example.com\r\nContent-Type: multipart/report; report-type=delivery-status;"
        b' boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n--b\r\n'
        b"Content-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.com\r\n\r\n"
        b"Final-Recipient: rfc822; x@example.com\r\nAction: failed\r\n--b--\r\n"
    )
    parsed = parse(raw)
    assert parsed.email["content"]["text"] == "Delivery failed."
    assert [a["contentType"] for a in parsed.email["attachments"]] == ["message/delivery-status"]
    assert b"Action: failed" in parsed.attachment_data[0]


def test_raw_full_round_trip() -> None:
    utf8 = "From: a@b.c\r\nSubject: Grüße\r\n\r\n✔\r\n".encode()
    assert raw_full_to_bytes(raw_full_from_bytes(utf8)) == utf8
    assert parse(utf8).email["content"]["rawFull"] == utf8.decode()
    latin = b"From: a@b.c\r\n\r\ncaf\xe9\r\n"
    text = raw_full_from_bytes(latin)
    assert text == latin.decode("latin-1")
    assert len(text) == len(latin)


# --- content preservation (AECS-1 §4.3.1) -------------------------------------------------------------------


def test_top_post_removes_trailing_quote_and_attribution() -> None:
    text = "Thanks, looks good.\n\nOn Mon, 29 Jun 2026 at 09:00, Alice <a@x> wrote:\n> old text\n> more"
    assert strip_quoted_chains(text) == "Thanks, looks good."


def test_wrapped_attribution_is_removed() -> None:
    text = "Sounds good.\n\nOn Mon, 29 Jun 2026 at 09:00, Alice Example\n<alice@example.com> wrote:\n\n> Lunch?"
    assert strip_quoted_chains(text) == "Sounds good."


def test_bottom_post_and_inline_answers_are_kept() -> None:
    text = "My answers are below.\n> Is the design approved?\nNo.\n> Can we deploy Friday?\nNot before Monday."
    assert strip_quoted_chains(text) == text
    bottom = "On Mon, Alice wrote:\n> Question one?\n\nAnswer at the bottom."
    # blank lines inside a kept quote run are dropped, as the reference implementation does
    assert strip_quoted_chains(bottom) == "> Question one?\nAnswer at the bottom."


def test_long_quote_context_is_bounded_with_marker() -> None:
    quoted = [f"> line {i}" for i in range(1, 9)]
    assert strip_quoted_chains("\n".join([*quoted, "My answer."])) == (
        "> [5 quoted lines omitted]\n> line 6\n> line 7\n> line 8\nMy answer."
    )
    short = "> a\n> b\nok"
    assert strip_quoted_chains(short) == short  # three or fewer: no marker
    assert "omitted" not in strip_quoted_chains("> a\n> b\n> c\nok")
    assert "> [1 quoted line omitted]" in strip_quoted_chains("> a\n> b\n> c\n> d\nok")


def test_original_message_history_is_removed_to_the_end() -> None:
    text = "See below.\n\n-----Original Message-----\nFrom: Bob\nSent: Monday\n\nOld body\n\nMore old"
    assert strip_quoted_chains(text) == "See below."


def test_outlook_header_block_and_underscore_divider() -> None:
    text = (
        "Works for me.\n\n________________________________\nFrom: Alice Example <alice@example.com>\n"
        "Sent: Monday, 29 June 2026 09:00\nSubject: Meeting\n\nDoes 3pm work?"
    )
    assert strip_quoted_chains(text) == "Works for me."
    plain_block = "Reply.\n\nFrom: Alice <a@x>\nDate: Mon\nTo: Bob\n\nold"
    assert strip_quoted_chains(plain_block) == "Reply."


def test_lone_divider_is_kept() -> None:
    text = "Newsletter intro.\n\n____________________\n\nSection two keeps going.\n\n==========\n\nSection three."
    assert strip_quoted_chains(text) == text


def test_forwarded_header_block_is_kept_and_collapsed_for_ai() -> None:
    text = (
        "FYI, see the pricing change below.\n\n---------- Forwarded message ---------\n"
        "From: Vendor <billing@vendor.example>\nDate: Mon, 28 Sep 2026 at 10:00\nSubject: Price update\n"
        "To: Bob <bob@example.com>\n\nFrom 1 November the Pro plan costs $12 per month."
    )
    clean, fallback = clean_text(text)
    assert clean == text and fallback is False
    for_ai = make_for_ai(clean)
    assert for_ai is not None
    assert for_ai.count("\n") < text.count("\n")
    summary = [line for line in for_ai.split("\n") if line.startswith("[Forwarded message]")]
    assert summary == [
        "[Forwarded message] From: Vendor <billing@vendor.example>; Date: Mon, 28 Sep 2026 at 10:00; "
        "Subject: Price update; To: Bob <bob@example.com>"
    ]
    assert "From 1 November the Pro plan costs $12 per month." in for_ai
    begin = "See this.\n\nBegin forwarded message:\n\nFrom: X <x@y>\nSubject: S\nDate: D\n\nForwarded body."
    assert strip_quoted_chains(begin) == begin


def test_signature_delimiter_short_block_removed_long_block_kept() -> None:
    short = "Body line.\n\n-- \nBob\nACME Inc.\n+1 555 0100"
    assert strip_signature(short) == "Body line."
    ten = "Body.\n-- \n" + "\n".join(f"sig {i}" for i in range(10))
    assert strip_signature(ten) == "Body."
    eleven = "Body.\n-- \n" + "\n".join(f"more text {i}" for i in range(11))
    assert strip_signature(eleven) == eleven.replace("-- \n", "--\n")


def test_mobile_signature_and_lookalike() -> None:
    assert strip_signature("On my way.\n\nSent from my iPhone") == "On my way."
    lookalike = (
        "Quick update before my flight.\nSent from my iPhone\n\nCorrection now that I have landed:\n"
        "The vendor call is moved to Wednesday.\nThe budget cap is $8,000, not $10,000.\nPlease update the tracker."
    )
    assert strip_signature(lookalike) == lookalike


def test_disclaimer_bounds() -> None:
    body = "Please find the contract attached."
    fourteen = "\n".join(f"disclaimer text {i}" for i in range(14))
    text = f"{body}\n\nCONFIDENTIALITY NOTICE: this email is private.\n{fourteen}"
    assert strip_signature(text) == body
    fifteen = "\n".join(f"authored text {i}" for i in range(15))
    kept = f"{body}\n\nConfidentiality notice: read on.\n{fifteen}"
    assert strip_signature(kept) == kept


def test_closing_salutation() -> None:
    assert strip_signature("Can you send the file?\n\nBest regards,\nAlice Example") == "Can you send the file?"
    with_question = "Here it is.\n\nThanks,\nAlice\nAny questions? Call me?"
    assert strip_signature(with_question) == with_question


def test_all_quoted_body_falls_back_to_text() -> None:
    raw = message("From: a@example.com", body="> Forwarded question\r\n> with no answer\r\n")
    email = parse(raw).email
    assert email["content"]["clean"] == email["content"]["text"] == "> Forwarded question\n> with no answer"
    assert email["processing"]["cleanFallback"] is True
    assert parse(message("From: a@example.com")).email["processing"]["cleanFallback"] is False


def test_appendix_a_example() -> None:
    raw = (
        b"From: Bob <bob@example.com>\r\nTo: Alice <alice@example.com>\r\nSubject: Re: Project update\r\n"
        b"Date: Sun, 29 Jun 2026 14:32:00 +0000\r\nMessage-ID: <reply789@mail.example.com>\r\n"
        b"In-Reply-To: <root456@mail.example.com>\r\nReferences: <root456@mail.example.com>\r\n"
        b"Content-Type: text/plain; charset=UTF-8\r\n\r\nThanks Alice, looks good to me. Let's go ahead.\r\n\r\n"
        b"On Sun, 29 Jun 2026 at 09:00, Alice <alice@example.com> wrote:\r\n"
        b"> Hi Bob, just wanted to share the latest project update.\r\n"
        b"> Everything is on track for the Thursday deadline.\r\n>\r\n> -- \r\n> Alice Smith | Product Lead"
    )
    email = parse(raw).email
    assert email["threadId"] == "root456@mail.example.com"
    assert email["metadata"]["timestamp"] == 1782743520
    assert email["content"]["text"].endswith("> --\n> Alice Smith | Product Lead")
    assert email["content"]["raw"].endswith("> -- \r\n> Alice Smith | Product Lead")
    assert email["content"]["clean"] == email["content"]["forAI"] == "Thanks Alice, looks good to me. Let's go ahead."


def test_for_ai_whitespace_images_and_truncation() -> None:
    clean = "Hello\u00a0 \t world\u200b [cid:image001.png@01D]\n\n\n\nSee [image: logo.png] chart\ncid:abc@def"
    assert make_for_ai(clean) == "Hello world\n\nSee chart"
    long = "word " * 5000
    out = make_for_ai(long, 100)
    assert out is not None and len(out) <= 100 and out.endswith("\n[truncated]")
    email = normalize(message("From: a@b.c", body=long), for_ai_max_chars=50, processed_at=PROCESSED)
    assert len(email["content"]["forAI"]) <= 50 and email["content"]["forAI"].endswith("[truncated]")
    with pytest.raises(ValueError):
        make_for_ai("x", 5)


# --- bad input -----------------------------------------------------------------------------------


def test_empty_input(validator: Any) -> None:
    parsed = parse(b"")
    assert parsed.email["messageId"] == "generated-" + hashlib.sha256(b"").hexdigest()[:32] + "@aecs.local"
    assert parsed.email["content"]["text"] == ""
    assert parsed.defects
    assert_valid(validator, parsed.email)


def test_header_only_message(validator: Any) -> None:
    parsed = parse(b"From: a@example.com\r\nSubject: only headers\r\nMessage-ID: <h@x>")
    assert parsed.email["metadata"]["subject"] == "only headers"
    assert parsed.email["messageId"] == "h@x"
    assert parsed.email["content"]["clean"] == ""
    assert_valid(validator, parsed.email)


def test_nul_bytes_and_invalid_utf8_everywhere(validator: Any) -> None:
    raw = (
        b"From: \xff\xfe Bad\x00 <bad\xff@example.com>\r\nTo: \x00@\x00\r\n"
        b"Subject: a\x00b \xc3\x28 =?utf-8?q?=FF=FE?=\r\n"
        b"Message-ID: <id\x00\xff@example.com>\r\nReferences: <r\xff@x> <\x00>\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n\r\nbody\x00with nul \xff\xfe\xfd\r\n"
    )
    parsed = parse(raw)
    email = parsed.email
    assert_valid(validator, email)
    encoded = json.dumps(email, ensure_ascii=False).encode("utf-8")  # no lone surrogates anywhere
    assert b"\\u0000" not in json.dumps(email["metadata"]).encode()
    assert "\x00" not in email["content"]["text"]
    assert email["content"]["rawFull"] == raw.decode("latin-1")
    assert parsed.defects
    assert encoded


def test_998_byte_message_id(validator: Any) -> None:
    long_id = "a" * 980 + "@example.com"
    header = f"Message-ID: <{long_id}>"
    assert len(header) - len("Message-ID: ") == len(long_id) + 2
    email = parse(message("From: a@example.com", header)).email
    assert email["messageId"] == long_id
    assert email["threadId"] == long_id
    assert_valid(validator, email)


def test_twenty_megabyte_attachment() -> None:
    payload = hashlib.sha256(b"seed").digest() * (20 * 1024 * 1024 // 32)
    encoded = base64.encodebytes(payload).replace(b"\n", b"\r\n")
    raw = (
        b"From: a@example.com\r\nMessage-ID: <big@example.com>\r\nContent-Type: multipart/mixed; boundary=xyz\r\n\r\n"
        b"--xyz\r\nContent-Type: text/plain\r\n\r\nSee attached.\r\n--xyz\r\nContent-Type: application/octet-stream\r\n"
        b'Content-Disposition: attachment; filename="big.bin"\r\nContent-Transfer-Encoding: base64\r\n\r\n'
        + encoded
        + b"--xyz--\r\n"
    )
    parsed = parse(raw)
    assert parsed.email["attachments"][0]["size"] == 20 * 1024 * 1024
    assert parsed.attachment_data[0] == payload
    assert parsed.email["content"]["text"] == "See attached."
    with pytest.raises(InputTooLargeError):
        parse(raw, max_body_bytes=len(raw) - 1)
    assert parse(raw, max_body_bytes=None).email["messageId"] == "big@example.com"


def test_input_too_large_is_an_invalid_email_error() -> None:
    with pytest.raises(InvalidEmailError):
        parse_email(b"x" * 11, max_body_bytes=10)
    with pytest.raises(TypeError):
        parse_email("not bytes")  # type: ignore[arg-type]


def test_deep_nesting_does_not_crash() -> None:
    depth = 400
    parts = [b"From: a@example.com\r\nContent-Type: multipart/mixed; boundary=b0\r\n\r\n"]
    for level in range(1, depth):
        parts.append(f"--b{level - 1}\r\nContent-Type: multipart/mixed; boundary=b{level}\r\n\r\n".encode())
    parts.append(f"--b{depth - 1}\r\nContent-Type: text/plain\r\n\r\ndeep\r\n".encode())
    parsed = parse(b"".join(parts))
    assert parsed.email["messageId"].startswith("generated-")
    assert parsed.defects


@pytest.mark.parametrize(
    "value",
    [
        "\u00b9",
        "Mon, \u00b23 Nov 2026 10:00:00 +0000",
        "Mon, 03 Nov 2026 1\u00b9:00:00 +0000",
        "\u0662\u0660\u0662\u0666-01-01",
    ],
)
def test_non_ascii_digits_are_not_dates(value: str) -> None:
    # found by the hypothesis suite: str.isdigit() accepts superscripts, which int() refuses
    assert parse_date(value).date is None and parse_date(value).timestamp is None
