"""Upkeep: ``reindex``, ``indexes`` and ``stats``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..pure.dialect import EMBEDDED
from .base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError, Context, Output, human_size, plural

__all__ = ["blobs", "indexes", "reindex", "stats"]

_ENGINE_NOTES = {
    "atlas": "Atlas index",
    "text": "$text index",
    "local": "the local index, SQLite FTS5",
    "scan": "no text index: reads the mailbox newest first until it has the hits",
    "exact": "no vector index: compares the stored vectors one by one",
}


def reindex(ctx: Context) -> Output:
    report = ctx.store.reindex()
    return Output(report, [", ".join(f"{k}: {v}" for k, v in report.items())])


def indexes(ctx: Context) -> Output:
    report = ctx.store.ensure_indexes()
    data = {"created": report.created, "existing": report.existing, "skipped": report.skipped, "ok": report.ok}
    text = [f"created:  {', '.join(report.created) or '-'}", f"existing: {', '.join(report.existing) or '-'}"]
    text += [f"skipped:  {name}: {reason}" for name, reason in report.skipped.items()]
    if report.dropped or report.upgraded:  # an earlier release's database, upgraded
        data |= {"dropped": report.dropped, "upgraded": report.upgraded}
        text.append(f"dropped:  {', '.join(report.dropped) or '-'} (replaced); {report.upgraded} messages upgraded")
    return Output(data, text, EXIT_OK if report.ok else EXIT_FAILED)


def stats(ctx: Context) -> Output:
    """The store's ``stats()``: every collection of the mailbox's data, the specVersion mix and
    the engines serving search and vector search."""
    found = ctx.store.stats()
    data = {
        "database": found["database"],
        "mailboxId": found["mailboxId"],
        "collections": found["collections"],
        "sizesFrom": found["sizesFrom"],
        "specVersions": found["specVersions"],
        "messages": found["messages"],
        "threads": found["threads"],
        "searchEngine": found["search"],
        "vectorEngine": found["vectorSearch"],
        "oplog": _oplog(ctx),
        "dataDirectory": _data_directory(getattr(ctx.args, "embedded_dir", None)),
    }
    return Output(data, _stats_lines(found, data["oplog"], data["dataDirectory"]))


def _oplog(ctx: Context) -> dict[str, Any] | None:
    """The server's oplog (``local.oplog.rs``): entries, bytes and its bounds, as far as the
    server says; None where there is none (a standalone server) or it cannot be read."""
    return ctx.database.oplog()


def _data_directory(data_dir: Path | None) -> dict[str, Any] | None:
    """Bytes on disk in the embedded server's data directory, by what they hold (None with --uri)."""
    if data_dir is None:
        return None
    kinds: dict[str, int] = {"documents": 0, "indexes": 0, "oplog": 0, "journal": 0, "other": 0}
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            try:
                size = os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
            kind = next((k for prefix, k in EMBEDDED.data_files if name.startswith(prefix)), "other")
            kinds[kind] += size
    return {"path": str(data_dir), "bytes": sum(kinds.values()), **kinds}


def _stats_lines(
    found: Mapping[str, Any], oplog: Mapping[str, Any] | None, data_dir: Mapping[str, Any] | None
) -> Iterator[str]:
    yield f"database {found['database']!r}, mailbox {found['mailboxId']!r}"
    yield f"{'collection':16} {'mailbox':>9} {'all':>9} {'data':>9} {'on disk':>9} {'indexes':>9}"
    for name, e in found["collections"].items():
        yield (
            f"{name:16} {e['mailbox']:>9,} {e['total']:>9,} {human_size(e['size']):>9}"
            f" {human_size(e['storageSize']):>9} {human_size(e['totalIndexSize']):>9}"
        )
    if oplog is not None:
        bound = ", ".join(
            part
            for part in (
                f"at most {oplog['max']:,} entries" if oplog.get("max") else "",
                f"at most {human_size(oplog['maxSize'])}" if oplog.get("maxSize") else "",
            )
            if part
        )
        count = "-" if oplog.get("count") is None else f"{oplog['count']:,}"
        yield (
            f"{'oplog':16} {count:>9} {'':>9} {human_size(oplog.get('size')):>9}"
            f" {human_size(oplog.get('storageSize')):>9}" + (f"  ({bound})" if bound else "")
        )
    if not found["sizesFrom"]:
        yield "sizes: the server reports none (collStats and $collStats unavailable)"
    if data_dir is not None:
        parts = ", ".join(
            f"{k} {human_size(data_dir[k])}" for k in ("documents", "indexes", "oplog", "journal", "other")
        )
        yield f"data directory {data_dir['path']}: {human_size(data_dir['bytes'])} on disk ({parts})"
    yield "specVersion: " + (", ".join(f"{k}: {v}" for k, v in found["specVersions"].items()) or "-")
    yield (
        f"{plural(found['messages'], 'message')}, {plural(found['threads'], 'thread')}; search: {found['search']}"
        f" ({_ENGINE_NOTES.get(found['search'], '')}); vector search: {found['vectorSearch']}"
        f" ({_ENGINE_NOTES.get(found['vectorSearch'], '')})"
    )


def blobs(ctx: Context) -> Output:
    """``blobs show`` and ``blobs migrate --to URL`` (``aecs_mongo/asynchronous/migration.py``)."""
    if ctx.args.action == "show":
        recorded = ctx.database.recorded_blobs() or {}
        data = {
            "url": recorded.get("url") or ctx.store.blobs.url,
            "recorded": bool(recorded),
            "migratingTo": recorded.get("migratingTo"),
            "removing": recorded.get("removing"),
        }
        text = [f"blobs: {data['url']}" + ("" if recorded else " (not recorded yet: the first write records it)")]
        text += [f"{name}: {data[name]}" for name in ("migratingTo", "removing") if data[name]]
        return Output(data, text)
    if not ctx.args.to:
        raise CliError("blobs migrate needs --to URL", EXIT_USAGE)
    report = ctx.database.migrate_blobs(ctx.args.to, source=ctx.store.blobs.url)
    data = {
        "source": report.source,
        "target": report.target,
        "copied": report.copied,
        "alreadyCopied": report.already,
        "missing": report.missing,
        "removed": report.removed,
        "switched": report.switched,
        "seconds": round(report.seconds, 3),
    }
    text = [
        f"blobs moved from {report.source} to {report.target}: {report.copied} copied and verified,"
        f" {report.already} copied before, {report.removed} removed from the old store"
    ]
    notes = [f"{len(report.missing)} blob(s) named by messages were not in {report.source}: {report.missing[:3]}"]
    return Output(data, text, EXIT_FAILED if report.missing else EXIT_OK, notes=notes if report.missing else ())
