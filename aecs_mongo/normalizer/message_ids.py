"""Message-IDs and ``threadId`` (AECS-1 §4.1.1, §5).

Decisions where the spec leaves room (documented for the other implementations):

* A header value is trimmed and its RFC 5322 comments are dropped (``<a@b> (added by
  relay)``); when it holds an angle-bracketed token, the first such token is the Message-ID,
  without the whitespace the obsolete syntax allows inside it; otherwise the trimmed value
  is used as given.
* ``References`` is split into bracketed tokens and, between them, bare words separated by
  whitespace or commas; comments are dropped. Every entry is kept in ``thread.references``,
  earliest first, as written (brackets and whitespace stripped, as for Message-ID) -
  including entries that are not valid Message-IDs. Invalid entries only take no part in
  threading (§5.2 rule 1 skips them). Only the first ``References`` header is read.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Iterable

from .dates import parse_date

__all__ = [
    "compute_thread_id",
    "fallback_thread_id",
    "generated_message_id",
    "is_valid_message_id",
    "normalize_message_id",
    "parse_references",
]

logger = logging.getLogger("aecs_mongo.normalizer")

_BRACKETED_RE = re.compile(r"<([^<>]*)>")
_COMMENT_RE = re.compile(r"\([^()<>]*\)")
_SPLIT_RE = re.compile(r"[\s,]+")
_WS_RE = re.compile(r"\s+")


def normalize_message_id(value: str | None) -> str | None:
    """Message-ID header value -> id without angle brackets, comments or whitespace.

    Returns ``None`` for an absent or empty value. RFC 5322 comments are dropped, and so is
    whitespace between the brackets (the obsolete syntax allows CFWS around the dots and the
    ``@``: ``<1234 @ local(blah) .machine .example>`` is ``1234@local.machine.example``),
    unless the id holds a quoted string. The result is not checked for validity; see
    :func:`is_valid_message_id`.
    """
    if value is None:
        return None
    text = _strip_comments(value).strip()
    if not text:
        return None
    match = _BRACKETED_RE.search(text)
    if match is not None:
        return _id_without_cfws(match[1]) or None
    if text.startswith("<"):
        text = text[1:].strip()  # an unclosed bracket
    return text or None


def _strip_comments(text: str) -> str:
    """``text`` without RFC 5322 comments (nested ones up to three levels)."""
    if "(" not in text:
        return text
    for _ in range(3):
        stripped = _COMMENT_RE.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    return text


def _id_without_cfws(inner: str) -> str:
    """The text between a msg-id's brackets without its folding whitespace."""
    inner = inner.strip()
    if '"' in inner or not _WS_RE.search(inner):
        return inner
    return _WS_RE.sub("", inner)


def is_valid_message_id(value: str | None) -> bool:
    """AECS-1 §5.1: after trimming and stripping one pair of brackets, exactly one ``@``
    with a non-empty part on each side."""
    if value is None:
        return False
    text = value.strip()
    if len(text) >= 2 and text[0] == "<" and text[-1] == ">":
        text = text[1:-1].strip()
    if text.count("@") != 1:
        return False
    local, _, domain = text.partition("@")
    return bool(local) and bool(domain)


def parse_references(value: str | Iterable[str] | None) -> list[str]:
    """``References`` header value(s) -> ids, earliest first, brackets stripped, invalid kept."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in values:
        text = _strip_comments(item)
        position = 0
        for match in _BRACKETED_RE.finditer(text):
            out.extend(word for word in _SPLIT_RE.split(text[position : match.start()]) if word)
            inner = _id_without_cfws(match[1])
            if inner:
                out.append(inner)
            position = match.end()
        tail = text[position:]
        out.extend(word.lstrip("<") for word in _SPLIT_RE.split(tail) if word.lstrip("<"))
    return out


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


def fallback_thread_id(from_email: str | None, subject: str | None, date: str | None) -> str:
    """AECS-1 §5.2 rule 4 with the §5.4 encoding.

    ``sha256(from_email ":" subject_lowercased_trimmed ":" date_utc_iso8601)`` as lowercase
    hex, each part NFC-normalized, missing parts contributing the empty string. ``date`` may
    be a raw ``Date`` value or an already normalized one; it is normalized with
    :func:`parse_date` either way.
    """
    from_part = _nfc((from_email or "").strip().lower())
    subject_part = _nfc((subject or "").lower().strip())
    date_part = _nfc(parse_date(date).date or "")
    basis = f"{from_part}:{subject_part}:{date_part}"
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def compute_thread_id(
    *,
    message_id: str | None,
    in_reply_to: str | None,
    references: str | Iterable[str] | None,
    from_email: str | None,
    subject: str | None,
    date: str | None,
) -> str:
    """``threadId`` by AECS-1 §5.2 rules 1-4.

    Values may carry brackets and whitespace (they are normalized first). ``references`` is
    the header value (tokenized with :func:`parse_references`) or a list of entries,
    earliest first, each normalized with :func:`normalize_message_id`. Logs at DEBUG on
    ``aecs_mongo.normalizer`` when the fallback hash (rule 4) is used: real mail without a
    valid Message-ID is common, nothing a user should act on.
    """
    entries = (
        parse_references(references)
        if references is None or isinstance(references, str)
        else [normalize_message_id(entry) for entry in references]
    )
    for reference in entries:
        if reference is not None and is_valid_message_id(reference):
            return reference
    for candidate in (in_reply_to, message_id):
        normalized = normalize_message_id(candidate)
        if normalized is not None and is_valid_message_id(normalized):
            return normalized
    thread_id = fallback_thread_id(from_email, subject, date)
    logger.debug(
        "no valid Message-ID in References, In-Reply-To or Message-ID; threadId is the AECS-1 fallback hash %s",
        thread_id,
    )
    return thread_id


def generated_message_id(raw: bytes) -> str:
    """AECS-1 §4.1.1 synthetic id: ``generated-<first 32 hex of sha256(original octets)>@aecs.local``."""
    return f"generated-{hashlib.sha256(raw).hexdigest()[:32]}@aecs.local"
