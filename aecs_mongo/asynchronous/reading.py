"""Reading mail: one message rebuilt from its tiers, a thread, and the list reads.

``assemble`` turns hot + warm (and cold, on request) back into the AECS-1 object
(``pure/documents/rebuild.py`` holds the mapping); the list reads are keyset pages (``paging``) on the
indexes of the document contract, each returning the summaries the pure module shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pymongo.errors import OperationFailure

from ..pure import queries, windows
from ..pure import tags as tag_reads
from ..pure.attachment_text import attachments_for_ai
from ..pure.documents import context_entry, message_summary, to_normalized_email
from ..pure.documents.attachment_texts import texts_by_idx
from ..pure.keys import check_str, lookup_key, strip_message_id, thread_key
from ..pure.settings import check_limit
from ..results import MessagePage, ThreadPage
from ..types import ContextEntry, MessageSummary, NormalizedEmail, ThreadSummary
from . import capabilities, lookups, paging
from .blobstore import named_blob, raw_of
from .context import AsyncStoreContext, log, to_list
from .writing import parse_raw

__all__ = [
    "assemble",
    "attachment_texts",
    "get_attachment_text",
    "get_message",
    "get_thread",
    "list_messages",
    "list_threads",
    "message_summaries",
    "replies_to",
    "stale",
    "thread_context",
    "with_participant",
]


async def get_message(ctx: AsyncStoreContext, message_id: str, include_raw: bool = False) -> NormalizedEmail | None:
    _id = ctx.id_for(message_id)
    message = await ctx.messages.find_one(ctx.by_id(_id))
    if message is None:
        return None
    body = await ctx.bodies.find_one(ctx.by_id(_id))
    return await assemble(ctx, message, body, include_raw=include_raw)


async def assemble(
    ctx: AsyncStoreContext,
    message: Mapping[str, Any],
    body: Mapping[str, Any] | None,
    *,
    include_raw: bool,
    position: int | None = None,
) -> NormalizedEmail:
    """The AECS-1 object of one stored message (a spilled body read back from GridFS)."""
    spilled = None
    if body is not None and body.get("spill"):
        data = await named_blob(ctx, message, body["spill"])
        spilled = json.loads(data.decode("utf-8"))
    raw_full = html = raw = None
    if include_raw:
        names = message.get("blobs") or ()
        prefix = message["blobPrefix"]
        raw_full = await raw_of(ctx, message)
        if "body.html" in names:
            html = (await named_blob(ctx, message, prefix + "body.html")).decode("utf-8")
        if message.get("rawFromFull") and raw_full is not None:
            raw = parse_raw(raw_full, ctx.settings.for_ai_max_chars).email.get("content", {}).get("raw")
    assembled = to_normalized_email(
        message,
        body,
        raw_full=raw_full,
        raw=raw,
        html=html,
        spilled=spilled,
        position=position,
        shared=ctx.settings.shared_view,
        attachment_texts=texts_by_idx({**(spilled or {}), **(body or {})}.get("attachmentTexts")),
    )
    return cast(NormalizedEmail, assembled)


async def attachment_texts(
    ctx: AsyncStoreContext, message: Mapping[str, Any], body: Mapping[str, Any] | None
) -> dict[str, str]:
    """The whole text of each attachment that has any, by ``str(idx)``: from the body, or from
    its spill object (``body.json``) where it was too large for it."""
    if body is None:
        return {}
    if "attachmentTexts" not in body and body.get("spill"):
        data = await named_blob(ctx, message, body["spill"])
        return texts_by_idx(json.loads(data.decode("utf-8")).get("attachmentTexts"))
    return texts_by_idx(body.get("attachmentTexts"))


async def get_attachment_text(ctx: AsyncStoreContext, message_id: str, idx: int) -> str | None:
    """The whole text read from attachment ``idx``; None: no such message or attachment, or
    nothing read from it."""
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"idx must be an int, not {type(idx).__name__}")
    _id = ctx.id_for(message_id)
    message = await ctx.messages.find_one(
        ctx.by_id(_id), {"messageId": 1, "blobPrefix": 1, "blobs": 1, "attachments": 1}
    )
    if message is None:
        return None
    if not any(att.get("idx") == idx and att.get("textChars") for att in message.get("attachments") or ()):
        return None
    body = await ctx.bodies.find_one(ctx.by_id(_id), {"attachmentTexts": 1, "spill": 1})
    return (await attachment_texts(ctx, message, body)).get(str(idx))


def _thread_filter(ctx: AsyncStoreContext, thread_id: str) -> dict[str, Any]:
    return {"mailboxId": ctx.mailbox_id, "threadKey": thread_key(check_str(thread_id, "thread_id"))}


async def get_thread(ctx: AsyncStoreContext, thread_id: str) -> list[NormalizedEmail]:
    messages = await to_list(ctx.messages.find(_thread_filter(ctx, thread_id)).sort([("ts", 1), ("messageKey", 1)]))
    ids = [m["_id"] for m in messages]
    bodies = {b["_id"]: b async for b in ctx.bodies.find(ctx.by_ids(ids))}
    return [await assemble(ctx, m, bodies.get(m["_id"]), include_raw=False, position=i) for i, m in enumerate(messages)]


async def thread_context(
    ctx: AsyncStoreContext, thread_id: str, limit: int = 20, attachments: bool = False
) -> list[ContextEntry]:
    """The newest ``limit`` messages of a thread, oldest first, with their positions; with
    ``attachments``, each with ``attachmentsForAI`` (``attachments_for_ai`` of its attachments'
    text, None where none has any)."""
    check_limit(limit)
    selector = _thread_filter(ctx, thread_id)
    query = queries.thread_context_query(ctx.mailbox_id, selector["threadKey"])
    extent = await paging.thread_extent(ctx, selector["threadKey"])
    newest = await paging.sorted_rows(ctx, query, None, limit, queries.THREAD_CONTEXT_PROJECTION, extent)
    if not newest:
        return []
    total = len(newest)
    if total == limit:
        # the summary's count where it is exact (written in each message's transaction), or
        # where counting would read a big thread whole (its page was read in windows); else a
        # count (without transactions a crash can leave the summary short by one until reindex)
        size = None if extent is None else extent.count
        await capabilities.dialect(ctx)  # whether the server stops at a limit
        big = size is not None and size > windows.PLAIN_MAX_THREAD and not ctx.capabilities.stops_at_limit
        exact = size is not None and size >= limit and await capabilities.transactions(ctx)
        total = size if (big or exact) and size is not None else await ctx.messages.count_documents(selector)
    first_position = max(total - len(newest), 0)
    entries = [
        cast(ContextEntry, context_entry(m, first_position + offset)) for offset, m in enumerate(reversed(newest))
    ]
    if attachments:
        await _with_attachments_for_ai(ctx, list(reversed(newest)), entries)
    return entries


async def _with_attachments_for_ai(
    ctx: AsyncStoreContext, messages: Sequence[Mapping[str, Any]], entries: list[ContextEntry]
) -> None:
    """Set each entry's ``attachmentsForAI``: the bodies of the messages with text read in one go."""
    with_text = [m for m in messages if any(a.get("textChars") for a in m.get("attachments") or ())]
    ids = [ctx.id_for(m["messageId"]) for m in with_text]
    bodies = {}
    if ids:
        async for body in ctx.bodies.find(ctx.by_ids(ids), {"attachmentTexts": 1, "spill": 1}):
            bodies[body["_id"]] = body
    for message, entry in zip(messages, entries, strict=True):
        entry["attachmentsForAI"] = None
        body = bodies.get(ctx.id_for(message["messageId"]))
        if body is None:
            continue
        texts = await attachment_texts(ctx, message, body)
        items = [
            {
                "filename": a.get("filename"),
                "contentType": a.get("contentType"),
                "extractedText": texts.get(str(a.get("idx"))),
            }
            for a in message.get("attachments") or ()
        ]
        entry["attachmentsForAI"] = attachments_for_ai(items)


async def list_messages(
    ctx: AsyncStoreContext,
    cursor: str | None,
    limit: int,
    sender: str | None,
    thread_id: str | None,
    since: object,
    until: object,
    order: str,
) -> MessagePage:
    if sender is not None:
        check_str(sender, "sender")
    tkey = None if thread_id is None else thread_key(check_str(thread_id, "thread_id"))
    query = queries.inbox_query(
        ctx.mailbox_id, sender=sender, thread_key=tkey, since=since, until=until, order=check_str(order, "order")
    )
    if sender is not None:
        await lookups.ensure_lookups(ctx)
    extent = None if tkey is None else await paging.thread_extent(ctx, tkey)
    rows, next_cursor = await paging.page(ctx, query, cursor, limit, queries.LIST_PROJECTION, extent)
    return MessagePage([cast(MessageSummary, message_summary(r)) for r in rows], next_cursor)


async def with_participant(ctx: AsyncStoreContext, address: str, cursor: str | None, limit: int) -> MessagePage:
    query = queries.participant_query(ctx.mailbox_id, address, shared=ctx.settings.shared_view)
    rows, next_cursor = await paging.page(ctx, query, cursor, limit, queries.LIST_PROJECTION)
    return MessagePage([cast(MessageSummary, message_summary(r)) for r in rows], next_cursor)


async def list_threads(ctx: AsyncStoreContext, cursor: str | None, limit: int) -> ThreadPage:
    """The conversation list: the plain page of ``threads``, each summary carrying its tags (the
    union of its messages', kept on the summary: ``pure/tags.py``)."""
    query = queries.threads_query(ctx.mailbox_id)
    rows, next_cursor = await paging.page(ctx, query, cursor, limit, None)
    threads: list[ThreadSummary] = [
        {
            "threadId": r["threadId"],
            "subject": r.get("subject"),
            "messageCount": int(r["messageCount"]),
            "firstTs": int(r["firstTs"]),
            "lastTs": int(r["lastTs"]),
            "firstMessageKey": r["firstMessageKey"],
            "lastMessageKey": r["lastMessageKey"],
            "tags": tag_reads.row_tags(r),
        }
        for r in rows
    ]
    older = [r for r in rows if not isinstance(r.get("tags"), list)]
    if older:
        union = await _stored_thread_tags(ctx, older)
        for t in threads:
            t["tags"] = union.get(thread_key(t["threadId"]), t["tags"])
    return ThreadPage(threads, next_cursor)


async def _stored_thread_tags(ctx: AsyncStoreContext, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The tags of summaries written before threads kept them (no ``tags``): computed from their
    messages and stored, each once (filtered on the ``tagsRev`` read with the page, so a tag
    change that came between is not overwritten: the next read computes it again). A store this
    user may not write to (read-only credentials) still reads right."""
    keys = [str(r["threadKey"]) for r in rows]
    union = await thread_tags(ctx, keys)
    writes = [
        ({"_id": r["_id"], "tags": {"$exists": False}, "tagsRev": r.get("tagsRev")}, union.get(key, []))
        for r, key in zip(rows, keys, strict=True)
    ]
    try:
        for selector, tags in writes:
            await ctx.threads.update_one(selector, {"$set": {"tags": tags}})
    except OperationFailure as exc:
        log.debug("thread tags computed for this read, not stored: %s", exc)
    return {key: union.get(key, []) for key in keys}


async def thread_tags(ctx: AsyncStoreContext, keys: Sequence[str]) -> dict[str, list[str]]:
    """The union of each thread's messages' tags, from the messages: nothing is read but one key
    of ``aecs_messages_tags`` when the mailbox holds no tagged message; else one find on the
    thread index over the threads (their messages' ``threadKey`` and ``tags``), the union made
    here."""
    if not keys:
        return {}
    probe = ctx.messages.find(tag_reads.tagged_probe(ctx.mailbox_id), {"_id": 1}, limit=1)
    if not await to_list(probe.hint(tag_reads.TAGGED_PROBE_HINT)):
        return {}
    found = ctx.messages.find(tag_reads.thread_tags_filter(ctx.mailbox_id, keys), tag_reads.THREAD_TAGS_PROJECTION)
    return tag_reads.thread_tags_union(await to_list(found))


async def replies_to(ctx: AsyncStoreContext, message_id: str) -> list[MessageSummary]:
    mid = strip_message_id(message_id)
    by_references = await to_list(
        ctx.messages.find({"mailboxId": ctx.mailbox_id, "references": mid}, queries.LIST_PROJECTION)
    )
    await lookups.ensure_lookups(ctx)
    by_parent = await to_list(
        ctx.messages.find(
            {"mailboxId": ctx.mailbox_id, "lookups": lookup_key("in-reply-to", mid)}, queries.LIST_PROJECTION
        )
    )
    unique = {r["messageKey"]: r for r in by_references + by_parent}
    ordered = sorted(unique.values(), key=lambda r: (r["ts"], r["messageKey"]))
    return [cast(MessageSummary, message_summary(r)) for r in ordered]


async def message_summaries(ctx: AsyncStoreContext, message_ids: Sequence[str]) -> list[MessageSummary]:
    """The list summaries of ``message_ids`` (a search's hits), in the order given; a message
    that is not stored is left out. One ``_id $in`` read (split as the server likes it)."""
    if isinstance(message_ids, str):
        raise TypeError("message_ids must be a sequence of message ids, not a str")
    ids = [ctx.id_for(check_str(mid, "message_id")) for mid in message_ids]
    await capabilities.dialect(ctx)
    found: dict[str, dict[str, Any]] = {}
    for selector in ctx.dialect.split_in(ctx.by_ids(list(dict.fromkeys(ids)))):
        found.update({r["_id"]: r async for r in ctx.messages.find(selector, {**queries.LIST_PROJECTION, "_id": 1})})
    return [cast(MessageSummary, message_summary(found[i])) for i in ids if i in found]


async def stale(ctx: AsyncStoreContext, spec_version: str, limit: int = 100) -> list[str]:
    check_str(spec_version, "spec_version")
    check_limit(limit)
    rows = await to_list(
        ctx.messages.find(queries.stale_filter(ctx.mailbox_id, spec_version), {"_id": 0, "messageId": 1})
        .sort([("specVersion", 1), ("_id", 1)])  # the _id order is the message keys' order
        .hint(queries.ID_INDEX)
        .limit(limit)
    )
    return [r["messageId"] for r in rows]
