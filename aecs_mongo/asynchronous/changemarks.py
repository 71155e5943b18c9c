"""The change mark's statements (``pure/change_marks.py`` says what the mark is and why).

Only where there are no change streams (a standalone server): elsewhere the local
search index follows the change stream, and a write sends nothing here.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import PyMongoError

from ..pure.change_marks import begin_update, end_update, mark_id, only_change, stale_tokens
from . import capabilities
from .context import AsyncStoreContext, log

__all__ = ["AsyncChange", "forget_stale", "read"]


class AsyncChange:
    """``async with AsyncChange(ctx, followed=...)`` around a write that can change what the
    local index holds: the mark's ``begin`` before it, its ``end`` after it (also when it fails
    midway: what it wrote is then found by the next read's check; where the ``end`` itself
    fails, the token stays until it is stale). ``followed``: the write also brings this store's
    own index up to date (``indexing.after_*``), so that where it was the only change the index
    stays settled. ``labels``: the write may change tags or folders of stored messages;
    ``removals``: it may remove messages.
    ``create=False``: a mailbox without a mark is left without one (the erase, which removes it:
    a read finds none, and checks)."""

    def __init__(
        self,
        ctx: AsyncStoreContext,
        *,
        followed: bool,
        labels: bool = False,
        removals: bool = False,
        create: bool = True,
    ) -> None:
        self.ctx = ctx
        self.followed = followed
        self.labels = labels
        self.removals = removals
        self.create = create
        self.token: ObjectId | None = None
        self.begun: Mapping[str, Any] | None = None

    async def __aenter__(self) -> AsyncChange:
        ctx = self.ctx
        if await capabilities.change_streams(ctx):
            return self
        token = ObjectId()
        self.begun = await ctx.marks.find_one_and_update(
            {"_id": mark_id(ctx.mailbox_id)},
            begin_update(ctx.mailbox_id, token, self.labels, self.removals),
            upsert=self.create,
            return_document=ReturnDocument.AFTER,
        )
        self.token = token
        return self

    async def __aexit__(self, kind: object, error: object, _trace: object) -> None:
        if self.token is None:
            return
        ctx, token = self.ctx, self.token
        self.token = None
        try:
            ended = await ctx.marks.find_one_and_update(
                {"_id": mark_id(ctx.mailbox_id)}, end_update(token), return_document=ReturnDocument.AFTER
            )
        except PyMongoError:
            if kind is None:
                raise
            return  # the write's own error goes on; the token stays until it is stale
        index = ctx.search_index
        if kind is not None or not self.followed or index is None:
            return
        keys = only_change(self.begun, ended, token, self.labels, self.removals)
        if keys is not None:
            index.mailbox(ctx.mailbox_id).settle(*keys)


async def read(ctx: AsyncStoreContext) -> Mapping[str, Any] | None:
    """The mailbox's mark (None: no write since the erase, or since before marks existed)."""
    found: Mapping[str, Any] | None = await ctx.marks.find_one({"_id": mark_id(ctx.mailbox_id)})
    return found


async def forget_stale(ctx: AsyncStoreContext, mark: Mapping[str, Any] | None) -> None:
    """Take the tokens of writers that died midway out of the mark (after the check that found
    their writes): the next read settles again. A reader without the right to write leaves them
    (each read then checks, as it did before marks existed)."""
    stale = stale_tokens(mark, _dt.datetime.now(_dt.UTC))
    if not stale:
        return
    try:
        await ctx.marks.update_one(
            {"_id": mark_id(ctx.mailbox_id)}, {"$inc": {"n": 1}, "$pull": {"pending": {"$in": stale}}}
        )
        log.debug("mailbox %r: %d stale change marks taken out", ctx.mailbox_id, len(stale))
    except PyMongoError as exc:
        log.debug("mailbox %r: stale change marks left (%s)", ctx.mailbox_id, exc)
