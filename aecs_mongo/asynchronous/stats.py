"""The statistics of one mailbox's collections: the I/O behind ``stats()``.

The collections are the registry of mailbox data, ``pure/lifecycle.DATA_COLLECTIONS`` (the one
the deletion core sweeps), each counted by the registry's selector of the mailbox's documents;
so a new collection of mailbox data shows up here as soon as it is registered. Sizes come from
``collStats``, else the ``$collStats`` stage, else none (a server or driver that has neither:
each collection then says why in ``sizeError``).
"""

from __future__ import annotations

from typing import Any

from pymongo.errors import PyMongoError

from ..pure import lifecycle
from .context import AsyncStoreContext, resolve

__all__ = ["SIZE_KEYS", "collection_stats"]

#: What each collection's entry reports of its storage (None where the server does not say).
SIZE_KEYS = ("size", "storageSize", "totalIndexSize")
#: A server that refuses the command or stage, or a driver that lacks it
_UNSUPPORTED = (PyMongoError, NotImplementedError)


async def collection_stats(ctx: AsyncStoreContext) -> dict[str, Any]:
    """``database``, ``mailboxId``; ``collections``: for every registry collection (GridFS ones
    under ``bucket_name``), in registry order, ``mailbox`` (the mailbox's documents), ``total``
    (estimated, every mailbox), the sizes (and ``sizeError`` when the server gives none);
    ``sizesFrom``: which commands gave sizes; ``specVersions``: the mailbox's messages by the
    AECS-1 version they were normalized under."""
    db, mailbox_id, bucket_name = ctx.db, ctx.mailbox_id, ctx.settings.bucket_name
    existing = set(await db.list_collection_names())
    collections: dict[str, dict[str, Any]] = {}
    sources: set[str] = set()
    for collection in (c.for_bucket(bucket_name) for c in lifecycle.DATA_COLLECTIONS):
        entry: dict[str, Any] = {"mailbox": 0, "total": 0, **dict.fromkeys(SIZE_KEYS)}
        collections[collection.name] = entry
        if collection.name not in existing:
            continue
        handle = db[collection.name]
        entry["mailbox"] = await handle.count_documents(lifecycle.sweep_selector(collection, mailbox_id))
        entry["total"] = await handle.estimated_document_count()
        sizes, source = await _storage(db, collection.name)
        if sizes is None:
            entry["sizeError"] = source
        else:
            entry.update(sizes)
            sources.add(source)
    return {
        "database": db.name,
        "mailboxId": mailbox_id,
        "collections": collections,
        "sizesFrom": sorted(sources),
        "specVersions": await _spec_versions(db, mailbox_id) if "messages" in existing else {},
    }


async def _storage(db: Any, name: str) -> tuple[dict[str, Any] | None, str]:
    """Sizes of one collection and the command that gave them: ``collStats``, else
    ``$collStats``; else None and the error of ``collStats``."""
    try:
        stats = await db.command({"collStats": name})
        return {k: stats.get(k) for k in SIZE_KEYS}, "collStats"
    except _UNSUPPORTED as first:
        try:
            cursor = await resolve(db[name].aggregate([{"$collStats": {"storageStats": {}}}]))
            rows = [row async for row in cursor]
        except _UNSUPPORTED:
            return None, str(first)
        storage = rows[0].get("storageStats", {}) if rows else {}
        return {k: storage.get(k) for k in SIZE_KEYS}, "$collStats"


async def _spec_versions(db: Any, mailbox_id: str) -> dict[str, int]:
    """The mailbox's messages counted by ``specVersion``, in version order."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"mailboxId": mailbox_id}},
        {"$group": {"_id": "$specVersion", "count": {"$sum": 1}}},
        {"$sort": {"_id": 1}},
    ]
    cursor = await resolve(db["messages"].aggregate(pipeline))
    return {str(row["_id"]): int(row["count"]) async for row in cursor}
