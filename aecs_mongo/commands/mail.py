"""Mail servers and old stores: ``pop3`` (download), ``migrate-gdbm`` (the old UIDL-keyed GDBM file) and
``imap`` (an incremental sync of an IMAP account). A password is read from the environment
variable ``--password-env`` names, or asked on the terminal: never taken from the command line."""

from __future__ import annotations

import argparse
import getpass
import os
import ssl
import sys
from collections.abc import Iterator, Sequence

from ..errors import MailboxAuthError, MailboxError
from ..mail import imap, pop3
from ..results import ImapFolderReport, ImapSyncReport
from .base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Context,
    Output,
    StatusLine,
    on_terminal,
    one_line,
)
from .interrupts import finish_in_hand_on_interrupt

__all__ = ["imap_sync", "migrate_gdbm", "pop3_download"]


def _password(args: argparse.Namespace, protocol: str) -> str:
    """The value of ``$<--password-env>``, else asked on the terminal (none: a usage error)."""
    password = os.environ.get(args.password_env)
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise CliError(f"no password: set ${args.password_env} (or run on a terminal to be asked)", EXIT_USAGE)
    return getpass.getpass(f"{protocol} password for {args.user}@{args.host}: ")


# --- pop3 and migrate-gdbm: reports by UIDL ----------------------------------------------------------


def _uidl_report(data: dict[str, object], failed: Sequence[tuple[str, str]], summary: str) -> Output:
    """A POP3 or migration report: the JSON ``data``, or each failed UIDL and a summary line."""
    text = [f"failed: UIDL {uidl}: {reason}" for uidl, reason in failed]
    return Output(data, [*text, summary], EXIT_FAILED if failed else EXIT_OK)


def _failed_pairs(failed: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"uidl": uidl, "reason": reason} for uidl, reason in failed]


def pop3_download(ctx: Context) -> Output:
    args = ctx.args
    password = _password(args, "POP3")
    port = args.port or (995 if args.security == "ssl" else 110)
    try:
        report = pop3.download(
            ctx.store,
            args.host,
            port,
            args.user,
            password,
            security=args.security,
            delete_on_server=args.delete_on_server,
            timeout=args.timeout,
        )
    except MailboxError as exc:
        raise CliError(f"POP3: {exc}") from None
    data: dict[str, object] = {
        "downloaded": report.downloaded,
        "skipped": report.skipped,
        "deletedOnServer": report.deleted_on_server,
        "failed": _failed_pairs(report.failed),
    }
    summary = (
        f"{report.downloaded} downloaded, {report.skipped} already stored, "
        f"{report.deleted_on_server} deleted on the server, {len(report.failed)} failed"
    )
    return _uidl_report(data, report.failed, summary)


def migrate_gdbm(ctx: Context) -> Output:
    try:
        report = pop3.migrate_from_uidl_store(ctx.store, ctx.args.path)
    except MailboxError as exc:
        raise CliError(f"migrate-gdbm: {exc}") from None
    data: dict[str, object] = {
        "added": report.added,
        "duplicates": report.duplicates,
        "skipped": report.skipped,
        "failed": _failed_pairs(report.failed),
    }
    summary = (
        f"{report.added} UIDLs added ({report.duplicates} of them duplicates of stored messages), "
        f"{report.skipped} already known, {len(report.failed)} failed"
    )
    return _uidl_report(data, report.failed, summary)


# --- imap ----------------------------------------------------------------------------------------------


class _ImapProgress(StatusLine):
    """The IMAP sync's one-line progress on stderr, only when stderr is a terminal."""

    def update(self, report: ImapSyncReport, folder: ImapFolderReport, *, force: bool = False) -> None:
        if self.due(force=force):
            self.show(
                f"imap {one_line(folder.folder, 40)} {folder.done}/{folder.listed} | "
                f"{report.new} new, {report.present} already stored, {len(report.failed)} failed",
                force=True,
            )


def imap_sync(ctx: Context) -> Output:
    args = ctx.args
    password = _password(args, "IMAP")
    context = None
    if args.ca_file:
        try:
            context = ssl.create_default_context(cafile=args.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot read --ca-file {args.ca_file}: {exc}", EXIT_USAGE) from None
    folders = imap.ALL_FOLDERS if args.all_folders else (args.folder or ["INBOX"])
    progress = _ImapProgress(enabled=on_terminal(args.no_progress))
    error: str | None = None
    try:
        with finish_in_hand_on_interrupt() as stop:
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
        if not isinstance(exc.report, ImapSyncReport):
            raise CliError(f"IMAP: {exc}") from None
        report, error = exc.report, str(exc)
    finally:
        progress.close()
    if error is not None:
        code = EXIT_FAILED
        notes = [f"error: IMAP: {error} (what is counted above is stored; the next run continues)"]
    else:
        code = (
            EXIT_INTERRUPTED
            if report.interrupted
            else EXIT_FAILED
            if report.failed or report.folder_errors
            else EXIT_OK
        )
        notes = []
    return Output({**report.as_dict(), "error": error}, _imap_lines(report), code, notes=notes)


def _imap_lines(report: ImapSyncReport) -> Iterator[str]:
    for folder_name, uid, reason in report.failed:
        yield f"failed: {folder_name} UID {uid}: {reason}"
    for folder in report.folders:
        if folder.error is not None:
            yield f"{folder.folder}: not synced: {folder.error}"
            continue
        extra = " (UIDVALIDITY changed: read again)" if folder.reset else ""
        flags = f", {folder.flags_changed} with flags changed on the server" if folder.flags_changed else ""
        yield (
            f"{folder.folder}: {folder.new} new, {folder.present} already stored, {len(folder.failed)} failed"
            f"{flags}{extra}; position UID {folder.position}"
        )
    synced = sum(f.error is None for f in report.folders)
    yield (
        f"{report.new} new, {report.present} already stored, {len(report.failed)} failed"
        f" in {synced} folder{'s' if synced != 1 else ''} of {report.account}"
        + (" (interrupted: the next run continues)" if report.interrupted else "")
    )
