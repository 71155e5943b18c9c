"""The extract stage of storing, and its store options: ``attachment_text`` (default True: read
the text of raw mail's attachments; the ``attachments`` extra's libraries, each extraction in a
limited worker process), ``ocr`` (images too, with Tesseract), ``processors`` (the caller's own,
``accepts``/``process``, tried first), ``attachments_in_for_ai`` (append the text to ``forAI``),
``extract_later`` (leave it for ``extract_pending``). A failure goes to
``processing.attachmentErrors`` and never fails the store.

The stage: each message's attachments read for their text
(``aecs_mongo.extraction``) before the write, the texts and errors put into its documents
(``pure/documents/attachment_texts.py``). One batch's attachments go to the worker processes
together, so that they are read side by side. Off with ``attachment_text=False``.

Only raw mail is read: a NormalizedEmail is stored as it was given and comes back field for
field (an ``extractedText`` its producer set on an attachment is kept with it).

``extract_pending`` is the deferred mode's worker (the AECS SDK's extraction from a queue): with
``extract_later=True`` the store leaves raw mail's attachments unread and unmarked, and it reads
them later, resumably; ``reindex`` runs it too, which gives mail stored before attachment text
existed its text.
"""

from __future__ import annotations

import dataclasses
from asyncio import wrap_future
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..extraction import Extractor
from ..pure.documents import Blob, MessageDocuments
from ..pure.documents.attachment_texts import attachment_items, with_attachment_texts
from . import blobstore, indexing
from .changemarks import AsyncChange
from .context import AsyncStoreContext, to_list

__all__ = ["extract_pending", "extract_texts", "pending_filter", "read_texts"]

#: the threads ``read_texts`` waits on, so that an event loop goes on while workers read
_CALLS = ThreadPoolExecutor(2, thread_name_prefix="aecs-extract-call")


def extract_texts(ctx: AsyncStoreContext, batch: Sequence[MessageDocuments]) -> list[MessageDocuments]:
    """``batch`` with each message's attachment text (unchanged where the store reads none)."""
    settings = ctx.settings
    if not settings.attachment_text or settings.extract_later or not batch:
        return list(batch)
    owners: list[int] = []
    items = []
    for number, docs in enumerate(batch):
        if not docs.message.get("rawFromFull"):  # a NormalizedEmail: stored as given
            continue
        pairs = attachment_items(docs)
        if pairs:
            docs.message["attachmentsRead"] = 1  # not pending (``extract_pending``)
        for att, data in pairs:
            owners.append(number)
            items.append((att, data))
    if not items:
        return list(batch)
    extractor = Extractor(settings.processors, ocr=settings.ocr)
    found = extractor.extract_each(items)
    per_message: dict[int, list[object]] = {}
    for number, result in zip(owners, found, strict=True):
        if result is not None:
            per_message.setdefault(number, []).append(result)
    return [
        with_attachment_texts(docs, per_message[number], in_for_ai=settings.attachments_in_for_ai)
        if number in per_message
        else docs
        for number, docs in enumerate(batch)
    ]


async def read_texts(ctx: AsyncStoreContext, batch: Sequence[MessageDocuments]) -> list[MessageDocuments]:
    """``extract_texts`` on a thread of its own, awaited (the caller's event loop is not held
    while the workers read); the pipeline's stage calls ``extract_texts`` on its own thread."""
    future = _CALLS.submit(extract_texts, ctx, batch)
    return await wrap_future(future)


#: the messages ``extract_pending`` reads at a time
_PENDING_BATCH = 20


def pending_filter(mailbox_id: str) -> dict[str, Any]:
    """The raw messages with attachment bytes whose attachments were not read yet: stored with
    ``extract_later=True``, or before the store read attachments at all."""
    return {
        "mailboxId": mailbox_id,
        "rawFromFull": True,
        "attachments.0": {"$exists": True},
        "attachmentsRead": {"$exists": False},
    }


async def extract_pending(
    ctx: AsyncStoreContext, limit: int | None = None, progress: Callable[[int], None] | None = None
) -> int:
    """Read the attachments of the messages still pending (``pending_filter``), ``limit`` messages
    at most (None: all), a batch at a time; how many were read. Each message is marked once its
    texts and errors are written, so a run that is stopped goes on where it was. ``progress``:
    called with the count so far after each message."""
    settings = ctx.settings
    extractor = Extractor(settings.processors, ocr=settings.ocr)
    done = 0
    after: str | None = None  # keyset on _id: each batch starts past the last one read
    while limit is None or done < limit:
        size = _PENDING_BATCH if limit is None else min(_PENDING_BATCH, limit - done)
        query = pending_filter(ctx.mailbox_id)
        if after is not None:
            query["_id"] = {"$gt": after}
        rows = await to_list(ctx.messages.find(query).sort("_id", 1).limit(size))
        if not rows:
            break
        after = str(rows[-1]["_id"])
        for message in rows:
            await _fill_one(ctx, extractor, message)
            done += 1
            if progress is not None:
                progress(done)
    return done


async def _fill_one(ctx: AsyncStoreContext, extractor: Extractor, message: dict[str, Any]) -> None:
    """One pending message's attachments read and their texts and errors written."""
    body = await ctx.bodies.find_one(ctx.by_id(message["_id"])) or {"_id": message["_id"]}
    store = await ctx.blob_store()
    keys = [str(a["blobKey"]) for a in message.get("attachments") or () if a.get("blobKey")]
    names = message.get("blobs") or ()
    prefix = str(message["blobPrefix"])
    extra = [prefix + name for name in ("body.html", "body.json") if name in names]
    data = await store.get_many(keys + extra)
    blobs = tuple(Blob(k, data[k], "application/octet-stream") for k in keys if k in data)
    # an attachment kept in the raw message's pack itself is read from the raw message
    inline = any((a.get("raw") or {}).get("part") is None for a in message.get("attachments") or () if a.get("raw"))
    docs = MessageDocuments(
        str(message["messageId"]),
        str(message["messageKey"]),
        str(message["threadId"]),
        str(message["threadKey"]),
        blobs,
        dict(body),
        dict(message),
        raw=await blobstore.raw_of(ctx, message) if inline else None,
    )
    future = _CALLS.submit(extractor.extract_each, attachment_items(docs))
    found = [r for r in await wrap_future(future) if r is not None]
    spill_key = prefix + "body.json"
    if spill_key in data:  # a spilled body: its object is extended, not replaced
        docs = dataclasses.replace(docs, blobs=(*docs.blobs, Blob(spill_key, data[spill_key], "application/json")))
    new = with_attachment_texts(docs, found, in_for_ai=ctx.settings.attachments_in_for_ai)
    put = [(b, new.message_key) for b in new.blobs if b.key == spill_key and b.data != data.get(spill_key)]
    if put:
        await blobstore.put_blobs(ctx, put)
    message_set: dict[str, Any] = {"attachmentsRead": 1, "attachments": new.message.get("attachments") or []}
    for field in ("attachmentErrors", "forAI", "blobs"):
        if field in new.message:
            message_set[field] = new.message[field]
    body_set = {k: new.body[k] for k in ("attachmentTexts", "spill", "forAI") if k in new.body}
    async with AsyncChange(ctx, followed=True):  # where there is no change stream (changemarks.py)
        if body_set:
            await ctx.bodies.update_one(ctx.by_id(message["_id"]), {"$set": body_set})
        await ctx.messages.update_one(ctx.by_id(message["_id"]), {"$set": message_set})
        html = [Blob(k, data[k], "text/html") for k in extra if k.endswith("body.html") and k in data]
        await indexing.after_reparse(ctx, dataclasses.replace(new, blobs=(*new.blobs, *html)), new.message_key)
