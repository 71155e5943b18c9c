"""Writing mail (C.4): blobs, bodies, the message insert (the commit point), thread summaries.

``write_batch`` is the one write path: ``store``, ``store_many``/``store_iter``, ``add`` and the
mail adapters all end here. The documents are built by the pure ``pure/documents.py``; this is
the order of the statements, the transaction where the deployment has one, and what makes a
re-delivery after any crash end as one clean delivery would.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import random
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from time import monotonic
from typing import Any

from bson import ObjectId
from pymongo import ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from ..errors import AecsMongoError
from ..pure.documents import (
    Blob,
    MessageDocuments,
    build_documents,
    merge_thread_summaries,
    summary_merge_update,
    thread_summaries,
    variant_blob_key,
)
from ..pure.keys import check_str
from ..pure.settings import check_limit
from ..results import StoreResult
from . import blobstore, capabilities
from .context import AsyncStoreContext, insert_ignoring_duplicates, log, only_duplicates, resolve
from .prefetch import AsyncPrefetch

__all__ = ["build", "parse_raw", "store_iter", "write_batch"]

_THREAD_UPSERT_RETRIES = 5
_TXN_ATTEMPTS = 5
_INDEX = re.compile(r"\[\d+\]")


def parse_raw(raw: bytes, for_ai_max_chars: int) -> Any:
    """Normalize raw RFC 5322 bytes (the normalizer is imported on first use)."""
    from ..normalize import parse_email

    return parse_email(raw, for_ai_max_chars=for_ai_max_chars)


def build(
    ctx: AsyncStoreContext,
    email: Mapping[str, Any] | bytes,
    attachments: Sequence[bytes | None] | None,
    uidl: str | None,
) -> MessageDocuments:
    """The documents of one message (raw bytes are normalized first and kept byte-exact)."""
    if uidl is not None:
        check_str(uidl, "uidl")
    settings = ctx.settings
    if isinstance(email, (bytes, bytearray, memoryview)):
        raw = bytes(email)
        parsed = parse_raw(raw, settings.for_ai_max_chars)
        docs = build_documents(
            parsed.email,
            mailbox_id=ctx.mailbox_id,
            owner_addresses=settings.owner_addresses,
            raw_bytes=raw,
            attachment_data=attachments if attachments is not None else parsed.attachment_data,
            list_id=parsed.list_id,
            uidl=uidl,
            raw_from_full=True,
        )
    else:
        docs = build_documents(
            email,
            mailbox_id=ctx.mailbox_id,
            owner_addresses=settings.owner_addresses,
            attachment_data=attachments,
            uidl=uidl,
        )
    for path in docs.ignored:
        name = _INDEX.sub("[]", path)
        if ctx.first_time(f"ignored field {name}"):
            log.info("ignoring unknown field %s (AECS-1 §10.6); said once per store", name)
    return docs


async def store_iter(
    ctx: AsyncStoreContext,
    items: Iterable[Any],
    batch_size: int,
    on_error: Callable[[int, Any, Exception], None] | None,
) -> AsyncIterator[StoreResult]:
    """Batches of ``items`` built on a worker thread (``prefetch``) while the last is written."""
    check_limit(batch_size)
    numbered = enumerate(items)
    Built = tuple[list[MessageDocuments], list[tuple[int, Any, AecsMongoError]]]

    def build_next() -> Built | None:
        batch: list[MessageDocuments] = []
        refused: list[tuple[int, Any, AecsMongoError]] = []  # reported from the caller's thread
        for index, item in numbered:
            try:
                batch.append(build(ctx, item, None, None))
            except AecsMongoError as exc:
                if on_error is None:
                    raise
                refused.append((index, item, exc))
            if len(batch) >= batch_size:
                break
        return (batch, refused) if batch or refused else None

    prefetch: AsyncPrefetch[Built] = AsyncPrefetch(build_next)
    try:
        while (built := await prefetch.next()) is not None:
            batch, refused = built
            for error in refused:
                assert on_error is not None
                on_error(*error)
            if batch:
                for result in await write_batch(ctx, batch):
                    yield result
    finally:
        prefetch.close()


async def write_batch(ctx: AsyncStoreContext, batch: Sequence[MessageDocuments]) -> list[StoreResult]:
    """C.4 order, batched: blobs, bodies, messages (one unordered insert), thread updates.

    One ``_id $in`` find first tells the batch's new messages from copies of stored ones: only
    new messages upload blobs (a copy keeps nothing but its raw bytes, as a variant), so the
    end state does not depend on where batches begin, and the blob upload needs no lookup.
    The batch returns only once its last write is durable (``capabilities.completion_concern``):
    that write is journaled, or, where the batch wrote nothing new (every message already
    stored, as in a re-delivery), one barrier write is.
    """
    concern = await capabilities.completion_concern(ctx)
    first: dict[str, MessageDocuments] = {}
    for docs in batch:
        first.setdefault(docs.message["_id"], docs)
    ids = list(first)
    stored = {m["_id"] async for m in ctx.messages.find(ctx.by_ids(ids), {"_id": 1})}
    unique = [d for d in first.values() if d.message["_id"] not in stored]
    await blobstore.put_blobs(ctx, [(blob, d.message_key) for d in unique for blob in d.blobs], absent=True)
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
    fresh = []
    for docs in batch:
        fresh.append(docs.message["_id"] in created)
        created.discard(docs.message["_id"])  # a repeat within the batch is "already stored"
    # a repeat within the batch, and every copy of a stored message, may be other bytes
    variants, wrote = await _keep_variants(ctx, [d for d, new in zip(batch, fresh, strict=True) if not new])
    if wrote or not journaled:
        await ctx.journal_barrier(concern)
    return [
        StoreResult(d.message_id, d.message_key, d.thread_id, d.thread_key, new, id(d) in variants)
        for d, new in zip(batch, fresh, strict=True)
    ]


async def _keep_variants(ctx: AsyncStoreContext, copies: Sequence[MessageDocuments]) -> tuple[set[int], bool]:
    """Keep the raw bytes of each copy of a stored message that differ from every copy kept
    (compared by SHA-256), as a blob under the message's prefix and a ``variants`` record on it.

    In this order, each statement by ``_id`` and batched: the blobs; each copy's record pushed
    to ``variants`` with a ``delivery`` id of its own; one read of those messages, where the
    first record of each hash wins (pushes are appended atomically, so every writer that reads
    after its own push agrees on the first) and the other writers pull theirs; then the hash
    added to ``variantHashes`` (``$addToSet``: idempotent), which makes the copy listed. A crash
    anywhere in between is completed by the next delivery of those bytes, as a clean delivery
    would end: a record without its hash gets the hash, a hash without its record (a release
    that claimed first) gets a record. Returns ``id()`` of the copies whose record won here, and
    whether anything was written (the caller then makes it durable). Costs nothing for mail
    without duplicates.
    """
    copies = [d for d in copies if d.message.get("rawSha256")]
    if not copies:
        return set(), False
    ids = list({d.message["_id"] for d in copies})
    fields = {"rawSha256": 1, "variantHashes": 1, "variants.sha256": 1, "blobPrefix": 1, "blobs": 1, "messageKey": 1}
    stored = {m["_id"]: m async for m in ctx.messages.find(ctx.by_ids(ids), fields)}
    done: dict[str, set[str]] = {}
    todo: list[tuple[MessageDocuments, Mapping[str, Any], Blob, bool]] = []
    for docs in copies:
        message = stored.get(docs.message["_id"])
        if message is None:  # deleted meanwhile: nothing to keep it beside
            continue
        if message["_id"] not in done:
            done[message["_id"]] = await blobstore.kept_hashes(ctx, message)
        sha = docs.message["rawSha256"]
        if sha in done[message["_id"]]:
            continue
        done[message["_id"]].add(sha)
        raw = next(b.data for b in docs.blobs if b.key.endswith("/raw.eml"))
        recorded = any(v.get("sha256") == sha for v in message.get("variants") or ())
        todo.append(
            (docs, message, Blob(variant_blob_key(message["blobPrefix"], sha), raw, "message/rfc822"), recorded)
        )
    if not todo:
        return set(), False
    await blobstore.put_blobs(ctx, [(blob, message["messageKey"]) for _, message, blob, _ in todo])
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    mine: dict[Any, MessageDocuments] = {}  # delivery id -> the copy it records
    pushes = []
    for docs, message, blob, recorded in todo:
        if recorded:  # a record without its hash (a crash before the hash): the hash only
            continue
        delivery = ObjectId()
        mine[delivery] = docs
        record = {"sha256": docs.message["rawSha256"], "size": len(blob.data), "receivedAt": now}
        record |= {"uidl": docs.message.get("uidl"), "blobKey": blob.key, "delivery": delivery}
        pushes.append((ctx.by_id(message["_id"]), {"$push": {"variants": record}}))
    kept: set[int] = set()
    if pushes:
        await ctx.write_each(ctx.messages, pushes)
        pushed = list({selector["_id"] for selector, _ in pushes})
        first: dict[tuple[str, str], Any] = {}
        async for message in ctx.messages.find(ctx.by_ids(pushed), {"variants": 1}):
            for variant in message.get("variants") or ():
                first.setdefault((message["_id"], variant.get("sha256")), variant.get("delivery"))
        losers = []
        for delivery, docs in mine.items():
            if first.get((docs.message["_id"], docs.message["rawSha256"])) == delivery:
                kept.add(id(docs))
                log.debug("kept other bytes of %s as a variant (%s)", docs.message_id, docs.message["rawSha256"][:12])
            else:  # a concurrent writer recorded the same bytes first
                losers.append((ctx.by_id(docs.message["_id"]), {"$pull": {"variants": {"delivery": delivery}}}))
        await ctx.write_each(ctx.messages, losers)
    claims = [(ctx.by_id(m["_id"]), {"$addToSet": {"variantHashes": d.message["rawSha256"]}}) for d, m, _, _ in todo]
    await ctx.write_each(ctx.messages, claims)
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
    """Body, message and thread summary of each new message in one transaction (C.4).

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
    a stored one read and set to the merge (``merge_thread_summaries``). Exact: the read is
    the transaction's snapshot, and a concurrent change of the summary after it aborts the
    transaction (a write conflict, or a duplicate key for a thread inserted meanwhile)."""
    summaries = thread_summaries(messages)
    ids = [s["_id"] for s in summaries]
    stored = {t["_id"]: t async for t in ctx.threads.find(ctx.by_ids(ids), session=session)}
    fresh = [s for s in summaries if s["_id"] not in stored]
    if fresh:
        await ctx.threads.insert_many(fresh, ordered=True, session=session)
    sets = []
    for summary in summaries:
        if summary["_id"] in stored:
            old = stored[summary["_id"]]
            merged = merge_thread_summaries(old, summary)
            changed = {k: v for k, v in merged.items() if k not in old or old[k] != v}
            sets.append(UpdateOne(ctx.by_id(summary["_id"]), {"$set": changed}))
    if sets:
        await ctx.threads.bulk_write(sets, ordered=True, session=session)


# --- without a transaction (standalone servers) -------------------------------------------------


async def _fold_many(ctx: AsyncStoreContext, messages: Sequence[Mapping[str, Any]], concern: Any) -> None:
    """Merge newly inserted messages into their threads without a transaction: a thread the
    batch starts is inserted whole (one unordered insert); a stored one, or one a concurrent
    writer inserted first, gets one atomic pipeline merge (``summary_merge_update``) per thread.
    Where the driver has no bulk of pipeline updates (the unit tier), one update per thread.
    The thread writes are the batch's last: under ``concern``."""
    threads = ctx.completing(ctx.threads, concern)
    summaries = thread_summaries(messages)
    bulk = ctx.capabilities.bulk_writes
    if bulk and summaries:
        ids = [s["_id"] for s in summaries]
        stored = {t["_id"] async for t in ctx.threads.find(ctx.by_ids(ids), {"_id": 1})}
        fresh = [s for s in summaries if s["_id"] not in stored]
        taken = await insert_ignoring_duplicates(threads, fresh)
        summaries = [s for s in summaries if s["_id"] in stored] + [fresh[i] for i in sorted(taken)]
    updates = [summary_merge_update(s, sharded=ctx.sharded) for s in summaries]
    if len(updates) <= 1 or not bulk:
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
