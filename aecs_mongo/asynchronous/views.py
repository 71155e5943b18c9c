"""The reads of one mailbox that the command line shows beside the store's own: thread summaries
for a page of search hits, threads by a short id, the message count, the copies an export
leaves out. Reached as ``store.views`` (``AsyncMailboxViews``), so the command handlers name
no collection.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Sequence
from typing import Any

from ..pure import tags as tag_reads
from ..pure.keys import doc_id, thread_key
from ..pure.lifecycle import export_filter
from .context import AsyncStoreContext
from .statements import resolve, to_list

__all__ = ["AsyncMailboxViews"]

_SUMMARY_FIELDS = {
    "_id": 0,
    "threadId": 1,
    "subject": 1,
    "messageCount": 1,
    "firstTs": 1,
    "lastTs": 1,
    "firstMessageKey": 1,
    "lastMessageKey": 1,
    "tags": 1,
}


class AsyncMailboxViews:
    """The command line's extra reads of the store's mailbox."""

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self._ctx = ctx

    async def message_count(self) -> int:
        """How many messages the mailbox holds (one index count)."""
        return int(await self._ctx.messages.count_documents({"mailboxId": self._ctx.mailbox_id}))

    async def thread_summaries(self, thread_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The summaries of these threads (``threadId``, ``subject``, ``messageCount``, first
        and last ``Ts`` and message keys, ``tags``), in the order given, those not stored left
        out; a summary written before threads kept their tags gets its messages' tags."""
        if not thread_ids:
            return []
        box = self._ctx.mailbox_id
        ids = [doc_id(box, thread_key(t)) for t in thread_ids]
        rows = await to_list(self._ctx.threads.find({"_id": {"$in": ids}}, _SUMMARY_FIELDS))
        summaries = {t["threadId"]: t for t in rows}
        found = [summaries[t] for t in thread_ids if t in summaries]
        keys = [thread_key(t["threadId"]) for t in found if not isinstance(t.get("tags"), list)]
        tags: dict[str, list[str]] = {}
        if keys:
            messages = self._ctx.messages
            probe = messages.find(tag_reads.tagged_probe(box), {"_id": 1}, limit=1)
            if await to_list(probe.hint(tag_reads.TAGGED_PROBE_HINT)):
                rows = await to_list(
                    messages.find(tag_reads.thread_tags_filter(box, keys), tag_reads.THREAD_TAGS_PROJECTION)
                )
                tags = tag_reads.thread_tags_union(rows)
        return [{**t, "tags": tag_reads.row_tags(t) or tags.get(thread_key(t["threadId"]), [])} for t in found]

    async def threads_by_prefix(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        """``threadId`` and ``subject`` of at most ``limit`` threads whose key starts with
        ``prefix`` (hex): one read on the ``_id`` index (an anchored prefix of ``<mailbox>:<key>``)."""
        box = self._ctx.mailbox_id
        selector = {"mailboxId": box, "_id": {"$regex": "^" + re.escape(f"{box}:{prefix}")}}
        return await to_list(self._ctx.threads.find(selector, {"threadId": 1, "subject": 1}).limit(limit))

    async def variant_copies(self, since: _dt.datetime | None, until: _dt.datetime | None) -> int:
        """The other copies (variants) of the messages ``since <= ts < until``: what an export
        without variants leaves out (one aggregation over their ``variantHashes``)."""
        selector = export_filter(self._ctx.mailbox_id, since, until)
        pipeline: list[dict[str, object]] = [
            {"$match": {**selector, "variantHashes.0": {"$exists": True}}},
            {"$group": {"_id": None, "copies": {"$sum": {"$size": "$variantHashes"}}}},
        ]
        rows = await to_list(await resolve(self._ctx.messages.aggregate(pipeline)))
        return int(rows[0]["copies"]) if rows else 0
