"""The statements on the file records (``file_sources``) of one mailbox: what ``sync_files``
(``aecs_mongo/mail/follow.py``) reads and writes to follow Maildir folders, directories and mbox
files. The documents, the names and the re-run plan are ``pure/file_records.py``'s.

Reached as ``store.file_records`` (``AsyncFileRecords``); every statement is scoped to the
store's mailbox, on the indexes ``aecs_file_sources_dir`` and ``aecs_file_sources_message``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pymongo import DeleteOne, InsertOne, ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError

from ..pure import file_records as fr
from ..pure.imap_records import SOURCES as IMAP_SOURCES
from .context import AsyncStoreContext
from .statements import to_list

__all__ = ["AsyncFileRecords"]

#: ids in one ``$in`` read
_CHUNK = 1000
_DUPLICATE_KEY = 11000


class AsyncFileRecords:
    """The file records of the store's mailbox (``pure/file_records.py`` says what each holds)."""

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self._ctx = ctx
        self._records = ctx.db[fr.COLLECTION]

    async def directories(self, root: Any) -> list[dict[str, Any]]:
        """The directory records under ``root`` (as ``dump_name`` stores it), without their
        names snapshots."""
        selector = {"mailboxId": self._ctx.mailbox_id, "root": root, "dir": fr.DIRS}
        return await to_list(self._records.find(selector, {"names": 0}))

    async def name_snapshots(self, record_ids: Sequence[str]) -> dict[str, Any]:
        """The names snapshot of each directory record in ``record_ids``, by ``_id``."""
        rows = await to_list(self._records.find({"_id": {"$in": list(record_ids)}}, {"names": 1}))
        return {r["_id"]: r.get("names") for r in rows}

    async def in_directories(self, root: Any, directories: Iterable[Any]) -> list[dict[str, Any]]:
        """Every record of these directories (``dump_name`` forms) under ``root``: one query."""
        selector = {"mailboxId": self._ctx.mailbox_id, "root": root, "dir": {"$in": list(directories)}}
        return await to_list(self._records.find(selector))

    async def by_ids(self, record_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of ``record_ids`` that exist, read by ``_id`` in chunks."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(record_ids), _CHUNK):
            chunk = list(record_ids[start : start + _CHUNK])
            found += await to_list(self._records.find({"_id": {"$in": chunk}}))
        return found

    async def messages_in(self, root: Any, directory: Any) -> list[dict[str, Any]]:
        """``_id``, ``messageKey`` and ``messageId`` of the records in one directory (an mbox's)."""
        selector = {"mailboxId": self._ctx.mailbox_id, "root": root, "dir": directory}
        return await to_list(self._records.find(selector, {"messageKey": 1, "messageId": 1}))

    async def drop_directory(self, root: Any, directory: Any) -> None:
        """Remove every record of one directory (an mbox's messages)."""
        await self._records.delete_many({"mailboxId": self._ctx.mailbox_id, "root": root, "dir": directory})

    async def gone_marks(self, roots: Sequence[Any]) -> list[dict[str, Any]]:
        """The ``gone`` marks under ``roots``: ``_id``, ``messageKey``, ``messageId``."""
        selector = {"mailboxId": self._ctx.mailbox_id, "root": {"$in": list(roots)}, "dir": fr.GONE_DIR}
        return await to_list(self._records.find(selector, {"messageKey": 1, "messageId": 1}))

    async def still_held(self, message_keys: Sequence[str]) -> set[str]:
        """The message keys of ``message_keys`` a copy of which is still recorded: a file record
        (not a ``gone`` mark) or an IMAP source record of the mailbox."""
        selector = {"mailboxId": self._ctx.mailbox_id, "messageKey": {"$in": list(message_keys)}}
        kept = set(await self._records.distinct("messageKey", {**selector, "kind": {"$ne": "gone"}}))
        kept |= set(await self._ctx.db[IMAP_SOURCES].distinct("messageKey", selector))
        return kept

    async def delete(self, record_ids: Sequence[str]) -> None:
        """Remove the records of ``record_ids``."""
        await self._records.delete_many({"_id": {"$in": list(record_ids)}})

    async def write(self, writes: Sequence[fr.RecordWrite]) -> None:
        """Apply ``writes`` in one unordered bulk; an insert that finds its record there (another
        run wrote it meanwhile, or an earlier one was interrupted after it) is written again as a
        replacement. Any other refusal is raised as the driver gives it."""
        if not writes:
            return
        try:
            await self._records.bulk_write([_statement(w) for w in writes], ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors") or []
            if any(e.get("code") != _DUPLICATE_KEY for e in errors):
                raise
            again = [e["op"] for e in errors]  # the documents the inserts carried
            await self._records.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in again], ordered=False
            )


def _statement(write: fr.RecordWrite) -> Any:
    if write.op == "insert":
        return InsertOne(dict(write.doc))
    if write.op == "replace":
        return ReplaceOne({"_id": write.record_id}, dict(write.doc), upsert=True)
    if write.op == "set":
        return UpdateOne({"_id": write.record_id}, {"$set": dict(write.doc)})
    return DeleteOne({"_id": write.record_id})
