"""Windowed reads on the server: a page costs a page, and windows change nothing but the cost.

The embedded server reads every document a query's filter matches before it applies the limit,
so the store walks bounded ``ts`` windows there (``windows.py``). What the server read is taken
from its own account: every command a read sent is recorded (command monitoring) and explained
with ``executionStats``; the documents it examined and returned must not grow with the mailbox.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from pymongo import monitoring

from aecs_mongo import MessageStore
from aecs_mongo.pure import extents, queries, windows
from aecs_mongo.pure.extents import EXTENTS_COLLECTION, extent_id

from .helpers.budgets import budget
from .helpers.factories import BASE_TS, email
from .helpers.monitoring import Recorder

SMALL = 2000  # above windows.PLAIN_MAX: a mailbox this small is read with the plain query
BIG = budget("AECS_WINDOWED_MAILBOX", big=10_000, small=4000)
BUNCHED = range(200, 500)  # 300 messages in one second: Date-less mail sorted by its processedAt


def message(n: int, ts: int | None = None, body: str | None = None) -> dict[str, Any]:
    """Message ``n``: older as ``n`` grows (37 s apart), 40 threads, 7 correspondents."""
    if ts is None:
        ts = BASE_TS - (BUNCHED.start if n in BUNCHED else n) * 37
    mail = email(n, thread=f"t{n % 40}@x", ts=ts, to=("alice@example.com", f"p{n % 7}@x"))
    if body is not None:
        mail["content"].update(text=body, clean=body, forAI=body)
    return mail


def cost(store: MessageStore, recorder: Recorder, db: Any, read: Any) -> tuple[int, int]:
    """(documents the server examined, documents it returned) for one read."""
    recorder.finds.clear()
    recorder.returned = 0
    read()
    finds, returned = list(recorder.finds), recorder.returned
    examined = 0
    for command in finds:
        explained = db.command({"explain": command, "verbosity": "executionStats"})
        examined += int(explained["executionStats"]["totalDocsExamined"])
    return examined, returned


@pytest.mark.server
@pytest.mark.ci_every_server
def test_a_page_costs_a_page(recorded: tuple[MessageStore, Recorder], db: Any) -> None:
    store, recorder = recorded
    store.store_many([message(n) for n in range(SMALL - 1)], batch_size=500)
    store.store_many([message(SMALL - 1, body="a xylophone")])

    def page_ten() -> None:
        cursor = None
        for _ in range(9):
            cursor = store.list_messages(cursor=cursor, limit=50).next_cursor
        recorder.finds.clear()
        recorder.returned = 0
        store.list_messages(cursor=cursor, limit=50)

    reads = {
        "inbox": lambda: store.list_messages(limit=50),
        "with_participant": lambda: store.with_participant("p3@x", limit=50),
        "threads": lambda: store.list_threads(limit=20),
        "thread_context": lambda: store.thread_context("t7@x", limit=10),
    }

    def measure() -> dict[str, tuple[int, int]]:
        costs = {name: cost(store, recorder, db, read) for name, read in reads.items()}
        recorder.finds.clear()
        page_ten()  # the nine pages before it are not counted
        finds = list(recorder.finds)
        examined = sum(
            int(db.command({"explain": c, "verbosity": "executionStats"})["executionStats"]["totalDocsExamined"])
            for c in finds
        )
        costs["inbox page 10"] = (examined, recorder.returned)
        return costs

    small = measure()
    assert store.stats()["windowedReads"] is True  # this server reads a query's whole range first
    store.store_many([message(n) for n in range(SMALL, BIG)], batch_size=500)  # older mail
    big = measure()
    for name in reads | {"inbox page 10": None}:
        # a thread of at most windows.PLAIN_MAX_THREAD messages is read whole by design (its
        # summary says how many), a bigger one in windows placed from its summary: a bound that
        # does not grow with the mailbox, though this thread grows with it (BIG / 40 messages)
        bound = windows.PLAIN_MAX_THREAD + 1 if name == "thread_context" else 0
        if name == "threads":  # the sample that estimates the mailbox's threads, of a size of its own
            bound = 4 * windows.THREAD_SAMPLE_ENOUGH + 2 * small[name][0]
        assert big[name][0] <= max(2 * small[name][0] + 100, bound), (name, small[name], big[name])
        assert big[name][1] <= max(2 * small[name][1] + 100, bound), (name, small[name], big[name])
    assert big["inbox"][0] < BIG / 10  # the plain query examines every message of the mailbox

    # search is complete: a word only an old message holds is found, every message examined
    hits = store.search("xylophone", limit=5)
    assert [h["messageId"] for h in hits] == [f"m{SMALL - 1}@example.com"]
    assert hits.complete and hits.examined == BIG and hits.engine == "scan"
    capped = MessageStore(store.db, mailbox_id="alice", scan_limit=300).search("xylophone")
    assert capped == [] and not capped.complete and capped.examined == 300


@pytest.mark.server
def test_the_conversation_list_of_few_long_threads_is_one_query(
    recorded: tuple[MessageStore, Recorder], db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mailbox of more messages than ``windows.PLAIN_MAX_THREADS`` (lowered here to a mailbox
    a test can fill) whose mail is in few threads lists them in one plain read: the sampled
    messages' threads (one read of their summaries) say how many threads there are. The same
    mailbox size in as many threads as messages is read in windows. Same pages either way."""
    monkeypatch.setattr(windows, "PLAIN_MAX_THREADS", 500)
    store, recorder = recorded
    store.store_many([message(n) for n in range(1500)], batch_size=500)  # 40 threads
    recorder.finds.clear()
    few = store.list_threads(limit=20)
    plain = [f for f in recorder.finds if f["find"] == "threads" and "_id" not in f["filter"]]
    assert len(plain) == 1 and "lastTs" not in plain[0]["filter"], recorder.finds
    assert [t["threadId"] for t in few.threads] == [f"t{n}@x" for n in range(20)]
    recorder.finds.clear()
    store.list_threads(limit=20)
    assert len([f for f in recorder.finds if "tags" not in f["filter"]]) == 1  # the estimate is kept with the sample

    singles = MessageStore(store.db, mailbox_id="bob")  # the same monitored client
    singles.store_many([email(n, thread=f"own{n}@x", ts=BASE_TS - n * 37) for n in range(1500)], batch_size=500)
    recorder.finds.clear()
    page = singles.list_threads(limit=20)
    windowed = [f for f in recorder.finds if f["find"] == "threads" and "_id" not in f["filter"]]
    assert windowed and all("lastTs" in f["filter"] for f in windowed), recorder.finds
    assert [t["threadId"] for t in page.threads] == [f"own{n}@x" for n in range(20)]


def read_all(store: Any, read: Any, limit: int) -> tuple[list[Any], list[str | None]]:
    rows: list[Any] = []
    cursors: list[str | None] = []
    cursor = None
    while True:
        page = read(cursor, limit)
        rows += page.messages if hasattr(page, "messages") else page.threads
        cursors.append(page.next_cursor)
        if page.next_cursor is None:
            return rows, cursors
        cursor = page.next_cursor


@pytest.mark.server  # hinted reads and bulk pipeline updates: mongomock runs neither
@pytest.mark.ci_every_server
def test_windowed_pages_equal_the_plain_query(db: Any, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every paged read, page by page across window edges and the bunched second, gives the
    rows, order and cursors of the plain keyset query (windows even on this small mailbox; the
    store flavors share this code, so the sync store stands for them)."""
    monkeypatch.setattr(windows, "PLAIN_MAX", 0)
    monkeypatch.setattr(windows, "PLAIN_MAX_THREAD", 0)  # a thread's pages too, placed from its summary
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    shared = MessageStore(db, mailbox_id="alice", shared_view=True)
    mail = [message(n) for n in range(520)]
    mail += [message(900 + n, ts=BASE_TS - 86_400 * 400 * n) for n in range(1, 4)]  # years apart
    store.store_many(mail, batch_size=200)
    reads = {
        "inbox": lambda c, n: store.list_messages(cursor=c, limit=n),
        "oldest first": lambda c, n: store.list_messages(cursor=c, limit=n, order="asc"),
        "since/until": lambda c, n: store.list_messages(
            cursor=c, limit=n, since=BASE_TS - 300 * 37, until=BASE_TS - BUNCHED.start * 37 + 1
        ),
        "sender": lambda c, n: store.list_messages(cursor=c, limit=n, sender="bob@example.com"),
        "thread": lambda c, n: store.list_messages(cursor=c, limit=n, thread_id="t3@x"),
        "participant": lambda c, n: store.with_participant("p2@x", cursor=c, limit=n),
        "shared participant": lambda c, n: shared.with_participant("p2@x", cursor=c, limit=n),
        "threads": lambda c, n: store.list_threads(cursor=c, limit=n),
    }
    for name, read in reads.items():
        for limit in (1, 29, 250) if name == "thread" else (29, 250):
            for s in (store, shared):
                s.capabilities.stops_at_limit = False  # windows
            windowed = read_all(store, read, limit)
            for s in (store, shared):
                s.capabilities.stops_at_limit = True  # the plain query
            plain = read_all(store, read, limit)
            assert windowed == plain, (name, limit)
            assert windowed[0], name
    context = [store.thread_context(f"t{t}@x", limit=7) for t in range(40)]
    store.capabilities.stops_at_limit = False
    assert [store.thread_context(f"t{t}@x", limit=7) for t in range(40)] == context
    assert store.list_messages(since=BASE_TS - BUNCHED.start * 37, limit=1000).messages[-1]["ts"] == (
        BASE_TS - BUNCHED.start * 37
    )  # since is inclusive (the server drops the bound of $gte on a descending index field)


@pytest.mark.server
def test_a_selective_read_or_a_small_one_is_one_query(recorded: tuple[MessageStore, Recorder], db: Any) -> None:
    """Above windows.PLAIN_MAX messages, a read the mailbox's sample says matches few (a rare
    correspondent, a conversation list of few threads) is the plain query alone: one find, once
    the sample is taken; the store keeps the sample for the reads after it, and takes it again
    once it stored mail itself."""
    store, recorder = recorded
    size = 1500  # above windows.PLAIN_MAX, and sampled at 1/16 (the sample depends on the keys alone)
    mail = [message(n) for n in range(size)]
    for n in range(0, size, 150):  # ten messages with a rare correspondent
        mail[n]["metadata"]["cc"] = [{"name": None, "email": "rare@x"}]
    store.store_many(mail, batch_size=500)
    store.with_participant("p3@x", limit=5)  # takes the sample
    assert store.stats()["windowedReads"] is True
    sampled = [f for f in recorder.finds if "specVersion" in f["filter"]]
    assert sampled[-1]["filter"]["_id"] == {"$gte": "alice:", "$lt": "alice:" + windows.key_between("", 1 / 16)}
    for read in (lambda: store.with_participant("rare@x", limit=50), lambda: store.list_threads(limit=20)):
        recorder.finds.clear()
        page = read()
        finds = [f for f in recorder.finds if "tags" not in f["filter"]]  # not the thread tags' probe
        assert len(finds) == 1, recorder.finds  # the plain query, the sample kept
        assert "ts" not in finds[0]["filter"] and "lastTs" not in finds[0]["filter"]
        assert page.messages if hasattr(page, "messages") else page.threads
    rare = [m["messageId"] for m in store.with_participant("rare@x", limit=50).messages]
    assert sorted(rare) == sorted(f"m{n}@example.com" for n in range(0, size, 150))
    recorder.finds.clear()
    store.list_messages(limit=50)  # the whole mailbox: windows, and no sample taken again
    assert not any("specVersion" in f["filter"] for f in recorder.finds)
    # windows (one here: the mail above the newest sampled message holds the page), not the plain query
    assert recorder.finds and all("ts" in f["filter"] for f in recorder.finds)
    store.store(message(size))
    recorder.finds.clear()
    store.with_participant("rare@x", limit=50)  # the store wrote mail: the sample is taken again
    assert any("specVersion" in f["filter"] for f in recorder.finds)


@pytest.mark.server
@pytest.mark.ci_every_server
def test_an_archive_s_first_page_starts_from_its_newest_mail(recorded: tuple[MessageStore, Recorder], db: Any) -> None:
    """A mailbox whose newest mail is three years old (an imported archive): the first page of
    every windowed read starts from the mailbox's own newest mail, not from the clock (narrow
    probes bisected the years between them before: 17 statements at 1,500 messages). Its pages
    are the plain query's, its statements as few as for a mailbox whose newest mail is today's,
    and what the server examined is about what it returned."""
    store, recorder = recorded
    size = 1500  # above windows.PLAIN_MAX: windowed reads; sampled at 1/16
    newest = int(time.time()) - 3 * 365 * 86_400
    store.store_many([message(n, ts=newest - n * 37) for n in range(size)], batch_size=500)
    reads = {
        "inbox": lambda: store.list_messages(limit=50).messages,
        "with_participant": lambda: store.with_participant("alice@example.com", limit=50).messages,
        "until": lambda: store.list_messages(limit=50, until=newest - 100 * 37).messages,
    }
    store.list_messages(limit=1)  # takes the sample
    assert store.stats()["windowedReads"] is True
    for name, read in reads.items():
        examined, returned = cost(store, recorder, db, read)
        statements = len(recorder.finds)
        assert statements <= 3, (name, [f["filter"] for f in recorder.finds])
        assert examined <= returned + 100, (name, examined, returned)
        windowed = read()
        store.capabilities.stops_at_limit = True  # the plain query
        try:
            assert read() == windowed, name
        finally:
            store.capabilities.stops_at_limit = False
        assert len(windowed) == 50 and windowed[0]["ts"] == (newest if name != "until" else newest - 101 * 37), name


@pytest.mark.server
def test_a_first_page_over_a_bunch_of_date_less_mail_reads_a_page(
    recorded: tuple[MessageStore, Recorder], db: Any
) -> None:
    """The newest third of a mailbox is Date-less mail that one ingest stamped with the same
    second (its ``processedAt``): the first inbox page and the next read a page of that second
    in key ranges, not the whole second (a 20,000-message mailbox's inbox read 2,126 documents
    of it, 103 ms on the embedded server, whenever the sample held two of them), and equal the
    plain query."""
    store, recorder = recorded
    now = int(time.time())
    dated = [message(n, ts=now - 3600 - n * 37) for n in range(1700)]
    undated = []
    for n in range(1700, 3000):
        mail = message(n)
        mail["metadata"].update(date=None, timestamp=None)
        mail["processing"]["processedAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60))
        undated.append(mail)
    store.store_many(dated + undated, batch_size=500)
    store.list_messages(limit=1)  # takes the sample
    assert store.stats()["windowedReads"] is True
    cursor = None
    for page in range(2):
        examined, returned = cost(store, recorder, db, lambda c=cursor: store.list_messages(cursor=c, limit=50))
        # windows sized from the few sampled messages of the bunch: a few pages' worth at most
        assert examined <= 4 * returned, (page, examined, returned, [f["filter"] for f in recorder.finds])
        windowed = store.list_messages(cursor=cursor, limit=50)
        store.capabilities.stops_at_limit = True  # the plain query
        try:
            assert store.list_messages(cursor=cursor, limit=50) == windowed, page
        finally:
            store.capabilities.stops_at_limit = False
        assert {m["ts"] for m in windowed.messages} == {now - 60}
        cursor = windowed.next_cursor


def shaped(kind: str, newest: int) -> list[dict[str, Any]]:
    """A mailbox of one shape, its newest mail at ``newest``: ``sparse`` (a message a day),
    ``dense`` (one every 37 s), ``bunched`` (a third of it Date-less, stamped with one second by
    one ingest) or ``archive`` (dense, its newest three years before the clock). A correspondent
    in one message of a hundred (``rare@x``), one in seven (``p3@x``)."""
    size = 600 if kind == "sparse" else 1200
    out = []
    for n in range(size):
        ts = newest - n * (86_400 if kind == "sparse" else 37)
        if kind == "bunched" and n % 3 == 0:
            ts = newest - 5000
        mail = message(n, ts=ts)
        if n % 100 == 7:
            mail["metadata"]["cc"] = [{"name": None, "email": "rare@x"}]
        out.append(mail)
    return out


@pytest.mark.server  # tags are set with bulks of PyMongo 4's UpdateOne
@pytest.mark.parametrize("kind", ["sparse", "dense", "bunched", "archive"])
def test_every_windowed_read_gives_the_plain_query_s_rows(db: Any, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read that may window (the inbox, oldest first, a date range, the conversation list,
    a correspondent common or rare, tags, folders, search in date order), page by page with
    its cursors, gives what the plain query gives, on mailboxes of every shape (windows even on
    these small mailboxes: ``PLAIN_MAX`` 0)."""
    monkeypatch.setattr(windows, "PLAIN_MAX", 0)
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    now = int(time.time())
    newest = now - 3 * 365 * 86_400 if kind == "archive" else now - 3600
    mail = shaped(kind, newest)
    store.store_many(mail, batch_size=400)
    store.tag([m["messageId"] for m in mail[::5]], add=["todo"])
    store.tag([m["messageId"] for m in mail[1::3]], add=["$seen"])
    reads = {
        "inbox": lambda c, n: store.list_messages(cursor=c, limit=n),
        "oldest first": lambda c, n: store.list_messages(cursor=c, limit=n, order="asc"),
        "until": lambda c, n: store.list_messages(cursor=c, limit=n, until=newest - 40 * 37),
        "participant": lambda c, n: store.with_participant("p3@x", cursor=c, limit=n),
        "rare participant": lambda c, n: store.with_participant("rare@x", cursor=c, limit=n),
        "threads": lambda c, n: store.list_threads(cursor=c, limit=n),
    }
    searches = ["tag:todo", "is:unread", "Topic", "tag:todo Topic"]
    for name, read in reads.items():
        for limit in (13, 120):
            store.capabilities.stops_at_limit = False  # windows
            windowed = read_all(store, read, limit)
            store.capabilities.stops_at_limit = True  # the plain query
            plain = read_all(store, read, limit)
            assert windowed == plain, (kind, name, limit)
            assert windowed[0], (kind, name)
    scan = MessageStore(db, mailbox_id="alice", search_engine="scan")  # date order, in windows
    for query in searches:
        scan.capabilities.stops_at_limit = False
        windowed_hits = [h["messageId"] for h in scan.search(query, limit=70)]
        scan.capabilities.stops_at_limit = True
        plain_hits = [h["messageId"] for h in scan.search(query, limit=70)]
        assert windowed_hits == plain_hits and windowed_hits, (kind, query)


@pytest.mark.server
@pytest.mark.parametrize("forced", [False, True], ids=["as-sampled", "windows"])
def test_a_first_page_sends_at_most_four_statements(
    monitored: Any, db: Any, forced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive of 1,500 messages whose newest is three years old: the first page of every
    windowed read, for a correspondent in 1%, 6% and 60% of it, spread over the mailbox or only
    where its sample cannot see (keys past the sampled part of the key space), sends at most four
    statements once the mailbox's sample is kept (a pymongo command listener counts them), with
    the plain query's rows; ``windows``: the same with every read windowed (``PLAIN_MAX`` 0), so
    a read the sample cannot see takes the bounded plan from the mailbox's newest mail."""
    if forced:
        monkeypatch.setattr(windows, "PLAIN_MAX", 0)
    sent = Statements()
    store = monitored(sent)
    store.store_many(archive_of_correspondents(), batch_size=500)
    store.list_messages(limit=1)  # takes the sample
    assert store.stats()["windowedReads"] is True
    reads: dict[str, Any] = {
        "inbox": lambda: store.list_messages(limit=50),
        "oldest first": lambda: store.list_messages(limit=50, order="asc"),
        "threads": lambda: store.list_threads(limit=50),
    }
    for share in (1, 6, 60):
        for placement in ("spread", "unseen"):
            peer = f"{placement}{share}@x"
            reads[peer] = lambda p=peer: store.with_participant(p, limit=50)
    for name, read in reads.items():
        sent.commands.clear()
        windowed = read()
        assert len(sent.commands) <= 4, (name, [(n, c.get("filter")) for n, c in sent.commands])
        assert not any(c.get("find") == "messages" and _probe(c) for _, c in sent.commands), name
        store.capabilities.stops_at_limit = True  # the plain query
        try:
            assert read() == windowed, name
        finally:
            store.capabilities.stops_at_limit = False


def archive_of_correspondents(size: int = 1500) -> list[dict[str, Any]]:
    """An archive whose newest mail is three years old, with correspondents in 1%, 6% and 60%
    of it, spread over it (``spread<share>@x``) or only in messages whose keys lie past the
    sampled part of the key space (``unseen<share>@x``)."""
    newest = int(time.time()) // 86_400 * 86_400 - 3 * 365 * 86_400
    sampled = windows.key_between("", windows.SAMPLE_FRACTIONS[-2])
    mail = []
    for n in range(size):
        m = message(n, ts=newest - n * 37)
        key = hashlib.sha256(m["messageId"].strip("<>").encode()).hexdigest()
        cc = [f"spread{s}@x" for s in (1, 6, 60) if n * s % 100 < s]
        cc += [f"unseen{s}@x" for s in (1, 6, 60) if key >= sampled and n * 7919 * s % 100 < s]
        m["metadata"]["cc"] = [{"name": None, "email": a} for a in cc]
        mail.append(m)
    return mail


#: a new process's first page of ``with_participant`` (or the inbox, for ``-``): the names of
#: the commands its client sent, the driver's authentication and session ends left out
_FIRST_READ = """
import json, sys
from pymongo import MongoClient, monitoring
from aecs_mongo import MessageStore

class Names(monitoring.CommandListener):
    def __init__(self):
        self.names = []
    def started(self, event):
        if event.command_name not in ("saslStart", "saslContinue", "authenticate", "endSessions"):
            self.names.append(event.command_name)
    def succeeded(self, event):
        pass
    def failed(self, event):
        pass

uri, database, peer = sys.argv[1:]
names = Names()
client = MongoClient(uri, event_listeners=[names])
store = MessageStore(client[database], mailbox_id="alice")
page = store.list_messages(limit=50) if peer == "-" else store.with_participant(peer, limit=50)
print(json.dumps({"names": names.names, "ids": [m["messageId"] for m in page.messages]}))
client.close()
"""


@pytest.mark.server
def test_the_first_read_of_a_new_process_sends_at_most_four_statements(servers: Any, backend: str, db: Any) -> None:
    """The very first page of a new process, client and store (nothing learned of the server
    yet: its dialect, the mailbox's extent and sample) on the archive of
    ``archive_of_correspondents``: at most four statements in every case (what the server is,
    where the mailbox's mail is, its sample, the page), no ``explain``, and the plain query's rows."""
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many(archive_of_correspondents(), batch_size=500)
    peers = ["-", *(f"{placement}{share}@x" for share in (1, 6, 60) for placement in ("spread", "unseen"))]
    for peer in peers:
        argv = [sys.executable, "-c", _FIRST_READ, servers.uri(backend), db.name, peer]
        first = json.loads(subprocess.run(argv, capture_output=True, check=True, text=True).stdout)
        assert len(first["names"]) <= 4 and "explain" not in first["names"], (peer, first["names"])
        store.capabilities.stops_at_limit = True  # the plain query
        page = store.list_messages(limit=50) if peer == "-" else store.with_participant(peer, limit=50)
        assert first["ids"] == [m["messageId"] for m in page.messages], peer


class Statements(monitoring.CommandListener):
    """Every command a client sends (name, command), reads and writes alike."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _probe(command: dict[str, Any]) -> bool:
    """Whether a find is a probe (it reads where the mail is, not the page's rows)."""
    return command.get("projection") == queries.PROBE_PROJECTION


@pytest.mark.server
def test_the_mailbox_s_extent_is_kept_where_the_store_writes(db: Any) -> None:
    """The mailbox's oldest and newest ``ts`` are widened by every write of new mail, which it
    counts (never narrowed: a delete leaves bounds); the erase removes them; a mailbox stored
    without them has them established from its stored mail, by its next write or read (its count
    then unknown), never from the new mail alone."""
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many([message(n, ts=BASE_TS - n * 37) for n in range(30)])
    extent = db[EXTENTS_COLLECTION]

    def kept() -> Any:
        return extents.extent_of(extent.find_one({"_id": extent_id("alice")}))

    assert kept() == extents.Extent(BASE_TS - 29 * 37, BASE_TS, 30)
    store.store(message(100, ts=BASE_TS - 10_000))
    store.store(message(101, ts=BASE_TS + 500))
    store.store(message(101, ts=BASE_TS + 500))  # stored already: not counted
    assert kept() == extents.Extent(BASE_TS - 10_000, BASE_TS + 500, 32)
    store.delete("m101@example.com")
    assert kept() == extents.Extent(BASE_TS - 10_000, BASE_TS + 500, 32)  # still bounds
    extent.delete_many({})  # a mailbox stored before extents existed
    store.store(message(102, ts=BASE_TS + 900))
    assert kept() == extents.Extent(BASE_TS - 10_000, BASE_TS + 900, None)
    extent.delete_many({})
    store.capabilities.stops_at_limit = False
    assert len(store.list_messages(limit=5).messages) == 5
    assert kept() == extents.Extent(BASE_TS - 10_000, BASE_TS + 900, None)
    store.erase_mailbox()
    assert extent.find_one({"_id": extent_id("alice")}) is None
