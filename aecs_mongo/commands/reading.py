"""The reads: ``inbox``, ``threads``, ``thread``, ``show``, ``with``, ``replies``, ``find``, ``search``,
``count``. ``inbox --query`` and ``threads --query`` page through a search: the messages that
match, newest first; the threads that hold them, by their newest match on the page."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from ..results import SearchResults
from ..types import SearchHit
from .base import (
    EXIT_USAGE,
    CliError,
    Context,
    JsonLines,
    Output,
    StatusLine,
    column,
    human_size,
    on_terminal,
    one_line,
    plural,
    sender,
    terminal_width,
)

__all__ = ["SHORT_ID", "count", "find", "inbox", "mailboxes", "replies", "search", "show", "thread", "threads", "with_"]

#: Hex digits of a thread key shown as a thread's short id (``thread`` takes 4 or more, like git).
SHORT_ID = 8
_MIN_PREFIX = 4
_HEX = re.compile(r"[0-9a-f]{4,64}")
_DATE = 16  # "2026-11-02 09:15"


def _when(ts: object) -> str:
    """A sort time as ``2026-11-02 09:15`` (UTC): the Date, or the fallback the store used."""
    try:
        return dt.datetime.fromtimestamp(int(ts), dt.UTC).strftime("%Y-%m-%d %H:%M")  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"


def short_id(thread_id: str) -> str:
    """A thread's short id: the first ``SHORT_ID`` hex digits of its thread key."""
    from ..pure.keys import thread_key

    return thread_key(thread_id)[:SHORT_ID]


def tag_label(tags: Sequence[str] | None, *, unread: bool = True) -> str:
    """A row's tags as the lines show them, notmuch-style: ``(unread flagged todo)``; ``unread``
    for mail without ``$seen``, the other flags without their ``$``; empty for read mail with no
    other tag. ``unread=False`` (a thread, whose tags are its messages' union): no ``unread``."""
    found = list(tags or ())
    shown = [] if "$seen" in found or not unread else ["unread"]
    shown += [t[1:] if t.startswith("$") else t for t in found if t != "$seen"]
    return f"({' '.join(shown)})" if shown else ""


def _with_label(text: object, tags: Sequence[str] | None, width: int, *, unread: bool = True) -> str:
    """``text`` and the tags after it in ``width`` cells: the text is cut first, the tags keep
    up to half the width."""
    label = tag_label(tags, unread=unread)
    if not label:
        return one_line(text, width)
    label = one_line(label, max(8, width // 2))
    return f"{one_line(text, max(1, width - len(label) - 1))} {label}"


def _message_lines(messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    width = terminal_width()
    who = max(12, min(30, (width - 20) // 3))
    about = max(10, width - _DATE - 2 - who - 2)
    for m in messages:
        yield f"{_when(m.get('ts')):{_DATE}}  {column(sender(m), who)}  {one_line(m.get('subject'), about)}"
        room = max(10, width - _DATE - 2)
        yield f"{'':{_DATE}}  " + one_line(f"<{m['messageId']}>  {tag_label(m.get('tags'))}".rstrip(), room)


def _next_line(cursor: str | None) -> str:
    return f"next_cursor: {cursor}" if cursor else "next_cursor: none (last page)"


def _trailer(cursor: str | None) -> dict[str, Any] | None:
    return {"next_cursor": cursor} if cursor else None


def _message_page(ctx: Context, messages: Sequence[Mapping[str, Any]], cursor: str | None) -> Output:
    notes = _empty_mailbox(ctx) if not messages and not getattr(ctx.args, "cursor", None) else ()
    return Output(
        JsonLines(messages, _trailer(cursor)), chain(_message_lines(messages), [_next_line(cursor)]), notes=notes
    )


def _empty_mailbox(ctx: Context) -> tuple[str, ...]:
    """A read that found nothing in a mailbox that is empty while the database has others: say
    so (a mistyped ``--mailbox`` is otherwise an empty page)."""
    mailbox = ctx.store.mailbox_id
    if ctx.store.list_messages(limit=1).messages:  # the store's first page: windowed where that is cheaper
        return ()  # the mailbox has mail; this read just found none of it
    others = [m for m in ctx.database.mailboxes() if m != mailbox]
    if not others:
        return ()
    shown = ", ".join(repr(m) for m in sorted(others)[:5]) + (", ..." if len(others) > 5 else "")
    count = plural(len(others), "other mailbox", "other mailboxes")
    return (
        f"mailbox {mailbox!r} is empty; the database {ctx.database.name!r} has {count}: {shown}"
        " ('aecs-mongo mailboxes' lists them; --mailbox NAME reads one)",
    )


def mailboxes(ctx: Context) -> Output:
    """Every mailbox of the database with its counts (each count is one index count)."""
    found: list[dict[str, Any]] = []
    for name in ctx.database.mailboxes():
        messages, threads = ctx.database.counts(name)
        found.append({"mailboxId": name, "messages": messages, "threads": threads})

    def lines() -> Iterator[str]:
        if not found:
            yield f"no mailboxes: the database {ctx.database.name!r} holds no mail yet"
            return
        width = max(len("mailbox"), *(len(f["mailboxId"]) for f in found))
        yield f"{'mailbox':{width}}  {'messages':>9}  {'threads':>9}"
        for f in found:
            mark = "  (--mailbox)" if f["mailboxId"] == ctx.store.mailbox_id else ""
            yield f"{f['mailboxId']:{width}}  {f['messages']:>9,}  {f['threads']:>9,}{mark}"

    return Output(JsonLines(found), lines())


def inbox(ctx: Context) -> Output:
    if ctx.args.query is not None:
        if ctx.args.sender is not None:
            ctx.args.query = f"from:{ctx.args.sender} ({ctx.args.query})"
        results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor)
        trailer = {"next_cursor": results.next_cursor, "engine": results.engine}
        notes = _empty_mailbox(ctx) if not results and not ctx.args.cursor else ()
        lines = chain(_search_lines(results), [_next_line(results.next_cursor)])
        return Output(JsonLines(list(results), trailer), lines, notes=notes)
    page = ctx.store.list_messages(cursor=ctx.args.cursor, limit=ctx.args.limit, sender=ctx.args.sender)
    return _message_page(ctx, page.messages, page.next_cursor)


def threads(ctx: Context) -> Output:
    if ctx.args.query is not None:
        return _threads_of_search(ctx)
    page = ctx.store.list_threads(cursor=ctx.args.cursor, limit=ctx.args.limit)
    notes = _empty_mailbox(ctx) if not page.threads and not ctx.args.cursor else ()
    return _thread_page(page.threads, _trailer(page.next_cursor), page.next_cursor, notes)


def _thread_page(
    found: Sequence[Mapping[str, Any]], trailer: dict[str, Any] | None, cursor: str | None, notes: Sequence[str] = ()
) -> Output:
    def lines() -> Iterator[str]:
        width = terminal_width()
        about = max(10, width - _DATE - 2 - 8 - 2 - SHORT_ID - 2)
        for t in found:
            count = f"{t['messageCount']:>4} msg"
            subject = column(_with_label(t.get("subject"), t.get("tags"), about, unread=False), about)
            yield f"{_when(t['lastTs']):{_DATE}}  {count}  {subject}  {short_id(t['threadId'])}"
        yield _next_line(cursor)

    items = [{**t, "shortId": short_id(t["threadId"])} for t in found]
    return Output(JsonLines(items, trailer), lines(), notes=tuple(notes))


def _threads_of_search(ctx: Context) -> Output:
    """The threads of a page of hits, in the order of their newest hit on it (a thread whose
    matches span pages shows on each)."""
    results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor)
    order: list[str] = []
    for hit in results:
        if hit["threadId"] not in order:
            order.append(hit["threadId"])
    found = ctx.store.views.thread_summaries(order)
    trailer = {"next_cursor": results.next_cursor, "engine": results.engine}
    return _thread_page(found, trailer, results.next_cursor)


def _by_prefix(ctx: Context, prefix: str) -> str | None:
    """The threadId whose thread key starts with ``prefix`` (hex, 4 or more digits, as
    ``threads`` shows them); None when none does; a usage error listing the candidates when
    several do. One read on the ``_id`` index (an anchored prefix of ``<mailbox>:<key>``)."""
    if len(prefix) < _MIN_PREFIX or not _HEX.fullmatch(prefix):
        return None
    found = ctx.store.views.threads_by_prefix(prefix, 11)
    if len(found) == 1:
        return str(found[0]["threadId"])
    if not found:
        return None
    listed = "; ".join(f"{short_id(t['threadId'])} {one_line(t.get('subject'), 40)!r}" for t in found[:10])
    more = " and more" if len(found) > 10 else ""
    raise CliError(f"short thread id {prefix!r} is ambiguous: {listed}{more}; give more digits", EXIT_USAGE)


def thread(ctx: Context) -> Output:
    thread_id = ctx.args.id
    messages = ctx.store.thread_context(thread_id, limit=ctx.args.limit)
    if not messages:
        # a message id of the thread works too, and a thread's short id
        message = ctx.store.get_message(thread_id)
        found = message["threadId"] if message is not None else _by_prefix(ctx, thread_id.strip().lower())
        if found is not None:
            thread_id = found
            messages = ctx.store.thread_context(thread_id, limit=ctx.args.limit)
    if not messages:
        raise CliError(f"no thread and no message {ctx.args.id!r} in mailbox {ctx.args.mailbox!r}")

    def lines() -> Iterator[str]:
        for m in messages:
            yield f"[{m['position']}] {m.get('date') or _when(m.get('ts'))}  {sender(m)}  <{m['messageId']}>"
            if m.get("subject"):
                yield f"Subject: {m['subject']}"
            yield (m.get("forAI") or "").rstrip()
            yield ""

    return Output(JsonLines([{**m, "threadId": thread_id} for m in messages]), lines())


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
            size = human_size(a.get("size"))
            text = ", has text: extract --text" if a.get("extractedText") else ""
            yield f"Attachment: {a.get('filename') or '(no name)'} ({a.get('contentType')}, {size}{text})"
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
    return _message_page(ctx, page.messages, page.next_cursor)


def replies(ctx: Context) -> Output:
    found = ctx.store.replies_to(ctx.args.id)
    text = _message_lines(found) if found else ["no replies stored"]
    return Output(JsonLines(found), text)


def find(ctx: Context) -> Output:
    ids = ctx.store.find(ctx.args.header, ctx.args.value)
    return Output(JsonLines([{"messageId": i} for i in ids]), ids)


def _run_search(ctx: Context, query: str, *, cursor: str | None = None, sort: str = "date") -> SearchResults[SearchHit]:
    progress = _SearchProgress(ctx) if on_terminal() and not ctx.json else None
    try:
        return ctx.store.search(query, limit=ctx.args.limit, progress=progress, sort=sort, cursor=cursor)
    finally:
        if progress is not None:
            progress.close()


def search(ctx: Context) -> Output:
    results = _run_search(ctx, ctx.args.query, cursor=ctx.args.cursor, sort=ctx.args.sort)
    trailer = {"engine": results.engine, "examined": results.examined, "complete": results.complete}
    trailer["next_cursor"] = results.next_cursor
    notes = _empty_mailbox(ctx) if not results and not ctx.args.cursor else ()
    more = [f"next_cursor: {results.next_cursor}"] if results.next_cursor else []
    return Output(JsonLines(list(results), trailer), chain(_search_lines(results), more), notes=notes)


def count(ctx: Context) -> Output:
    found = ctx.store.count(ctx.args.query)
    return Output({"query": ctx.args.query, "count": found}, [str(found)])


def _search_lines(results: SearchResults[SearchHit]) -> Iterator[str]:
    width = terminal_width()
    for r in results:
        when = dt.datetime.fromtimestamp(int(r.get("ts") or 0), dt.UTC).strftime("%Y-%m-%d")
        mid = f"<{r.get('messageId')}>"
        about = max(20, min(60, width - 10 - 4 - len(mid)))  # the id is kept whole
        yield f"{when}  {column(_with_label(r.get('subject'), r.get('tags'), about), about)}  {mid}"
        if r.get("snippet"):
            yield f"            {one_line(r['snippet'], max(20, min(100, width - 12)))}"
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
            self.total = self.ctx.store.views.message_count()
        self.show(f"searched {examined:,} of {self.total:,}", force=examined >= self.total)
