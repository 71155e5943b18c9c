"""NormalizedEmail <-> the documents and blobs the store writes. Pure: no I/O.

One AECS-1 object becomes three tiers (AECS-1 Appendix C.1):

- ``messages`` (hot): identity, sort keys, sender, participants, subject, forAI, attachment
  metadata: what every list, thread and LLM-context read touches. A few KB.
- ``bodies`` (warm): text, clean, the address lists with names; read when one message opens.
- GridFS (cold): ``raw.eml`` (byte-exact), ``body.html``, ``att/<idx>``; and ``body.json`` for a
  body too large for one document.

``to_normalized_email`` is the way back; for a stored NormalizedEmail it returns every field
field for field (omitted and ``null`` fields mean the same, AECS-1 §10).

Decisions where the spec is silent:

- ``ts`` (the sort key) is ``metadata.timestamp``, else ``fallback_ts`` (the newest Received
  header's date, else the source's own date: the store works it out), else
  ``processing.processedAt`` (seed 000's fallback, kept last), else 0.
- Only ``x_`` fields are kept besides the spec's own; other unknown fields are ignored as §10.6
  asks (``MessageDocuments.ignored``; the store says so once per field name). ``x_`` names
  MongoDB cannot store (``$`` first, a dot, NUL) are refused.
- The hot row cuts display strings (``HOT_TEXT_CHARS``) and keeps them whole in ``bodies``; only
  a ``messages`` document over MongoDB's 16 MiB is refused (C.5 asks for a small hot row, and a
  mail store must not turn away mail a mail client shows).
- ``rawSha256`` identifies the bytes of the first copy; other bytes under the same Message-ID are
  kept as variants (``variants.variant_blob_key``) by the store.
- ``metadata.date`` is stored as a BSON date; a value that does not re-render identically (an
  offset of ``+00:00``, microseconds) is kept verbatim beside it so it comes back unchanged.
- ``content.rawFull`` is stored as bytes: the raw bytes given to ``store``, or the string's
  UTF-8 encoding. It comes back decoded as UTF-8, or as latin-1 where the bytes are not UTF-8.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bson
from bson.int64 import Int64

from ..errors import DocumentTooLargeError, InvalidEmailError, UnsafeFieldNameError
from .keys import (
    address_key,
    blob_prefix,
    doc_id,
    list_id_key,
    message_key,
    strip_message_id,
    subject_key,
    thread_key,
)
from .tags import row_tags

__all__ = [
    "BODY_SPILL_BYTES",
    "HOT_TEXT_CHARS",
    "MAX_DOCUMENT_BYTES",
    "Blob",
    "MessageDocuments",
    "build_documents",
    "context_entry",
    "date_to_iso",
    "derived_fields",
    "fold_thread_summary",
    "merge_thread_summaries",
    "message_summary",
    "raw_full_from_bytes",
    "raw_full_to_bytes",
    "summary_merge_update",
    "thread_summaries",
    "thread_summary_from_messages",
    "thread_update",
    "thread_updates",
    "to_normalized_email",
    "validate_email",
]

#: MongoDB's document limit (16 MiB): the one size the store refuses a message for.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: A ``bodies`` document larger than this moves its text to GridFS (``body.json``).
BODY_SPILL_BYTES = 12 * 1024 * 1024
#: Display strings in the hot row are cut to these many characters (C.5: a small hot row); the
#: whole value is kept in ``bodies`` and comes back from ``get_message``. Address arrays and
#: references are never cut: the indexes answer from them.
HOT_TEXT_CHARS = {"subject": 1000, "name": 256, "filename": 512, "forAI": 32_000}
#: What moves to ``body.json`` when a body is too large: the text first, then the address lists.
_SPILL_TEXT = ("text", "clean", "raw", "forAI", "fullFilenames")
_SPILL_ADDRESSES = ("to", "cc", "bcc")

_ISO_UTC = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|\+00:00)$", re.ASCII)
_TOP = ("messageId", "threadId", "metadata", "content", "thread", "attachments", "processing")
_METADATA = ("from", "to", "cc", "bcc", "subject", "date", "timestamp")
_CONTENT = ("rawFull", "raw", "html", "text", "clean", "forAI")
_THREAD = ("position", "inReplyTo", "references")
_ATTACHMENT = ("id", "filename", "contentType", "size", "cid")
_PROCESSING = ("processedAt", "specVersion", "cleanFallback")
_ADDRESS = ("name", "email")


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


# --- validation --------------------------------------------------------------------------


def _fail(path: str, expected: str, value: object) -> InvalidEmailError:
    return InvalidEmailError(f"{path} must be {expected}, not {type(value).__name__}")


def _opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(f"{path}.{key}", "a string or null", value)
    return value


def _opt_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(f"{path}.{key}", "an object or null", value)
    return value


def _opt_list(obj: Mapping[str, Any], key: str, path: str) -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise _fail(f"{path}.{key}", "an array or null", value)
    return value


def _check_field_names(value: Any, path: str) -> None:
    """Refuse key names MongoDB cannot store anywhere inside an ``x_`` value."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise UnsafeFieldNameError(f"{path} has a non-string key {key!r}")
            if key.startswith("$") or "." in key or "\x00" in key:
                raise UnsafeFieldNameError(f"{path}.{key!r}: field names may not start with '$' or contain '.' or NUL")
            _check_field_names(inner, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, inner in enumerate(value):
            _check_field_names(inner, f"{path}[{i}]")


def _extensions(
    obj: Mapping[str, Any], known: tuple[str, ...], path: str, ignored: list[str] | None = None
) -> dict[str, Any]:
    """The ``x_`` fields of one object; unknown other fields are ignored (§10.6) and their
    ``path.name`` appended to ``ignored`` (the store says so once per name)."""
    found: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise UnsafeFieldNameError(f"{path} has a non-string key {key!r}")
        if key in known:
            continue
        if key.startswith("x_"):
            _check_field_names({key: value}, path)
            found[key] = value
        elif ignored is not None:
            ignored.append(f"{path}.{key}")
    return found


def _address(value: object, path: str, ignored: list[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "an address object", value)
    email = value.get("email")
    if not isinstance(email, str):
        raise _fail(f"{path}.email", "a string", email)
    name = _opt_str(value, "name", path)
    result: dict[str, Any] = {"name": name, "email": email}
    result.update(_extensions(value, _ADDRESS, path, ignored))
    return result


def _iso_to_datetime(text: str, path: str) -> _dt.datetime:
    match = _ISO_UTC.match(text)
    if not match:
        raise InvalidEmailError(f"{path} must be ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ), got {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    try:
        return _dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=_dt.UTC)
    except ValueError as exc:
        raise InvalidEmailError(f"{path}: {exc}") from None


def date_to_iso(value: _dt.datetime | None) -> str | None:
    """A stored BSON date -> AECS-1 ``YYYY-MM-DDTHH:MM:SSZ`` (milliseconds kept when set)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    value = value.astimezone(_dt.UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return text + "Z"


def _bson_datetime(value: _dt.datetime) -> _dt.datetime:
    """What a BSON date round trip gives back (milliseconds, UTC)."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def validate_email(email: object, ignored: list[str] | None = None) -> dict[str, Any]:
    """Check one NormalizedEmail's shape and return a canonical copy (nulls filled in).

    Raises ``InvalidEmailError`` (or ``UnsafeFieldNameError``) naming the offending field.
    Unknown fields that are not ``x_`` extensions are dropped and named in ``ignored``.
    """
    if not isinstance(email, Mapping):
        raise TypeError(f"email must be a mapping (a NormalizedEmail) or bytes, not {type(email).__name__}")
    out: dict[str, Any] = {}
    for key in ("messageId", "threadId"):
        value = email.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InvalidEmailError(f"{key} is required and must be a non-empty string")
    message_id = strip_message_id(email["messageId"], "messageId")
    if not message_id:
        raise InvalidEmailError("messageId is empty once angle brackets are stripped")
    out["messageId"] = message_id
    out["threadId"] = email["threadId"]

    meta_in = _opt_map(email, "metadata", "email")
    frm = meta_in.get("from")
    meta: dict[str, Any] = {
        "from": None if frm is None else _address(frm, "metadata.from", ignored),
        "subject": _opt_str(meta_in, "subject", "metadata"),
        "date": _opt_str(meta_in, "date", "metadata"),
    }
    for key in ("to", "cc", "bcc"):
        meta[key] = [
            _address(a, f"metadata.{key}[{i}]", ignored) for i, a in enumerate(_opt_list(meta_in, key, "metadata"))
        ]
    timestamp = meta_in.get("timestamp")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise _fail("metadata.timestamp", "an integer or null", timestamp)
    meta["timestamp"] = timestamp
    if meta["date"] is not None:
        _iso_to_datetime(meta["date"], "metadata.date")
    meta.update(_extensions(meta_in, _METADATA, "metadata", ignored))
    out["metadata"] = meta

    content_in = _opt_map(email, "content", "email")
    content: dict[str, Any] = {key: _opt_str(content_in, key, "content") for key in _CONTENT}
    content.update(_extensions(content_in, _CONTENT, "content", ignored))
    out["content"] = content

    thread_in = _opt_map(email, "thread", "email")
    references = []
    for i, ref in enumerate(_opt_list(thread_in, "references", "thread")):
        if not isinstance(ref, str):
            raise _fail(f"thread.references[{i}]", "a string", ref)
        references.append(ref)
    in_reply_to = _opt_str(thread_in, "inReplyTo", "thread")
    thread: dict[str, Any] = {"position": None, "inReplyTo": in_reply_to, "references": references}
    thread.update(_extensions(thread_in, _THREAD, "thread", ignored))
    out["thread"] = thread

    attachments = []
    for i, att in enumerate(_opt_list(email, "attachments", "email")):
        path = f"attachments[{i}]"
        if not isinstance(att, Mapping):
            raise _fail(path, "an object", att)
        size = att.get("size", 0)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise _fail(f"{path}.size", "a non-negative integer", size)
        item: dict[str, Any] = {
            "id": _opt_str(att, "id", path),
            "filename": _opt_str(att, "filename", path),  # as given: "" and null come back as they went in
            "contentType": _opt_str(att, "contentType", path),
            "size": size,
            "cid": _opt_str(att, "cid", path),
        }
        item.update(_extensions(att, _ATTACHMENT, path, ignored))
        attachments.append(item)
    out["attachments"] = attachments

    proc_in = _opt_map(email, "processing", "email")
    clean_fallback = proc_in.get("cleanFallback")
    if clean_fallback is not None and not isinstance(clean_fallback, bool):
        raise _fail("processing.cleanFallback", "a boolean or null", clean_fallback)
    processing: dict[str, Any] = {
        "processedAt": _opt_str(proc_in, "processedAt", "processing"),
        "specVersion": _opt_str(proc_in, "specVersion", "processing"),
        "cleanFallback": clean_fallback,
    }
    if processing["processedAt"] is not None:
        _iso_to_datetime(processing["processedAt"], "processing.processedAt")
    processing.update(_extensions(proc_in, _PROCESSING, "processing", ignored))
    out["processing"] = processing

    out.update(_extensions(email, _TOP, "email", ignored))
    return out


# --- rawFull -------------------------------------------------------------------------------


def raw_full_to_bytes(raw_full: str) -> bytes:
    """The bytes a ``content.rawFull`` string stands for: its UTF-8 encoding."""
    try:
        return raw_full.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEmailError(f"content.rawFull is not valid Unicode: {exc.reason}") from None


def raw_full_from_bytes(raw: bytes) -> str:
    """``raw.eml`` -> ``content.rawFull``: UTF-8 where the bytes are UTF-8, else latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


# --- building ------------------------------------------------------------------------------


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
        return int(_iso_to_datetime(meta["date"], "metadata.date").timestamp())
    if fallback is not None:
        return int(fallback)
    if processing["processedAt"] is not None:
        return int(_iso_to_datetime(processing["processedAt"], "processing.processedAt").timestamp())
    return 0


def build_documents(
    email: Mapping[str, Any],
    *,
    mailbox_id: str,
    owner_addresses: frozenset[str] = frozenset(),
    raw_bytes: bytes | None = None,
    attachment_data: Sequence[bytes | None] | None = None,
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
    ``content.rawFull`` string is stored as its UTF-8 encoding. ``raw_from_full`` says that
    ``content.raw`` is what the normalizer derives from those bytes, so it is not stored.
    bcc is kept only when the sender is one of ``owner_addresses`` (C.6).

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
    if raw_bytes is not None:
        blobs.append(Blob(prefix + "raw.eml", bytes(raw_bytes), "message/rfc822"))
        blob_names.append("raw.eml")
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
        data = attachment_data[idx] if attachment_data is not None and idx < len(attachment_data) else None
        if data is not None:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"attachment {idx} data must be bytes, not {type(data).__name__}")
            item["blobKey"] = f"{prefix}att/{idx}"
            blobs.append(Blob(item["blobKey"], bytes(data), att["contentType"] or "application/octet-stream"))
            blob_names.append(f"att/{idx}")
        extra = {k: v for k, v in att.items() if k not in _ATTACHMENT}
        if extra:
            item["x"] = extra
        hot_attachments.append(item)

    date_value = None
    message: dict[str, Any] = {"_id": _id}
    if meta["date"] is not None:
        parsed = _iso_to_datetime(meta["date"], "metadata.date")
        date_value = _bson_datetime(parsed)
        if date_to_iso(date_value) != meta["date"]:
            message["dateText"] = meta["date"]

    x: dict[str, Any] = {k: v for k, v in em.items() if k not in _TOP}
    for level, known in (
        ("metadata", _METADATA),
        ("content", _CONTENT),
        ("thread", _THREAD),
        ("processing", _PROCESSING),
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
    if raw_from_full:
        message["rawFromFull"] = True
    if x:
        message["x"] = x

    body: dict[str, Any] = {
        "_id": _id,
        "mailboxId": mailbox_id,
        "subject": meta["subject"],  # searched with clean (C.3); the hot copy stays in messages
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
    """The lookup fields of a ``messages`` document, recomputed from what it and its body hold.

    ``reindex`` compares these with the stored ones and rewrites what differs (seed 003: the
    indices are caches of the primary record).
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
    return fields


# --- thread summaries ------------------------------------------------------------------------


def thread_update(message: Mapping[str, Any], *, sharded: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The upsert filter and pipeline that fold one newly inserted message into its thread.

    ``sharded``: the filter carries the whole shard key (``mailboxId``, ``_id``), as an upsert on
    a sharded cluster requires; elsewhere the ``_id`` alone, which every server answers by index.

    Order is total on ``(ts, messageKey)``, so the summary does not depend on arrival order
    and equals ``thread_summary_from_messages`` over the same messages.
    """
    summary = thread_summary_from_messages([message])
    assert summary is not None
    return summary_merge_update(summary, sharded=sharded)


def thread_summaries(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each thread's summary of ``messages`` (a batch's new messages), in order of first appearance."""
    by_thread: dict[str, list[Mapping[str, Any]]] = {}
    for message in messages:
        by_thread.setdefault(message["threadKey"], []).append(message)
    return [summary for group in by_thread.values() if (summary := thread_summary_from_messages(group))]


def thread_updates(
    messages: Sequence[Mapping[str, Any]], *, sharded: bool = False
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """One upsert per thread for a batch of newly inserted messages, in order of first appearance:
    each thread's messages are summarized here and merged into the stored summary in one update.

    Merging summaries is associative and commutative (a count adds, first and last are the
    least and greatest ``(ts, messageKey)``), so the end state is the same as folding the
    messages one by one in any order, and concurrent writers' merges of one thread commute.
    """
    return [summary_merge_update(summary, sharded=sharded) for summary in thread_summaries(messages)]


def merge_thread_summaries(stored: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` with ``more`` (a summary of messages it does not count yet) merged in: what
    ``summary_merge_update`` does on the server, computed here."""
    out = dict(stored)
    out["messageCount"] = stored["messageCount"] + more["messageCount"]
    if (more["firstTs"], more["firstMessageKey"]) < (stored["firstTs"], stored["firstMessageKey"]):
        out.update(
            threadId=more["threadId"],
            subject=more["subject"],
            firstTs=more["firstTs"],
            firstMessageKey=more["firstMessageKey"],
        )
    if (more["lastTs"], more["lastMessageKey"]) > (stored["lastTs"], stored["lastMessageKey"]):
        out.update(lastTs=more["lastTs"], lastMessageKey=more["lastMessageKey"])
    if isinstance(stored.get("tags"), list):  # else a summary from before tags: read computes it
        out["tags"] = sorted(set(stored["tags"]) | set(more.get("tags") or ()))
    if more.get("tags") and "tagsRev" in more:
        out["tagsRev"] = more["tagsRev"]
    return out


def summary_merge_update(
    summary: Mapping[str, Any], *, sharded: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The upsert filter and pipeline that merge a summary of messages not yet counted (as
    ``thread_summary_from_messages`` makes it) into the stored summary of their thread."""
    first_key = (summary["firstTs"], summary["firstMessageKey"])
    last_key = (summary["lastTs"], summary["lastMessageKey"])
    no_summary = {"$eq": [{"$ifNull": ["$firstTs", None]}, None]}
    is_first = {
        "$or": [
            no_summary,
            {"$lt": [first_key[0], "$firstTs"]},
            {"$and": [{"$eq": [first_key[0], "$firstTs"]}, {"$lt": [first_key[1], "$firstMessageKey"]}]},
        ]
    }
    is_last = {
        "$or": [
            no_summary,
            {"$gt": [last_key[0], "$lastTs"]},
            {"$and": [{"$eq": [last_key[0], "$lastTs"]}, {"$gt": [last_key[1], "$lastMessageKey"]}]},
        ]
    }
    pipeline = [
        {"$set": {"_aecsFirst": is_first, "_aecsLast": is_last}},
        {
            "$set": {
                "mailboxId": summary["mailboxId"],
                "threadKey": summary["threadKey"],
                "threadId": {"$literal": summary["threadId"]},
                "messageCount": {"$add": [{"$ifNull": ["$messageCount", 0]}, summary["messageCount"]]},
                "subject": {"$cond": ["$_aecsFirst", {"$literal": summary["subject"]}, "$subject"]},
                "firstTs": {"$cond": ["$_aecsFirst", first_key[0], "$firstTs"]},
                "firstMessageKey": {"$cond": ["$_aecsFirst", first_key[1], "$firstMessageKey"]},
                "lastTs": {"$cond": ["$_aecsLast", last_key[0], "$lastTs"]},
                "lastMessageKey": {"$cond": ["$_aecsLast", last_key[1], "$lastMessageKey"]},
                # the union of the messages' tags (a summary from before tags keeps none: read computes it)
                "tags": {
                    "$cond": [
                        {"$or": [no_summary, {"$isArray": "$tags"}]},
                        {"$setUnion": [{"$ifNull": ["$tags", []]}, {"$literal": list(summary.get("tags") or ())}]},
                        "$$REMOVE",
                    ]
                },
                **(
                    {"tagsRev": {"$literal": summary["tagsRev"]}}
                    if summary.get("tags") and "tagsRev" in summary
                    else {}
                ),
            }
        },
        {"$project": {"_aecsFirst": 0, "_aecsLast": 0}},
    ]
    selector = {"_id": summary["_id"]}
    if sharded:
        selector["mailboxId"] = summary["mailboxId"]
    return selector, pipeline


def thread_summary_from_messages(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Recompute one thread's summary from its ``messages`` documents (any order)."""
    if not messages:
        return None
    ordered = sorted(messages, key=lambda m: (m["ts"], m["messageKey"]))
    first, last = ordered[0], ordered[-1]
    return {
        "_id": doc_id(first["mailboxId"], first["threadKey"]),
        "mailboxId": first["mailboxId"],
        "threadKey": first["threadKey"],
        "threadId": first["threadId"],
        "messageCount": len(ordered),
        "subject": first["subject"],
        "firstTs": first["ts"],
        "firstMessageKey": first["messageKey"],
        "lastTs": last["ts"],
        "lastMessageKey": last["messageKey"],
        "tags": sorted({str(t) for m in ordered for t in (m.get("tags") or ())}),
    }


def fold_thread_summary(summary: Mapping[str, Any] | None, message: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` with one more message folded in: what ``thread_update`` does on the server.

    Folding a thread's messages in any order gives ``thread_summary_from_messages`` of them;
    ``reindex`` uses it to rebuild every summary in one pass over ``messages``.
    """
    one = thread_summary_from_messages([message])
    assert one is not None
    return one if summary is None else merge_thread_summaries(summary, one)


# --- the way back ------------------------------------------------------------------------------


def _iso_or_none(message: Mapping[str, Any]) -> str | None:
    if "dateText" in message:
        return str(message["dateText"])
    return date_to_iso(message.get("date"))


def message_summary(message: Mapping[str, Any]) -> dict[str, Any]:
    """The small dict list reads return for one ``messages`` document."""
    sender = message.get("from")
    return {
        "messageId": message["messageId"],
        "threadId": message["threadId"],
        "subject": message.get("subject"),
        "from": dict(sender) if sender else None,
        "date": _iso_or_none(message),
        "ts": int(message["ts"]),
        "inReplyTo": message.get("inReplyTo"),
        "attachmentCount": len(message.get("attachments") or ()),
        "tags": row_tags(message),
    }


def context_entry(message: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One message of ``thread_context``: what a prompt needs, with its position in the thread."""
    sender = message.get("from")
    return {
        "messageId": message["messageId"],
        "from": dict(sender) if sender else None,
        "subject": message.get("subject"),
        "date": _iso_or_none(message),
        "ts": int(message["ts"]),
        "forAI": message.get("forAI"),
        "position": position,
        "tags": row_tags(message),
    }


def to_normalized_email(
    message: Mapping[str, Any],
    body: Mapping[str, Any] | None,
    *,
    raw_full: bytes | None = None,
    raw: str | None = None,
    html: str | None = None,
    spilled: Mapping[str, Any] | None = None,
    position: int | None = None,
    shared: bool = False,
) -> dict[str, Any]:
    """Rebuild the AECS-1 object from the hot and warm documents (and cold blobs, if given).

    ``shared`` marks a view other people see: bcc is left out of it (C.6).
    """
    # the body with what moved to body.json put back: one place that holds every whole value
    whole = {**(spilled or {}), **(body or {})}
    x = message.get("x") or {}
    sender = whole.get("from")
    if sender is None and message.get("from"):
        sender = {"name": message["from"].get("name"), "email": message["from"]["email"]}
    timestamp = message.get("timestamp")
    metadata: dict[str, Any] = {
        "from": dict(sender) if sender else None,
        "to": [dict(a) for a in whole.get("to") or ()],
        "cc": [dict(a) for a in whole.get("cc") or ()],
        "bcc": [] if shared else [dict(a) for a in whole.get("bcc") or ()],
        "subject": whole["subject"] if "subject" in whole else message.get("subject"),  # bodies keep it whole
        "date": _iso_or_none(message),
        "timestamp": None if timestamp is None else int(timestamp),
        **x.get("metadata", {}),
    }
    if metadata["from"] is None:
        del metadata["from"]
    content: dict[str, Any] = {
        "rawFull": None if raw_full is None else raw_full_from_bytes(raw_full),
        "raw": whole.get("raw", raw),
        "html": html,
        "text": whole.get("text"),
        "clean": whole.get("clean"),
        "forAI": whole.get("forAI", message.get("forAI")),
        **x.get("content", {}),
    }
    attachments = []
    full_filenames = whole.get("fullFilenames") or {}
    for att in message.get("attachments") or ():
        item = {
            "id": att.get("attachmentId"),
            "filename": full_filenames.get(str(att.get("idx")), att.get("filename", "")),
            "contentType": att.get("contentType"),
            "size": int(att.get("size", 0)),
            "cid": att.get("cid"),
            **(att.get("x") or {}),
        }
        attachments.append(item)
    result: dict[str, Any] = {
        "messageId": message["messageId"],
        "threadId": message["threadId"],
        "metadata": metadata,
        "content": content,
        "thread": {
            "position": position,
            "inReplyTo": message.get("inReplyTo"),
            "references": list(message.get("references") or ()),
            **x.get("thread", {}),
        },
        "attachments": attachments,
        "processing": {
            "processedAt": message.get("processedAt"),
            "specVersion": message.get("specVersion"),
            "cleanFallback": message.get("cleanFallback"),
            **x.get("processing", {}),
        },
    }
    result.update({k: v for k, v in x.items() if k.startswith("x_")})
    return result
