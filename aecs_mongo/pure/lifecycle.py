"""A mailbox's life after delivery, as data: what ``delete``, ``expire`` and ``erase_mailbox`` remove.

Pure: no I/O. ``asynchronous/deletion.py`` (and its generated twin) run these
plans against the server; the store's three deleting methods all go through them, so every tier
is handled in one place.

:data:`DATA_COLLECTIONS` is the one registry of what the store writes as data, with how a
mailbox's documents are selected there by an index (the ``_id`` of every per-mailbox document
starts with ``<mailboxId>:``; GridFS keys start with the mailbox's blob root
``aecs/<sha256(mailboxId)>/``). A new collection of mailbox data goes here, or the erase test
(which scans every collection of the database) fails. One tier lives outside the database: the
local search index (``search_index=``, a SQLite file). The deletion core clears it after each
batch's ``messages`` delete (``asynchronous/indexing.py``: ``after_delete``; the erase drops the
mailbox's tables and position with ``after_erase``), and an index that missed a deletion (made by
a store without it) learns it from the change stream or its next reconcile, its hits being
checked against ``messages`` meanwhile.

Order, so that an interruption (SIGKILL) at any moment is finished by running the same call again:

- ``delete`` and ``expire``, per batch of messages: the thread summaries first (recomputed from
  the members that stay), then the message's other tiers, the ``messages`` document last. A
  killed run leaves messages that are still selected by the next run, which redoes the batch.
- ``erase_mailbox``: every collection swept in registry order (``messages`` first, so readers
  stop seeing the mail at once; blobs last), pass after pass until a whole pass finds nothing;
  a sweep selects by mailbox, not by message, so a re-run also removes what an interrupted run
  left behind, and a pass removes what a writer stored during the one before.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from .change_marks import MARKS_COLLECTION
from .extents import EXTENTS_COLLECTION
from .feed import CHECKPOINTS_COLLECTION
from .indexes import BLOCKS_COLLECTION, VECTORS_COLLECTION
from .keys import blob_prefix, part_key
from .part_records import PARTS_COLLECTION
from .variants import variant_blob_key

__all__ = [
    "DATA_COLLECTIONS",
    "DEFAULT_BATCH",
    "EXPORT_EXTERNAL",
    "EXPORT_PAGE",
    "EXPORT_PAGE_BYTES",
    "EXTERNAL_BLOBS",
    "MAX_ERASE_PASSES",
    "MESSAGE_FIELDS",
    "RAW_NAMES",
    "DataCollection",
    "EraseReport",
    "ExpireReport",
    "ExportedCopy",
    "batches",
    "blob_keys",
    "blob_metadata_filter",
    "byte_pages",
    "check_batch_size",
    "check_before",
    "expire_filter",
    "export_filter",
    "id_range_filter",
    "mailbox_blob_root",
    "part_keys",
    "raw_copy_keys",
    "raw_name",
    "recorded_size",
    "summary_writes",
    "sweep_selector",
    "ts_bound",
]

#: The name under which a report counts the blobs removed from a file or object store (GridFS
#: blobs are counted as the bucket's ``files`` documents).
EXTERNAL_BLOBS = "blobs"
#: Documents per statement: what one ``find`` batch returns and one ``delete`` names.
DEFAULT_BATCH = 1000
#: An erase repeats its sweeps until one finds nothing (two passes when no writer stores meanwhile).
MAX_ERASE_PASSES = 4
#: Export: messages per page (their documents, a few hundred bytes each), and the most blob bytes
#: read in one statement (a larger message alone).
EXPORT_PAGE = 500
EXPORT_PAGE_BYTES = 16 * 1024 * 1024
#: Export from a file or object store: the copies one ``get_many`` fetches at once.
EXPORT_EXTERNAL = 32
#: The fields of a ``messages`` document the deletion core needs.
MESSAGE_FIELDS: dict[str, int] = {
    "_id": 1,
    "messageKey": 1,
    "threadKey": 1,
    "blobPrefix": 1,
    "blobs": 1,
    "variantHashes": 1,
    "rawParts": 1,
}

#: the names a message's first raw copy is stored under: whole, or as a pack of its parts
#: (``raw_parts.py``)
RAW_NAMES = ("raw.eml", "raw.pack")

T = TypeVar("T")
Scope = Literal["message", "mailbox", "blob"]
Select = Literal["mailboxId", "id_range", "blob_files", "blob_chunks"]


@dataclass(frozen=True)
class DataCollection:
    """One collection the store writes mailbox data to.

    ``scope``: ``message`` (one document per message, removed with it: ``by`` names how, ``_id``
    equal to the message's or ``messageKey`` beside ``mailboxId``), ``mailbox`` (documents of the
    mailbox as a whole: removed by the erase; threads are recomputed by delete and expire) or
    ``blob`` (GridFS, under the message's blob prefix). ``select`` is how the erase finds the
    mailbox's documents, and ``hint`` the index that answers it. ``range_key``: the erase deletes
    each batch as a key range of that field (GridFS keys of one mailbox are contiguous), which
    the test server runs about ten times faster than the same documents named by ``$in``.
    """

    name: str
    scope: Scope
    select: Select
    hint: str | list[tuple[str, int]] | None = None
    by: Literal["_id", "messageKey", "blob"] = "_id"
    range_key: str | None = None

    def for_bucket(self, bucket_name: str) -> DataCollection:
        name = self.name.format(bucket=bucket_name)
        return DataCollection(name, self.scope, self.select, self.hint, self.by, self.range_key)


_ID_INDEX = [("_id", 1)]

#: Every collection of mailbox data, in erase order: the primary records first, blobs last.
DATA_COLLECTIONS: tuple[DataCollection, ...] = (
    DataCollection("messages", "message", "mailboxId", "aecs_messages_inbox"),
    DataCollection("threads", "mailbox", "mailboxId", "aecs_threads_recent"),
    # the test server plans an ``_id`` range as a collection scan unless hinted to the _id index
    DataCollection("bodies", "message", "id_range", _ID_INDEX),
    DataCollection("uidls", "message", "mailboxId", "aecs_uidls_mailbox", by="messageKey"),
    DataCollection(VECTORS_COLLECTION, "message", "id_range", _ID_INDEX),
    DataCollection(BLOCKS_COLLECTION, "mailbox", "mailboxId", "aecs_vector_blocks_mailbox"),
    DataCollection(CHECKPOINTS_COLLECTION, "mailbox", "id_range", _ID_INDEX),
    # the mailbox's change mark, where there are no change streams (change_marks.py)
    DataCollection(MARKS_COLLECTION, "mailbox", "id_range", _ID_INDEX),
    # where the mailbox's mail is: its newest ts (extents.py)
    DataCollection(EXTENTS_COLLECTION, "mailbox", "id_range", _ID_INDEX),
    # written by the IMAP import: one per message, and per-folder state of the mailbox;
    # their indexes lead with mailboxId, as every index of the store does
    DataCollection("imap_sources", "message", "mailboxId", by="messageKey"),
    DataCollection("imap_folders", "mailbox", "mailboxId"),
    # the ingest record of file sources: kept by delete and expire, so that a removed
    # message is not ingested again from a file that is still there
    DataCollection("file_sources", "mailbox", "mailboxId"),
    # who holds each part kept once per mailbox (part_records.py); the parts' blobs are under
    # the mailbox's blob root
    DataCollection(PARTS_COLLECTION, "mailbox", "id_range", _ID_INDEX),
    DataCollection("{bucket}.files", "blob", "blob_files", "filename_1_uploadDate_1", by="blob", range_key="filename"),
    DataCollection("{bucket}.chunks", "blob", "blob_chunks", "files_id_1_n_1", by="blob", range_key="files_id"),
)


def mailbox_blob_root(mailbox_id: str) -> str:
    """``aecs/<sha256(mailboxId)>/``: every blob key of the mailbox starts with it."""
    return blob_prefix(mailbox_id, "")[:-1]


def _key_range(prefix: str) -> dict[str, str]:
    return {"$gte": prefix, "$lt": prefix[:-1] + chr(ord(prefix[-1]) + 1)}


def id_range_filter(mailbox_id: str) -> dict[str, Any]:
    """Every document of the mailbox in a collection whose ``_id`` is ``<mailboxId>:<key>``, as
    an ``_id`` range (the range alone also holds the ids of a mailbox named
    ``"<mailbox_id>:..."``: the field decides)."""
    return {"_id": _key_range(mailbox_id + ":"), "mailboxId": mailbox_id}


def sweep_selector(collection: DataCollection, mailbox_id: str) -> dict[str, Any]:
    """The filter that selects every document of the mailbox in ``collection``, on an index.

    ``files`` by ``filename`` (which is the key; the test server plans an ``_id`` range as a
    collection scan), ``chunks`` by ``files_id``: both a key range under the mailbox's blob root.
    """
    if collection.select == "mailboxId":
        return {"mailboxId": mailbox_id}
    if collection.select == "id_range":
        return id_range_filter(mailbox_id)
    if collection.select == "blob_files":
        return {"filename": _key_range(mailbox_blob_root(mailbox_id))}
    return {"files_id": _key_range(mailbox_blob_root(mailbox_id))}


def blob_keys(message: Mapping[str, Any]) -> list[str]:
    """Every blob key a ``messages`` document names: its blobs (raw.eml, body.html, att/N,
    body.json) and the variants kept beside it."""
    prefix = message["blobPrefix"]
    keys = [prefix + name for name in message.get("blobs") or ()]
    keys += [variant_blob_key(prefix, sha) for sha in message.get("variantHashes") or ()]
    return keys


def blob_metadata_filter(mailbox_id: str, message_keys: list[str]) -> dict[str, Any]:
    """The GridFS ``files`` of given messages, by the metadata each upload carries (index
    ``aecs_files_message``)."""
    return {"metadata.mailboxId": mailbox_id, "metadata.messageKey": {"$in": message_keys}}


def raw_name(message: Mapping[str, Any]) -> str | None:
    """The name a message's first raw copy is stored under (``raw.eml`` or ``raw.pack``), or
    None: stored without raw bytes (from a NormalizedEmail without ``rawFull``)."""
    names = message.get("blobs") or ()
    return next((name for name in RAW_NAMES if name in names), None)


def part_keys(message: Mapping[str, Any], mailbox_id: str) -> list[str]:
    """The keys of the parts a message's pack holds (kept once per mailbox, ``raw_parts.py``)."""
    return [part_key(mailbox_id, sha) for sha in message.get("rawParts") or ()]


def raw_copy_keys(message: Mapping[str, Any], variants: bool) -> list[tuple[int, str]]:
    """``(copy number, blob key)`` of a message's raw copies: 0 the first (``raw.eml`` or
    ``raw.pack``, when stored), then with ``variants`` each other copy in the order it came
    (``get_raw_variants``)."""
    prefix = message["blobPrefix"]
    name = raw_name(message)
    keys = [(0, prefix + name)] if name is not None else []
    if variants:
        keys += [(n, variant_blob_key(prefix, sha)) for n, sha in enumerate(message.get("variantHashes") or (), 1)]
    return keys


def recorded_size(message: Mapping[str, Any]) -> int | None:
    """The length of a message's first raw copy as its document records it (``sizeBytes``,
    ``len`` of the bytes stored as ``raw.eml``); None where it says nothing to check chunks
    against: no raw copy, no record, or an empty copy (no chunks to tell present from gone)."""
    size = message.get("sizeBytes")
    if "raw.eml" not in (message.get("blobs") or ()) or isinstance(size, bool) or not isinstance(size, int):
        return None
    return size if size > 0 else None


def byte_pages(
    items: Sequence[T], size: Callable[[T], int], limit: int = EXPORT_PAGE_BYTES, most: int | None = None
) -> list[list[T]]:
    """``items`` cut in consecutive groups of at most ``limit`` bytes (an item larger alone) and,
    given ``most``, at most that many items."""
    groups: list[list[T]] = []
    total = 0
    for item in items:
        n = size(item)
        if not groups or total + n > limit or (most is not None and len(groups[-1]) >= most):
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += n
    return groups


def check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int, not {type(batch_size).__name__}")
    if not 1 <= batch_size <= 10_000:
        raise ValueError("batch_size must be between 1 and 10000")
    return batch_size


def check_before(before: object, name: str = "before") -> _dt.datetime:
    """An aware datetime; a naive one is a ``TypeError`` (its time zone would be a guess)."""
    if not isinstance(before, _dt.datetime):
        raise TypeError(f"{name} must be a datetime, not {type(before).__name__}")
    if before.tzinfo is None or before.tzinfo.utcoffset(before) is None:
        raise TypeError(f"{name} must be an aware datetime (with a time zone), not a naive one")
    return before


def ts_bound(moment: _dt.datetime) -> int:
    """The first whole second at or after ``moment``: ``ts < ts_bound(m)`` is "earlier than m"
    for the integer sort key ``ts``."""
    return math.ceil(moment.timestamp())


def expire_filter(mailbox_id: str, before: _dt.datetime) -> dict[str, Any]:
    """The messages ``expire(before)`` removes: sort key ``ts`` earlier than ``before`` (inbox index)."""
    return {"mailboxId": mailbox_id, "ts": {"$lt": ts_bound(check_before(before))}}


def export_filter(mailbox_id: str, since: _dt.datetime | None, until: _dt.datetime | None) -> dict[str, Any]:
    """The messages an export reads: ``since <= ts < until`` (either open), on the inbox index."""
    selector: dict[str, Any] = {"mailboxId": mailbox_id}
    bounds: dict[str, int] = {}
    if since is not None:
        bounds["$gte"] = ts_bound(check_before(since, "since"))
    if until is not None:
        bounds["$lt"] = ts_bound(check_before(until, "until"))
    if bounds:
        selector["ts"] = bounds
    return selector


def batches(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _RemovedCounts:
    """The counts both reports derive from ``removed`` (documents per collection)."""

    removed: dict[str, int]

    @property
    def messages(self) -> int:
        return self.removed.get("messages", 0)

    @property
    def blobs(self) -> int:
        return sum(n for name, n in self.removed.items() if name.endswith(".files") or name == EXTERNAL_BLOBS)


@dataclass
class EraseReport(_RemovedCounts):
    """What ``erase_mailbox`` removed: documents per collection (GridFS ``files`` are the blobs).

    ``passes``: sweeps of every collection, until one found nothing: 2 when nothing was stored
    during the erase (1 for a mailbox that was already empty). ``remaining``: messages in the
    mailbox after ``MAX_ERASE_PASSES`` passes that all found something (a writer kept storing; 0
    otherwise).
    """

    mailbox_id: str
    removed: dict[str, int] = field(default_factory=dict)
    passes: int = 0
    remaining: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.removed.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "mailboxId": self.mailbox_id,
            "removed": dict(self.removed),
            "messages": self.messages,
            "blobs": self.blobs,
            "total": self.total,
            "passes": self.passes,
            "remaining": self.remaining,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class ExpireReport(_RemovedCounts):
    """What ``expire(before)`` removed (or, with ``dry_run``, would remove): documents per
    collection, and thread summaries recomputed (``threadsUpdated``) or removed as empty."""

    mailbox_id: str
    before: _dt.datetime
    dry_run: bool = False
    removed: dict[str, int] = field(default_factory=dict)
    threads_updated: int = 0
    threads_removed: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mailboxId": self.mailbox_id,
            "before": self.before,
            "dryRun": self.dry_run,
            "messages": self.messages,
            "blobs": self.blobs,
            "removed": dict(self.removed),
            "threadsUpdated": self.threads_updated,
            "threadsRemoved": self.threads_removed,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class ExportedCopy:
    """One raw copy of a stored message, as an export writes it: ``copy`` 0 is the first copy
    (``get_raw``), 1... the variants in the order they came. ``ts`` is the sort key (epoch s);
    ``tags`` the message's (``messages.tags``), which a Maildir export writes as flags."""

    message_id: str
    data: bytes
    ts: int
    copy: int = 0
    sender: str | None = None
    tags: tuple[str, ...] = ()


def summary_writes(
    mailbox_id: str, thread_keys: Sequence[str], summaries: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The thread summaries to replace and the thread keys left empty (to remove)."""
    kept = [dict(summaries[t]) for t in thread_keys if t in summaries]
    empty = [t for t in thread_keys if t not in summaries]
    return kept, empty
