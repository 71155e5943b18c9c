"""``ingest``: store ``.eml`` files, directories, Maildir folders and mbox files.

Files are followed by :mod:`aecs_mongo.mail.follow` (its docstring has how): a re-run reads only
what is new or changed since the last run into the mailbox, turns Maildir renames into flag and
folder changes, and counts files that are gone (their messages are kept, unless
``--remove-missing``); ``--rescan`` reads everything again. Standard input (``-``) is read by
:mod:`aecs_mongo.mail.sources` and has no record. The report is the ``IngestReport`` of
``sources``: a failure is an input that is not stored (what ``sources`` skips, a message the
store refuses), listed with its input and reason; a message already in the mailbox counts as
"already present"; ``FileSyncReport`` adds the files line ("10,000 files: 12 new, 3 flag
changes, 2 gone (kept)"). Exit code 0 when every message was stored or already present, 1 when
anything failed, 130 when interrupted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..mail.follow import FileSyncReport, sync_files
from ..mail.sources import STDIN, IngestReport, InputFile, RawMessage, Skipped, find_inputs, read_inputs
from ..pure.tags import check_tags
from .base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Context,
    Output,
    StatusLine,
    database_error_text,
    on_terminal,
)
from .interrupts import StopRequest, finish_in_hand_on_interrupt, until

__all__ = ["Progress", "ingest"]


class Progress(StatusLine):
    """The ingest's progress line: percent of the input, messages, what happened to them."""

    def __init__(self, total_messages: int | None, total_bytes: int, enabled: bool) -> None:
        super().__init__(enabled)
        self.total_messages = total_messages
        self.total_bytes = total_bytes
        self.bytes_done = 0

    def set_totals(self, total_messages: int | None, total_bytes: int) -> None:
        """The totals, once known (the file ingest's survey)."""
        self.total_messages, self.total_bytes = total_messages, total_bytes

    def update(self, report: IngestReport, *, force: bool = False) -> None:
        if not self.due(force=force):
            return
        parts = []
        if self.total_bytes:
            parts.append(f"{min(100, 100 * self.bytes_done // self.total_bytes):3d}%")
        elif self.total_messages:
            parts.append(f"{min(100, 100 * report.processed // self.total_messages):3d}%")
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


def ingest(ctx: Context) -> Output:
    if STDIN not in ctx.args.paths:
        return _follow(ctx)
    args = ctx.args
    tags = check_tags(getattr(args, "tag", []), "--tag")  # a bad tag: a usage error before any read
    started = time.monotonic()
    report = IngestReport()
    inputs = list(find_inputs(args.paths))  # listed first: the progress line shows totals
    files = [i for i in inputs if isinstance(i, InputFile)]
    total = (
        None
        if any(f.kind == "mbox" for f in files)
        else sum(not i.ignored if isinstance(i, Skipped) else 1 for i in inputs)
    )
    progress = Progress(total, sum(f.size for f in files), enabled=on_terminal(args.no_progress))
    items = report.track(_with_progress(read_inputs(inputs), report, progress))
    before = _mailbox_count(ctx)
    run = _Run(report, progress)
    with run.guarded(cleanup=items.close) as stop:
        stored = ctx.store.store_iter(until(items, stop), args.batch_size, report.refused, tags=tags)
        for result in stored:
            report.count(result)
            progress.update(report)
    if report.interrupted or report.aborted:
        _reconcile(ctx, report, before)
    report.seconds = time.monotonic() - started
    return run.output(ctx, report.as_dict(), report.lines())


def _follow(ctx: Context) -> Output:
    """Files only: through ``sync_files``, with their record. No count of the mailbox before
    and after (on the embedded server a count reads the collection): after an interrupt, the
    messages handed out unconfirmed are said so, and the next run reads them again."""
    args = ctx.args
    result = FileSyncReport()
    report = result.messages
    progress = Progress(None, 0, enabled=on_terminal(args.no_progress))
    run = _Run(report, progress)
    with run.guarded() as stop:

        def items_filter(items: Iterator[RawMessage | Skipped]) -> Iterator[RawMessage | Skipped]:
            return until(_with_progress(items, report, progress), stop)

        sync_files(
            ctx.store,
            args.paths,
            remove_missing=args.remove_missing,
            rescan=args.rescan,
            batch_size=args.batch_size,
            items_filter=items_filter,
            report=result,
            tags=check_tags(getattr(args, "tag", []), "--tag"),
            on_survey=progress.set_totals,
        )
    return run.output(ctx, result.as_dict(), result.lines())


class _Run:
    """How one ingest ends, the same for files and for standard input: the first Ctrl-C finishes
    the messages in hand (a second stops at once): interrupted, exit 130; a database error ends
    the run with what was done reported and its one line on stderr (also with ``--json``; a full
    disk named as such): exit 1, as for any failed message."""

    def __init__(self, report: IngestReport, progress: Progress) -> None:
        self.report = report
        self.progress = progress
        self.error: Exception | None = None

    @contextlib.contextmanager
    def guarded(self, cleanup: Callable[[], object] | None = None) -> Iterator[StopRequest]:
        report = self.report
        try:
            with finish_in_hand_on_interrupt() as stop:
                yield stop
            report.interrupted = stop.requested
        except KeyboardInterrupt:
            report.interrupted = True
        except Exception as exc:  # a database error: report what was done, then fail
            report.aborted = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            self.error = exc
        finally:
            if cleanup is not None:
                cleanup()
            self.progress.update(report, force=True)
            self.progress.close()

    def output(self, ctx: Context, payload: dict[str, Any], lines: list[str]) -> Output:
        report = self.report
        failed = report.failures or report.aborted
        code = EXIT_INTERRUPTED if report.interrupted else EXIT_FAILED if failed else EXIT_OK
        notes: tuple[str, ...] = ()
        if self.error is not None:
            notes = (f"error: {database_error_text(self.error, getattr(ctx.args, 'embedded_dir', None))}",)
        return Output(payload, lines, code, notes=notes)


def _mailbox_count(ctx: Context) -> int | None:
    try:
        return ctx.store.views.message_count()
    except Exception:  # the server is gone: the report says what was confirmed
        return None


def _reconcile(ctx: Context, report: IngestReport, before: int | None) -> None:
    """After an interrupt or a failed batch, make the summary say what the mailbox holds: the
    messages of a batch whose answer never came may have been stored all the same (counted
    again, one index count; right unless another writer stores into the mailbox meanwhile)."""
    after = _mailbox_count(ctx)
    if before is None or after is None:
        return
    extra = (after - before) - report.stored
    if extra > 0:
        report.stored_unconfirmed = min(extra, len(report.unconfirmed))
        report.stored += report.stored_unconfirmed
        report.drop_unconfirmed(report.stored_unconfirmed)
