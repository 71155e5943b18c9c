"""What a tag change by Message-IDs sends: one read and one ``update_many`` by ``_id`` for the
batch, and a thread summary write only where the thread's tags change."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring

from .helpers.factories import email

pytestmark = pytest.mark.server


class Writes(monitoring.CommandListener):
    """Each ``update`` sent, as (collection, its statements)."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, list[dict[str, Any]]]] = []
        self.finds: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.updates.append((event.command["update"], list(event.command["updates"])))
        if event.command_name == "find":
            self.finds.append(event.command["find"])

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_change_by_ids_is_one_update_many_and_threads_only_where_they_change(monitored: Any, db: Any) -> None:
    writes = Writes()
    store = monitored(writes)
    store.store_many([email(n, thread=f"t{n % 3}@x") for n in range(1, 31)])
    ids = [f"m{n}@example.com" for n in range(1, 21)] + ["missing@example.com"]
    writes.updates.clear()
    writes.finds.clear()
    report = store.tag(ids, add=["work"])
    assert (report.matched, report.changed) == (20, 20)
    to_messages = [statements for coll, statements in writes.updates if coll == "messages"]
    assert len(to_messages) == 1 and len(to_messages[0]) == 1 and to_messages[0][0]["multi"] is True
    assert writes.finds.count("messages") == 1  # the batch read once: ids, threads, tags
    threads_written = [s for coll, s in writes.updates if coll == "threads"]
    assert len(threads_written) == 1
    # the same change again: nothing to change, so no message is written, and no thread (its
    # statement, which finishes a run that stopped before its threads, matches none)
    revs = {t["threadId"]: t.get("tagsRev") for t in db.threads.find({}, {"threadId": 1, "tagsRev": 1})}
    writes.updates.clear()
    report = store.tag(ids, add=["work"])
    assert (report.matched, report.changed) == (20, 0)
    assert [coll for coll, _ in writes.updates if coll == "messages"] == []
    assert {t["threadId"]: t.get("tagsRev") for t in db.threads.find({}, {"threadId": 1, "tagsRev": 1})} == revs
    # a thread that holds the tag already is not rewritten when another of its messages gets it
    before = {t["threadId"]: t.get("tagsRev") for t in db.threads.find({}, {"threadId": 1, "tagsRev": 1})}
    assert store.tag(["m21@example.com"], add=["work"]).changed == 1
    after = {t["threadId"]: t.get("tagsRev") for t in db.threads.find({}, {"threadId": 1, "tagsRev": 1})}
    assert after == before
    assert {t["threadId"]: t["tags"] for t in store.list_threads(limit=10).threads}["t0@x"] == ["work"]
