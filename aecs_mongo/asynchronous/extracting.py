"""The extract stage of storing: each message's attachments read for their text
(``aecs_mongo.extraction``) before the write, the texts and errors put into its documents
(``pure/documents/attachment_texts.py``). One batch's attachments go to the worker processes
together, so that they are read side by side. Off with ``attachment_text=False``.

Only raw mail is read: a NormalizedEmail is stored as it was given and comes back field for
field (an ``extractedText`` its producer set on an attachment is kept with it).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..extraction import Extractor
from ..pure.documents import MessageDocuments
from ..pure.documents.attachment_texts import attachment_items, with_attachment_texts
from .context import AsyncStoreContext

__all__ = ["extract_texts"]


def extract_texts(ctx: AsyncStoreContext, batch: Sequence[MessageDocuments]) -> list[MessageDocuments]:
    """``batch`` with each message's attachment text (unchanged where the store reads none)."""
    settings = ctx.settings
    if not settings.attachment_text or not batch:
        return list(batch)
    owners: list[int] = []
    items = []
    for number, docs in enumerate(batch):
        if not docs.message.get("rawFromFull"):  # a NormalizedEmail: stored as given
            continue
        for att, data in attachment_items(docs):
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
