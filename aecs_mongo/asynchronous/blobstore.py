"""GridFS blobs (the cold tier): uploads that are idempotent and finish interrupted ones, reads.

The chunking and the file documents are the pure ``pure/blobs.py``; the blob keys are
``<blobPrefix>raw.eml``, ``body.html``, ``att/<idx>`` and the raw variants. An upload writes
the chunks first and the ``files`` document last, so a ``files`` document means a complete blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..pure import blobs
from ..pure.documents import Blob
from ..pure.keys import blob_prefix, message_key
from ..pure.variants import variant_blob_key
from .context import AsyncStoreContext, insert_ignoring_duplicates, log

__all__ = ["blob_key", "get_attachment", "get_html", "get_raw", "get_raw_variants", "put_blobs", "recorded_hashes"]


async def put_blobs(ctx: AsyncStoreContext, items: Sequence[tuple[Blob, str]], absent: bool = False) -> None:
    """Upload the blobs that have no ``files`` document yet; the cost is per blob, never per
    blob already stored: every statement is answered by the ``_id`` or ``files_id_1_n_1`` index.
    ``absent``: the blobs belong to messages not stored, so none is expected to be there and
    the ``files`` lookup is skipped (what an interrupted upload left is still found below).

    Leftovers of an interrupted upload are looked for only where there is a reason: a chunk
    insert refused as a duplicate (a chunk of that key is already there), or blobs with no
    chunks at all (one ``$in`` delete per batch). Uploads insert chunks in order, so a
    leftover that reaches past the new blob's end also holds its chunk 0, which the insert
    then reports.
    """
    if not items:
        return
    keys = [blob.key for blob, _ in items]
    done: set[str] = set()
    if not absent:
        done = {f["_id"] async for f in ctx.files.find({"_id": {"$in": keys}}, {"_id": 1})}
    todo = list({blob.key: (blob, mkey) for blob, mkey in items if blob.key not in done}.values())
    if not todo:
        return
    chunks = [c for blob, _ in todo for c in blobs.chunk_documents(blob.key, blob.data)]
    refused = await insert_ignoring_duplicates(ctx.chunks, chunks)
    empty = [blob.key for blob, _ in todo if not blob.data]
    if absent and (refused or empty):
        # something is there after all: a blob whose files document (written last) exists is
        # complete (a concurrent writer's, or one a crash left before its message) and kept
        suspects = list({chunks[i]["files_id"] for i in refused} | set(empty))
        complete = {f["_id"]: f["length"] async for f in ctx.files.find({"_id": {"$in": suspects}}, {"length": 1})}
        for blob, _ in todo:
            length = complete.get(blob.key)
            if length is not None and blobs.chunk_count(len(blob.data)) > blobs.chunk_count(length):
                # drop the chunks this upload added past the kept blob's end
                await ctx.chunks.delete_many({"files_id": blob.key, "n": {"$gte": blobs.chunk_count(length)}})
        todo = [(blob, mkey) for blob, mkey in todo if blob.key not in complete]
        refused = {i for i in refused if chunks[i]["files_id"] not in complete}
        empty = [key for key in empty if key not in complete]
    if empty:  # no chunk insert to tell: drop any leftover of all of them in one statement
        await ctx.chunks.delete_many({"files_id": {"$in": empty}})
    if refused:
        await _replace_leftover_chunks(ctx, [chunks[i] for i in sorted(refused)], todo)
    files = [
        blobs.file_document(
            blob.key, len(blob.data), blob.content_type, {"mailboxId": ctx.mailbox_id, "messageKey": mkey}
        )
        for blob, mkey in todo
    ]
    await insert_ignoring_duplicates(ctx.files, files)


async def _replace_leftover_chunks(
    ctx: AsyncStoreContext, refused: Sequence[Mapping[str, Any]], todo: Sequence[tuple[Blob, str]]
) -> None:
    """Overwrite the chunks an interrupted upload left (they may hold other bytes) and drop any
    past the new end; each statement is on an index. Rare: only after an interrupted upload."""
    suspects = {c["files_id"] for c in refused}
    log.debug("completing %d interrupted blob upload(s)", len(suspects))
    # on a sharded cluster the chunks' shard key ({files_id, n}) must be in the filter
    keys = ("_id", "files_id", "n") if ctx.sharded else ("_id",)
    await ctx.write_each(ctx.chunks, [({k: c[k] for k in keys}, c) for c in refused], replace=True)
    for blob, _ in todo:
        if blob.key in suspects:
            await ctx.chunks.delete_many({"files_id": blob.key, "n": {"$gte": blobs.chunk_count(len(blob.data))}})


async def recorded_hashes(ctx: AsyncStoreContext, message: Mapping[str, Any]) -> set[str]:
    """SHA-256 of every copy of a stored message kept with its record: the first copy (hashing
    raw.eml for mail stored before the store recorded ``rawSha256``) and each ``variants``
    record. A hash in ``variantHashes`` without its record (a write cut short) is not in it."""
    hashes = {v["sha256"] for v in message.get("variants") or () if v.get("sha256")}
    if message.get("rawSha256"):
        hashes.add(message["rawSha256"])
    elif "raw.eml" in (message.get("blobs") or ()):
        raw = await ctx.get_blob(message["blobPrefix"] + "raw.eml")
        if raw is not None:
            hashes.add(hashlib.sha256(raw).hexdigest())
    return hashes


def blob_key(ctx: AsyncStoreContext, message_id: str, name: str) -> str:
    return blob_prefix(ctx.mailbox_id, message_key(message_id)) + name


async def get_raw(ctx: AsyncStoreContext, message_id: str) -> bytes | None:
    return await ctx.get_blob(blob_key(ctx, message_id, "raw.eml"))


async def get_raw_variants(ctx: AsyncStoreContext, message_id: str) -> list[bytes]:
    message = await ctx.messages.find_one(
        ctx.by_id(ctx.id_for(message_id)), {"blobPrefix": 1, "blobs": 1, "variantHashes": 1}
    )
    if message is None:
        return []
    keys = [message["blobPrefix"] + "raw.eml"] if "raw.eml" in (message.get("blobs") or ()) else []
    keys += [variant_blob_key(message["blobPrefix"], sha) for sha in message.get("variantHashes") or ()]
    copies = [await ctx.get_blob(key) for key in keys]
    return [c for c in copies if c is not None]


async def get_html(ctx: AsyncStoreContext, message_id: str) -> str | None:
    data = await ctx.get_blob(blob_key(ctx, message_id, "body.html"))
    return None if data is None else data.decode("utf-8")


async def get_attachment(ctx: AsyncStoreContext, message_id: str, idx: int) -> bytes | None:
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"idx must be an int, not {type(idx).__name__}")
    return await ctx.get_blob(blob_key(ctx, message_id, f"att/{idx}"))
