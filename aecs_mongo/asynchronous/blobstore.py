"""The blob stores (the cold tier) behind one interface, and the reads every store shares.

``AsyncBlobStore`` is the interface: put a batch of blobs (idempotent, create-if-absent, durable
before it returns), get one or many, delete by key or by a message's prefix, list a prefix. Three
kinds implement it, chosen by a URL (``pure/blob_location.py``): GridFS in the store's database
(``AsyncGridFSBlobs`` here; the chunking and file documents are the pure ``pure/blobs.py``),
a local directory (``filestore.py``) and object storage through obstore (``objectstore.py``);
the last two run their blocking calls on threads (``external.py``).

The blob keys are ``<blobPrefix>raw.eml``, ``body.html``, ``att/<idx>``, ``body.json`` and the
raw variants. A GridFS upload writes the chunks first and the ``files`` document last, so a
``files`` document means a complete blob; a file or object is complete once it has its name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BlobMissingError
from ..pure import blobs
from ..pure.blob_location import BlobLocation, parse_blob_url
from ..pure.documents import Blob
from ..pure.keys import blob_prefix, message_key
from ..pure.lifecycle import split_in
from ..pure.variants import variant_blob_key
from .context import insert_ignoring_duplicates, log, to_list

if TYPE_CHECKING:
    from .context import AsyncStoreContext

__all__ = [
    "AsyncBlobStore",
    "AsyncGridFSBlobs",
    "blob_key",
    "get_attachment",
    "get_html",
    "get_raw",
    "get_raw_variants",
    "named_blob",
    "put_blobs",
    "recorded_hashes",
]


class AsyncBlobStore:
    """Where a store keeps raw.eml, body.html and attachment bytes: one interface for GridFS, a
    local directory and object storage. ``MessageStore(db, blobs=...)`` takes a URL (``gridfs``,
    ``gridfs://BUCKET``, ``file:///DIR``, ``s3://BUCKET/PREFIX``, ``gs://...``, ``az://...``)
    or a store made by ``from_url`` (to pass obstore options such as credentials in code).

    Every kind gives the same guarantees: ``put`` returns once the blobs are durable (a file
    is written to a temporary name, synced, renamed and its directory synced; an object is
    PUT), and uploads a blob only where none is stored under its key (create-if-absent), so a
    re-delivery or a retry changes nothing; a blob is visible under its key only when complete.
    """

    #: the store's URL, as the database's settings document records it (no secret)
    url: str = ""
    #: GridFS in the store's own database (whose blobs the database statements reach directly)
    gridfs: bool = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncBlobStore:
        """A file or object store by its URL; ``options`` go to obstore's ``from_url`` (object
        stores: ``config``, ``client_options``, ``retry_config``, ``credential_provider``).
        GridFS lives in a database: give its URL (``gridfs://BUCKET``) to the message store."""
        from .external import open_external

        return open_external(parse_blob_url(url), **options)

    @property
    def location(self) -> BlobLocation:
        return parse_blob_url(self.url)

    async def put(self, items: Sequence[tuple[Blob, str]], *, absent: bool = False, durable: bool = True) -> None:
        """Store each ``(blob, messageKey)`` whose key holds no blob yet; durable on return
        (``durable=False``: skip the syncs, for imports that can be re-run). ``absent``: the
        blobs belong to messages not stored, so none is expected (a hint; never required)."""
        raise NotImplementedError

    async def get(self, key: str) -> bytes | None:
        """One blob's bytes, or None where none is stored under ``key``."""
        raise NotImplementedError

    async def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The blobs of ``keys`` that are stored (the missing ones left out)."""
        found = {key: await self.get(key) for key in keys}
        return {key: data for key, data in found.items() if data is not None}

    async def delete(self, keys: Sequence[str]) -> int:
        """Remove the blobs of ``keys`` (missing ones are no error); how many were there."""
        raise NotImplementedError

    async def delete_prefix(self, prefix: str, *, dry_run: bool = False) -> int:
        """Remove every blob whose key starts with ``prefix`` (a message's or a mailbox's, ending
        in ``/``), leftovers of interrupted uploads included; how many (``dry_run``: count)."""
        raise NotImplementedError

    async def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        """``(key, modified)`` of every complete blob under ``prefix`` (``modified``: epoch
        seconds), sorted by key."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the store holds (nothing for most)."""


class AsyncGridFSBlobs(AsyncBlobStore):
    """GridFS in the store's database: ``<bucket>.files`` and ``<bucket>.chunks``, written as
    GridFS-spec documents by the store itself (``pure/blobs.py`` says why). The deletion core
    and the export read these collections directly (by key ranges and batched chunk reads)."""

    gridfs = True

    def __init__(self, ctx: AsyncStoreContext) -> None:
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
        """Several blobs in one ``files`` and one ``chunks`` read per hundred; a blob an upload
        left incomplete is left out."""
        ctx = self.ctx
        out: dict[str, bytes] = {}
        for selector in split_in({"_id": {"$in": list(keys)}}):
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
        for part in split_in({"_id": {"$in": list(keys)}}):
            removed += int((await self.ctx.files.delete_many(part)).deleted_count)
        for part in split_in({"files_id": {"$in": list(keys)}}):
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


async def put_blobs(ctx: AsyncStoreContext, items: Sequence[tuple[Blob, str]], absent: bool = False) -> None:
    """Store each ``(blob, messageKey)`` in the store's blob store (``AsyncBlobStore.put``)."""
    if not items:
        return
    store = await ctx.blob_store()
    await store.put(items, absent=absent, durable=ctx.settings.durable)


async def named_blob(ctx: AsyncStoreContext, message: Mapping[str, Any], key: str) -> bytes:
    """A blob the stored ``message`` names: its bytes, or a ``BlobMissingError`` naming the message."""
    data = await ctx.get_blob(key)
    if data is None:
        store = await ctx.blob_store()
        raise BlobMissingError(
            f"message {message.get('messageId')!r} names blob {key} that {store.url} does not have",
            url=store.url,
            message_id=str(message.get("messageId")),
            key=key,
        )
    return data


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


async def _get_named(ctx: AsyncStoreContext, message_id: str, name: str) -> bytes | None:
    """The blob ``name`` of a message: None where the message is not stored or has no such blob
    (no HTML part, stored without raw bytes); a ``BlobMissingError`` where the message names it
    and the blob store does not have it."""
    data = await ctx.get_blob(blob_key(ctx, message_id, name))
    if data is not None:
        return data
    message = await ctx.messages.find_one(
        ctx.by_id(ctx.id_for(message_id)), {"messageId": 1, "blobPrefix": 1, "blobs": 1}
    )
    if message is None or name not in (message.get("blobs") or ()):
        return None
    return await named_blob(ctx, message, message["blobPrefix"] + name)


async def get_raw(ctx: AsyncStoreContext, message_id: str) -> bytes | None:
    return await _get_named(ctx, message_id, "raw.eml")


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
    data = await _get_named(ctx, message_id, "body.html")
    return None if data is None else data.decode("utf-8")


async def get_attachment(ctx: AsyncStoreContext, message_id: str, idx: int) -> bytes | None:
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"idx must be an int, not {type(idx).__name__}")
    return await _get_named(ctx, message_id, f"att/{idx}")


async def _gridfs_put(ctx: AsyncStoreContext, items: Sequence[tuple[Blob, str]], absent: bool) -> None:
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
