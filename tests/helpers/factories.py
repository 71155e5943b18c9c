"""Small NormalizedEmail builders for tests (our own fixtures; no corpus needed)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from aecs_mongo.pure.documents import thread_summary_from_messages

BASE_TS = 1_782_743_520  # 2026-06-29T14:32:00Z


def iso(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def email(
    n: int,
    *,
    thread: str = "root@example.com",
    ts: int | None = None,
    sender: str = "Bob@Example.com",
    to: tuple[str, ...] = ("alice@example.com",),
    subject: str | None = None,
    in_reply_to: str | None = None,
    references: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Message ``n`` of a thread: message id ``m<n>@example.com``."""
    stamp = BASE_TS + n * 60 if ts is None else ts
    doc: dict[str, Any] = {
        "messageId": f"<m{n}@example.com>",
        "threadId": thread,
        "metadata": {
            "from": {"name": "Bob", "email": sender},
            "to": [{"name": None, "email": a} for a in to],
            "cc": [],
            "bcc": [],
            "subject": subject if subject is not None else f"Re: Topic {thread}",
            "date": iso(stamp),
            "timestamp": stamp,
        },
        "content": {
            "rawFull": None,
            "raw": f"body {n}",
            "html": None,
            "text": f"body {n}",
            "clean": f"body {n}",
            "forAI": f"body {n}",
        },
        "thread": {"position": None, "inReplyTo": in_reply_to, "references": references or []},
        "attachments": [],
        "processing": {"processedAt": iso(BASE_TS + 10_000), "specVersion": "1.1"},
    }
    doc.update(extra)
    return doc


def recomputed_threads(db: Any, mailbox_id: str) -> dict[str, dict[str, Any]]:
    """Thread summaries recomputed from ``messages`` (what the stored ones must equal)."""
    by_thread: dict[str, list[dict[str, Any]]] = {}
    for m in db.messages.find({"mailboxId": mailbox_id}):
        by_thread.setdefault(m["threadKey"], []).append(m)
    result = {}
    for members in by_thread.values():
        summary = thread_summary_from_messages(members)
        assert summary is not None
        result[summary["_id"]] = summary
    return result


def stored_threads(db: Any, mailbox_id: str) -> dict[str, dict[str, Any]]:
    """The stored summaries as ``recomputed_threads`` makes them: ``tags`` sorted (a union kept
    by the server is in no order), without the ``tagsRev`` token (random: no content)."""
    out = {}
    for t in db.threads.find({"mailboxId": mailbox_id}):
        t.pop("tagsRev", None)
        if isinstance(t.get("tags"), list):
            t["tags"] = sorted(t["tags"])
        out[t["_id"]] = t
    return out
