"""Header values: unfolding, RFC 2047 encoded-words, addresses, Message-IDs, List-Id, subject keys.

The MIME parser runs with the ``compat32`` policy, so header values reach this module as the
raw text of the message (non-ASCII octets carried as surrogate escapes). Everything here
turns them into clean Unicode without raising.
"""

from __future__ import annotations

import base64
import binascii
import re
from email.utils import getaddresses

from ..keys import list_id_key, subject_key
from .charsets import decode_bytes

__all__ = [
    "Address",
    "decode_header_value",
    "header_text",
    "normalize_list_id",
    "parse_addresses",
    "subject_key",
    "unfold",
]

Address = dict[str, "str | None"]

_FOLD_RE = re.compile(r"\r?\n|\r")
_ENCODED_WORD_RE = re.compile(r"=\?([^?\s]+)\?([BbQq])\?([^?]*)\?=")
_QP_HEX_RE = re.compile(rb"=([0-9A-Fa-f]{2})")
_WS_RE = re.compile(r"\s+")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def unfold(value: str) -> str:
    """RFC 5322 §2.2.3 unfolding: drop the line breaks, keep the whitespace after them."""
    if "\n" in value or "\r" in value:
        value = _FOLD_RE.sub("", value)
    return value


def _surrogates_to_text(value: str, hint_charset: str | None, defects: list[str] | None) -> str:
    """Recover raw 8-bit header octets (RFC 6532 UTF-8, or legacy bytes) as text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return value
    raw = value.encode("utf-8", errors="surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if hint_charset:
        text = decode_bytes(raw, hint_charset, None)
        if "\ufffd" not in text:
            if defects is not None:
                defects.append(f"header: 8-bit octets read as {hint_charset[:40]!r}")
            return text
    return decode_bytes(raw, None, defects, where="header")


def _decode_word_bytes(encoding: str, payload: str) -> bytes:
    if encoding in "Bb":
        data = payload.strip().encode("ascii", errors="ignore")
        data = re.sub(rb"[^A-Za-z0-9+/]", b"", data)
        data += b"=" * (-len(data) % 4)
        try:
            return base64.b64decode(data)
        except (binascii.Error, ValueError):
            return b""
    # A raw 8-bit octet inside the word (a surrogate escape here) is kept, to be decoded in
    # the word's declared charset like the =XX ones: dropping it turned "Fr\xf6sche" into "Frsche".
    raw = payload.replace("_", " ").encode("utf-8", errors="surrogateescape")
    return _QP_HEX_RE.sub(lambda match: bytes((int(match[1], 16),)), raw)


def decode_header_value(value: str, *, hint_charset: str | None = None, defects: list[str] | None = None) -> str:
    """Unfold and decode RFC 2047 encoded-words; keep the whitespace around plain text.

    Whitespace between two encoded-words is dropped (RFC 2047 §6.2); whitespace between an
    encoded-word and ordinary text is kept. Adjacent encoded-words in the same charset are
    joined before decoding, so a multi-byte character split across two words survives.
    """
    value = unfold(value)
    if "=?" not in value:
        return _clean(_surrogates_to_text(value, hint_charset, defects))
    pieces: list[str] = []
    pending_charset: str | None = None
    pending: list[bytes] = []
    position = 0

    def flush() -> None:
        nonlocal pending_charset
        if pending:
            pieces.append(decode_bytes(b"".join(pending), pending_charset, defects, where="encoded-word"))
            pending.clear()
        pending_charset = None

    for match in _ENCODED_WORD_RE.finditer(value):
        between = value[position : match.start()]
        charset = match[1].split("*", 1)[0].lower()
        if between and not (pending and between.isspace()):
            flush()
            pieces.append(_surrogates_to_text(between, hint_charset, defects))
        elif pending and charset != pending_charset:
            flush()
        pending_charset = charset
        pending.append(_decode_word_bytes(match[2], match[3]))
        position = match.end()
    flush()
    pieces.append(_surrogates_to_text(value[position:], hint_charset, defects))
    return _clean("".join(pieces))


def _clean(text: str) -> str:
    if _CONTROL_RE.search(text):
        text = _CONTROL_RE.sub("", text)
    return text


def header_text(value: str | None, *, hint_charset: str | None = None, defects: list[str] | None = None) -> str | None:
    """A decoded, trimmed header value; ``None`` when absent."""
    if value is None:
        return None
    return decode_header_value(value, hint_charset=hint_charset, defects=defects).strip()


def parse_addresses(
    values: list[str], *, hint_charset: str | None = None, defects: list[str] | None = None
) -> list[Address]:
    """Addresses of one or more address-list header values, in order.

    ``email`` is the addr-spec, trimmed and lowercased (as the reference implementation
    does); ``name`` is the RFC 2047-decoded display name, ``None`` when there is none.
    Entries without a usable addr-spec (no ``@``, or shorter than three characters, as
    the schema requires) are left out and noted in ``defects``; group names are dropped and
    their members kept.
    """
    out: list[Address] = []
    if not values:
        return out
    unfolded = [unfold(value) for value in values]
    try:
        pairs = getaddresses(unfolded)
    except Exception:  # e.g. RecursionError on pathological nesting: parse piece by piece
        if defects is not None:
            defects.append("address: header not parseable as a whole; read comma by comma")
        pairs = []
        for piece in ",".join(unfolded).split(","):
            try:
                pairs.extend(getaddresses([piece]))
            except Exception:
                continue
    for name, addr in pairs:
        email = _surrogates_to_text(addr, hint_charset, defects).strip().lower()
        email = _CONTROL_RE.sub("", _WS_RE.sub("", email))
        if "@" not in email or len(email) < 3 or email.startswith("@") or email.endswith("@"):
            if (email or name.strip()) and defects is not None:
                defects.append(f"address: no usable addr-spec in {(name or addr)[:60]!r}")
            continue
        display = decode_header_value(name, hint_charset=hint_charset, defects=defects).strip()
        if len(display) >= 2 and display[0] == display[-1] and display[0] in "\"'":
            display = display[1:-1].strip()
        out.append({"name": display or None, "email": email})
    return out


def normalize_list_id(value: str | None) -> str | None:
    """``Debian <debian-announce.lists.debian.org>`` -> ``debian-announce.lists.debian.org``."""
    if value is None:
        return None
    return list_id_key(_surrogates_to_text(unfold(value), None, None))
