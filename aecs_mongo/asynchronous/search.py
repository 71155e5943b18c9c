"""Search: one entry point (``search``, ``count``) in front of every engine, and the one place
that chooses the engine.

The query is parsed once (``pure/search_query/``) and the same tree goes to the engine
``choose_engine`` picks: Atlas Search, ``$text`` on ``aecs_bodies_search``, the local index
(``search_index=``) or the scan (``scan.py``), which reads every message and matches the tree
in Python; a query of labels alone goes to ``messages`` and their indexes, exact, whatever engine
serves the words. Each engine implements ``AsyncSearchEngine`` (``search_engine.py``); the hits
are shaped the same way whatever engine found them: newest first (``sort="date"``, keyset
cursors) or best first (``sort="relevance"``, where the engine ranks).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable

from ..errors import SearchQueryError
from ..pure import queries, search_query
from ..pure.search_compile import check_sort, search_keyset
from ..pure.search_query import Node
from ..pure.settings import check_limit
from ..results import SearchResults
from ..types import SearchHit
from . import capabilities
from .context import AsyncStoreContext
from .indexed_search import LabelLookup, LocalIndex, MongoSearchEngine
from .scan import Scan
from .search_engine import AsyncSearchEngine

__all__ = ["choose_engine", "count", "engine_for", "search"]


async def choose_engine(ctx: AsyncStoreContext, tree: Node | None = None) -> AsyncSearchEngine:
    """The engine for ``tree`` (None: for a query each engine can express).

    The store's ``search_engine``, or for ``auto`` the local index where the store has one, else
    ``$text`` where the server holds the text index and the query fits it, else the scan (which
    then warns, once per store). A query of labels alone (tags, flags, folders, ids, with dates
    and threads) goes to the lookup on ``messages`` unless the local index answers it (it keeps
    labels too) or the store asked for the local index or the scan. An engine named by
    ``search_engine`` that cannot express the query is a ``SearchQueryError``;
    ``search_engine="local"`` without ``search_index=`` is a ``ValueError``.
    """
    engine = ctx.settings.checked_search_engine()
    local = engine == "auto" and ctx.search_index is not None
    labels = LabelLookup(ctx)
    if engine in ("auto", "text", "atlas") and not local and tree is not None and labels.refusal(tree) is None:
        return labels
    if engine == "auto":
        if ctx.search_index is not None:
            return LocalIndex(ctx)
        text = MongoSearchEngine(ctx, "text")
        if await capabilities.text_index(ctx) and (tree is None or text.refusal(tree) is None):
            return text
        return Scan(ctx, fallback=True)
    if engine == "local" and ctx.search_index is None:
        raise ValueError("search_engine='local' needs search_index= (the index file)")
    chosen: AsyncSearchEngine
    if engine == "local":
        chosen = LocalIndex(ctx)
    elif engine == "scan":
        chosen = Scan(ctx)
    else:
        chosen = MongoSearchEngine(ctx, engine)
    why = None if tree is None else chosen.refusal(tree)
    if why is not None:
        raise SearchQueryError(
            f"{why}; with search_engine='auto' the store answers it with the local index or the scan",
            query=search_query.to_text(tree),
        )
    return chosen


async def engine_for(ctx: AsyncStoreContext, tree: Node | None = None) -> str:
    """The name of the engine ``choose_engine`` picks (what ``SearchResults.engine`` says)."""
    return (await choose_engine(ctx, tree)).name


async def search(
    ctx: AsyncStoreContext,
    query: str,
    limit: int,
    progress: Callable[[int], None] | None,
    sort: str = "date",
    cursor: str | None = None,
) -> SearchResults[SearchHit]:
    """``store.search``: the hits of ``query`` (``SearchHit``), newest first or best first."""
    check_limit(limit)
    sort = check_sort(sort)
    tree = search_query.parse(query)
    engine = await choose_engine(ctx, tree)
    if tree is None:
        return SearchResults(engine=engine.name)
    keyset = search_keyset(ctx.mailbox_id, tree, engine.name)
    if cursor is not None and sort != "date":
        raise ValueError("a cursor pages a search newest first (sort='date'); best-first results come in one page")
    after = queries.decode_cursor(keyset, cursor, ctx.mailbox_id)
    now = _dt.datetime.now(_dt.UTC)
    results = await engine.search(tree, limit, sort=sort, after=after, now=now, progress=progress)
    if sort == "date" and len(results) == limit and results.complete:
        results.next_cursor = queries.encode_cursor(keyset, {"ts": results[-1]["ts"], "messageKey": results.keys[-1]})
    return results.done()


async def count(ctx: AsyncStoreContext, query: str) -> int:
    """``store.count``: every message ``query`` matches (the local index after catching it up,
    the server's own count for ``$text`` and Atlas, a complete scan otherwise)."""
    tree = search_query.parse(query)
    engine = await choose_engine(ctx, tree)
    if tree is None:
        return 0
    return await engine.count(tree, _dt.datetime.now(_dt.UTC))
