"""The statements on the IMAP sync's records of one mailbox: ``imap_sources`` (where a stored
message was seen) and ``imap_folders`` (each folder's position). What ``aecs_mongo/mail/imap.py``
reads and writes; the documents, ids and plans are ``pure/imap_records.py``'s.

Reached as ``store.imap_records`` (``AsyncImapRecords``); every statement is scoped to the
store's mailbox or to a record id made from it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.errors import BulkWriteError

from ..pure.imap_records import FOLDERS, SOURCES
from .context import AsyncStoreContext
from .statements import to_list

__all__ = ["AsyncImapRecords"]

_DUPLICATE_KEY = 11000


class AsyncImapRecords:
    """The IMAP source records and folder positions of the store's mailbox."""

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self._ctx = ctx
        self._sources = ctx.db[SOURCES]
        self._folders = ctx.db[FOLDERS]

    # --- source records ---------------------------------------------------------------------------

    async def sources_of(self, message_key: str) -> list[dict[str, Any]]:
        """``account``, ``folder``, ``uidvalidity``, ``uid`` of every record of one message."""
        selector = {"mailboxId": self._ctx.mailbox_id, "messageKey": message_key}
        projection = {"_id": 0, "account": 1, "folder": 1, "uidvalidity": 1, "uid": 1}
        return await to_list(self._sources.find(selector, projection))

    async def flags_in(
        self, account: str, folder: str, uidvalidity: int, uids: tuple[int, int] | Sequence[int]
    ) -> list[dict[str, Any]]:
        """``_id``, ``messageId``, ``flags``, ``uid`` of a folder's records for ``uids``: an
        inclusive range ``(first, last)`` or a list of UIDs (on ``aecs_imap_sources_folder``)."""
        where = {"mailboxId": self._ctx.mailbox_id, "account": account, "folder": folder, "uidvalidity": uidvalidity}
        wanted = {"$gte": uids[0], "$lte": uids[1]} if isinstance(uids, tuple) else {"$in": list(uids)}
        cursor = self._sources.find({**where, "uid": wanted}, {"messageId": 1, "flags": 1, "uid": 1})
        return await to_list(cursor.hint("aecs_imap_sources_folder"))

    async def set_flags(self, record_ids: Sequence[str], flags: Sequence[str]) -> None:
        """Record ``flags`` as what the server last gave for the records ``record_ids``."""
        await self._sources.update_many({"_id": {"$in": list(record_ids)}}, {"$set": {"flags": list(flags)}})

    async def add_sources(self, documents: Sequence[Mapping[str, Any]]) -> None:
        """Insert source records; one already there (same ``_id``: same server position) is
        left as it is."""
        try:
            await self._sources.insert_many([dict(d) for d in documents], ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if not errors or any(e.get("code") != _DUPLICATE_KEY for e in errors):
                raise

    async def drop_other_generations(self, account: str, folder: str, uidvalidity: int) -> None:
        """Remove a folder's records under any UIDVALIDITY but ``uidvalidity`` (it was recreated)."""
        await self._sources.delete_many(
            {
                "mailboxId": self._ctx.mailbox_id,
                "account": account,
                "folder": folder,
                "uidvalidity": {"$ne": uidvalidity},
            }
        )

    # --- folder positions -------------------------------------------------------------------------

    async def positions(self, account: str | None = None) -> list[dict[str, Any]]:
        """The folder positions of the mailbox (of one account when given), without ``_id``."""
        selector: dict[str, Any] = {"mailboxId": self._ctx.mailbox_id}
        if account is not None:
            selector["account"] = account
        return await to_list(self._folders.find(selector, {"_id": 0}))

    async def position(self, folder_id: str) -> dict[str, Any] | None:
        """One folder's position (``pure/imap_records.folder_id``), or None."""
        found: dict[str, Any] | None = await self._folders.find_one({"_id": folder_id})
        return found

    async def save_position(self, document: Mapping[str, Any]) -> None:
        """Write a folder's position document (``folder_document``) over the one there."""
        await self._folders.replace_one({"_id": document["_id"]}, dict(document), upsert=True)

    async def advance(self, folder_id: str, uidvalidity: int, uid: int) -> None:
        """Move a folder's position up to ``uid`` (never down), if it is still of ``uidvalidity``."""
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        await self._folders.update_one(
            {"_id": folder_id, "uidvalidity": uidvalidity}, {"$max": {"uid": uid}, "$set": {"updatedAt": now}}
        )

    async def set_modseq(self, folder_id: str, uidvalidity: int, modseq: int | None) -> None:
        """Record the folder's HIGHESTMODSEQ as of which its flags are in the store (None: unset)."""
        change = {"$set": {"modseq": modseq}} if modseq is not None else {"$unset": {"modseq": ""}}
        await self._folders.update_one({"_id": folder_id, "uidvalidity": uidvalidity}, change)
