"""The reads and writes of blobs every store shares, whatever its blob store.

The blob stores are ``blobstores.py`` (the interface, a directory, object storage) and
``gridfsblobs.py`` (GridFS). The blob keys are ``<blobPrefix>raw.eml``, ``body.html``,
``att/<idx>``, ``body.json`` and the raw variants (``variants/<sha256>.eml``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BlobMissingError
from ..pure import lifecycle
from ..pure.blob_location import sweep_candidates
from ..pure.documents import Blob
from ..pure.keys import blob_prefix, message_key
from ..pure.variants import variant_blob_key
from . import capabilities
from .context import AsyncStoreContext, log

__all__ = [
    "blob_key",
    "get_attachment",
    "get_html",
    "get_raw",
    "get_raw_variants",
    "named_blob",
    "put_blobs",
    "recorded_hashes",
    "sweep_blobs",
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
    return removed


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
