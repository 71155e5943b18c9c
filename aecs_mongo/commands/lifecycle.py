"""A mailbox's life after delivery: ``delete``, ``export``, ``expire`` (retention), ``erase``."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..mail.sinks import open_writer
from .base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Context,
    Output,
    StatusLine,
    disk_full_message,
    iso_utc,
    on_terminal,
    plural,
)
from .interrupts import signals_as_interrupt

__all__ = ["delete", "erase", "expire", "export"]


def delete(ctx: Context) -> Output:
    deleted = bool(ctx.store.delete(ctx.args.id))
    text = "deleted" if deleted else f"no message {ctx.args.id!r} in mailbox {ctx.args.mailbox!r}"
    data = {"messageId": ctx.args.id.strip().strip("<>"), "deleted": deleted}
    return Output(data, [text], EXIT_OK if deleted else EXIT_FAILED)


def _not_empty(path: Path) -> str | None:
    """Why ``path`` is not a new export target: an existing mbox file, a directory with files."""
    if path.is_dir():
        for _root, _dirs, files in os.walk(path):
            if files:
                return "is a directory that has files in it"
        return None
    if path.exists() or path.is_symlink():
        return "exists"
    return None


def _left_out(ctx: Context) -> int:
    """The other copies (variants) an export without ``--variants`` leaves out (one aggregation
    over the exported messages' ``variantHashes``)."""
    return ctx.store.views.variant_copies(ctx.args.since, ctx.args.until)


def export(ctx: Context) -> Output:
    args = ctx.args
    started = time.monotonic()
    missing: list[str] = []
    messages: set[str] = set()
    out = Path(args.out)
    if args.status_headers and args.format != "mbox":
        raise CliError("--status-headers is for --format mbox (a Maildir export names its files with the flags)")
    why = None if args.add else _not_empty(out)
    if why is not None:
        raise CliError(
            f"{out} {why}: export writes into a new target; add --add to add to it"
            + (" (copies already in a Maildir are not written twice)" if args.format == "maildir" else "")
        )
    try:
        writer = open_writer(args.format, out, add=args.add, status_headers=args.status_headers)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CliError(disk_full_message(out)) from None
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    line = StatusLine(on_terminal(args.no_progress))
    interrupted = False
    try:
        with writer, signals_as_interrupt():
            copies = ctx.store.export_raw(
                variants=args.variants, since=args.since, until=args.until, on_missing=missing.append
            )
            for copy in copies:
                # the message key and the copy number, padded: names sort in the export's order
                key = f"{hashlib.sha256(copy.message_id.encode()).hexdigest()[:40]}-{copy.copy:04d}"
                writer.write(copy.data, ts=copy.ts, sender=copy.sender, key=key, tags=copy.tags)
                messages.add(copy.message_id)
                if line.due():
                    line.show(f"export {writer.count} copies, {writer.bytes_written / 1e6:.1f} MB")
    except KeyboardInterrupt:
        interrupted = True
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CliError(
                disk_full_message(exc.filename or out, f"{plural(writer.count, 'copy', 'copies')} written before")
            ) from None
        raise
    finally:
        line.close()
    left_out = 0 if args.variants else _left_out(ctx)
    seconds = time.monotonic() - started
    summary = {
        "format": args.format,
        "statusHeaders": args.status_headers,
        "out": str(out),
        "messages": len(messages),
        "copies": writer.count,
        "bytes": writer.bytes_written,
        "alreadyThere": writer.already_there,
        "otherCopiesLeftOut": left_out,
        "withoutRaw": missing,
        "interrupted": interrupted,
        "seconds": round(seconds, 3),
    }
    text = [f"not exported (no raw copy stored): <{mid}>" for mid in missing]
    text.append(
        f"exported {plural(len(messages), 'message')} ({plural(writer.count, 'copy', 'copies')},"
        f" {writer.bytes_written / 1e6:.1f} MB) as {args.format} to {out} in {seconds:.1f} s"
        + (f"; {writer.already_there:,} already there, not written again" if writer.already_there else "")
        + (f"; {len(missing)} without a raw copy" if missing else "")
        + ("; interrupted" if interrupted else "")
    )
    if left_out:
        text.append(
            f"left out: {plural(left_out, 'other copy', 'other copies')} kept under stored Message-IDs"
            " (other bytes that came under the same Message-ID); --variants exports them too"
        )
    code = EXIT_INTERRUPTED if interrupted else EXIT_FAILED if missing else EXIT_OK
    return Output(summary, text, code)


def _removal_progress(verb: str) -> tuple[Callable[[Mapping[str, int]], None], Callable[[], None]]:
    """A progress line on a terminal (documents removed so far) and how to clear it."""
    line = StatusLine(on_terminal())

    def show(removed: Mapping[str, int]) -> None:
        if line.due():
            line.show(f"{verb}: {removed.get('messages', 0)} messages, {sum(removed.values())} documents")

    return show, line.close


def expire(ctx: Context) -> Output:
    args = ctx.args
    before = args.before if args.before is not None else dt.datetime.now(dt.UTC) - args.older_than
    show, clear = _removal_progress("expire" + (" (dry run)" if args.dry_run else ""))
    try:
        with signals_as_interrupt():
            report = ctx.store.expire(before, dry_run=args.dry_run, on_progress=show)
    finally:
        clear()
    verb = "would remove" if report.dry_run else "removed"
    text = (
        f"{verb} {report.messages} messages older than {iso_utc(before)} ({report.blobs} blobs); "
        f"{report.threads_updated} thread summaries recomputed, {report.threads_removed} empty threads "
        f"{'to remove' if report.dry_run else 'removed'}, in {report.seconds:.1f} s"
    )
    return Output(report.as_dict(), [text])


def erase(ctx: Context) -> Output:
    if not ctx.args.yes:
        raise CliError(
            f"erase removes every message of mailbox {ctx.args.mailbox!r} for good: add --yes to do it", EXIT_USAGE
        )
    show, clear = _removal_progress("erase")
    try:
        with signals_as_interrupt():
            report = ctx.store.erase_mailbox(on_progress=show)
    finally:
        clear()
    text = (
        f"erased mailbox {ctx.args.mailbox!r}: {report.messages} messages, {report.blobs} blobs, "
        f"{report.total} documents in all, in {report.seconds:.1f} s"
        + (f"; {report.remaining} messages stored during the erase remain" if report.remaining else "")
    )
    return Output(report.as_dict(), [text], EXIT_FAILED if report.remaining else EXIT_OK)
