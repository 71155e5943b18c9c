"""What each agent tool does, written once for both kinds of store.

A tool's body is a generator: it yields the store calls it needs (``Call``: a method of the
store and its arguments; ``Embed``: the configured embedding function) and receives each
result back, then returns the tool's JSON-ready result. The body never touches the store
itself, so the same code runs over a ``MessageStore`` (``MailTools`` drives it with plain
calls) and an ``AsyncMessageStore`` (``AsyncMailTools`` awaits each call), and it can be read
top to bottom like the plain function it is. Arguments arrive checked (``arguments``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolError
from ..pure.invisible import unescape_hidden
from .shaping import Cuts, date_of, person, result, summary_item, thread_item
from .specs import LIST_FIELD_MAX, SNIPPET_MAX_CHARS, STORE_MAX_BYTES, SUBJECT_MAX_CHARS

__all__ = ["BODIES", "Call", "Embed", "Steps", "View", "drop_bcc_headers", "vectors_stored"]


@dataclass(frozen=True)
class Call:
    """A call of the store's method ``method`` with ``args`` and ``kwargs``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Embed:
    """A call of the embedding function configured for the tools, on ``text``."""

    text: str


Steps = Generator[Call | Embed, Any, dict[str, Any]]


@dataclass(frozen=True)
class View:
    """What a body knows of the store it reads: ``shared`` (a shared view: no bcc anywhere)."""

    shared: bool


Args = dict[str, Any]

# a Bcc (or Resent-Bcc) header field and its folded continuation lines
_BCC_FIELD = re.compile(r"^(?:resent-)?bcc[ \t]*:.*(?:\r?\n[ \t].*)*(?:\r?\n)?", re.IGNORECASE | re.MULTILINE)


def drop_bcc_headers(raw: str) -> str:
    """``raw`` (a message as text) without Bcc and Resent-Bcc fields in its header section: a
    shared view shows no bcc recipient, and a sent message's raw copy may name them."""
    match = re.search(r"\r?\n\r?\n", raw)
    head, body = (raw[: match.end()], raw[match.end() :]) if match else (raw, "")
    return _BCC_FIELD.sub("", head) + body


def _date(value: str | None, name: str) -> dt.datetime | None:
    """An ISO 8601 date or time argument as an aware datetime (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise ToolError(f"argument {name!r} must be an ISO 8601 date or time, such as 2026-01-31") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _summaries_of(hits: list[Mapping[str, Any]]) -> Call:
    return Call("message_summaries", ([h["messageId"] for h in hits],))


def _hit_items(hits: list[Mapping[str, Any]], summaries: list[Mapping[str, Any]], cuts: Cuts) -> list[dict[str, Any]]:
    """Search hits joined with their summaries, in the hits' order (a hit whose message went
    away between the two reads is left out)."""
    by_id = {s["messageId"]: s for s in summaries}
    items = []
    for hit in hits:
        summary = by_id.get(hit["messageId"])
        if summary is not None:
            items.append(summary_item(summary, cuts) | {"hit": hit})
    return items


def search(a: Args, view: View) -> Steps:
    hits = yield Call("search", (a["query"],), {"limit": a["limit"]})
    summaries = yield _summaries_of(hits)
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


def count(a: Args, view: View) -> Steps:
    total = yield Call("count", (a["query"],))
    return result(None, count=int(total))


def _thread_of(tid: str, limit: int) -> Generator[Call | Embed, Any, tuple[str, list[dict[str, Any]]]]:
    """The thread context of ``tid``, or of the thread of the message ``tid`` names."""
    entries = yield Call("thread_context", (tid,), {"limit": limit})
    if not entries:
        found = yield Call("message_summaries", ([tid],))
        if found:
            tid = found[0]["threadId"]
            entries = yield Call("thread_context", (tid,), {"limit": limit})
    if not entries:
        raise ToolError("no thread and no message with that id in this mailbox")
    return tid, list(entries)


def get_thread(a: Args, view: View) -> Steps:
    tid, entries = yield from _thread_of(unescape_hidden(a["thread_id"]), a["limit"])
    cuts = Cuts()
    budget, omitted = a["max_chars"], 0
    shown: list[dict[str, Any]] = []
    for entry in reversed(entries):  # the newest first: they are what the reader needs most
        text = entry.get("forAI") or ""
        # kept whole while it fits; the first that does not is cut to what is left (unless
        # under 200 characters are), and every older one is left out: what is shown stays contiguous
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


def get_message(a: Args, view: View) -> Steps:
    mid = unescape_hidden(a["message_id"])
    message = yield Call("get_message", (mid,))
    if message is None:
        raise ToolError("no message with that messageId in this mailbox")
    meta: Mapping[str, Any] = message.get("metadata") or {}
    content: Mapping[str, Any] = message.get("content") or {}
    thread: Mapping[str, Any] = message.get("thread") or {}
    clean, full = content.get("clean"), content.get("text")
    text = (clean if a["body"] == "clean" else full) or full or clean or ""
    cuts = Cuts()
    attachments = message.get("attachments") or []
    mail: dict[str, Any] = {
        "messageId": message["messageId"],
        "threadId": message.get("threadId"),
        "from": person(meta.get("from"), cuts),
        "to": [person(x, cuts) for x in cuts.items(meta.get("to"), LIST_FIELD_MAX)],
        "cc": [person(x, cuts) for x in cuts.items(meta.get("cc"), LIST_FIELD_MAX)],
    }
    if meta.get("bcc") and not view.shared:
        mail["bcc"] = [person(x, cuts) for x in cuts.items(meta.get("bcc"), LIST_FIELD_MAX)]
    references = list(thread.get("references") or ())
    if len(references) > LIST_FIELD_MAX:  # the nearest ancestors matter most: keep the last ones
        references, cuts.any = references[-LIST_FIELD_MAX:], True
    mail |= {
        "subject": cuts.text(meta.get("subject"), SUBJECT_MAX_CHARS),
        "date": meta.get("date"),
        "inReplyTo": thread.get("inReplyTo"),
        "references": references,
        "text": cuts.text(text, a["max_chars"]),
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
    fields: dict[str, Any] = {"body": a["body"], "textChars": len(text), "attachmentCount": len(attachments)}
    if a["include_raw"]:
        raw = yield Call("get_raw", (mid,))
        data = bytes(raw or b"")
        shown = data[: a["raw_max_bytes"]].decode("utf-8", errors="replace")
        mail["raw"] = drop_bcc_headers(shown) if view.shared else shown
        fields |= {"rawBytes": len(data), "rawTruncated": len(data) > a["raw_max_bytes"]}
    return result(mail, cuts, **fields)


def _page(page: Any, make: Callable[[Mapping[str, Any], Cuts], dict[str, Any]], items: list[Any]) -> dict[str, Any]:
    cuts = Cuts()
    shaped = [make(x, cuts) for x in items]
    return result(shaped, cuts, returned=len(shaped), nextCursor=page.next_cursor)


def list_messages(a: Args, view: View) -> Steps:
    since, until = _date(a["since"], "since"), _date(a["until"], "until")
    page = yield Call(
        "list_messages",
        (),
        {"cursor": a["cursor"], "limit": a["limit"], "sender": a["sender"], "since": since, "until": until},
    )
    return _page(page, summary_item, page.messages)


def list_threads(a: Args, view: View) -> Steps:
    page = yield Call("list_threads", (), {"cursor": a["cursor"], "limit": a["limit"]})
    return _page(page, thread_item, page.threads)


def with_participant(a: Args, view: View) -> Steps:
    address = unescape_hidden(a["address"])
    page = yield Call("with_participant", (address,), {"cursor": a["cursor"], "limit": a["limit"]})
    return _page(page, summary_item, page.messages)


def replies_to(a: Args, view: View) -> Steps:
    found = yield Call("replies_to", (unescape_hidden(a["message_id"]),))
    cuts = Cuts()
    items = [summary_item(s, cuts) for s in found[: a["limit"]]]
    return result(items, cuts, returned=len(items), more=len(found) > a["limit"])


def semantic_search(a: Args, view: View) -> Steps:
    if (a["text"] is None) == (a["vector"] is None):
        raise ToolError("give either text or vector (one of the two)")
    vector = a["vector"] if a["text"] is None else (yield Embed(a["text"]))
    tid = None if a["thread_id"] is None else unescape_hidden(a["thread_id"])
    hits = yield Call("semantic_search", (vector,), {"limit": a["limit"], "thread_id": tid})
    summaries = yield _summaries_of(hits)
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


def store_message(a: Args, view: View) -> Steps:
    try:
        data = a["raw"].encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("argument 'raw' holds characters that are not valid Unicode text") from None
    if len(data) > STORE_MAX_BYTES:
        raise ToolError(f"argument 'raw' is too large (at most {STORE_MAX_BYTES} bytes as UTF-8)")
    stored = yield Call("store", (data,))
    return result({"messageId": stored.message_id, "threadId": stored.thread_id}, outcome=stored.outcome)


def delete_message(a: Args, view: View) -> Steps:
    deleted = yield Call("delete", (unescape_hidden(a["message_id"]),))
    return result(None, deleted=bool(deleted))


def tag_messages(a: Args, view: View) -> Steps:
    query, listed = a.get("query"), a.get("message_ids")
    if (query is None) == (listed is None):
        raise ToolError("give either 'query' or 'message_ids', not both and not neither")
    if not a.get("add") and not a.get("remove"):
        raise ToolError("give tags to 'add' or 'remove'")
    cap = int(a["max_messages"])
    if listed is not None:
        if len(listed) > cap:
            raise ToolError(f"{len(listed)} message ids, more than max_messages ({cap})")
        ids = [unescape_hidden(m) for m in listed]
    else:
        hits = yield Call("search", (query,), {"limit": cap + 1})
        if len(hits) > cap or not getattr(hits, "complete", True):
            raise ToolError(f"the query matches more than max_messages ({cap}) messages: nothing was changed")
        ids = [h["messageId"] for h in hits]
    report = yield Call("tag", (ids,), {"add": a.get("add") or (), "remove": a.get("remove") or ()})
    summaries = yield Call("message_summaries", (ids,))
    cuts = Cuts()
    items = [summary_item(s, cuts) for s in summaries]
    return result(items, cuts, matched=report.matched, changed=report.changed)


def vectors_stored() -> Generator[Call | Embed, Any, bool]:
    """Whether the mailbox holds any vector (``semantic_search`` is listed only then)."""
    stats = yield Call("stats")
    vectors = (stats.get("collections") or {}).get("vectors") or {}
    return bool(vectors.get("mailbox"))


#: each tool's body by name
BODIES: dict[str, Callable[[Args, View], Steps]] = {
    "search": search,
    "count": count,
    "get_thread": get_thread,
    "get_message": get_message,
    "list_messages": list_messages,
    "list_threads": list_threads,
    "with_participant": with_participant,
    "replies_to": replies_to,
    "semantic_search": semantic_search,
    "store_message": store_message,
    "delete_message": delete_message,
    "tag_messages": tag_messages,
}
