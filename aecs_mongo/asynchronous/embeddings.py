"""The I/O of vectors off Atlas: writing them, sealing their quantized copies into blocks, the
exact search's two passes, and ``reindex``'s upkeep of the blocks.

The rules (the stored form, what a block holds, why the newest copy of a vector wins, the
bounds of the search) are in the pure ``pure/vectors.py``; this is the order of the reads and
writes that keeps them true under crashes and concurrent writers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from ..pure import queries, vectors
from ..pure.indexes import BLOCKS_COLLECTION
from ..pure.vectors import Sealable
from ..results import SearchResults
from .deletion import AsyncStoreLike

__all__ = ["compact", "exact_search", "read_ids", "rewrite_old", "seal", "write"]

log = logging.getLogger("aecs_mongo")

#: Vectors written by one store between two checks of whether a block is due (a store's first
#: write checks too). A check is one count of at most ``BLOCK_VECTORS`` index entries.
SEAL_CHECK_EVERY = 100


class AsyncVectorHost(AsyncStoreLike, Protocol):
    """What this module needs of a store (a protocol: the store imports this module)."""

    _vectors: Any
    _vector_writes: int

    def _by_id(self, _id: str) -> dict[str, Any]: ...


async def read_ids(
    host: AsyncVectorHost, collection: Any, ids: Sequence[str], projection: Mapping[str, Any]
) -> AsyncIterator[Any]:
    """The documents of ``ids``, read ``vectors.READ_BATCH`` ids per query (the embedded server's
    cost of one ``$in`` grows with the square of its length)."""
    if not ids:
        return
    for selector in queries.split_in(host._by_ids(list(ids)), vectors.READ_BATCH):
        async for document in collection.find(selector, projection):
            yield document


async def write(host: AsyncVectorHost, pairs: Sequence[tuple[Mapping[str, Any], Sequence[float]]]) -> int:
    """Writes the vectors of ``(message, checked vector)`` pairs (unsealed); seals a block when
    one is due. Returns how many were written."""
    documents = vectors.vector_documents(host.mailbox_id, pairs)
    await host._write_each(host._vectors, [(host._upsert_key(d["_id"]), d) for d in documents], replace=True)
    await _seal_if_due(host, len(documents))
    return len(documents)


async def _seal_if_due(host: AsyncVectorHost, written: int) -> None:
    """Seals when a block's worth is unsealed, checked every ``SEAL_CHECK_EVERY`` vectors written
    (a store starts with its count there, so its first write checks)."""
    host._vector_writes += written
    if not written or host._vector_writes < SEAL_CHECK_EVERY:
        return
    host._vector_writes = 0
    selector = vectors.unsealed_selector(host.mailbox_id)
    if await host._vectors.count_documents(selector, limit=vectors.BLOCK_VECTORS) >= vectors.BLOCK_VECTORS:
        await seal(host)


async def seal(host: AsyncVectorHost, *, partial: bool = False) -> int:
    """Packs the mailbox's unsealed vectors into blocks: full blocks only, unless ``partial``
    (``reindex``: the rest too). Returns how many vectors were sealed.

    Vectors without a quantized copy (old arrays, which ``reindex`` rewrites first) are passed
    over here, not in the filter: beside the index's equalities an ``$exists`` makes the
    embedded server scan the whole collection."""
    selector = vectors.unsealed_selector(host.mailbox_id)
    sealed = 0
    while True:
        rows = [r async for r in host._vectors.find(selector, vectors.seal_projection()).limit(vectors.BLOCK_VECTORS)]
        done = 0
        for entries in vectors.plan_blocks(rows, partial=partial):
            done += await _seal_block(host, entries)
        sealed += done
        if done == 0 or len(rows) < vectors.BLOCK_VECTORS:
            return sealed


async def _seal_block(host: AsyncVectorHost, entries: Sequence[Sealable]) -> int:
    """One block, in the order ``vectors`` explains: take a ``seq`` (insert the empty block),
    then keep the entries whose ``rev`` still matches, fill the block, mark the vectors."""
    blocks = host.db[BLOCKS_COLLECTION]
    seq = await _take_seq(host)
    ids = [e[0] for e in entries]
    current = {d["_id"]: d.get("rev") async for d in read_ids(host, host._vectors, ids, {"rev": 1})}
    kept = [e for e in entries if e[0] in current and current[e[0]] == e[4]]
    _id = vectors.block_id(host.mailbox_id, seq)
    if not kept:
        await blocks.delete_one({"_id": _id})
        return 0
    filled = await blocks.replace_one({"_id": _id}, vectors.block_document(host.mailbox_id, seq, kept))
    if filled.matched_count != 1:
        return 0  # the empty block was removed meanwhile (an erase): mark nothing
    marks = [({**host._by_id(e[0]), "rev": e[4]}, vectors.sealed_update(seq)) for e in kept]
    await host._write_each(host._vectors, marks)
    log.debug("mailbox %r: sealed %d vectors into block %d", host.mailbox_id, len(kept), seq)
    return len(kept)


async def _take_seq(host: AsyncVectorHost) -> int:
    """The next block ``seq`` of the mailbox, taken by inserting its empty block.

    Numbers come from the mailbox's counter (``vectors.counter_id``, ``$inc``), so they only
    grow, whatever blocks are removed meanwhile; a counter not yet made (the first block) starts
    above every existing block. Finding that maximum sorts the blocks on the embedded server,
    which reads them all: once per mailbox, not once per block.
    """
    blocks = host.db[BLOCKS_COLLECTION]
    counter = vectors.counter_id(host.mailbox_id)
    while True:
        taken = await blocks.find_one_and_update(
            host._upsert_key(counter), {"$inc": {"next": 1}}, return_document=ReturnDocument.AFTER
        )
        if taken is None:
            last = await blocks.find_one({"mailboxId": host.mailbox_id}, {"seq": 1}, sort=[("seq", -1)])
            start = {"$max": {"next": int(last["seq"]) if last and "seq" in last else 0}}
            await blocks.update_one(
                host._upsert_key(counter), {**start, "$setOnInsert": {"mailboxId": host.mailbox_id}}, upsert=True
            )
            continue
        seq = int(taken["next"])
        try:
            await blocks.insert_one(vectors.block_document(host.mailbox_id, seq, []))
            return seq
        except DuplicateKeyError:
            continue  # a block of that number exists (made before the counter): take the next


async def exact_search(
    host: AsyncVectorHost,
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
        rows = host._vectors.find(vectors.unsealed_selector(host.mailbox_id), vectors.first_pass_projection())
        if cap is not None:
            rows = rows.limit(cap + 1)
        async for row in rows:
            if search.examined == cap:
                complete = False
                break
            search.offer(row)
        if complete:
            blocks = host.db[BLOCKS_COLLECTION].find({"mailboxId": host.mailbox_id}).sort("seq", -1)
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
        members = messages.find({"mailboxId": host.mailbox_id, "threadKey": tkey}, {"_id": 1})
        ids = [m["_id"] async for m in members]
        if cap is not None and len(ids) > cap:
            ids, complete = ids[:cap], False
        async for row in read_ids(host, host._vectors, ids, {"embedding": 1}):
            search.offer_exact(row["_id"], row.get("embedding"))
    while wanted := search.wanted():
        async for row in read_ids(host, host._vectors, wanted, {"embedding": 1}):
            search.rescore(row["_id"], row.get("embedding"))
        search.asked(wanted)
    return SearchResults(search.results(), complete=complete, examined=search.examined, engine="exact")


async def rewrite_old(host: AsyncVectorHost) -> int:
    """Rewrites the mailbox's vectors stored as BSON arrays (earlier releases) as binData; how many."""
    selector = vectors.unsealed_selector(host.mailbox_id)  # old ones are unsealed; ``$type``: see ``seal``
    rewritten = 0
    batch: list[tuple[Mapping[str, Any], Sequence[float]]] = []
    async for old in host._vectors.find(selector, {"embedding": 1, "threadKey": 1, "messageKey": 1}):
        if not isinstance(old.get("embedding"), list):
            continue
        values = vectors.storable(old["embedding"])
        if values is None:
            continue
        batch.append((old, values))
        if len(batch) == vectors.WRITE_BATCH:
            rewritten += await write(host, batch)
            batch = []
    return rewritten + (await write(host, batch) if batch else 0)


async def compact(host: AsyncVectorHost) -> dict[str, int]:
    """Drops the block entries of vectors deleted or sealed again since (``vectors.compact_plan``),
    and the blocks left empty. One query on ``aecs_vectors_unsealed`` for the unsealed vectors,
    then one per block for the vectors sealed in it."""
    blocks = host.db[BLOCKS_COLLECTION]
    report = {"entriesDropped": 0, "blocksRemoved": 0}
    selector = vectors.unsealed_selector(host.mailbox_id)
    unsealed = {d["_id"] async for d in host._vectors.find(selector, {"_id": 1})}
    listed = [b async for b in blocks.find({"mailboxId": host.mailbox_id}, {"ids": 1, "seq": 1}) if "ids" in b]
    for listing in listed:
        ids = listing["ids"]
        sealed_here = {**selector, "block": listing["seq"]}
        live = unsealed | {d["_id"] async for d in host._vectors.find(sealed_here, {"_id": 1})}
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
