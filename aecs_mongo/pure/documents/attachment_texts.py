"""Attachment text in the stored documents.

The whole text of each attachment is kept in the warm tier, ``bodies.attachmentTexts``
(``[{idx, filename, text}]``: a list, so that a text index and a pattern reach ``.text``);
where that would take the body past the spill size, it moves to the body's spill object
(``body.json`` in the cold tier, as large text does), which every reader of a body already
merges back, and which is deleted, expired and erased with the message. The hot row
keeps only what lists and ``show`` need: ``attachments[i].textChars`` (how many characters
were read) and ``attachmentErrors`` (``{filename, message}``, the AECS SDK's
``processing.attachmentErrors``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import bson

from ..attachment_text import attachments_for_ai
from ..transfer_encoding import decode_body
from .building import BODY_SPILL_BYTES, HOT_TEXT_CHARS, Blob, MessageDocuments

__all__ = ["attachment_items", "texts_by_idx", "with_attachment_texts"]

#: the body's spill object (``building.py``), under the message's blob prefix
SPILL_BLOB = "body.json"


def attachment_items(docs: MessageDocuments) -> list[tuple[dict[str, Any], bytes]]:
    """Each attachment of ``docs`` that has bytes, with them decoded (what extraction reads):
    from its encoded body in the raw message (a part among the blobs, or a span of
    the whole message, ``raw_message``), else its own blob."""
    data = {blob.key: blob.data for blob in docs.blobs}
    items = []
    raw: list[bytes | None] = []  # the whole message, put together once, where a span needs it
    for att in docs.message.get("attachments") or ():
        key = att.get("blobKey")
        span = att.get("raw")
        if span:
            if span.get("part"):
                encoded = data.get(key)
            else:
                if not raw:
                    raw.append(docs.raw_message())
                whole = raw[0]
                encoded = None if whole is None else whole[span["start"] : span["end"]]
            if encoded is not None:
                items.append((att, decode_body(encoded, span["encoding"])[0]))
        elif key and key in data:
            items.append((att, data[key]))
    return items


def texts_by_idx(stored: Any) -> dict[str, str]:
    """``{"<idx>": text}`` of a stored ``attachmentTexts`` list."""
    return {
        str(item["idx"]): str(item["text"]) for item in stored or () if isinstance(item, Mapping) and item.get("text")
    }


def with_attachment_texts(
    docs: MessageDocuments,
    found: Sequence[Any],
    *,
    in_for_ai: bool = False,
    body_spill_bytes: int = BODY_SPILL_BYTES,
) -> MessageDocuments:
    """``docs`` with what extraction ``found`` (items with ``idx``, ``filename``, ``text``,
    ``error``): the texts in the body (or ``attachments.json``), the character counts and
    errors in the hot row, and with ``in_for_ai`` the texts appended to ``forAI`` as the AECS
    SDK's ``attachmentsInForAI`` does."""
    texts = {str(item.idx): item.text for item in found if item.text}
    errors = [{"filename": item.filename, "message": item.error} for item in found if item.error]
    if not texts and not errors:
        return docs
    message, body, blobs = docs.message, docs.body, list(docs.blobs)
    for att in message.get("attachments") or ():
        text = texts.get(str(att.get("idx")))
        if text:
            att["textChars"] = len(text)
    if errors:
        message["attachmentErrors"] = errors
    if texts:
        names = {str(item.idx): item.filename for item in found}
        stored = [{"idx": int(idx), "filename": names.get(idx, ""), "text": text} for idx, text in texts.items()]
        body["attachmentTexts"] = stored
        if len(bson.encode(body)) > body_spill_bytes:
            del body["attachmentTexts"]
            key = message["blobPrefix"] + SPILL_BLOB
            spilled: dict[str, Any] = {}
            for blob in blobs:
                if blob.key == key:
                    spilled = json.loads(blob.data.decode("utf-8"))
            spilled["attachmentTexts"] = stored
            data = json.dumps(spilled, ensure_ascii=False).encode("utf-8")
            blobs = [blob for blob in blobs if blob.key != key] + [Blob(key, data, "application/json")]
            if not body.get("spill"):
                body["spill"] = key
                message["blobs"].append(SPILL_BLOB)
        if in_for_ai:
            _append_to_for_ai(message, body, texts)
    return dataclasses.replace(docs, blobs=tuple(blobs))


def _append_to_for_ai(message: dict[str, Any], body: dict[str, Any], texts: Mapping[str, str]) -> None:
    attachments = [
        {
            "filename": att.get("filename"),
            "contentType": att.get("contentType"),
            "extractedText": texts.get(str(att.get("idx"))),
        }
        for att in message.get("attachments") or ()
    ]
    context = attachments_for_ai(attachments)
    if context is None:
        return
    whole = body.get("forAI", message.get("forAI"))
    whole = f"{whole}\n\n{context}" if whole is not None else context
    limit = HOT_TEXT_CHARS["forAI"]
    message["forAI"] = whole if len(whole) <= limit else whole[:limit]
    if message["forAI"] != whole:
        body["forAI"] = whole
    else:
        body.pop("forAI", None)
