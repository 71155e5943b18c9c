"""A thread's tags kept on its summary: ``threads.tags`` is the union of the
thread's messages' tags after every store, tag change, delete, expire, reindex and re-parse;
concurrent tag changes leave it exact; a summary written before the field existed reads right
and gets the field; ``list_threads`` reads nothing but its page of ``threads``."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from pymongo import monitoring

from aecs_mongo import MessageStore
from aecs_mongo.pure import tags as tag_rules

from .helpers.factories import BASE_TS, email
from .helpers.monitoring import Recorder


def truth(db: Any, mailbox: str = "alice") -> dict[str, list[str]]:
    """Each thread's union of its messages' tags, from the messages."""
    union: dict[str, set[str]] = {}
    for row in db.messages.find({"mailboxId": mailbox}, {"threadKey": 1, "tags": 1}):
        union.setdefault(row["threadKey"], set()).update(row.get("tags") or ())
    return {key: sorted(tags) for key, tags in union.items()}


def stored(db: Any, mailbox: str = "alice") -> dict[str, list[str] | None]:
    """Each thread summary's ``tags`` as stored (None: no field)."""
    return {
        row["threadKey"]: (sorted(row["tags"]) if "tags" in row else None)
        for row in db.threads.find({"mailboxId": mailbox}, {"threadKey": 1, "tags": 1})
    }


def listed(store: Any) -> dict[str, list[str]]:
    return {t["threadId"]: t["tags"] for t in store.list_threads(limit=50).threads}


# --- pure ---------------------------------------------------------------------------------------------


def test_the_pull_is_filtered_on_the_token_and_spares_what_a_message_still_carries() -> None:
    threads = [
        {"_id": "a:1", "threadKey": "k1", "tags": ["x", "y", "z"], "tagsRev": "r1"},
        {"_id": "a:2", "threadKey": "k2", "tags": ["x"]},
        {"_id": "a:3", "threadKey": "k3", "tags": ["w"], "tagsRev": "r3"},
    ]
    still = [{"threadKey": "k1", "tags": ["x", "q"]}]
    pulls = tag_rules.thread_tags_to_pull(threads, still, ["x", "y"])
    assert pulls == [
        ({"_id": "a:1", "tagsRev": "r1"}, {"$pull": {"tags": {"$in": ["y"]}}}),
        ({"_id": "a:2", "tagsRev": None}, {"$pull": {"tags": {"$in": ["x"]}}}),  # no token: matches none set
    ]
    # one statement per token and tags pulled, each summary still filtered on the token it had
    more = [({"_id": "a:4", "tagsRev": "r1"}, {"$pull": {"tags": {"$in": ["y"]}}})]
    more.append(({"_id": "a:5", "tagsRev": "r2"}, {"$pull": {"tags": {"$in": ["y"]}}}))
    assert tag_rules.thread_pull_groups(pulls + more) == [
        ({"_id": {"$in": ["a:1", "a:4"]}, "tagsRev": "r1"}, {"$pull": {"tags": {"$in": ["y"]}}}),
        ({"_id": {"$in": ["a:2"]}, "tagsRev": None}, {"$pull": {"tags": {"$in": ["x"]}}}),
        ({"_id": {"$in": ["a:5"]}, "tagsRev": "r2"}, {"$pull": {"tags": {"$in": ["y"]}}}),
    ]
    added = tag_rules.thread_tags_added(["x"], "r9")
    assert added[0]["$set"]["tagsRev"] == {"$literal": "r9"}
    assert tag_rules.thread_tags_filter("a", ["k1"]) == {"mailboxId": "a", "threadKey": {"$in": ["k1"]}}


# --- the store ------------------------------------------------------------------------------------------


@pytest.mark.server
def test_the_union_follows_store_tag_untag_and_delete(store: MessageStore, db: Any) -> None:
    store.store(email(1), tags=["work"])
    store.store(email(2), tags=["$seen"])
    store.store_many([email(3, thread="b@x"), email(4, thread="b@x")], tags=["later"])
    store.store(email(5, thread="c@x"))
    assert stored(db) == truth(db)
    assert listed(store) == {"root@example.com": ["$seen", "work"], "b@x": ["later"], "c@x": []}
    # a tag: the thread gets it (by ids, by a thread, by a query of tags)
    store.tag(["m5@example.com"], add=["todo"])
    store.tag("thread:root@example.com", add=["todo"])
    assert listed(store)["c@x"] == ["todo"] and listed(store)["root@example.com"] == ["$seen", "todo", "work"]
    # untag one of two carrying it: the thread keeps it; untag the other: gone
    store.tag(["m1@example.com"], remove=["todo"])
    assert listed(store)["root@example.com"] == ["$seen", "todo", "work"]
    store.tag("tag:todo", remove=["todo"])  # a query naming the tag it removes
    assert listed(store) == {"root@example.com": ["$seen", "work"], "b@x": ["later"], "c@x": []}
    store.tag(["m3@example.com"], add=["x"], remove=["later"])  # both at once
    assert listed(store)["b@x"] == ["later", "x"]
    assert stored(db) == truth(db)
    # a delete recomputes the thread
    store.delete("m1@example.com")
    assert listed(store)["root@example.com"] == ["$seen"]
    store.delete("m4@example.com")
    assert listed(store)["b@x"] == ["x"]
    assert stored(db) == truth(db)
    # an expire too
    old = BASE_TS - 10**6
    store.store(email(7, thread="d@x", ts=old), tags=["gone"])
    store.store(email(8, thread="d@x"), tags=["kept"])
    store.expire(dt.datetime.fromtimestamp(old + 1, dt.UTC))
    assert listed(store)["d@x"] == ["kept"] and stored(db) == truth(db)
    # folders are not tags
    store.set_folders(["m8@example.com"], add=["Archive"])
    assert listed(store)["d@x"] == ["kept"]


def test_a_change_interrupted_after_its_messages_is_finished_by_running_it_again(store: MessageStore, db: Any) -> None:
    store.store_many([email(n) for n in range(3)])
    db.messages.update_many({"mailboxId": "alice"}, {"$addToSet": {"tags": "x"}})  # as if stopped there
    assert store.tag("tag:x OR tag:y", add=["x"]).changed == 0
    assert listed(store) == {"root@example.com": ["x"]}


@pytest.mark.server
def test_threads_stored_before_the_field_read_right_and_get_it(store: MessageStore, db: Any) -> None:
    store.store_many([email(1), email(2), email(3, thread="b@x"), email(4, thread="c@x")])
    store.tag(["m1@example.com"], add=["todo"])
    store.tag(["m3@example.com"], add=["$seen"])
    db.threads.update_many({}, {"$unset": {"tags": "", "tagsRev": ""}})  # as an older release left them
    # a store and a tag change into such a thread keep it without the field (no partial union)
    store.store(email(5), tags=["new"])
    store.tag(["m2@example.com"], add=["more"])
    store.tag(["m1@example.com"], remove=["todo"])
    assert set(stored(db).values()) == {None}
    assert listed(store) == {"root@example.com": ["more", "new"], "b@x": ["$seen"], "c@x": []}
    assert stored(db) == truth(db)  # computed once and stored
    store.tag(["m4@example.com"], add=["z"])
    assert listed(store)["c@x"] == ["z"]
    db.threads.update_many({}, {"$unset": {"tags": ""}})
    store.reindex()  # the migration of every summary at once
    assert stored(db) == truth(db)


class TagBeforeTheWrite(monitoring.CommandListener):
    """When the monitored store is about to write a thread summary: a tag change by another
    client first (``other``: a store; ``target`` the message it tags with ``x``)."""

    def __init__(self) -> None:
        self.other: Any = None
        self.target = "m1@example.com"

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command.get("update") == "threads" and self.other is not None:
            other, self.other = self.other, None
            other.tag([self.target], add=["x"])

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.server
def test_a_read_does_not_store_a_union_a_tag_change_made_stale(monitored: Any, db: Any) -> None:
    listener = TagBeforeTheWrite()
    store = monitored(listener)
    store.store_many([email(1), email(2)])
    db.threads.update_many({}, {"$unset": {"tags": ""}})
    listener.other = MessageStore(db, mailbox_id="alice")
    assert listed(store) == {"root@example.com": []}  # as the messages were when it read them
    assert listener.other is None  # the change ran between the read and its write
    assert "tags" not in db.threads.find_one({})  # the token differed: the stale union not stored
    assert listed(store) == {"root@example.com": ["x"]} and stored(db) == truth(db)


@pytest.mark.server
def test_a_removal_never_pulls_a_tag_another_writer_added_meanwhile(monitored: Any, db: Any) -> None:
    """The remover has read that no message of the thread still carries ``x``; before its pull
    reaches the summary, another writer tags the thread's other message ``x`` (message, then
    summary): the pull, filtered on the token it read, misses, and the next round sees it."""
    listener = TagBeforeTheWrite()
    store = monitored(listener)
    store.store_many([email(1), email(2)])
    store.tag(["m1@example.com"], add=["x"])
    listener.other, listener.target = MessageStore(db, mailbox_id="alice"), "m2@example.com"
    store.tag(["m1@example.com"], remove=["x"])
    assert listener.other is None  # the other writer ran between the check and the pull
    assert listed(store) == {"root@example.com": ["x"]} and stored(db) == truth(db)


class StoreBeforeTheWrite(monitoring.CommandListener):
    """When the monitored store is about to write its tag change to ``messages``: another client
    stores ``message`` (a store ``other``, the tags ``tags``) first."""

    def __init__(self, other: Any, message: Any, tags: list[str]) -> None:
        self.other, self.message, self.tags = other, message, tags

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command.get("update") == "messages" and self.other is not None:
            other, self.other = self.other, None
            other.store(self.message, tags=self.tags)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.server
def test_a_message_stored_between_the_read_and_the_write_gets_its_thread_changed(monitored: Any, db: Any) -> None:
    """A change by a query reads its page (keys, threads, tags), then writes by the query: a
    message stored in between is changed by the write, and its thread follows."""
    listener = StoreBeforeTheWrite(MessageStore(db, mailbox_id="alice"), email(3, thread="late@x"), ["batch"])
    store = monitored(listener)
    store.store_many([email(1), email(2, thread="b@x")], tags=["batch"])
    report = store.tag("tag:batch", add=["x"])
    assert listener.other is None  # the other store ran between the read and the write
    assert report.changed == 3
    assert listed(store)["late@x"] == ["batch", "x"] and stored(db) == truth(db)


@pytest.mark.server
def test_list_threads_reads_only_its_page(recorded: tuple[Any, Recorder], db: Any) -> None:
    store, recorder = recorded
    store.store_many([email(n, thread=f"t{n % 5}@x") for n in range(20)], tags=["a"])
    store.tag("thread:t1@x", add=["b"])
    store.list_threads(limit=10)  # the first read of a store samples the mailbox (windowed reads)
    recorder.finds.clear()
    page = store.list_threads(limit=10)
    assert {t["threadId"]: t["tags"] for t in page.threads}["t1@x"] == ["a", "b"]
    assert [f["find"] for f in recorder.finds] == ["threads"]  # the plain page; no messages read


@pytest.mark.server
def test_concurrent_tag_changes_leave_every_thread_exact(make_store: Any, db: Any) -> None:
    """Writers add and remove the same tags on different messages of the same threads at once
    (the case where a remover's check and an adder's write interleave), and a writer stores new
    tagged messages into them: each summary ends as the union of its messages'."""
    store = make_store()
    store.store_many([email(n, thread=f"t{n % 3}@x") for n in range(12)])
    errors: list[BaseException] = []

    def flipper(first: int) -> None:
        try:
            mine = MessageStore(db, mailbox_id="alice")
            for round_ in range(6):
                for n in range(first, 12, 4):
                    mid = f"m{n}@example.com"
                    if (round_ + n) % 2:
                        mine.tag([mid], add=["x", f"r{first}"])
                    else:
                        mine.tag([mid], remove=["x"])
        except BaseException as exc:
            errors.append(exc)

    def storer() -> None:
        try:
            mine = MessageStore(db, mailbox_id="alice")
            for n in range(100, 106):
                mine.store(email(n, thread=f"t{n % 3}@x"), tags=["x"] if n % 2 else ["y"])
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=flipper, args=(i,)) for i in range(4)]
    workers.append(threading.Thread(target=storer))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert stored(db) == truth(db)
    # and after untagging every message, nothing is left on any thread
    store.tag("tag:x", remove=["x"])
    assert all("x" not in tags for tags in listed(store).values())
    assert stored(db) == truth(db)
