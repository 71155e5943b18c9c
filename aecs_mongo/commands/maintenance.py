"""Upkeep: ``reindex``, ``indexes`` and ``stats``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .base import EXIT_FAILED, EXIT_OK, Context, Handlers, Output

__all__ = ["HANDLERS"]

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
    }
    return Output(data, _stats_lines(found))


def _stats_lines(found: Mapping[str, Any]) -> Iterator[str]:
    def num(v: object) -> str:
        return "-" if v is None else str(v)

    yield f"database {found['database']!r}, mailbox {found['mailboxId']!r}"
    yield f"{'collection':16} {'mailbox':>9} {'all':>9} {'data bytes':>12} {'storage':>12} {'indexes':>12}"
    for name, e in found["collections"].items():
        yield (
            f"{name:16} {e['mailbox']:>9} {e['total']:>9} {num(e['size']):>12} {num(e['storageSize']):>12} "
            f"{num(e['totalIndexSize']):>12}"
        )
    if not found["sizesFrom"]:
        yield "sizes: the server reports none (collStats and $collStats unavailable)"
    yield "specVersion: " + (", ".join(f"{k}: {v}" for k, v in found["specVersions"].items()) or "-")
    yield (
        f"{found['messages']:,} messages, {found['threads']:,} threads; search: {found['search']}"
        f" ({_ENGINE_NOTES.get(found['search'], '')}); vector search: {found['vectorSearch']}"
        f" ({_ENGINE_NOTES.get(found['vectorSearch'], '')})"
    )


HANDLERS: Handlers = {"reindex": reindex, "indexes": indexes, "stats": stats}
