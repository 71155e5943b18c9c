"""Identity and lookup keys: the pure functions every tier and every query agree on.

A Message-ID can be 998 bytes of anything printable, so documents are keyed by a fixed-length
hash of it and scoped by mailbox. The query side uses these same functions, which
is what makes a lookup by ``<id@host>`` and by ``id@host`` find the same message.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from email.utils import getaddresses
from typing import Any

__all__ = [
    "LOOKUP_HEADERS",
    "PARTS_FOLDER",
    "SUBJECT_KEY_CHARS",
    "address_key",
    "address_query_key",
    "blob_prefix",
    "check_mailbox_id",
    "check_str",
    "doc_id",
    "list_id_key",
    "lookup_key",
    "lookup_keys",
    "message_key",
    "part_key",
    "part_sha",
    "strip_message_id",
    "subject_key",
    "thread_key",
]


def check_str(value: object, name: str) -> str:
    """Return ``value`` if it is a ``str``; a ``TypeError`` otherwise (never an operator)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def check_mailbox_id(mailbox_id: object) -> str:
    """A mailbox id is a non-empty string without NUL; it prefixes every ``_id``."""
    check_str(mailbox_id, "mailbox_id")
    assert isinstance(mailbox_id, str)
    if not mailbox_id or "\x00" in mailbox_id:
        raise ValueError("mailbox_id must be a non-empty string without NUL")
    return mailbox_id


def strip_message_id(value: object, name: str = "message_id") -> str:
    """``<id@host>`` or `` id@host `` -> ``id@host`` (AECS form: no brackets, no whitespace)."""
    text = check_str(value, name).strip()
    if len(text) >= 2 and text.startswith("<") and text.endswith(">"):
        text = text[1:-1].strip()
    return text


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def message_key(message_id: str) -> str:
    """Lowercase hex SHA-256 of the (stripped) Message-ID: the 64-character message key."""
    return _sha256_hex(strip_message_id(message_id))


def thread_key(thread_id: str) -> str:
    """Lowercase hex SHA-256 of the threadId, used exactly as given (it is already canonical)."""
    return _sha256_hex(check_str(thread_id, "thread_id"))


def doc_id(mailbox_id: str, key: str) -> str:
    """The ``_id`` of every per-message and per-thread document: ``<mailboxId>:<key>``."""
    return f"{mailbox_id}:{key}"


def blob_prefix(mailbox_id: str, message_key_: str) -> str:
    """GridFS prefix of one message's blobs; hashing the mailbox keeps the path safe."""
    return f"aecs/{_sha256_hex(mailbox_id)}/{message_key_}/"


#: the folder of a mailbox's blob root that holds its parts (no message key is this word)
PARTS_FOLDER = "parts"


def part_key(mailbox_id: str, sha256: str) -> str:
    """The blob key of a part kept once per mailbox (``raw_parts.py``): ``aecs/<mailbox>/parts/<sha256>``."""
    return blob_prefix(mailbox_id, PARTS_FOLDER) + sha256


def part_sha(key: str) -> str | None:
    """The SHA-256 a part's blob key names (``part_key``); None for any other blob key."""
    folder, _, sha = key.rpartition("/")
    return sha if folder.endswith("/" + PARTS_FOLDER) else None


_REPLY_PREFIX = re.compile(
    r"^\s*(?:re|fwd?|aw|sv|vs|wg|antw|tr|rif|odp|enc|vb|res|ynt|回复|转发|答复)"
    r"\s*(?:\[\d+\]|\(\d+\)|\^\d+)?\s*[:：]\s*",
    re.IGNORECASE,
)
_WHITESPACE = re.compile(r"\s+")


#: A subject key is an index key: the first this many characters (a real subject is far shorter).
SUBJECT_KEY_CHARS = 1000


def subject_key(subject: str | None) -> str:
    """The key of ``find``'s Subject lookup: lowercase, reply/forward prefixes stripped repeatedly,
    spaces collapsed.

    The same function normalizes the query, so "Fwd: Re: Live Wire" and "live wire" agree; both
    sides are cut to ``SUBJECT_KEY_CHARS``, so a query for a subject longer than that still matches.
    """
    if subject is None:
        return ""
    text = unicodedata.normalize("NFC", check_str(subject, "subject")).lower()
    text = _WHITESPACE.sub(" ", text).strip()
    while True:
        stripped = _REPLY_PREFIX.sub("", text, count=1)
        if stripped == text:
            return text[:SUBJECT_KEY_CHARS]
        text = stripped.strip()


def address_key(address: str) -> str:
    """An address as the indexes store it: trimmed and lowercased."""
    return check_str(address, "address").strip().lower()


def address_query_key(value: str) -> str:
    """A From/To lookup value as ``find`` reads it: display name and comments dropped, lowercased.

    ``"Joe <Joe@Example.com> (work)"`` and ``joe@example.com`` give the same key.
    """
    text = check_str(value, "address")
    for _, addr in getaddresses([text]):
        if addr:
            return address_key(addr)
    return address_key(text)


def list_id_key(value: str | None) -> str | None:
    """List-Id as ``find`` keys it: the part in the last angle brackets, lowercased, no whitespace.

    ``Debian <debian-announce.lists.debian.org>`` -> ``debian-announce.lists.debian.org``.
    """
    if value is None:
        return None
    text = check_str(value, "list_id")
    start = text.rfind("<")
    if start >= 0:
        end = text.find(">", start)
        text = text[start + 1 : end if end >= 0 else len(text)]
    text = _WHITESPACE.sub("", text).lower()
    return text or None


#: The headers of the POP3 pipeline's lookups that live in the ``lookups`` array, by their key
#: prefix (References keep their own field and index, Date is the ``ts`` range).
LOOKUP_HEADERS = ("subject", "from", "to", "in-reply-to", "list-id")


def lookup_key(header: str, value: str) -> str:
    """One entry of ``lookups``: ``"<header>:<normalized value>"`` (``subject:live wire``).

    ``value`` is already in the stored form (``subject_key``, ``address_key``, a Message-ID
    without brackets, ``list_id_key``); the prefix keeps the headers apart in one index.
    """
    return f"{header}:{value}"


def lookup_keys(message: Mapping[str, Any]) -> list[str]:
    """The ``lookups`` array of a ``messages`` document, from its stored lookup fields:
    ``subject:<subjectKey>`` always (an empty key for no subject, as the subject lookup of ""
    finds); ``from:<from.email>`` where there is a sender; ``to:<address>`` per To and Cc
    address (``recipients``, lowercased, first occurrence); ``in-reply-to:<inReplyTo>`` and
    ``list-id:<listId>`` where set. Each equals what ``find()`` looked up in those fields, so a
    lookup by ``lookups`` returns exactly the messages the field equality did."""
    keys = [lookup_key("subject", str(message.get("subjectKey") or ""))]
    sender = message.get("from")
    if isinstance(sender, Mapping) and isinstance(sender.get("email"), str):
        keys.append(lookup_key("from", sender["email"]))
    keys += [lookup_key("to", r) for r in message.get("recipients") or () if isinstance(r, str)]
    for header, name in (("in-reply-to", "inReplyTo"), ("list-id", "listId")):
        value = message.get(name)
        if isinstance(value, str):
            keys.append(lookup_key(header, value))
    return list(dict.fromkeys(keys))
