"""Tags, flags and folders: the model, ``store.tag``/``set_folders``/``tags``, initial
tags on store, the query terms on every engine, and the safety rules (no lost update, no
resurrection, nothing left by an erase). Every store test runs on each backend; the concurrent
writers run on the real servers."""

from __future__ import annotations

import datetime as dt
import threading
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo import monitoring

from aecs_mongo import InvalidTagError, MessageStore, SearchQueryError, TagReport
from aecs_mongo.pure import tags as tag_rules
from aecs_mongo.pure.explain import plan_stages
from aecs_mongo.pure.search_compile import message_filter, post_match, split_message_terms, text_search
from aecs_mongo.pure.search_query import Label, Not, parse, to_text

from .helpers.factories import BASE_TS, email

NOW = dt.datetime(2026, 7, 1, tzinfo=dt.UTC)


def raw_mail(mid: str, subject: str, body: str) -> bytes:
    message = EmailMessage()
    message["Message-ID"] = f"<{mid}>"
    message["From"] = "Ann Example <ann@example.org>"
    message["To"] = "bob@example.com"
    message["Subject"] = subject
    message["Date"] = format_datetime(dt.datetime(2024, 3, 5, 10, 0, tzinfo=dt.UTC))
    message.set_content(body)
    return message.as_bytes()


def ids(hits: Any) -> list[str]:
    return [h["messageId"] for h in hits]


# --- pure rules ----------------------------------------------------------------------------------


def test_tags_follow_jmap_keyword_rules() -> None:
    assert tag_rules.check_tag("Todo") == "todo"
    assert tag_rules.check_tag("$Seen") == "$seen"
    assert tag_rules.check_tag("a" * 255) == "a" * 255
    assert tag_rules.check_tag("work/q3-report_v2.1") == "work/q3-report_v2.1"
    bad_tags = ("", "a" * 256, "two words", "tab\tx", "(x)", "[x]", "{x}", 'q"x', "a\\b", "50%", "st*r", "köln", "\x00")
    for bad in bad_tags:
        with pytest.raises(InvalidTagError):
            tag_rules.check_tag(bad)
    assert issubclass(InvalidTagError, ValueError)
    with pytest.raises(TypeError):
        tag_rules.check_tag({"$ne": None})
    with pytest.raises(TypeError):
        tag_rules.check_tags("todo")  # one string is not a list of tags
    assert tag_rules.check_tags(["Todo", "todo", "$seen"]) == ("todo", "$seen")
    assert tag_rules.check_folder("Archive/2024") == "Archive/2024"
    for bad in ("", "a\nb", "x" * 1025):
        with pytest.raises(InvalidTagError):
            tag_rules.check_folder(bad)
    flags = {"$seen", "$flagged", "$answered", "$draft", "$forwarded", "$junk", "$notjunk"}
    assert set(tag_rules.SYSTEM_FLAGS) == flags


def test_the_query_language_reads_tags_flags_folders_and_ids() -> None:
    assert parse("tag:Todo") == Label("tag", "todo")
    assert parse("is:unread") == Not(Label("tag", "$seen"))
    assert parse("is:read") == Label("tag", "$seen")
    assert parse("is:flagged") == Label("tag", "$flagged")
    assert parse('folder:"Sent Items"') == Label("folder", "Sent Items")
    assert parse("id:<m1@example.com>") == Label("id", "m1@example.com")
    for query in ("tag:todo budget -is:read", 'folder:"Sent Items" OR tag:$flagged', "id:m1@x thread:t@x"):
        tree = parse(query)
        assert tree is not None and parse(to_text(tree)) == tree
    for bad in ("tag:(a OR b)", "tag:two(x", "is:purple", "tag:köln", "id:"):
        with pytest.raises(SearchQueryError):
            parse(bad)


def test_label_terms_compile_for_the_mongodb_engines() -> None:
    def keyer(t: str) -> str:
        return "k:" + t

    tree = parse("tag:todo -is:read")
    assert tree is not None
    assert message_filter(tree, NOW, keyer) == {"$and": [{"tags": "todo"}, {"$nor": [{"tags": "$seen"}]}]}
    words = parse("budget tag:todo NOT folder:Spam")
    assert words is not None and message_filter(words, NOW, keyer) is None  # words: an engine's
    compiled = text_search(words)
    assert compiled.text == '"budget"'
    assert post_match(compiled.post, NOW, keyer) == {"$and": [{"m.tags": "todo"}, {"m.folders": {"$ne": "Spam"}}]}
    text, message = split_message_terms(words)
    assert len(text) == 1 and len(message) == 2
    dates = parse("date:2024")
    assert dates is not None and message_filter(dates, NOW, keyer) is None  # no label: the engines keep it


def test_a_change_is_one_atomic_update_that_touches_only_what_changes() -> None:
    assert tag_rules.tag_update("tags", ["a"], []) == {"$addToSet": {"tags": {"$each": ["a"]}}}
    assert tag_rules.tag_update("tags", [], ["b"]) == {"$pull": {"tags": {"$in": ["b"]}}}
    both = tag_rules.tag_update("tags", ["a"], ["b"])
    assert isinstance(both, list) and list(both[0]) == ["$set"]
    assert tag_rules.needs_change("tags", ["a"], ["b"]) == {
        "$or": [{"tags": {"$not": {"$all": ["a"]}}}, {"tags": {"$in": ["b"]}}]
    }


# --- the store ------------------------------------------------------------------------------------


def test_initial_tags_and_folders_and_a_redelivery(store: MessageStore, db: Any) -> None:
    store.store(email(1), tags=["$Seen", "work"], folders=["INBOX"])
    store.store(email(2))
    row = db.messages.find_one({"messageId": "m1@example.com"})
    assert row["tags"] == ["$seen", "work"] and row["folders"] == ["INBOX"]
    assert "tags" not in db.messages.find_one({"messageId": "m2@example.com"})  # new mail: no write
    # a re-delivery (found in another folder, with other flags) adds the folder, never tags
    again = store.store(email(1), tags=["$flagged"], folders=["Archive", "INBOX"])
    assert not again.inserted
    row = db.messages.find_one({"messageId": "m1@example.com"})
    assert row["tags"] == ["$seen", "work"] and row["folders"] == ["INBOX", "Archive"]
    with pytest.raises(InvalidTagError):
        store.store(email(3), tags=["no spaces"])
    assert db.messages.count_documents({"messageId": "m3@example.com"}) == 0
    page = store.list_messages()
    assert {m["messageId"]: m["tags"] for m in page.messages} == {
        "m1@example.com": ["$seen", "work"],
        "m2@example.com": [],
    }
    assert store.list_threads().threads[0]["tags"] == ["$seen", "work"]  # the union of its messages'
    assert [e["tags"] for e in store.thread_context("root@example.com")] == [["$seen", "work"], []]
    assert store.count("is:unread") == 1 and store.count("is:read") == 1 and store.count("folder:Archive") == 1


@pytest.mark.server
def test_store_many_tags_every_item_and_a_sources_own(store: MessageStore, db: Any) -> None:
    class Sourced:  # a mail source's RawMessage, as the store reads it (by its attributes)
        def __init__(self, data: bytes, tags: tuple[str, ...], folders: tuple[str, ...]) -> None:
            self.data, self.received_at, self.tags, self.folders = data, None, tags, folders

    items: list[Any] = [raw_mail(f"s{n}@x", "hello", "body") for n in range(3)]
    items.append(Sourced(raw_mail("src@x", "from a folder", "body"), ("$Seen",), ("Sent",)))
    results = store.store_many(items, tags=["imported"])
    assert all(r.inserted for r in results)
    assert store.tags() == {"$seen": 1, "imported": 4}
    assert db.messages.find_one({"messageId": "src@x"})["folders"] == ["Sent"]
    refused: list[int] = []
    bad = [Sourced(raw_mail("bad@x", "x", "y"), ("no good",), ())]
    store.store_many(bad, on_error=lambda i, _, e: refused.append(i))
    assert refused == [0] and db.messages.count_documents({"messageId": "bad@x"}) == 0


@pytest.mark.server
def test_tag_by_ids_query_thread_and_tag_then_counts(store: MessageStore) -> None:
    for n in range(6):
        store.store(email(n, thread="a@example.com" if n < 3 else "b@example.com"))
    report = store.tag(["<m0@example.com>", "m1@example.com", "absent@x"], add=["todo"])
    assert report == TagReport(matched=2, changed=2)
    assert store.tag("id:m0@example.com", add=["todo"]) == TagReport(matched=1, changed=0)  # already there
    assert store.tag("thread:b@example.com", add=["$seen", "later"]).changed == 3
    assert store.tag("tag:later", add=["done"], remove=["later"]).changed == 3
    assert store.tags() == {"$seen": 3, "done": 3, "todo": 2}
    assert store.count("tag:done") == 3 and store.count("is:unread") == 3
    assert ids(store.search("tag:todo")) == ["m1@example.com", "m0@example.com"]
    assert store.search("tag:todo")[0]["tags"] == ["todo"]
    dry = store.tag("is:unread", add=["$seen"], dry_run=True)
    assert dry == TagReport(matched=3, changed=3, dry_run=True) and store.count("is:unread") == 3
    assert store.tag("body 4", add=["found"]).changed == 1  # words: through the search engine
    assert store.set_folders("tag:todo", add=["Work"]) == TagReport(matched=2, changed=2)
    assert ids(store.search("folder:Work")) == ["m1@example.com", "m0@example.com"]
    assert store.set_folders("folder:Work", remove=["Work"]).changed == 2
    with pytest.raises(InvalidTagError):
        store.tag("tag:todo", add=["bad tag"])
    with pytest.raises(ValueError):
        store.tag("tag:todo", add=["x"], remove=["x"])
    with pytest.raises(ValueError):
        store.tag("   ", add=["x"])
    with pytest.raises(TypeError):
        store.tag({"$ne": None}, add=["x"])  # type: ignore[arg-type]


@pytest.mark.server
def test_a_change_to_thousands_runs_in_batches_and_converges(store: MessageStore, db: Any) -> None:
    # a few seconds of 700 messages each: the batches of 1,000 begin and end inside a second
    docs = [email(n, thread=f"t{n % 50}@x", ts=BASE_TS + (n // 700) * 60) for n in range(2500)]
    store.store_many(docs, batch_size=500)
    first = store.tag("date:2026", add=["bulk"])
    assert first == TagReport(matched=2500, changed=2500)
    # an interrupted change is finished by running it again: nothing more changes
    db.messages.update_many({"messageKey": {"$lt": "4"}}, {"$pull": {"tags": "bulk"}})
    lost = 2500 - db.messages.count_documents({"tags": "bulk"})
    assert 0 < lost < 2500
    assert store.tag("date:2026", add=["bulk"]) == TagReport(matched=2500, changed=lost)
    assert store.tag("tag:bulk", remove=["bulk"]) == TagReport(matched=2500, changed=2500)
    assert store.tags() == {}


@pytest.mark.server
def test_no_resurrection_and_an_erase_leaves_no_tag(store: MessageStore, db: Any) -> None:
    store.store(email(1))
    store.store(email(2))
    store.delete("m1@example.com")
    assert store.tag(["m1@example.com", "m2@example.com"], add=["x"]) == TagReport(matched=1, changed=1)
    assert db.messages.count_documents({"messageId": "m1@example.com"}) == 0
    store.erase_mailbox()
    assert db.messages.count_documents({"tags": "x"}) == 0 and store.tags() == {}
    assert store.tag("tag:x", add=["y"]) == TagReport()


@pytest.mark.server
def test_concurrent_writers_lose_no_tag(make_store: Any, db: Any) -> None:
    store = make_store()
    store.store_many([email(n) for n in range(20)])
    targets = [f"m{n}@example.com" for n in range(20)]
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        try:
            mine = MessageStore(db, mailbox_id="alice")
            for _ in range(3):
                mine.tag(targets, add=[tag])
                mine.tag("tag:" + tag, remove=["$junk"], add=["$seen"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for row in db.messages.find({"mailboxId": "alice"}):
        assert sorted(row["tags"]) == ["$seen", "w0", "w1", "w2", "w3", "w4", "w5"], row["messageId"]


@pytest.mark.server
def test_every_engine_answers_label_terms(make_store: Any, tmp_path: Path, backend: str) -> None:
    local = make_store("alice", search_index=tmp_path / "index.sqlite", search_engine="local")
    scan = make_store("alice", search_engine="scan")
    auto = make_store("alice")
    local.store(raw_mail("a@x", "budget plan", "the budget"), tags=["todo"], folders=["INBOX"])
    local.store(raw_mail("b@x", "budget review", "the budget again"), folders=["Archive"])
    local.store(raw_mail("c@x", "lunch", "sandwiches"), tags=["todo", "$seen"])
    # the index follows another store's tag change (one without the index): from the change
    # stream, or without one, by the mailbox's change mark (aecs_mongo/pure/change_marks.py)
    auto.tag("id:b@x", add=["todo", "$flagged"])
    local.tag("id:a@x", add=["$seen"])
    cases = {
        "tag:todo": ["a@x", "b@x", "c@x"],
        "tag:todo budget": ["a@x", "b@x"],
        "budget is:unread": ["b@x"],
        "is:flagged OR lunch": ["b@x", "c@x"],
        "folder:Archive budget": ["b@x"],
        "budget -folder:INBOX": ["b@x"],
        "id:a@x": ["a@x"],
        "tag:todo NOT tag:$seen": ["b@x"],
    }
    for query, expected in cases.items():
        for store in (scan, auto):
            assert sorted(ids(store.search(query))) == expected, (query, store.search_engine)
            assert store.count(query) == len(expected), query
    for query, expected in cases.items():
        found = sorted(ids(local.search(query)))
        assert found == expected, ("local", query, found)
        assert local.count(query) == len(expected), query
    assert auto.search("tag:todo").engine == "messages"
    assert {h["messageId"]: h["tags"] for h in local.search("tag:todo budget")} == {
        "a@x": ["$seen", "todo"],
        "b@x": ["$flagged", "todo"],
    }


@pytest.mark.server
def test_tag_changes_are_feed_events_and_the_feed_resumes(db: Any, backend: str) -> None:
    if backend == "standalone":
        pytest.skip("the feed needs change streams (a replica set)")
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store(email(1), tags=["todo"])
    with store.watch("mirror", since="beginning", tags=True, max_await_ms=200) as feed:
        first = feed.next_batch(10)
        assert [(i.message_id, i.kind, i.tags) for i in first] == [("m1@example.com", "stored", ("todo",))]
        store.store(email(2))
        store.tag("id:m1@example.com", add=["$seen"])
        store.db.messages.update_one({"messageId": "m2@example.com"}, {"$set": {"other": 1}})  # not a tag change
        items = feed.next_batch(10)
    assert [(i.message_id, i.kind, i.tags) for i in items] == [
        ("m2@example.com", "stored", ()),
        ("m1@example.com", "tags", ("$seen", "todo")),
    ]
    store.set_folders(["m2@example.com"], add=["Archive"])
    with store.watch("mirror", tags=True, max_await_ms=200) as again:  # continues after its checkpoint
        resumed = again.next_batch(10)
    assert [(i.message_id, i.kind, i.folders) for i in resumed] == [("m2@example.com", "tags", ("Archive",))]
    assert resumed[0].as_dict()["folders"] == ["Archive"]
    with store.watch("plain", since="beginning", max_await_ms=200) as plain:  # without tags=: stored mail only
        assert [i.kind for i in plain.next_batch(10)] == ["stored", "stored"]


# --- the command line ------------------------------------------------------------------------------


def test_tag_words_become_options_only_for_the_tag_command() -> None:
    from aecs_mongo.cli import tag_changes

    assert tag_changes(["--db", "x", "tag", "+todo", "-inbox", "--", "-from:boss", "+x"]) == [
        "--db",
        "x",
        "tag",
        "--add=todo",
        "--remove=inbox",
        "--",
        "-from:boss",
        "+x",
    ]
    assert tag_changes(["tag", "+a", "--json", "-v", "--mailbox", "-odd", "from:x"]) == [
        "tag",
        "--add=a",
        "--json",
        "-v",
        "--mailbox",
        "-odd",
        "from:x",
    ]
    assert tag_changes(["search", "-inbox", "+x"]) == ["search", "-inbox", "+x"]


@pytest.mark.server
@pytest.mark.one_server
def test_the_tag_tags_and_ingest_tag_commands(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = Path(__file__).resolve().parents[1] / "samples" / "mailbox"
    assert cli("ingest", str(samples), "--tag", "Imported", "--tag", "$seen").code == 0
    assert cli("ingest", str(samples), "--tag", "bad tag").code == 2
    listed = cli("tags", "--json").lines()
    counts = {row["tag"]: row["count"] for row in listed[:-1]}
    n = counts["imported"]
    assert n > 3 and counts == {"$seen": n, "imported": n} and listed[-1] == {"messages": n, "unread": 0}
    dry = cli("tag", "+todo", "-$seen", "--dry-run", "--", "plan")
    assert dry.code == 0 and "would change" in dry.out and cli("count", "tag:todo").out.strip() == "0"
    report = cli("tag", "+todo", "-$seen", "--json", "--", "plan").json()
    assert report["matched"] >= 1 and report["changed"] == report["matched"] and report["add"] == ["todo"]
    assert cli("count", "is:unread").out.strip() == str(report["matched"])
    assert ", 0 changed" in cli("tag", "+todo", "-$seen", "--", "plan").out  # re-running changes nothing
    # tags in the lines, within 80 columns, and in --json
    monkeypatch.setenv("COLUMNS", "80")
    for command in (["inbox"], ["threads"], ["search", "tag:todo"], ["inbox", "--query", "is:unread"]):
        out = cli(*command).out
        assert ("(imported todo)" if command == ["threads"] else "(unread imported todo)") in out, command
        assert all(len(line) <= 80 for line in out.splitlines() if "next_cursor" not in line), command
    rows = cli("search", "tag:todo", "--json").lines()
    assert all(r["tags"] == ["imported", "todo"] for r in rows[:-1]) and rows[-1]["engine"] == "local"
    threads = cli("threads", "--json").lines()
    assert any("todo" in t.get("tags", ()) for t in threads)
    assert cli("tag", "+x").code == 2  # no query
    assert cli("tag", "+bad tag", "--", "plan").code == 2
    assert cli("tag", "--", "plan").out.endswith("0 would change (dry run: nothing written)\n")  # no change: a count


@pytest.mark.server
def test_a_tag_change_racing_deletes_never_brings_a_message_back(make_store: Any, db: Any) -> None:
    store = make_store()
    store.store_many([email(n) for n in range(60)])
    ids = [f"m{n}@example.com" for n in range(60)]
    deleter = MessageStore(db, mailbox_id="alice")
    errors: list[BaseException] = []

    def delete_half() -> None:
        try:
            for mid in ids[::2]:
                deleter.delete(mid)
        except BaseException as exc:
            errors.append(exc)

    racing = threading.Thread(target=delete_half)
    racing.start()
    for _ in range(5):
        store.tag(ids, add=["x"])
        store.tag("date:2026", remove=["x"], add=["y"])
    racing.join()
    assert errors == []
    left = {row["messageId"] for row in db.messages.find({"mailboxId": "alice"}, {"messageId": 1})}
    assert left == set(ids[1::2])  # every deleted message stayed deleted
    assert db.bodies.count_documents({"mailboxId": "alice"}) == 30


class _Updates(monitoring.CommandListener):
    """The update commands a client sends (pymongo's command monitoring)."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.server
def test_a_change_that_fits_a_batch_is_one_journaled_statement_on_the_tags_index(monitored: Any, db: Any) -> None:
    listener = _Updates()
    store = monitored(listener)
    store.store_many([email(n, ts=BASE_TS + (n // 7) * 60) for n in range(30)], tags=["batch"])
    listener.commands.clear()
    assert store.tag("tag:batch", add=["x"]) == TagReport(matched=30, changed=30)
    updates = [c for c in listener.commands if c.get("update") == "messages"]
    assert len(updates) == 1 and len(updates[0]["updates"]) == 1, updates
    assert updates[0]["writeConcern"].get("j") is True  # the batch's one durable wait
    selector = updates[0]["updates"][0]["q"]
    assert "_id" not in selector and selector.get("tags") == "batch", selector
    explained = db.command({"explain": {"find": "messages", "filter": selector}, "verbosity": "queryPlanner"})
    assert "aecs_messages_tags" in {s.get("indexName") for s in plan_stages(explained)}, explained
    assert store.count("tag:x") == 30 and store.tag("tag:batch", add=["x"]).changed == 0
