"""``tag`` (notmuch's ``tag +todo -inbox -- QUERY``), ``tags`` (each tag with its count) and
``folder`` (``folder +Archive -INBOX -- QUERY``: ``store.set_folders``, reported as ``tag`` is).

``+TAG``/``-TAG`` words before the query are turned into ``--add``/``--remove`` by
:func:`aecs_mongo.cli.tag_changes` before the parser sees them (argparse would take ``-inbox``
for an option)."""

from __future__ import annotations

from typing import Any

from .base import Context, JsonLines, Output, plural

__all__ = ["folder", "tag", "tags"]


def tag(ctx: Context) -> Output:
    return _change(ctx, ctx.store.tag)


def folder(ctx: Context) -> Output:
    return _change(ctx, ctx.store.set_folders)


def _change(ctx: Context, change: Any) -> Output:
    """``tag`` and ``folder``: one change of the query's messages, reported alike."""
    args = ctx.args
    query = " ".join(args.query)
    if not args.add and not args.remove:
        # nothing to change: say how many the query names (a dry run), as notmuch count would
        args.dry_run = True
    report = change(query, add=args.add, remove=args.remove, dry_run=args.dry_run)
    data = {"query": query, "add": args.add, "remove": args.remove, **vars(report)}
    data["dryRun"] = data.pop("dry_run")
    if report.dry_run:
        line = f"{plural(report.matched, 'message')} match; {report.changed:,} would change (dry run: nothing written)"
    else:
        line = f"{plural(report.matched, 'message')} matched, {report.changed:,} changed"
    return Output(data, [line])


def tags(ctx: Context) -> Output:
    counts = ctx.store.tags()
    total = ctx.store.views.message_count()
    unread = total - counts.get("$seen", 0)
    found: list[dict[str, Any]] = [{"tag": name, "count": n} for name, n in counts.items()]

    def lines() -> list[str]:
        if not found and not total:
            return ["no tags: the mailbox holds no mail"]
        width = max([len("unread (no $seen)"), *(len(f["tag"]) for f in found)])
        rows = [f"{f['tag']:{width}}  {f['count']:>9,}" for f in found]
        return [*rows, f"{'unread (no $seen)':{width}}  {unread:>9,}"]

    return Output(JsonLines(found, {"messages": total, "unread": unread}), lines())
