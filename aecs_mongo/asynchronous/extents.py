"""The mailbox's extent document (``pure/extents.py`` says what it holds and why): widened by
every write of new mail, read with the mailbox's sample, computed once where it is missing."""

from __future__ import annotations

from collections.abc import Sequence

from pymongo.errors import DuplicateKeyError

from ..pure.extents import Extent, extent_id, extent_of, extent_update
from .context import AsyncStoreContext, to_list

__all__ = ["read", "widen"]


async def widen(ctx: AsyncStoreContext, stamps: Sequence[int]) -> None:
    """Before new messages (of these ``ts``) are inserted: widen the extent to hold them and
    count them. Where the mailbox has no extent yet it is established first (``_establish``),
    so a mailbox stored before extents existed does not get one that holds only its new mail."""
    if not stamps:
        return
    update = extent_update(ctx.mailbox_id, min(stamps), max(stamps), len(stamps))
    # a findAndModify, not an update: the batch's update commands stay its thread writes alone
    found = await ctx.extents.find_one_and_update(
        ctx.upsert_key(extent_id(ctx.mailbox_id)), update, projection={"_id": 1}
    )
    if found is None:
        await _establish(ctx, update)


async def read(ctx: AsyncStoreContext) -> Extent | None:
    """The extent (one read by ``_id``; None: no mail), established where it is missing."""
    kept = await ctx.extents.find_one(ctx.by_id(extent_id(ctx.mailbox_id)))
    extent = extent_of(kept)
    if extent is not None:
        return extent
    ends = await _ends(ctx)
    if ends is None:
        return None
    await _establish(ctx, extent_update(ctx.mailbox_id, ends[0], ends[1], 0), ends)
    return extent_of(await ctx.extents.find_one(ctx.by_id(extent_id(ctx.mailbox_id))))


async def _ends(ctx: AsyncStoreContext) -> tuple[int, int] | None:
    """The oldest and newest ``ts`` of the mailbox's messages (two sorted reads; None: none)."""
    ends = []
    for way in (1, -1):
        found = ctx.messages.find({"mailboxId": ctx.mailbox_id}, {"_id": 0, "ts": 1})
        rows = await to_list(found.sort([("ts", way), ("messageKey", way)]).limit(1))
        if not rows or not isinstance(rows[0].get("ts"), int):
            return None
        ends.append(int(rows[0]["ts"]))
    return ends[0], ends[1]


async def _establish(ctx: AsyncStoreContext, update: dict[str, object], ends: tuple[int, int] | None = None) -> None:
    """Create the extent: ``update`` widened by the mailbox's stored mail (``ends``, read here
    where not given); its count of stored messages is known only where the mailbox held none."""
    if ends is None:
        ends = await _ends(ctx)
    counted = ends is None
    establish = dict(update)
    if ends is not None:
        establish["$min"] = {"oldestTs": min(ends[0], update["$min"]["oldestTs"])}  # type: ignore[index]
        establish["$max"] = {"newestTs": max(ends[1], update["$max"]["newestTs"])}  # type: ignore[index]
    establish["$setOnInsert"] = {**update["$setOnInsert"], "counted": counted}  # type: ignore[dict-item]
    try:
        await ctx.extents.update_one(ctx.upsert_key(extent_id(ctx.mailbox_id)), establish, upsert=True)
    except DuplicateKeyError:  # another writer created it first: this one widens it
        await ctx.extents.update_one(ctx.upsert_key(extent_id(ctx.mailbox_id)), update)
