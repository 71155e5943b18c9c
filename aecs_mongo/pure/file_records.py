"""The ingest record of file sources (Maildir, directories, mbox): documents and the re-run plan.

No I/O here; ``aecs_mongo/mail/follow.py`` lists the files and applies the plan, reading and
writing the records through the store (``asynchronous/file_records.py``, ``store.file_records``).
One collection, ``file_sources``, one document per thing a re-run compares (its ``_id``:
``<mailboxId>:<sha256 of [root, key]>``; ``root`` is the absolute path the source was given as,
``key`` what identifies the thing under it):

- ``maildir``: one Maildir message. ``key`` is its unique base name, the file name without the
  ``:2,...`` info (so a rename that changes the flags, or a move between ``new/``, ``cur/`` and
  folders, keeps the record), ``path`` the file's path under the root, ``dir`` its directory.
- ``file``: one message file of a plain directory (``.eml``, MH): ``key`` is its path.
- ``mbox``: one mbox file: ``key`` its path, ``offset`` where the last complete message read
  ends, ``headHash`` / ``tailHash`` the SHA-256 of the file's first block and of the block that
  ends at ``offset`` (an append leaves both as they were; a rewrite does not).
- ``mboxmsg``: one message of an mbox: ``key`` is ``<path>@<offset>``, ``path`` the mbox's.
- ``gone``: a message that lost a file record (its file gone, or replaced by other content):
  ``key`` is ``gone:<messageKey>``, ``dir`` ``gone:``; ``messageKey``, ``messageId``. A run with
  ``remove_missing`` removes the message when no other record (nor an IMAP record) holds it, and
  the mark either way; without it the marks stay, so a later run with it still knows them.
- ``dir``: one directory (``new``, ``cur`` of each Maildir folder, each plain directory):
  ``key`` is ``dir:<path>``, ``dir`` is ``dirs:``, ``mtimeNs`` a Maildir directory's modification
  time when it was listed (None when too recent to trust), ``files`` how many messages it held,
  ``names`` its file names then. A Maildir directory whose mtime is unchanged is not listed
  again: Maildir files are never written in place, and a delivery, a rename or a deletion
  changes the mtime. One that changed is listed and compared with ``names``: only the records of
  the names that came or went are read (by ``_id``).

Every file record carries ``size``, ``mtimeNs``, ``inode`` (what a re-run compares), and the
message it gave: ``messageKey``, ``messageId``, ``sha256`` (of the raw copy read), or
``skipped`` (why it is not a message: not mail, refused by the store) so it is not read again
while it is unchanged. Index ``aecs_file_sources_dir`` (mailboxId, root, dir) serves the re-run's
one bulk read per root (and its ``gone`` marks), ``aecs_file_sources_message`` (mailboxId,
messageKey) the question "is any copy of this message left".

The records are mailbox data (``pure/lifecycle.py``): ``erase_mailbox`` removes them. ``delete``
and ``expire`` leave them, so a message removed from the store is not ingested again from a file
that is still there (as the IMAP folder position does).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .flags import maildir_base
from .keys import doc_id

__all__ = [
    "COLLECTION",
    "DIRS",
    "GONE_DIR",
    "HASH_BLOCK",
    "MTIME_TRUST_COARSE_NS",
    "MTIME_TRUST_NS",
    "SNAPSHOT_LIMIT",
    "Kind",
    "Listed",
    "Plan",
    "RecordWrite",
    "delete_record",
    "dir_document",
    "dir_key",
    "dump_name",
    "file_document",
    "gone_document",
    "insert_record",
    "listing_changes",
    "load_name",
    "maildir_key",
    "mbox_document",
    "mbox_message_document",
    "mbox_message_key",
    "mtime_trusted",
    "plan",
    "record_id",
    "replace_record",
    "set_record_fields",
]

COLLECTION = "file_sources"
#: bytes hashed at the start of an mbox and before its known end, to tell an append from a rewrite
HASH_BLOCK = 4096
#: a directory modified less than this before it was listed is listed again next time: a change
#: after the listing within the same tick of the file system's clock would leave its mtime as it
#: was. Linux stamps files from a clock of 1-10 ms ticks; an mtime of whole seconds (ext3, FAT's
#: two seconds, some network file systems) gets :data:`MTIME_TRUST_COARSE_NS` instead.
MTIME_TRUST_NS = 50_000_000
MTIME_TRUST_COARSE_NS = 2_000_000_000


@dataclass(frozen=True)
class RecordWrite:
    """One write of a file record, as the store applies it (``AsyncFileRecords.write``):
    ``insert`` a new record (one found already there is replaced), ``replace`` a record (or
    insert it), ``set`` fields of a record, ``delete`` a record. ``doc``: the record, or the
    fields to set."""

    op: Literal["insert", "replace", "set", "delete"]
    record_id: str
    doc: Mapping[str, Any] = field(default_factory=dict)


def insert_record(doc: Mapping[str, Any]) -> RecordWrite:
    return RecordWrite("insert", doc["_id"], doc)


def replace_record(doc: Mapping[str, Any]) -> RecordWrite:
    return RecordWrite("replace", doc["_id"], doc)


def set_record_fields(record_id: str, fields: Mapping[str, Any]) -> RecordWrite:
    return RecordWrite("set", record_id, fields)


def delete_record(record_id: str) -> RecordWrite:
    return RecordWrite("delete", record_id)


def mtime_trusted(mtime_ns: int, now_ns: int) -> bool:
    """Whether a directory's mtime, read at ``now_ns`` (taken before the stat), may stand for
    its listing: every later change will give it another value."""
    whole_seconds = mtime_ns % 1_000_000_000 == 0
    return now_ns - mtime_ns > (MTIME_TRUST_COARSE_NS if whole_seconds else MTIME_TRUST_NS)


def int64(value: int) -> int:
    """A stat number as BSON can hold it (a signed 64-bit int): an unsigned 64-bit value over
    2**63 - 1 (an overlay or network file system's inode, a far-future mtime in nanoseconds)
    becomes its two's complement, so that it is stored and compared as the same number each run."""
    value &= 0xFFFF_FFFF_FFFF_FFFF
    return value - (1 << 64) if value >= 1 << 63 else value


Kind = Literal["maildir", "file", "mbox", "mboxmsg", "dir", "gone"]


def _hash(*parts: object) -> str:
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def record_id(mailbox_id: str, root: str, key: str) -> str:
    """``_id`` of one record: the mailbox and the hash of (root, key)."""
    return doc_id(mailbox_id, _hash(root, key))


def dump_name(name: str) -> str | bytes:
    """A file name as stored: the text, or its bytes where it is not valid UTF-8 (BSON strings are)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name)
    return name


def load_name(value: str | bytes) -> str:
    """The inverse of :func:`dump_name`."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


def maildir_key(name: str) -> str:
    """The record key of a Maildir message: its base name (``pure/flags.py``)."""
    return maildir_base(name)


def dir_key(path: str) -> str:
    return f"dir:{path}"


def mbox_message_key(path: str, offset: int) -> str:
    return f"{path}@{offset}"


@dataclass(frozen=True)
class Listed:
    """One file a listing found: its record key, path and directory under the root, and what a
    re-run compares (``size``/``mtime_ns`` are None for a Maildir file that was not stat'ed: a
    known Maildir name is identified by name and inode alone). The listing's ``order``."""

    kind: Literal["maildir", "file"]
    key: str
    path: str
    dir: str
    inode: int
    size: int | None = None
    mtime_ns: int | None = None
    order: int = field(default=0, compare=False)  # where the walk found it (messages are read in that order)


def _common(mailbox_id: str, root: str, kind: Kind, key: str, path: str, directory: str) -> dict[str, Any]:
    return {
        "_id": record_id(mailbox_id, root, key),
        "mailboxId": mailbox_id,
        "root": dump_name(root),
        "dir": dump_name(directory),
        "kind": kind,
        "key": dump_name(key),
        "path": dump_name(path),
    }


def file_document(
    mailbox_id: str,
    root: str,
    listed: Listed,
    *,
    message_key: str | None = None,
    message_id: str | None = None,
    sha256: str | None = None,
    skipped: str | None = None,
) -> dict[str, Any]:
    """The record of one message file (``maildir`` or ``file``)."""
    doc = _common(mailbox_id, root, listed.kind, listed.key, listed.path, listed.dir)
    doc.update(size=listed.size, mtimeNs=listed.mtime_ns, inode=listed.inode)
    return _message_fields(doc, message_key, message_id, sha256, skipped)


def _message_fields(
    doc: dict[str, Any], message_key: str | None, message_id: str | None, sha256: str | None, skipped: str | None
) -> dict[str, Any]:
    if skipped is not None:
        doc["skipped"] = skipped[:500]
    else:
        doc.update(messageKey=message_key, messageId=message_id, sha256=sha256)
    return doc


def mbox_message_document(
    mailbox_id: str,
    root: str,
    path: str,
    directory: str,
    offset: int,
    *,
    message_key: str | None = None,
    message_id: str | None = None,
    sha256: str | None = None,
    skipped: str | None = None,
) -> dict[str, Any]:
    """The record of one mbox message (``mboxmsg``), at ``offset`` in the mbox at ``path``."""
    doc = _common(mailbox_id, root, "mboxmsg", mbox_message_key(path, offset), path, directory)
    doc["offset"] = offset
    return _message_fields(doc, message_key, message_id, sha256, skipped)


def mbox_document(
    mailbox_id: str,
    root: str,
    path: str,
    directory: str,
    *,
    size: int | None,
    mtime_ns: int | None,
    inode: int,
    offset: int,
    head_hash: str,
    tail_hash: str,
    messages: int,
) -> dict[str, Any]:
    """The record of one mbox file: read up to ``offset`` (``messages`` entries so far);
    ``size`` and ``mtime_ns`` None until it was read to its end."""
    doc = _common(mailbox_id, root, "mbox", path, path, directory)
    doc.update(
        size=size,
        mtimeNs=mtime_ns,
        inode=inode,
        offset=offset,
        headHash=head_hash,
        tailHash=tail_hash,
        messages=messages,
    )
    return doc


GONE_DIR = "gone:"


def gone_document(mailbox_id: str, root: str, message_key: str, message_id: str) -> dict[str, Any]:
    """The mark of a message that lost a record under ``root`` (for ``remove_missing``)."""
    doc = _common(mailbox_id, root, "gone", f"gone:{message_key}", "", GONE_DIR)
    doc.update(messageKey=message_key, messageId=message_id)
    return doc


#: the ``dir`` of every directory record: a re-run reads them all in one query on the index
DIRS = "dirs:"
#: a Maildir directory of more names than this keeps no snapshot: its records are read instead
SNAPSHOT_LIMIT = 100_000


def dir_document(
    mailbox_id: str, root: str, path: str, mtime_ns: int | None, files: int, names: Sequence[str] | None = None
) -> dict[str, Any]:
    """The record of one listed directory (``mtime_ns`` None: list it again next time);
    ``names``: a Maildir directory's file names as listed (a re-run compares its listing with
    them and reads only the records of names that came or went), left out past
    :data:`SNAPSHOT_LIMIT`."""
    doc = _common(mailbox_id, root, "dir", dir_key(path), path, DIRS)
    doc.update(mtimeNs=mtime_ns, files=files)
    if names is not None and len(names) <= SNAPSHOT_LIMIT:
        doc["names"] = [dump_name(name) for name in names]
    return doc


def listing_changes(previous: Iterable[str | bytes], current: Iterable[str]) -> tuple[set[str], set[str]]:
    """(names listed now and not before, names listed before and not now)."""
    before = {load_name(name) for name in previous}
    now = set(current)
    return now - before, before - now


@dataclass
class Plan:
    """What a re-run does with the listed files of some directories against their records.

    ``new``: listed, no record: read and store. ``changed``: a file whose size,
    mtime or inode differs from its record (a Maildir file replaced under the same name):
    read again, its old record replaced. ``reread``: with ``rescan``, the files that match
    their record, read again all the same. ``moved``: (record, listed) of a Maildir message under
    another name or directory: its flags and folder follow, nothing is read. ``gone``: records
    whose file is not listed. ``same``: how many listed files match their record.
    """

    new: list[Listed] = field(default_factory=list)
    changed: list[tuple[Mapping[str, Any], Listed]] = field(default_factory=list)
    reread: list[Listed] = field(default_factory=list)  # ``rescan``: unchanged, read again all the same
    moved: list[tuple[Mapping[str, Any], Listed]] = field(default_factory=list)
    gone: list[Mapping[str, Any]] = field(default_factory=list)
    same: int = 0


def _differs(record: Mapping[str, Any], listed: Listed) -> bool:
    if record.get("inode") != listed.inode:
        return True
    if listed.kind == "maildir":
        return False  # a Maildir file is never written in place: name and inode identify it
    return record.get("size") != listed.size or record.get("mtimeNs") != listed.mtime_ns


def plan(listed: Iterable[Listed], records: Sequence[Mapping[str, Any]], *, rescan: bool = False) -> Plan:
    """Compare the files listed in some directories with the records of those directories.

    Every record of the directories must be in ``records`` (a Maildir move changes the mtime of
    both directories, so both are listed). ``rescan``: every listed file is read again.
    """
    by_key = {load_name(r["key"]): r for r in records if r.get("kind") in ("maildir", "file")}
    out = Plan()
    for item in listed:
        record = by_key.pop(item.key, None)
        if record is None:
            out.new.append(item)
        elif _differs(record, item):
            out.changed.append((record, item))
        elif load_name(record["path"]) != item.path:
            out.moved.append((record, item))
        elif rescan:
            out.reread.append(item)
        else:
            out.same += 1
    out.gone = list(by_key.values())
    return out
