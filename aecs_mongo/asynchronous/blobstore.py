"""The reads and writes of blobs every store shares, whatever its blob store.

The blob stores are ``blobstores.py`` (the interface, a directory, object storage) and
``gridfsblobs.py`` (GridFS). The blob keys are ``<blobPrefix>raw.eml`` (or ``raw.pack``, the
message with its large encoded bodies in parts kept once per mailbox under
``<mailbox root>parts/<sha256>``: ``pure/raw_parts.py``), ``body.html``, ``att/<idx>`` (bytes
not in the raw message), ``body.json`` and the raw variants (``variants/<sha256>.eml``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BlobMissingError, BlobStoreError
from ..pure import lifecycle
from ..pure.blob_location import sweep_candidates
from ..pure.documents import Blob
from ..pure.keys import blob_prefix, message_key, part_key
from ..pure.raw_parts import PackError, assemble, pack_parts
from ..pure.transfer_encoding import decode_body
from ..pure.variants import variant_blob_key
from . import capabilities, parts
from .blobstores import AsyncBlobStore
from .context import AsyncStoreContext, log

__all__ = [
    "attachment_bytes",
    "blob_key",
    "get_attachment",
    "get_html",
    "get_raw",
    "get_raw_variants",
    "named_blob",
    "put_blobs",
    "raw_of",
    "recorded_hashes",
    "sweep_blobs",
    "unpacked",
]


async def put_blobs(ctx: AsyncStoreContext, items: Sequence[tuple[Blob, str]], absent: bool = False) -> None:
    """Store each ``(blob, messageKey)`` in the store's blob store (``AsyncBlobStore.put``)."""
    if not items:
        return
    store = await ctx.blob_store()
    await store.put(items, absent=absent, durable=ctx.settings.durable)


async def sweep_blobs(ctx: AsyncStoreContext, grace_seconds: float) -> int:
    """``store.sweep_blobs``: remove what interrupted stores left, blobs of the mailbox that no
    stored message owns, where every blob of that message is older than ``grace_seconds``
    (one listing of the mailbox's prefix, one ``messageKey $in`` read per thousand); how many."""
    store = await ctx.blob_store()
    await capabilities.dialect(ctx)
    root = lifecycle.mailbox_blob_root(ctx.mailbox_id)
    cutoff = time.time() - grace_seconds
    candidates = sweep_candidates(await store.list_keys(root), root, cutoff)
    selector = {"mailboxId": ctx.mailbox_id, "messageKey": {"$in": sorted(candidates)}}
    for part in ctx.dialect.split_in(selector):
        async for row in ctx.messages.find(part, {"messageKey": 1}):
            candidates.pop(row["messageKey"], None)
    removed = 0
    for prefix in candidates.values():
        removed += await store.delete_prefix(prefix)
    if candidates:
        log.debug("swept the blobs of %d message(s) never stored in %r", len(candidates), ctx.mailbox_id)
    return removed + await parts.sweep_parts(ctx, grace_seconds)


async def named_blob(ctx: AsyncStoreContext, message: Mapping[str, Any], key: str) -> bytes:
    """A blob the stored ``message`` names: its bytes, or a ``BlobMissingError`` naming the message."""
    data = await ctx.get_blob(key)
    if data is None:
        raise _missing(await ctx.blob_store(), message, key)
    return data


def _missing(store: AsyncBlobStore, message: Mapping[str, Any], key: str) -> BlobMissingError:
    return BlobMissingError(
        f"message {message.get('messageId')!r} names blob {key} that {store.url} does not have",
        url=store.url,
        message_id=str(message.get("messageId")),
        key=key,
    )


async def recorded_hashes(ctx: AsyncStoreContext, message: Mapping[str, Any]) -> set[str]:
    """SHA-256 of every copy of a stored message kept with its record: the first copy (hashing
    raw.eml for mail stored before the store recorded ``rawSha256``) and each ``variants``
    record. A hash in ``variantHashes`` without its record (a write cut short) is not in it."""
    hashes = {v["sha256"] for v in message.get("variants") or () if v.get("sha256")}
    if message.get("rawSha256"):
        hashes.add(message["rawSha256"])
    elif "raw.eml" in (message.get("blobs") or ()):  # a pack is never without its rawSha256
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


_ROW_FIELDS = {"messageId": 1, "blobPrefix": 1, "blobs": 1}


async def unpacked(
    ctx: AsyncStoreContext, message: Mapping[str, Any], name: str, data: bytes, read: Mapping[str, bytes] | None = None
) -> bytes:
    """A first raw copy's bytes as stored under ``name`` made whole: a pack gets its parts put
    back (``pure/raw_parts.py``; ``read``: parts by key read already, the rest are read here);
    a part that is not there is a ``BlobMissingError``."""
    if name != "raw.pack":
        return data
    keys = {sha: part_key(ctx.mailbox_id, sha) for sha in _pack_parts(ctx, message, data)}
    store = await ctx.blob_store()
    found = {key: read[key] for key in keys.values() if read is not None and key in read}
    if len(found) < len(keys):
        found.update(await store.get_many([key for key in keys.values() if key not in found]))
    for key in keys.values():
        if key not in found:  # the message names a part that is gone
            raise _missing(store, message, key)
    try:
        return assemble(data, {sha: found[key] for sha, key in keys.items()})
    except PackError as exc:
        raise BlobStoreError(
            f"message {message.get('messageId')!r}: its raw copy cannot be put back together ({exc})", url=store.url
        ) from None


def _pack_parts(ctx: AsyncStoreContext, message: Mapping[str, Any], data: bytes) -> list[str]:
    try:
        return pack_parts(data)
    except PackError as exc:
        raise BlobStoreError(f"message {message.get('messageId')!r}: {exc}", url=ctx.blobs.url) from None


async def raw_of(ctx: AsyncStoreContext, message: Mapping[str, Any]) -> bytes | None:
    """The first raw copy of a stored message (its row: ``blobPrefix``, ``blobs``), whole; None
    where it was stored without raw bytes."""
    name = lifecycle.raw_name(message)
    if name is None:
        return None
    return await unpacked(ctx, message, name, await named_blob(ctx, message, message["blobPrefix"] + name))


async def get_raw(ctx: AsyncStoreContext, message_id: str) -> bytes | None:
    data = await ctx.get_blob(blob_key(ctx, message_id, "raw.eml"))  # whole: no row to read
    if data is not None:
        return data
    message = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), _ROW_FIELDS)
    return None if message is None else await raw_of(ctx, message)


async def get_raw_variants(ctx: AsyncStoreContext, message_id: str) -> list[bytes]:
    message = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), {**_ROW_FIELDS, "variantHashes": 1})
    if message is None:
        return []
    first = None
    name = lifecycle.raw_name(message)
    if name is not None:
        data = await ctx.get_blob(message["blobPrefix"] + name)
        first = None if data is None else await unpacked(ctx, message, name, data)
    prefix = message["blobPrefix"]
    others = [await ctx.get_blob(variant_blob_key(prefix, sha)) for sha in message.get("variantHashes") or ()]
    return [c for c in [first, *others] if c is not None]


async def get_html(ctx: AsyncStoreContext, message_id: str) -> str | None:
    data = await _get_named(ctx, message_id, "body.html")
    return None if data is None else data.decode("utf-8")


async def get_attachment(ctx: AsyncStoreContext, message_id: str, idx: int) -> bytes | None:
    """Attachment ``idx``'s decoded bytes: derived from its encoded body in the raw message (a
    part, or a span of the pack), or an ``att/<idx>`` blob where they are not in it."""
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"idx must be an int, not {type(idx).__name__}")
    message = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), {**_ROW_FIELDS, "attachments": 1})
    item = next((a for a in (message or {}).get("attachments") or () if a.get("idx") == idx), None)
    if message is None or item is None:
        return None
    return await attachment_bytes(ctx, message, item)


async def attachment_bytes(ctx: AsyncStoreContext, message: Mapping[str, Any], item: Mapping[str, Any]) -> bytes | None:
    """The decoded bytes of one attachment of a stored message (its row and its item)."""
    span = item.get("raw")
    if span:
        if span.get("part"):
            encoded = await named_blob(ctx, message, part_key(ctx.mailbox_id, span["part"]))
        else:
            raw = await raw_of(ctx, message)
            encoded = b"" if raw is None else raw[span["start"] : span["end"]]
        return decode_body(encoded, span["encoding"])[0]
    if item.get("blobKey"):
        return await named_blob(ctx, message, item["blobKey"])
    return None
