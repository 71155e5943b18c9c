"""LangChain glue: a retriever over the store's search and a loader of whole threads.

``pip install 'aecs-mongo[langchain]'`` (``langchain-core``). Both take a ``MessageStore`` or an
``AsyncMessageStore`` (``invoke``/``load`` for the first, ``ainvoke``/``aload`` for the second):

```python
from aecs_mongo.agents.langchain import MailRetriever, ThreadLoader

retriever = MailRetriever(store=store, k=4)
docs = retriever.invoke("budget storage migration")   # Documents, best first
docs[0].page_content, docs[0].metadata["messageId"]
threads = ThreadLoader(store=store).load()              # one Document per thread, to index
```

``MailRetriever``: ``search_type="search"`` (the default) runs ``store.search`` (the query
language); ``"semantic"`` runs ``store.semantic_search`` on ``embed(query)`` (an embedding
function is then required; the mailbox must hold vectors of its dimensions). Each hit is one
``Document`` whose ``page_content`` is the message's ``forAI`` text (``page_content="clean"``:
the clean text) and whose metadata carries ``messageId``, ``threadId``, ``from`` (``Name
<address>``), ``date`` (ISO 8601 UTC), ``subject``, ``tags`` (sorted: ``$seen`` read,
``$flagged``, the user's own), ``score`` (search engines that rank; None otherwise) and
``attachmentsForAI`` (the text read from its attachments, ``attachments_for_ai``; absent: none).
``ThreadLoader`` yields one ``Document`` per thread, most recent activity first: its newest
``max_messages`` messages oldest first, each as a short header block, its ``forAI`` text and
its attachments' text (``attachmentsForAI``);
metadata ``threadId``, ``subject``, ``messageCount``, ``tags`` (the union of its messages'),
and the newest message's ``messageId``, ``from`` and ``date``.

Mail is untrusted: text and metadata have the characters that hide text from a person removed
(``aecs_mongo.pure.invisible``) and their count in ``metadata["hiddenCharactersRemoved"]``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ..errors import ToolError
from ..pure.invisible import strip_hidden
from .asynchronous import retrieval as aretrieval
from .shaping import date_of, sender
from .synchronous import retrieval
from .tools import store_errors

__all__ = ["MailRetriever", "ThreadLoader"]


def _document(text: str, metadata: dict[str, Any]) -> Document:
    """A Document with hidden characters removed from its text and its string metadata."""
    content, hidden = strip_hidden(text)
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, str) and key not in ("messageId", "threadId"):
            value, count = strip_hidden(value)
            hidden += count
        clean[key] = value
    clean["hiddenCharactersRemoved"] = hidden
    return Document(page_content=content, metadata=clean)


def _is_async(store: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(store, "search", None))


class MailRetriever(BaseRetriever):
    """Messages of one store's mailbox for a query, as LangChain ``Document``s (best first)."""

    store: Any
    """A ``MessageStore`` (``invoke``) or an ``AsyncMessageStore`` (``ainvoke``)."""
    k: int = 4
    """How many Documents at most."""
    search_type: Literal["search", "semantic"] = "search"
    """``search``: the store's query language; ``semantic``: nearest vectors to ``embed(query)``."""
    embed: Callable[[str], Any] | None = None
    """Text to vector, for ``search_type="semantic"`` (may be async with an async store)."""
    page_content: Literal["forAI", "clean"] = "forAI"
    """What a Document's ``page_content`` is: the prompt-ready ``forAI`` text or the clean text."""

    def _options(self, query: str) -> dict[str, Any]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        semantic = self.search_type == "semantic"
        if semantic and self.embed is None:
            raise ToolError("search_type='semantic' needs an embedding function (embed=...)")
        return {"k": self.k, "semantic": semantic, "embed": self.embed, "page_content": self.page_content}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if _is_async(self.store):
            raise TypeError("this retriever's store is an AsyncMessageStore: use ainvoke")
        options = self._options(query)
        with store_errors("retriever", set()):
            found = retrieval.retrieve(self.store, query, **options)
        return [_document(text, metadata) for text, metadata in found]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if not _is_async(self.store):
            return self._get_relevant_documents(query, run_manager=run_manager.get_sync())
        options = self._options(query)
        with store_errors("retriever", set()):
            found = await aretrieval.retrieve(self.store, query, **options)
        return [_document(text, metadata) for text, metadata in found]


def _thread_document(thread: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> Document:
    blocks = []
    for entry in entries:
        head = [f"From: {sender(entry.get('from')) or '?'}", f"Date: {date_of(entry) or '-'}"]
        if entry.get("subject"):
            head.append(f"Subject: {entry['subject']}")
        text = (entry.get("forAI") or "").strip()
        if entry.get("attachmentsForAI"):
            text = f"{text}\n\n{entry['attachmentsForAI']}".strip()
        blocks.append("\n".join(head) + "\n\n" + text)
    newest = entries[-1] if entries else {}
    metadata = {
        "threadId": thread["threadId"],
        "subject": thread.get("subject"),
        "messageCount": int(thread["messageCount"]),
        "tags": list(thread.get("tags") or ()),
        "messageId": newest.get("messageId"),
        "from": sender(newest.get("from")),
        "date": date_of(newest) if newest else None,
    }
    return _document("\n\n---\n\n".join(blocks), metadata)


class ThreadLoader(BaseLoader):
    """One ``Document`` per thread of a store's mailbox, most recent activity first, for indexing."""

    def __init__(self, store: Any, *, max_messages: int = 50, page_size: int = 100) -> None:
        self.store = store
        self.max_messages = max_messages
        self.page_size = page_size

    def lazy_load(self) -> Iterator[Document]:
        if _is_async(self.store):
            raise TypeError("this loader's store is an AsyncMessageStore: use aload or alazy_load")
        walk = retrieval.threads(self.store, max_messages=self.max_messages, page_size=self.page_size)
        for thread, entries in walk:
            yield _thread_document(thread, entries)

    async def alazy_load(self) -> AsyncIterator[Document]:
        if not _is_async(self.store):
            for document in self.lazy_load():
                yield document
            return
        walk = aretrieval.threads(self.store, max_messages=self.max_messages, page_size=self.page_size)
        async for thread, entries in walk:
            yield _thread_document(thread, entries)
