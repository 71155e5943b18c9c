"""The feed of newly stored mail, as data: the change-stream filter, the records, the checkpoints.

Pure: no I/O. ``asynchronous/workers.py`` (and its generated twin) run these against the
server. A consumer's position is one of two shapes, kept in ``feed_checkpoints``:

- ``{"stream": <resume token>}``: follow the change stream after that token;
- ``{"backfill": {"stream": <resume token>, "after": [ts, messageKey] | None}}``: a consumer
  that started with ``since="beginning"`` and is still reading the existing messages (oldest
  first, on the inbox index) after ``after``; the stream was opened, and its token taken, before
  the first backfill read, so every message committed later is in the stream from that token.

A consumer made with ``tags=True`` also gets each tag (or folder) change as a record of kind
``"tags"``: the stream then carries the mailbox's updates too, with the message as it is when
the record is read (``updateLookup``), and the updates that touch neither ``tags`` nor
``folders`` are passed over (``is_label_change``). Records carry the message's tags and folders.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .keys import check_str, doc_id
from .tags import row_tags

__all__ = [
    "BACKFILL_HINT",
    "BACKFILL_PROJECTION",
    "BACKFILL_SORT",
    "CHECKPOINTS_COLLECTION",
    "CONSUMER_PATTERN",
    "SINCE",
    "FeedItem",
    "Vectors",
    "backfill_filter",
    "backfill_position",
    "check_consumer",
    "check_since",
    "check_vectors",
    "checkpoint_document",
    "checkpoint_id",
    "feed_item",
    "is_label_change",
    "stream_pipeline",
    "stream_position",
]

#: The collection of consumer positions: one small document per (mailbox, consumer).
CHECKPOINTS_COLLECTION = "feed_checkpoints"
#: Where a consumer without a checkpoint starts: new mail only, or every stored message first.
SINCE = ("now", "beginning")
#: Consumer names: what fits in an ``_id`` after the mailbox and a colon, unambiguously.
CONSUMER_PATTERN = re.compile(r"[A-Za-z0-9._@-]{1,128}")
#: One embedding per text, as a worker's embedding function returns them.
Vectors = Sequence[Sequence[float]]

#: The fields of a ``messages`` document a record is made of (the stream and the backfill project to these).
_RECORD_FIELDS = ("messageId", "threadId", "ts", "subject", "from", "forAI", "tags", "folders")
_LABEL_FIELDS = ("tags", "folders")
BACKFILL_PROJECTION: dict[str, Any] = {"_id": 0, "messageKey": 1, **dict.fromkeys(_RECORD_FIELDS, 1)}
BACKFILL_SORT = [("ts", 1), ("messageKey", 1)]
BACKFILL_HINT = "aecs_messages_inbox"


@dataclass(frozen=True)
class FeedItem:
    """One stored message, as a worker needs it without another read.

    ``sender`` is the From address (lowercased), ``ts`` the message's sort time (epoch
    seconds), ``for_ai`` the text prepared for a model (may be None for an empty message).
    ``kind``: ``"stored"`` (a new message, or one of the backfill) or ``"tags"`` (its tags or
    folders changed: a consumer made with ``tags=True``); ``tags``/``folders``: the message's,
    sorted, as they were when the record was read.
    """

    message_id: str
    thread_id: str
    ts: int
    subject: str | None
    sender: str | None
    for_ai: str | None
    kind: str = "stored"
    tags: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The record with the field names of the stored documents (for JSON)."""
        return {
            "messageId": self.message_id,
            "threadId": self.thread_id,
            "ts": self.ts,
            "subject": self.subject,
            "sender": self.sender,
            "forAI": self.for_ai,
            "kind": self.kind,
            "tags": list(self.tags),
            "folders": list(self.folders),
        }


def check_consumer(consumer: object) -> str:
    """A consumer name: 1-128 of letters, digits and ``. _ @ -`` (it is part of an ``_id``)."""
    name = check_str(consumer, "consumer")
    if not CONSUMER_PATTERN.fullmatch(name):
        raise ValueError("consumer must be 1-128 letters, digits or . _ @ -")
    return name


def check_since(since: object) -> str:
    value = check_str(since, "since")
    if value not in SINCE:
        raise ValueError(f"since must be one of {', '.join(SINCE)}")
    return value


def check_vectors(vectors: object, count: int) -> list[list[float]]:
    """What an embedding function returned: exactly ``count`` sequences of numbers."""
    if isinstance(vectors, (str, bytes)) or not isinstance(vectors, Sequence):
        raise TypeError(f"the embedding function must return a list of vectors, not {type(vectors).__name__}")
    if len(vectors) != count:
        raise ValueError(f"the embedding function returned {len(vectors)} vectors for {count} texts")
    out = []
    for vector in vectors:
        if isinstance(vector, (str, bytes)) or not isinstance(vector, Sequence):
            raise TypeError("each vector must be a sequence of numbers")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector):
            raise TypeError("each vector must be a sequence of numbers")
        out.append([float(v) for v in vector])
    return out


def checkpoint_id(mailbox_id: str, consumer: str) -> str:
    return doc_id(mailbox_id, consumer)


def stream_pipeline(mailbox_id: str, tags: bool = False) -> list[dict[str, Any]]:
    """The change-stream pipeline: inserts into this mailbox's ``messages``, trimmed to a record;
    with ``tags`` its updates too (by the ``_id`` range ``<mailboxId>:`` .. ``<mailboxId>;``),
    with the names of the fields they changed."""
    inserts = {"operationType": "insert", "fullDocument.mailboxId": mailbox_id}
    if not tags:
        return [
            {"$match": inserts},
            {"$project": {"operationType": 1, **{f"fullDocument.{f}": 1 for f in _RECORD_FIELDS}}},
        ]
    updates = {"operationType": "update", "documentKey._id": {"$gte": mailbox_id + ":", "$lt": mailbox_id + ";"}}
    changed = ("updatedFields", "removedFields", "truncatedArrays")
    return [
        {"$match": {"$or": [inserts, updates]}},
        {
            "$project": {
                "operationType": 1,
                **{f"fullDocument.{f}": 1 for f in _RECORD_FIELDS},
                **{f"updateDescription.{f}": 1 for f in changed},
            }
        },
    ]


def is_label_change(event: Mapping[str, Any]) -> bool:
    """Whether an update event changed the message's ``tags`` or ``folders``."""
    change = event.get("updateDescription") or {}
    fields = [*(change.get("updatedFields") or {}), *(change.get("removedFields") or ())]
    fields += [str(t.get("field")) for t in change.get("truncatedArrays") or () if isinstance(t, Mapping)]
    return any(str(f).split(".", 1)[0] in _LABEL_FIELDS for f in fields)


def feed_item(message: Mapping[str, Any], kind: str = "stored") -> FeedItem:
    """The record of one ``messages`` document (a change event's ``fullDocument``, or a backfill row)."""
    sender = message.get("from")
    return FeedItem(
        message_id=str(message["messageId"]),
        thread_id=str(message["threadId"]),
        ts=int(message["ts"]),
        subject=message.get("subject"),
        sender=sender.get("email") if isinstance(sender, Mapping) else None,
        for_ai=message.get("forAI"),
        kind=kind,
        tags=tuple(row_tags(message)),
        folders=tuple(row_tags(message, "folders")),
    )


def stream_position(token: Mapping[str, Any]) -> dict[str, Any]:
    return {"stream": dict(token)}


def backfill_position(token: Mapping[str, Any], after: tuple[int, str] | None) -> dict[str, Any]:
    return {"backfill": {"stream": dict(token), "after": None if after is None else [int(after[0]), after[1]]}}


def backfill_filter(mailbox_id: str, after: Sequence[Any] | None) -> dict[str, Any]:
    """The inbox rows strictly after ``after`` (``[ts, messageKey]``), oldest first."""
    base: dict[str, Any] = {"mailboxId": mailbox_id}
    if after is None:
        return base
    ts, key = int(after[0]), str(after[1])
    # the plain ``ts`` bound lets the index scan start at the position instead of the mailbox's start
    return {**base, "ts": {"$gte": ts}, "$or": [{"ts": {"$gt": ts}}, {"messageKey": {"$gt": key}}]}


def checkpoint_document(mailbox_id: str, consumer: str, position: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_id": checkpoint_id(mailbox_id, consumer),
        "mailboxId": mailbox_id,
        "consumer": consumer,
        "position": dict(position),
        "updatedAt": dt.datetime.now(dt.UTC),
    }
