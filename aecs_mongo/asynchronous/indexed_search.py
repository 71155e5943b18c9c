"""The search engines that ask an index: labels on ``messages``, the local index, ``$text``, Atlas.

Each is an ``AsyncSearchEngine`` (``search_engine.py``) bound to one store. The lookup of labels
answers a query of tags, flags, folders and ids alone from ``messages`` and their indexes,
exactly, whatever engine serves the words. The local index (``search_index=``, kept up by
``indexing.py``) answers any query. ``$text`` (on ``aecs_bodies_search``) and Atlas Search
answer what their compilers can express (``search_compile.text_search``/``atlas_search``), the
rest of the tree checked after them on the server.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from ..pure import search_query
from ..pure.keys import doc_id, thread_key
from ..pure.search_compile import (
    MongoSearch,
    atlas_search,
    label_hint,
    message_filter,
    mongo_pipeline,
    post_match,
    text_search,
)
from ..pure.search_query import Node
from ..search_index import MailboxIndex
from ..search_index.fts import compile_plan, rowid_for
from . import indexing
from .context import AsyncStoreContext, resolve, to_list
from .search_engine import HIT_FIELDS, Hits, hit_snippet, messages_of

__all__ = ["LabelLookup", "LocalIndex", "MongoSearchEngine"]


class LabelLookup:
    """A query of tags, flags, folders and ids (with threads and dates beside them) and no
    words: a find on ``messages`` newest first (``tag:x`` rides ``aecs_messages_tags``); the
    snippet is the start of the message's ``forAI``."""

    name = "messages"

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self.ctx = ctx

    def refusal(self, tree: Node) -> str | None:
        if message_filter(tree, _dt.datetime.now(_dt.UTC), thread_key) is None:
            return "the query has words: the labels of messages cannot answer it"
        return None

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
        ctx = self.ctx
        flt = message_filter(tree, now, thread_key)
        assert flt is not None
        clauses: list[dict[str, Any]] = [{"mailboxId": ctx.mailbox_id}, flt] if flt else [{"mailboxId": ctx.mailbox_id}]
        if after is not None:
            ts, key = after
            clauses.append({"$or": [{"ts": {"$lt": ts}}, {"ts": ts, "messageKey": {"$lt": key}}]})
        fields = {**HIT_FIELDS, "forAI": 1}
        found = ctx.messages.find({"$and": clauses}, fields).sort([("ts", -1), ("messageKey", -1)]).limit(limit)
        hint = label_hint(flt) if flt else None
        if hint is not None:  # tag:/folder: on their index (``label_hint``)
            found = found.hint(hint)
        results = Hits(self.name)
        async for message in found:
            results.add(message, search_query.snippet([message.get("forAI"), message.get("subject")], []), None)
        return results

    async def count(self, tree: Node, now: _dt.datetime) -> int:
        ctx = self.ctx
        flt = message_filter(tree, now, thread_key)
        assert flt is not None
        hint = label_hint(flt)
        selector = {"mailboxId": ctx.mailbox_id, **flt}
        if hint is not None:  # tag:/folder: on their index (``label_hint``)
            return int(await ctx.messages.count_documents(selector, hint=hint))
        return int(await ctx.messages.count_documents(selector))


class LocalIndex:
    """The local full-text index (SQLite FTS5), caught up with the store before each read."""

    name = "local"

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self.ctx = ctx

    def refusal(self, tree: Node) -> str | None:
        return None

    def _plan(self, index: MailboxIndex, tree: Node, now: _dt.datetime) -> Any:
        return compile_plan(
            tree,
            fts=index.fts,
            docs=index.docs,
            shared_view=self.ctx.settings.shared_view,
            now=now,
            thread_key_of=thread_key,
            labels=index.labels,
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
        """The index's page, each hit checked against the stored messages: an entry whose
        message is gone (deleted by a process that does not keep this index) is removed and the
        page filled from the next matches."""
        ctx = self.ctx
        index = await indexing.current(ctx)
        plan = self._plan(index, tree, now)
        results = Hits(self.name)
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
                    snippet = hit_snippet(tree, texts.get(rowid, {}), ctx.settings.shared_view, message)
                    results.add(message, snippet, score)
            if ranked:
                seen += len(rows) - len(gone)
            else:
                before = rows[-1][0]
            if len(rows) < want:
                break
        return results

    async def count(self, tree: Node, now: _dt.datetime) -> int:
        index = await indexing.current(self.ctx)
        return index.count(self._plan(index, tree, now))


class MongoSearchEngine:
    """``$text`` on ``aecs_bodies_search`` (``name="text"``) or Atlas Search (``"atlas"``): the
    part of the tree the server's full-text search expresses runs there, the rest (dates,
    threads, labels) as a ``$match`` after it; counts are the server's own."""

    def __init__(self, ctx: AsyncStoreContext, name: str) -> None:
        self.ctx = ctx
        self.name = name

    def _compiled(self, tree: Node) -> MongoSearch:
        return text_search(tree) if self.name == "text" else atlas_search(tree, self.ctx.mailbox_id)

    def refusal(self, tree: Node) -> str | None:
        compiled = self._compiled(tree)
        return compiled.reason if compiled.text is None else None

    def _first(self, tree: Node) -> tuple[MongoSearch, list[dict[str, Any]]]:
        compiled = self._compiled(tree)
        if self.name == "text":
            return compiled, [{"$match": {"mailboxId": self.ctx.mailbox_id, "$text": {"$search": compiled.text}}}]
        return compiled, [{"$search": compiled.text}]

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
        ctx = self.ctx
        compiled, first = self._first(tree)
        score = {"$meta": "textScore" if self.name == "text" else "searchScore"}
        post = post_match(compiled.post, now, thread_key)
        stages = mongo_pipeline(first, post, sort=sort, limit=limit, after=after, score=score)
        hits = await to_list(await resolve(ctx.bodies.aggregate(stages)))
        stored = await messages_of(ctx, hits)
        attached = await self._attachment_texts(tree, hits, stored)
        results = Hits(self.name)
        for hit in hits:
            message = stored.get(hit["_id"])
            if message is not None:
                columns = {
                    "clean": hit.get("clean"),
                    "subject": hit.get("subject"),
                    "attachmenttext": attached.get(hit["_id"]),
                }
                score_value = hit.get("score")
                score_of = None if score_value is None else float(score_value)
                results.add(message, hit_snippet(tree, columns, True, message), score_of)
        return results

    async def _attachment_texts(
        self, tree: Node, hits: list[dict[str, Any]], stored: dict[str, dict[str, Any]]
    ) -> dict[str, str]:
        """The attachments' text (the ``attachmenttext`` column) of the hits whose subject and
        clean text show none of the words but whose message has attachment text: those matched
        in an attachment, and their snippet names it. One read, for those hits only (the
        pipeline carries no attachment text through its sort)."""
        words = search_query.positive_words(tree)
        wanted = [
            hit["_id"]
            for hit in hits
            if any(a.get("textChars") for a in (stored.get(hit["_id"]) or {}).get("attachments") or ())
            and search_query.found_snippet([hit.get("subject"), hit.get("clean")], words) is None
        ]
        found: dict[str, str] = {}
        if not wanted:
            return found
        for selector in self.ctx.dialect.split_in(self.ctx.by_ids(wanted)):
            async for body in self.ctx.bodies.find(selector, {"attachmentTexts.text": 1}):
                texts = [str(t.get("text") or "") for t in body.get("attachmentTexts") or ()]
                found[body["_id"]] = search_query.ATTACHMENT_TEXT_SEPARATOR.join(texts)
        return found

    async def count(self, tree: Node, now: _dt.datetime) -> int:
        ctx = self.ctx
        compiled, first = self._first(tree)
        if self.name == "atlas" and not compiled.post:
            meta = [{"$searchMeta": {**compiled.text, "count": {"type": "total"}}}]
            found = await to_list(await resolve(ctx.bodies.aggregate(meta)))
            return int(found[0]["count"]["total"]) if found else 0
        post = post_match(compiled.post, now, thread_key)
        stages = mongo_pipeline(first, post, sort="date", limit=None, after=None, score={"$literal": None})
        found = await to_list(await resolve(ctx.bodies.aggregate([*stages, {"$count": "n"}])))
        return int(found[0]["n"]) if found else 0
