"""The export reader: every stored raw copy of a mailbox, oldest first, a page of blobs at a time.

The pages and their byte bounds are the pure ``pure/lifecycle.py``'s; the writers (mbox,
Maildir, .eml) are ``mail/sinks.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..pure import blobs, lifecycle
from ..pure.lifecycle import ExportedCopy
from . import blobstore, capabilities
from .blobstores import AsyncBlobStore
from .context import AsyncStoreContext

__all__ = ["export_copies"]

_EXPORT_FIELDS = {
    "messageId": 1,
    "ts": 1,
    "blobPrefix": 1,
    "blobs": 1,
    "variantHashes": 1,
    "rawParts": 1,
    "from.email": 1,
    "sizeBytes": 1,
    "tags": 1,
}


async def export_copies(
    ctx: AsyncStoreContext,
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

    Blobs are read a page at a time (``lifecycle.EXPORT_PAGE`` messages, one ``chunks``
    statement for up to the dialect's ``export_blobs`` blobs and ``lifecycle.EXPORT_PAGE_BYTES`` of
    them), so memory is bounded by that or the largest message, never by the mailbox. A first
    copy's length is its message's ``sizeBytes``, so its ``files`` document is read only where
    its chunks do not add up to it (and for variants, whose length only their ``files``
    document holds): one statement per group of blobs instead of two.
    """
    await capabilities.dialect(ctx)  # how many blobs a chunks read names
    selector = lifecycle.export_filter(ctx.mailbox_id, since, until)
    found = ctx.db["messages"].find(selector, _EXPORT_FIELDS).sort([("ts", 1), ("messageKey", 1)])
    page: list[Mapping[str, Any]] = []
    async for message in found.hint("aecs_messages_inbox").batch_size(lifecycle.EXPORT_PAGE):
        page.append(message)
        if len(page) == lifecycle.EXPORT_PAGE:
            async for copy in _export_page(ctx, page, variants, on_missing):
                yield copy
            page = []
    async for copy in _export_page(ctx, page, variants, on_missing):
        yield copy


async def _export_page(
    ctx: AsyncStoreContext,
    page: Sequence[Mapping[str, Any]],
    variants: bool,
    on_missing: Callable[[str], None] | None,
) -> AsyncIterator[ExportedCopy]:
    wanted = [(m, number, key) for m in page for number, key in lifecycle.raw_copy_keys(m, variants)]
    store = await ctx.blob_store()
    if not store.gridfs:
        async for copy in _export_external(ctx, store, page, wanted, on_missing):
            yield copy
        return
    lengths = {key: size for m, number, key in wanted if number == 0 and (size := lifecycle.recorded_size(m))}
    files = await _files(ctx, [key for _, _, key in wanted if key not in lengths])
    lengths.update((key, int(f["length"])) for key, f in files.items())
    reported: set[str] = set()

    def missing(message: Mapping[str, Any]) -> None:
        if on_missing is not None and message["messageId"] not in reported:
            reported.add(message["messageId"])
            on_missing(message["messageId"])

    for message in page:
        if not any(key in lengths for number, key in lifecycle.raw_copy_keys(message, False) if number == 0):
            missing(message)
    present = [item for item in wanted if item[2] in lengths]
    limit, most = lifecycle.EXPORT_PAGE_BYTES, ctx.dialect.export_blobs
    for group in lifecycle.byte_pages(present, lambda item: lengths[item[2]], limit, most):
        keys = [key for _, _, key in group]
        chunks = await _read_chunks(ctx, keys, sum(blobs.chunk_count(lengths[key]) for key in keys))
        joined = {key: blobs.join_chunks(chunks.get(key, ()), lengths[key]) for key in keys if key not in files}
        # chunks that do not add up to the recorded size: the files document decides, as for get_raw
        files.update(await _files(ctx, [key for key, data in joined.items() if data is None]))
        packed = await _parts_of(ctx, group)
        for message, number, key in group:
            raw = blobs.assemble(files[key], chunks.get(key, ())) if key in files else joined.pop(key)
            chunks.pop(key, None)  # what is yielded is the caller's to keep or drop
            if raw is None:  # no files document: not stored (an upload or a deletion cut short)
                if number == 0:
                    missing(message)
                continue
            raw = await blobstore.unpacked(ctx, message, key.rpartition("/")[2], raw, packed)
            sender = (message.get("from") or {}).get("email")
            tags = tuple(message.get("tags") or ())
            yield ExportedCopy(message["messageId"], raw, int(message["ts"]), number, sender, tags)


async def _parts_of(ctx: AsyncStoreContext, group: Sequence[tuple[Mapping[str, Any], int, str]]) -> dict[str, bytes]:
    """The parts of the packs among a group of raw copies, read at once (one ``get_many``)."""
    keys = {
        part
        for message, _, key in group
        if key.endswith("/raw.pack")
        for part in lifecycle.part_keys(message, ctx.mailbox_id)
    }
    return await (await ctx.blob_store()).get_many(sorted(keys)) if keys else {}


async def _export_external(
    ctx: AsyncStoreContext,
    store: AsyncBlobStore,
    page: Sequence[Mapping[str, Any]],
    wanted: Sequence[tuple[Mapping[str, Any], int, str]],
    on_missing: Callable[[str], None] | None,
) -> AsyncIterator[ExportedCopy]:
    """A page from a file or object store: the blobs of ``lifecycle.EXPORT_EXTERNAL`` copies a call
    (read at once), in order; a first copy that is not there goes to ``on_missing``."""
    for message in page:  # stored without raw bytes (from a NormalizedEmail without rawFull)
        if lifecycle.raw_name(message) is None and on_missing is not None:
            on_missing(message["messageId"])
    for group in lifecycle.batches(wanted, lifecycle.EXPORT_EXTERNAL):
        data = await store.get_many([key for _, _, key in group])
        packed = await _parts_of(ctx, group)
        for message, number, key in group:
            raw = data.pop(key, None)
            if raw is None:
                if number == 0 and on_missing is not None:
                    on_missing(message["messageId"])
                continue
            raw = await blobstore.unpacked(ctx, message, key.rpartition("/")[2], raw, packed)
            sender = (message.get("from") or {}).get("email")
            tags = tuple(message.get("tags") or ())
            yield ExportedCopy(message["messageId"], raw, int(message["ts"]), number, sender, tags)


async def _files(ctx: AsyncStoreContext, keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """The ``files`` documents of ``keys`` that exist (on ``_id``, the dialect's ``export_blobs``
    keys a statement; none for none)."""
    stored: dict[str, Mapping[str, Any]] = {}
    for part in lifecycle.batches(keys, ctx.dialect.export_blobs):
        found = ctx.files.find({"_id": {"$in": part}}, {"length": 1, "chunkSize": 1})
        stored.update([(f["_id"], f) async for f in found])
    return stored


async def _read_chunks(ctx: AsyncStoreContext, keys: Sequence[str], count: int) -> dict[str, list[Mapping[str, Any]]]:
    """The chunks of several blobs in one ``chunks`` statement (on ``files_id_1_n_1``), each
    blob's sorted by ``n``. ``count``: the chunks expected, all asked for in the first batch (the
    server's default is 101 documents; its 16 MiB message limit still splits a bigger page)."""
    chunks: dict[str, list[Mapping[str, Any]]] = {}
    # every field but _id: what a chunk holds (a projection of the three costs the test server more)
    found = ctx.chunks.find({"files_id": {"$in": list(keys)}}, {"_id": 0})
    async for chunk in found.batch_size(count + 1):  # + 1: a full batch would leave the cursor open
        chunks.setdefault(chunk["files_id"], []).append(chunk)
    for parts in chunks.values():
        if len(parts) > 1:
            parts.sort(key=lambda c: c["n"])
    return chunks
