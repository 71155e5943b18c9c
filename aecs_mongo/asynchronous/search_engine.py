"""The search-engine interface, and the hits every engine gathers the same way.

An engine answers a parsed query tree in one mailbox: ``search`` (a page of hits, newest first
or best first) and ``count`` (every match). ``search.py`` chooses the engine for each query in
one place and shapes the page; the engines are Atlas Search and ``$text`` (``indexed_search.py``),
the local index and a lookup of labels on ``messages`` (also there), and the scan
(``scan.py``). Whatever engine answered, a hit has the same fields and a snippet around the
words it matched, and is checked against the stored ``messages``: a body left by an interrupted
store, or an index entry of mail deleted since, is never returned.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..pure import search_query
from ..pure.search_query import Node
from ..pure.tags import row_tags
from ..results import SearchResults
from ..types import SearchHit
from .context import AsyncStoreContext

__all__ = ["HIT_FIELDS", "AsyncSearchEngine", "Hits", "hit_snippet", "messages_of"]

#: The columns a snippet is taken from, in order (bcc only outside a shared view).
_SNIPPET_COLUMNS = ("clean", "subject", "rest", "html", "sender", "recipients", "attachments", "bcc")
#: The fields of ``messages`` a hit is made of.
HIT_FIELDS = {
    "messageId": 1,
    "threadId": 1,
    "subject": 1,
    "ts": 1,
    "messageKey": 1,
    "tags": 1,
    "attachments.filename": 1,  # which attachment a snippet is from
    "attachments.textChars": 1,
}


class Hits:
    """A page of hits being gathered (with each hit's message key, for the cursor). ``complete``
    is False only where an engine stopped at a cap before it had looked at every candidate;
    ``examined``: the candidates it looked at (0 where an index answered)."""

    def __init__(self, engine: str, complete: bool = True, examined: int = 0) -> None:
        self.hits: list[SearchHit] = []
        self.keys: list[str] = []
        self.engine = engine
        self.complete = complete
        self.examined = examined
        self.next_cursor: str | None = None

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i: int) -> SearchHit:
        return self.hits[i]

    def add(self, message: Mapping[str, Any], snippet: str, score: float | None) -> None:
        self.hits.append(
            {
                "messageId": message["messageId"],
                "threadId": message["threadId"],
                "subject": message.get("subject"),
                "ts": int(message["ts"]),
                "snippet": snippet,
                "score": score,
                "tags": row_tags(message),
            }
        )
        self.keys.append(str(message["messageKey"]))

    def done(self) -> SearchResults[SearchHit]:
        return SearchResults(
            self.hits, complete=self.complete, examined=self.examined, engine=self.engine, next_cursor=self.next_cursor
        )


@runtime_checkable
class AsyncSearchEngine(Protocol):
    """One way to answer a query tree in the store's mailbox.

    ``name`` is what ``SearchResults.engine`` says and what a cursor is bound to. ``refusal``
    says why the engine cannot express a tree (None: it can); the choice asks it before it
    picks the engine. ``search`` returns up to ``limit`` hits after the cursor position
    ``after`` (newest first, or best first where ``sort`` is ``relevance`` and the engine ranks),
    the page saying whether it is complete; ``count`` counts every match.
    """

    name: str

    def refusal(self, tree: Node) -> str | None: ...

    async def search(
        self,
        tree: Node,
        limit: int,
        *,
        sort: str,
        after: tuple[int, str] | None,
        now: _dt.datetime,
        progress: Callable[[int], None] | None,
    ) -> Hits: ...

    async def count(self, tree: Node, now: _dt.datetime) -> int: ...


def hit_snippet(
    tree: Node, columns: Mapping[str, str | None], shared_view: bool, message: Mapping[str, Any] | None = None
) -> str:
    """The snippet of a hit: around the first of the tree's words in its text columns; from an
    attachment's text, it starts with the attachment's name (``[invoice.pdf] …``)."""
    names = [c for c in _SNIPPET_COLUMNS if not (shared_view and c == "bcc")]
    words = search_query.positive_words(tree)
    found = search_query.found_snippet([columns.get(c) for c in names], words)
    if found is not None:
        return found
    parts = (columns.get("attachmenttext") or "").split(search_query.ATTACHMENT_TEXT_SEPARATOR)
    with_text = [a for a in (message or {}).get("attachments") or () if a.get("textChars")]
    for number, part in enumerate(parts):
        found = search_query.found_snippet([part], words)
        if found is not None:
            name = with_text[number].get("filename") if number < len(with_text) else None
            return f"[{name or 'attachment'}] {found}"
    return search_query.snippet([columns.get(c) for c in names], words)


async def messages_of(ctx: AsyncStoreContext, hits: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The messages behind search hits (keyed like them, by ``_id``), in one read.

    A hit whose message is missing (a body left by an interrupted store) has no entry.
    """
    found: dict[str, dict[str, Any]] = {}
    for selector in ctx.dialect.split_in(ctx.by_ids([h["_id"] for h in hits])):
        found.update({m["_id"]: m async for m in ctx.messages.find(selector, HIT_FIELDS)})
    return found
