"""Search engines on real servers: the local index (SQLite FTS5) and the scan agree on the shared
corpus; words in signatures, HTML-only parts, with accents and in names are found; deleted,
expired and erased mail never comes back; the index follows the store through crashes and other
processes; the command line's search, count and --query.

$text runs only where MONGODB_URI names a server with text indexes (the test servers refuse
them); its compiler is checked as data here and in tests/test_search.py.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore, SearchIndexError, SearchQueryError
from aecs_mongo.pure.change_marks import (
    STALE_AFTER_S,
    begin_update,
    labels_moved,
    mark_key,
    only_change,
    removals_moved,
    stale_tokens,
)
from aecs_mongo.pure.search_compile import text_search
from aecs_mongo.pure.search_query import parse
from aecs_mongo.search_index import Record, SearchIndex

from .helpers.children import start_worker
from .helpers.cli import Cli, aecs
from .helpers.paths import ROOT
from .helpers.search import corpus_raw

SAMPLES = ROOT / "samples" / "mailbox"

# every kind of node, on words the corpus holds (accents, Cyrillic, names, HTML-only words,
# file names, dates, negations, prefixes, phrases)
QUERIES = [
    "the",
    "fouche",
    "FOUCHÉ",
    "коллекция",
    "lutkebohle",
    "from:finnie",
    "copperas OR tantrum",
    "attachment:pdf",
    "attachment:signature -subject:signed",
    '"thank you"',
    "pars*",
    "subject:re",
    "subject:(test OR hello)",
    "NOT the",
    "the -html date:..2010",
    "date:2010..2012",
    "date:2005",
    "to:example body:message",
    "(html OR text) NOT subject:re",
    "boundary",
    "from:example.com",
]


def raw_mail(
    mid: str,
    subject: str,
    body: str,
    *,
    sender: str = "Ann Example <ann@example.org>",
    to: str = "bob@example.com",
    bcc: str | None = None,
    when: dt.datetime = dt.datetime(2024, 3, 5, 10, 0, tzinfo=dt.UTC),
    html: str | None = None,
    attachment: str | None = None,
    reply_to: str | None = None,
) -> bytes:
    message = EmailMessage()
    message["Message-ID"] = f"<{mid}>"
    message["From"] = sender
    message["To"] = to
    if bcc:
        message["Bcc"] = bcc
    message["Subject"] = subject
    message["Date"] = format_datetime(when)
    if reply_to:
        message["In-Reply-To"] = f"<{reply_to}>"
        message["References"] = f"<{reply_to}>"
    message.set_content(body)
    if html is not None:
        message.add_alternative(html, subtype="html")
    if attachment is not None:
        message.add_attachment(b"%PDF-1.4 not really", maintype="application", subtype="pdf", filename=attachment)
    return message.as_bytes()


def ids(results: Any) -> list[str]:
    return [h["messageId"] for h in results]


# --- the corpus, once per backend ------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(servers: Any, backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The shared corpus stored by a store with the local index; (database, index file)."""
    client = servers.client(backend)
    name = f"aecs_search_{os.getpid()}_{backend}"
    client.drop_database(name)
    index = tmp_path_factory.mktemp("index") / "corpus.sqlite"
    store = MessageStore(client[name], mailbox_id="corpus", search_index=index)
    store.ensure_indexes()
    store.store_many(corpus_raw())
    yield client[name], index
    client.drop_database(name)


@pytest.mark.server  # hinted reads and bulk pipeline updates: mongomock runs neither
@pytest.mark.ci_every_server
def test_the_local_index_and_the_scan_agree_on_the_corpus(corpus: tuple[Any, Path]) -> None:
    db, index = corpus
    local = MessageStore(db, mailbox_id="corpus", search_index=index)
    scan = MessageStore(db, mailbox_id="corpus", search_engine="scan")
    found = 0
    for query in QUERIES:
        by_index = local.search(query, limit=1000)
        by_scan = scan.search(query, limit=1000)
        assert by_index.engine == "local" and by_scan.engine == "scan" and by_scan.complete
        assert ids(by_index) == ids(by_scan), query  # the same messages, newest first
        assert local.count(query) == len(by_scan), query
        found += bool(by_scan)
    assert found == len(QUERIES)  # every query matches something: none agrees by being empty
    # pages: the cursor walks the same list on both engines
    for store in (local, scan):
        pages: list[str] = []
        cursor = None
        while True:
            page = store.search("the", limit=7, cursor=cursor)
            pages += ids(page)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert pages == ids(local.search("the", limit=1000))
    ranked = local.search("the OR html", limit=10, sort="relevance")
    assert [h["score"] for h in ranked] == sorted((h["score"] for h in ranked), reverse=True)
    assert all(h["snippet"] for h in local.search("fouche"))


def test_the_text_compiler_expresses_what_text_can() -> None:
    """What $text is given for each corpus query, as data: the words as one-word phrases (so
    all must match), and a reason for what it cannot do (the store then falls back)."""
    compiled = {q: text_search(parse(q)) for q in QUERIES}  # type: ignore[arg-type]
    assert compiled["the"].text == '"the"'
    assert compiled['"thank you"'].text == '"thank you"'
    assert compiled["the -html date:..2010"].text == '"the" -"html"'
    assert [type(p).__name__ for p in compiled["the -html date:..2010"].post] == ["Date"]
    reasons = {q: c.reason for q, c in compiled.items() if c.text is None}
    assert "no OR" in (reasons["copperas OR tantrum"] or "")
    assert "prefix" in (reasons["pars*"] or "")
    assert "from:" in (reasons["from:finnie"] or "")
    assert "only exclusions" in (reasons["NOT the"] or "")


@pytest.mark.server
def test_text_differs_where_documented(make_store: Any, db: Any, backend: str) -> None:
    """$text (where the server has text indexes): stop words and stems, subject and clean only."""
    s = make_store("alice", search_engine="text")
    if "aecs_bodies_search" not in {ix["name"] for ix in db.bodies.list_indexes()}:
        pytest.skip(f"the {backend} server refuses text indexes ($text runs where MONGODB_URI names one that has them)")
    s.store(raw_mail("t1@x", "Budgets", "the budgets are done\n\n-- \nAnn\nPhone 5551234"))
    assert ids(s.search('"budget"')) == ["t1@x"]  # stemmed: budget finds budgets
    assert s.search('"the"') == []  # a stop word
    assert s.search("5551234") == []  # the signature is not in clean, the text index's field


# --- where people look for words -------------------------------------------------------------------


@pytest.mark.server
def test_words_in_signatures_html_parts_accents_and_names_are_found(make_store: Any, tmp_path: Path) -> None:
    local = make_store("alice", search_index=tmp_path / "index.sqlite")
    scan = make_store("alice", search_engine="scan")
    local.store(
        raw_mail("sig@x", "Numbers", "Call me about the storage numbers.\n\n-- \nAnn Example\nPhone +49 170 5551234")
    )
    local.store(
        raw_mail(
            "html@x",
            "Newsletter",
            "Your mail client shows no HTML.",
            html="<p>Our <b>zeppelin</b> sale starts Monday.</p>",
        )
    )
    local.store(raw_mail("koeln@x", "Grüße aus Köln", "Schöne Grüße, Jürgen", sender="Jürgen Müller <jm@example.de>"))
    local.store(
        raw_mail("name@x", "Hello", "hi", sender="Xaver Quaddelbach <xq@example.net>", attachment="Q3-Report.pdf")
    )
    for store in (local, scan):
        assert ids(store.search("5551234")) == ["sig@x"]  # a signature, which clean drops
        assert ids(store.search('"170 5551234"')) == ["sig@x"]
        assert ids(store.search("numbers storage")) == ["sig@x"]  # words, any order
        assert ids(store.search("zeppelin")) == ["html@x"]  # only the HTML part holds it
        assert ids(store.search("koln")) == ["koeln@x"] and ids(store.search("GRUSSE OR grüße")) == ["koeln@x"]
        assert ids(store.search("from:muller")) == ["koeln@x"] and ids(store.search("jurgen")) == ["koeln@x"]
        assert ids(store.search("quaddelbach")) == ["name@x"] and ids(store.search("from:xq@example.net")) == ["name@x"]
        assert ids(store.search("attachment:report")) == ["name@x"] and ids(store.search("attachment:q3*")) == [
            "name@x"
        ]
        assert store.search("storag") == [] and store.search("from:numbers") == []
    snippet = local.search("5551234")[0]["snippet"]
    assert "5551234" in snippet


@pytest.mark.server
def test_a_long_scan_reads_only_the_bodies_that_may_match_and_finds_the_same(
    make_store: Any, tmp_path: Path, caplog: Any
) -> None:
    """Past 200 messages a scan for rare words asks the server for the bodies that may hold
    them (a pattern per word, accents and case folded) and reads no other body: what the words
    match in names, subjects, attachment names and HTML parts is still found, as the index
    finds it (the special messages are the oldest: the scan reaches them after it asked)."""
    local = make_store("alice", search_index=tmp_path / "index.sqlite")
    scan = make_store("alice", search_engine="scan")
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    local.store_many(
        [
            raw_mail("html@x", "News", "no HTML here", html="<p>A <b>zepp&eacute;lin</b> sale.</p>", when=old),
            raw_mail("accent@x", "Hello", "the XYLOPHÖNIST played", when=old),
            raw_mail("combining@x", "Hello", "the xylopho\u0308nist again", when=old),
            raw_mail("cc@x", "Hello", "hi", to="Quentin Marimbaphone <q@example.org>", when=old),
            raw_mail("subject@x", "Ocarina meeting", "nothing here", when=old),
            raw_mail("file@x", "Report", "see attached", attachment="kazoo-plan.pdf", when=old),
            raw_mail("both@x", "Kazoo", "and a xylophonist", html="<p>ocarina</p>", when=old),
            raw_mail("sender@x", "Hi", "hello", sender="Théremin Player <tp@example.net>", when=old),
            raw_mail("address@x", "Hi", "hello", to="bob@glockenspiel.example, eve@celesta.example", when=old),
            raw_mail("long@x", "x" * 995 + " harmonium", "nothing", when=old),  # the hot row cuts the subject
        ]
    )
    local.store_many(
        [
            raw_mail(f"f{n}@x", f"filler {n}", f"ordinary words number {n}", when=old + dt.timedelta(days=1, minutes=n))
            for n in range(500)
        ]
    )
    queries = {
        "zeppelin": ["html@x"],
        "xylophonist": ["both@x", "combining@x", "accent@x"],
        "marimbaphone": ["cc@x"],
        "to:marimbaphone": ["cc@x"],
        "ocarina": ["both@x", "subject@x"],
        "subject:ocarina": ["subject@x"],
        "attachment:kazoo": ["file@x"],
        "kazoo": ["both@x", "file@x"],
        "kazoo xylophonist": ["both@x"],
        "xylophonist NOT ocarina": ["combining@x", "accent@x"],
        "zeppelin OR marimbaphone": ["cc@x", "html@x"],
        "xylo*": ["both@x", "combining@x", "accent@x"],
        "theremin": ["sender@x"],
        "from:theremin": ["sender@x"],
        "glockenspiel": ["address@x"],
        "to:celesta": ["address@x"],
        "harmonium": ["long@x"],
    }
    for query, expected in queries.items():
        with caplog.at_level(logging.DEBUG, logger="aecs_mongo"):
            caplog.clear()
            found = scan.search(query, limit=50)
        assert "bodies may hold the words (prefilter)" in caplog.text, query
        assert sorted(ids(found)) == sorted(expected) and found.complete and found.examined == 510, query
        assert ids(local.search(query, limit=50)) == ids(found), query  # the same order: newest, then by key
        assert scan.count(query) == len(expected), query
    assert len(scan.search("ordinary", limit=50)) == 50  # a common word: the page is full first


@pytest.mark.server
def test_dates_threads_and_negations_agree(make_store: Any, tmp_path: Path) -> None:
    local = make_store("alice", search_index=tmp_path / "index.sqlite")
    scan = make_store("alice", search_engine="scan")
    days = [dt.datetime(2023, 12, 31, 23, 59, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, 0, 0, tzinfo=dt.UTC)]
    days += [dt.datetime(2024, 3, 15, 12, 0, tzinfo=dt.UTC), dt.datetime.now(dt.UTC) - dt.timedelta(days=3)]
    for n, when in enumerate(days):
        local.store(raw_mail(f"d{n}@x", f"report {n}", "quarterly figures", when=when, reply_to="d0@x" if n else None))
    cases = {
        "date:2024": ["d3@x", "d2@x", "d1@x"][1 if days[3].year != 2024 else 0 :],
        "date:..2023-12-31": ["d0@x"],
        "date:2024-01-01..2024-03-15": ["d2@x", "d1@x"],
        "date:7d..": ["d3@x"],
        "figures NOT date:2024": [m for m in ["d3@x", "d0@x"] if m != "d3@x" or days[3].year != 2024],
        "thread:d0@x": ["d3@x", "d2@x", "d1@x", "d0@x"],
        "thread:<d0@x> -date:2024-03": ["d3@x", "d1@x", "d0@x"],
        "date:2024-03 OR date:..2023": ["d2@x", "d0@x"],
        "NOT figures": [],
        "(report NOT thread:nothing) date:2024-03..": ["d3@x", "d2@x"],
    }
    for query, expected in cases.items():
        assert ids(local.search(query)) == expected, query
        assert ids(scan.search(query)) == expected, query
        assert local.count(query) == len(expected), query
    with pytest.raises(SearchQueryError):
        local.search("date:2024-02-30")


@pytest.mark.server
def test_bcc_is_indexed_apart_and_never_matched_in_a_shared_view(make_store: Any, tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    owner = make_store("alice", owner_addresses=["ann@example.org"], search_index=index)
    owner.store(raw_mail("bcc@x", "Plans", "see you", bcc="Sebastian Secret <sebastian@example.com>"))
    assert ids(owner.search("to:sebastian")) == ["bcc@x"] and ids(owner.search("secret")) == ["bcc@x"]
    shared = make_store("alice", shared_view=True, search_index=index)
    assert shared.search("to:sebastian") == [] and shared.search("secret") == [] and shared.count("sebastian") == 0
    assert ids(shared.search("to:bob")) == ["bcc@x"]
    scan = make_store("alice", shared_view=True, search_engine="scan")
    assert scan.search("sebastian") == []


# --- the index follows the store ---------------------------------------------------------------------


@pytest.mark.server
def test_deleted_expired_and_erased_mail_is_never_found_again(make_store: Any, tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    indexed = make_store("alice", search_index=index)
    other = make_store("alice")  # a store of another process, without the index
    old = dt.datetime(2001, 5, 1, tzinfo=dt.UTC)
    for n in range(4):
        indexed.store(
            raw_mail(f"z{n}@x", f"zebra {n}", "stripes", when=old if n == 0 else dt.datetime(2024, 1, n, tzinfo=dt.UTC))
        )
    assert indexed.count("zebra") == 4
    assert indexed.delete("z1@x") is True
    assert "z1@x" not in ids(indexed.search("zebra")) and indexed.count("zebra") == 3
    assert other.delete("z2@x") is True  # the index's store did not see this one
    assert ids(indexed.search("zebra")) == ["z3@x", "z0@x"] and indexed.count("stripes") == 2
    indexed.expire(dt.datetime(2002, 1, 1, tzinfo=dt.UTC))
    assert ids(indexed.search("zebra")) == ["z3@x"] and indexed.count("zebra") == 1
    other.store(raw_mail("z9@x", "zebra again", "more stripes"))  # stored by the other store
    assert ids(indexed.search("zebra")) == ["z9@x", "z3@x"]
    indexed.erase_mailbox()
    assert indexed.search("zebra") == [] and indexed.count("stripes") == 0
    with SearchIndex(index).read() as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert conn.execute("SELECT count(*) FROM mailboxes WHERE mode IS NOT NULL").fetchone()[0] == 1
    assert any(t.startswith("docs_") for t in tables)  # rebuilt (empty) by the search after the erase


@pytest.mark.server
def test_mail_stored_before_the_index_is_indexed_on_first_use_and_reindex_rebuilds(
    make_store: Any, tmp_path: Path
) -> None:
    before = make_store("alice")
    for n in range(5):
        before.store(raw_mail(f"u{n}@x", f"upgrade {n}", "walrus"))
    index = tmp_path / "index.sqlite"
    after = make_store("alice", search_index=index)
    assert after.count("walrus") == 5 and len(after.search("walrus")) == 5  # the upgrade: on first use
    box = SearchIndex(index).mailbox("alice")
    box.remove(list(box.keys())[:3])  # an index that lost entries (a damaged or old file)
    report = after.reindex()
    assert report["searchIndexed"] == 5 and after.count("walrus") == 5


@pytest.mark.server
def test_the_index_file_is_private_and_follows_one_database(make_store: Any, tmp_path: Path, caplog: Any) -> None:
    index = tmp_path / "new" / "dir" / "index.sqlite"
    s = make_store("alice", search_index=index)
    s.store(raw_mail("p@x", "private", "words"))
    assert s.count("words") == 1
    for path in (tmp_path / "new", tmp_path / "new" / "dir"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in index.parent.iterdir():  # the file, its -wal and -shm
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    index.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="aecs_mongo"):
        assert make_store("alice", search_index=index).count("words") == 1
    assert "readable by other users" in caplog.text and stat.S_IMODE(index.stat().st_mode) == 0o600
    foreign = SearchIndex(index)
    with pytest.raises(SearchIndexError, match="follows database"):
        foreign.bind("another_database")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    garbage.chmod(0o600)
    with pytest.raises(SearchIndexError, match="remove it"):
        make_store("alice", search_index=garbage).count("words")


@pytest.mark.server
def test_a_writer_killed_between_commit_and_index_write_is_caught_up(
    servers: Any, backend: str, db: Any, tmp_path: Path
) -> None:
    """The child commits its message, then blocks on the index file (the test holds SQLite's
    write lock) and is SIGKILLed there: the next search of an indexed store finds the message."""
    index = tmp_path / "index.sqlite"
    reader = MessageStore(db, mailbox_id="alice", search_index=index)
    reader.ensure_indexes()
    reader.store(raw_mail("first@x", "first", "narwhal"))
    assert reader.count("narwhal") == 1  # built, with its position
    message = tmp_path / "m.eml"
    message.write_bytes(raw_mail("killed@x", "second", "narwhal tusk"))
    lock = sqlite3.connect(index, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # every writer of the file now waits
    child = start_worker("search_workers", servers.uri(backend), db.name, "alice", str(index), str(message))
    try:
        deadline = time.monotonic() + 60
        while db.messages.find_one({"messageId": "killed@x"}) is None:
            assert time.monotonic() < deadline, "the child never committed"
            time.sleep(0.05)
        time.sleep(0.3)  # it is past the commit, waiting for the index
        assert child.poll() is None
        child.kill()
        child.wait()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert ids(reader.search("narwhal")) == ["killed@x", "first@x"] and reader.count("tusk") == 1


class Sent(monitoring.CommandListener):
    """(command, collection) of every command a client sends."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []
        self.key_reads = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, str(event.command.get(event.command_name))))
        if (event.command_name, event.command.get("find")) == ("find", "messages") and event.command.get(
            "projection"
        ) == {"_id": 0, "messageKey": 1}:
            self.key_reads += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def counted(self) -> bool:
        """Whether the messages were counted (``count_documents``: an aggregate) since the last
        call; the record starts again."""
        found = ("aggregate", "messages") in self.commands
        self.commands.clear()
        return found

    def keys_read(self) -> bool:
        """Whether the mailbox's message keys were read (the index reconciled) since the last
        call; the record starts again."""
        found, self.key_reads = self.key_reads > 0, 0
        self.commands.clear()
        return found


@pytest.mark.server
def test_without_change_streams_a_read_checks_the_store_only_after_a_write(
    servers: Any, backend: str, db: Any, tmp_path: Path
) -> None:
    """Where there are no change streams (standalone), a read of the local index reads the
    mailbox's change mark (one find) and counts the mailbox only when a write moved it since the
    last check, or one is under way or died midway (its token stays: a stale one is taken out).
    A store's own write leaves its index settled. With change streams no mark is written."""
    sent = Sent()
    watched: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[sent])
    try:
        reader = MessageStore(watched[db.name], mailbox_id="alice", search_index=tmp_path / "index.sqlite")
        other = MessageStore(db, mailbox_id="alice")  # another process's store, without the index
        reader.ensure_indexes()

        def mail(n: int) -> bytes:
            return raw_mail(f"m{n}@x", f"marked {n}", "okapi", when=dt.datetime(2024, 1, n + 1, tzinfo=dt.UTC))

        for n in range(3):
            reader.store(mail(n))
        assert reader.count("okapi") == 3
        if backend != "standalone":  # the change stream is followed; nothing goes to the mark
            assert "change_marks" not in db.list_collection_names()
            return
        sent.counted()
        assert reader.count("okapi") == 3 and ids(reader.search("okapi"))[0] == "m2@x"
        assert not sent.counted()
        reader.count("okapi")
        assert sent.commands == [("find", "change_marks")]  # the whole cost of being caught up
        reader.store(mail(3))  # its own write: still settled
        reader.tag("id:m3@x", add=["todo"])
        assert reader.delete("m0@x")
        sent.counted()
        assert reader.count("okapi") == 3 and reader.count("tag:todo okapi") == 1 and not sent.counted()
        other.store(mail(4))  # another store's write: one check
        assert reader.count("okapi") == 4 and sent.counted()
        assert reader.count("okapi") == 4 and not sent.counted()
        other.tag("id:m4@x", add=["todo"])  # a count does not see it: the labels are read again
        assert reader.count("tag:todo") == 2 and sent.counted()
        other.set_folders(["m4@x"], add=["Archive"])
        assert ids(reader.search("folder:Archive okapi")) == ["m4@x"]
        other.tag("id:m3@x", remove=["todo"])
        assert ids(reader.search("tag:todo")) == ["m4@x"] and sent.counted()
        assert reader.count("tag:todo") == 1 and not sent.counted()
        assert other.delete("m1@x")  # a removal: the keys are compared, whatever the count
        assert ids(reader.search("okapi")) == ["m4@x", "m3@x", "m2@x"] and sent.keys_read()
        # a writer under way (or killed between its two updates): every read checks
        marks = db["change_marks"]
        marks.update_one({"mailboxId": "alice"}, {"$push": {"pending": ObjectId()}})
        assert reader.count("okapi") == 3 and sent.counted()
        assert reader.count("okapi") == 3 and sent.counted()
        marks.update_one({"mailboxId": "alice"}, {"$set": {"pending": []}, "$inc": {"n": 1}})  # it ended
        assert reader.count("okapi") == 3 and sent.counted()
        assert reader.count("okapi") == 3 and not sent.counted()
        # one killed an hour ago: the check that finds it takes its token out
        dead = ObjectId.from_datetime(dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
        marks.update_one({"mailboxId": "alice"}, {"$push": {"pending": dead}})
        assert reader.count("okapi") == 3 and sent.counted()
        assert marks.find_one({"mailboxId": "alice"})["pending"] == []  # type: ignore[index]
        assert reader.count("okapi") == 3 and sent.counted()  # the mark it read had the token
        assert reader.count("okapi") == 3 and not sent.counted()
        # the erase removes the mark; counting starts again under another epoch
        epoch = marks.find_one({"mailboxId": "alice"})["epoch"]  # type: ignore[index]
        other.erase_mailbox()
        assert "alice" not in {m.get("mailboxId") for m in marks.find()}
        assert reader.count("okapi") == 0 and sent.counted()
        other.store(mail(5))
        assert marks.find_one({"mailboxId": "alice"})["epoch"] != epoch  # type: ignore[index]
        assert ids(reader.search("okapi")) == ["m5@x"] and sent.keys_read()
        assert reader.count("okapi") == 1 and not sent.counted()
    finally:
        watched.close()


@pytest.mark.server
def test_another_stores_delete_and_store_of_as_many_reach_the_index(
    servers: Any, backend: str, db: Any, tmp_path: Path
) -> None:
    """Another process (a store without the index) deletes a message and stores a new one
    between two searches, or erases the mailbox and stores as many as it held: the count is
    what the index holds, and the next search still finds the new mail (on a standalone server
    by the change mark's ``removals`` and epoch; with change streams by the stream)."""
    reader = MessageStore(db, mailbox_id="alice", search_index=tmp_path / "index.sqlite")
    other = MessageStore(db, mailbox_id="alice")
    reader.ensure_indexes()

    def mail(n: int, word: str) -> bytes:
        return raw_mail(f"d{n}@x", f"swap {n}", f"okapi {word}", when=dt.datetime(2024, 3, n + 1, tzinfo=dt.UTC))

    for n in range(3):
        reader.store(mail(n, "first"))
    assert reader.count("okapi") == 3 and reader.count("zebu") == 0
    assert other.delete("d0@x")
    other.store(mail(3, "zebu"))
    assert db.messages.count_documents({"mailboxId": "alice"}) == 3  # as many as the index holds
    assert ids(reader.search("zebu")) == ["d3@x"]
    assert ids(reader.search("okapi")) == ["d3@x", "d2@x", "d1@x"] and reader.count("first") == 2
    other.erase_mailbox()
    for n in range(4, 7):
        other.store(mail(n, "yak"))
    assert reader.count("yak") == 3 and reader.count("first") == 0 and reader.count("zebu") == 0
    assert ids(reader.search("okapi")) == ["d6@x", "d5@x", "d4@x"]


@pytest.mark.server
def test_a_store_that_keeps_its_change_stream_follows_every_writer(
    servers: Any, backend: str, db: Any, tmp_path: Path
) -> None:
    """A long-lived store (the warm command host's, the MCP server's) keeps its index's change
    stream open: a read costs one getMore; where another store on the same index file moved the
    position (or rebuilt the index), it opens the stream again from there."""
    sent = Sent()
    watched: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[sent])
    index = tmp_path / "index.sqlite"

    def mail(n: int) -> bytes:
        return raw_mail(f"k{n}@x", f"kept {n}", "okapi", when=dt.datetime(2024, 2, n + 1, tzinfo=dt.UTC))

    try:
        kept = MessageStore(watched[db.name], mailbox_id="alice", search_index=index)
        kept._keep_index_stream()
        kept.ensure_indexes()
        other = MessageStore(db, mailbox_id="alice")  # without the index
        peer = MessageStore(db, mailbox_id="alice", search_index=index)  # another process's, same file
        kept.store(mail(0))
        assert kept.count("okapi") == 1
        other.store(mail(1))
        assert kept.count("okapi") == 2
        sent.commands.clear()
        assert kept.count("okapi") == 2 and ids(kept.search("okapi")) == ["k1@x", "k0@x"]
        if backend == "rs":
            assert [c for c, _ in sent.commands if c != "find"] == ["getMore", "getMore"], sent.commands
        other.tag("id:k1@x", add=["todo"])
        assert kept.count("tag:todo") == 1
        peer.store(mail(2))
        assert peer.count("okapi") == 3  # the file's position moved past the kept stream's
        other.delete("k0@x")
        sent.commands.clear()
        assert ids(kept.search("okapi")) == ["k2@x", "k1@x"] and kept.count("okapi") == 2
        if backend == "rs":
            assert [c for c, _ in sent.commands].count("aggregate") == 1, sent.commands  # opened again
        peer.reindex()
        other.store(mail(3))
        other.tag("id:k3@x", add=["todo"])
        assert kept.count("okapi") == 3 and ids(kept.search("tag:todo")) == ["k3@x", "k1@x"]
        if backend == "rs":  # the server drops the kept cursor (an idle timeout): the driver resumes it
            sent.commands.clear()
            assert kept.count("okapi") == 3
            (cursor,) = [int(value) for name, value in sent.commands if name == "getMore"]  # the kept one
            assert db.command("killCursors", "messages", cursors=[cursor])["cursorsKilled"] == [cursor]
            other.store(mail(4))
            assert kept.count("okapi") == 4
    finally:
        watched.close()


def test_a_write_was_the_only_change_only_when_the_marks_say_so() -> None:
    token, other = ObjectId(), ObjectId()
    epoch = ObjectId()
    begun = {"epoch": epoch, "n": 7, "pending": [token]}
    ended = {"epoch": epoch, "n": 8, "pending": []}
    assert only_change(begun, ended, token) == (
        mark_key({"epoch": epoch, "n": 6}),
        mark_key({"epoch": epoch, "n": 8}),
    )
    assert only_change({**begun, "pending": [other, token]}, ended, token) is None  # another under way
    assert only_change(begun, {**ended, "n": 10}, token) is None  # another wrote meanwhile
    assert only_change(begun, {**ended, "pending": [other]}, token) is None  # another began meanwhile
    assert only_change(begun, {**ended, "epoch": ObjectId()}, token) is None  # erased and begun again
    assert only_change(None, ended, token) is None and only_change(begun, None, token) is None
    # a tag change bumps the labels counter too: the mark before it had one fewer
    marked = {**begun, "labels": 3}
    assert only_change(marked, {**ended, "labels": 3}, token, labels=True) == (
        mark_key({"epoch": epoch, "n": 6, "labels": 2}),
        mark_key({"epoch": epoch, "n": 8, "labels": 3}),
    )
    assert only_change(marked, {**ended, "labels": 4}, token, labels=True) is None  # another tagged
    kept = mark_key({"epoch": epoch, "n": 8, "labels": 3})
    assert not labels_moved(kept, {"epoch": epoch, "n": 12, "labels": 3})
    assert labels_moved(kept, {"epoch": epoch, "n": 12, "labels": 4})
    assert labels_moved(kept, {"epoch": ObjectId(), "n": 8, "labels": 3}) and labels_moved(None, {"n": 1})
    assert not labels_moved(kept, None)
    assert mark_key({"epoch": epoch, "n": 6}) != mark_key({"epoch": ObjectId(), "n": 6})
    # a delete bumps the removals counter: the mark before it had one fewer; one by another
    # store moves it, and so does an erase (another epoch), where a count may stay the same
    assert begin_update("alice", token, removals=True)["$inc"] == {"n": 1, "removals": 1}
    assert begin_update("alice", token)["$inc"] == {"n": 1}
    removing = {**begun, "removals": 5}
    assert only_change(removing, {**ended, "removals": 5}, token, removals=True) == (
        mark_key({"epoch": epoch, "n": 6, "removals": 4}),
        mark_key({"epoch": epoch, "n": 8, "removals": 5}),
    )
    assert only_change(removing, {**ended, "removals": 6}, token, removals=True) is None  # another deleted
    assert only_change(begun, {**ended, "removals": 1}, token) is None  # another deleted meanwhile
    kept = mark_key({"epoch": epoch, "n": 8, "removals": 5})
    assert not removals_moved(kept, {"epoch": epoch, "n": 12, "labels": 2, "removals": 5})
    assert removals_moved(kept, {"epoch": epoch, "n": 12, "removals": 6})
    assert removals_moved(kept, {"epoch": ObjectId(), "n": 1}) and removals_moved(None, {"n": 1})
    assert not removals_moved(kept, None)
    now = dt.datetime.now(dt.UTC)
    old = ObjectId.from_datetime(now - dt.timedelta(seconds=STALE_AFTER_S + 60))
    assert stale_tokens({"pending": [token, old]}, now) == [old] and stale_tokens(None, now) == []


@pytest.mark.server
def test_mail_another_process_stores_is_found_by_the_command_line(
    cli: Cli, servers: Any, backend: str, db: Any, tmp_path: Path
) -> None:
    assert cli("ingest", str(SAMPLES), "--no-progress").code == 0
    first = cli("search", "walrus", "--json")
    assert first.code == 0 and first.page()[0] == [] and first.page()[1]["engine"] == "local"
    message = tmp_path / "m.eml"
    message.write_bytes(raw_mail("walrus@x", "A walrus", "seen at the zoo"))
    child = start_worker("search_workers", servers.uri(backend), db.name, "default", "-", str(message))
    assert child.stdout is not None and child.stdout.readline().strip() == "stored"
    child.wait(timeout=60)
    found, _ = cli("search", "walrus", "--json").page()
    assert [r["messageId"] for r in found] == ["walrus@x"]
    assert cli("count", "walrus").out.strip() == "1"


@pytest.mark.server
def test_the_command_line_search_count_and_query_pages(cli: Cli) -> None:
    assert cli("ingest", str(SAMPLES), "--no-progress").code == 0
    bad = cli("search", "budget OR")
    assert bad.code == 2 and bad.out == ""
    assert bad.err.count("\n") == 1 and "OR needs something on both sides at position 7" in bad.err
    assert cli("count", "(").code == 2
    assert cli("count", "planning").out.strip() == "3"
    ranked, about = cli("search", "quarterly OR budget", "--sort", "relevance", "--json").page()
    scores = [r["score"] for r in ranked]
    assert scores == sorted(scores, reverse=True) and about is not None and about["engine"] == "local"
    first, more = cli("inbox", "--query", "planning OR budget", "--limit", "2", "--json").page()
    assert len(first) == 2 and more is not None and more["next_cursor"]
    rest, _ = cli(
        "inbox", "--query", "planning OR budget", "--limit", "2", "--cursor", more["next_cursor"], "--json"
    ).page()
    everything, _ = cli("search", "planning OR budget", "--json").page()
    assert [m["messageId"] for m in first + rest] == [r["messageId"] for r in everything]
    threads, _ = cli("threads", "--query", "planning", "--json").page()
    assert [t["threadId"] for t in threads] == ["plan-1@example.com"]
    assert threads[0]["messageCount"] == 3
    assert threads[0]["shortId"] in cli("threads", "--query", "planning").out  # the short id, as threads shows


def test_the_embedded_default_keeps_its_index_in_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    try:
        ingest = aecs("--data-dir", str(data), "ingest", str(SAMPLES), "--no-progress", cwd=tmp_path, keep="5m")
        assert ingest.returncode == 0, ingest.stderr.decode()
        found = aecs("--data-dir", str(data), "search", "from:alice Köln", "--json", cwd=tmp_path, keep="5m")
        assert found.returncode == 0, found.stderr.decode()
        *hits, about = [json.loads(line) for line in found.stdout.splitlines() if line.strip()]
        assert about["engine"] == "local" and [r["messageId"] for r in hits] == ["koeln-2@example.com"]
        index = data / "search" / "aecs.sqlite"
        assert index.exists() and stat.S_IMODE(index.stat().st_mode) == 0o600
        assert stat.S_IMODE(index.parent.stat().st_mode) == 0o700
        bad = aecs("--data-dir", str(data), "search", '"unclosed', cwd=tmp_path, keep="5m")
        assert bad.returncode == 2 and bad.stderr.decode().strip().splitlines()[-1].startswith(
            "aecs-mongo: error: query:"
        )

    finally:
        aecs("--data-dir", str(data), "server", "stop", cwd=tmp_path)


# --- the index's own writer thread (an ingest's batches) ------------------------------------------


def _record(n: int, word: str) -> Record:
    return Record(f"{n:064x}", 1_700_000_000 + n, f"{n:064x}", {"subject": word}, ())


def test_writes_handed_to_the_index_thread_come_before_any_other_use(tmp_path: Path) -> None:
    """``SearchIndex.later`` (an ingest's batch records): a remove that follows waits for the
    upsert handed over before it, so it removes what the upsert wrote (run in the other order
    the remove finds nothing and the upsert leaves a message the store deleted)."""
    index = SearchIndex(tmp_path / "index.sqlite")
    box = index.mailbox("alice")
    started = threading.Event()

    def slow_upsert() -> None:
        started.set()
        time.sleep(0.3)
        box.upsert([_record(1, "okapi"), _record(2, "zebu")])

    index.later(slow_upsert)
    assert started.wait(10)
    assert box.remove([f"{1:064x}"]) == 1
    assert box.keys() == {f"{2:064x}"}
    index.close()


def test_a_failed_write_of_the_index_thread_is_raised_by_the_next_use_once(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "index.sqlite")
    box = index.mailbox("alice")

    def broken() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    index.later(broken)
    index.later(lambda: box.upsert([_record(3, "yak")]))  # the writes after it still run
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        box.size()
    assert box.size() == 1
    index.close()


@pytest.mark.server
def test_store_many_returns_with_every_batch_in_the_index(make_store: Any, tmp_path: Path) -> None:
    """``store_iter`` hands each batch's records after the first to the index's thread and goes
    on with the next batch; every batch reaches the file (opened anew: another process's view)
    by the time it returns, and the store's own count agrees."""
    path = tmp_path / "index.sqlite"
    store = make_store("alice", search_index=path)
    when = dt.datetime(2024, 3, 5, tzinfo=dt.UTC)
    mail = [raw_mail(f"m{n}@x", f"batch {n}", "okapi", when=when + dt.timedelta(minutes=n)) for n in range(600)]
    assert len(store.store_many(mail, batch_size=300)) == 600
    assert SearchIndex(path).mailbox("alice").size() == 600
    assert store.count("okapi") == 600
