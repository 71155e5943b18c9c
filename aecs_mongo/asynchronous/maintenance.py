"""Upkeep: the indexes, ``reindex`` (every derived document rebuilt from ``messages``), the
re-parse of mail normalized under another spec version, and the engines in ``stats``.

The rule: the ``messages`` documents are the primary records and everything else
(thread summaries, lookup fields, UIDL records, vector blocks, the local search index) is a
cache that ``reindex``
can rebuild at any time, readers never seeing a mailbox without threads meanwhile.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from bson import Int64
from pymongo.errors import BulkWriteError, CollectionInvalid, OperationFailure

from ..pure import lifecycle, queries
from ..pure.documents import derived_fields, fold_thread_summary, thread_summary_from_messages
from ..pure.indexes import (
    RETIRED_INDEXES,
    VECTORS_COLLECTION,
    IndexReport,
    atlas_search_indexes,
    index_specs,
    text_index_is_older,
)
from ..pure.keys import check_str, doc_id
from . import blobstore, capabilities, embeddings, extracting, indexing, lookups, parts, search
from .changemarks import AsyncChange
from .context import AsyncStoreContext, errmsg, only_duplicates, resolve, to_list
from .writing import build

__all__ = ["engines", "ensure_indexes", "recompute_thread", "reindex", "reparse_stale"]

_INDEX_ALREADY_EXISTS = 68
_REPAIR_BATCH = 500
_SUMMARY_FIELDS = {"mailboxId": 1, "threadKey": 1, "threadId": 1, "ts": 1, "messageKey": 1, "subject": 1, "tags": 1}


async def ensure_indexes(ctx: AsyncStoreContext, atlas: bool, num_dimensions: int) -> IndexReport:
    """Every index of ``index_specs`` (idempotent); what the server refuses is reported.

    It also upgrades a database of an earlier release: once the indexes exist, every
    ``messages`` document without ``lookups`` gets it (``lookups.fill_lookups``, each mailbox;
    ``upgraded`` counts them), and only then are the indexes it replaces dropped
    (``RETIRED_INDEXES``, reported in ``dropped``), so a reader of either release finds all
    mail meanwhile. A text index of an earlier release (other fields or weights) is dropped and
    created anew, reported in both ``dropped`` and ``created``: a text index's keys cannot
    change in place, and a collection holds one text index, so the old one goes first."""
    report = IndexReport()
    existing: dict[str, dict[str, Any]] = {}
    for spec in index_specs(ctx.settings.bucket_name):
        if spec.collection not in existing:
            cursor = await resolve(ctx.db[spec.collection].list_indexes())
            existing[spec.collection] = {ix["name"]: ix async for ix in cursor}
        found = existing[spec.collection].get(spec.name)
        if found is not None and spec.is_text and text_index_is_older(spec, found):
            with contextlib.suppress(OperationFailure):  # dropped meanwhile by another process
                await ctx.db[spec.collection].drop_index(spec.name)
            report.dropped.append(spec.name)
            found = None
        if found is not None:
            same_keys = spec.is_text or list(found["key"].items()) == list(spec.keys)
            if same_keys and bool(found.get("unique")) == bool(spec.options.get("unique")):
                report.existing.append(spec.name)
            else:
                report.skipped[spec.name] = (
                    f"an index of that name exists with keys {dict(found['key'])} (unique={bool(found.get('unique'))})"
                )
            continue
        try:
            await ctx.db[spec.collection].create_index(list(spec.keys), name=spec.name, **spec.options)
        except OperationFailure as exc:
            if not spec.is_text:
                raise
            report.skipped[spec.name] = f"the server refused the text index: {errmsg(exc)}"
            continue
        report.created.append(spec.name)
    retired = [(c, name) for c, name in RETIRED_INDEXES if name in existing.get(c, {})]
    # an earlier release's layout: every mailbox's documents get their lookups first (the new
    # index serves each mailbox's fill); else this store's mailbox is checked (one point read)
    mailboxes = await ctx.messages.distinct("mailboxId") if retired else [ctx.mailbox_id]
    for mailbox_id in sorted(mailboxes):
        report.upgraded += await lookups.fill_lookups(ctx, mailbox_id)
    ctx.capabilities.lookups_filled = True
    for collection, name in retired:
        with contextlib.suppress(OperationFailure):  # dropped meanwhile by another process
            await ctx.db[collection].drop_index(name)
        report.dropped.append(name)
    if atlas:
        await _ensure_search_indexes(ctx, report, num_dimensions)
    if report.created or report.dropped or report.upgraded:  # what it did survives a crash of the server
        await ctx.journal_barrier(await capabilities.completion_concern(ctx))
    return report


async def _ensure_search_indexes(ctx: AsyncStoreContext, report: IndexReport, num_dimensions: int) -> None:
    with contextlib.suppress(CollectionInvalid, OperationFailure):
        await ctx.db.create_collection(VECTORS_COLLECTION)  # Atlas indexes need the collection
    for spec in atlas_search_indexes(num_dimensions):
        try:
            await ctx.db.command(spec.command())
        except OperationFailure as exc:
            if exc.code == _INDEX_ALREADY_EXISTS:
                report.existing.append(spec.name)
            else:
                report.skipped[spec.name] = f"the server refused the Atlas index: {errmsg(exc)}"
            continue
        report.created.append(spec.name)


async def engines(ctx: AsyncStoreContext) -> dict[str, Any]:
    """The mailbox's counts and the engines serving its searches on this server."""
    vector = ctx.settings.checked_vector_engine()
    if vector == "auto":
        vector = "atlas" if await capabilities.atlas_vectors(ctx) else "exact"
    stops = ctx.capabilities.stops_at_limit
    return {
        "messages": await ctx.messages.count_documents({"mailboxId": ctx.mailbox_id}),
        "threads": await ctx.threads.count_documents({"mailboxId": ctx.mailbox_id}),
        "search": await search.engine_for(ctx),
        "vectorSearch": vector,
        "windowedReads": None if stops is None else not stops,
    }


async def recompute_thread(ctx: AsyncStoreContext, tkey: str) -> None:
    """One thread summary from its members (removed when none is left)."""
    selector = {"mailboxId": ctx.mailbox_id, "threadKey": tkey}
    members = await to_list(ctx.messages.find(selector, _SUMMARY_FIELDS))
    summary = thread_summary_from_messages(members)
    if summary is None:
        await ctx.threads.delete_one(ctx.by_id(doc_id(ctx.mailbox_id, tkey)))
    else:
        await ctx.threads.replace_one(ctx.upsert_key(summary["_id"]), summary, upsert=True)


# --- re-parsing ------------------------------------------------------------------------------


async def reparse_stale(ctx: AsyncStoreContext, spec_version: str | None) -> dict[str, int]:
    """Re-normalize from ``raw.eml`` every message stored under another spec version."""
    from ..normalizer import SPEC_VERSION

    target = SPEC_VERSION if spec_version is None else check_str(spec_version, "spec_version")
    report = {"reparsed": 0, "skipped": 0}
    ids = await to_list(
        ctx.messages.find(queries.stale_filter(ctx.mailbox_id, target), {"_id": 0, "messageId": 1}).hint(
            queries.ID_INDEX
        )
    )
    for row in ids:
        if await _reparse(ctx, row["messageId"]):
            report["reparsed"] += 1
        else:
            report["skipped"] += 1
    return report


async def _reparse(ctx: AsyncStoreContext, message_id: str) -> bool:
    _id = ctx.id_for(message_id)
    old = await ctx.messages.find_one(ctx.by_id(_id))
    if old is None or lifecycle.raw_name(old) is None:
        return False
    raw = await blobstore.raw_of(ctx, old)
    if raw is None:
        return False
    # the tags and folders are the user's and the sources', not the parse's: kept as stored
    docs = build(ctx, raw, None, old.get("uidl"), tags=old.get("tags") or (), folders=old.get("folders") or ())
    (docs,) = await extracting.read_texts(ctx, [docs])  # the attachments' text again, with the new documents
    if old.get("variants"):
        docs.message["variants"] = old["variants"]  # only the first copy is re-parsed
    if old.get("variantHashes"):
        docs.message["variantHashes"] = old["variantHashes"]
    if "raw.pack" in (old.get("blobs") or ()) and "raw.pack" in docs.message["blobs"]:
        # the stored pack stays (blobs are create-if-absent): the parts it names stay held with
        # the new ones, whatever the new parse would cut
        docs.message["rawParts"] = sorted({*(old.get("rawParts") or ()), *(docs.message.get("rawParts") or ())})
    # the parts of the new layout held and put before the row names them (parts.py)
    await blobstore.put_blobs(ctx, await parts.hold(ctx, [docs]))
    await blobstore.put_blobs(ctx, [(blob, docs.message_key) for blob in parts.own_blobs(docs)])
    async with AsyncChange(ctx, followed=True):  # where there is no change stream (changemarks.py)
        await ctx.bodies.replace_one(ctx.upsert_key(_id), docs.body, upsert=True)
        await ctx.messages.replace_one(ctx.by_id(_id), docs.message)
        await indexing.after_reparse(ctx, docs, old["messageKey"])
    await _drop_replaced(ctx, old, docs.message)
    await recompute_thread(ctx, old["threadKey"])
    if docs.thread_key != old["threadKey"]:
        await recompute_thread(ctx, docs.thread_key)
    return True


def _kept_twice(message: Mapping[str, Any]) -> bool:
    """A message stored whole with its attachments' decoded bytes beside it (``att/<idx>``)
    where those bytes are in its raw copy: what ``reindex`` stores again as a pack."""
    if "raw.eml" not in (message.get("blobs") or ()):
        return False
    return any(
        str(a.get("blobKey") or "").endswith(f"/att/{a.get('idx')}") and not a.get("raw")
        for a in message.get("attachments") or ()
    )


async def _drop_replaced(ctx: AsyncStoreContext, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """After a message's row was replaced: the blobs only the old row named (a raw message kept
    whole before, now a pack; its ``att/<idx>`` copies) and its hold on parts it no longer has."""
    kept = set(lifecycle.blob_keys(new))
    gone = [key for key in lifecycle.blob_keys(old) if key not in kept]
    if gone:
        await (await ctx.blob_store()).delete(gone)
    dropped = set(old.get("rawParts") or ()) - set(new.get("rawParts") or ())
    if dropped:
        await parts.release(ctx, [{"messageKey": old["messageKey"], "rawParts": sorted(dropped)}])


# --- reindex: every derived document rebuilt from messages -----------------------------------


async def reindex(ctx: AsyncStoreContext) -> dict[str, int]:
    """Rebuild every derived document from the primary ``messages`` documents.

    One pass over ``messages`` in batches (one body query, one bulk of fixes and one of UIDL
    upserts per batch); summaries are folded in memory and replaced in place. Then the UIDL
    records of vanished messages and stale summaries go, and the vector blocks are kept up.
    """
    report = {"threads": 0, "messagesFixed": 0, "uidlsAdded": 0, "uidlsRemoved": 0, "vectorsRewritten": 0}
    report |= {"vectorEntriesDropped": 0, "vectorsSealed": 0, "undatedRedated": 0}
    summaries: dict[str, dict[str, Any]] = {}
    keys: set[str] = set()
    batch: list[dict[str, Any]] = []
    redated: list[tuple[Any, dict[str, Any]]] = []  # written after the pass: ts is in the index it reads
    repack: list[str] = []  # kept whole with attachment copies beside it (stored before packs)
    async for message in ctx.messages.find({"mailboxId": ctx.mailbox_id}):
        if not ctx.settings.whole_raw and _kept_twice(message):
            repack.append(message["messageId"])
        better = await _undated_ts(ctx, message)
        if better is not None:
            message["ts"] = Int64(better)
            redated.append((ctx.by_id(message["_id"]), {"$set": {"ts": Int64(better)}}))
        keys.add(message["messageKey"])
        summaries[message["threadKey"]] = fold_thread_summary(summaries.get(message["threadKey"]), message)
        batch.append(message)
        if len(batch) == _REPAIR_BATCH:
            await _repair_messages(ctx, batch, report)
            batch = []
    if batch:
        await _repair_messages(ctx, batch, report)
    for start in range(0, len(redated), _REPAIR_BATCH):
        async with AsyncChange(ctx, followed=False):  # the local index learns ts by its rebuild
            await ctx.write_each(ctx.messages, redated[start : start + _REPAIR_BATCH])
    report["undatedRedated"] = len(redated)
    report["rawRepacked"] = sum([await _reparse(ctx, message_id) for message_id in repack])
    dangling = [
        r["_id"]
        async for r in ctx.uidls.find({"mailboxId": ctx.mailbox_id}, {"messageKey": 1})
        if r.get("messageKey") not in keys
    ]
    for start in range(0, len(dangling), _REPAIR_BATCH):
        done = await ctx.uidls.delete_many(ctx.by_ids(dangling[start : start + _REPAIR_BATCH]))
        report["uidlsRemoved"] += done.deleted_count
    rows = list(summaries.values())
    for start in range(0, len(rows), _REPAIR_BATCH):
        chunk = rows[start : start + _REPAIR_BATCH]
        await ctx.write_each(ctx.threads, [(ctx.upsert_key(t["_id"]), t) for t in chunk], replace=True)
    report["threads"] = len(rows)
    current = {doc_id(ctx.mailbox_id, tkey) for tkey in summaries}
    stale = [
        t["_id"] async for t in ctx.threads.find({"mailboxId": ctx.mailbox_id}, {"_id": 1}) if t["_id"] not in current
    ]
    for start in range(0, len(stale), _REPAIR_BATCH):
        await ctx.threads.delete_many(ctx.by_ids(stale[start : start + _REPAIR_BATCH]))
    report["vectorsRewritten"] = await embeddings.rewrite_old(ctx)
    report["vectorsSealed"] = await embeddings.seal(ctx, partial=True)
    # after the sealing, so the entries it made dead go now (an unsealed vector's are kept)
    report["vectorEntriesDropped"] = (await embeddings.compact(ctx))["entriesDropped"]
    if ctx.settings.attachment_text:  # mail stored before attachment text, or with extract_later
        report["attachmentsRead"] = await extracting.extract_pending(ctx)
    await ctx.journal_barrier(await capabilities.completion_concern(ctx))
    if ctx.search_index is not None:
        report["searchIndexed"] = await indexing.rebuild(ctx)  # the local index, from scratch
    return report


async def _undated_ts(ctx: AsyncStoreContext, message: Mapping[str, Any]) -> int | None:
    """The upgrade of mail stored before the Received fallback: a message without a date whose
    ``ts`` is its ``processedAt`` (the ingest time) sorts by its newest Received header's date
    when its raw copy has one (the source's own date is not stored, so it cannot be used here).
    None: nothing to change."""
    if message.get("timestamp") is not None or message.get("date") is not None:
        return None
    processed = message.get("processedAt")
    if not isinstance(processed, str):
        return None
    try:
        at = int(_dt.datetime.fromisoformat(processed.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None
    if int(message.get("ts") or 0) != at or lifecycle.raw_name(message) is None:
        return None
    raw = await blobstore.get_raw(ctx, message["messageId"])
    if raw is None:
        return None
    from ..normalizer.dates import received_timestamp

    found = received_timestamp(raw)
    return found if found is not None and found != at else None


async def _repair_messages(ctx: AsyncStoreContext, batch: Sequence[Mapping[str, Any]], report: dict[str, int]) -> None:
    """Rewrite the lookup fields that differ from a recomputation; restore missing UIDL records."""
    bodies = {b["_id"]: b async for b in ctx.bodies.find(ctx.by_ids([m["_id"] for m in batch]))}
    fixes = []
    for message in batch:
        derived = derived_fields(message, bodies.get(message["_id"]))
        changed = {k: v for k, v in derived.items() if message.get(k) != v}
        if changed:
            fixes.append((ctx.by_id(message["_id"]), {"$set": changed}))
    if fixes:
        async with AsyncChange(ctx, followed=False):  # where there is no change stream (changemarks.py)
            await ctx.write_each(ctx.messages, fixes)
    report["messagesFixed"] += len(fixes)
    records = [
        lookups.uidl_upsert(ctx, m["uidl"], m["messageId"], m["messageKey"]) for m in batch if m.get("uidl") is not None
    ]
    try:
        report["uidlsAdded"] += await ctx.write_each(ctx.uidls, records, upsert=True)
    except BulkWriteError as exc:
        if not only_duplicates(exc):  # a concurrent add() recorded one first
            raise
        report["uidlsAdded"] += exc.details.get("nUpserted", 0)
