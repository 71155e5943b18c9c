"""The scan: every message of the mailbox read newest first and the tree matched here.

The engine of last resort: it needs no index, so it answers on any server, and it is what
``search_engine="auto"`` falls back to where the store has no local index and the server no text
index (with a warning, once per store, that says how to do better). It reads the messages in
windows, tests each with ``search_query.may_match`` (substrings, no tokens) before
``search_query.matches``, reads a body or an HTML part only where the answer may depend on it,
and, on a long walk for rare words, asks the server once for the bodies that may hold them.
``scan_limit`` caps the messages one search examines (the page says it is not complete then).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..pure import queries, search_query
from ..pure.keys import doc_id, thread_key
from ..pure.search_compile import body_prefilter, prefiltered_haystacks, search_columns, search_haystacks
from ..pure.search_query import Node
from ..pure.tags import row_tags
from . import indexing, paging
from .context import AsyncStoreContext, log, to_list
from .search_engine import Hits, hit_snippet

__all__ = ["Scan"]

_SCAN_MESSAGE_FIELDS = {**queries.SEARCH_WINDOW_PROJECTION, "threadId": 1, "threadKey": 1, "from": 1}
_SCAN_MESSAGE_FIELDS |= {"tags": 1, "folders": 1}
_SCAN_MESSAGE_FIELDS |= {"attachments": 1, "blobs": 1, "blobPrefix": 1, "participants": 1}
#: Messages a scan walks before it asks for the bodies that may hold its words
#: (``_bodies_passing``; a search that found its page by then never asks), the windows after
#: that, and the most bodies that prefilter may name (more: the walk reads every body).
_PREFILTER_AFTER = 200
_SCAN_CHUNK = 2_000
_PREFILTER_MAX = 100_000


class Scan:
    """The scan as an ``AsyncSearchEngine``. ``fallback``: the store asked for ``auto`` and has
    no other engine for the query, so the first search says so (``warn``)."""

    name = "scan"

    def __init__(self, ctx: AsyncStoreContext, *, fallback: bool = False) -> None:
        self.ctx = ctx
        self.fallback = fallback

    def refusal(self, tree: Node) -> str | None:
        return None

    def warn(self) -> None:
        """The warning of a store whose searches fall back to the scan (not one that asked for
        it): what to do about it, once per store."""
        if self.fallback and self.ctx.first_time("scan search"):
            log.warning(
                "search in mailbox %r reads every message (the scan: this server has no text index and the store"
                " no local index); for searches in milliseconds give the store a local full-text index:"
                " MessageStore(db, search_index=PATH), PATH a file it keeps (the command line does this itself)",
                self.ctx.mailbox_id,
            )

    async def search(
        self,
        tree: Node,
        limit: int,
        *,
        sort: str,
        after: tuple[int, str] | None,
        now: _dt.datetime,
        progress: Callable[[int], None] | None,
    ) -> Hits:
        """Every message newest first, the tree matched here, until ``limit`` hits (or
        ``scan_limit`` messages examined: then ``complete`` is False unless the page is full)."""
        ctx = self.ctx
        self.warn()
        results = Hits(self.name)

        async def take(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> bool:
            for message, columns in rows:
                results.add(message, hit_snippet(tree, columns, ctx.settings.shared_view, message), None)
                if len(results) >= limit:
                    return True
            return False

        cap = ctx.settings.scan_limit
        examined, capped = await _scan_walk(ctx, tree, after, now, progress, take, cap=cap, want=limit)
        results.examined = examined
        results.complete = not capped or len(results) >= limit
        return results

    async def count(self, tree: Node, now: _dt.datetime) -> int:
        """Every match: a complete walk, whatever ``scan_limit`` says."""
        self.warn()
        matched = 0

        async def take(rows: list[tuple[dict[str, Any], dict[str, str]]]) -> bool:
            nonlocal matched
            matched += len(rows)
            return False

        await _scan_walk(self.ctx, tree, None, now, None, take, cap=None, want=None)
        return matched


async def _scan_walk(
    ctx: AsyncStoreContext,
    tree: Node,
    after: tuple[int, str] | None,
    now: _dt.datetime,
    progress: Callable[[int], None] | None,
    take: Callable[[list[Any]], Awaitable[bool]],
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
        if await take(matched) or capped:
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
            "thread_key_of": thread_key,
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
