"""Filters, sorts, projections and keyset cursors for every read. Pure: no I/O.

Where a read's only equality is the mailbox, many indexes share that prefix, so it names
(``hint``) the one that provides its sort; where another equality field (thread, sender,
participant, header key) selects the index, the planner is left to it. Tests check every read
with ``explain``. Values from callers are only ever placed as values (never as operators):
``check_str`` turns a dict where a string belongs into a ``TypeError``.

Keyset pagination: a page ends with the ``(ts, messageKey)`` of its last row (threads:
``(lastTs, _id)``); the next page starts strictly after it in the sort order, never by skipping.
The cursor is opaque to callers, and validated when it comes back: it carries a fingerprint of
the mailbox and query it was made for, so a cursor from another mailbox or query, or one that was
tampered with, is an ``InvalidCursorError``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidCursorError
from .indexes import ATLAS_SEARCH_INDEX, ATLAS_VECTOR_INDEX_NAME
from .keys import (
    address_key,
    address_query_key,
    check_str,
    doc_id,
    list_id_key,
    lookup_key,
    strip_message_id,
    subject_key,
)
from .windows import WindowedRead, key_between

__all__ = [
    "ATLAS_SEARCH_INDEX_NAME",
    "ATLAS_VECTOR_INDEX_NAME",
    "FIND_HEADERS",
    "ID_INDEX",
    "LIST_PROJECTION",
    "PROBE_PROJECTION",
    "SAMPLE_PROJECTION",
    "SEARCH_WINDOW_PROJECTION",
    "THREAD_CONTEXT_PROJECTION",
    "KeysetQuery",
    "decode_cursor",
    "encode_cursor",
    "find_query",
    "flat_filter",
    "inbox_query",
    "keyset_filter",
    "mailbox_id_range",
    "participant_query",
    "residual_match",
    "sample_filter",
    "sample_match",
    "stale_filter",
    "thread_context_query",
    "threads_query",
    "utc_day_range",
    "vector_search_pipeline",
    "windowed_read",
    "with_fields",
]

#: Fields list reads fetch from ``messages`` (never bodies, never blobs).
LIST_PROJECTION: dict[str, int] = {
    "_id": 0,
    "messageId": 1,
    "messageKey": 1,
    "threadId": 1,
    "subject": 1,
    "from": 1,
    "date": 1,
    "dateText": 1,
    "ts": 1,
    "inReplyTo": 1,
    "attachments.idx": 1,
    "tags": 1,
}
#: What an LLM prompt needs of each message in a thread (its forAI text, not the whole body).
THREAD_CONTEXT_PROJECTION: dict[str, int] = {
    "_id": 0,
    "messageId": 1,
    "messageKey": 1,
    "from": 1,
    "date": 1,
    "dateText": 1,
    "ts": 1,
    "forAI": 1,
    "subject": 1,
    "tags": 1,
    "attachments.idx": 1,  # for attachmentsForAI
    "attachments.filename": 1,
    "attachments.contentType": 1,
    "attachments.textChars": 1,
}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_CURSOR_VERSION = 2  # the short binary form
_JSON_CURSOR_VERSION = 1  # the older JSON form, still read


@dataclass(frozen=True)
class KeysetQuery:
    """One keyset-paginated read: ``base`` filter, sort direction, the index that serves it."""

    collection: str
    base: dict[str, Any]
    ts_field: str
    key_field: str
    descending: bool
    hint: str | None
    fingerprint: str

    @property
    def sort(self) -> list[tuple[str, int]]:
        direction = -1 if self.descending else 1
        return [(self.ts_field, direction), (self.key_field, direction)]


def _fingerprint(mailbox_id: str, kind: str, params: Mapping[str, Any]) -> str:
    payload = json.dumps([mailbox_id, kind, params], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _ts_bounds(since: object, until: object) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for name, value, op in (("since", since, "$gte"), ("until", until, "$lt")):
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware (UTC is assumed nowhere)")
            bounds[op] = int(value.timestamp())
        elif isinstance(value, int) and not isinstance(value, bool):
            bounds[op] = value
        else:
            raise TypeError(f"{name} must be an int (epoch seconds) or an aware datetime, not {type(value).__name__}")
    return bounds


def inbox_query(
    mailbox_id: str,
    *,
    sender: str | None = None,
    thread_key: str | None = None,
    since: object = None,
    until: object = None,
    order: str = "desc",
) -> KeysetQuery:
    """The inbox page (optionally one sender's or one thread's), newest first by default."""
    if order not in ("desc", "asc"):
        raise ValueError("order must be 'desc' or 'asc'")
    base: dict[str, Any] = {"mailboxId": mailbox_id}
    hint: str | None = "aecs_messages_inbox"
    params: dict[str, Any] = {"order": order, "since": since, "until": until}
    if sender is not None:
        params["sender"] = address_key(sender)
        base["lookups"] = lookup_key("from", params["sender"])
        hint = None  # the sender's key selects aecs_messages_lookups (walked backwards, newest first)
    if thread_key is not None:
        if sender is not None:
            raise ValueError("give sender or thread_id, not both")
        base["threadKey"] = thread_key
        params["thread"] = thread_key
        hint = None  # the thread equality selects aecs_messages_thread
    bounds = _ts_bounds(since, until)
    if bounds:
        base["ts"] = bounds
    return KeysetQuery(
        "messages", base, "ts", "messageKey", order == "desc", hint, _fingerprint(mailbox_id, "messages", params)
    )


def participant_query(mailbox_id: str, address: str, *, shared: bool = False) -> KeysetQuery:
    """Mail with one person, newest first, on the participant index.

    ``shared``: a view other people see must not reveal bcc recipients, so only From, To and Cc
    count (a residual filter on the same index scan).
    """
    key = address_key(check_str(address, "address"))
    base: dict[str, Any] = {"mailboxId": mailbox_id, "participants": key}
    if shared:
        base["$or"] = [{"from.email": key}, {"recipients": key}]
    return KeysetQuery(
        "messages",
        base,
        "ts",
        "messageKey",
        True,
        None,  # the participant equality selects aecs_messages_participant
        _fingerprint(mailbox_id, "participant", {"address": key, "shared": shared}),
    )


def threads_query(mailbox_id: str) -> KeysetQuery:
    """The conversation list, most recent activity first."""
    return KeysetQuery(
        "threads",
        {"mailboxId": mailbox_id},
        "lastTs",
        "_id",
        True,
        None,  # aecs_threads_recent is the only index of threads on mailboxId
        _fingerprint(mailbox_id, "threads", {}),
    )


def keyset_filter(query: KeysetQuery, after: tuple[int, str] | None) -> dict[str, Any]:
    """The query's filter, restricted to rows strictly after ``after`` in its sort order."""
    if after is None:
        return dict(query.base)
    ts, key = after
    op = "$lt" if query.descending else "$gt"
    position = {"$or": [{query.ts_field: {op: ts}}, {query.ts_field: ts, query.key_field: {op: key}}]}
    return {"$and": [query.base, position]}


def encode_cursor(query: KeysetQuery, last: Mapping[str, Any]) -> str:
    """An opaque cursor for the page after the row ``last``: 62 characters (URL-safe base64 of
    a version byte, the query's fingerprint, the sort time as a zigzag varint and the row's key
    as 32 bytes), so ``next_cursor: <cursor>`` fits an 80-column terminal. A key that is not a
    stored one's shape (64 hex digits, after ``<mailbox>:`` for threads) keeps the older form."""
    ts, key = int(last[query.ts_field]), str(last[query.key_field])
    digits = key.rpartition(":")[2] if query.key_field == "_id" else key
    if _HEX64.match(digits) and _HEX16.match(query.fingerprint) and -(2**63) <= ts < 2**63:
        raw = bytes([_CURSOR_VERSION]) + bytes.fromhex(query.fingerprint) + _varint(ts) + bytes.fromhex(digits)
    else:
        raw = json.dumps([_JSON_CURSOR_VERSION, query.fingerprint, ts, key], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _varint(value: int) -> bytes:
    """``value`` (an int64 of any sign) as a zigzag LEB128 varint: 5 bytes for today's epoch
    seconds."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(raw: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if at >= len(raw) or shift > 70:
            raise InvalidCursorError("malformed cursor")
        byte = raw[at]
        n |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), at


def _cursor_payload(text: str) -> tuple[str, int, str, bool]:
    """``(fingerprint, ts, key, short)`` of a cursor, in its short form or the older JSON one
    (``short``: the key is 64 hex digits without the threads' ``<mailbox>:``)."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursorError("malformed cursor") from None
    if raw[:1] == bytes([_CURSOR_VERSION]) and len(raw) > 9 + 32:
        ts, at = _read_varint(raw, 9)
        if len(raw) - at != 32:
            raise InvalidCursorError("malformed cursor")
        return raw[1:9].hex(), ts, raw[at:].hex(), True
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise InvalidCursorError("malformed cursor") from None
    if not (isinstance(payload, list) and len(payload) == 4 and payload[0] == _JSON_CURSOR_VERSION):
        raise InvalidCursorError("malformed cursor")
    _, fingerprint, ts, key = payload
    if isinstance(ts, bool) or not isinstance(ts, int) or not isinstance(key, str):
        raise InvalidCursorError("malformed cursor")
    return str(fingerprint), ts, key, False


def decode_cursor(query: KeysetQuery, cursor: object, mailbox_id: str) -> tuple[int, str] | None:
    """Validate a cursor from a caller; ``InvalidCursorError`` unless it was made for this query.
    Cursors of the older, longer form (0.1.0's) are still accepted."""
    if cursor is None:
        return None
    text = check_str(cursor, "cursor")
    fingerprint, ts, key, short = _cursor_payload(text)
    if fingerprint != query.fingerprint:
        raise InvalidCursorError("cursor belongs to another mailbox or query")
    if short and query.key_field == "_id":
        key = f"{mailbox_id}:{key}"
    if query.key_field == "messageKey" and not _HEX64.match(key):
        raise InvalidCursorError("malformed cursor")
    if query.key_field == "_id" and not key.startswith(mailbox_id + ":"):
        raise InvalidCursorError("cursor belongs to another mailbox")
    return ts, key


def utc_day_range(day: str) -> tuple[int, int]:
    """``YYYY-MM-DD`` -> the epoch-second range of that UTC day."""
    try:
        start = _dt.datetime.strptime(check_str(day, "day"), "%Y-%m-%d").replace(tzinfo=_dt.UTC)
    except ValueError:
        raise ValueError(f"a Date lookup takes a UTC day as YYYY-MM-DD, got {day!r}") from None
    first = int(start.timestamp())
    return first, first + 86400


#: The headers ``find`` looks up (the POP3 pipeline's), case-insensitive, and the index that
#: serves each: Subject, From, To, In-Reply-To and List-Id are keys of ``lookups``.
FIND_HEADERS: dict[str, str] = {
    "subject": "aecs_messages_lookups",
    "from": "aecs_messages_lookups",
    "to": "aecs_messages_lookups",
    "date": "aecs_messages_inbox",
    "in-reply-to": "aecs_messages_lookups",
    "references": "aecs_messages_references",
    "list-id": "aecs_messages_lookups",
}


def find_query(mailbox_id: str, header: str, value: str) -> tuple[dict[str, Any], str | None]:
    """The POP3 pipeline's ``find(header, value)``: the filter (value normalized like the stored
    key) and the hint (only for Date, a range whose only equality is the mailbox).

    Subject: ``subject:<subject_key>``; From and To (To and Cc): ``from:`` / ``to:`` and the
    addr-spec, lowercased; In-Reply-To: ``in-reply-to:`` and a Message-ID in either form, as
    stored (no brackets); List-Id: ``list-id:`` and the id lowercased, angle brackets stripped
    (``keys.lookup_keys`` builds the stored side). Date: a UTC day ``YYYY-MM-DD`` on ``ts``;
    References: a Message-ID on ``references``.
    """
    name = check_str(header, "header").strip().lower()
    check_str(value, "value")
    if name not in FIND_HEADERS:
        raise ValueError(f"find() looks up {', '.join(sorted(FIND_HEADERS))}; not {header!r}")
    selector: dict[str, Any] = {"mailboxId": mailbox_id}
    if name == "subject":
        selector["lookups"] = lookup_key("subject", subject_key(value))
    elif name in ("from", "to"):
        selector["lookups"] = lookup_key(name, address_query_key(value))
    elif name == "date":
        first, end = utc_day_range(value.strip())
        selector["ts"] = {"$gte": first, "$lt": end}
        selector["date"] = {"$ne": None}
    elif name == "in-reply-to":
        selector["lookups"] = lookup_key(name, strip_message_id(value))
    elif name == "references":
        selector["references"] = strip_message_id(value)
    else:
        key = list_id_key(value)
        if key is None:  # an empty List-Id: the messages without one, on the mailbox's own order
            selector["listId"] = None
            return selector, "aecs_messages_inbox"
        selector["lookups"] = lookup_key(name, key)
    return selector, (FIND_HEADERS[name] if name == "date" else None)


# --- search ---------------------------------------------------------------------------------

#: The Atlas Search index on ``bodies`` and the vector index (both defined in ``indexes``).
ATLAS_SEARCH_INDEX_NAME = ATLAS_SEARCH_INDEX.name


def vector_search_pipeline(
    mailbox_id: str, vector: list[float], limit: int, thread_key: str | None = None
) -> list[dict[str, Any]]:
    """``$vectorSearch`` over one vector per message, pre-filtered by mailbox (and thread)."""
    selector: dict[str, Any] = {"mailboxId": {"$eq": mailbox_id}}
    if thread_key is not None:
        selector["threadKey"] = {"$eq": thread_key}
    return [
        {
            "$vectorSearch": {
                "index": ATLAS_VECTOR_INDEX_NAME,
                "path": "embedding",
                "queryVector": vector,
                "numCandidates": max(limit * 10, 100),
                "limit": limit,
                "filter": selector,
            }
        },
        {"$project": {"_id": 1, "messageKey": 1, "threadKey": 1, "score": {"$meta": "vectorSearchScore"}}},
    ]


# --- windowed reads (windows) ---------------------------------------------------------------

#: What a probe window fetches: the sort key only.
PROBE_PROJECTION: dict[str, int] = {"_id": 1}
#: What the scan search reads of ``messages`` per window.
SEARCH_WINDOW_PROJECTION: dict[str, int] = {"_id": 1, "messageId": 1, "subject": 1, "ts": 1, "messageKey": 1}


#: What the sample reads of each sampled message: its sort key and the equality fields of the
#: message reads (``sample_match``), so the sample also says about how many messages a read matches.
SAMPLE_PROJECTION: dict[str, int] = {"_id": 0, "ts": 1, "participants": 1, "from.email": 1, "threadKey": 1}
_SAMPLED = ("participants", "from.email", "threadKey")


def sample_match(query: KeysetQuery, row: Mapping[str, Any]) -> bool:
    """Whether a sampled message (``SAMPLE_PROJECTION``) may match ``query``: its equalities (a
    value, or an array holding it) and its ``ts`` bounds; a condition the sample cannot judge
    (a field it does not read, an operator) counts as a match, so the estimate stays an upper one."""
    if query.collection != "messages":
        return True
    for path, value in query.base.items():
        if path == "mailboxId" or path.startswith("$"):
            continue
        if path == "lookups" and isinstance(value, str) and value.startswith("from:"):
            path, value = "from.email", value[len("from:") :]  # the sender's key, by the field it is made of
        if path == query.ts_field and isinstance(value, Mapping):
            ts = row.get(path)
            if not isinstance(ts, int) or not _in_bounds(ts, value):
                return False
        elif path in _SAMPLED and not isinstance(value, Mapping) and value not in _values(row, path):
            return False
    return True


def _in_bounds(ts: int, bounds: Mapping[str, Any]) -> bool:
    checks = {"$gt": ts.__gt__, "$gte": ts.__ge__, "$lt": ts.__lt__, "$lte": ts.__le__}
    return all(checks[op](bound) if op in checks else True for op, bound in bounds.items())


#: The index the mailbox's sample and the stale-row scan read: ``_id`` is
#: ``<mailboxId>:<messageKey>``, so a mailbox's messages are one ``_id`` range in key order.
ID_INDEX = "_id_"


def mailbox_id_range(mailbox_id: str, fraction: float = 1.0) -> dict[str, str]:
    """The ``_id`` bounds of the mailbox's messages whose key lies in the first ``fraction`` of
    the key space (1: all of them; keys are lowercase hex, below ``g``). Another mailbox's
    ``_id`` may fall in the range (a mailbox id that extends this one past a colon), so a
    statement adds the ``mailboxId`` equality."""
    upper = key_between("", fraction) if fraction < 1 else "g"
    return {"$gte": doc_id(mailbox_id, ""), "$lt": doc_id(mailbox_id, upper)}


def sample_filter(mailbox_id: str, spec_version: str, fraction: float) -> dict[str, Any]:
    """The messages of one spec version whose key is in the first ``fraction`` of the key space:
    a uniform sample (keys are SHA-256), one bounded range of the ``_id`` index (``ID_INDEX``,
    which every collection has: no index of its own)."""
    return {"_id": mailbox_id_range(mailbox_id, fraction), "mailboxId": mailbox_id, "specVersion": spec_version}


def stale_filter(mailbox_id: str, spec_version: str) -> dict[str, Any]:
    """The mailbox's messages stored under another spec version than ``spec_version``, on the
    ``_id`` index (``ID_INDEX``): a maintenance read that looks at each message of the mailbox
    once, in place of an index every insert would pay for."""
    return {"_id": mailbox_id_range(mailbox_id), "mailboxId": mailbox_id, "specVersion": {"$ne": spec_version}}


def thread_context_query(mailbox_id: str, tkey: str) -> KeysetQuery:
    """A thread's messages newest first, on ``aecs_messages_thread`` (``thread_context``)."""
    base = {"mailboxId": mailbox_id, "threadKey": tkey}
    return KeysetQuery("messages", base, "ts", "messageKey", True, None, _fingerprint(mailbox_id, "context", base))


def windowed_read(query: KeysetQuery, mailbox_id: str, now: int) -> WindowedRead:
    """The read as ``windows.walk`` walks it: its order, its own ``ts`` bounds, its key prefix."""
    bounds = query.base.get(query.ts_field) or {}
    key_prefix = mailbox_id + ":" if query.key_field == "_id" else ""
    lo = bounds.get("$gte")
    return WindowedRead(query.descending, now, lo, bounds.get("$lt"), key_prefix)


def flat_filter(query: KeysetQuery) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The read's flat filter (equalities only; each window adds its ``ts`` range) and the
    residual ``$or`` a flat filter cannot carry (a top-level ``$or`` or ``$and`` makes a server
    that plans from flat filters scan the collection), to be checked on each row with
    ``residual_match``."""
    flat = {k: v for k, v in query.base.items() if k not in ("$or", query.ts_field)}
    return flat, query.base.get("$or")


def _values(row: Mapping[str, Any], path: str) -> list[Any]:
    current: list[Any] = [row]
    for part in path.split("."):
        nxt: list[Any] = []
        for value in current:
            items = value if isinstance(value, list) else [value]
            nxt += [item[part] for item in items if isinstance(item, Mapping) and part in item]
        current = nxt
    flat: list[Any] = []
    for value in current:
        flat += value if isinstance(value, list) else [value]
    return flat


def with_fields(projection: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """``projection`` that also returns ``paths`` (a path under a projected field is there already)."""
    out = dict(projection)
    for path in paths:
        if not any(path == p or path.startswith(p + ".") for p, v in projection.items() if v):
            out[path] = 1
    return out


def residual_match(row: Mapping[str, Any], clauses: list[dict[str, Any]]) -> bool:
    """Whether ``row`` matches an ``$or`` of equality clauses (a value, or an array holding it)."""
    return any(all(value in _values(row, path) for path, value in clause.items()) for clause in clauses)
