"""Search: one entry point (``search``, ``count``) in front of every engine.

The query is parsed once (``pure/search_query.py``) and the same tree goes to the engine the
store picks (``engine_for``): Atlas Search, ``$text`` on ``aecs_bodies_search``, the local index
(``search_index=``, kept up by ``indexing.py``) or the scan, which reads every message and
matches the tree here. Each engine is one pair of functions below; the hits are shaped the same
way whatever engine found them: newest first (``sort="date"``, keyset cursors) or best first
(``sort="relevance"``, where the engine ranks), each with a snippet around the words it matched,
and every hit checked against the stored ``messages`` (a body left by an interrupted store, or an
index entry of mail deleted since, is never returned).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SearchQueryError
from ..pure import queries, search_query
from ..pure.keys import doc_id, thread_key
from ..pure.search_compile import (
    MongoSearch,
    atlas_search,
    body_prefilter,
    check_sort,
    label_hint,
    message_filter,
    mongo_pipeline,
    post_match,
    prefiltered_haystacks,
    search_columns,
    search_haystacks,
    search_keyset,
    text_search,
)
from ..pure.search_query import Node
from ..pure.settings import check_limit
from ..pure.tags import row_tags
from ..results import SearchResults
from ..search_index import MailboxIndex
from ..search_index.fts import compile_plan, rowid_for
from ..types import SearchHit
from . import capabilities, indexing, paging
from .context import AsyncStoreContext, log, resolve, to_list

__all__ = ["count", "engine_for", "messages_of", "search"]

#: The columns a snippet is taken from, in order (bcc only outside a shared view).
_SNIPPET_COLUMNS = ("clean", "subject", "rest", "html", "sender", "recipients", "attachments", "bcc")
_HIT_FIELDS = {"messageId": 1, "threadId": 1, "subject": 1, "ts": 1, "messageKey": 1, "tags": 1}
_SCAN_MESSAGE_FIELDS = {**queries.SEARCH_WINDOW_PROJECTION, "threadId": 1, "threadKey": 1, "from": 1}
_SCAN_MESSAGE_FIELDS |= {"tags": 1, "folders": 1}
_SCAN_MESSAGE_FIELDS |= {"attachments": 1, "blobs": 1, "blobPrefix": 1, "participants": 1}
#: Messages a scan walks before it asks for the bodies that may hold its words
#: (``_bodies_passing``; a search that found its page by then never asks), the windows after
#: that, and the most bodies that prefilter may name (more: the walk reads every body).
_PREFILTER_AFTER = 200
_SCAN_CHUNK = 2_000
_PREFILTER_MAX = 100_000


def _thread_key_of(thread_id: str) -> str:
    return thread_key(thread_id)


async def engine_for(ctx: AsyncStoreContext, tree: Node | None = None) -> str:
    """The engine for ``tree`` (None: for a query each engine can express): the store's
    ``search_engine``, or for ``auto`` the local index where the store has one, else ``$text``
    where the server holds the text index and the query fits it, else the scan. An engine named
    by ``search_engine`` that cannot express the query is a ``SearchQueryError``."""
    engine = ctx.settings.checked_search_engine()
    local = engine == "auto" and ctx.search_index is not None  # the local index keeps labels too
    if engine in ("auto", "text", "atlas") and not local and tree is not None and _labels_only(tree):
        return "messages"
    if engine == "auto":
        if ctx.search_index is not None:
            return "local"
        if await capabilities.text_index(ctx) and (tree is None or text_search(tree).text is not None):
            return "text"
        return "scan"
    if engine == "local" and ctx.search_index is None:
        raise ValueError("search_engine='local' needs search_index= (the index file)")
    if tree is not None and engine in ("text", "atlas"):
        compiled = text_search(tree) if engine == "text" else atlas_search(tree, ctx.mailbox_id)
        if compiled.text is None:
            raise SearchQueryError(
                f"{compiled.reason}; with search_engine='auto' the store answers it with the local index or the scan",
                query=search_query.to_text(tree),
            )
    return engine


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
    engine = await engine_for(ctx, tree)
    await capabilities.dialect(ctx)  # the statements below are the server's
    if tree is None:
        return SearchResults(engine=engine)
    keyset = search_keyset(ctx.mailbox_id, tree, engine)
    if cursor is not None and sort != "date":
        raise ValueError("a cursor pages a search newest first (sort='date'); best-first results come in one page")
    after = queries.decode_cursor(keyset, cursor, ctx.mailbox_id)
    now = _dt.datetime.now(_dt.UTC)
    if engine == "messages":
        results = await _labelled(ctx, tree, limit, after, now)
    elif engine == "local":
        results = await _local(ctx, tree, limit, sort, after, now)
    elif engine in ("text", "atlas"):
        results = await _mongo(ctx, tree, engine, limit, sort, after, now)
    else:
        _say_scan(ctx)
        results = await _scan(ctx, tree, limit, after, now, progress)
    if sort == "date" and len(results) == limit and results.complete:
        results.next_cursor = queries.encode_cursor(keyset, {"ts": results[-1]["ts"], "messageKey": results.keys[-1]})
    return results.done()


async def count(ctx: AsyncStoreContext, query: str) -> int:
    """``store.count``: every message ``query`` matches (the local index after catching it up,
    the server's own count for ``$text`` and Atlas, a complete scan otherwise)."""
    tree = search_query.parse(query)
    engine = await engine_for(ctx, tree)
    await capabilities.dialect(ctx)
    if tree is None:
        return 0
    now = _dt.datetime.now(_dt.UTC)
    if engine == "messages":
        flt = message_filter(tree, now, _thread_key_of)
        assert flt is not None
        hint = label_hint(flt)
        selector = {"mailboxId": ctx.mailbox_id, **flt}
        if hint is not None:  # tag:/folder: on their index (``label_hint``)
            return int(await ctx.messages.count_documents(selector, hint=hint))
        return int(await ctx.messages.count_documents(selector))
    if engine == "local":
        index = await indexing.current(ctx)
        return index.count(_plan(ctx, index, tree, now))
    if engine in ("text", "atlas"):
        compiled, first = _mongo_first(ctx, tree, engine)
        if engine == "atlas" and not compiled.post:
            meta = [{"$searchMeta": {**compiled.text, "count": {"type": "total"}}}]
            found = await to_list(await resolve(ctx.bodies.aggregate(meta)))
            return int(found[0]["count"]["total"]) if found else 0
        post = post_match(compiled.post, now, _thread_key_of)
        stages = mongo_pipeline(first, post, sort="date", limit=None, after=None, score={"$literal": None})
        found = await to_list(await resolve(ctx.bodies.aggregate([*stages, {"$count": "n"}])))
        return int(found[0]["n"]) if found else 0
    _say_scan(ctx)
    matched = 0

    async def take(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> bool:
        nonlocal matched
        matched += len(rows)
        return False

    await _scan_walk(ctx, tree, None, now, None, take, cap=None, want=None)
    return matched


# --- shaping hits --------------------------------------------------------------------------------


class _Results:
    """Hits being gathered (with each hit's message key, for the cursor)."""

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


def _snippet(tree: Node, columns: Mapping[str, str | None], shared_view: bool) -> str:
    names = [c for c in _SNIPPET_COLUMNS if not (shared_view and c == "bcc")]
    return search_query.snippet([columns.get(c) for c in names], search_query.positive_words(tree))


async def messages_of(ctx: AsyncStoreContext, hits: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The messages behind search hits (keyed like them, by ``_id``), in one read.

    A hit whose message is missing (a body left by an interrupted store) has no entry.
    """
    found: dict[str, dict[str, Any]] = {}
    for selector in ctx.dialect.split_in(ctx.by_ids([h["_id"] for h in hits])):
        found.update({m["_id"]: m async for m in ctx.messages.find(selector, _HIT_FIELDS)})
    return found


# --- tags, flags, folders and ids alone: the messages and their indexes ----------------------------


def _labels_only(tree: Node) -> bool:
    return message_filter(tree, _dt.datetime.now(_dt.UTC), _thread_key_of) is not None


async def _labelled(
    ctx: AsyncStoreContext, tree: Node, limit: int, after: tuple[int, str] | None, now: _dt.datetime
) -> _Results:
    """A query of tags, flags, folders and ids (with threads and dates beside them) and no
    words: a find on ``messages`` newest first (``tag:x`` rides ``aecs_messages_tags``), exact
    whatever engine serves the words; the snippet is the start of the message's ``forAI``."""
    flt = message_filter(tree, now, _thread_key_of)
    assert flt is not None
    clauses: list[dict[str, Any]] = [{"mailboxId": ctx.mailbox_id}, flt] if flt else [{"mailboxId": ctx.mailbox_id}]
    if after is not None:
        ts, key = after
        clauses.append({"$or": [{"ts": {"$lt": ts}}, {"ts": ts, "messageKey": {"$lt": key}}]})
    fields = {**_HIT_FIELDS, "forAI": 1}
    found = ctx.messages.find({"$and": clauses}, fields).sort([("ts", -1), ("messageKey", -1)]).limit(limit)
    hint = label_hint(flt) if flt else None
    if hint is not None:  # tag:/folder: on their index (``label_hint``)
        found = found.hint(hint)
    results = _Results("messages")
    async for message in found:
        results.add(message, search_query.snippet([message.get("forAI"), message.get("subject")], []), None)
    return results


# --- the local index -------------------------------------------------------------------------------


def _plan(ctx: AsyncStoreContext, index: MailboxIndex, tree: Node, now: _dt.datetime) -> Any:
    return compile_plan(
        tree,
        fts=index.fts,
        docs=index.docs,
        shared_view=ctx.settings.shared_view,
        now=now,
        thread_key_of=_thread_key_of,
        labels=index.labels,
    )


async def _local(
    ctx: AsyncStoreContext, tree: Node, limit: int, sort: str, after: tuple[int, str] | None, now: _dt.datetime
) -> _Results:
    """The index's page, each hit checked against the stored messages: an entry whose message
    is gone (deleted by a process that does not keep this index) is removed and the page filled
    from the next matches."""
    index = await indexing.current(ctx)
    plan = _plan(ctx, index, tree, now)
    results = _Results("local")
    before: int | None = None
    if after is not None:  # the row of the cursor's message (or where it would be, if gone since)
        before = index.rowid_of(after[1]) or rowid_for(after[0], after[1])
    ranked = sort == "relevance"
    seen = 0
    while len(results) < limit:
        want = limit - len(results)
        rows = index.search(plan, want + seen if ranked else want, before=before, ranked=ranked)
        rows = rows[seen:] if ranked else rows
        if not rows:
            break
        stored = await messages_of(ctx, [{"_id": doc_id(ctx.mailbox_id, key)} for _, key, _ in rows])
        gone = [key for _, key, _ in rows if doc_id(ctx.mailbox_id, key) not in stored]
        if gone:
            index.remove(gone)
        texts = index.texts([rowid for rowid, key, _ in rows if key not in gone])
        for rowid, key, score in rows:
            message = stored.get(doc_id(ctx.mailbox_id, key))
            if message is not None:
                results.add(message, _snippet(tree, texts.get(rowid, {}), ctx.settings.shared_view), score)
        if ranked:
            seen += len(rows) - len(gone)
        else:
            before = rows[-1][0]
        if len(rows) < want:
            break
    return results


# --- $text and Atlas Search --------------------------------------------------------------------------


def _mongo_first(ctx: AsyncStoreContext, tree: Node, engine: str) -> tuple[MongoSearch, list[dict[str, Any]]]:
    if engine == "text":
        compiled = text_search(tree)
        return compiled, [{"$match": {"mailboxId": ctx.mailbox_id, "$text": {"$search": compiled.text}}}]
    compiled = atlas_search(tree, ctx.mailbox_id)
    return compiled, [{"$search": compiled.text}]


async def _mongo(
    ctx: AsyncStoreContext,
    tree: Node,
    engine: str,
    limit: int,
    sort: str,
    after: tuple[int, str] | None,
    now: _dt.datetime,
) -> _Results:
    compiled, first = _mongo_first(ctx, tree, engine)
    score = {"$meta": "textScore" if engine == "text" else "searchScore"}
    post = post_match(compiled.post, now, _thread_key_of)
    stages = mongo_pipeline(first, post, sort=sort, limit=limit, after=after, score=score)
    hits = await to_list(await resolve(ctx.bodies.aggregate(stages)))
    stored = await messages_of(ctx, hits)
    results = _Results(engine)
    for hit in hits:
        message = stored.get(hit["_id"])
        if message is not None:
            columns = {"clean": hit.get("clean"), "subject": hit.get("subject")}
            score_value = hit.get("score")
            results.add(message, _snippet(tree, columns, True), None if score_value is None else float(score_value))
    return results


# --- the scan ----------------------------------------------------------------------------------------


def _say_scan(ctx: AsyncStoreContext) -> None:
    """The warning of a store whose searches fall back to the scan (not one that asked for it):
    what to do about it, once per store."""
    if ctx.settings.search_engine == "auto" and ctx.first_time("scan search"):
        log.warning(
            "search in mailbox %r reads every message (the scan: this server has no text index and the store"
            " no local index); for searches in milliseconds give the store a local full-text index:"
            " MessageStore(db, search_index=PATH), PATH a file it keeps (the command line does this itself)",
            ctx.mailbox_id,
        )


async def _scan(
    ctx: AsyncStoreContext,
    tree: Node,
    limit: int,
    after: tuple[int, str] | None,
    now: _dt.datetime,
    progress: Callable[[int], None] | None,
) -> _Results:
    """Every message newest first, the tree matched here, until ``limit`` hits (or
    ``scan_limit`` messages examined: then ``complete`` is False unless the page is full)."""
    results = _Results("scan")

    async def take(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> bool:
        for message, columns in rows:
            results.add(message, _snippet(tree, columns, ctx.settings.shared_view), None)
            if len(results) >= limit:
                return True
        return False

    cap = ctx.settings.scan_limit
    examined, capped = await _scan_walk(ctx, tree, after, now, progress, take, cap=cap, want=limit)
    results.examined = examined
    results.complete = not capped or len(results) >= limit
    return results


async def _scan_walk(
    ctx: AsyncStoreContext,
    tree: Node,
    after: tuple[int, str] | None,
    now: _dt.datetime,
    progress: Callable[[int], None] | None,
    take: Callable[[list[Any]], Any],
    *,
    cap: int | None,
    want: int | None,
) -> tuple[int, bool]:
    """Walk the mailbox newest first in windows; hand each window's matches (``(message,
    columns)``) to ``take`` until it says True (``want``: the matches it takes at most, None:
    all). Returns (messages examined, stopped by ``cap``).

    A walk still going after ``_PREFILTER_AFTER`` messages, whose words are rare there and
    which will read a good part of the mailbox (``_prefilter_pays``), asks the server once for
    the bodies that may hold the words (``search_compile.body_prefilter``: one pass over the
    mailbox's bodies, where reading them costs the server two to three times as much) and
    walks the rest in bigger windows, reading a body only where its message may match."""
    examined = 0
    hits = 0
    capped = False
    switch = False
    last: tuple[int, str] | None = after
    since, until = _date_bounds(tree, now)
    inbox = queries.inbox_query(ctx.mailbox_id, since=since, until=until)
    read = await paging.windowed_read(ctx, inbox)
    prefilter = body_prefilter(tree, ctx.dialect.pattern_chars)
    ask = prefilter is not None  # once, after ``_PREFILTER_AFTER`` messages
    holding: set[str] | None = None

    async def window(batch: list[dict[str, Any]]) -> bool:
        nonlocal examined, capped, switch, last, hits
        if cap is not None and examined + len(batch) >= cap:
            batch, capped = batch[: cap - examined], True
        examined += len(batch)
        matched = await _match_window(ctx, tree, batch, now, holding)
        hits += len(matched)
        if progress is not None and batch:
            progress(examined)
        if batch:
            last = (int(batch[-1]["ts"]), str(batch[-1]["messageKey"]))
        if bool(await resolve(take(matched))) or capped:
            return True
        switch = ask and examined >= _PREFILTER_AFTER
        return switch

    first = _PREFILTER_AFTER if ask else 500  # windows of about this many messages until then
    await paging.walk_windows(ctx, inbox, read, after, None, _SCAN_MESSAGE_FIELDS, window, chunk=first)
    if switch and prefilter is not None and await _prefilter_pays(ctx, since, last, cap, examined, hits, want):
        holding = await _bodies_passing(ctx, prefilter)
    if switch:
        chunk = _SCAN_CHUNK if holding is not None else 500
        ask = switch = False
        await paging.walk_windows(ctx, inbox, read, last, None, _SCAN_MESSAGE_FIELDS, window, chunk=chunk)
    return examined, capped


async def _prefilter_pays(
    ctx: AsyncStoreContext,
    since: int | None,
    last: tuple[int, str] | None,
    cap: int | None,
    examined: int,
    hits: int,
    want: int | None,
) -> bool:
    """Whether the prefilter (a pass over every body of the mailbox, about a third of the
    cost of reading them) pays for the rest of the walk: the words matched at most one
    message in twenty so far, and the messages still to read, by that rate and by the store's
    sample (``paging.mailbox_sample``: the mailbox's size, the part of it the rest of the walk
    covers), are at least a third of the mailbox."""
    if hits * 20 > examined or last is None:
        return False
    sampled, fraction = await paging.mailbox_sample(ctx)
    total = len(sampled) / fraction
    left = sum(1 for r in sampled if int(r["ts"]) <= last[0] and (since is None or int(r["ts"]) >= since)) / fraction
    if cap is not None:
        left = min(left, cap - examined)
    if want is not None and hits:
        left = min(left, (want - hits) * examined / hits)
    return left * 3 >= total


async def _bodies_passing(ctx: AsyncStoreContext, prefilter: dict[str, Any]) -> set[str] | None:
    """The ``_id`` of every body of the mailbox that passes ``prefilter`` (None: too many to
    be worth it, as for a common word: the walk reads every body then, as it does before)."""
    start = doc_id(ctx.mailbox_id, "")
    selector = {"_id": {"$gte": start, "$lt": start[:-1] + ";"}, **prefilter}
    found = await to_list(ctx.bodies.find(selector, {"_id": 1}).limit(_PREFILTER_MAX + 1))
    log.debug("scan of mailbox %r: %d bodies may hold the words (prefilter)", ctx.mailbox_id, len(found))
    return None if len(found) > _PREFILTER_MAX else {b["_id"] for b in found}


def _date_bounds(tree: Node, now: _dt.datetime) -> tuple[int | None, int | None]:
    """The ``ts`` range the top-level ``date:`` terms allow (the scan reads only that range)."""
    lo: int | None = None
    hi: int | None = None
    for item in tree.items if isinstance(tree, search_query.And) else (tree,):
        if isinstance(item, search_query.Date):
            start, end = search_query.date_range(item, now)
            if start is not None:
                lo = start if lo is None else max(lo, start)
            if end is not None:
                hi = end if hi is None else min(hi, end)
    if lo is not None and hi is not None and hi < lo:
        hi = lo
    return lo, hi


async def _match_window(
    ctx: AsyncStoreContext,
    tree: Node,
    window: list[dict[str, Any]],
    now: _dt.datetime,
    holding: set[str] | None = None,
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The messages of one window that match, in the window's order, with their columns. The
    HTML part (and a spilled body) is read only for messages that have one and whose answer it
    could change: not where the message matched without it and the tree has no NOT (more text
    only adds matches then); one read of its blobs, the message and body already in hand.
    ``holding``: the bodies that passed the prefilter (``_bodies_passing``); any other body
    holds none of the words, so its message is tested with the body's columns empty, its HTML
    part read first where it has one, and the body read only where the message may still match."""
    if not window:
        return []
    shared = ctx.settings.shared_view
    reads_html = search_query.has_text(tree)
    monotone = not search_query.has_not(tree)

    def facts(message: dict[str, Any]) -> dict[str, Any]:
        """What both tests know of a message besides its text."""
        return {
            "ts": int(message["ts"]),
            "thread_key": str(message.get("threadKey")),
            "now": now,
            "shared_view": shared,
            "thread_key_of": _thread_key_of,
            "tags": row_tags(message),
            "folders": row_tags(message, "folders"),
            "key": str(message.get("messageKey")),
        }

    def test(message: dict[str, Any], columns: Mapping[str, str]) -> bool:
        return search_query.matches(tree, columns, **facts(message))

    def may(message: dict[str, Any], haystacks: Mapping[str, str | None]) -> bool:
        return search_query.may_match(tree, haystacks, **facts(message))

    def html_key(message: dict[str, Any]) -> str | None:
        return str(message["blobPrefix"]) + "body.html" if "body.html" in (message.get("blobs") or ()) else None

    data: dict[str, bytes] = {}  # blobs read: HTML parts and spilled bodies, by key
    wanted = window
    if holding is not None:  # the body of a message not in ``holding`` has none of the words
        wanted, html_first = [], list[dict[str, Any]]()
        for message in window:
            own = prefiltered_haystacks(message, "" if html_key(message) is None else None)
            if message["_id"] in holding or own is None:
                wanted.append(message)
            elif may(message, own):
                (wanted if html_key(message) is None or not reads_html else html_first).append(message)
        data.update(await _read_blobs(ctx, [str(html_key(m)) for m in html_first]))
        for message in html_first:
            raw_html = data.get(str(html_key(message)))
            html = None if raw_html is None else raw_html.decode("utf-8", "replace")
            if may(message, {**(prefiltered_haystacks(message, "") or {}), "html": indexing.html_pieces(html)}):
                wanted.append(message)
        order = {m["_id"]: i for i, m in enumerate(window)}
        wanted.sort(key=lambda m: order[m["_id"]])
    ids = [m["_id"] for m in wanted]
    bodies: dict[str, dict[str, Any]] = {}
    for selector in ctx.dialect.split_in(ctx.by_ids(ids), ctx.dialect.scan_in) if ids else ():
        bodies.update({b["_id"]: b async for b in ctx.bodies.find(selector, {"raw": 0, "forAI": 0})})

    # may_match first (a substring test on the fields): the columns are built and tokenized,
    # and an HTML part turned into text, only for a message that may match
    answers: dict[str, tuple[bool, dict[str, str]]] = {}
    second: list[dict[str, Any]] = []
    for message in wanted:
        body = bodies.get(message["_id"])
        if body is None:  # an interrupted store: no body, no hit
            continue
        if body.get("spill"):
            second.append(message)  # the text is in body.json: read with the HTML below
            continue
        html_unread = reads_html and html_key(message) is not None and html_key(message) not in data
        haystacks = search_haystacks(message, body, "")
        if html_unread and not may(message, {**haystacks, "html": None}):
            continue  # no match whatever the HTML part holds
        if html_key(message) in data:
            second.append(message)  # its HTML part is in hand: tested with it below
            continue
        matched = False
        if may(message, haystacks):
            columns = search_columns(message, body, None, indexing.html_text)
            matched = test(message, columns)
            answers[message["_id"]] = (matched, columns)
        if html_unread and not (matched and monotone):
            second.append(message)
    if second:
        html_keys = {m["_id"]: k for m in second if (k := html_key(m)) is not None}
        spilled = {m["_id"]: bodies[m["_id"]]["spill"] for m in second if bodies[m["_id"]].get("spill")}
        data.update(await _read_blobs(ctx, [k for k in [*html_keys.values(), *spilled.values()] if k not in data]))
        for message in second:
            body = dict(bodies[message["_id"]])
            if spilled.get(message["_id"]) in data:
                body.update(json.loads(data[spilled[message["_id"]]].decode("utf-8")))
            raw_html = data.get(html_keys.get(message["_id"], ""))
            html = None if raw_html is None else raw_html.decode("utf-8", "replace")
            if not body.get("spill") and not may(message, search_haystacks(message, body, indexing.html_pieces(html))):
                answers.pop(message["_id"], None)
                continue
            columns = search_columns(message, body, html, indexing.html_text)
            answers[message["_id"]] = (test(message, columns), columns)
    out = []
    for message in window:
        found = answers.get(message["_id"])
        if found is not None and found[0]:
            out.append((message, found[1]))
    return out


async def _read_blobs(ctx: AsyncStoreContext, keys: list[str]) -> dict[str, bytes]:
    """Blobs by key, as many a read as the server's dialect names in one ``$in`` (``scan_in``)."""
    data: dict[str, bytes] = {}
    step = ctx.dialect.scan_in or max(1, len(keys))
    for i in range(0, len(keys), step):
        data.update(await indexing.read_blobs(ctx, keys[i : i + step]))
    return data
