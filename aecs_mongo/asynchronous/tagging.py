"""Tags and folders: ``store.tag``, ``store.set_folders``, ``store.tags``.

The rules are in the pure ``pure/tags.py``; this is the order of reads and writes. A change
names its messages by a target: a list of Message-IDs, or a query in the search language
(``id:<Message-ID>`` one message, ``thread:<id>`` one thread, ``tag:todo``, any query). The
messages are taken in batches of ``TAG_BATCH``, newest first, each read once (its ``_id``, thread
and tags) and written by one ``update_many`` by ``_id`` over the messages the change would
modify (``pure.tags.needs_change``): per message it is one atomic single-document update (no lost
update when two writers tag the same message: each computes the new list from the stored one on
the server), never an upsert (a message deleted or erased meanwhile stays gone), and a change
interrupted half-way is finished by running it again (what is done already is matched, not
changed). A query of tags, flags, folders, ids, threads and dates is read from ``messages`` by
keyset (``ts``, ``messageKey``) on its index (``aecs_messages_tags`` for ``tag:``), so removing
the tag the query names does not move the next batch; the last batch's statement is the rest
of the query itself (one ``update_many`` on the index where the change fits one batch). A query
with words pages through the store's search engine the same way. Each batch is durable before
the next (one journaled wait per batch: its last statement's ``j: true``); the local search
index follows each batch (``indexing.after_labels``); the change stream carries each change to
feed consumers (``store.watch(..., tags=True)``). A thread summary is written only where its
tags change.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from ..pure import search_query
from ..pure.keys import check_str, doc_id, message_key, thread_key
from ..pure.search_compile import message_filter
from ..pure.tags import (
    THREAD_TAGS_PROJECTION,
    changes_row,
    check_folders,
    check_tags,
    needs_change,
    tag_update,
    thread_pull_groups,
    thread_tags_added,
    thread_tags_filter,
    thread_tags_to_pull,
)
from ..results import TagReport
from . import capabilities, indexing, search
from .changemarks import AsyncChange
from .context import AsyncStoreContext, log, resolve, to_list

__all__ = ["TAG_BATCH", "change", "tag_counts"]

#: messages one statement changes at most (the change as a whole is unbounded)
TAG_BATCH = 1000
#: rounds of pulling removed tags from thread summaries that concurrent writers keep changing
_PULL_ATTEMPTS = 8
_THREAD_FIELDS = {"_id": 1, "threadKey": 1, "tags": 1, "tagsRev": 1}
#: what a filter's page reads of each message: its sort key, and its thread and tags (the
#: threads the batch's change touches, without a read of its own)
_PAGE_FIELDS = {"_id": 0, "ts": 1, "messageKey": 1, "threadKey": 1, "tags": 1}


def _thread_key_of(thread_id: str) -> str:
    return thread_key(thread_id)


class _Batch:
    """Messages of one statement: their keys, and where the target is a filter of ``messages``
    (a query of labels, threads and dates), the filter of the batch's index range."""

    def __init__(
        self, keys: list[str], selectors: list[dict[str, Any]] | None = None, rows: list[dict[str, Any]] | None = None
    ) -> None:
        self.keys = keys
        self.selectors = selectors
        #: the rows of a filter's page (``threadKey`` and ``tags`` read with the keys)
        self.rows = rows


async def change(
    ctx: AsyncStoreContext,
    field: str,
    target: str | Iterable[str],
    add: Iterable[str],
    remove: Iterable[str],
    *,
    dry_run: bool = False,
) -> TagReport:
    """Add and remove tags (``field="tags"``) or folders (``"folders"``) on the target's
    messages; ``dry_run``: count, write nothing."""
    check = check_tags if field == "tags" else check_folders
    added = check(add, f"{field} to add")
    removed = check(remove, f"{field} to remove")
    both = set(added) & set(removed)
    if both:
        raise ValueError(f"{sorted(both)[0]!r} is both added and removed")
    matched = changed = 0
    await capabilities.dialect(ctx)
    concern = None if dry_run else await capabilities.completion_concern(ctx)
    async for batch in _target_batches(ctx, target):
        ids = [doc_id(ctx.mailbox_id, k) for k in batch.keys]
        rows = batch.rows
        if rows is None:  # a batch of ids: one read of what the change needs of each
            rows = await _rows_by_ids(ctx, field, ids)
            ids = [str(r["_id"]) for r in rows if changes_row(r, field, added, removed)]
        # a query names stored messages; a listed Message-ID may not be stored (not matched)
        found = len(batch.keys) if isinstance(target, str) else len(rows)
        if dry_run or not (added or removed):
            matched += found
            if dry_run:
                changed += sum(changes_row(r, field, added, removed) for r in rows)
            continue
        threads = sorted({str(r["threadKey"]) for r in rows}) if field == "tags" else []
        async with AsyncChange(ctx, followed=True, labels=True):  # without a change stream (changemarks.py)
            modified = await _write(ctx, field, batch, ids, added, removed, concern)
            if modified:
                await indexing.after_labels(ctx, batch.keys, field, added, removed)
        if field == "tags" and batch.rows is not None:
            expected = sum(changes_row(r, field, added, removed) for r in batch.rows)
            if modified > expected:  # the last statement also changed a message stored meanwhile
                threads = sorted({*threads, *await _selector_threads(ctx, batch.selectors or [])})
        # a batch's last statement takes the rest of the query: a message that came meanwhile
        # and was changed is matched too
        matched += max(found, modified)
        changed += modified
        # also where nothing changed: a run that stopped between a batch and its threads
        # is finished by running it again
        await _thread_tags_after(ctx, threads, added, removed, concern)
    return TagReport(matched=matched, changed=changed, dry_run=dry_run)


async def _write(
    ctx: AsyncStoreContext,
    field: str,
    batch: _Batch,
    ids: list[str],
    added: tuple[str, ...],
    removed: tuple[str, ...],
    concern: Any,
) -> int:
    """One batch's statements (durable: ``concern``); how many messages they modified. A batch
    of a filter is ``update_many`` over exactly the index range it read, the last batch over the
    rest of the query (by the range, not by ``_id``: a thousand ``_id``s in one filter cost some
    servers seconds); a batch of ids is one ``update_many`` by ``_id`` over ``ids``, the
    messages its read found the change would modify. ``modified`` is what changed."""
    messages = ctx.completing(ctx.messages, concern)
    update = tag_update(field, added, removed)
    if batch.selectors is not None:
        # no "needs change" filter here: a second condition on the field would cost some
        # planners the index (a collection scan then); the server counts only real changes
        selectors = batch.selectors
    else:
        # the batch's messages the change modifies (as read), one ``update_many`` by ``_id``
        # (split where the server wants its ``$in`` bounded); the filter also holds "needs the
        # change" where that is one field's condition (a top-level ``$or`` costs some planners
        # the ``_id`` index), so a message changed meanwhile by another writer is left as it is
        wants = needs_change(field, added, removed)
        extra = {} if "$or" in wants else wants
        selectors = [{**part, **extra} for part in ctx.dialect.split_in(ctx.by_ids(ids))] if ids else []
    # one durable wait per batch: the last statement carries the concern (the journal is
    # sequential), or where it changed nothing, a barrier write does
    modified = last = 0
    for n, selector in enumerate(selectors):
        writer = messages if n == len(selectors) - 1 else ctx.messages
        last = int((await writer.update_many(selector, update)).modified_count)
        modified += last
    if modified and not last:
        await ctx.journal_barrier(concern)
    return modified


async def _rows_by_ids(ctx: AsyncStoreContext, field: str, ids: list[str]) -> list[dict[str, Any]]:
    """The stored messages of ``ids``: each one's ``_id``, thread and ``field`` (one find by
    ``_id``, split where the server wants its ``$in`` bounded)."""
    projection = {"_id": 1, "threadKey": 1, field: 1}
    rows: list[dict[str, Any]] = []
    for selector in ctx.dialect.split_in(ctx.by_ids(ids)):
        rows += await to_list(ctx.messages.find(selector, projection))
    return rows


async def _selector_threads(ctx: AsyncStoreContext, selectors: list[dict[str, Any]]) -> list[str]:
    """The threads of the messages these filters match."""
    keys: set[str] = set()
    for selector in selectors:
        keys.update([str(r["threadKey"]) async for r in ctx.messages.find(selector, {"_id": 0, "threadKey": 1})])
    return sorted(keys)


async def _thread_tags_after(
    ctx: AsyncStoreContext, keys: list[str], added: tuple[str, ...], removed: tuple[str, ...], concern: Any
) -> None:
    """The summaries of a batch's threads follow its tag change (``pure/tags.py``): what it added,
    in one update; what it removed, pulled from each thread where no message still carries it
    (one read of the summaries that hold it, one of those threads' messages on the thread
    index, one ``update_many`` of ``$pull`` per token read, filtered on it; again where a
    concurrent writer changed the token meanwhile). Durable as the batch is: one barrier write
    under ``concern`` after them (one journal wait, not one per statement)."""
    if keys and await _follow_threads(ctx, [doc_id(ctx.mailbox_id, k) for k in keys], added, removed):
        await ctx.journal_barrier(concern)


async def _follow_threads(
    ctx: AsyncStoreContext, ids: list[str], added: tuple[str, ...], removed: tuple[str, ...]
) -> bool:
    """``_thread_tags_after``'s writes; whether it wrote."""
    wrote = False
    if added:  # only the summaries that lack one of them (or have no union yet: the token only)
        for selector in ctx.dialect.split_in(ctx.by_ids(ids)):
            lacking = {**selector, "tags": {"$not": {"$all": list(added)}}}
            wrote |= bool(
                (await ctx.threads.update_many(lacking, thread_tags_added(added, secrets.token_hex(8)))).modified_count
            )
    for _attempt in range(_PULL_ATTEMPTS):
        if not removed or not ids:
            return wrote
        holding = [
            t
            for selector in ctx.dialect.split_in(ctx.by_ids(ids))
            async for t in ctx.threads.find({**selector, "tags": {"$in": list(removed)}}, _THREAD_FIELDS)
        ]
        if not holding:
            return wrote
        still: list[dict[str, Any]] = []
        for selector in ctx.dialect.split_in(thread_tags_filter(ctx.mailbox_id, [t["threadKey"] for t in holding])):
            still += await to_list(ctx.messages.find(selector, THREAD_TAGS_PROJECTION))
        pulls = thread_tags_to_pull(holding, still, removed)
        if not pulls:
            return wrote
        wrote = True
        matched = 0
        for selector, update in thread_pull_groups(pulls):
            for part in ctx.dialect.split_in(selector):
                matched += int((await ctx.threads.update_many(part, update)).matched_count)
        await _restore_carried(ctx, pulls)
        if matched == len(pulls):
            return wrote
        ids = [selector["_id"] for selector, _ in pulls]  # a token changed: those once more
    log.debug("thread tags: %d summaries kept changing; reindex() recomputes them", len(ids))
    return wrote


async def _restore_carried(ctx: AsyncStoreContext, pulls: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """After a pull: a tag a message of the thread carries again is put back on its summary.
    A writer that tags a message adds the tag to the summary only where the summary lacks it,
    so one that ran between this change's read of the messages and its pull (the summary still
    held the tag then) left the summary alone: this second read of those threads' messages,
    after the pull, sees its message (and a writer after it sees the pulled summary)."""
    pulled = {str(selector["_id"]): set(update["$pull"]["tags"]["$in"]) for selector, update in pulls}
    keys = [i.rpartition(":")[2] for i in pulled]
    carried: dict[str, set[str]] = {}
    for selector in ctx.dialect.split_in(thread_tags_filter(ctx.mailbox_id, keys)):
        for row in await to_list(ctx.messages.find(selector, THREAD_TAGS_PROJECTION)):
            gone = pulled[doc_id(ctx.mailbox_id, str(row["threadKey"]))]
            back = gone & set(row.get("tags") or ())
            if back:
                carried.setdefault(doc_id(ctx.mailbox_id, str(row["threadKey"])), set()).update(back)
    for _id, tags in carried.items():
        await ctx.threads.update_one(ctx.by_id(_id), thread_tags_added(sorted(tags), secrets.token_hex(8)))


def _window(base: dict[str, Any], after: tuple[int, str] | None, last: tuple[int, str]) -> list[dict[str, Any]]:
    """The filters of exactly the rows of one keyset page (newest first, after ``after``, down to
    ``last``), each an equality or a range of the index's own keys (no ``$or``, which some
    planners answer with a collection scan): the seconds strictly between, and each edge second
    by message key."""
    (low, low_key), (high, high_key) = last, after if after is not None else (None, None)
    if high is not None and high == low:
        return [merged(base, {"ts": low, "messageKey": {"$gte": low_key, "$lt": high_key}})]
    middle: dict[str, Any] = {"$gt": low} if high is None else {"$gt": low, "$lt": high}
    out = [merged(base, {"ts": middle}), merged(base, {"ts": low, "messageKey": {"$gte": low_key}})]
    if high is not None:
        out.append(merged(base, {"ts": high, "messageKey": {"$lt": high_key}}))
    return out


def merged(*clauses: dict[str, Any]) -> dict[str, Any]:
    """The conjunction of filters: one document where their fields differ (what a planner reads
    best), else ``$and``."""
    out: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    for clause in clauses:
        if any(k in out for k in clause):
            rest.append(clause)
        else:
            out.update(clause)
    return {"$and": [out, *rest]} if rest else out


async def _target_batches(ctx: AsyncStoreContext, target: str | Iterable[str]) -> Any:
    """The target's messages, ``TAG_BATCH`` at a time (a listed Message-ID may not be stored:
    the update then matches nothing for it)."""
    if not isinstance(target, str):
        if isinstance(target, (bytes, Mapping)) or not isinstance(target, Iterable):
            raise TypeError(f"target must be a query string or a list of Message-IDs, not {type(target).__name__}")
        keys = list(dict.fromkeys(message_key(check_str(m, "message id")) for m in target))
        for start in range(0, len(keys), TAG_BATCH):
            yield _Batch(keys[start : start + TAG_BATCH])
        return
    tree = search_query.parse(target)
    if tree is None:
        raise ValueError("the target is an empty query: name the messages (a query, or a list of Message-IDs)")
    now = _dt.datetime.now(_dt.UTC)
    flt = message_filter(tree, now, _thread_key_of, top=False) if not search_query.has_text(tree) else None
    if flt is not None:
        base = merged({"mailboxId": ctx.mailbox_id}, flt)
        after: tuple[int, str] | None = None
        while True:
            # the next page after ``after``: the rest of its second, then older seconds (two
            # finds on the index's keys, no $or)
            pages = (
                [base]
                if after is None
                else [
                    merged(base, {"ts": after[0], "messageKey": {"$lt": after[1]}}),
                    merged(base, {"ts": {"$lt": after[0]}}),
                ]
            )
            rows: list[dict[str, Any]] = []
            for page in pages:
                found = ctx.messages.find(page, _PAGE_FIELDS)
                found = found.sort([("ts", -1), ("messageKey", -1)]).limit(TAG_BATCH - len(rows))
                rows += await to_list(found)
                if len(rows) >= TAG_BATCH:
                    break
            if not rows:
                return
            keys = [str(r["messageKey"]) for r in rows]
            if len(rows) < TAG_BATCH:
                # the last page: its statements are the pages' own filters (no lower edge), one
                # statement where the change fits one batch
                yield _Batch(keys, pages, rows)
                return
            last = (int(rows[-1]["ts"]), str(rows[-1]["messageKey"]))
            yield _Batch(keys, _window(base, after, last), rows)
            after = last
    cursor: str | None = None
    while True:
        hits = await search.search(ctx, target, TAG_BATCH, None, "date", cursor)
        keys = [message_key(h["messageId"]) for h in hits]
        if keys:
            yield _Batch(keys)
        cursor = hits.next_cursor
        if cursor is None:
            return


async def tag_counts(ctx: AsyncStoreContext) -> dict[str, int]:
    """``store.tags()``: each tag of the mailbox with how many messages carry it, by name (one
    aggregation over the tagged messages, on ``aecs_messages_tags``)."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"mailboxId": ctx.mailbox_id, "tags": {"$type": "string"}}},
        {"$project": {"_id": 0, "tags": 1}},
        {"$unwind": "$tags"},
        {"$group": {"_id": "$tags", "n": {"$sum": 1}}},
    ]
    rows = await to_list(await resolve(ctx.messages.aggregate(pipeline)))
    return {str(r["_id"]): int(r["n"]) for r in sorted(rows, key=lambda r: str(r["_id"]))}
