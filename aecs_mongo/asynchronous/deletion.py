"""The deletion core and the export reader: the I/O behind ``delete``, ``expire``, ``erase_mailbox``
and ``export_raw``.

The plans (which collections, which filters, in which order) are in the pure
``pure/lifecycle.py``; this is the order of reads and writes. Every statement selects
on an index and names at most ``batch_size`` documents, so the number of statements grows with
the mailbox divided by the batch size, never with one round trip per message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from time import monotonic
from typing import Any, Protocol

from ..pure import blobs, lifecycle
from ..pure.documents import fold_thread_summary
from ..pure.keys import blob_prefix, doc_id
from ..pure.lifecycle import DataCollection, EraseReport, ExpireReport, ExportedCopy

__all__ = ["AsyncDeleter", "erase_mailbox", "expire", "export_copies"]

_SUMMARY_FIELDS = {"mailboxId": 1, "threadKey": 1, "threadId": 1, "ts": 1, "messageKey": 1, "subject": 1}
_EXPORT_FIELDS = {"messageId": 1, "ts": 1, "blobPrefix": 1, "blobs": 1, "variantHashes": 1, "from.email": 1}


class AsyncStoreLike(Protocol):
    """What the core needs of a store (a protocol, not ``AsyncMessageStore``: the store imports this)."""

    db: Any
    mailbox_id: str
    bucket_name: str
    sharded: bool

    def _by_ids(self, ids: list[str]) -> dict[str, Any]: ...

    def _upsert_key(self, _id: str) -> dict[str, Any]: ...

    async def _write_each(
        self,
        collection: Any,
        writes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
        *,
        replace: bool = False,
        upsert: bool = False,
    ) -> int: ...

    async def _get_blob(self, key: str) -> bytes | None: ...


class AsyncDeleter:
    """Removes messages from every tier of one mailbox, batch by batch, and tallies what it
    removed per collection. ``dry_run``: counts what it would remove and writes nothing."""

    def __init__(
        self,
        store: AsyncStoreLike,
        *,
        dry_run: bool = False,
        on_progress: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        self.store = store
        self.db = store.db
        self.mailbox_id = store.mailbox_id
        self.dry_run = dry_run
        self.collections = [c.for_bucket(store.bucket_name) for c in lifecycle.DATA_COLLECTIONS]
        self.removed: dict[str, int] = {}
        self.threads_updated = 0
        self.threads_removed = 0
        self._recomputed: set[str] = set()
        self.on_progress = on_progress

    async def _remove(self, name: str, selector: Mapping[str, Any]) -> int:
        """Delete (or, in a dry run, count) what ``selector`` matches; a long ``$in`` in parts."""
        collection = self.db[name]
        count = 0
        for part in lifecycle.split_in(selector):
            if self.dry_run:
                count += int(await collection.count_documents(part))
            else:
                count += int((await collection.delete_many(part)).deleted_count)
        self.removed[name] = self.removed.get(name, 0) + count
        if self.on_progress is not None:
            self.on_progress(self.removed)
        return count

    def _by_ids(self, collection: DataCollection, ids: list[str]) -> dict[str, Any]:
        """``_id $in`` (with the shard key's prefix on a sharded cluster, for mailbox data)."""
        if collection.scope == "blob":
            return {"_id": {"$in": ids}}
        return self.store._by_ids(ids)

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
        await self._remove("messages", self.store._by_ids(ids))

    async def _remove_blobs(self, messages: Sequence[Mapping[str, Any]], by_prefix: bool) -> None:
        files, chunks = (c.name for c in self.collections if c.scope == "blob")
        if by_prefix:
            for message in messages:
                await self.remove_blob_prefix(message["blobPrefix"])
            return
        # the keys the documents name, and every blob uploaded for these messages (a copy stored
        # twice can leave blobs its first copy does not name), by the files' metadata index
        keys = {key for m in messages for key in lifecycle.blob_keys(m)}
        selector = lifecycle.blob_metadata_filter(self.mailbox_id, [m["messageKey"] for m in messages])
        for part in lifecycle.split_in(selector):
            # unhinted: the only index on these fields (the test server walks a whole index when hinted)
            keys.update([f["_id"] async for f in self.db[files].find(part, {"_id": 1})])
        if keys:
            await self._remove(files, {"_id": {"$in": sorted(keys)}})
            await self._remove(chunks, {"files_id": {"$in": sorted(keys)}})

    async def remove_blob_prefix(self, prefix: str) -> None:
        """Every blob under one message's prefix, leftovers of interrupted uploads included (by
        ``filename``: the test server plans an ``_id`` range as a collection scan)."""
        files, chunks = (c.name for c in self.collections if c.scope == "blob")
        await self._remove(files, blobs.prefix_filter("filename", prefix))
        await self._remove(chunks, blobs.prefix_filter("files_id", prefix))

    async def remove_leftovers(self, mkey: str) -> None:
        """What an interrupted store of an absent message may have left: its body and blobs."""
        await self._remove("bodies", self.store._by_ids([doc_id(self.mailbox_id, mkey)]))
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
        for part in lifecycle.split_in({"mailboxId": self.mailbox_id, "threadKey": {"$in": todo}}):
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
        await self.store._write_each(threads, [(self.store._upsert_key(t["_id"]), t) for t in kept], replace=True)
        for part in lifecycle.split_in(self.store._by_ids([doc_id(self.mailbox_id, t) for t in empty])):
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


async def expire(
    store: AsyncStoreLike,
    before: Any,
    *,
    dry_run: bool = False,
    batch_size: int = 1000,
    on_progress: Callable[[Mapping[str, int]], None] | None = None,
) -> ExpireReport:
    """``store.expire``: every message whose ``ts`` is earlier than ``before``, from every tier."""
    started = monotonic()
    selector = lifecycle.expire_filter(store.mailbox_id, before)
    lifecycle.check_batch_size(batch_size)
    keep_from_ts = selector["ts"]["$lt"]
    deleter = AsyncDeleter(store, dry_run=dry_run, on_progress=on_progress)
    found = store.db["messages"].find(selector, lifecycle.MESSAGE_FIELDS).hint("aecs_messages_inbox")
    batch: list[dict[str, Any]] = []
    async for message in found.batch_size(batch_size):
        batch.append(message)
        if len(batch) == batch_size:
            await deleter.delete_batch(batch, keep_from_ts=keep_from_ts)
            batch = []
    await deleter.delete_batch(batch, keep_from_ts=keep_from_ts)
    report = ExpireReport(
        store.mailbox_id,
        before,
        dry_run=dry_run,
        removed=deleter.removed,
        threads_updated=deleter.threads_updated,
        threads_removed=deleter.threads_removed,
    )
    report.seconds = monotonic() - started
    return report


async def erase_mailbox(
    store: AsyncStoreLike, *, batch_size: int = 1000, on_progress: Callable[[Mapping[str, int]], None] | None = None
) -> EraseReport:
    """``store.erase_mailbox``: every document of the mailbox in every collection, every blob."""
    started = monotonic()
    lifecycle.check_batch_size(batch_size)
    deleter = AsyncDeleter(store, on_progress=on_progress)
    report = EraseReport(store.mailbox_id)
    for attempt in range(1, lifecycle.MAX_ERASE_PASSES + 1):
        report.passes = attempt
        removed = 0
        for collection in deleter.collections:
            removed += await deleter.sweep(collection, batch_size)
        # done when a whole pass finds nothing: what a writer committed meanwhile is swept again
        if removed == 0:
            break
    else:
        messages = store.db["messages"]
        report.remaining = int(await messages.count_documents({"mailboxId": store.mailbox_id}))
    report.removed = deleter.removed
    report.seconds = monotonic() - started
    return report


async def export_copies(
    store: AsyncStoreLike,
    *,
    variants: bool = False,
    since: Any = None,
    until: Any = None,
    on_missing: Callable[[str], None] | None = None,
) -> AsyncIterator[ExportedCopy]:
    """Every stored raw copy, oldest first (``ts``, then message key): the first copy of each
    message, and with ``variants`` the other copies after it. A message without raw bytes
    (stored from a NormalizedEmail without ``rawFull``) is passed to ``on_missing`` (its message
    id) instead.

    Blobs are read a page at a time (``lifecycle.EXPORT_PAGE`` messages, one ``files`` and one
    ``chunks`` statement for up to ``lifecycle.EXPORT_PAGE_BYTES`` of them), so memory is bounded
    by that page or the largest message, never by the mailbox.
    """
    selector = lifecycle.export_filter(store.mailbox_id, since, until)
    found = store.db["messages"].find(selector, _EXPORT_FIELDS).sort([("ts", 1), ("messageKey", 1)])
    page: list[Mapping[str, Any]] = []
    async for message in found.hint("aecs_messages_inbox").batch_size(lifecycle.EXPORT_PAGE):
        page.append(message)
        if len(page) == lifecycle.EXPORT_PAGE:
            async for copy in _export_page(store, page, variants, on_missing):
                yield copy
            page = []
    async for copy in _export_page(store, page, variants, on_missing):
        yield copy


async def _export_page(
    store: AsyncStoreLike,
    page: Sequence[Mapping[str, Any]],
    variants: bool,
    on_missing: Callable[[str], None] | None,
) -> AsyncIterator[ExportedCopy]:
    wanted = [(m, number, key) for m in page for number, key in lifecycle.raw_copy_keys(m, variants)]
    files = store.db[f"{store.bucket_name}.files"]
    found = files.find({"_id": {"$in": [key for _, _, key in wanted]}}, {"length": 1, "chunkSize": 1})
    stored = {f["_id"]: f async for f in found}
    if on_missing is not None:
        for message in page:
            if not any(key in stored for number, key in lifecycle.raw_copy_keys(message, False) if number == 0):
                on_missing(message["messageId"])
    present = [item for item in wanted if item[2] in stored]
    for group in lifecycle.byte_pages(present, lambda item: int(stored[item[2]]["length"])):
        data = await _read_blobs(store, [stored[key] for _, _, key in group])
        for message, number, key in group:
            sender = (message.get("from") or {}).get("email")
            yield ExportedCopy(message["messageId"], data[key], int(message["ts"]), number, sender)


async def _read_blobs(store: AsyncStoreLike, file_docs: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
    """The bytes of several blobs in one ``chunks`` statement (on ``files_id_1_n_1``)."""
    chunks: dict[str, list[Mapping[str, Any]]] = {f["_id"]: [] for f in file_docs}
    found = store.db[f"{store.bucket_name}.chunks"].find(
        {"files_id": {"$in": list(chunks)}}, {"files_id": 1, "n": 1, "data": 1}
    )
    async for chunk in found:
        chunks[chunk["files_id"]].append(chunk)
    return {f["_id"]: blobs.assemble(f, sorted(chunks[f["_id"]], key=lambda c: c["n"])) for f in file_docs}
