"""The POP3 pipeline's surface: its message store on the same documents.

UIDL bookkeeping (one ``uidls`` document per UIDL ever downloaded), the header lookups
(``find``: Subject, From, In-Reply-To and List-Id as keys of the one ``lookups`` array on
``aecs_messages_lookups``; To on the participant index; Date on the inbox index; References on
their own), every message id
in order, the stdlib ``EmailMessage`` from ``raw.eml``, and ``walk_thread``, the breadth-first
walk over References / In-Reply-To that pipeline defines.

Mail stored by a release before ``lookups`` has no such array: ``fill_lookups`` gives it one,
a mailbox at a time (``ensure_indexes`` fills every mailbox where it finds the per-header
indexes, before it drops them), and the first read by ``lookups`` of a store checks its mailbox
once (one point read of a document without the array, on the index) and fills it before
answering, so no read misses old mail. The release before this one also kept a ``to:`` key per
To and Cc address there (read now on ``participants``): ``drop_recipient_keys`` removes them
where ``ensure_indexes`` finds that release's layout (``reindex`` rewrites them too); until then
they only take room, as nothing reads them.
"""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from typing import Any

from ..errors import NotFoundError
from ..pure import queries
from ..pure.keys import check_str, doc_id, lookup_key, lookup_keys, strip_message_id
from . import blobstore, capabilities, extracting, writing
from .context import AsyncStoreContext, to_list

__all__ = [
    "add",
    "contains_uidl",
    "drop_recipient_keys",
    "ensure_lookups",
    "fill_lookups",
    "find",
    "get_email",
    "message_ids",
    "record_uidl",
    "uidl_upsert",
    "uidls",
    "walk_thread",
]

_WALK_FIELDS = {"messageId": 1, "references": 1, "inReplyTo": 1, "ts": 1, "messageKey": 1}
#: what ``lookups`` is made of (``keys.lookup_keys``)
_LOOKUP_FIELDS = {"_id": 1, "mailboxId": 1, "subjectKey": 1, "from": 1, "recipients": 1, "inReplyTo": 1, "listId": 1}
#: documents one statement of the upgrade fills
_FILL_BATCH = 500


async def fill_lookups(ctx: AsyncStoreContext, mailbox_id: str) -> int:
    """Give every ``messages`` document of ``mailbox_id`` without ``lookups`` (stored by an
    earlier release) its array, from its own lookup fields: ``_FILL_BATCH`` documents a statement
    (one read on ``aecs_messages_lookups``, where a missing array is a null key, and one unordered
    bulk by ``_id``); how many it filled. A filled document no longer matches, so a run that
    stopped is finished by running it again."""
    selector = {"mailboxId": mailbox_id, "lookups": None}
    filled = 0
    while True:
        rows = await to_list(ctx.messages.find(selector, _LOOKUP_FIELDS).limit(_FILL_BATCH))
        if not rows:
            return filled
        writes = [
            (
                {"_id": r["_id"], "mailboxId": r["mailboxId"]} if ctx.sharded else {"_id": r["_id"]},
                {"$set": {"lookups": lookup_keys(r)}},
            )
            for r in rows
        ]
        await ctx.write_each(ctx.messages, writes)
        filled += len(rows)


#: the ``to:`` keys of ``lookups`` an earlier release wrote: every key from ``to:`` up to ``to;``
_RECIPIENT_KEYS = {"$gte": "to:", "$lt": "to;"}


async def drop_recipient_keys(ctx: AsyncStoreContext, mailbox_id: str) -> int:
    """Remove from ``lookups`` the ``to:`` keys an earlier release wrote for each To and Cc
    address, in the documents of ``mailbox_id`` that hold any (one ``update_many``); how many
    documents it changed."""
    selector = {"mailboxId": mailbox_id, "lookups": {"$elemMatch": _RECIPIENT_KEYS}}
    outcome = await ctx.messages.update_many(selector, {"$pull": {"lookups": _RECIPIENT_KEYS}})
    return int(outcome.modified_count)


async def ensure_lookups(ctx: AsyncStoreContext) -> None:
    """Before a read by ``lookups``: the mailbox's documents all carry the array (checked once
    per store: one point read on ``aecs_messages_lookups``; filled first where one does not)."""
    if ctx.capabilities.lookups_filled:
        return
    if await ctx.messages.find_one({"mailboxId": ctx.mailbox_id, "lookups": None}, {"_id": 1}) is not None:
        await fill_lookups(ctx, ctx.mailbox_id)
    ctx.capabilities.lookups_filled = True


def _uidl_id(ctx: AsyncStoreContext, uidl: str) -> str:
    return doc_id(ctx.mailbox_id, check_str(uidl, "uidl"))


def uidl_upsert(ctx: AsyncStoreContext, uidl: str, message_id: str, mkey: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (filter, update) that records a downloaded UIDL unless it is recorded (first wins)."""
    record = {"mailboxId": ctx.mailbox_id, "uidl": uidl, "messageId": message_id, "messageKey": mkey}
    return ctx.upsert_key(_uidl_id(ctx, uidl)), {"$setOnInsert": record}


async def add(ctx: AsyncStoreContext, uidl: str, raw_bytes: bytes) -> str:
    """Store one downloaded message and record its UIDL (also for a Message-ID already stored)."""
    check_str(uidl, "uidl")
    if not isinstance(raw_bytes, (bytes, bytearray, memoryview)):
        raise TypeError(f"raw_bytes must be bytes, not {type(raw_bytes).__name__}")
    docs = await extracting.read_texts(ctx, [writing.build(ctx, bytes(raw_bytes), None, uidl)])
    (result,) = await writing.write_batch(ctx, docs)
    await record_uidl(ctx, uidl, result.message_id, result.message_key, await capabilities.completion_concern(ctx))
    return result.message_id


async def record_uidl(ctx: AsyncStoreContext, uidl: str, message_id: str, mkey: str, concern: Any = None) -> bool:
    """Record a downloaded UIDL (first record wins), under ``concern`` where one is given (the
    durable write concern); True when this call created it."""
    selector, update = uidl_upsert(ctx, uidl, message_id, mkey)
    outcome = await ctx.completing(ctx.uidls, concern).update_one(selector, update, upsert=True)
    return outcome.upserted_id is not None


async def contains_uidl(ctx: AsyncStoreContext, uidl: str) -> bool:
    return await ctx.uidls.find_one(ctx.by_id(_uidl_id(ctx, uidl)), {"_id": 1}) is not None


async def uidls(ctx: AsyncStoreContext) -> list[str]:
    """Every UIDL recorded for the mailbox, from the ``uidls`` index alone."""
    rows = await to_list(
        ctx.uidls.find({"mailboxId": ctx.mailbox_id}, {"_id": 0, "uidl": 1})
        .sort([("mailboxId", 1), ("uidl", 1)])
        .hint("aecs_uidls_mailbox")
    )
    return [r["uidl"] for r in rows]


async def message_ids(ctx: AsyncStoreContext) -> list[str]:
    rows = await to_list(
        ctx.messages.find({"mailboxId": ctx.mailbox_id}, {"_id": 0, "messageId": 1})
        .sort([("ts", 1), ("messageKey", 1)])
        .hint("aecs_messages_inbox")
    )
    return [r["messageId"] for r in rows]


async def get_email(ctx: AsyncStoreContext, message_id: str) -> EmailMessage | None:
    raw = await blobstore.get_raw(ctx, message_id)
    if raw is None:
        return None
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


async def find(ctx: AsyncStoreContext, header: str, value: str) -> list[str]:
    selector, hint = queries.find_query(ctx.mailbox_id, header, value)
    if "lookups" in selector:
        await ensure_lookups(ctx)
    found = ctx.messages.find(selector, {"_id": 0, "messageId": 1, "ts": 1, "messageKey": 1})
    found = found.sort([("ts", 1), ("messageKey", 1)])
    rows = await to_list(found if hint is None else found.hint(hint))
    return [r["messageId"] for r in rows]


async def walk_thread(ctx: AsyncStoreContext, message_id: str) -> list[str]:
    """The thread walk: the root is the first References entry when stored, else the earliest
    stored ancestor along In-Reply-To; then breadth-first over replies. Gaps end a branch."""
    start = await ctx.messages.find_one(ctx.by_id(ctx.id_for(message_id)), _WALK_FIELDS)
    if start is None:
        raise NotFoundError(f"no message {strip_message_id(message_id)!r} in mailbox {ctx.mailbox_id!r}")
    root = start
    references = start.get("references") or []
    first = await ctx.messages.find_one(ctx.by_id(ctx.id_for(references[0])), _WALK_FIELDS) if references else None
    if first is not None:
        root = first
    else:
        seen = {root["messageKey"]}
        while root.get("inReplyTo"):
            parent = await ctx.messages.find_one(ctx.by_id(ctx.id_for(root["inReplyTo"])), _WALK_FIELDS)
            if parent is None or parent["messageKey"] in seen:
                break
            seen.add(parent["messageKey"])
            root = parent
    found = {root["messageKey"]: root, start["messageKey"]: start}
    frontier = [root["messageId"]]
    await ensure_lookups(ctx)
    while frontier:
        parents = [lookup_key("in-reply-to", mid) for mid in frontier]
        replies = await to_list(
            ctx.messages.find(
                {"mailboxId": ctx.mailbox_id, "lookups": {"$in": parents}},
                {"messageId": 1, "ts": 1, "messageKey": 1},
            )
        )
        frontier = [r["messageId"] for r in replies if r["messageKey"] not in found]
        found.update((r["messageKey"], r) for r in replies)
    ordered = sorted(found.values(), key=lambda m: (m["ts"], m["messageKey"]))
    return [m["messageId"] for m in ordered]
