"""The way back: stored documents -> the AECS-1 object and the small dicts the reads return.

``to_normalized_email`` rebuilds a stored NormalizedEmail field for field (omitted and ``null``
fields mean the same, AECS-1 §10) from the hot row, the body (with what spilled to
``body.json`` put back) and the blobs the caller read; a shared view leaves bcc out.
``message_summary`` and ``context_entry`` are what list reads and ``thread_context`` return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..attachment_text import EXTRACTED_TEXT_CHARS
from ..tags import row_tags
from .validation import date_to_iso, raw_full_from_bytes

__all__ = ["context_entry", "message_summary", "to_normalized_email"]


def _iso_or_none(message: Mapping[str, Any]) -> str | None:
    if "dateText" in message:
        return str(message["dateText"])
    return date_to_iso(message.get("date"))


def message_summary(message: Mapping[str, Any]) -> dict[str, Any]:
    """The small dict list reads return for one ``messages`` document."""
    sender = message.get("from")
    return {
        "messageId": message["messageId"],
        "threadId": message["threadId"],
        "subject": message.get("subject"),
        "from": dict(sender) if sender else None,
        "date": _iso_or_none(message),
        "ts": int(message["ts"]),
        "inReplyTo": message.get("inReplyTo"),
        "attachmentCount": len(message.get("attachments") or ()),
        "tags": row_tags(message),
    }


def context_entry(message: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One message of ``thread_context``: what a prompt needs, with its position in the thread."""
    sender = message.get("from")
    return {
        "messageId": message["messageId"],
        "from": dict(sender) if sender else None,
        "subject": message.get("subject"),
        "date": _iso_or_none(message),
        "ts": int(message["ts"]),
        "forAI": message.get("forAI"),
        "position": position,
        "tags": row_tags(message),
    }


def to_normalized_email(
    message: Mapping[str, Any],
    body: Mapping[str, Any] | None,
    *,
    raw_full: bytes | None = None,
    raw: str | None = None,
    html: str | None = None,
    spilled: Mapping[str, Any] | None = None,
    position: int | None = None,
    shared: bool = False,
    attachment_texts: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Rebuild the AECS-1 object from the hot and warm documents (and cold blobs, if given).

    ``shared`` marks a view other people see: bcc is left out of it (a Bcc list is its sender's own).
    ``attachment_texts`` (``{"<idx>": text}``): each attachment with text gets ``extractedText``,
    its first ``EXTRACTED_TEXT_CHARS`` characters (the whole: ``get_attachment_text``); the
    extraction's errors join ``processing.attachmentErrors``.
    """
    # the body with what moved to body.json put back: one place that holds every whole value
    whole = {**(spilled or {}), **(body or {})}
    x = message.get("x") or {}
    sender = whole.get("from")
    if sender is None and message.get("from"):
        sender = {"name": message["from"].get("name"), "email": message["from"]["email"]}
    timestamp = message.get("timestamp")
    metadata: dict[str, Any] = {
        "from": dict(sender) if sender else None,
        "to": [dict(a) for a in whole.get("to") or ()],
        "cc": [dict(a) for a in whole.get("cc") or ()],
        "bcc": [] if shared else [dict(a) for a in whole.get("bcc") or ()],
        "subject": whole["subject"] if "subject" in whole else message.get("subject"),  # bodies keep it whole
        "date": _iso_or_none(message),
        "timestamp": None if timestamp is None else int(timestamp),
        **x.get("metadata", {}),
    }
    if metadata["from"] is None:
        del metadata["from"]
    content: dict[str, Any] = {
        "rawFull": None if raw_full is None else raw_full_from_bytes(raw_full),
        "raw": whole.get("raw", raw),
        "html": html,
        "text": whole.get("text"),
        "clean": whole.get("clean"),
        "forAI": whole.get("forAI", message.get("forAI")),
        **x.get("content", {}),
    }
    attachments = []
    full_filenames = whole.get("fullFilenames") or {}
    for att in message.get("attachments") or ():
        item = {
            "id": att.get("attachmentId"),
            "filename": full_filenames.get(str(att.get("idx")), att.get("filename", "")),
            "contentType": att.get("contentType"),
            "size": int(att.get("size", 0)),
            "cid": att.get("cid"),
            **(att.get("x") or {}),
        }
        text = (attachment_texts or {}).get(str(att.get("idx")))
        if text:
            item["extractedText"] = text[:EXTRACTED_TEXT_CHARS]
        attachments.append(item)
    result: dict[str, Any] = {
        "messageId": message["messageId"],
        "threadId": message["threadId"],
        "metadata": metadata,
        "content": content,
        "thread": {
            "position": position,
            "inReplyTo": message.get("inReplyTo"),
            "references": list(message.get("references") or ()),
            **x.get("thread", {}),
        },
        "attachments": attachments,
        "processing": {
            "processedAt": message.get("processedAt"),
            "specVersion": message.get("specVersion"),
            "cleanFallback": message.get("cleanFallback"),
            **x.get("processing", {}),
        },
    }
    if message.get("attachmentErrors"):
        given = list(result["processing"].get("attachmentErrors") or ())
        result["processing"]["attachmentErrors"] = given + [dict(e) for e in message["attachmentErrors"]]
    result.update({k: v for k, v in x.items() if k.startswith("x_")})
    return result
