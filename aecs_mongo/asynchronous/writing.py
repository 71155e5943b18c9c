"""Writing mail, in this order: blobs, bodies, the message insert (the commit point), threads.

``write_batch`` is the one write path: ``store``, ``store_many``/``store_iter`` (the ingest
pipeline's write stage, ``pipeline.py``), ``add`` and the mail adapters all end here. The
documents are built by the pure ``pure/documents.py``; this is the order of the statements, the
transaction where the deployment has one, and what makes a re-delivery after any crash end as
one clean delivery would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import random
import re
import secrets
from asyncio import wrap_future
from collections.abc import Iterable, Mapping, Sequence
from time import monotonic
from typing import Any

from pymongo import ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from ..pure.documents import (
    Blob,
    MessageDocuments,
    build_documents,
    merge_thread_summaries,
    summary_merge_update,
    thread_summaries,
)
from ..pure.keys import check_str
from ..pure.tags import check_folders, check_tags, needs_change
from ..pure.variants import variant_blob_key, variant_record_update, variants_in_batch_order
from ..results import StoreResult
from . import blobstore, capabilities, extents, indexing, parts
from .changemarks import AsyncChange
from .context import AsyncStoreContext, insert_ignoring_duplicates, log, only_duplicates, resolve

__all__ = ["build", "fallback_ts", "finish", "parse_raw", "raw_spec", "write_batch"]

_THREAD_UPSERT_RETRIES = 5
_TXN_ATTEMPTS = 5
_INDEX = re.compile(r"\[\d+\]")


def parse_raw(raw: bytes, for_ai_max_chars: int) -> Any:
    """Normalize raw RFC 5322 bytes (the normalizer is imported on first use)."""
    from ..normalizer import parse_email

    return parse_email(raw, for_ai_max_chars=for_ai_max_chars)


def fallback_ts(raw: bytes | None, received_at: _dt.datetime | None) -> int | None:
    """The sort time of a message without a usable Date: the newest Received header's date,
    else the source's own date (``received_at``: an mbox From_ line, a file's time, IMAP
    INTERNALDATE); None: ``processedAt`` then (the processing time, a last resort)."""
    from ..normalizer.build import fallback_ts as computed

    return computed(raw, received_at)


def raw_spec(ctx: AsyncStoreContext) -> Any:
    """What building a raw message's documents needs of the store (``normalizer.build.RawSpec``)."""
    from ..normalizer.build import RawSpec

    settings = ctx.settings
    return RawSpec(ctx.mailbox_id, settings.owner_addresses, settings.for_ai_max_chars, whole_raw=settings.whole_raw)


def build(
    ctx: AsyncStoreContext,
    email: Mapping[str, Any] | bytes,
    attachments: Sequence[bytes | None] | None,
    uidl: str | None,
    received_at: _dt.datetime | None = None,
    tags: Iterable[str] = (),
    folders: Iterable[str] = (),
) -> MessageDocuments:
    """The documents of one message (raw bytes are normalized first and kept byte-exact);
    ``received_at``: the source's date of it, the sort time of a message with no usable Date
    and no Received header (``fallback_ts``); ``tags``/``folders``: set when it is inserted
    (``pure/tags.py``; a bad one is ``InvalidTagError`` before anything is written)."""
    if uidl is not None:
        check_str(uidl, "uidl")
    tag_list = check_tags(tags)
    folder_list = check_folders(folders)
    settings = ctx.settings
    if isinstance(email, (bytes, bytearray, memoryview)):
        from ..normalizer.build import build_raw

        docs = build_raw(raw_spec(ctx), bytes(email), attachments, uidl, received_at)
    else:
        docs = build_documents(
            email,
            mailbox_id=ctx.mailbox_id,
            owner_addresses=settings.owner_addresses,
            attachment_data=attachments,
            uidl=uidl,
            fallback_ts=fallback_ts(None, received_at),
        )
    return finish(ctx, docs, tag_list, folder_list)


def finish(
    ctx: AsyncStoreContext, docs: MessageDocuments, tags: Sequence[str], folders: Sequence[str]
) -> MessageDocuments:
    """Set the initial tags and folders; say once per store which unknown fields were ignored."""
    if tags:
        docs.message["tags"] = list(tags)
    if folders:
        docs.message["folders"] = list(folders)
    for path in docs.ignored:
        name = _INDEX.sub("[]", path)
        if ctx.first_time(f"ignored field {name}"):
            log.info("ignoring unknown field %s (AECS-1 §10.6); said once per store", name)
    return docs


#: what the batch's lookup reads of a stored message: enough to keep a copy of it as a variant
_STORED_FIELDS = {
    "rawSha256": 1,
    "variantHashes": 1,
    "variants.sha256": 1,
    "blobPrefix": 1,
    "blobs": 1,
    "messageKey": 1,
    "folders": 1,
}


async def write_batch(
    ctx: AsyncStoreContext, batch: Sequence[MessageDocuments], *, index_later: bool = False
) -> list[StoreResult]:
    """``write_once``, written again while the server restarted (or the primary changed) under it
    (``AsyncStoreContext.across_restarts``): the batch's journaled last write would make only
    what survived the crash durable, so the pass after a restart repairs what the crash took (a
    stored message's own blobs are uploaded again where their ``files`` document is missing; a
    variant's record and blob are written where they are missing)."""
    results: list[StoreResult] = []

    async def once() -> None:
        results.extend(await write_once(ctx, batch, index_later=index_later))

    async def again() -> None:
        redone = await write_once(ctx, batch, repair=True, index_later=index_later)
        results[:] = [
            dataclasses.replace(r, inserted=r.inserted or a.inserted, variant=r.variant or a.variant)
            for r, a in zip(results, redone, strict=True)
        ]

    # where there is no change stream (changemarks.py); a copy's folders join a stored message's
    folders = any(d.message.get("folders") for d in batch)
    async with AsyncChange(ctx, followed=True, labels=folders):
        await ctx.across_restarts(once, again, "a batch was written")
    return results


async def write_once(
    ctx: AsyncStoreContext, batch: Sequence[MessageDocuments], *, repair: bool = False, index_later: bool = False
) -> list[StoreResult]:
    """The write order, batched: blobs, the mailbox's extent (``pure/extents.py``), bodies,
    messages (one unordered insert), thread updates.

    One ``_id $in`` find first tells the batch's new messages from copies of stored ones: only
    new messages upload blobs (a copy keeps nothing but its raw bytes, as a variant), so the
    end state does not depend on where batches begin, and their upload needs no lookup; a copy
    of the same bytes (a re-delivery) has its blobs looked up and completed where a crash cut
    them. The same find reads what keeping a copy as a variant needs of each stored message.
    ``repair`` (a pass after a server restart): bodies are written again too, where there are
    no transactions to have written them with their messages. ``index_later``: the local search
    index gets the batch's records on its own thread (``indexing.after_write``).
    The batch returns only once its last write is durable (``capabilities.completion_concern``):
    that write is journaled, or, where the batch wrote nothing new (every message already
    stored, as in a re-delivery), one barrier write is.
    """
    concern = await capabilities.completion_concern(ctx)
    first: dict[str, MessageDocuments] = {}
    for docs in batch:
        first.setdefault(docs.message["_id"], docs)
    ids = list(first)
    stored = {m["_id"]: m async for m in ctx.messages.find(ctx.by_ids(ids), _STORED_FIELDS)}
    unique = [d for d in first.values() if d.message["_id"] not in stored]
    # other bytes of a new message later in the batch: recorded by its insert, blobs first
    folded = _fold_repeats(batch, unique)
    # other bytes of a stored message: a file or object store puts their blobs on a thread
    # while the batch's messages are written, waited for before the records (_keep_variants)
    ahead = _variants_ahead(batch, stored)
    started = (await ctx.blob_store()).put_started(ahead, durable=ctx.settings.durable) if ahead else None
    put_ahead = {blob.key for blob, _ in ahead} if started is not None else set()
    # parts kept once per mailbox: held before anything relies on them (a remover may be taking
    # one away), then put where they are missing (most are there already: no absent hint)
    await blobstore.put_blobs(ctx, await parts.hold(ctx, unique))
    await blobstore.put_blobs(
        ctx,
        [(blob, d.message_key) for d in unique for blob in parts.own_blobs(d)]
        + [(b, k) for _, b, k in folded.values()],
        absent=True,
    )
    # the same bytes again (a re-delivery): their blobs are made whole where a crash cut them
    # (one files lookup; nothing is uploaded where every files document is there)
    same = [
        d
        for d in first.values()
        if d.message.get("rawSha256") and stored.get(d.message["_id"], {}).get("rawSha256") == d.message["rawSha256"]
    ]
    await blobstore.put_blobs(ctx, [item for d in same for item in parts.blob_owners(d)])
    if repair and same and not await capabilities.transactions(ctx):
        # without transactions a body is written before its message: the restart may have taken it
        await insert_ignoring_duplicates(ctx.bodies, [d.body for d in same])
    if unique:
        # the mailbox's extent, widened before the insert (outside any transaction: every
        # writer of the mailbox touches this one document): it holds every stored message's ts
        await extents.widen(ctx, [int(d.message["ts"]) for d in unique])
    if not unique:
        created: set[str] = set()
    elif await capabilities.transactions(ctx):
        created = await _commit_in_transaction(ctx, unique, concern)
    else:
        # no transactions: the insert is the commit point; a crash after it leaves the
        # thread summary short by one until reindex() (README, "Recovery")
        await insert_ignoring_duplicates(ctx.bodies, [d.body for d in unique])
        rejected = await insert_ignoring_duplicates(ctx.messages, [d.message for d in unique])
        inserted = [d for i, d in enumerate(unique) if i not in rejected]
        await _fold_many(ctx, [d.message for d in inserted], concern)
        created = {d.message["_id"] for d in inserted}
    # a transaction's commit, or the last thread write of one without, was journaled
    journaled = bool(created)
    if created:
        ctx.samples.clear()  # the mailbox's sample for windowed reads no longer stands for it
    # each stored message as the batch found it, or as it inserted it
    stored.update((d.message["_id"], d.message) for d in unique if d.message["_id"] in created)
    recorded = {key for key, (_id, _, _) in folded.items() if _id in created}
    fresh = []
    for docs in batch:
        fresh.append(docs.message["_id"] in created)
        created.discard(docs.message["_id"])  # a repeat within the batch is "already stored"
    # a repeat within the batch, and every copy of a stored message, may be other bytes
    copies = [d for d, new in zip(batch, fresh, strict=True) if not new]
    foldered = await _add_folders(ctx, copies, stored)
    if started is not None:
        await wrap_future(started)
    variants, wrote = await _keep_variants(
        ctx, [d for d in copies if id(d) not in recorded], stored, concern, repair=repair, put_ahead=put_ahead
    )
    variants |= recorded
    if not wrote and (not journaled or foldered):
        await ctx.journal_barrier(concern)
    # the local search index (search_index=) follows the commit: what this batch created
    await indexing.after_write(
        ctx, [d for d, new in zip(batch, fresh, strict=True) if new], foldered, later=index_later
    )
    return [
        StoreResult(d.message_id, d.message_key, d.thread_id, d.thread_key, new, id(d) in variants)
        for d, new in zip(batch, fresh, strict=True)
    ]


def _variant_record(docs: MessageDocuments, blob: Blob, now: _dt.datetime) -> dict[str, Any]:
    """What ``variants`` records of a copy kept as a variant (``blob``: its raw bytes' blob)."""
    record = {"sha256": docs.message["rawSha256"], "size": len(blob.data), "receivedAt": now}
    record.update(uidl=docs.message.get("uidl"), blobKey=blob.key)
    return record


def _raw_blob(docs: MessageDocuments, blob_prefix: str) -> Blob:
    """A copy's raw bytes as the variant blob of the stored message (of ``blob_prefix``)."""
    raw = docs.raw_message()
    assert raw is not None  # a copy with a rawSha256 was built from raw bytes
    return Blob(variant_blob_key(blob_prefix, docs.message["rawSha256"]), raw, "message/rfc822")


def _variants_ahead(
    batch: Sequence[MessageDocuments], stored: Mapping[str, Mapping[str, Any]]
) -> list[tuple[Blob, str]]:
    """The variant blobs ``_keep_variants`` will upload for the batch's copies of messages the
    batch's lookup found stored (other bytes than every copy recorded there: its ``rawSha256``
    and ``variants``), with their messageKey, one per key. A message stored without
    ``rawSha256`` (its hash is read from its raw blob) is left to ``_keep_variants``."""
    found: dict[str, tuple[Blob, str]] = {}
    for docs in batch:
        message = stored.get(docs.message["_id"])
        sha = docs.message.get("rawSha256")
        if message is None or not sha or not message.get("rawSha256"):
            continue
        recorded = {v.get("sha256") for v in message.get("variants") or ()}
        if sha == message["rawSha256"] or sha in recorded:
            continue
        blob = _raw_blob(docs, message["blobPrefix"])
        found.setdefault(blob.key, (blob, message["messageKey"]))
    return list(found.values())


def _fold_repeats(
    batch: Sequence[MessageDocuments], unique: Sequence[MessageDocuments]
) -> dict[int, tuple[str, Blob, str]]:
    """Copies later in the batch of a message the batch inserts, with other bytes: their records
    go in the inserted document (``variants``/``variantHashes``, in batch order, as
    ``_keep_variants`` would append them), so the insert records them, one statement fewer a
    copy. Sets (or, where there is none, removes) the fields on each new message: a pass after
    a restart folds anew. Returns ``id()`` of each folded copy -> (message ``_id``, its blob,
    the messageKey), the blob to upload with the new messages' (cold tier first)."""
    new = {d.message["_id"]: d for d in unique}
    records: dict[str, list[dict[str, Any]]] = {}
    folded: dict[int, tuple[str, Blob, str]] = {}
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    for docs in batch:
        _id = docs.message["_id"]
        head = new.get(_id)
        sha = docs.message.get("rawSha256")
        if head is None or docs is head or not sha:
            continue
        kept = records.setdefault(_id, [])
        if sha == head.message.get("rawSha256") or any(r["sha256"] == sha for r in kept):
            continue
        blob = _raw_blob(docs, head.message["blobPrefix"])
        kept.append(_variant_record(docs, blob, now))
        folded[id(docs)] = (_id, blob, head.message_key)
    for _id, head in new.items():
        if records.get(_id):
            head.message["variants"] = records[_id]
            head.message["variantHashes"] = [r["sha256"] for r in records[_id]]
        else:
            head.message.pop("variants", None)
            head.message.pop("variantHashes", None)
    return folded


async def _add_folders(
    ctx: AsyncStoreContext, copies: Sequence[MessageDocuments], stored: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """A re-delivery found in another folder: the folder joins the stored message's
    (``$addToSet``, one update per message that lacks one; never an upsert, so a message deleted
    meanwhile stays deleted). Tags are never touched by a re-delivery. Returns the keys of the
    messages changed. ``stored``: the messages as the batch found or inserted them: one that
    holds every folder of its copies already is not sent a statement (a re-delivery from the
    same folder, the common case, costs the server nothing)."""
    wanted: dict[str, tuple[str, list[str]]] = {}
    for docs in copies:
        folders = docs.message.get("folders")
        known = stored.get(docs.message["_id"])
        if folders and known is not None:
            folders = [f for f in folders if f not in (known.get("folders") or ())]
        if folders:
            key, have = wanted.setdefault(docs.message["_id"], (docs.message_key, []))
            have.extend(f for f in folders if f not in have)
    changed: list[str] = []
    for _id, (key, folders) in wanted.items():
        done = await ctx.messages.update_one(
            {**ctx.by_id(_id), **needs_change("folders", folders, ())}, {"$addToSet": {"folders": {"$each": folders}}}
        )
        if done.modified_count:
            changed.append(key)
    return changed


async def _keep_variants(
    ctx: AsyncStoreContext,
    copies: Sequence[MessageDocuments],
    stored: dict[str, Mapping[str, Any]],
    concern: Any,
    *,
    repair: bool = False,
    put_ahead: set[str] | None = None,
) -> tuple[set[int], bool]:
    """Keep the raw bytes of each copy of a stored message that differ from every copy kept
    (compared by SHA-256), as a blob under the message's prefix and a ``variants`` record on it.

    ``stored``: what the batch knows of the stored messages (its lookup, and what it inserted);
    a message it does not know (a concurrent writer inserted it first) is read here. Blobs
    first (one upload for the batch), then one atomic update per copy that records it unless a
    record of its hash is there (``variant_record_update``): so the same bytes again, or from a
    concurrent writer, add nothing, and exactly one writer records them. Returns ``id()`` of the
    copies this call recorded, and whether it wrote: then its last update was under ``concern``
    (the journal holds it, and every write of the batch before it, as a barrier would).
    Costs nothing for mail without duplicates.

    ``repair`` (a pass after a server restart): a copy whose record is there gets its blob
    uploaded again where its ``files`` document is missing: the blob may have gone with the
    server that restarted, while the driver's retry wrote the record on the new one.
    ``put_ahead``: keys of variant blobs the caller put already (``_variants_ahead``).
    """
    copies = [d for d in copies if d.message.get("rawSha256")]
    if not copies:
        return set(), False
    unknown = list({d.message["_id"] for d in copies if d.message["_id"] not in stored})
    if unknown:
        stored = {**stored, **{m["_id"]: m async for m in ctx.messages.find(ctx.by_ids(unknown), _STORED_FIELDS)}}
    known: dict[str, set[str]] = {}
    todo: list[tuple[MessageDocuments, Mapping[str, Any], Blob]] = []
    recorded: list[tuple[Blob, str]] = []  # copies recorded already: their blobs, for a repair
    for docs in copies:
        message = stored.get(docs.message["_id"])
        if message is None:  # deleted meanwhile: nothing to keep it beside
            continue
        if message["_id"] not in known:
            known[message["_id"]] = await blobstore.recorded_hashes(ctx, message)
        sha = docs.message["rawSha256"]
        blob = _raw_blob(docs, message["blobPrefix"])
        if sha in known[message["_id"]]:
            if repair and sha != message.get("rawSha256"):
                recorded.append((blob, message["messageKey"]))
            continue
        known[message["_id"]].add(sha)
        todo.append((docs, message, blob))
    # one files lookup; an upload only where the restart took a recorded copy's blob
    await blobstore.put_blobs(ctx, recorded)
    if not todo:
        return set(), False
    kept, wrote = await _record_variants(ctx, todo, concern, put_ahead or set())
    if repair and await _batch_order(ctx, copies):
        await ctx.journal_barrier(concern)  # the reordering came after the batch's durable write
    return kept, wrote


async def _batch_order(ctx: AsyncStoreContext, copies: Sequence[MessageDocuments]) -> bool:
    """After a repair pass recorded copies a restart took: each message's copies of this batch
    in the batch's order, as one clean delivery leaves them (the pass appended the missing ones
    after those the batch had recorded). One atomic update a message, which leaves a list that
    changed meanwhile (a concurrent writer) as it is. Whether it wrote."""
    batches: dict[str, list[str]] = {}
    for docs in copies:
        batches.setdefault(docs.message["_id"], []).append(docs.message["rawSha256"])
    fields = {"variants": 1, "variantHashes": 1}
    wrote = False
    async for message in ctx.messages.find(ctx.by_ids(list(batches)), fields):
        hashes = message.get("variantHashes") or []
        order = variants_in_batch_order(message.get("variants") or [], hashes, batches[message["_id"]])
        if order is None:
            continue
        variants, ordered = order
        unchanged = {"$eq": [{"$ifNull": ["$variantHashes", []]}, {"$literal": list(hashes)}]}
        pipeline = [
            {
                "$set": {
                    "variants": {"$cond": [unchanged, {"$literal": variants}, "$variants"]},
                    "variantHashes": {"$cond": [unchanged, {"$literal": ordered}, "$variantHashes"]},
                }
            }
        ]
        await ctx.messages.update_one(ctx.by_id(message["_id"]), pipeline)
        wrote = True
    return wrote


async def _record_variants(
    ctx: AsyncStoreContext,
    todo: Sequence[tuple[MessageDocuments, Mapping[str, Any], Blob]],
    concern: Any,
    put_ahead: set[str],
) -> tuple[set[int], bool]:
    """Upload the copies' blobs (but those in ``put_ahead``), then record each copy on its
    message (``_keep_variants``)."""
    # none of these is expected to be there (its hash is not recorded); one that is (a
    # concurrent writer's, or an upload a crash cut short) is found and completed there
    blobs = [(blob, message["messageKey"]) for _, message, blob in todo if blob.key not in put_ahead]
    await blobstore.put_blobs(ctx, blobs, absent=True)
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    kept: set[int] = set()
    for n, (docs, message, blob) in enumerate(todo, 1):
        sha = docs.message["rawSha256"]
        record = _variant_record(docs, blob, now)
        # one statement a copy: whether it modified the message says whether this call recorded it
        messages = ctx.completing(ctx.messages, concern) if n == len(todo) else ctx.messages
        pushed = await messages.update_one(ctx.by_id(message["_id"]), variant_record_update(record, ctx.dialect))
        if pushed.modified_count:
            kept.add(id(docs))
            log.debug("kept other bytes of %s as a variant (%s)", docs.message_id, sha[:12])
    return kept, True


# --- the transaction (replica sets, sharded clusters, Atlas) ---------------------------------------


def _is_transient(exc: PyMongoError) -> bool:
    """Worth retrying the whole transaction: labelled transient, or a duplicate key because a
    concurrent writer committed the same message or thread after this transaction began."""
    if exc.has_error_label("TransientTransactionError"):
        return True
    if isinstance(exc, DuplicateKeyError):
        return True
    return isinstance(exc, BulkWriteError) and only_duplicates(exc)


async def _commit_in_transaction(
    ctx: AsyncStoreContext, unique: Sequence[MessageDocuments], concern: Any, deadline: float | None = None
) -> set[str]:
    """Body, message and thread summary of each new message in one transaction.

    Transient errors (a write conflict, a failover, the open transaction of a writer that
    died holding the same documents, which the server keeps until its
    ``transactionLifetimeLimitSeconds``: 60 s on mongod) retry the whole transaction with a
    jittered, capped backoff for up to ``retry_seconds`` (120 s by default, as the driver's
    ``with_transaction``); an unknown commit result retries the commit. A batch that keeps
    conflicting (``_TXN_ATTEMPTS`` times) is split in halves that share what is left of the
    budget: a smaller transaction touches fewer thread summaries, and atomicity is per
    message anyway. Other errors raise at once. The commit is under ``concern`` (the durable
    write concern) where one is given. Returns the ``_id`` of every message created.
    """
    if deadline is None:
        deadline = monotonic() + ctx.settings.retry_seconds
    try:
        return await _transaction_with_retries(ctx, unique, concern, deadline)
    except PyMongoError as exc:
        if len(unique) == 1 or not _is_transient(exc) or monotonic() >= deadline:
            raise
    half = len(unique) // 2
    created = await _commit_in_transaction(ctx, unique[:half], concern, deadline)
    return created | await _commit_in_transaction(ctx, unique[half:], concern, deadline)


async def _transaction_with_retries(
    ctx: AsyncStoreContext, unique: Sequence[MessageDocuments], concern: Any, deadline: float
) -> set[str]:
    session = await resolve(ctx.db.client.start_session())
    async with session:
        attempt = 0
        while True:
            attempt += 1
            await resolve(session.start_transaction(write_concern=concern or ctx.db.write_concern))
            try:
                created = await _transaction_writes(ctx, unique, session, recheck=attempt > 1)
                await _commit(session, deadline)
                return created
            except PyMongoError as exc:
                if session.in_transaction:
                    await session.abort_transaction()
                remaining = deadline - monotonic()
                if not _is_transient(exc) or remaining <= 0:
                    raise
                if len(unique) > 1 and attempt >= _TXN_ATTEMPTS:
                    raise  # the caller splits the batch
                log.debug("transaction attempt %d of %d messages: %s; retrying", attempt, len(unique), exc)
                # jittered: writers that collided once must not retry in lock step
                await asyncio.sleep(min(0.005 * 2**attempt * (1 + random.random()), 0.5, remaining))


async def _commit(session: Any, deadline: float) -> None:
    while True:
        try:
            await session.commit_transaction()
            return
        except PyMongoError as exc:
            if not exc.has_error_label("UnknownTransactionCommitResult") or monotonic() > deadline:
                raise


async def _transaction_writes(
    ctx: AsyncStoreContext, unique: Sequence[MessageDocuments], session: Any, recheck: bool
) -> set[str]:
    """Insert the batch's bodies and messages, merge each thread's new messages in one upsert.

    The first attempt trusts the caller's lookup (``unique`` were not stored) and inserts
    bodies outright: a concurrent writer's message, or a body a non-transactional crash left,
    aborts it as a duplicate key, a transient error. A retry (``recheck``) looks again inside
    the transaction and replaces bodies, so leftovers cannot block it.
    """
    new = list(unique)
    if recheck:
        ids = [d.message["_id"] for d in unique]
        stored = {m["_id"] async for m in ctx.messages.find(ctx.by_ids(ids), {"_id": 1}, session=session)}
        new = [d for d in unique if d.message["_id"] not in stored]
        if not new:
            return set()
        bodies = [ReplaceOne(ctx.upsert_key(d.body["_id"]), d.body, upsert=True) for d in new]
        await ctx.bodies.bulk_write(bodies, ordered=True, session=session)
    else:
        await ctx.bodies.insert_many([d.body for d in new], ordered=True, session=session)
    await ctx.messages.insert_many([d.message for d in new], ordered=True, session=session)
    await _fold_in_transaction(ctx, [d.message for d in new], session)
    return {d.message["_id"] for d in new}


async def _fold_in_transaction(ctx: AsyncStoreContext, messages: Sequence[Mapping[str, Any]], session: Any) -> None:
    """Each thread's new messages in one write: a thread the batch starts is inserted whole,
    a stored one read and replaced by the merge (``merge_thread_summaries``). Exact: the read is
    the transaction's snapshot, and a concurrent change of the summary after it aborts the
    transaction (a write conflict, or a duplicate key for a thread inserted meanwhile)."""
    summaries = _with_tags_rev(thread_summaries(messages))
    ids = [s["_id"] for s in summaries]
    stored = {t["_id"]: t async for t in ctx.threads.find(ctx.by_ids(ids), session=session)}
    fresh = [s for s in summaries if s["_id"] not in stored]
    if fresh:
        await ctx.threads.insert_many(fresh, ordered=True, session=session)
    # the merge replaces the summary read in this snapshot: the embedded server replaces a
    # document in less than half the time it takes to $set three of its fields
    merges = [
        ReplaceOne(ctx.by_id(summary["_id"]), merge_thread_summaries(stored[summary["_id"]], summary))
        for summary in summaries
        if summary["_id"] in stored
    ]
    if merges:
        await ctx.threads.bulk_write(merges, ordered=True, session=session)


def _with_tags_rev(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A summary that brings tags to its thread sets a new ``tagsRev`` (``pure/tags.py``: a tag
    removal racing this store then finds the token changed and looks again)."""
    for summary in summaries:
        if summary.get("tags"):
            summary["tagsRev"] = secrets.token_hex(8)
    return summaries


# --- without a transaction (standalone servers) -------------------------------------------------


async def _fold_many(ctx: AsyncStoreContext, messages: Sequence[Mapping[str, Any]], concern: Any) -> None:
    """Merge newly inserted messages into their threads without a transaction: a thread the
    batch starts is inserted whole (one unordered insert); a stored one, or one a concurrent
    writer inserted first, gets one atomic pipeline merge (``summary_merge_update``) per thread,
    in one bulk. The thread writes are the batch's last: under ``concern``."""
    threads = ctx.completing(ctx.threads, concern)
    summaries = _with_tags_rev(thread_summaries(messages))
    if summaries:
        ids = [s["_id"] for s in summaries]
        stored = {t["_id"] async for t in ctx.threads.find(ctx.by_ids(ids), {"_id": 1})}
        fresh = [s for s in summaries if s["_id"] not in stored]
        taken = await insert_ignoring_duplicates(threads, fresh)
        summaries = [s for s in summaries if s["_id"] in stored] + [fresh[i] for i in sorted(taken)]
    updates = [summary_merge_update(s, sharded=ctx.sharded) for s in summaries]
    if len(updates) <= 1:
        for selector, pipeline in updates:
            await _fold_into_thread(threads, selector, pipeline)
        return
    try:
        await threads.bulk_write([UpdateOne(*update, upsert=True) for update in updates], ordered=True)
    except BulkWriteError as exc:
        if not only_duplicates(exc):
            raise
        # a concurrent writer created a thread first: redo the failed op and the ones after it
        failed = exc.details["writeErrors"][0]["index"]
        for selector, pipeline in updates[failed:]:
            await _fold_into_thread(threads, selector, pipeline)


async def _fold_into_thread(threads: Any, selector: Mapping[str, Any], pipeline: Sequence[Mapping[str, Any]]) -> None:
    for attempt in range(_THREAD_UPSERT_RETRIES):
        try:
            await threads.update_one(selector, pipeline, upsert=True)
            return
        except DuplicateKeyError:
            # two writers upserted the same new thread at once; the loser retries as an update
            if attempt == _THREAD_UPSERT_RETRIES - 1:
                raise
