"""One NormalizedEmail -> the documents and blobs ``store`` writes (``build_documents``).

The three tiers: ``messages`` (the hot row every list and search touches: display strings cut
to ``HOT_TEXT_CHARS``), ``bodies`` (the whole text and the address lists with names) and the
blobs (``raw.eml``, or ``raw.pack`` and its parts: the message with its large encoded bodies
kept once per mailbox, ``raw_parts.py``; ``body.html``; ``att/<idx>`` where an attachment's
bytes are not in the raw message; and ``body.json`` for a body too large for one document).
Only a ``messages`` document over MongoDB's 16 MiB is refused. ``derived_fields`` recomputes
the lookup fields from what a stored message holds, for ``reindex``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bson
from bson.int64 import Int64

from ...errors import DocumentTooLargeError, InvalidEmailError
from ..keys import (
    address_key,
    blob_prefix,
    doc_id,
    list_id_key,
    lookup_keys,
    message_key,
    part_key,
    part_sha,
    subject_key,
    thread_key,
)
from ..raw_parts import PACK_CONTENT_TYPE, RawLayout, assemble, split_raw
from .validation import (
    ATTACHMENT_FIELDS,
    CONTENT_FIELDS,
    METADATA_FIELDS,
    PROCESSING_FIELDS,
    THREAD_FIELDS,
    TOP_FIELDS,
    bson_datetime,
    date_to_iso,
    iso_to_datetime,
    raw_full_to_bytes,
    validate_email,
)

__all__ = [
    "BODY_SPILL_BYTES",
    "HOT_TEXT_CHARS",
    "MAX_DOCUMENT_BYTES",
    "Blob",
    "MessageDocuments",
    "build_documents",
    "derived_fields",
]

#: MongoDB's document limit (16 MiB): the one size the store refuses a message for.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: A ``bodies`` document larger than this moves its text to GridFS (``body.json``).
BODY_SPILL_BYTES = 12 * 1024 * 1024
#: Display strings in the hot row are cut to these many characters (so the hot row stays small); the
#: whole value is kept in ``bodies`` and comes back from ``get_message``. Address arrays and
#: references are never cut: the indexes answer from them.
HOT_TEXT_CHARS = {"subject": 1000, "name": 256, "filename": 512, "forAI": 32_000}
#: What moves to ``body.json`` when a body is too large: the text first, then the address lists.
_SPILL_TEXT = ("text", "clean", "raw", "forAI", "fullFilenames")
_SPILL_ADDRESSES = ("to", "cc", "bcc")


@dataclass(frozen=True)
class Blob:
    """One cold-tier object: ``key`` is its GridFS ``_id`` and filename."""

    key: str
    data: bytes
    content_type: str


@dataclass(frozen=True)
class MessageDocuments:
    """Everything ``store`` writes for one message, in write order: blobs, body, message."""

    message_id: str
    message_key: str
    thread_id: str
    thread_key: str
    blobs: tuple[Blob, ...]
    body: dict[str, Any]
    message: dict[str, Any]
    #: unknown non-``x_`` fields that were ignored (AECS-1 §10.6), as ``path.name``
    ignored: tuple[str, ...] = ()
    #: the whole raw message where its blobs do not hold it (a stored message read back);
    #: ``raw_message`` otherwise puts it together from them
    raw: bytes | None = None

    def raw_message(self) -> bytes | None:
        """The whole raw message: ``raw``, else the ``raw.eml`` blob, else the ``raw.pack`` blob
        with the parts beside it put back (not kept twice in the documents: they cross a process
        boundary from the parse workers); None for a message without raw bytes."""
        if self.raw is not None:
            return self.raw
        pack = None
        parts: dict[str, bytes] = {}
        for blob in self.blobs:
            name = blob.key.rpartition("/")[2]
            if name == "raw.eml":
                return blob.data
            if name == "raw.pack":
                pack = blob.data
            sha = part_sha(blob.key)
            if sha is not None:
                parts[sha] = blob.data
        return None if pack is None else assemble(pack, parts)


def _first_bad_string(value: Any, path: str) -> str | None:
    """The path of the first string BSON cannot encode (a lone surrogate), if any."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, Mapping):
        for key, inner in value.items():
            found = _first_bad_string(inner, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, inner in enumerate(value):
            found = _first_bad_string(inner, f"{path}[{i}]")
            if found:
                return found
    return None


def _encoded_size(doc: Mapping[str, Any], what: str) -> int:
    try:
        return len(bson.encode(doc))
    except (UnicodeEncodeError, bson.errors.InvalidStringData):
        bad = _first_bad_string(doc, "")
        raise InvalidEmailError(f"{what} field {bad} is not valid Unicode (a lone surrogate?)") from None
    except (bson.errors.InvalidDocument, OverflowError) as exc:
        raise InvalidEmailError(f"{what} cannot be stored as BSON: {exc}") from None


def _largest_field(doc: Mapping[str, Any]) -> tuple[str, int]:
    sizes = {key: len(bson.encode({"v": value})) for key, value in doc.items()}
    key = max(sizes, key=lambda k: sizes[k])
    return key, sizes[key]


def _address_keys(addresses: Sequence[Mapping[str, Any]]) -> list[str]:
    """Lowercased emails, first occurrence kept, order preserved."""
    return list(dict.fromkeys(address_key(a["email"]) for a in addresses))


def _ts(meta: Mapping[str, Any], processing: Mapping[str, Any], fallback: int | None = None) -> int:
    if meta["timestamp"] is not None:
        return int(meta["timestamp"])
    if meta["date"] is not None:
        return int(iso_to_datetime(meta["date"], "metadata.date").timestamp())
    if fallback is not None:
        return int(fallback)
    if processing["processedAt"] is not None:
        return int(iso_to_datetime(processing["processedAt"], "processing.processedAt").timestamp())
    return 0


def build_documents(
    email: Mapping[str, Any],
    *,
    mailbox_id: str,
    owner_addresses: frozenset[str] = frozenset(),
    raw_bytes: bytes | None = None,
    attachment_data: Sequence[bytes | None] | None = None,
    attachment_encoded: Sequence[tuple[bytes, str]] | None = None,
    whole_raw: bool = False,
    list_id: str | None = None,
    uidl: str | None = None,
    raw_from_full: bool = False,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    body_spill_bytes: int = BODY_SPILL_BYTES,
    fallback_ts: int | None = None,
) -> MessageDocuments:
    """Turn one NormalizedEmail into the documents and blobs ``store`` writes.

    ``fallback_ts``: the sort time of a message without a usable date (see the module
    docstring), before ``processedAt``.

    ``raw_bytes`` are the original octets (kept byte-exact as ``raw.eml``); without them a
    ``content.rawFull`` string is stored as its UTF-8 encoding. ``attachment_encoded``: each
    attachment's encoded body and transfer encoding as the raw message holds it (the
    normalizer's); its decoded bytes are then derived from the raw message, not stored again,
    and the large encoded bodies go to parts kept once per mailbox (``raw.pack``), unless
    ``whole_raw`` keeps ``raw.eml`` whole (for readers of the blob store itself). ``raw_from_full`` says that
    ``content.raw`` is what the normalizer derives from those bytes, so it is not stored.
    bcc is kept only when the sender is one of ``owner_addresses`` (a Bcc list is its sender's own).

    Hot-row policy: display strings are cut in ``messages`` (``HOT_TEXT_CHARS``) and kept whole
    in ``bodies``; a body too large moves to GridFS. The only message refused is one whose
    ``messages`` document would still pass MongoDB's 16 MiB limit (participants, references
    and ``x_`` fields are kept whole): ``DocumentTooLargeError``, nothing written.
    """
    ignored: list[str] = []
    em = validate_email(email, ignored)
    meta, content, thread, processing = em["metadata"], em["content"], em["thread"], em["processing"]
    mid, tid = em["messageId"], em["threadId"]
    mkey, tkey = message_key(mid), thread_key(tid)
    prefix = blob_prefix(mailbox_id, mkey)
    _id = doc_id(mailbox_id, mkey)

    sender = meta["from"]
    sender_email = address_key(sender["email"]) if sender else None
    keep_bcc = sender_email is not None and sender_email in owner_addresses
    bcc = meta["bcc"] if keep_bcc else []

    participants = _address_keys(([sender] if sender else []) + meta["to"] + meta["cc"] + bcc)

    blobs: list[Blob] = []
    blob_names: list[str] = []
    if raw_bytes is None and content["rawFull"] is not None:
        raw_bytes = raw_full_to_bytes(content["rawFull"])
    layout = RawLayout(None)
    if raw_bytes is not None:
        raw_bytes = bytes(raw_bytes)
        if attachment_encoded:
            layout = split_raw(raw_bytes, attachment_encoded, take_out=not whole_raw)
        if layout.pack is None:
            blobs.append(Blob(prefix + "raw.eml", raw_bytes, "message/rfc822"))
            blob_names.append("raw.eml")
        else:
            blobs.append(Blob(prefix + "raw.pack", layout.pack, PACK_CONTENT_TYPE))
            blob_names.append("raw.pack")
            for sha, part in layout.parts.items():
                blobs.append(Blob(part_key(mailbox_id, sha), part, "application/octet-stream"))
    if content["html"] is not None:
        try:
            html_bytes = content["html"].encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEmailError("content.html is not valid Unicode (a lone surrogate?)") from None
        blobs.append(Blob(prefix + "body.html", html_bytes, "text/html; charset=utf-8"))
        blob_names.append("body.html")

    hot_attachments = []
    full_filenames: dict[str, str] = {}
    for idx, att in enumerate(em["attachments"]):
        filename = _cut(att["filename"], "filename")
        if filename != att["filename"]:
            full_filenames[str(idx)] = att["filename"]
        item: dict[str, Any] = {
            "idx": idx,
            "attachmentId": att["id"],
            "filename": filename,
            "contentType": att["contentType"],
            "size": att["size"],
            "cid": att["cid"],
            "blobKey": None,
        }
        span = layout.spans[idx] if idx < len(layout.spans) else None
        data = attachment_data[idx] if attachment_data is not None and idx < len(attachment_data) else None
        if span is not None:  # derived from the raw message's encoded body
            item["raw"] = span.as_document()
            if span.sha256 is not None:
                item["blobKey"] = part_key(mailbox_id, span.sha256)
        elif data is not None:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"attachment {idx} data must be bytes, not {type(data).__name__}")
            item["blobKey"] = f"{prefix}att/{idx}"
            blobs.append(Blob(item["blobKey"], bytes(data), att["contentType"] or "application/octet-stream"))
            blob_names.append(f"att/{idx}")
        extra = {k: v for k, v in att.items() if k not in ATTACHMENT_FIELDS}
        if extra:
            item["x"] = extra
        hot_attachments.append(item)

    date_value = None
    message: dict[str, Any] = {"_id": _id}
    if meta["date"] is not None:
        parsed = iso_to_datetime(meta["date"], "metadata.date")
        date_value = bson_datetime(parsed)
        if date_to_iso(date_value) != meta["date"]:
            message["dateText"] = meta["date"]

    x: dict[str, Any] = {k: v for k, v in em.items() if k not in TOP_FIELDS}
    for level, known in (
        ("metadata", METADATA_FIELDS),
        ("content", CONTENT_FIELDS),
        ("thread", THREAD_FIELDS),
        ("processing", PROCESSING_FIELDS),
    ):
        extra = {k: v for k, v in em[level].items() if k not in known}
        if extra:
            x[level] = extra

    message.update(
        {
            "mailboxId": mailbox_id,
            "messageKey": mkey,
            "messageId": mid,
            "threadKey": tkey,
            "threadId": tid,
            "ts": Int64(_ts(meta, processing, fallback_ts)),
            "date": date_value,
            "timestamp": None if meta["timestamp"] is None else Int64(meta["timestamp"]),
            "from": {"email": sender_email, "name": _cut(sender["name"], "name")} if sender else None,
            "participants": participants,
            "recipients": _address_keys(meta["to"] + meta["cc"]),
            "subject": _cut(meta["subject"], "subject"),
            "subjectKey": subject_key(meta["subject"]),
            "inReplyTo": thread["inReplyTo"],
            "references": thread["references"],
            "listId": list_id_key(list_id),
            "lookups": [],  # below, from the fields above
            "forAI": _cut(content["forAI"], "forAI"),
            "attachments": hot_attachments,
            "cleanFallback": processing["cleanFallback"],
            "specVersion": processing["specVersion"],
            "processedAt": processing["processedAt"],
            "blobPrefix": prefix,
            "blobs": blob_names,
            "sizeBytes": None if raw_bytes is None else len(raw_bytes),
            "rawSha256": None if raw_bytes is None else hashlib.sha256(raw_bytes).hexdigest(),
            "uidl": uidl,
        }
    )
    if layout.parts:
        message["rawParts"] = list(layout.parts)
    message["lookups"] = lookup_keys(message)
    if raw_from_full:
        message["rawFromFull"] = True
    if x:
        message["x"] = x

    body: dict[str, Any] = {
        "_id": _id,
        "mailboxId": mailbox_id,
        "subject": meta["subject"],  # full-text searched with clean; the hot copy stays in messages
        "text": content["text"],
        "clean": content["clean"],
        "from": sender,
        "to": meta["to"],
        "cc": meta["cc"],
        "bcc": bcc,
    }
    if content["raw"] is not None and not raw_from_full:
        body["raw"] = content["raw"]
    if message["forAI"] != content["forAI"]:
        body["forAI"] = content["forAI"]
    if full_filenames:
        body["fullFilenames"] = full_filenames

    size = _encoded_size(message, "message")
    if size > max_document_bytes:
        field, field_size = _largest_field(message)
        raise DocumentTooLargeError(
            f"the messages document would be {size} bytes, over MongoDB's limit of {max_document_bytes} "
            f"even with its display fields cut; largest field: {field} ({field_size} bytes)",
            field=field,
            size=size,
            limit=max_document_bytes,
        )
    if _encoded_size(body, "body") > body_spill_bytes:
        spilled = {k: body.pop(k) for k in _SPILL_TEXT if k in body}
        if _encoded_size(body, "body") > body_spill_bytes:  # tens of thousands of named recipients
            spilled.update({k: body.pop(k) for k in _SPILL_ADDRESSES if k in body})
        try:
            data = json.dumps(spilled, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEmailError("a body field is not valid Unicode (a lone surrogate?)") from None
        body["spill"] = prefix + "body.json"
        blobs.append(Blob(body["spill"], data, "application/json"))
        message["blobs"].append("body.json")
    return MessageDocuments(mid, mkey, tid, tkey, tuple(blobs), body, message, tuple(ignored))


def _cut(value: str | None, kind: str) -> str | None:
    """A display string as the hot row keeps it: at most ``HOT_TEXT_CHARS[kind]`` characters."""
    limit = HOT_TEXT_CHARS[kind]
    return value if value is None or len(value) <= limit else value[:limit]


def derived_fields(message: Mapping[str, Any], body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The lookup fields of a ``messages`` document (``lookups`` with them), recomputed from
    what it and its body hold.

    ``reindex`` compares these with the stored ones and rewrites what differs (the
    lookup fields are caches of the primary record).
    """
    body = body or {}
    sender = body.get("from") or message.get("from")
    to, cc, bcc = (list(body.get(k) or ()) for k in ("to", "cc", "bcc"))
    subject = body["subject"] if "subject" in body else message.get("subject")
    fields = {
        "subjectKey": subject_key(subject),
        "from": None
        if not sender
        else {"email": address_key(sender["email"]), "name": _cut(sender.get("name"), "name")},
        "participants": _address_keys(([sender] if sender else []) + to + cc + bcc),
        "recipients": _address_keys(to + cc),
        "listId": list_id_key(message.get("listId")),
    }
    if body.get("spill") and "to" not in body:  # address lists in body.json: keep the stored arrays
        del fields["participants"], fields["recipients"]
    fields["lookups"] = lookup_keys({**message, **fields})
    return fields
