"""The ``reads`` section: one mailbox per size (default 1k, 10k, 100k messages) in one database,
built once: inbox pages 1 and 20, threads, with_participant and thread_context, ours vs the
plain query written by hand (median ms), and each read's cost relative to the smallest size (a
page must cost a page); search for a word only in the newest and one only in the oldest message
(``limit=1``: the second goes through the whole mailbox), with the messages examined.

And the same reads on archives (``--archive-sizes``, default 1,500): a mailbox whose newest mail
is three years old (an imported archive), where a first page must cost its plain query too
(``mailbox`` = ``archive``; the others are ``recent``: their newest mail is months old).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from aecs_mongo import MessageStore
from aecs_mongo.pure.keys import address_key, thread_key
from aecs_mongo.pure.queries import LIST_PROJECTION, THREAD_CONTEXT_PROJECTION
from benchmarks.common import (
    BASE_TS,
    INBOX,
    Context,
    Doc,
    median_time,
    paired_medians,
    populate,
    table,
    table_of,
    timed,
)

#: an archive's newest mail is this old (seconds): three years
ARCHIVE_AGE = 3 * 365 * 86_400


def _build(db: Database[Doc], mailbox: str, size: int, base_ts: int) -> None:
    if db.messages.count_documents({"mailboxId": mailbox}) == size:
        return  # built by an earlier run in the same --data-dir
    for collection in (db.messages, db.bodies, db.threads):
        collection.delete_many({"mailboxId": mailbox})
    started = time.perf_counter()
    populate(db, mailbox, size, base_ts)
    print(f"  populated {mailbox}: {size:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def bench_reads(
    client: MongoClient[Doc], sizes: list[int], rounds: int, archive_sizes: Sequence[int] = ()
) -> list[Doc]:
    """Every paged read and search at each size, in one database: one mailbox per size (built
    once, raw inserts of the documents store() writes). Ours (bounded windows where the server
    reads a query's whole range) vs the plain query written by hand (what the store sent before:
    the index that provides the sort, hinted where the mailbox is the only equality, and a
    limit), timed once: on the embedded server a hinted query reads the whole index. Search: a
    word only the newest message holds and one only the oldest holds, ``limit=1``, once each
    (the second reads the whole mailbox). Then the archives: the same reads on mailboxes whose
    newest mail is ``ARCHIVE_AGE`` old."""
    name = "aecs_bench_reads"
    db = client[name]
    MessageStore(db, mailbox_id="setup").ensure_indexes()
    for size in sizes:
        _build(db, f"m{size}", size, BASE_TS)
    newest = int(time.time()) // 86_400 * 86_400 - ARCHIVE_AGE
    for size in archive_sizes:
        _build(db, f"a{size}", size, newest - (size - 1) * 37)
    rows: list[Doc] = []
    for size in sizes:
        rows += reads_at(db, size, rounds)
        print(table([r for r in rows if r["size"] == size], READ_COLUMNS), file=sys.stderr, flush=True)
    smallest = {r["read"]: r["ours_ms"] for r in rows if r["size"] == sizes[0]} if sizes else {}
    for r in rows:
        r["vs_smallest"] = r["ours_ms"] / smallest[r["read"]]
    for size in archive_sizes:
        archive = reads_at(db, size, rounds, f"a{size}")
        print(table(archive, READ_COLUMNS), file=sys.stderr, flush=True)
        rows += archive
    return rows


def reads_at(db: Database[Doc], size: int, rounds: int, mailbox: str | None = None) -> list[Doc]:
    mailbox = mailbox or f"m{size}"
    kind = "archive" if mailbox.startswith("a") else "recent"
    store = MessageStore(db, mailbox_id=mailbox)
    thread_id = "root-7@bench.example"
    tkey = thread_key(thread_id)
    peer = "peer3@x.example"
    cursor = None
    for _ in range(19):
        cursor = store.list_messages(cursor=cursor, limit=50).next_cursor
    page19 = store.list_messages(cursor=None, limit=50)
    before = None
    for _ in range(19):
        page19 = store.list_messages(cursor=before, limit=50)
        before = page19.next_cursor
    last = db.messages.find_one({"mailboxId": mailbox, "messageId": page19.messages[-1]["messageId"]})
    assert last is not None
    desc = [("ts", -1), ("messageKey", -1)]
    after = {"$or": [{"ts": {"$lt": last["ts"]}}, {"ts": last["ts"], "messageKey": {"$lt": last["messageKey"]}}]}

    def hand_context() -> object:
        selector = {"mailboxId": mailbox, "threadKey": tkey}
        found = list(db.messages.find(selector, THREAD_CONTEXT_PROJECTION).sort(desc).limit(20))
        return found, db.messages.count_documents(selector)

    def hand_inbox(selector: Doc) -> object:
        return list(db.messages.find(selector, LIST_PROJECTION).sort(desc).hint(INBOX).limit(51))

    participant = {"mailboxId": mailbox, "participants": address_key(peer)}
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("inbox page 1", lambda: store.list_messages(limit=50), lambda: hand_inbox({"mailboxId": mailbox})),
        (
            "inbox page 20",
            lambda: store.list_messages(cursor=cursor, limit=50),
            lambda: hand_inbox({"$and": [{"mailboxId": mailbox}, after]}),
        ),
        (
            "threads",
            lambda: store.list_threads(limit=50),
            lambda: list(db.threads.find({"mailboxId": mailbox}).sort([("lastTs", -1), ("_id", -1)]).limit(51)),
        ),
        (
            "with_participant",
            lambda: store.with_participant(peer, limit=50),
            lambda: list(db.messages.find(participant, LIST_PROJECTION).sort(desc).limit(51)),
        ),
        ("thread_context (20)", lambda: store.thread_context(thread_id, limit=20), hand_context),
    ]
    rows: list[Doc] = []
    for label, ours, hand in cases:
        t_hand = timed(hand)
        if t_hand < HAND_ONCE_SECONDS:  # cheap: timed in turn with ours, round after round, warm
            t_ours, t_hand = paired_medians(ours, hand, rounds)
        else:  # it reads the whole index (every mailbox, seconds at 100k): once
            t_ours = median_time(ours, rounds)
        rows.append(
            {
                "size": size,
                "mailbox": kind,
                "read": label,
                "ours_ms": t_ours * 1000,
                "plain_ms": t_hand * 1000,
                "ours/plain": t_ours / t_hand,
            }
        )
    for label, word in (("search newest", f"Message {size - 1} of"), ("search oldest", "Message 0 of")):
        started = time.perf_counter()
        results = store.search(word, limit=1)
        elapsed = time.perf_counter() - started
        rows.append(
            {
                "size": size,
                "mailbox": kind,
                "read": label,
                "ours_ms": elapsed * 1000,
                "examined": results.examined,
                "found": len(results),
                "complete": results.complete,
            }
        )
    return rows


#: a hand-written query slower than this is timed once (on the embedded server a hinted query
#: reads the whole index: seconds at 100k); a faster one gets the same median of rounds as ours
HAND_ONCE_SECONDS = 1.0


READ_COLUMNS = [
    "size",
    "mailbox",
    "read",
    "ours_ms",
    "plain_ms",
    "ours/plain",
    "vs_smallest",
    "examined",
    "found",
    "complete",
]


NAME = "reads"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--sizes", default="1000,10000,100000", type=lambda s: [int(x) for x in s.split(",") if x], help="mailbox sizes"
    )
    parser.add_argument(
        "--archive-sizes",
        default="1500",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="archives (newest mail three years old): mailbox sizes ('' skips them)",
    )


def run(ctx: Context) -> Doc:
    rows = bench_reads(ctx.client, ctx.args.sizes, ctx.args.rounds, ctx.args.archive_sizes)
    table_of(
        "reads (median ms; ours / the plain query; vs_smallest = ours / ours at the smallest size)", rows, READ_COLUMNS
    )
    return {"reads": rows}
