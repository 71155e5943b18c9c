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

    The chunks go in statements of at most ``STATEMENT_BYTES`` (``pure/blobs.py``), in order, so
    a cut connection loses one statement and what went before it stays. Leftovers of an
    interrupted upload are looked for only where there is a reason: a chunk insert refused as a
    duplicate (uploads insert chunks in order, so a leftover holds chunk 0 of its blob, which
    the insert then reports), or blobs with no chunks at all (one ``$in`` delete per batch).
    At the first refusal one read of the chunks under the blobs' keys (their ``n`` and
    ``sha256``) tells what is there: the rest of the upload sends only the chunks missing,
    replaces those holding other bytes and drops any past a blob's end, so a re-delivery
    makes progress. The ``files`` documents go last, the commit of each blob.
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
    left: dict[str, dict[int, bytes | None]] = {}  # read at the first refusal
    stale: list[Mapping[str, Any]] = []  # chunks stored with other bytes than these
    groups = blobs.statement_groups(chunks)
    read = False
    while groups:
        group = groups.pop(0)
        refused = [group[i] for i in sorted(await insert_ignoring_duplicates(ctx.chunks, group))]
        if refused and not read:
            left, read = await _leftovers(ctx, [blob.key for blob, _ in todo]), True
            log.debug("completing %d interrupted blob upload(s)", len(left))
            rest = [c for g in groups for c in g]
            groups = blobs.statement_groups([c for c in rest if c["n"] not in left.get(c["files_id"], {})])
            refused += [c for c in rest if c["n"] in left.get(c["files_id"], {})]
        stale += [c for c in refused if left.get(c["files_id"], {}).get(c["n"]) != bytes(c["sha256"])]
    empty = [blob.key for blob, _ in todo if not blob.data]
    suspects = {c["files_id"] for c in stale} | set(left) | set(empty)
    kept: dict[str, int] = {}
    if suspects:
        # a blob whose files document (written last) exists is complete (a concurrent writer's,
        # or one a crash left before its message) and kept as it is
        found = ctx.files.find({"_id": {"$in": sorted(suspects)}}, {"length": 1})
        kept = {f["_id"]: f["length"] async for f in found}
    for blob, _ in todo:
        count = blobs.chunk_count(len(blob.data))
        if blob.key in kept:  # drop the chunks this upload added past the kept blob's end
            end = blobs.chunk_count(kept[blob.key])
            if count > end:
                await ctx.chunks.delete_many({"files_id": blob.key, "n": {"$gte": end}})
        elif blob.data and any(n >= count for n in left.get(blob.key, {})):  # a longer blob's leftovers
            await ctx.chunks.delete_many({"files_id": blob.key, "n": {"$gte": count}})
    empty = [key for key in empty if key not in kept]
    if empty:  # no chunk insert to tell: drop any leftover of all of them in one statement
        await ctx.chunks.delete_many({"files_id": {"$in": empty}})
    await _replace_chunks(ctx, [c for c in stale if c["files_id"] not in kept])
    files = [
        blobs.file_document(
            blob.key, len(blob.data), blob.content_type, {"mailboxId": ctx.mailbox_id, "messageKey": mkey}
        )
        for blob, mkey in todo
        if blob.key not in kept
    ]
    await insert_ignoring_duplicates(ctx.files, files)


async def _leftovers(ctx: _Context, keys: Sequence[str]) -> dict[str, dict[int, bytes | None]]:
    """What earlier uploads of ``keys`` left in ``chunks``: ``{key: {n: sha256}}`` (None for a
    chunk written without its digest). One statement per ``$in`` the dialect allows, on
    ``files_id_1_n_1``; where nothing is there, it returns nothing."""
    left: dict[str, dict[int, bytes | None]] = {}
    for selector in ctx.dialect.split_in({"files_id": {"$in": list(keys)}}):
        async for chunk in ctx.chunks.find(selector, {"_id": 0, "files_id": 1, "n": 1, "sha256": 1}):
            digest = chunk.get("sha256")
            left.setdefault(chunk["files_id"], {})[chunk["n"]] = None if digest is None else bytes(digest)
    return left


async def _replace_chunks(ctx: _Context, chunks: Sequence[Mapping[str, Any]]) -> None:
    """Overwrite chunks an interrupted or concurrent upload left with other bytes (or with no
    digest), in statements of at most ``STATEMENT_BYTES``; each write is on an index."""
    # on a sharded cluster the chunks' shard key ({files_id, n}) must be in the filter
    keys = ("_id", "files_id", "n") if ctx.sharded else ("_id",)
    for group in blobs.statement_groups(chunks):
        await ctx.write_each(ctx.chunks, [({k: c[k] for k in keys}, c) for c in group], replace=True)
