"""Vectors: ``set_embedding(s)``, ``semantic_search`` and, off Atlas, the sealing of their
quantized copies into blocks, the exact search's two passes and ``reindex``'s upkeep of blocks.

The rules (the stored form, what a block holds, why the newest copy of a vector wins, the
bounds of the search) are in the pure ``pure/vectors.py``; this is the order of the reads and
writes that keeps them true under crashes and concurrent writers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from types import ModuleType
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from ..errors import NotFoundError
from ..pure import queries, vectors
from ..pure.keys import check_str, strip_message_id, thread_key
from ..pure.settings import check_cap, check_limit
from ..pure.vectors import Sealable
from ..results import SearchResults
from ..types import SemanticHit
from . import capabilities
from .context import AsyncStoreContext, log, resolve, to_list

__all__ = [
    "compact",
    "exact_search",
    "read_ids",
    "rewrite_old",
    "seal",
    "semantic_search",
    "set_embedding",
    "set_embeddings",
    "write",
]

_VECTOR_KEYS = {"threadKey": 1, "messageKey": 1}


async def set_embedding(ctx: AsyncStoreContext, message_id: str, vector: Sequence[float]) -> None:
    """One message's vector, replacing an earlier one; ``NotFoundError`` if it is not stored."""
    checked = vectors.check_vector(vector)
    message = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), _VECTOR_KEYS)
    if message is None:
        raise NotFoundError(f"no message {strip_message_id(message_id)!r} in mailbox {ctx.mailbox_id!r}")
    await write(ctx, [(message, checked)])


async def set_embeddings(ctx: AsyncStoreContext, vectors_by_id: Mapping[str, Sequence[float]]) -> int:
    """Many vectors, ``vectors.WRITE_BATCH`` a bulk write, every one checked before the first
    is written; a message not stored (deleted since a worker saw it) is skipped. How many kept."""
    checked = {ctx.id_for(mid): vectors.check_vector(vector) for mid, vector in vectors_by_id.items()}
    ids, kept = list(checked), 0
    for start in range(0, len(ids), vectors.WRITE_BATCH):
        found = read_ids(ctx, ctx.messages, ids[start : start + vectors.WRITE_BATCH], _VECTOR_KEYS)
        pairs = [(m, checked[m["_id"]]) async for m in found]
        kept += await write(ctx, pairs) if pairs else 0
    return kept


async def semantic_search(
    ctx: AsyncStoreContext, vector: Sequence[float], limit: int, thread_id: str | None, scan_limit: int | None
) -> SearchResults[SemanticHit]:
    """The nearest messages, best first, by the engine ``vector_engine`` picks."""
    check_limit(limit)
    if scan_limit is not None:
        check_cap(scan_limit, "scan_limit")
    else:
        scan_limit = ctx.settings.scan_limit
    tkey = None if thread_id is None else thread_key(check_str(thread_id, "thread_id"))
    hits = await _vector_hits(ctx, vector, limit, tkey, scan_limit)
    found = ctx.messages.find(ctx.by_ids([h["_id"] for h in hits]), {"messageId": 1, "subject": 1, "ts": 1})
    rows = {m["_id"]: m async for m in found}
    results: list[SemanticHit] = [
        {
            "messageId": rows[h["_id"]]["messageId"],
            "subject": rows[h["_id"]].get("subject"),
            "ts": int(rows[h["_id"]]["ts"]),
            "score": h.get("score"),
        }
        for h in hits
        if h["_id"] in rows
    ]
    return SearchResults(results, complete=hits.complete, examined=hits.examined, engine=hits.engine)


async def _vector_hits(
    ctx: AsyncStoreContext, vector: Sequence[float], limit: int, tkey: str | None, cap: int | None
) -> SearchResults[dict[str, Any]]:
    """``{_id, score}`` of the nearest vectors: Atlas ``$vectorSearch``, or the exact search."""
    engine = ctx.settings.checked_vector_engine()
    if engine == "auto":
        engine = "atlas" if await capabilities.atlas_vectors(ctx) else "exact"
    if engine == "atlas":
        pipeline = queries.vector_search_pipeline(ctx.mailbox_id, [float(v) for v in vector], limit, tkey)
        return SearchResults(await to_list(await resolve(ctx.vectors.aggregate(pipeline))), engine="atlas")
    search_numpy = vectors.numpy_backend()
    if ctx.first_time("exact vector search"):
        log.debug("semantic_search in mailbox %r: exact search over every vector (no Atlas index)", ctx.mailbox_id)
    if search_numpy is None and ctx.first_time("vectors without numpy"):
        log.warning(
            "semantic_search ranks vectors in pure Python (no numpy), slower: pip install"
            " 'aecs-mongo[vectors]'; said once per store"
        )
    return await exact_search(ctx, ctx.messages, vector, limit, tkey, cap, search_numpy)


async def read_ids(
    ctx: AsyncStoreContext, collection: Any, ids: Sequence[str], projection: Mapping[str, Any]
) -> AsyncIterator[Any]:
    """The documents of ``ids``, read ``vectors.READ_BATCH`` ids per query (the embedded server's
    cost of one ``$in`` grows with the square of its length)."""
    if not ids:
        return
    for selector in ctx.dialect.split_in(ctx.by_ids(list(ids)), vectors.READ_BATCH):
        async for document in collection.find(selector, projection):
            yield document


async def write(ctx: AsyncStoreContext, pairs: Sequence[tuple[Mapping[str, Any], Sequence[float]]]) -> int:
    """Writes the vectors of ``(message, checked vector)`` pairs (unsealed), in one bulk under
    the durable write concern; seals a block when one is due (then one barrier makes the seal's
    writes durable too). Returns how many were written."""
    concern = await capabilities.completion_concern(ctx)
    documents = vectors.vector_documents(ctx.mailbox_id, pairs)
    collection = ctx.completing(ctx.vectors, concern)
    await ctx.write_each(collection, [(ctx.upsert_key(d["_id"]), d) for d in documents], replace=True)
    if await _seal_if_due(ctx, len(documents)):
        await ctx.journal_barrier(concern)
    return len(documents)


async def _seal_if_due(ctx: AsyncStoreContext, written: int) -> int:
    """Seals when a block's worth is unsealed, checked every ``SEAL_CHECK_EVERY`` vectors written
    (a store starts with its count there, so its first write checks)."""
    ctx.vector_writes += written
    if not written or ctx.vector_writes < vectors.SEAL_CHECK_EVERY:
        return 0
    ctx.vector_writes = 0
    selector = vectors.unsealed_selector(ctx.mailbox_id)
    if await ctx.vectors.count_documents(selector, limit=vectors.BLOCK_VECTORS) >= vectors.BLOCK_VECTORS:
        return await seal(ctx)
    return 0


async def seal(ctx: AsyncStoreContext, *, partial: bool = False) -> int:
    """Packs the mailbox's unsealed vectors into blocks: full blocks only, unless ``partial``
    (``reindex``: the rest too). Returns how many vectors were sealed.

    Vectors without a quantized copy (old arrays, which ``reindex`` rewrites first) are passed
    over here, not in the filter: beside the index's equalities an ``$exists`` makes the
    embedded server scan the whole collection."""
    selector = vectors.unsealed_selector(ctx.mailbox_id)
    sealed = 0
    while True:
        rows = [r async for r in ctx.vectors.find(selector, vectors.seal_projection()).limit(vectors.BLOCK_VECTORS)]
        done = 0
        for entries in vectors.plan_blocks(rows, partial=partial):
            done += await _seal_block(ctx, entries)
        sealed += done
        if done == 0 or len(rows) < vectors.BLOCK_VECTORS:
            return sealed


async def _seal_block(ctx: AsyncStoreContext, entries: Sequence[Sealable]) -> int:
    """One block, in the order ``vectors`` explains: take a ``seq`` (insert the empty block),
    then keep the entries whose ``rev`` still matches, fill the block, mark the vectors."""
    blocks = ctx.blocks
    seq = await _take_seq(ctx)
    ids = [e[0] for e in entries]
    current = {d["_id"]: d.get("rev") async for d in read_ids(ctx, ctx.vectors, ids, {"rev": 1})}
    kept = [e for e in entries if e[0] in current and current[e[0]] == e[4]]
    _id = vectors.block_id(ctx.mailbox_id, seq)
    if not kept:
        await blocks.delete_one({"_id": _id})
        return 0
    filled = await blocks.replace_one({"_id": _id}, vectors.block_document(ctx.mailbox_id, seq, kept))
    if filled.matched_count != 1:
        return 0  # the empty block was removed meanwhile (an erase): mark nothing
    marks = [({**ctx.by_id(e[0]), "rev": e[4]}, vectors.sealed_update(seq)) for e in kept]
    await ctx.write_each(ctx.vectors, marks)
    log.debug("mailbox %r: sealed %d vectors into block %d", ctx.mailbox_id, len(kept), seq)
    return len(kept)


async def _take_seq(ctx: AsyncStoreContext) -> int:
    """The next block ``seq`` of the mailbox, taken by inserting its empty block.

    Numbers come from the mailbox's counter (``vectors.counter_id``, ``$inc``), so they only
    grow, whatever blocks are removed meanwhile; a counter not yet made (the first block) starts
    above every existing block. Finding that maximum sorts the blocks on the embedded server,
    which reads them all: once per mailbox, not once per block.
    """
    blocks = ctx.blocks
    counter = vectors.counter_id(ctx.mailbox_id)
    while True:
        taken = await blocks.find_one_and_update(
            ctx.upsert_key(counter), {"$inc": {"next": 1}}, return_document=ReturnDocument.AFTER
        )
        if taken is None:
            last = await blocks.find_one({"mailboxId": ctx.mailbox_id}, {"seq": 1}, sort=[("seq", -1)])
            start = {"$max": {"next": int(last["seq"]) if last and "seq" in last else 0}}
            await blocks.update_one(
                ctx.upsert_key(counter), {**start, "$setOnInsert": {"mailboxId": ctx.mailbox_id}}, upsert=True
            )
            continue
        seq = int(taken["next"])
        try:
            await blocks.insert_one(vectors.block_document(ctx.mailbox_id, seq, []))
            return seq
        except DuplicateKeyError:
            continue  # a block of that number exists (made before the counter): take the next


async def exact_search(
    ctx: AsyncStoreContext,
    messages: Any,
    query: Sequence[float],
    limit: int,
    tkey: str | None,
    cap: int | None,
    numpy: ModuleType | None,
) -> SearchResults[dict[str, Any]]:
    """``{_id, score}`` of the exact nearest vectors of the mailbox (or of the thread ``tkey``),
    considering at most ``cap`` vectors (``complete=False`` when that left some out)."""
    search = vectors.ExactSearch(query, limit, numpy=numpy)
    complete = True
    if tkey is None:
        rows = ctx.vectors.find(vectors.unsealed_selector(ctx.mailbox_id), vectors.first_pass_projection())
        if cap is not None:
            rows = rows.limit(cap + 1)
        async for row in rows:
            if search.examined == cap:
                complete = False
                break
            search.offer(row)
        if complete:
            blocks = ctx.blocks.find({"mailboxId": ctx.mailbox_id}).sort("seq", -1)
            async for block in blocks:
                if "ids" not in block:
                    continue  # the counter
                if search.examined == cap:
                    complete = False  # a block is left unread
                    break
                if search.offer_block(block, None if cap is None else cap - search.examined):
                    complete = False  # part of this block was left out
                    break
    else:
        members = messages.find({"mailboxId": ctx.mailbox_id, "threadKey": tkey}, {"_id": 1})
        ids = [m["_id"] async for m in members]
        if cap is not None and len(ids) > cap:
            ids, complete = ids[:cap], False
        async for row in read_ids(ctx, ctx.vectors, ids, {"embedding": 1}):
            search.offer_exact(row["_id"], row.get("embedding"))
    while wanted := search.wanted():
        async for row in read_ids(ctx, ctx.vectors, wanted, {"embedding": 1}):
            search.rescore(row["_id"], row.get("embedding"))
        search.asked(wanted)
    return SearchResults(search.results(), complete=complete, examined=search.examined, engine="exact")


async def rewrite_old(ctx: AsyncStoreContext) -> int:
    """Rewrites the mailbox's vectors stored as BSON arrays (earlier releases) as binData; how many."""
    selector = vectors.unsealed_selector(ctx.mailbox_id)  # old ones are unsealed; ``$type``: see ``seal``
    rewritten = 0
    batch: list[tuple[Mapping[str, Any], Sequence[float]]] = []
    async for old in ctx.vectors.find(selector, {"embedding": 1, "threadKey": 1, "messageKey": 1}):
        if not isinstance(old.get("embedding"), list):
            continue
        values = vectors.storable(old["embedding"])
        if values is None:
            continue
        batch.append((old, values))
        if len(batch) == vectors.WRITE_BATCH:
            rewritten += await write(ctx, batch)
            batch = []
    return rewritten + (await write(ctx, batch) if batch else 0)


async def compact(ctx: AsyncStoreContext) -> dict[str, int]:
    """Drops the block entries of vectors deleted or sealed again since (``vectors.compact_plan``),
    and the blocks left empty. One query on ``aecs_vectors_unsealed`` for the unsealed vectors,
    then one per block for the vectors sealed in it."""
    blocks = ctx.blocks
    report = {"entriesDropped": 0, "blocksRemoved": 0}
    selector = vectors.unsealed_selector(ctx.mailbox_id)
    unsealed = {d["_id"] async for d in ctx.vectors.find(selector, {"_id": 1})}
    listed = [b async for b in blocks.find({"mailboxId": ctx.mailbox_id}, {"ids": 1, "seq": 1}) if "ids" in b]
    for listing in listed:
        ids = listing["ids"]
        sealed_here = {**selector, "block": listing["seq"]}
        live = unsealed | {d["_id"] async for d in ctx.vectors.find(sealed_here, {"_id": 1})}
        keep = vectors.compact_plan(ids, live)
        if keep is None:
            continue
        if not keep:
            await blocks.delete_one({"_id": listing["_id"]})
            report["blocksRemoved"] += 1
        else:
            block = await blocks.find_one({"_id": listing["_id"]})
            smaller = None if block is None else vectors.kept_block(block, keep)
            if smaller is None:
                continue  # gone meanwhile, or malformed (its vectors are read one by one)
            await blocks.replace_one({"_id": listing["_id"]}, smaller)
        report["entriesDropped"] += len(ids) - len(keep)
    return report
