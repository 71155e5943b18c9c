"""The reads: ``inbox``, ``threads``, ``thread``, ``show``, ``with``, ``replies``, ``find``, ``search``,
``count``. ``inbox --query`` and ``threads --query`` page through a search: the messages that
match, newest first; the threads that hold them, by their newest match on the page."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from ..results import SearchResults
from ..types import SearchHit
from .base import EXIT_USAGE, CliError, Context, Handlers, Output, StatusLine, column, on_terminal, one_line, sender

__all__ = ["HANDLERS"]


def _message_lines(messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    for m in messages:
        yield f"{m.get('date') or '-':20}  {column(sender(m), 36)}  {one_line(m.get('subject'), 50)}"
        yield f"{'':20}  <{m['messageId']}>"


def _next_line(cursor: str | None) -> str:
    return f"next_cursor: {cursor}" if cursor else "next_cursor: none (last page)"


def _message_page(messages: Sequence[Mapping[str, Any]], cursor: str | None) -> Output:
    return Output({"messages": messages, "next_cursor": cursor}, chain(_message_lines(messages), [_next_line(cursor)]))


def inbox(ctx: Context) -> Output:
    if ctx.args.query is not None:
        if ctx.args.sender is not None:
            ctx.args.query = f"from:{ctx.args.sender} ({ctx.args.query})"
        results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor)
        data = {"messages": results, "next_cursor": results.next_cursor, "engine": results.engine}
        return Output(data, chain(_search_lines(results), [_next_line(results.next_cursor)]))
    page = ctx.store.list_messages(cursor=ctx.args.cursor, limit=ctx.args.limit, sender=ctx.args.sender)
    return _message_page(page.messages, page.next_cursor)


def threads(ctx: Context) -> Output:
    if ctx.args.query is not None:
        return _threads_of_search(ctx)
    page = ctx.store.list_threads(cursor=ctx.args.cursor, limit=ctx.args.limit)
    return Output(
        {"threads": page.threads, "next_cursor": page.next_cursor}, _thread_lines(page.threads, page.next_cursor)
    )


def _thread_lines(found: Sequence[Mapping[str, Any]], cursor: str | None) -> Iterator[str]:
    for t in found:
        last = dt.datetime.fromtimestamp(t["lastTs"], dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        yield f"{last:20}  {t['messageCount']:4d} msg  {column(t.get('subject'), 50)}  {t['threadId']}"
    yield _next_line(cursor)


def _threads_of_search(ctx: Context) -> Output:
    """The threads of a page of hits, in the order of their newest hit on it (a thread whose
    matches span pages shows on each)."""
    results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor)
    order: list[str] = []
    for hit in results:
        if hit["threadId"] not in order:
            order.append(hit["threadId"])
    from ..pure.keys import doc_id, thread_key

    ids = [doc_id(ctx.store.mailbox_id, thread_key(t)) for t in order]
    fields = {"_id": 0, "threadId": 1, "subject": 1, "messageCount": 1, "firstTs": 1, "lastTs": 1}
    fields |= {"firstMessageKey": 1, "lastMessageKey": 1}
    summaries = {t["threadId"]: t for t in ctx.db["threads"].find({"_id": {"$in": ids}}, fields)} if ids else {}
    found = [summaries[t] for t in order if t in summaries]
    data = {"threads": found, "next_cursor": results.next_cursor, "engine": results.engine}
    return Output(data, _thread_lines(found, results.next_cursor))


def thread(ctx: Context) -> Output:
    thread_id = ctx.args.id
    messages = ctx.store.thread_context(thread_id, limit=ctx.args.limit)
    if not messages:
        # a message id of the thread works too
        message = ctx.store.get_message(thread_id)
        if message is not None:
            thread_id = message["threadId"]
            messages = ctx.store.thread_context(thread_id, limit=ctx.args.limit)
    if not messages:
        raise CliError(f"no thread and no message {ctx.args.id!r} in mailbox {ctx.args.mailbox!r}")

    def lines() -> Iterator[str]:
        for m in messages:
            yield f"[{m['position']}] {m.get('date') or '-'}  {sender(m)}  <{m['messageId']}>"
            if m.get("subject"):
                yield f"Subject: {m['subject']}"
            yield (m.get("forAI") or "").rstrip()
            yield ""

    return Output({"threadId": thread_id, "messages": messages}, lines())


def show(ctx: Context) -> Output:
    mid = ctx.args.id
    if ctx.args.raw or ctx.args.html:
        if ctx.json:
            raise CliError("--raw and --html print the content itself; leave out --json", EXIT_USAGE)
        if ctx.args.raw:
            copies = ctx.store.get_raw_variants(mid)
            if not 0 <= ctx.args.variant < max(len(copies), 1):
                raise CliError(f"message {mid!r} has {len(copies)} copies stored (--variant 0 to {len(copies) - 1})")
            if not copies:
                raise CliError(_absent(ctx, mid, "raw.eml"))
            return Output(content=copies[ctx.args.variant])
        html = ctx.store.get_html(mid)
        if html is None:
            raise CliError(_absent(ctx, mid, "HTML body"))
        return Output(content=html)
    message = ctx.store.get_message(mid)
    if message is None:
        raise CliError(f"no message {mid!r} in mailbox {ctx.args.mailbox!r}")

    def lines() -> Iterator[str]:
        meta: Mapping[str, Any] = message.get("metadata") or {}

        def addresses(items: Sequence[Mapping[str, Any]]) -> str:
            return ", ".join(sender({"from": a}) for a in items)

        yield f"Message-ID: <{message['messageId']}>"
        yield f"Thread:     {message['threadId']}"
        yield f"From:       {sender({'from': meta.get('from')})}"
        for key in ("to", "cc", "bcc"):
            if meta.get(key):
                yield f"{key.capitalize() + ':':11} {addresses(meta[key])}"
        yield f"Subject:    {meta.get('subject') or ''}"
        yield f"Date:       {meta.get('date') or '-'}"
        for a in message.get("attachments") or ():
            yield f"Attachment: {a.get('filename') or '(no name)'} ({a.get('contentType')}, {a.get('size')} bytes)"
        yield ""
        content: Mapping[str, Any] = message.get("content") or {}
        yield (content.get("text") or content.get("clean") or "").rstrip()

    return Output(message, lines())


def _absent(ctx: Context, mid: str, what: str) -> str:
    if ctx.store.get_message(mid) is None:
        return f"no message {mid!r} in mailbox {ctx.args.mailbox!r}"
    return f"message {mid!r} has no {what} stored"


def with_(ctx: Context) -> Output:
    page = ctx.store.with_participant(ctx.args.address, cursor=ctx.args.cursor, limit=ctx.args.limit)
    return _message_page(page.messages, page.next_cursor)


def replies(ctx: Context) -> Output:
    found = ctx.store.replies_to(ctx.args.id)
    text = _message_lines(found) if found else ["no replies stored"]
    return Output({"messageId": ctx.args.id.strip().strip("<>"), "replies": found}, text)


def find(ctx: Context) -> Output:
    ids = ctx.store.find(ctx.args.header, ctx.args.value)
    return Output({"header": ctx.args.header, "value": ctx.args.value, "messageIds": ids}, ids)


def _run_search(ctx: Context, query: str, *, cursor: str | None = None, sort: str = "date") -> SearchResults[SearchHit]:
    progress = _SearchProgress(ctx) if on_terminal() and not ctx.json else None
    try:
        return ctx.store.search(query, limit=ctx.args.limit, progress=progress, sort=sort, cursor=cursor)
    finally:
        if progress is not None:
            progress.close()


def search(ctx: Context) -> Output:
    results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor, sort=ctx.args.sort)
    data = {
        "query": ctx.args.query,
        "results": results,
        "engine": results.engine,
        "examined": results.examined,
        "complete": results.complete,
        "next_cursor": results.next_cursor,
    }
    more = [f"next_cursor: {results.next_cursor}"] if results.next_cursor else []
    return Output(data, chain(_search_lines(results), more))


def count(ctx: Context) -> Output:
    found = ctx.store.count(ctx.args.query)
    return Output({"query": ctx.args.query, "count": found}, [str(found)])


def _search_lines(results: SearchResults[SearchHit]) -> Iterator[str]:
    for r in results:
        when = dt.datetime.fromtimestamp(int(r.get("ts") or 0), dt.UTC).strftime("%Y-%m-%d")
        yield f"{when}  {column(r.get('subject'), 60)}  <{r.get('messageId')}>"
        if r.get("snippet"):
            yield f"            {one_line(r['snippet'], 100)}"
    summary = f"{len(results)} match{'' if len(results) == 1 else 'es'}" if results else "no matches"
    if results.engine == "scan":
        summary += f" ({results.examined:,} messages searched{'' if results.complete else ', stopped by scan_limit'})"
    yield summary


class _SearchProgress(StatusLine):
    """``searched 40,000 of 100,000`` on stderr while a scan search runs (terminal only)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(enabled=True)
        self.ctx = ctx
        self.total: int | None = None

    def __call__(self, examined: int) -> None:
        if self.total is None:  # counted once, on the first window: only a scan reports progress
            self.total = self.ctx.db["messages"].count_documents({"mailboxId": self.ctx.store.mailbox_id})
        self.show(f"searched {examined:,} of {self.total:,}", force=examined >= self.total)


HANDLERS: Handlers = {
    "inbox": inbox,
    "threads": threads,
    "thread": thread,
    "show": show,
    "with": with_,
    "replies": replies,
    "find": find,
    "search": search,
    "count": count,
}
