"""The deletion core: the I/O behind ``delete``, ``expire`` and ``erase_mailbox``.

The plans (which collections, which filters, in which order) are in the pure
``pure/lifecycle.py``; this is the order of reads and writes. Every statement selects
on an index and names at most ``batch_size`` documents, so the number of statements grows with
the mailbox divided by the batch size, never with one round trip per message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from time import monotonic
from typing import Any

from ..pure import blobs, lifecycle
from ..pure.documents import fold_thread_summary
from ..pure.indexes import BLOCKS_COLLECTION, VECTORS_COLLECTION
from ..pure.keys import blob_prefix, doc_id, message_key
from ..pure.lifecycle import DataCollection, EraseReport, ExpireReport
from ..pure.part_records import PARTS_COLLECTION
from . import capabilities, embeddings, indexing, parts
from .changemarks import AsyncChange
from .context import AsyncStoreContext, log

__all__ = ["AsyncDeleter", "delete", "erase_mailbox", "expire"]

_SUMMARY_FIELDS = {"mailboxId": 1, "threadKey": 1, "threadId": 1, "ts": 1, "messageKey": 1, "subject": 1, "tags": 1}


class AsyncDeleter:
    """Removes messages from every tier of one mailbox, batch by batch, and tallies what it
    removed per collection. ``dry_run``: counts what it would remove and writes nothing.
    ``concern``: the durable write concern of the statement that completes each batch (the
    ``messages`` delete), or None (``capabilities.completion_concern``)."""

    def __init__(
        self,
        ctx: AsyncStoreContext,
        *,
        dry_run: bool = False,
        on_progress: Callable[[Mapping[str, int]], None] | None = None,
        concern: Any = None,
    ) -> None:
        self.ctx = ctx
        self.concern = concern
        self.db = ctx.db
        self.mailbox_id = ctx.mailbox_id
        self.dry_run = dry_run
        collections = [c.for_bucket(ctx.settings.bucket_name) for c in lifecycle.DATA_COLLECTIONS]
        # a file or object store is not in the database: its blobs go by prefix (``store``)
        self.gridfs = ctx.blobs.gridfs
        self.collections = [c for c in collections if self.gridfs or c.scope != "blob"]
        self.removed: dict[str, int] = {}
        self.threads_updated = 0
        self.threads_removed = 0
        self._recomputed: set[str] = set()
        self.on_progress = on_progress

    async def _remove(self, name: str, selector: Mapping[str, Any], *, completes: bool = False) -> int:
        """Delete (or, in a dry run, count) what ``selector`` matches; a long ``$in`` in parts.
        ``completes``: the statement that completes a batch (under the durable write concern)."""
        collection = self.ctx.completing(self.db[name], self.concern) if completes else self.db[name]
        count = 0
        for part in self.ctx.dialect.split_in(selector):
            if self.dry_run:
                count += int(await collection.count_documents(part))
            else:
                count += int((await collection.delete_many(part)).deleted_count)
        if count and not self.dry_run:
            self.ctx.samples.clear()  # the mailbox's sample for windowed reads no longer stands for it
        self.removed[name] = self.removed.get(name, 0) + count
        if self.on_progress is not None:
            self.on_progress(self.removed)
        return count

    def _by_ids(self, collection: DataCollection, ids: list[str]) -> dict[str, Any]:
        """``_id $in`` (with the shard key's prefix on a sharded cluster, for mailbox data)."""
        if collection.scope == "blob":
            return {"_id": {"$in": ids}}
        return self.ctx.by_ids(ids)

    # --- messages: delete and expire -----------------------------------------------------------

    async def delete_batch(
        self, messages: Sequence[Mapping[str, Any]], *, keep_from_ts: int | None = None, by_prefix: bool = False
    ) -> None:
        """Remove ``messages`` (documents with ``lifecycle.MESSAGE_FIELDS``) from every tier.

        Thread summaries first, recomputed once per run from the members that stay (those with
        ``ts >= keep_from_ts``, or all but these); then each per-message tier; the ``messages``
        documents last, so an interrupted batch is selected again by the next run.
        ``by_prefix``: blobs by each message's key range, which also takes leftovers of
        interrupted uploads (one statement per message: for ``delete``); else by the keys the
        documents name (one statement per batch).
        """
        if not messages:
            return
        if self.dry_run:
            await self._delete_once(messages, keep_from_ts, by_prefix)
            return

        # as a batch of writes: the driver retries a delete across a server restart, so the
        # batch's journaled last delete could complete on a server that lost its thread writes;
        # a batch the server restarted under is deleted again, its threads recomputed
        async def once() -> None:
            await self._delete_once(messages, keep_from_ts, by_prefix)

        async def again() -> None:
            self._recomputed.difference_update(m["threadKey"] for m in messages)
            await self._delete_once(messages, keep_from_ts, by_prefix)
            await self.ctx.journal_barrier(self.concern)  # its messages delete matched nothing

        # where there is no change stream (changemarks.py): a removal, which a count may not see
        async with AsyncChange(self.ctx, followed=True, removals=True):
            await self.ctx.across_restarts(once, again, "a batch was deleted")

    async def _delete_once(
        self, messages: Sequence[Mapping[str, Any]], keep_from_ts: int | None, by_prefix: bool
    ) -> None:
        ids = [m["_id"] for m in messages]
        mkeys = [m["messageKey"] for m in messages]
        await self._recompute_threads([m["threadKey"] for m in messages], ids, keep_from_ts)
        for collection in self.collections:
            if collection.scope != "message" or collection.name == "messages":
                continue
            if collection.by == "_id":
                await self._remove(collection.name, self._by_ids(collection, ids))
            else:
                await self._remove(collection.name, {"mailboxId": self.mailbox_id, "messageKey": {"$in": mkeys}})
        await self._remove_blobs(messages, by_prefix)
        await self._remove("messages", self.ctx.by_ids(ids), completes=True)
        if not self.dry_run:  # the local search index (search_index=), after the commit point
            await indexing.after_delete(self.ctx, mkeys)
            # the parts these messages held, where nothing else holds them (parts.py)
            released = await parts.release(self.ctx, messages)
            if released:
                self.removed[PARTS_COLLECTION] = self.removed.get(PARTS_COLLECTION, 0) + released

    async def _remove_blobs(self, messages: Sequence[Mapping[str, Any]], by_prefix: bool) -> None:
        if not self.gridfs:  # each message's prefix: what it names and what an upload left
            for message in messages:
                await self.remove_blob_prefix(message["blobPrefix"])
            return
        files, chunks = (c.name for c in self.collections if c.scope == "blob")
        if by_prefix:
            for message in messages:
                await self.remove_blob_prefix(message["blobPrefix"])
            return
        # the keys the documents name, and every blob uploaded for these messages (a copy stored
        # twice can leave blobs its first copy does not name), by the files' metadata index
        keys = {key for m in messages for key in lifecycle.blob_keys(m)}
        selector = lifecycle.blob_metadata_filter(self.mailbox_id, [m["messageKey"] for m in messages])
        for part in self.ctx.dialect.split_in(selector):
            # unhinted: the only index on these fields (the test server walks a whole index when hinted)
            keys.update([f["_id"] async for f in self.db[files].find(part, {"_id": 1})])
        if keys:
            await self._remove(files, {"_id": {"$in": sorted(keys)}})
            await self._remove(chunks, {"files_id": {"$in": sorted(keys)}})

    async def remove_blob_prefix(self, prefix: str) -> None:
        """Every blob under one message's prefix, leftovers of interrupted uploads included (by
        ``filename``: the test server plans an ``_id`` range as a collection scan)."""
        if not self.gridfs:
            await self.remove_external_prefix(prefix)
            return
        files, chunks = (c.name for c in self.collections if c.scope == "blob")
        await self._remove(files, blobs.prefix_filter("filename", prefix))
        await self._remove(chunks, blobs.prefix_filter("files_id", prefix))

    async def remove_external_prefix(self, prefix: str) -> int:
        """Every blob under ``prefix`` in a file or object store, tallied as ``blobs``."""
        store = await self.ctx.blob_store()
        count = await store.delete_prefix(prefix, dry_run=self.dry_run)
        self.removed[lifecycle.EXTERNAL_BLOBS] = self.removed.get(lifecycle.EXTERNAL_BLOBS, 0) + count
        if self.on_progress is not None:
            self.on_progress(self.removed)
        return count

    async def remove_leftovers(self, mkey: str) -> None:
        """What an interrupted store of an absent message may have left: its body and blobs."""
        await self._remove("bodies", self.ctx.by_ids([doc_id(self.mailbox_id, mkey)]))
        await self.remove_blob_prefix(blob_prefix(self.mailbox_id, mkey))

    async def _recompute_threads(
        self, thread_keys: Sequence[str], leaving: list[str], keep_from_ts: int | None
    ) -> None:
        """Each affected summary once per run, from the members that stay, in one read and one
        write of each kind; a thread left empty is removed."""
        todo = sorted(set(thread_keys) - self._recomputed)
        if not todo:
            return
        self._recomputed.update(todo)
        # the members that stay are picked here, not in the filter: with a ts range or an _id
        # $nin beside the $in the test server plans a collection scan
        gone = set(leaving)
        summaries: dict[str, dict[str, Any]] = {}
        for part in self.ctx.dialect.split_in({"mailboxId": self.mailbox_id, "threadKey": {"$in": todo}}):
            async for member in self.db["messages"].find(part, _SUMMARY_FIELDS):  # on aecs_messages_thread
                stays = member["ts"] >= keep_from_ts if keep_from_ts is not None else member["_id"] not in gone
                if stays:
                    summaries[member["threadKey"]] = fold_thread_summary(summaries.get(member["threadKey"]), member)
        kept, empty = lifecycle.summary_writes(self.mailbox_id, todo, summaries)
        self.threads_updated += len(kept)
        if self.dry_run:
            self.threads_removed += len(empty)
            return
        threads = self.db["threads"]
        await self.ctx.write_each(threads, [(self.ctx.upsert_key(t["_id"]), t) for t in kept], replace=True)
        for part in self.ctx.dialect.split_in(self.ctx.by_ids([doc_id(self.mailbox_id, t) for t in empty])):
            self.threads_removed += int((await threads.delete_many(part)).deleted_count)

    # --- the erase -----------------------------------------------------------------------------

    async def sweep(self, collection: DataCollection, batch_size: int) -> int:
        """Remove every document of the mailbox in ``collection``: one cursor on the index that
        selects them (``batch_size`` a round trip) and one delete per batch, of the ``_id`` values
        read or, for GridFS, of the key range from the batch's first key to its last."""
        key = collection.range_key
        selector = lifecycle.sweep_selector(collection, self.mailbox_id)
        found = self.db[collection.name].find(selector, {"_id": 1} if key is None else {key: 1})
        if collection.hint is not None:
            found = found.hint(collection.hint)
        if key is not None:
            found = found.sort(key, 1)
        removed = 0
        batch: list[Any] = []
        async for doc in found.batch_size(batch_size):
            batch.append(doc["_id" if key is None else key])
            if len(batch) == batch_size:
                removed += await self._remove(collection.name, self._sweep_filter(collection, batch))
                batch = []
        if batch:
            removed += await self._remove(collection.name, self._sweep_filter(collection, batch))
        self.removed.setdefault(collection.name, 0)
        return removed

    def _sweep_filter(self, collection: DataCollection, batch: list[Any]) -> dict[str, Any]:
        if collection.range_key is None:
            return self._by_ids(collection, batch)
        return {collection.range_key: {"$gte": batch[0], "$lte": batch[-1]}}


async def delete(ctx: AsyncStoreContext, message_id: str) -> bool:
    """``store.delete``: one message from every tier, its thread recomputed; False if absent
    (what an interrupted store of it left is cleared all the same)."""
    deleter = AsyncDeleter(ctx, concern=await capabilities.completion_concern(ctx))
    message = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), lifecycle.MESSAGE_FIELDS)
    if message is None:
        await deleter.remove_leftovers(message_key(message_id))
        return False
    await deleter.delete_batch([message], by_prefix=True)
    return True


async def expire(
    ctx: AsyncStoreContext,
    before: Any,
    *,
    dry_run: bool = False,
    batch_size: int = 1000,
    on_progress: Callable[[Mapping[str, int]], None] | None = None,
) -> ExpireReport:
    """``store.expire``: every message whose ``ts`` is earlier than ``before``, from every tier."""
    started = monotonic()
    selector = lifecycle.expire_filter(ctx.mailbox_id, before)
    lifecycle.check_batch_size(batch_size)
    keep_from_ts = selector["ts"]["$lt"]
    await capabilities.dialect(ctx)
    concern = None if dry_run else await capabilities.completion_concern(ctx)
    deleter = AsyncDeleter(ctx, dry_run=dry_run, on_progress=on_progress, concern=concern)
    found = ctx.db["messages"].find(selector, lifecycle.MESSAGE_FIELDS).hint("aecs_messages_inbox")
    batch: list[dict[str, Any]] = []
    async for message in found.batch_size(batch_size):
        batch.append(message)
        if len(batch) == batch_size:
            await deleter.delete_batch(batch, keep_from_ts=keep_from_ts)
            batch = []
    await deleter.delete_batch(batch, keep_from_ts=keep_from_ts)
    report = ExpireReport(
        ctx.mailbox_id,
        before,
        dry_run=dry_run,
        removed=deleter.removed,
        threads_updated=deleter.threads_updated,
        threads_removed=deleter.threads_removed,
    )
    report.seconds = monotonic() - started
    if not dry_run and report.removed.get(VECTORS_COLLECTION):
        # the vector blocks lose the entries of the expired vectors (and blocks left empty)
        compacted = await embeddings.compact(ctx)
        if compacted["blocksRemoved"]:
            report.removed[BLOCKS_COLLECTION] = compacted["blocksRemoved"]
        log.debug("expire in mailbox %r: %d vector block entries dropped", ctx.mailbox_id, compacted["entriesDropped"])
        await ctx.journal_barrier(concern)  # the blocks' rewrite came after the last journaled delete
    return report


async def erase_mailbox(
    ctx: AsyncStoreContext, *, batch_size: int = 1000, on_progress: Callable[[Mapping[str, int]], None] | None = None
) -> EraseReport:
    """``store.erase_mailbox``: every document of the mailbox in every collection, every blob."""
    started = monotonic()
    lifecycle.check_batch_size(batch_size)
    await capabilities.dialect(ctx)
    deleter = AsyncDeleter(ctx, on_progress=on_progress)
    report = EraseReport(ctx.mailbox_id)
    concern = await capabilities.completion_concern(ctx)
    # the change mark (where there is no change stream): its begin marks the erase under way
    # until the sweep of its collection takes it (a later write starts it afresh)
    async with AsyncChange(ctx, followed=True, create=False):
        for attempt in range(1, lifecycle.MAX_ERASE_PASSES + 1):
            report.passes = attempt
            removed = 0
            for collection in deleter.collections:
                removed += await deleter.sweep(collection, batch_size)
            if not deleter.gridfs:  # a file or object store: everything under the mailbox's root
                removed += await deleter.remove_external_prefix(lifecycle.mailbox_blob_root(ctx.mailbox_id))
            # done when a whole pass finds nothing: what a writer committed meanwhile is swept again
            if removed == 0:
                break
        else:
            messages = ctx.db["messages"]
            report.remaining = int(await messages.count_documents({"mailboxId": ctx.mailbox_id}))
        report.removed = deleter.removed
        await indexing.after_erase(ctx)  # the local search index: the mailbox's tables and position
    if any(deleter.removed.values()):
        # the sweeps' statements went out unjournaled (the last could be any collection's): one
        # journaled write after the final pass makes every one of them durable
        await ctx.journal_barrier(concern)
    report.seconds = monotonic() - started
    return report
