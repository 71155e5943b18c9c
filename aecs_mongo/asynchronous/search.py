"""Search: one entry point (``search``) in front of every engine.

The store calls ``search`` once; it picks the engine (``search_engine``: Atlas Search,
``$text`` on ``aecs_bodies_search``, or the scan where neither exists), runs it, and shapes the
hits the same way whatever engine found them. Each engine is one function below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..pure import queries
from ..pure.documents import HOT_TEXT_CHARS
from ..pure.keys import check_str
from ..pure.settings import check_limit
from ..results import SearchResults
from ..types import SearchHit
from . import capabilities, paging
from .context import AsyncStoreContext, log, resolve, to_list

__all__ = ["engine_for", "messages_of", "search"]

Hits = tuple[list[dict[str, Any]], int, bool]  # (body hits, messages examined, complete)


async def engine_for(ctx: AsyncStoreContext) -> str:
    """The engine ``search`` uses: the store's ``search_engine``, or for ``auto`` the text index
    where the server holds one, else the scan."""
    engine = ctx.settings.checked_search_engine()
    if engine == "auto":
        engine = "text" if await capabilities.text_index(ctx) else "scan"
    return engine


async def search(
    ctx: AsyncStoreContext, query: str, limit: int, progress: Callable[[int], None] | None
) -> SearchResults[SearchHit]:
    """``store.search``: the engine's hits as messageId, subject, ts, snippet, score."""
    check_str(query, "query")
    check_limit(limit)
    engine = await engine_for(ctx)
    if not query.strip():
        return SearchResults(engine=engine)
    if engine == "atlas":
        hits, examined, complete = await _atlas(ctx, query, limit)
    elif engine == "text":
        hits, examined, complete = await _text(ctx, query, limit)
    else:
        if ctx.first_time("scan search"):
            log.info(
                "search in mailbox %r reads the messages newest first: no text index (not an index); said once",
                ctx.mailbox_id,
            )
        hits, examined, complete = await _scan(ctx, query, limit, progress)
    rows = await messages_of(ctx, hits)
    results: SearchResults[SearchHit] = SearchResults(complete=complete, examined=examined, engine=engine)
    for hit in hits:
        message = rows.get(hit["_id"])
        if message is None:  # a body whose message insert never happened (an interrupted store)
            continue
        results.append(
            {
                "messageId": message["messageId"],
                "subject": message.get("subject"),
                "ts": int(message["ts"]),
                "snippet": queries.snippet(hit.get("clean") or hit.get("subject"), query),
                "score": hit.get("score"),
            }
        )
    if engine == "scan":
        results.sort(key=lambda r: (-r["ts"], r["messageId"]))
    return results


async def _atlas(ctx: AsyncStoreContext, query: str, limit: int) -> Hits:
    cursor = await resolve(ctx.bodies.aggregate(queries.atlas_search_pipeline(ctx.mailbox_id, query, limit)))
    return await to_list(cursor), 0, True


async def _text(ctx: AsyncStoreContext, query: str, limit: int) -> Hits:
    found = ctx.bodies.find(
        queries.text_search_filter(ctx.mailbox_id, query),
        {"subject": 1, "clean": 1, "score": {"$meta": "textScore"}},
    )
    return await to_list(found.sort([("score", {"$meta": "textScore"})]).limit(limit)), 0, True


async def _scan(ctx: AsyncStoreContext, query: str, limit: int, progress: Callable[[int], None] | None) -> Hits:
    """The scan: ``(body hits newest first, messages examined, complete)``. Each window of
    messages (``_id``, hot subject) is matched on its subjects here and on its bodies' clean
    text by the server (``_id $in`` and a literal ``$regex``, never an ``$or``)."""
    pattern = queries.search_pattern(query)
    cap = ctx.settings.scan_limit
    hits: list[dict[str, Any]] = []
    examined = 0
    capped = False

    async def take(batch: list[dict[str, Any]]) -> bool:
        nonlocal examined, capped
        if cap is not None and examined + len(batch) >= cap:
            batch, capped = batch[: cap - examined], True
        examined += len(batch)
        hits.extend(await _match_bodies(ctx, batch, pattern))
        if progress is not None and batch:
            progress(examined)
        return capped or len(hits) >= limit

    inbox = queries.inbox_query(ctx.mailbox_id)
    read = await paging.windowed_read(ctx, inbox)
    await paging.walk_windows(ctx, inbox, read, None, None, queries.SEARCH_WINDOW_PROJECTION, take)
    return hits[:limit], examined, not capped or len(hits) >= limit


async def _match_bodies(
    ctx: AsyncStoreContext, window: list[dict[str, Any]], pattern: re.Pattern[str]
) -> list[dict[str, Any]]:
    """The bodies of one window of messages that match, in the window's order."""
    if not window:
        return []
    subject_hits, cut = queries.scan_matches(pattern, window, HOT_TEXT_CHARS["subject"])
    regex = {"$regex": pattern.pattern, "$options": "i"}
    fields = {"subject": 1, "clean": 1}
    ids = [m["_id"] for m in window]
    found: dict[str, dict[str, Any]] = {}
    for selector in queries.split_in({**ctx.by_ids(ids), "clean": regex}):
        found.update({b["_id"]: b async for b in ctx.bodies.find(selector, fields)})
    rest = [i for i in subject_hits | set(cut) if i not in found]
    if rest:
        async for body in ctx.bodies.find(ctx.by_ids(rest), fields):
            if body["_id"] in subject_hits or pattern.search(body.get("subject") or ""):
                found[body["_id"]] = body
    return [found[i] for i in ids if i in found]


async def messages_of(ctx: AsyncStoreContext, hits: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The messages behind search hits (keyed like them, by ``_id``), in one read.

    A hit whose message is missing (a body left by an interrupted store) has no entry.
    """
    found = ctx.messages.find(ctx.by_ids([h["_id"] for h in hits]), {"messageId": 1, "subject": 1, "ts": 1})
    return {m["_id"]: m async for m in found}
