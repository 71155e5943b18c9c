"""The reads of the LangChain retriever and loader (``agents/langchain.py``) over the async store.

``retrieve`` finds the messages of a query (the query language, or the nearest vectors to its
embedding) and returns each one's text and metadata, best first; ``threads`` walks the
conversations, most recent activity first, with each one's newest messages. The LangChain glue
makes ``Document``s of them; the sync twin is generated from this module.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...pure.attachment_text import attachments_for_ai
from ..shaping import sender
from ..tools import checked_vector

if TYPE_CHECKING:
    from ...asynchronous.store import AsyncMessageStore

__all__ = ["retrieve", "threads"]


async def retrieve(
    store: AsyncMessageStore,
    query: str,
    *,
    k: int,
    semantic: bool,
    embed: Callable[[str], Any] | None,
    page_content: str,
) -> list[tuple[str, dict[str, Any]]]:
    """(text, metadata) of the messages ``query`` finds, at most ``k``, best first; ``text`` is
    the message's ``page_content`` text (``forAI`` or ``clean``)."""
    if semantic and embed is not None:
        vector = embed(query)
        if inspect.isawaitable(vector):
            vector = await vector
        hits: Sequence[Mapping[str, Any]] = await store.semantic_search(checked_vector(vector), limit=k)
    else:
        hits = await store.search(query, limit=k)
    summaries = await store.message_summaries([h["messageId"] for h in hits])
    tags = {s["messageId"]: list(s.get("tags") or ()) for s in summaries}
    found = []
    for hit in hits:
        message = await store.get_message(hit["messageId"])
        if message is None:  # deleted since the search read it
            continue
        meta: Mapping[str, Any] = message.get("metadata") or {}
        content: Mapping[str, Any] = message.get("content") or {}
        text = content.get(page_content)
        metadata = {
            "messageId": message["messageId"],
            "threadId": message.get("threadId"),
            "from": sender(meta.get("from")),
            "date": meta.get("date"),
            "subject": meta.get("subject"),
            "score": hit.get("score"),
            "tags": tags.get(message["messageId"], []),
        }
        attached = attachments_for_ai(message.get("attachments") or ())
        if attached is not None:  # the text read from its attachments
            metadata["attachmentsForAI"] = attached
        found.append((text or content.get("text") or "", metadata))
    return found


async def threads(
    store: AsyncMessageStore, *, max_messages: int, page_size: int
) -> AsyncIterator[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]:
    """Every conversation, most recent activity first, with its newest ``max_messages`` entries
    (``thread_context``), read ``page_size`` conversations at a time."""
    cursor = None
    while True:
        page = await store.list_threads(cursor=cursor, limit=page_size)
        for thread in page.threads:
            yield thread, await store.thread_context(thread["threadId"], limit=max_messages, attachments=True)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor
