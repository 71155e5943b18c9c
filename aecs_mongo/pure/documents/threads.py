"""Thread summaries: one ``threads`` document per thread, kept by merging, never by recounting.

A summary counts a thread's messages and names its first and last by ``(ts, messageKey)``, a
total order, so it is the same whatever order the messages arrive in. Merging summaries is
associative and commutative: a batch's messages are summarized here and merged into the stored
summary by one aggregation-pipeline upsert per thread (``summary_merge_update``), and
concurrent writers' merges commute. ``thread_summary_from_messages`` is the recomputation that
every merge must equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..keys import doc_id

__all__ = [
    "fold_thread_summary",
    "merge_thread_summaries",
    "summary_merge_update",
    "thread_summaries",
    "thread_summary_from_messages",
    "thread_update",
]


def thread_update(message: Mapping[str, Any], *, sharded: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The upsert filter and pipeline that fold one newly inserted message into its thread.

    ``sharded``: the filter carries the whole shard key (``mailboxId``, ``_id``), as an upsert on
    a sharded cluster requires; elsewhere the ``_id`` alone, which every server answers by index.

    Order is total on ``(ts, messageKey)``, so the summary does not depend on arrival order
    and equals ``thread_summary_from_messages`` over the same messages.
    """
    summary = thread_summary_from_messages([message])
    assert summary is not None
    return summary_merge_update(summary, sharded=sharded)


def thread_summaries(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each thread's summary of ``messages`` (a batch's new messages), in order of first appearance."""
    by_thread: dict[str, list[Mapping[str, Any]]] = {}
    for message in messages:
        by_thread.setdefault(message["threadKey"], []).append(message)
    return [summary for group in by_thread.values() if (summary := thread_summary_from_messages(group))]


def merge_thread_summaries(stored: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` with ``more`` (a summary of messages it does not count yet) merged in: what
    ``summary_merge_update`` does on the server, computed here."""
    out = dict(stored)
    out["messageCount"] = stored["messageCount"] + more["messageCount"]
    if (more["firstTs"], more["firstMessageKey"]) < (stored["firstTs"], stored["firstMessageKey"]):
        out.update(
            threadId=more["threadId"],
            subject=more["subject"],
            firstTs=more["firstTs"],
            firstMessageKey=more["firstMessageKey"],
        )
    if (more["lastTs"], more["lastMessageKey"]) > (stored["lastTs"], stored["lastMessageKey"]):
        out.update(lastTs=more["lastTs"], lastMessageKey=more["lastMessageKey"])
    if isinstance(stored.get("tags"), list):  # else a summary from before tags: read computes it
        out["tags"] = sorted(set(stored["tags"]) | set(more.get("tags") or ()))
    if more.get("tags") and "tagsRev" in more:
        out["tagsRev"] = more["tagsRev"]
    return out


def summary_merge_update(
    summary: Mapping[str, Any], *, sharded: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The upsert filter and pipeline that merge a summary of messages not yet counted (as
    ``thread_summary_from_messages`` makes it) into the stored summary of their thread."""
    first_key = (summary["firstTs"], summary["firstMessageKey"])
    last_key = (summary["lastTs"], summary["lastMessageKey"])
    no_summary = {"$eq": [{"$ifNull": ["$firstTs", None]}, None]}
    is_first = {
        "$or": [
            no_summary,
            {"$lt": [first_key[0], "$firstTs"]},
            {"$and": [{"$eq": [first_key[0], "$firstTs"]}, {"$lt": [first_key[1], "$firstMessageKey"]}]},
        ]
    }
    is_last = {
        "$or": [
            no_summary,
            {"$gt": [last_key[0], "$lastTs"]},
            {"$and": [{"$eq": [last_key[0], "$lastTs"]}, {"$gt": [last_key[1], "$lastMessageKey"]}]},
        ]
    }
    pipeline = [
        {"$set": {"_aecsFirst": is_first, "_aecsLast": is_last}},
        {
            "$set": {
                "mailboxId": summary["mailboxId"],
                "threadKey": summary["threadKey"],
                "threadId": {"$literal": summary["threadId"]},
                "messageCount": {"$add": [{"$ifNull": ["$messageCount", 0]}, summary["messageCount"]]},
                "subject": {"$cond": ["$_aecsFirst", {"$literal": summary["subject"]}, "$subject"]},
                "firstTs": {"$cond": ["$_aecsFirst", first_key[0], "$firstTs"]},
                "firstMessageKey": {"$cond": ["$_aecsFirst", first_key[1], "$firstMessageKey"]},
                "lastTs": {"$cond": ["$_aecsLast", last_key[0], "$lastTs"]},
                "lastMessageKey": {"$cond": ["$_aecsLast", last_key[1], "$lastMessageKey"]},
                # the union of the messages' tags (a summary from before tags keeps none: read computes it)
                "tags": {
                    "$cond": [
                        {"$or": [no_summary, {"$isArray": "$tags"}]},
                        {"$setUnion": [{"$ifNull": ["$tags", []]}, {"$literal": list(summary.get("tags") or ())}]},
                        "$$REMOVE",
                    ]
                },
                **(
                    {"tagsRev": {"$literal": summary["tagsRev"]}}
                    if summary.get("tags") and "tagsRev" in summary
                    else {}
                ),
            }
        },
        {"$project": {"_aecsFirst": 0, "_aecsLast": 0}},
    ]
    selector = {"_id": summary["_id"]}
    if sharded:
        selector["mailboxId"] = summary["mailboxId"]
    return selector, pipeline


def thread_summary_from_messages(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Recompute one thread's summary from its ``messages`` documents (any order)."""
    if not messages:
        return None
    ordered = sorted(messages, key=lambda m: (m["ts"], m["messageKey"]))
    first, last = ordered[0], ordered[-1]
    return {
        "_id": doc_id(first["mailboxId"], first["threadKey"]),
        "mailboxId": first["mailboxId"],
        "threadKey": first["threadKey"],
        "threadId": first["threadId"],
        "messageCount": len(ordered),
        "subject": first["subject"],
        "firstTs": first["ts"],
        "firstMessageKey": first["messageKey"],
        "lastTs": last["ts"],
        "lastMessageKey": last["messageKey"],
        "tags": sorted({str(t) for m in ordered for t in (m.get("tags") or ())}),
    }


def fold_thread_summary(summary: Mapping[str, Any] | None, message: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` with one more message folded in: what ``thread_update`` does on the server.

    Folding a thread's messages in any order gives ``thread_summary_from_messages`` of them;
    ``reindex`` uses it to rebuild every summary in one pass over ``messages``.
    """
    one = thread_summary_from_messages([message])
    assert one is not None
    return one if summary is None else merge_thread_summaries(summary, one)
