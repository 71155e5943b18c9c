"""What each agent tool makes of what the store returned. Pure.

The tools themselves (``asynchronous/tools.py``, and its generated sync twin) call the store
and hand its answers to these functions, which shape the JSON-ready result: the right fields,
each text within its cap, message-derived text under ``mail``. Arguments arrive checked.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ToolError
from .shaping import Cuts, date_of, person, result, summary_item, thread_item
from .specs import LIST_FIELD_MAX, SNIPPET_MAX_CHARS, STORE_MAX_BYTES, SUBJECT_MAX_CHARS

__all__ = [
    "drop_bcc_headers",
    "encoded_message",
    "hit_ids",
    "listing_page",
    "message_result",
    "page_result",
    "parse_date",
    "replies_result",
    "search_result",
    "semantic_result",
    "summaries_result",
    "thread_result",
    "threads_page",
    "vectors_stored",
]

# a Bcc (or Resent-Bcc) header field and its folded continuation lines
_BCC_FIELD = re.compile(r"^(?:resent-)?bcc[ \t]*:.*(?:\r?\n[ \t].*)*(?:\r?\n)?", re.IGNORECASE | re.MULTILINE)


def drop_bcc_headers(raw: str) -> str:
    """``raw`` (a message as text) without Bcc and Resent-Bcc fields in its header section: a
    shared view shows no bcc recipient, and a sent message's raw copy may name them."""
    match = re.search(r"\r?\n\r?\n", raw)
    head, body = (raw[: match.end()], raw[match.end() :]) if match else (raw, "")
    return _BCC_FIELD.sub("", head) + body


def parse_date(value: str | None, name: str) -> dt.datetime | None:
    """An ISO 8601 date or time argument as an aware datetime (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise ToolError(f"argument {name!r} must be an ISO 8601 date or time, such as 2026-01-31") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def hit_ids(hits: Sequence[Mapping[str, Any]]) -> list[str]:
    """The messageIds of search hits, in their order (for one summaries read)."""
    return [h["messageId"] for h in hits]


def _hit_items(
    hits: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]], cuts: Cuts
) -> list[dict[str, Any]]:
    """Search hits joined with their summaries, in the hits' order (a hit whose message went
    away between the two reads is left out)."""
    by_id = {s["messageId"]: s for s in summaries}
    items = []
    for hit in hits:
        summary = by_id.get(hit["messageId"])
        if summary is not None:
            items.append(summary_item(summary, cuts) | {"hit": hit})
    return items


def search_result(hits: Any, summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``search``: each hit's summary and its snippet, the engine and whether it was complete."""
    cuts = Cuts()
    items = _hit_items(hits, summaries, cuts)
    for item in items:
        snippet = str(item.pop("hit").get("snippet") or "")
        item["snippet"] = snippet if len(snippet) <= SNIPPET_MAX_CHARS else snippet[: SNIPPET_MAX_CHARS - 1] + "…"
    return result(
        items,
        cuts,
        returned=len(items),
        engine=getattr(hits, "engine", None),
        complete=bool(getattr(hits, "complete", True)),
    )


def semantic_result(hits: Any, summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``semantic_search``: each hit's summary and its score, the engine and completeness."""
    cuts = Cuts()
    items = _hit_items(hits, summaries, cuts)
    for item in items:
        item["score"] = item.pop("hit").get("score")
    return result(
        items,
        cuts,
        returned=len(items),
        engine=getattr(hits, "engine", None),
        complete=bool(getattr(hits, "complete", True)),
    )


def thread_result(tid: str, entries: Sequence[Mapping[str, Any]], max_chars: int) -> dict[str, Any]:
    """``get_thread``: the newest messages kept whole first within ``max_chars`` characters of
    text; the first that does not fit is cut (unless under 200 characters are left) and every
    older one left out, so what is shown stays contiguous."""
    if not entries:
        raise ToolError("no thread and no message with that id in this mailbox")
    cuts = Cuts()
    budget, omitted = max_chars, 0
    shown: list[dict[str, Any]] = []
    for entry in reversed(entries):  # the newest first: they are what the reader needs most
        text = entry.get("forAI") or ""
        if entry.get("attachmentsForAI"):  # get_thread(attachments=true)
            text = f"{text}\n\n{entry['attachmentsForAI']}".strip()
        if omitted or (len(text) > budget and budget < 200 and shown):
            omitted += 1
            continue
        text = cuts.text(text, budget) or ""
        budget -= len(text)
        shown.append(
            {
                "messageId": entry["messageId"],
                "position": entry["position"],
                "from": person(entry.get("from"), cuts),
                "date": date_of(entry),
                "subject": cuts.text(entry.get("subject"), SUBJECT_MAX_CHARS),
                "text": text,
            }
        )
    shown.reverse()
    if omitted:
        cuts.any = True
    total = int(entries[-1]["position"]) + 1
    mail = {"threadId": tid, "subject": cuts.text(entries[0].get("subject"), SUBJECT_MAX_CHARS), "messages": shown}
    return result(
        mail,
        cuts,
        messageCount=total,
        returned=len(shown),
        omittedForBudget=omitted,
        olderNotShown=int(shown[0]["position"]) if shown else total,
    )


def message_result(
    message: Mapping[str, Any] | None,
    *,
    body: str,
    max_chars: int,
    raw: bytes | None,
    raw_max_bytes: int,
    shared: bool,
) -> dict[str, Any]:
    """``get_message``: the message's fields, its text within ``max_chars``, its attachments'
    index (never their content) and, when ``raw`` was read, its first ``raw_max_bytes`` as text.
    A shared view shows no bcc recipient, in the fields or the raw header."""
    if message is None:
        raise ToolError("no message with that messageId in this mailbox")
    meta: Mapping[str, Any] = message.get("metadata") or {}
    content: Mapping[str, Any] = message.get("content") or {}
    thread: Mapping[str, Any] = message.get("thread") or {}
    clean, full = content.get("clean"), content.get("text")
    text = (clean if body == "clean" else full) or full or clean or ""
    cuts = Cuts()
    attachments = message.get("attachments") or []
    mail: dict[str, Any] = {
        "messageId": message["messageId"],
        "threadId": message.get("threadId"),
        "from": person(meta.get("from"), cuts),
        "to": [person(x, cuts) for x in cuts.items(meta.get("to"), LIST_FIELD_MAX)],
        "cc": [person(x, cuts) for x in cuts.items(meta.get("cc"), LIST_FIELD_MAX)],
    }
    if meta.get("bcc") and not shared:
        mail["bcc"] = [person(x, cuts) for x in cuts.items(meta.get("bcc"), LIST_FIELD_MAX)]
    references = list(thread.get("references") or ())
    if len(references) > LIST_FIELD_MAX:  # the nearest ancestors matter most: keep the last ones
        references, cuts.any = references[-LIST_FIELD_MAX:], True
    mail |= {
        "subject": cuts.text(meta.get("subject"), SUBJECT_MAX_CHARS),
        "date": meta.get("date"),
        "inReplyTo": thread.get("inReplyTo"),
        "references": references,
        "text": cuts.text(text, max_chars),
        "attachments": [
            {
                "index": i,
                "filename": cuts.text(att.get("filename"), SUBJECT_MAX_CHARS),
                "contentType": cuts.text(att.get("contentType"), SUBJECT_MAX_CHARS),
                "size": att.get("size"),
            }
            for i, att in enumerate(cuts.items(attachments, LIST_FIELD_MAX))
        ],
    }
    fields: dict[str, Any] = {"body": body, "textChars": len(text), "attachmentCount": len(attachments)}
    if raw is not None:
        data = bytes(raw)
        shown = data[:raw_max_bytes].decode("utf-8", errors="replace")
        mail["raw"] = drop_bcc_headers(shown) if shared else shown
        fields |= {"rawBytes": len(data), "rawTruncated": len(data) > raw_max_bytes}
    return result(mail, cuts, **fields)


def attachment_text_result(
    message: Mapping[str, Any] | None, index: int, text: str | None, offset: int, max_chars: int
) -> dict[str, Any]:
    """``get_attachment_text``: ``max_chars`` characters of an attachment's text from ``offset``."""
    if message is None or text is None:
        raise ToolError("no text was read from that attachment (or there is no such message or attachment)")
    attachments = message.get("attachments") or []
    att = attachments[index] if index < len(attachments) else {}
    cuts = Cuts()
    end = min(offset + max_chars, len(text))
    mail = {
        "messageId": message["messageId"],
        "index": index,
        "filename": cuts.text(att.get("filename"), SUBJECT_MAX_CHARS),
        "contentType": cuts.text(att.get("contentType"), SUBJECT_MAX_CHARS),
        "text": text[offset:end],
    }
    return result(mail, cuts, textChars=len(text), offset=offset, nextOffset=end if end < len(text) else None)


def page_result(
    page: Any, make: Callable[[Mapping[str, Any], Cuts], dict[str, Any]], items: list[Any]
) -> dict[str, Any]:
    """A listing's page: its items shaped by ``make`` and the cursor of the next page."""
    cuts = Cuts()
    shaped = [make(x, cuts) for x in items]
    return result(shaped, cuts, returned=len(shaped), nextCursor=page.next_cursor)


def listing_page(page: Any) -> dict[str, Any]:
    """``list_messages`` and ``with_participant``: a page of message summaries."""
    return page_result(page, summary_item, page.messages)


def threads_page(page: Any) -> dict[str, Any]:
    """``list_threads``: a page of conversations."""
    return page_result(page, thread_item, page.threads)


def replies_result(found: Sequence[Mapping[str, Any]], limit: int) -> dict[str, Any]:
    """``replies_to``: the first ``limit`` replies and whether there are more."""
    cuts = Cuts()
    items = [summary_item(s, cuts) for s in found[:limit]]
    return result(items, cuts, returned=len(items), more=len(found) > limit)


def summaries_result(summaries: Sequence[Mapping[str, Any]], **fields: Any) -> dict[str, Any]:
    """Message summaries under ``mail``, with the tool's own ``fields``."""
    cuts = Cuts()
    items = [summary_item(s, cuts) for s in summaries]
    return result(items, cuts, **fields)


def encoded_message(raw: str) -> bytes:
    """``store_message``'s text as UTF-8 bytes, within its byte cap."""
    try:
        data = raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("argument 'raw' holds characters that are not valid Unicode text") from None
    if len(data) > STORE_MAX_BYTES:
        raise ToolError(f"argument 'raw' is too large (at most {STORE_MAX_BYTES} bytes as UTF-8)")
    return data


def vectors_stored(stats: Mapping[str, Any]) -> bool:
    """Whether the store's ``stats()`` show any vector (``semantic_search`` is listed only then)."""
    vectors = (stats.get("collections") or {}).get("vectors") or {}
    return bool(vectors.get("mailbox"))
