"""The export reader: every stored raw copy of a mailbox, oldest first, a page of blobs at a time.

The pages and their byte bounds are the pure ``pure/lifecycle.py``'s; the writers (mbox,
Maildir, .eml) are ``mail/sinks.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..pure import blobs, lifecycle
from ..pure.lifecycle import ExportedCopy
from .context import AsyncStoreContext

__all__ = ["export_copies"]

_EXPORT_FIELDS = {"messageId": 1, "ts": 1, "blobPrefix": 1, "blobs": 1, "variantHashes": 1, "from.email": 1}


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

    Blobs are read a page at a time (``lifecycle.EXPORT_PAGE`` messages, one ``files`` and one
    ``chunks`` statement for up to ``lifecycle.EXPORT_PAGE_BYTES`` of them), so memory is bounded
    by that page or the largest message, never by the mailbox.
    """
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
    files = ctx.files
    found = files.find({"_id": {"$in": [key for _, _, key in wanted]}}, {"length": 1, "chunkSize": 1})
    stored = {f["_id"]: f async for f in found}
    if on_missing is not None:
        for message in page:
            if not any(key in stored for number, key in lifecycle.raw_copy_keys(message, False) if number == 0):
                on_missing(message["messageId"])
    present = [item for item in wanted if item[2] in stored]
    for group in lifecycle.byte_pages(present, lambda item: int(stored[item[2]]["length"])):
        data = await _read_blobs(ctx, [stored[key] for _, _, key in group])
        for message, number, key in group:
            sender = (message.get("from") or {}).get("email")
            yield ExportedCopy(message["messageId"], data[key], int(message["ts"]), number, sender)


async def _read_blobs(ctx: AsyncStoreContext, file_docs: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
    """The bytes of several blobs in one ``chunks`` statement (on ``files_id_1_n_1``)."""
    chunks: dict[str, list[Mapping[str, Any]]] = {f["_id"]: [] for f in file_docs}
    found = ctx.chunks.find({"files_id": {"$in": list(chunks)}}, {"files_id": 1, "n": 1, "data": 1})
    async for chunk in found:
        chunks[chunk["files_id"]].append(chunk)
    return {f["_id"]: blobs.assemble(f, sorted(chunks[f["_id"]], key=lambda c: c["n"])) for f in file_docs}
