"""A MIME part's body from its Content-Transfer-Encoding: one decoder for the normalizer and
for attachments read back from the stored encoded bytes. Pure.

The store keeps each attachment once, as the encoded octets of the raw message; its decoded
bytes are derived by :func:`decode_body`, which is the very function the normalizer decoded
them with at ingest, so what ``get_attachment`` returns is what the message's
``attachments[i].size`` was measured on.
"""

from __future__ import annotations

import binascii
import re
from email.message import Message

__all__ = ["UUENCODINGS", "decode_base64_lenient", "decode_body", "encoding_token"]

UUENCODINGS = frozenset({"x-uuencode", "uuencode", "uue", "x-uue"})
_BASE64_JUNK = bytes(set(range(256)) - set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="))
_PADDING_RUN_RE = re.compile(rb"=+")
_COMMENT_RE = re.compile(r"\([^()]*\)")


def encoding_token(value: object) -> str:
    """A Content-Transfer-Encoding's first token, lowercased, comments removed (``"base64 "``
    is base64); "" where there is none."""
    if not isinstance(value, str):
        return ""
    if "(" in value:
        value = _COMMENT_RE.sub(" ", value)
    tokens = value.strip().lower().split(None, 1)
    return tokens[0].strip("\"';") if tokens else ""


def decode_base64_lenient(data: bytes) -> tuple[bytes, bool]:
    """Base64 as RFC 2045 §6.8 reads it: ``(decoded, clean)``.

    Characters outside the alphabet are skipped; ``=`` ends a unit (some mailers pad every
    line); a unit's last character that cannot form an octet is dropped. ``clean`` is False
    when something had to be skipped or dropped beyond line breaks and blanks.
    """
    padding = data.find(b"=")
    if padding < 0 or not data[padding:].strip(b"= \t\r\n"):
        try:
            return binascii.a2b_base64(data), True
        except (binascii.Error, ValueError):
            pass
    alphabet_only = data.translate(None, _BASE64_JUNK)
    out: list[bytes] = []
    clean = True
    for unit in _PADDING_RUN_RE.split(alphabet_only):
        leftover = len(unit) % 4
        if leftover == 1:
            unit = unit[:-1]
            clean = False
        elif leftover:
            unit += b"=" * (4 - leftover)
        if unit:
            out.append(binascii.a2b_base64(unit))
    return b"".join(out), clean


def decode_body(encoded: bytes, encoding: str) -> tuple[bytes, str | None]:
    """``(decoded, defect)``: ``encoded`` (a part's body as the message holds it) decoded by
    its Content-Transfer-Encoding token (:func:`encoding_token`); never raises. ``defect``
    says what had to be read leniently, None when nothing was."""
    if encoding == "base64":
        data, clean = decode_base64_lenient(encoded)
        return data, None if clean else "malformed base64 read leniently"
    if encoding == "quoted-printable":
        return binascii.a2b_qp(encoded), None
    if encoding in UUENCODINGS:
        part = Message()
        part["Content-Transfer-Encoding"] = encoding
        part.set_payload(encoded.decode("ascii", errors="surrogateescape"))
        try:
            decoded = part.get_payload(decode=True)
        except Exception as exc:
            return encoded, f"payload not decodable ({type(exc).__name__})"
        return (decoded, None) if isinstance(decoded, bytes) else (encoded, None)
    return encoded, None
