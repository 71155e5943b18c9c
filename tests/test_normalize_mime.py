"""The MIME and body side of the normalizer on the patterns real mail shows.

Each test builds a small message for the pattern it checks: transfer encodings written the
way some mailers write them, charsets with vendor extensions or a damaged character,
``message/*`` parts measured on their original octets, and forwarded messages shown inline.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aecs_mongo.normalizer.charsets import decode_bytes
from aecs_mongo.pure.transfer_encoding import decode_base64_lenient

from .helpers.normalize import parse


def lines(*items: str | bytes, sep: bytes = b"\r\n") -> bytes:
    return sep.join(item.encode("utf-8") if isinstance(item, str) else item for item in items)


def multipart(*parts: bytes, boundary: str = "b", sep: bytes = b"\r\n", kind: str = "mixed", extra: str = "") -> bytes:
    head = lines(
        "From: a@example.com",
        "Message-ID: <m@example.com>",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/{kind}; boundary="{boundary}"{extra}',
        "",
        "",
        sep=sep,
    )
    body = b"".join(f"--{boundary}".encode() + sep + part + sep for part in parts)
    return head + body + f"--{boundary}--".encode() + sep


# --- cause 4: ISO-2022-JP with vendor extensions ------------------------------------------

# "テスト" in standard JIS X 0208, then NEC row 13: 0x2D62 "№" and 0x2D21 "①".
ISO2022JP_NEC = b"\x1b$B%F%9%H-b-!\x1b(B ok"


def test_iso2022jp_with_nec_extensions_decodes_in_body_and_subject() -> None:
    word = base64.b64encode(ISO2022JP_NEC).decode()
    raw = lines(
        "From: a@example.com",
        f"Subject: =?ISO-2022-JP?B?{word}?=",
        "Content-Type: text/plain; charset=ISO-2022-JP",
        "",
        ISO2022JP_NEC,
        "",
    )
    parsed = parse(raw)
    assert parsed.email["content"]["text"] == "テスト№① ok"
    assert parsed.email["metadata"]["subject"] == "テスト№① ok"
    assert "\x1b" not in parsed.email["content"]["raw"]


def test_iso2022jp_standard_text_is_unchanged_and_damage_never_shows_escapes() -> None:
    standard = "こんにちは、世界".encode("iso2022_jp")
    assert decode_bytes(standard, "iso-2022-jp") == "こんにちは、世界"
    defects: list[str] = []
    # an unknown escape and a lone byte in two-byte mode: replaced, never shown raw
    damaged = decode_bytes(b"a\x1b$Z b \x1b$B%F%\x1b(B c", "cp50220", defects)
    assert "\x1b" not in damaged
    assert damaged.startswith("a") and damaged.endswith(" c") and "テ" in damaged
    assert defects


# --- cause 10: almost valid UTF-8 ---------------------------------------------------------

ALMOST_UTF8 = "Grüße aus Köln, schöne Tage – bis bald ".encode() + "€".encode()[:2]


@pytest.mark.parametrize("charset_param", ["", "; charset=us-ascii", "; charset=utf-8"])
def test_almost_valid_utf8_is_utf8_with_one_replacement(charset_param: str) -> None:
    raw = lines("From: a@example.com", f"Content-Type: text/plain{charset_param}", "", ALMOST_UTF8, "")
    parsed = parse(raw)
    assert parsed.email["content"]["text"] == "Grüße aus Köln, schöne Tage – bis bald \ufffd"
    assert any("invalid utf-8" in defect for defect in parsed.defects)


def test_windows_1252_text_is_not_mistaken_for_damaged_utf8() -> None:
    text = "Café crème brûlée à la carte – naïve"
    assert decode_bytes(text.encode("cp1252"), None) == text
    # one accidental valid UTF-8 pair ("Ã©") among several invalid bytes is not enough
    assert decode_bytes("Ã© is not é nor è".encode("cp1252"), None) == "Ã© is not é nor è"


def test_damaged_utf8_cyrillic_is_not_sent_to_detection() -> None:
    text = "Привет, как дела? Всё хорошо, спасибо."
    assert decode_bytes(text.encode() + "ж".encode()[:1], "utf-8") == text + "\ufffd"


# --- cause 11: quoted-pairs in parameter values ---------------------------------------------


def test_quoted_pairs_in_quoted_filenames_are_unescaped() -> None:
    raw = multipart(
        lines("Content-Type: text/plain", "", "Body."),
        lines(
            "Content-Type: image/png",
            'Content-Disposition: attachment; filename="C:\\TEMP\\x.png"',
            "Content-Transfer-Encoding: base64",
            "",
            "iVBORw0KGgo=",
        ),
        lines('Content-Type: application/octet-stream; name="say \\"hi\\".bin"', "", "x"),
        lines("Content-Type: application/octet-stream; name=C:\\plain.bin", "", "y"),
    )
    names = [attachment["filename"] for attachment in parse(raw).email["attachments"]]
    assert names == ["C:TEMPx.png", 'say "hi".bin', "C:\\plain.bin"]


# --- cause 12: encoded forwarded messages ---------------------------------------------------

INNER = lines(
    "From: Bob <bob@example.org>",
    "To: Carol <carol@example.org>",
    "Subject: Quarterly numbers",
    "Date: Mon, 2 Mar 2026 10:00:00 +0000",
    "Message-ID: <inner@example.org>",
    "Content-Type: multipart/mixed; boundary=in",
    "",
    "--in",
    "Content-Type: text/plain; charset=utf-8",
    "",
    "The numbers are attached.",
    "--in",
    "Content-Type: text/csv",
    'Content-Disposition: attachment; filename="q1.csv"',
    "",
    "a,b",
    "1,2",
    "--in--",
    "",
)


def encoded_forward(encoding: str, disposition: str | None) -> bytes:
    if encoding == "base64":
        body = base64.encodebytes(INNER).replace(b"\n", b"\r\n").rstrip(b"\r\n")
    else:
        body = INNER.replace(b"=", b"=3D")
    headers = ["Content-Type: message/rfc822", f"Content-Transfer-Encoding: {encoding}"]
    if disposition:
        headers.append(f"Content-Disposition: {disposition}")
    return multipart(lines("Content-Type: text/plain", "", "See below."), lines(*headers, "", body))


@pytest.mark.parametrize("encoding", ["base64", "quoted-printable"])
def test_encoded_forwarded_attachment_is_decoded_to_its_original_bytes(encoding: str) -> None:
    parsed = parse(encoded_forward(encoding, 'attachment; filename="fwd.eml"'))
    attachments = parsed.email["attachments"]
    assert [(a["contentType"], a["filename"], a["size"]) for a in attachments] == [
        ("message/rfc822", "fwd.eml", len(INNER))
    ]
    assert parsed.attachment_data == [INNER]
    assert parsed.email["content"]["text"] == "See below."


@pytest.mark.parametrize("encoding", ["base64", "quoted-printable"])
def test_encoded_forwarded_message_shown_inline_is_parsed(encoding: str, validator: Any) -> None:
    parsed = parse(encoded_forward(encoding, None))
    email = parsed.email
    assert not list(validator.iter_errors(email))
    assert "The numbers are attached." in email["content"]["text"]
    assert [(a["id"], a["filename"], a["contentType"]) for a in email["attachments"]] == [
        ("m@example.com:0", "q1.csv", "text/csv")
    ]
    assert parsed.attachment_data == [b"a,b\r\n1,2"]


# --- cause 13: base64 with a leftover character ---------------------------------------------


def test_base64_leftover_character_is_dropped_and_junk_skipped() -> None:
    assert decode_base64_lenient(b"QUJD\r\nR\r\n") == (b"ABC", False)
    assert decode_base64_lenient(b"QU*JD R") == (b"ABC", False)
    assert decode_base64_lenient(b"QQ==\r\nQg==\r\n") == (b"AB", True)  # padding on every line
    assert decode_base64_lenient(b"QUJDRA") == (b"ABCD", True)  # padding missing
    assert decode_base64_lenient(b"QUJD\r\nRA==\r\n") == (b"ABCD", True)


def test_base64_body_one_longer_than_a_multiple_of_four_is_decoded() -> None:
    encoded = base64.b64encode("Grüße aus Köln.".encode()).decode()
    raw = lines(
        "From: a@example.com",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: base64",
        "",
        encoded + "Q",
        "",
    )
    parsed = parse(raw)
    assert parsed.email["content"]["text"] == "Grüße aus Köln."
    assert any("base64" in defect for defect in parsed.defects)


# --- cause 14: message/* sizes are of the original part bytes --------------------------------


def test_message_parts_keep_their_original_bytes() -> None:
    status = b"Reporting-MTA: dns; mx.example.com\n\n\nFinal-Recipient: rfc822; x@example.com\nAction: failed\n"
    partial = b"From: a@example.com\nSubject: part 1\n\nfirst half"
    attached = (
        b"From nobody Mon Mar  2 10:00:00 2026\n"
        b"From: b@example.org\n"
        b"Content-Type: multipart/mixed; boundary=never\n"
        b"\n"
        b"--never\n"
        b"Content-Type: text/plain\n"
        b"\n"
        b"unterminated"
    )
    raw = multipart(
        lines("Content-Type: text/plain", "", "Body.", sep=b"\n"),
        lines("Content-Type: message/delivery-status", "", status.rstrip(b"\n"), sep=b"\n"),
        lines("Content-Type: message/partial; id=x; number=1; total=2", "", partial, sep=b"\n"),
        lines("Content-Type: message/rfc822", "Content-Disposition: attachment", "", attached, sep=b"\n"),
        sep=b"\n",
    )
    parsed = parse(raw)
    assert [a["contentType"] for a in parsed.email["attachments"]] == [
        "message/delivery-status",
        "message/partial",
        "message/rfc822",
    ]
    assert parsed.attachment_data == [status.rstrip(b"\n"), partial, attached]
    assert [a["size"] for a in parsed.email["attachments"]] == [len(d) for d in parsed.attachment_data]


# --- cause 16: a transfer encoding with blanks or capitals ----------------------------------


@pytest.mark.parametrize("value", ["base64 ", " BASE64", "Base64\t", "base64 (comment)", "(comment) base64"])
def test_transfer_encoding_with_trailing_blank_is_recognized(value: str) -> None:
    raw = multipart(
        lines(
            "Content-Type: text/plain; charset=utf-8",
            f"Content-Transfer-Encoding: {value}",
            "",
            base64.b64encode(b"Hallo Welt.").decode(),
        ),
        lines(
            "Content-Type: application/octet-stream",
            f"Content-Transfer-Encoding: {value}",
            "",
            base64.b64encode(b"\x00\x01\x02").decode(),
        ),
    )
    parsed = parse(raw)
    assert parsed.email["content"]["text"] == "Hallo Welt."
    assert parsed.attachment_data == [b"\x00\x01\x02"]


# --- forwarded messages shown inline (DESIGN.md, "Normalizer: where the spec is silent") ------


def forwarded(disposition: str | None = None, kind: str = "mixed", report: bool = False) -> bytes:
    headers = ["Content-Type: message/rfc822"]
    if disposition:
        headers.append(f"Content-Disposition: {disposition}")
    parts = [
        lines("Content-Type: text/plain", "", "Have a look at this."),
        lines(*headers, "", INNER.rstrip(b"\r\n")),
        lines("Content-Type: application/pdf", 'Content-Disposition: attachment; filename="after.pdf"', "", "%PDF"),
    ]
    if report:
        parts.insert(1, lines("Content-Type: message/delivery-status", "", "Action: failed"))
    return multipart(*parts, kind=kind, extra="; report-type=delivery-status" if report else "")


def test_forwarded_message_is_parsed_in_place(validator: Any) -> None:
    parsed = parse(forwarded())
    email = parsed.email
    assert not list(validator.iter_errors(email))
    text = email["content"]["text"]
    assert text.startswith("Have a look at this.\n\n---------- Forwarded message ----------\n")
    assert "From: Bob <bob@example.org>\nSubject: Quarterly numbers\n" in text
    assert text.endswith("To: Carol <carol@example.org>\n\nThe numbers are attached.")
    # its attachments join the list in MIME order, between the parts around it
    assert [(a["id"], a["filename"]) for a in email["attachments"]] == [
        ("m@example.com:0", "q1.csv"),
        ("m@example.com:1", "after.pdf"),
    ]
    # an agent reads the forwarded text; the header block is one summary line
    for_ai = email["content"]["forAI"]
    assert "The numbers are attached." in for_ai
    assert "[Forwarded message] From: Bob <bob@example.org>; Subject: Quarterly numbers" in for_ai
    assert "The numbers are attached." in email["content"]["clean"]


def test_forwarded_html_joins_the_html_body() -> None:
    inner = lines(
        "From: bob@example.org",
        "Subject: styled",
        "Content-Type: text/html; charset=utf-8",
        "",
        "<p>Inner <b>HTML</b></p>",
    )
    raw = multipart(
        lines("Content-Type: text/html", "", "<p>Outer</p>"),
        lines("Content-Type: message/rfc822", "", inner),
    )
    content = parse(raw).email["content"]
    assert content["html"].index("<p>Outer</p>") < content["html"].index("<p>Inner <b>HTML</b></p>")
    assert "Forwarded message" in content["html"]
    assert content["text"].startswith("Outer\n\n---------- Forwarded message ----------\nFrom: bob@example.org")
    assert content["text"].endswith("Inner HTML")


@pytest.mark.parametrize(
    ("disposition", "kind", "report"),
    [("attachment", "mixed", False), ("attachment; filename=x.eml", "mixed", False), (None, "report", True)],
)
def test_forwarded_message_as_attachment_or_report_evidence_stays_one_attachment(
    disposition: str | None, kind: str, report: bool
) -> None:
    parsed = parse(forwarded(disposition, kind, report))
    types = [a["contentType"] for a in parsed.email["attachments"]]
    expected = ["message/rfc822", "application/pdf"]
    assert types == (["message/delivery-status", *expected] if report else expected)
    assert INNER.rstrip(b"\r\n") in parsed.attachment_data
    assert "Quarterly numbers" not in parsed.email["content"]["text"]


def test_forwarded_messages_nested_deeper_than_the_limit_become_attachments() -> None:
    raw = lines("From: x@example.com", "Subject: level 0", "", "deepest")
    for level in range(1, 13):
        raw = lines(f"From: x{level}@example.com", f"Subject: level {level}", "Content-Type: message/rfc822", "", raw)
    parsed = parse(raw)
    text = parsed.email["content"]["text"]
    assert text.count("---------- Forwarded message ----------") == 10
    assert [a["contentType"] for a in parsed.email["attachments"]] == ["message/rfc822"]
    assert "deepest" not in text


# --- properties of the lenient decoders ------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.lists(st.sampled_from([b"\r\n", b" ", b"*", b"\t"]), max_size=6), st.randoms())
def test_lenient_base64_reads_standard_base64_through_blanks_and_junk(
    data: bytes, noise: list[bytes], rng: Any
) -> None:
    encoded = bytearray(base64.b64encode(data))
    for piece in noise:
        position = rng.randint(0, len(encoded))
        encoded[position:position] = piece
    assert decode_base64_lenient(bytes(encoded))[0] == data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=48).map(lambda tail: b"\x1b$B" + tail))
def test_iso2022jp_never_raises_and_never_shows_an_escape(data: bytes) -> None:
    assert "\x1b" not in decode_bytes(data, "iso-2022-jp")
