"""Workers over newly stored mail: the feed behind ``store.watch`` and ``embed_new``.

The logic is in the pure ``pure/feed.py``; this is the order of reads and writes.

Delivery is at least once, in commit order: a consumer's position is checkpointed in
``feed_checkpoints`` only after the caller has handled what it was given, so a consumer that is
killed gets again what it had not acknowledged (and never less). With ``auto_ack=True`` (the
default) asking for the next item acknowledges the previous one: the checkpoint follows the
loop body. With ``auto_ack=False`` the caller calls ``ack()`` after handling a batch.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from pymongo.errors import OperationFailure

from ..errors import ServerFeatureError
from ..pure import feed
from ..pure.feed import FeedItem, Vectors
from ..pure.settings import Capabilities
from .statements import resolve


class AsyncMessageStoreLike(Protocol):
    """What the feed needs of a store: its database, its mailbox, what its server can do, and
    the batched vector write. (A protocol, not ``AsyncMessageStore``: the store imports this.)"""

    db: Any
    mailbox_id: str

    @property
    def capabilities(self) -> Capabilities: ...

    async def set_embeddings(self, vectors_by_id: Mapping[str, Sequence[float]]) -> int: ...


__all__ = ["AsyncFeed", "embed_new"]

log = logging.getLogger("aecs_mongo")

_BACKFILL_PAGE = 500
_MAX_BATCH = 1000
_NOT_A_REPLICA_SET = 40573  # "The $changeStream stage is only supported on replica sets"
#: The server no longer has the consumer's resume point: ChangeStreamHistoryLost, and the fatal
#: error older servers give for a token that fell off the oplog.
_HISTORY_LOST = (286, 280)
_HISTORY_WORDS = ("history", "oplog", "resume")
_PASSED = object()  # an update event the feed does not hand out
_NEEDS = "a replica set or a sharded cluster (MongoDB change streams; a single-node replica set will do)"


class AsyncFeed:
    """Every message stored in a mailbox, for one named consumer: ``store.watch(consumer)``.

    Iterate it (``async for item in feed``) for ``FeedItem`` records; ``next_batch(n)`` gives up
    to ``n`` at once and ``[]`` when nothing new came within ``max_await_ms``. A consumer
    without a checkpoint starts at ``since``: ``"now"`` (mail stored from here on) or
    ``"beginning"`` (every stored message, oldest first by the inbox index, then the new ones;
    a message stored during that read may come twice, none is missed). A consumer with a
    checkpoint continues after it, whatever ``since`` says; consumers are independent of each
    other. Use it in ``async with``: leaving the block normally acknowledges (with
    ``auto_ack``) the last item, leaving it by an exception does not (without ``with``, only
    asking for the next item does). The records are in commit order; the backfill is in date
    order (``ts``, then message key). Needs change streams: ``ServerFeatureError`` on first use
    where there are none (a standalone server). ``tags=True``: tag and folder changes
    come too, as records of kind ``"tags"`` with the message's tags as they are when read (a
    change to a message deleted since is passed over).
    """

    def __init__(
        self,
        store: AsyncMessageStoreLike,
        consumer: str,
        *,
        since: str = "now",
        auto_ack: bool = True,
        max_await_ms: int = 1000,
        tags: bool = False,
    ) -> None:
        self.store = store
        self.tags = bool(tags)
        self.consumer = feed.check_consumer(consumer)
        self.since = feed.check_since(since)
        self.auto_ack = bool(auto_ack)
        if isinstance(max_await_ms, bool) or not isinstance(max_await_ms, int) or max_await_ms < 1:
            raise ValueError("max_await_ms must be a positive int")
        self.max_await_ms = max_await_ms
        self._checkpoints = store.db[feed.CHECKPOINTS_COLLECTION]
        self._messages = store.db["messages"]
        self._id = feed.checkpoint_id(store.mailbox_id, self.consumer)
        self._position: dict[str, Any] | None = None  # where reading continues (None: not started)
        self._handed_out: dict[str, Any] | None = None  # the position after the last item handed out
        self._saved: dict[str, Any] | None = None  # the position in feed_checkpoints
        self._page: deque[tuple[FeedItem, dict[str, Any]]] = deque()
        self._stream: Any = None
        self._closed = False

    # --- the consumer's side ------------------------------------------------------------------

    def __aiter__(self) -> AsyncFeed:
        return self

    async def __anext__(self) -> FeedItem:
        if self._closed:
            raise StopAsyncIteration
        if self.auto_ack:
            await self.ack()
        while True:
            item = await self._advance()
            if item is not None:
                return item
            if self.auto_ack:
                await self.ack()  # idle: keep the checkpoint up with the server's position

    async def next_batch(self, max_items: int) -> list[FeedItem]:
        """Up to ``max_items`` records; fewer (or none) when the stream ran dry for ``max_await_ms``."""
        if isinstance(max_items, bool) or not isinstance(max_items, int) or not 1 <= max_items <= _MAX_BATCH:
            raise ValueError(f"max_items must be an int between 1 and {_MAX_BATCH}")
        if self._closed:
            raise ValueError("the feed is closed")
        if self.auto_ack:
            await self.ack()
        items: list[FeedItem] = []
        while len(items) < max_items:
            item = await self._advance()
            if item is None:
                break
            items.append(item)
        return items

    async def ack(self) -> None:
        """Checkpoint: every item handed out so far is handled (a restart continues after it)."""
        if self._handed_out is None or self._handed_out == self._saved:
            return
        await self._save(self._handed_out)

    async def close(self) -> None:
        """Close the change stream (the checkpoint stays: the consumer can continue later)."""
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.__aexit__(None, None, None)

    async def __aenter__(self) -> AsyncFeed:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None and self.auto_ack and not self._closed:
                await self.ack()
        finally:
            await self.close()

    # --- reading --------------------------------------------------------------------------------

    async def _advance(self) -> FeedItem | None:
        """The next record, or None when the stream had nothing new within ``max_await_ms``."""
        while True:
            item = await self._advance_once()
            if item is not _PASSED:
                return item if isinstance(item, FeedItem) else None

    async def _advance_once(self) -> FeedItem | object | None:
        """``_advance``'s one step: ``_PASSED`` for an update it passed over."""
        if self._position is None:
            await self._start()
        position = self._position
        assert position is not None
        if "backfill" in position:
            if not self._page:
                await self._read_backfill_page(position["backfill"])
            if self._page:
                item, self._position = self._page.popleft()
                self._handed_out = self._position
                return item
            # every message stored before the stream's token was read: on to the stream
            position = self._position = self._handed_out = feed.stream_position(position["backfill"]["stream"])
        if self._stream is None:
            try:
                self._stream = await self._open_stream(position["stream"])
            except OperationFailure as exc:
                if not _history_lost(exc):
                    raise
                await self._fell_behind(exc)
                return await self._advance()
        try:
            event = await self._stream.try_next()
        except OperationFailure as exc:
            if not _history_lost(exc):
                raise
            await self._fell_behind(exc)
            return await self._advance()
        if event is None:
            token = self._stream.resume_token
            if token is not None and self._handed_out == self._saved:
                # nothing outstanding: a quiet consumer's position moves on with the server's, so
                # it does not fall out of the oplog while other mailboxes are busy
                self._position = self._handed_out = feed.stream_position(token)
            return None
        self._position = self._handed_out = feed.stream_position(event["_id"])
        if event.get("operationType") == "update":
            if not feed.is_label_change(event) or not event.get("fullDocument"):
                return _PASSED  # another update, or a message deleted since
            return feed.feed_item(event["fullDocument"], "tags")
        return feed.feed_item(event["fullDocument"])

    async def _start(self) -> None:
        """Continue from the checkpoint, or take the stream's position now and checkpoint it."""
        saved = await self._checkpoints.find_one({"_id": self._id, "mailboxId": self.store.mailbox_id})
        if saved is not None:
            self._position = self._saved = self._handed_out = saved["position"]
            return
        stream = await self._open_stream(None)
        token = stream.resume_token
        if token is None:
            await stream.__aexit__(None, None, None)
            raise ServerFeatureError(
                "store.watch needs a server that reports the change stream's position before the first"
                " change (postBatchResumeToken, MongoDB 4.0.7 or later)"
            )
        if self.since == "now":
            self._stream = stream
            position = feed.stream_position(token)
        else:
            # the stream's position is taken before the first backfill read: whatever is
            # committed after it is in the stream, whatever before it is in the backfill
            await stream.__aexit__(None, None, None)
            position = feed.backfill_position(token, None)
        # checkpointed at once: a consumer stopped before its first item still misses nothing
        await self._save(position)
        self._position = self._handed_out = position

    async def _fell_behind(self, exc: OperationFailure) -> None:
        """The consumer's position fell out of the oplog (the embedded server keeps a bounded
        one): read the mailbox again by the backfill, from its start, then follow the stream
        from a token taken now. Nothing is skipped; what the consumer had may come again (the
        feed is at least once). The stream is commit order and the backfill date order, so no
        date would be a safe place to start from: a message stored late may be dated early."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.__aexit__(None, None, None)
        log.warning(
            "feed consumer %r of mailbox %r fell behind the server's oplog (%s): reading the mailbox again"
            " from its start; items it had seen may come again",
            self.consumer,
            self.store.mailbox_id,
            (exc.details or {}).get("codeName") or exc.code,
        )
        stream = await self._open_stream(None)
        token = stream.resume_token
        await stream.__aexit__(None, None, None)
        if token is None:
            raise ServerFeatureError("the server reports no change stream position (postBatchResumeToken)")
        position = feed.backfill_position(token, None)
        self._page.clear()
        self._position = self._handed_out = position
        await self._save(position)

    async def _open_stream(self, resume_after: dict[str, Any] | None) -> Any:
        try:
            stream = await resolve(
                self._messages.watch(
                    feed.stream_pipeline(self.store.mailbox_id, self.tags),
                    resume_after=resume_after,
                    max_await_time_ms=self.max_await_ms,
                    full_document="updateLookup" if self.tags else None,
                )
            )
            return await stream.__aenter__()  # Motor opens the cursor here
        except OperationFailure as exc:
            message = str((exc.details or {}).get("errmsg") or exc)
            if exc.code == _NOT_A_REPLICA_SET or "replica set" in message:
                raise ServerFeatureError(
                    f"store.watch needs change streams: {_NEEDS}; this server refused them: {message}"
                ) from exc
            raise

    async def _read_backfill_page(self, state: dict[str, Any]) -> None:
        found = self._messages.find(
            feed.backfill_filter(self.store.mailbox_id, state["after"]), feed.BACKFILL_PROJECTION
        )
        found = found.sort(feed.BACKFILL_SORT).hint(feed.BACKFILL_HINT).limit(_BACKFILL_PAGE)
        async for row in found:
            after = (int(row["ts"]), str(row["messageKey"]))
            self._page.append((feed.feed_item(row), feed.backfill_position(state["stream"], after)))

    async def _save(self, position: dict[str, Any]) -> None:
        document = feed.checkpoint_document(self.store.mailbox_id, self.consumer, position)
        await self._checkpoints.replace_one(
            {"_id": self._id, "mailboxId": self.store.mailbox_id}, document, upsert=True
        )
        self._saved = position


def _history_lost(exc: OperationFailure) -> bool:
    """The server says the resume point is gone from its oplog."""
    if exc.code in _HISTORY_LOST:
        return True
    message = str((exc.details or {}).get("errmsg") or exc).lower()
    return "resume" in message and any(word in message for word in _HISTORY_WORDS[:2])


async def embed_new(
    store: AsyncMessageStoreLike,
    consumer: str,
    fn: Callable[[list[str]], Vectors | Awaitable[Vectors]],
    batch_size: int = 64,
    *,
    since: str = "beginning",
    follow: bool = False,
    max_await_ms: int = 1000,
) -> int:
    """Embed the messages ``consumer`` has not embedded yet; returns how many were embedded.

    ``fn(texts)`` (async: it may be a coroutine function) gets up to ``batch_size`` ``forAI``
    texts and returns one vector per text, stored as ``set_embedding`` stores them
    (``set_embeddings``: one read and one write per batch). The consumer's checkpoint moves
    only after a batch is stored, so a worker killed mid-way embeds at most that batch again.
    Messages without text are skipped, as are messages deleted before their vector was
    stored. ``follow=False`` returns once the feed is caught up (nothing new within
    ``max_await_ms``); ``follow=True`` keeps going until cancelled or interrupted. A new
    consumer starts at ``since`` (every stored message by default).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= _MAX_BATCH:
        raise ValueError(f"batch_size must be an int between 1 and {_MAX_BATCH}")
    embedded = 0
    async with AsyncFeed(store, consumer, since=since, auto_ack=False, max_await_ms=max_await_ms) as new_mail:
        while True:
            batch = await new_mail.next_batch(batch_size)
            if not batch:
                if follow:
                    continue
                return embedded
            embedded += await _embed_batch(store, batch, fn)
            await new_mail.ack()


async def _embed_batch(
    store: AsyncMessageStoreLike, batch: list[FeedItem], fn: Callable[[list[str]], Vectors | Awaitable[Vectors]]
) -> int:
    todo = {item.message_id: item for item in batch if item.for_ai}  # a repeat in the batch once
    if not todo:
        return 0
    texts = [item.for_ai or "" for item in todo.values()]
    found = fn(texts)
    if inspect.isawaitable(found):  # the async API takes a plain or a coroutine embedding function
        found = await found
    vectors = feed.check_vectors(found, len(texts))
    stored = await store.set_embeddings(dict(zip(todo, vectors, strict=True)))
    if stored < len(todo):
        log.debug("%d messages were deleted before their vectors were stored", len(todo) - stored)
    return stored
