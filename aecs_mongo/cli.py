"""``aecs-mongo``: store mail in MongoDB and read it back from the command line.

Global options (before or after the command): ``--uri`` (default ``$MONGODB_URI``), ``--db``
(default ``aecs``), ``--mailbox`` (default ``default``), ``--data-dir`` (default ``./aecs-data``),
``--keep-server`` (default ``$AECS_KEEP_SERVER`` or ``5m``) and ``--json``. Without a URI the
embedded SecantusDB server of ``--data-dir`` (kept between runs) is used: the one already running
in the background for that directory, or a new one that keeps running after the command and stops
by itself once unused for ``--keep-server`` (:mod:`aecs_mongo.background`; ``server status|stop|
start`` manage it). ``--keep-server 0`` starts a server of the command's own, stopped when the
command ends, also on Ctrl-C, SIGTERM or an error. It needs ``pip install 'aecs-mongo[embedded]'``.

Exit codes: 0 success; 1 the command ran but something failed (an input that could not be
stored, a message that is not there, a database error); 2 usage errors (bad options, no
embedded server installed, a feature this version lacks); 130 interrupted.

``ingest`` reads its inputs with :mod:`aecs_mongo.sources` (``.eml`` files, directories, Maildir
folders, mboxrd mbox files, streamed; the decisions are in its docstring) and prints that module's
``IngestReport``:

- A failure is an input that is not stored: what ``sources`` skips (unreadable, empty, not
  mail, stray bytes before the first ``From `` line of an mbox) and a message the store refuses
  (too large, unstorable). Every failure is listed with its input (the file, or the mbox file
  with the message number and byte offset) and its reason. Messages already in the mailbox (same
  Message-ID) count as "already present", not as failures.
- Exit code 0 when every message was stored or already present, 1 when anything failed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, NoReturn

from .errors import AecsMongoError
from .mail.sources import IngestReport, InputFile, RawMessage, Skipped, find_inputs, read_inputs

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_MAX_LIMIT = 1000


class CliError(Exception):
    """A failure to report as ``aecs-mongo: error: ...`` with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# --- output -----------------------------------------------------------------------------------


def _json_default(value: object) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def _out() -> IO[str]:
    return sys.stdout


def _err() -> IO[str]:
    return sys.stderr


def _say(text: str = "") -> None:
    print(text, file=_out())


def _note(text: str) -> None:
    # on a terminal, first clear a progress line the note would otherwise be appended to
    clear = "\r\x1b[K" if _err().isatty() else ""
    print(f"{clear}aecs-mongo: {text}", file=_err())


def _emit_json(data: object) -> None:
    json.dump(data, _out(), default=_json_default, ensure_ascii=False, indent=2)
    _out().write("\n")


def _sender(message: dict[str, Any]) -> str:
    sender = message.get("from")
    if not sender:
        return "?"
    name, address = sender.get("name"), sender.get("email") or "?"
    return f"{name} <{address}>" if name else str(address)


def _char_cells(char: str) -> int:
    """Terminal cells of one character: wide and fullwidth (CJK) take two, combining marks and
    zero-width format characters none, the rest one (ambiguous-width ones too, as most terminals
    outside East Asian locales draw them)."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _cells(text: str) -> int:
    return sum(_char_cells(c) for c in text)


def _one_line(text: object, width: int) -> str:
    """``text`` on one line, at most ``width`` terminal cells (cut with an ellipsis)."""
    flat = " ".join(str(text or "").split())
    if _cells(flat) <= width:
        return flat
    kept, used = [], 0
    for char in flat:
        cells = _char_cells(char)
        if used + cells > width - 1:  # room for the ellipsis
            break
        kept.append(char)
        used += cells
    return "".join(kept) + "…"


def _column(text: object, width: int) -> str:
    """``_one_line`` padded to exactly ``width`` cells, so the next column lines up."""
    line = _one_line(text, width)
    return line + " " * (width - _cells(line))


# --- arguments --------------------------------------------------------------------------------


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= _MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {_MAX_LIMIT}")
    return value


def _duration(text: str) -> float:
    from .embedded.background import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes; sub-parsers get them without defaults (SUPPRESS), so
    they can be given before or after the command without one position overriding the other."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--uri",
        default=default(os.environ.get("MONGODB_URI")),
        help="MongoDB URI (default: $MONGODB_URI; none: start the embedded server)",
    )
    group.add_argument("--db", default=default("aecs"), help="database name (default: aecs)")
    group.add_argument("--mailbox", default=default("default"), help="mailbox id (default: default)")
    group.add_argument(
        "--data-dir",
        default=default("./aecs-data"),
        help="data directory of the embedded server, kept between runs (default: ./aecs-data)",
    )
    group.add_argument(
        "--keep-server",
        type=_duration,
        default=default(os.environ.get("AECS_KEEP_SERVER") or "5m"),
        metavar="DURATION",
        help="keep the embedded server running in the background this long after the last command"
        " (90s, 5m, 1h; 0: stop it with the command; default: $AECS_KEEP_SERVER or 5m)",
    )
    group.add_argument(
        "--json", action="store_true", default=default(False), help="print one JSON document instead of text"
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="show the normalizer's warnings about odd mail",
    )


@dataclass
class Context:
    """What a command handler gets: the parsed arguments and an open store."""

    args: argparse.Namespace
    store: Any
    db: Any

    @property
    def json(self) -> bool:
        return bool(self.args.json)


Handler = Callable[[Context], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    handler: Handler
    configure: Callable[[argparse.ArgumentParser], None]


def _page_options(parser: argparse.ArgumentParser, default_limit: int = 20) -> None:
    parser.add_argument(
        "--limit", type=_limit, default=default_limit, help=f"page size (default: {default_limit}, at most 1000)"
    )
    parser.add_argument("--cursor", default=None, help="continue after a page: the next_cursor it printed")


# --- ingest -------------------------------------------------------------------------------------


class StatusLine:
    """One line of progress on stderr, redrawn at most every 0.1 s (``force``: now), and only
    when ``enabled`` (stderr is a terminal); ``close`` clears it. Every command's progress uses it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0
        self._shown = False

    def due(self, *, force: bool = False) -> bool:
        """Whether a redraw now would be shown (callers skip building the text otherwise)."""
        return self.enabled and (force or not self._shown or time.monotonic() - self._last >= 0.1)

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.due(force=force):
            return
        self._last = time.monotonic()
        _err().write("\r\x1b[K" + text)
        _err().flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            _err().write("\r\x1b[K")
            _err().flush()
            self._shown = False


class Progress(StatusLine):
    """The ingest's progress line: percent of the input, messages, what happened to them."""

    def __init__(self, total_messages: int | None, total_bytes: int, enabled: bool) -> None:
        super().__init__(enabled)
        self.total_messages = total_messages
        self.total_bytes = total_bytes
        self.bytes_done = 0

    def update(self, report: IngestReport, *, force: bool = False) -> None:
        if not self.due(force=force):
            return
        parts = []
        if self.total_bytes:
            parts.append(f"{min(100, 100 * self.bytes_done // self.total_bytes):3d}%")
        count = f"{report.processed}" + (f"/{self.total_messages}" if self.total_messages is not None else "")
        parts.append(f"{count} messages")
        parts.append(f"{report.stored} stored, {report.present} present, {len(report.failures)} failed")
        self.show("ingest " + " | ".join(parts), force=True)


def _with_progress(
    items: Iterator[RawMessage | Skipped], report: IngestReport, progress: Progress
) -> Iterator[RawMessage | Skipped]:
    for item in items:
        progress.bytes_done += item.size
        yield item
        progress.update(report)


def _until(items: Iterator[bytes], stop: _StopRequest) -> Iterator[bytes]:
    """``items`` until a stop is requested; checked before reading the next one, so nothing is
    read (and labelled as handed to the store) that will not be stored."""
    while not stop.requested:
        item = next(items, None)
        if item is None:
            return
        yield item


def _ingest(ctx: Context) -> int:
    args = ctx.args
    started = time.monotonic()
    report = IngestReport()
    inputs = list(find_inputs(args.paths))  # listed first: the progress line shows totals
    files = [i for i in inputs if isinstance(i, InputFile)]
    total = (
        None
        if any(f.kind == "mbox" for f in files)
        else sum(not i.ignored if isinstance(i, Skipped) else 1 for i in inputs)
    )
    progress = Progress(total, sum(f.size for f in files), enabled=_err().isatty() and not args.no_progress)
    ctx.store.ensure_indexes()
    items = report.track(_with_progress(read_inputs(inputs), report, progress))
    try:
        with _finish_in_hand_on_interrupt() as stop:
            for result in ctx.store.store_iter(
                _until(items, stop), batch_size=args.batch_size, on_error=report.refused
            ):
                report.count(result)
                progress.update(report)
        report.interrupted = stop.requested
    except KeyboardInterrupt:
        report.interrupted = True
    except Exception as exc:  # a database error: report what was done, then fail
        report.aborted = f"{type(exc).__name__}: {exc}"
    finally:
        items.close()
        progress.update(report, force=True)
        progress.close()
    report.seconds = time.monotonic() - started
    if ctx.json:
        _emit_json(report.as_dict())
    else:
        for line in report.lines():
            _say(line)
    if report.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if report.failures or report.aborted else EXIT_OK


def _configure_ingest(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help=".eml files, directories, Maildir folders or mbox files")
    p.add_argument(
        "--batch-size", type=_limit, default=100, help="messages per write batch (default: 100, at most 1000)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")
    p.add_argument(
        "--owner",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="the mailbox owner's address (repeatable): bcc is stored only on mail they sent",
    )


# --- reading --------------------------------------------------------------------------------------


def _print_messages(messages: Sequence[dict[str, Any]]) -> None:
    for m in messages:
        _say(f"{m.get('date') or '-':20}  {_column(_sender(m), 36)}  {_one_line(m.get('subject'), 50)}")
        _say(f"{'':20}  <{m['messageId']}>")


def _print_next(cursor: str | None) -> None:
    _say(f"next_cursor: {cursor}" if cursor else "next_cursor: none (last page)")


def _page_json(key: str, items: list[dict[str, Any]], cursor: str | None) -> dict[str, Any]:
    return {key: items, "next_cursor": cursor}


def _inbox(ctx: Context) -> int:
    page = ctx.store.list_messages(cursor=ctx.args.cursor, limit=ctx.args.limit, sender=ctx.args.sender)
    if ctx.json:
        _emit_json(_page_json("messages", page.messages, page.next_cursor))
    else:
        _print_messages(page.messages)
        _print_next(page.next_cursor)
    return EXIT_OK


def _configure_inbox(p: argparse.ArgumentParser) -> None:
    _page_options(p)
    p.add_argument("--sender", default=None, help="only mail from this address")


def _threads(ctx: Context) -> int:
    page = ctx.store.list_threads(cursor=ctx.args.cursor, limit=ctx.args.limit)
    if ctx.json:
        _emit_json(_page_json("threads", page.threads, page.next_cursor))
    else:
        for t in page.threads:
            last = dt.datetime.fromtimestamp(t["lastTs"], dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            _say(f"{last:20}  {t['messageCount']:4d} msg  {_column(t.get('subject'), 50)}  {t['threadId']}")
        _print_next(page.next_cursor)
    return EXIT_OK


def _thread(ctx: Context) -> int:
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
    if ctx.json:
        _emit_json({"threadId": thread_id, "messages": messages})
        return EXIT_OK
    for m in messages:
        _say(f"[{m['position']}] {m.get('date') or '-'}  {_sender(m)}  <{m['messageId']}>")
        if m.get("subject"):
            _say(f"Subject: {m['subject']}")
        _say((m.get("forAI") or "").rstrip())
        _say()
    return EXIT_OK


def _configure_thread(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="thread id (or the Message-ID of any message in the thread)")
    p.add_argument("--limit", type=_limit, default=20, help="the newest N messages (default: 20)")


def _show(ctx: Context) -> int:
    mid = ctx.args.id
    if ctx.args.raw or ctx.args.html:
        if ctx.json:
            raise CliError("--raw and --html print the content itself; leave out --json", EXIT_USAGE)
        if ctx.args.raw:
            copies = ctx.store.get_raw_variants(mid)
            if not 0 <= ctx.args.variant < max(len(copies), 1):
                raise CliError(f"message {mid!r} has {len(copies)} copies stored (--variant 0 to {len(copies) - 1})")
            raw = copies[ctx.args.variant] if copies else None
            if raw is None:
                raise CliError(_absent(ctx, mid, "raw.eml"))
            _out().flush()
            buffer = getattr(_out(), "buffer", None)
            if buffer is None:
                raise CliError("stdout takes no bytes here; use a terminal or a pipe", EXIT_USAGE)
            buffer.write(raw)
            buffer.flush()
            return EXIT_OK
        html = ctx.store.get_html(mid)
        if html is None:
            raise CliError(_absent(ctx, mid, "HTML body"))
        _out().write(html)
        return EXIT_OK
    message = ctx.store.get_message(mid)
    if message is None:
        raise CliError(f"no message {mid!r} in mailbox {ctx.args.mailbox!r}")
    if ctx.json:
        _emit_json(message)
        return EXIT_OK
    meta = message.get("metadata") or {}

    def addresses(items: Sequence[dict[str, Any]]) -> str:
        return ", ".join(_sender({"from": a}) for a in items)

    _say(f"Message-ID: <{message['messageId']}>")
    _say(f"Thread:     {message['threadId']}")
    _say(f"From:       {_sender({'from': meta.get('from')})}")
    for key in ("to", "cc", "bcc"):
        if meta.get(key):
            _say(f"{key.capitalize() + ':':11} {addresses(meta[key])}")
    _say(f"Subject:    {meta.get('subject') or ''}")
    _say(f"Date:       {meta.get('date') or '-'}")
    for a in message.get("attachments") or ():
        _say(f"Attachment: {a.get('filename') or '(no name)'} ({a.get('contentType')}, {a.get('size')} bytes)")
    _say()
    content = message.get("content") or {}
    _say((content.get("text") or content.get("clean") or "").rstrip())
    return EXIT_OK


def _absent(ctx: Context, mid: str, what: str) -> str:
    if ctx.store.get_message(mid) is None:
        return f"no message {mid!r} in mailbox {ctx.args.mailbox!r}"
    return f"message {mid!r} has no {what} stored"


def _configure_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="Message-ID, with or without <>")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--raw", action="store_true", help="write the message exactly as received (raw.eml bytes)")
    p.add_argument(
        "--variant",
        type=int,
        default=0,
        metavar="N",
        help="with --raw: copy N as received (0: the first; 1...: other bytes that came under the same Message-ID)",
    )
    what.add_argument("--html", action="store_true", help="write the HTML body")


def _with(ctx: Context) -> int:
    page = ctx.store.with_participant(ctx.args.address, cursor=ctx.args.cursor, limit=ctx.args.limit)
    if ctx.json:
        _emit_json(_page_json("messages", page.messages, page.next_cursor))
    else:
        _print_messages(page.messages)
        _print_next(page.next_cursor)
    return EXIT_OK


def _configure_with(p: argparse.ArgumentParser) -> None:
    p.add_argument("address", metavar="ADDRESS", help="an email address (from, to, cc)")
    _page_options(p)


def _replies(ctx: Context) -> int:
    replies = ctx.store.replies_to(ctx.args.id)
    if ctx.json:
        _emit_json({"messageId": ctx.args.id.strip().strip("<>"), "replies": replies})
    else:
        _print_messages(replies)
        if not replies:
            _say("no replies stored")
    return EXIT_OK


def _find(ctx: Context) -> int:
    ids = ctx.store.find(ctx.args.header, ctx.args.value)
    if ctx.json:
        _emit_json({"header": ctx.args.header, "value": ctx.args.value, "messageIds": ids})
    else:
        for mid in ids:
            _say(mid)
    return EXIT_OK


def _configure_find(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "header",
        metavar="HEADER",
        help="Subject, From, To (To and Cc), Date (YYYY-MM-DD), In-Reply-To, References, or List-Id",
    )
    p.add_argument("value", metavar="VALUE", help="the value, normalized like the stored one")


def _search(ctx: Context) -> int:
    search = getattr(ctx.store, "search", None)
    if search is None:
        raise CliError("search is not available in this version of aecs-mongo", EXIT_USAGE)
    progress = _SearchProgress(ctx) if _err().isatty() and not ctx.json else None
    try:
        results = search(ctx.args.query, limit=ctx.args.limit, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    complete = bool(getattr(results, "complete", True))
    examined = int(getattr(results, "examined", 0))
    engine = str(getattr(results, "engine", ""))
    if ctx.json:
        _emit_json(
            {
                "query": ctx.args.query,
                "results": results,
                "engine": engine,
                "examined": examined,
                "complete": complete,
            }
        )
        return EXIT_OK
    for r in results:
        when = dt.datetime.fromtimestamp(int(r.get("ts") or 0), dt.UTC).strftime("%Y-%m-%d")
        _say(f"{when}  {_column(r.get('subject'), 60)}  <{r.get('messageId')}>")
        if r.get("snippet"):
            _say(f"            {_one_line(r['snippet'], 100)}")
    summary = f"{len(results)} match{'' if len(results) == 1 else 'es'}" if results else "no matches"
    if engine == "scan":
        summary += f" ({examined:,} messages searched{'' if complete else ', stopped by scan_limit'})"
    _say(summary)
    return EXIT_OK


class _SearchProgress(StatusLine):
    """``searched 40,000 of 100,000`` on stderr while a scan search runs (terminal only)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(enabled=True)
        self.ctx = ctx
        self.total: int | None = None

    def __call__(self, examined: int) -> None:
        if self.total is None:  # counted once, on the first window: only a scan reports progress
            self.total = int(self.ctx.store.stats()["messages"])
        self.show(f"searched {examined:,} of {self.total:,}", force=examined >= self.total)


def _configure_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help="words to look for in message bodies")
    p.add_argument("--limit", type=_limit, default=20, help="at most N results (default: 20)")


def _delete(ctx: Context) -> int:
    deleted = bool(ctx.store.delete(ctx.args.id))
    if ctx.json:
        _emit_json({"messageId": ctx.args.id.strip().strip("<>"), "deleted": deleted})
    else:
        _say("deleted" if deleted else f"no message {ctx.args.id!r} in mailbox {ctx.args.mailbox!r}")
    return EXIT_OK if deleted else EXIT_FAILED


# --- export, retention, erasure ----------------------------------------------------------------------

_AGE_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _moment(text: str) -> dt.datetime:
    """``2024-01-31`` (midnight UTC) or an ISO 8601 time (UTC when it names no zone)."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD or ISO 8601): {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _age(text: str) -> dt.timedelta:
    """``365d``, ``52w``, ``2y`` (365 days), ``12h``."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit not in _AGE_UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"not an age like 365d, 52w, 2y or 12h: {text!r}")
    return dt.timedelta(seconds=int(number) * _AGE_UNITS[unit])


def _export(ctx: Context) -> int:
    from .mail.sinks import open_writer

    args = ctx.args
    started = time.monotonic()
    missing: list[str] = []
    messages: set[str] = set()
    try:
        writer = open_writer(args.format, args.out)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    line = StatusLine(_err().isatty() and not args.no_progress)
    interrupted = False
    try:
        with writer, _signals_as_interrupt():
            copies = ctx.store.export_raw(
                variants=args.variants, since=args.since, until=args.until, on_missing=missing.append
            )
            for copy in copies:
                writer.write(copy.data, ts=copy.ts, sender=copy.sender)
                messages.add(copy.message_id)
                if line.due():
                    line.show(f"export {writer.count} copies, {writer.bytes_written / 1e6:.1f} MB")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        line.close()
    seconds = time.monotonic() - started
    summary = {
        "format": args.format,
        "out": str(args.out),
        "messages": len(messages),
        "copies": writer.count,
        "bytes": writer.bytes_written,
        "withoutRaw": missing,
        "interrupted": interrupted,
        "seconds": round(seconds, 3),
    }
    if ctx.json:
        _emit_json(summary)
    else:
        for mid in missing:
            _say(f"not exported (no raw copy stored): <{mid}>")
        _say(
            f"exported {len(messages)} messages ({writer.count} copies, {writer.bytes_written / 1e6:.1f} MB) "
            f"as {args.format} to {args.out} in {seconds:.1f} s"
            + (f"; {len(missing)} without a raw copy" if missing else "")
            + ("; interrupted" if interrupted else "")
        )
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if missing else EXIT_OK


def _configure_export(p: argparse.ArgumentParser) -> None:
    from .mail.sinks import FORMATS

    p.add_argument("out", metavar="OUT", help="the mbox file (new) or the Maildir / .eml directory to write")
    p.add_argument("--format", choices=FORMATS, required=True, help="mbox (mboxrd), maildir, or eml (one file each)")
    p.add_argument("--variants", action="store_true", help="also every other copy kept under a stored Message-ID")
    p.add_argument("--since", type=_moment, default=None, help="only mail at or after this date (UTC if no zone)")
    p.add_argument("--until", type=_moment, default=None, help="only mail before this date (UTC if no zone)")
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")


def _removal_progress(verb: str) -> tuple[Callable[[Any], None], Callable[[], None]]:
    """A progress line on a terminal (documents removed so far) and how to clear it."""
    line = StatusLine(_err().isatty())

    def show(removed: Any) -> None:
        if line.due():
            line.show(f"{verb}: {removed.get('messages', 0)} messages, {sum(removed.values())} documents")

    return show, line.close


def _expire(ctx: Context) -> int:
    args = ctx.args
    before = args.before if args.before is not None else dt.datetime.now(dt.UTC) - args.older_than
    show, clear = _removal_progress("expire" + (" (dry run)" if args.dry_run else ""))
    try:
        with _signals_as_interrupt():
            report = ctx.store.expire(before, dry_run=args.dry_run, on_progress=show)
    finally:
        clear()
    if ctx.json:
        _emit_json(report.as_dict())
        return EXIT_OK
    verb = "would remove" if report.dry_run else "removed"
    _say(
        f"{verb} {report.messages} messages older than {_json_default(before)} ({report.blobs} blobs); "
        f"{report.threads_updated} thread summaries recomputed, {report.threads_removed} empty threads "
        f"{'to remove' if report.dry_run else 'removed'}, in {report.seconds:.1f} s"
    )
    return EXIT_OK


def _configure_expire(p: argparse.ArgumentParser) -> None:
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", type=_moment, default=None, help="remove mail dated before this (UTC if no zone)")
    when.add_argument("--older-than", type=_age, default=None, help="remove mail older than this: 365d, 52w, 2y, 12h")
    p.add_argument("--dry-run", action="store_true", help="count what would be removed; change nothing")


def _erase(ctx: Context) -> int:
    if not ctx.args.yes:
        raise CliError(
            f"erase removes every message of mailbox {ctx.args.mailbox!r} for good: add --yes to do it", EXIT_USAGE
        )
    show, clear = _removal_progress("erase")
    try:
        with _signals_as_interrupt():
            report = ctx.store.erase_mailbox(on_progress=show)
    finally:
        clear()
    if ctx.json:
        _emit_json(report.as_dict())
    else:
        _say(
            f"erased mailbox {ctx.args.mailbox!r}: {report.messages} messages, {report.blobs} blobs, "
            f"{report.total} documents in all, in {report.seconds:.1f} s"
            + (f"; {report.remaining} messages stored during the erase remain" if report.remaining else "")
        )
    return EXIT_FAILED if report.remaining else EXIT_OK


def _configure_erase(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="really erase the mailbox (required)")


def _id_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="Message-ID, with or without <>")


def _reindex(ctx: Context) -> int:
    ctx.store.ensure_indexes()
    report = ctx.store.reindex()
    if ctx.json:
        _emit_json(report)
    else:
        _say(", ".join(f"{k}: {v}" for k, v in report.items()))
    return EXIT_OK


def _indexes(ctx: Context) -> int:
    report = ctx.store.ensure_indexes()
    if ctx.json:
        _emit_json({"created": report.created, "existing": report.existing, "skipped": report.skipped, "ok": report.ok})
    else:
        _say(f"created:  {', '.join(report.created) or '-'}")
        _say(f"existing: {', '.join(report.existing) or '-'}")
        for name, reason in report.skipped.items():
            _say(f"skipped:  {name}: {reason}")
    return EXIT_OK if report.ok else EXIT_FAILED


def _storage(db: Any, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """Sizes of one collection: ``collStats``, else ``$collStats``, else None (and why)."""
    from pymongo.errors import PyMongoError

    keys = ("size", "storageSize", "totalIndexSize")
    try:
        stats = db.command({"collStats": name})
        return {k: stats.get(k) for k in keys}, "collStats"
    except PyMongoError as first:
        try:
            rows = list(db[name].aggregate([{"$collStats": {"storageStats": {}}}]))
            storage = rows[0].get("storageStats", {}) if rows else {}
            return {k: storage.get(k) for k in keys}, "$collStats"
        except PyMongoError:
            return None, str(first)


def _stats(ctx: Context) -> int:
    from .pure.blobs import prefix_filter
    from .pure.keys import blob_prefix

    mailbox = ctx.args.mailbox
    bucket = ctx.store.bucket_name
    existing = set(ctx.db.list_collection_names())
    mailbox_filters: dict[str, dict[str, Any]] = {
        "messages": {"mailboxId": mailbox},
        "bodies": {"mailboxId": mailbox},
        "threads": {"mailboxId": mailbox},
        "uidls": {"mailboxId": mailbox},
        f"{bucket}.files": {"metadata.mailboxId": mailbox},
        f"{bucket}.chunks": prefix_filter("files_id", blob_prefix(mailbox, "")[:-1]),
    }
    collections: dict[str, Any] = {}
    sources: set[str] = set()
    for name, selector in mailbox_filters.items():
        if name not in existing:
            collections[name] = {"mailbox": 0, "total": 0, "size": None, "storageSize": None, "totalIndexSize": None}
            continue
        sizes, source = _storage(ctx.db, name)
        entry: dict[str, Any] = {
            "mailbox": ctx.db[name].count_documents(selector),
            "total": ctx.db[name].estimated_document_count(),
        }
        entry.update(sizes or {"size": None, "storageSize": None, "totalIndexSize": None})
        if sizes is None:
            entry["sizeError"] = source
        elif source:
            sources.add(source)
        collections[name] = entry
    spec_versions: dict[str, int] = {}
    if "messages" in existing:
        pipeline: list[dict[str, Any]] = [
            {"$match": {"mailboxId": mailbox}},
            {"$group": {"_id": "$specVersion", "count": {"$sum": 1}}},
            {"$sort": {"_id": 1}},
        ]
        for row in ctx.db["messages"].aggregate(pipeline):
            spec_versions[str(row["_id"])] = int(row["count"])
    engines = ctx.store.stats() if hasattr(ctx.store, "stats") else {}
    data = {
        "database": ctx.db.name,
        "mailboxId": mailbox,
        "collections": collections,
        "sizesFrom": sorted(sources),
        "specVersions": spec_versions,
        "messages": engines.get("messages"),
        "threads": engines.get("threads"),
        "searchEngine": engines.get("search"),
        "vectorEngine": engines.get("vectorSearch"),
    }
    if ctx.json:
        _emit_json(data)
        return EXIT_OK
    _say(f"database {ctx.db.name!r}, mailbox {mailbox!r}")
    _say(f"{'collection':16} {'mailbox':>9} {'all':>9} {'data bytes':>12} {'storage':>12} {'indexes':>12}")
    for name, e in collections.items():

        def num(v: object) -> str:
            return "-" if v is None else str(v)

        _say(
            f"{name:16} {e['mailbox']:>9} {e['total']:>9} {num(e['size']):>12} {num(e['storageSize']):>12} "
            f"{num(e['totalIndexSize']):>12}"
        )
    if not sources:
        _say("sizes: the server reports none (collStats and $collStats unavailable)")
    _say("specVersion: " + (", ".join(f"{k}: {v}" for k, v in spec_versions.items()) or "-"))
    if engines:
        _say(
            f"{engines['messages']:,} messages, {engines['threads']:,} threads; search: {engines['search']}"
            f" ({_ENGINE_NOTES.get(engines['search'], '')}); vector search: {engines['vectorSearch']}"
            f" ({_ENGINE_NOTES.get(engines['vectorSearch'], '')})"
        )
    return EXIT_OK


_ENGINE_NOTES = {
    "atlas": "Atlas index",
    "text": "$text index",
    "scan": "no text index: reads the mailbox newest first until it has the hits",
    "exact": "no vector index: compares the stored vectors one by one",
}


# --- the POP3 pipeline (aecs_mongo.mailbox) --------------------------------------------------------


def _mailbox_module() -> Any:
    try:
        from .mail import pop3
    except ImportError as exc:  # pragma: no cover - ships with the package
        raise CliError(f"the POP3 pipeline is not available in this version: {exc}", EXIT_USAGE) from None
    return pop3


def _failed_pairs(failed: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"uidl": uidl, "reason": reason} for uidl, reason in failed]


def _pop3(ctx: Context) -> int:
    args = ctx.args
    mailbox = _mailbox_module()
    password = os.environ.get(args.password_env)
    if password is None:
        if not sys.stdin.isatty():
            raise CliError(f"no password: set ${args.password_env} (or run on a terminal to be asked)", EXIT_USAGE)
        import getpass

        password = getpass.getpass(f"POP3 password for {args.user}@{args.host}: ")
    port = args.port or (995 if args.security == "ssl" else 110)
    ctx.store.ensure_indexes()
    try:
        report = mailbox.download(
            ctx.store,
            args.host,
            port,
            args.user,
            password,
            security=args.security,
            delete_on_server=args.delete_on_server,
            timeout=args.timeout,
        )
    except mailbox.MailboxError as exc:
        raise CliError(f"POP3: {exc}") from None
    data = {
        "downloaded": report.downloaded,
        "skipped": report.skipped,
        "deletedOnServer": report.deleted_on_server,
        "failed": _failed_pairs(report.failed),
    }
    summary = (
        f"{report.downloaded} downloaded, {report.skipped} already stored, "
        f"{report.deleted_on_server} deleted on the server, {len(report.failed)} failed"
    )
    return _uidl_report(ctx, data, report.failed, summary)


def _uidl_report(ctx: Context, data: dict[str, Any], failed: list[tuple[str, str]], summary: str) -> int:
    """Print a POP3 or migration report (JSON, or each failed UIDL and a summary line)."""
    if ctx.json:
        _emit_json(data)
    else:
        for uidl, reason in failed:
            _say(f"failed: UIDL {uidl}: {reason}")
        _say(summary)
    return EXIT_FAILED if failed else EXIT_OK


def _configure_pop3(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", metavar="HOST", help="POP3 server host name")
    p.add_argument("--port", type=int, default=None, help="port (default: 995 with --security ssl, else 110)")
    p.add_argument("--user", required=True, help="POP3 user name")
    _password_options(p, "AECS_POP3_PASSWORD")
    p.add_argument(
        "--security",
        choices=("ssl", "starttls", "plain"),
        default="ssl",
        help="ssl (POP3S), starttls (STLS, never downgraded) or plain (default: ssl)",
    )
    p.add_argument("--delete-on-server", action="store_true", help="delete on the server what the store has confirmed")
    p.add_argument("--timeout", type=float, default=30.0, help="socket timeout in seconds (default: 30)")


def _migrate_gdbm(ctx: Context) -> int:
    mailbox = _mailbox_module()
    ctx.store.ensure_indexes()
    try:
        report = mailbox.migrate_from_uidl_store(ctx.store, ctx.args.path)
    except mailbox.MailboxError as exc:
        raise CliError(f"migrate-gdbm: {exc}") from None
    data = {
        "added": report.added,
        "duplicates": report.duplicates,
        "skipped": report.skipped,
        "failed": _failed_pairs(report.failed),
    }
    summary = (
        f"{report.added} UIDLs added ({report.duplicates} of them duplicates of stored messages), "
        f"{report.skipped} already known, {len(report.failed)} failed"
    )
    return _uidl_report(ctx, data, report.failed, summary)


def _configure_migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="the old UIDL-keyed GDBM file")


# --- watch: follow the mailbox -------------------------------------------------------------------


def _watch(ctx: Context) -> int:
    """One line per message stored in the mailbox, until interrupted. A line is acknowledged once
    it is written (the consumer's checkpoint), so the next run continues after it."""
    with _signals_as_interrupt(), ctx.store.watch(ctx.args.consumer, since=ctx.args.since) as feed:
        for item in feed:
            if ctx.json:
                _out().write(json.dumps(item.as_dict(), ensure_ascii=False) + "\n")
            else:
                when = dt.datetime.fromtimestamp(item.ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                _say(f"{when:20}  {_column(item.sender or '?', 36)}  {_column(item.subject, 50)}  <{item.message_id}>")
            _out().flush()
    return EXIT_OK


def _configure_watch(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        choices=("now", "beginning"),
        default="now",
        help="where a new consumer starts: new mail only, or every stored message first (default: now);"
        " a consumer that ran before continues where it stopped",
    )
    p.add_argument(
        "--consumer",
        default="cli",
        help="the reader's name, whose position is kept between runs (default: cli; one per reader)",
    )


# --- server: the shared embedded server ------------------------------------------------------------


def _server(args: argparse.Namespace) -> int:
    """``server status | stop | start``: the data directory's shared embedded server."""
    from .embedded import background
    from .embedded.server import INSTALL_HINT, embedded_available

    if args.uri:
        raise CliError("'server' manages the embedded server of --data-dir; leave out --uri", EXIT_USAGE)
    if not embedded_available():
        raise CliError(f"the embedded server is not installed; install it with: {INSTALL_HINT}", EXIT_USAGE)
    data_dir = Path(args.data_dir).resolve()
    try:
        if args.action == "stop":
            was = background.stop(data_dir)
            data = {"dataDir": str(data_dir), "stopped": was is not None, "pid": was.pid if was else None}
            text = f"stopped the server of {data_dir} (pid {was.pid})" if was else f"no server running for {data_dir}"
        else:
            if args.action == "start":
                if args.keep_server <= 0:
                    raise CliError("'server start' needs --keep-server above 0", EXIT_USAGE)
                state = background.start(data_dir, args.keep_server)
            else:
                state = background.status(data_dir)
            data = state.as_dict()
            text = _server_status_text(data)
    except AecsMongoError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        _emit_json(data)
    else:
        _say(text)
    return EXIT_OK


def _server_status_text(data: dict[str, Any]) -> str:
    if not data["running"]:
        return f"no server running for {data['dataDir']}"
    stops = "in use by a running command" if data["inUse"] else f"stops in {data['stopsInSeconds']:.0f} s if unused"
    return (
        f"server of {data['dataDir']}: pid {data['pid']}, port {data['port']}, "
        f"up {data['uptimeSeconds']:.0f} s, idle time {data['idleSeconds']:.0f} s, {stops}"
    )


def _configure_server(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("status", "stop", "start"),
        help="status: where it runs and until when; stop: stop it cleanly; start: start it if none runs",
    )


# --- imap: bring an IMAP account in, incrementally (aecs_mongo.imap) ------------------------------


class _ImapProgress(StatusLine):
    """The IMAP sync's one-line progress on stderr, only when stderr is a terminal."""

    def update(self, report: Any, folder: Any, *, force: bool = False) -> None:
        if self.due(force=force):
            self.show(
                f"imap {_one_line(folder.folder, 40)} {folder.done}/{folder.listed} | "
                f"{report.new} new, {report.present} already stored, {len(report.failed)} failed",
                force=True,
            )


def _imap_password(args: argparse.Namespace) -> str:
    password = os.environ.get(args.password_env)
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise CliError(f"no password: set ${args.password_env} (or run on a terminal to be asked)", EXIT_USAGE)
    import getpass

    return getpass.getpass(f"IMAP password for {args.user}@{args.host}: ")


def _imap(ctx: Context) -> int:
    import ssl

    from .errors import MailboxAuthError, MailboxError
    from .mail import imap

    args = ctx.args
    password = _imap_password(args)
    context = None
    if args.ca_file:
        try:
            context = ssl.create_default_context(cafile=args.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot read --ca-file {args.ca_file}: {exc}", EXIT_USAGE) from None
    folders = imap.ALL_FOLDERS if args.all_folders else (args.folder or ["INBOX"])
    progress = _ImapProgress(enabled=_err().isatty() and not args.no_progress)
    ctx.store.ensure_indexes()
    error: str | None = None
    try:
        with _finish_in_hand_on_interrupt() as stop:
            report = imap.sync(
                ctx.store,
                args.host,
                args.user,
                password,
                folders=folders,
                security=args.security,
                port=args.port,
                batch_size=args.batch_size,
                timeout=args.timeout,
                ssl_context=context,
                account=args.account,
                progress=progress.update,
                stop=lambda: stop.requested,
            )
    except MailboxAuthError as exc:
        raise CliError(f"IMAP: {exc}") from None
    except MailboxError as exc:  # the connection failed: say what was committed before it did
        if not isinstance(exc.report, imap.ImapSyncReport):
            raise CliError(f"IMAP: {exc}") from None
        report, error = exc.report, str(exc)
    finally:
        progress.close()
    if ctx.json:
        _emit_json({**report.as_dict(), "error": error})
    else:
        for folder_name, uid, reason in report.failed:
            _say(f"failed: {folder_name} UID {uid}: {reason}")
        for folder in report.folders:
            if folder.error is not None:
                _say(f"{folder.folder}: not synced: {folder.error}")
                continue
            extra = " (UIDVALIDITY changed: read again)" if folder.reset else ""
            _say(
                f"{folder.folder}: {folder.new} new, {folder.present} already stored, {len(folder.failed)} failed"
                f"{extra}; position UID {folder.position}"
            )
        synced = sum(f.error is None for f in report.folders)
        _say(
            f"{report.new} new, {report.present} already stored, {len(report.failed)} failed"
            f" in {synced} folder{'s' if synced != 1 else ''} of {report.account}"
            + (" (interrupted: the next run continues)" if report.interrupted else "")
        )
    if error is not None:
        _note(f"error: IMAP: {error} (what is counted above is stored; the next run continues)")
        return EXIT_FAILED
    if report.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if report.failed or report.folder_errors else EXIT_OK


class _NoPasswordOption(argparse.Action):
    """``--password``: refused with the reason (argv is visible to every user of the machine)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parser.error("a password is never taken from the command line: put it in a variable, --password-env VAR")


def _password_options(p: argparse.ArgumentParser, variable: str, *, never_read: str = "") -> None:
    """``--password-env VAR``, and ``--password`` refused (its value never echoed)."""
    p.add_argument("--password", action=_NoPasswordOption, help=argparse.SUPPRESS)
    p.add_argument(
        "--password-env",
        default=variable,
        metavar="VAR",
        help=f"environment variable holding the password (default: {variable}; unset: ask on the terminal)"
        + never_read,
    )


def _configure_imap(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", metavar="HOST", help="IMAP server host name")
    p.add_argument("--user", required=True, help="IMAP user name")
    _password_options(p, "AECS_IMAP_PASSWORD", never_read="; a password is never read from the command line")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--folder",
        action="append",
        metavar="NAME",
        help="a folder to sync, as the server shows it, non-ASCII names as they read (repeatable; default: INBOX)",
    )
    which.add_argument("--all-folders", action="store_true", help="every folder except those marked \\Noselect")
    p.add_argument(
        "--security",
        choices=("ssl", "starttls"),
        default="ssl",
        help="ssl (IMAPS) or starttls (refused, never downgraded, when the server does not offer it); default: ssl",
    )
    p.add_argument("--port", type=int, default=None, help="port (default: 993 with ssl, 143 with starttls)")
    p.add_argument("--ca-file", default=None, metavar="PEM", help="trust this CA certificate (a self-hosted server)")
    p.add_argument("--account", default=None, help="the account's name in the records (default: USER@HOST)")
    p.add_argument(
        "--batch-size", type=_limit, default=100, help="messages per FETCH and write batch (default: 100, at most 1000)"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout in seconds (default: 60)")
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")


# --- the command table ------------------------------------------------------------------------


def _nothing(p: argparse.ArgumentParser) -> None:
    return None


def _no_store(ctx: Context) -> int:  # pragma: no cover - 'server' is run by _run before any store
    raise CliError("internal: 'server' has no store")


def _commands() -> list[Command]:
    return [
        Command("ingest", "store .eml files, directories, Maildir folders and mbox files", _ingest, _configure_ingest),
        Command("inbox", "a page of messages, newest first", _inbox, _configure_inbox),
        Command("threads", "a page of conversations, most recent activity first", _threads, _page_options),
        Command(
            "thread", "a thread as LLM context: newest N, oldest first, with positions", _thread, _configure_thread
        ),
        Command("show", "one message (--raw: exact bytes, --html: the HTML body)", _show, _configure_show),
        Command("with", "mail to or from one address, newest first", _with, _configure_with),
        Command("replies", "messages that reply to (or reference) a Message-ID", _replies, _id_argument),
        Command("find", "message ids by header value (seed 003 lookups), oldest first", _find, _configure_find),
        Command("search", "full-text search over message bodies", _search, _configure_search),
        Command("delete", "delete a message from every tier", _delete, _id_argument),
        Command(
            "export",
            "write the mailbox's raw mail, oldest first, as an mbox, a Maildir or .eml files",
            _export,
            _configure_export,
        ),
        Command("expire", "retention: remove mail older than a date from every tier", _expire, _configure_expire),
        Command("erase", "remove every trace of the mailbox (offboarding, erasure requests)", _erase, _configure_erase),
        Command("reindex", "rebuild thread summaries and lookup fields from the messages", _reindex, _nothing),
        Command("indexes", "create the store's indexes (idempotent) and report them", _indexes, _nothing),
        Command(
            "stats",
            "mailbox size, storage sizes, specVersion mix, and the engines serving search and vector search",
            _stats,
            _nothing,
        ),
        Command("pop3", "download new mail from a POP3 server into the mailbox", _pop3, _configure_pop3),
        Command(
            "migrate-gdbm",
            "copy an old UIDL-keyed GDBM message store into the mailbox",
            _migrate_gdbm,
            _configure_migrate,
        ),
        Command(
            "watch",
            "follow the mailbox: one line per newly stored message, until interrupted",
            _watch,
            _configure_watch,
        ),
        Command(
            "server",
            "the embedded server kept running between commands: status, stop, start",
            _no_store,
            _configure_server,
        ),
        Command("imap", "bring new mail of an IMAP account in (incremental: only what is new)", _imap, _configure_imap),
    ]


def build_parser() -> argparse.ArgumentParser:
    """The whole parser. ``allow_abbrev=False`` everywhere: an abbreviation would take an option
    for another (``--password`` for ``--password-env``, which then printed the password)."""
    parser = argparse.ArgumentParser(
        prog="aecs-mongo",
        description="Store email in MongoDB and read it back: ingest mail, list the inbox and threads, "
        "show a thread as LLM context. Without --uri or $MONGODB_URI the embedded server is used.",
        epilog="exit codes: 0 ok, 1 something failed, 2 usage error, 130 interrupted",
        allow_abbrev=False,
    )
    _add_global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _commands():
        p = sub.add_parser(command.name, help=command.help, description=command.help, allow_abbrev=False)
        command.configure(p)
        _add_global_options(p, defaults=False)
        p.set_defaults(handler=command.handler)
    return parser


def command_names() -> list[str]:
    """Every sub-command (the tests loop over them)."""
    return [c.name for c in _commands()]


# --- running ----------------------------------------------------------------------------------------


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _handling(signals: Sequence[signal.Signals], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs, then the previous handlers again. A
    signal ignored when we started stays ignored: ``nohup`` ignores SIGHUP so that closing the
    terminal does not stop the command, and a background job ignores SIGINT (main thread only:
    Python delivers signals there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [sig for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in taken}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _signals_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP (the terminal closed) unwind like Ctrl-C, so the embedded server is
    stopped."""
    return _handling(_STOP_SIGNALS, _raise_interrupt)


@dataclass
class _StopRequest:
    requested: bool = False


@contextlib.contextmanager
def _finish_in_hand_on_interrupt() -> Iterator[_StopRequest]:
    """The first Ctrl-C (or SIGTERM, SIGHUP) asks the ingest to stop once the messages already
    handed to the store are written; a second one interrupts at once (main thread only)."""
    stop = _StopRequest()

    def request(signum: int, frame: FrameType | None) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True
        _note("stopping once the messages in hand are stored (press Ctrl-C again to stop now)")

    with _handling((signal.SIGINT, *_STOP_SIGNALS), request):
        yield stop


@contextlib.contextmanager
def _server_uri(args: argparse.Namespace) -> Iterator[str]:
    """``--uri``, or the embedded server of ``--data-dir``: the shared one in the background
    (``aecs_mongo.background``), started if none runs; with ``--keep-server 0``, and for ``pop3
    --delete-on-server`` (which wants ``--sync-on-commit``), one of the command's own unless a
    shared one is running already."""
    if args.uri:
        yield args.uri
        return
    from .embedded import background
    from .embedded.server import INSTALL_HINT, EmbeddedServer, embedded_available

    if not embedded_available():
        raise CliError(
            f"no --uri or $MONGODB_URI, and the embedded server is not installed; install it with: {INSTALL_HINT}",
            EXIT_USAGE,
        )
    data_dir = Path(args.data_dir).resolve()
    # pop3 --delete-on-server deletes the only other copy: every commit is synced to disk
    durable = bool(getattr(args, "delete_on_server", False))
    _note(f"no --uri or $MONGODB_URI: using the embedded SecantusDB server, data in {data_dir}")
    with _signals_as_interrupt(), contextlib.ExitStack() as stack:
        try:
            if args.keep_server > 0 and not durable:
                uri = stack.enter_context(background.use(data_dir, args.keep_server))
            else:
                shared = stack.enter_context(background.attach(data_dir))
                if shared is None:
                    server = EmbeddedServer(data_dir=data_dir, sync_on_commit=durable)
                    stack.callback(server.stop)
                    server.start()
                    shared = server.uri
                uri = shared
        except AecsMongoError as exc:
            raise CliError(f"the embedded server did not start: {exc}") from None
        yield uri


def _run(args: argparse.Namespace) -> int:
    from pymongo import MongoClient
    from pymongo.errors import OperationFailure, PyMongoError, ServerSelectionTimeoutError

    from .synchronous.store import MessageStore

    if args.command == "server":
        return _server(args)

    with _server_uri(args) as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=10_000)
        try:
            db = client[args.db]
            store = MessageStore(db, mailbox_id=args.mailbox, owner_addresses=getattr(args, "owner", None) or ())
            handler: Handler = args.handler
            return handler(Context(args, store, db))
        except ServerSelectionTimeoutError as exc:
            raise CliError(f"cannot reach the MongoDB server: {exc}") from None
        except OperationFailure as exc:
            message = str(exc.details.get("errmsg") if exc.details else exc)
            if "hint" in message.lower() and "index" in message.lower():
                message += " (no indexes yet: run 'aecs-mongo indexes' or 'aecs-mongo ingest' first)"
            raise CliError(f"database: {message}") from None
        except PyMongoError as exc:
            raise CliError(f"database: {exc}") from None
        except AecsMongoError as exc:
            raise CliError(str(exc)) from None
        finally:
            client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``aecs-mongo`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    normalizer_log = logging.getLogger("aecs_mongo.normalize")
    previous_level = normalizer_log.level
    if not args.verbose:
        normalizer_log.setLevel(logging.ERROR)
    try:
        return _run(args)
    except CliError as exc:
        _note(f"error: {exc}")
        return exc.code
    except (TypeError, ValueError) as exc:  # bad input values the store rejects
        _note(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _note("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (| head): silence the flush at exit
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    finally:
        normalizer_log.setLevel(previous_level)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
