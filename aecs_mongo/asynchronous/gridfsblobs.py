"""GridFS blobs (the default blob store): ``<bucket>.files`` and ``<bucket>.chunks`` in the store's
database, written as GridFS-spec documents by the store itself (``pure/blobs.py`` says why). An
upload writes the chunks first and the ``files`` document last, so a ``files`` document means a
complete blob. The deletion core and the export read these collections directly (by key ranges
and batched chunk reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..pure import blobs
from ..pure.dialect import Dialect
from ..pure.documents import Blob
from ..pure.settings import StoreSettings
from .blobstores import AsyncBlobStore
from .statements import insert_ignoring_duplicates, log, to_list

__all__ = ["AsyncGridFSBlobs"]


class _Context(Protocol):
    """What GridFS needs of the store's context (``context.AsyncStoreContext``)."""

    settings: StoreSettings
    mailbox_id: str
    sharded: bool
    files: Any
    chunks: Any

    @property
    def dialect(self) -> Dialect: ...

    async def write_each(
        self,
        collection: Any,
        writes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
        *,
        replace: bool = False,
        upsert: bool = False,
    ) -> int: ...


class AsyncGridFSBlobs(AsyncBlobStore):
    """GridFS in the store's database: ``<bucket>.files`` and ``<bucket>.chunks``, written as
    GridFS-spec documents by the store itself (``pure/blobs.py`` says why). The deletion core
    and the export read these collections directly (by key ranges and batched chunk reads)."""

    gridfs = True

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.url = f"gridfs://{ctx.settings.bucket_name}"

    async def put(self, items: Sequence[tuple[Blob, str]], *, absent: bool = False, durable: bool = True) -> None:
        await _gridfs_put(self.ctx, items, absent)

    async def get(self, key: str) -> bytes | None:
        ctx = self.ctx
        file_doc = await ctx.files.find_one({"_id": key})
        if file_doc is None:
            return None
        chunks = await to_list(ctx.chunks.find({"files_id": key}, {"n": 1, "data": 1}).sort("n", 1))
        return blobs.assemble(file_doc, chunks)

    async def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """Several blobs in one ``files`` and one ``chunks`` read (per ``$in`` the server's
        dialect names at once); a blob an upload left incomplete is left out."""
        ctx = self.ctx
        out: dict[str, bytes] = {}
        for selector in self.ctx.dialect.split_in({"_id": {"$in": list(keys)}}):
            files = {f["_id"]: f async for f in ctx.files.find(selector, {"length": 1, "chunkSize": 1})}
            if not files:
                continue
            chunks: dict[str, list[Mapping[str, Any]]] = {k: [] for k in files}
            found = ctx.chunks.find({"files_id": {"$in": list(files)}}, {"files_id": 1, "n": 1, "data": 1})
            async for chunk in found:
                chunks[chunk["files_id"]].append(chunk)
            for key, file_doc in files.items():
                try:
                    out[key] = blobs.assemble(file_doc, sorted(chunks[key], key=lambda c: c["n"]))
                except ValueError:  # an upload interrupted mid-way
                    log.debug("blob %s is incomplete", key)
        return out

    async def delete(self, keys: Sequence[str]) -> int:
        removed = 0
        for part in self.ctx.dialect.split_in({"_id": {"$in": list(keys)}}):
            removed += int((await self.ctx.files.delete_many(part)).deleted_count)
        for part in self.ctx.dialect.split_in({"files_id": {"$in": list(keys)}}):
            await self.ctx.chunks.delete_many(part)
        return removed

    async def delete_prefix(self, prefix: str, *, dry_run: bool = False) -> int:
        files = blobs.prefix_filter("filename", prefix)
        if dry_run:
            return int(await self.ctx.files.count_documents(files))
        removed = int((await self.ctx.files.delete_many(files)).deleted_count)
        await self.ctx.chunks.delete_many(blobs.prefix_filter("files_id", prefix))
        return removed

    async def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        found = self.ctx.files.find(blobs.prefix_filter("filename", prefix), {"uploadDate": 1}).sort("filename", 1)
        return [(f["_id"], f["uploadDate"].timestamp()) async for f in found]


async def _gridfs_put(ctx: _Context, items: Sequence[tuple[Blob, str]], absent: bool) -> None:
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
    ctx: _Context, refused: Sequence[Mapping[str, Any]], todo: Sequence[tuple[Blob, str]]
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
