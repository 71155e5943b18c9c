"""The ``reads`` section: one mailbox per size (default 1k, 10k, 100k messages) in one database,
built once: inbox pages 1 and 20, threads, with_participant and thread_context, ours vs the
plain query written by hand (median ms), and each read's cost relative to the smallest size (a
page must cost a page); search for a word only in the newest and one only in the oldest message
(``limit=1``: the second goes through the whole mailbox), with the messages examined.

And the same reads on archives (``--archive-sizes``, default 1,500): a mailbox whose newest mail
is three years old (an imported archive), where a first page must cost its plain query too
(``mailbox`` = ``archive``; the others are ``recent``: their newest mail is months old).

Then ``with_participant``'s first page on such an archive of ``--participant-size`` messages
(1,500) for correspondents in ``--participant-shares`` percent of them (1, 6, 60), stored once as
AECS-1 objects and once as raw bytes (both through ``store_many``), against its hand-written
query, with the statements it sent (``statements``: with the mailbox's sample kept, as every
read but the first in a minute finds it; ``cold``: a new store's first read on the same client,
the sample and the mailbox's extent included; ``first``: the very first read of a new process,
client and store, what the store learns of the server included, its statements named in the
JSON report; the driver's own authentication and session ends are not the store's and are left
out). Each share twice: spread evenly over the mailbox (``spread``), and only in messages the
mailbox's sample cannot hold (``unseen``: their keys lie past the sampled part of the key space,
so the read steers by no match of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from aecs_mongo import MessageStore
from aecs_mongo.pure import windows
from aecs_mongo.pure.keys import address_key, message_key, thread_key
from aecs_mongo.pure.queries import LIST_PROJECTION, THREAD_CONTEXT_PROJECTION
from benchmarks.common import (
    BASE_TS,
    INBOX,
    Context,
    Doc,
    StatementCounter,
    mail,
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


PARTICIPANT_COLUMNS = [
    *("stored", "share", "placement", "matches"),
    *("ours_ms", "plain_ms", "ours/plain", "statements", "cold", "first"),
]


def _correspondents(n: int, mid: str, shares: Sequence[int]) -> list[str]:
    """The correspondents message ``n`` (its Message-ID ``mid``) is copied to: per share, a spread
    one (every message whose number falls in the share) and an unseen one (the same share of the
    messages whose key lies past the sampled part of the key space)."""
    unseen = message_key(mid) >= windows.key_between("", windows.SAMPLE_FRACTIONS[-2])
    out = []
    for share in shares:
        if n * share % 100 < share:
            out.append(f"spread{share}@corr.example")
        if unseen and (n * 7919) * share % 100 < share:
            out.append(f"unseen{share}@corr.example")
    return out


def _archive_mail(size: int, newest: int, shares: Sequence[int]) -> list[Doc]:
    """The bench mail, newest ``newest``, with the correspondents of ``_correspondents`` in Cc."""
    out = []
    for n in range(size):
        m = mail(n, base_ts=newest - (size - 1) * 37)
        m["metadata"]["cc"] = [{"name": None, "email": a} for a in _correspondents(n, m["messageId"], shares)]
        out.append(m)
    return out


def _raw(m: Doc) -> bytes:
    """An AECS-1 bench message as RFC 5322 bytes (the same addresses, date and references)."""
    meta = m["metadata"]
    lines = [
        f"From: {meta['from']['name']} <{meta['from']['email']}>",
        "To: " + ", ".join(a["email"] for a in meta["to"]),
    ]
    if meta["cc"]:
        lines.append("Cc: " + ", ".join(a["email"] for a in meta["cc"]))
    lines += [
        f"Subject: {meta['subject']}",
        "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(meta["timestamp"])),
        f"Message-ID: <{m['messageId']}>",
    ]
    if m["thread"]["inReplyTo"]:
        lines.append(f"In-Reply-To: <{m['thread']['inReplyTo']}>")
    lines.append("References: " + " ".join(f"<{r}>" for r in m["thread"]["references"]))
    lines += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8", "", m["content"]["text"], ""]
    return "\r\n".join(lines).encode()


#: a new process's first ``with_participant`` page: the names of the statements it sent
_FIRST_READ = """
import json, sys
from pymongo import MongoClient, monitoring
from aecs_mongo import MessageStore

class Names(monitoring.CommandListener):
    def __init__(self):
        self.names = []
    def started(self, event):
        target = event.command.get(event.command_name)
        self.names.append(f"{event.command_name} {target}" if isinstance(target, str) else event.command_name)
    def succeeded(self, event):
        pass
    def failed(self, event):
        pass

uri, database, mailbox, peer = sys.argv[1:]
names = Names()
client = MongoClient(uri, event_listeners=[names])
MessageStore(client[database], mailbox_id=mailbox).with_participant(peer, limit=50)
print(json.dumps(names.names))
client.close()
"""
#: the driver's own commands (authentication, a session's end), not the store's statements
_DRIVER_COMMANDS = ("saslStart", "saslContinue", "authenticate", "endSessions")


def _first_read(uri: str, database: str, mailbox: str, peer: str) -> list[str]:
    """The statements of the very first ``with_participant`` page of a new process (nothing
    learned of the server yet, in this or any client), by name."""
    argv = [sys.executable, "-c", _FIRST_READ, uri, database, mailbox, peer]
    sent = json.loads(subprocess.run(argv, capture_output=True, check=True, text=True).stdout)
    return [name for name in sent if name not in _DRIVER_COMMANDS]


def bench_participant(uri: str, size: int, shares: Sequence[int], rounds: int) -> list[Doc]:
    """``with_participant``'s first page on an archive (newest mail ``ARCHIVE_AGE`` old) of
    ``size`` messages, stored as AECS-1 objects and as raw bytes: ours against the hand-written
    query, and the statements ours sent (see the module's docstring)."""
    counter = StatementCounter()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[counter])
    db = client["aecs_bench_participant"]
    newest = int(time.time()) // 86_400 * 86_400 - ARCHIVE_AGE
    mailbox = _archive_mail(size, newest, shares)
    rows: list[Doc] = []
    desc = [("ts", -1), ("messageKey", -1)]
    try:
        for stored, batch in (("AECS-1", mailbox), ("raw", [_raw(m) for m in mailbox])):
            box = f"p{size}-{stored}"
            if db.messages.count_documents({"mailboxId": box}) != size:
                for collection in ("messages", "bodies", "threads", "mailbox_extents"):
                    db[collection].delete_many({"mailboxId": box})
                setup = MessageStore(db, mailbox_id=box)
                setup.ensure_indexes()
                setup.store_many(batch, batch_size=500)
            store = MessageStore(db, mailbox_id=box)
            for share in shares:
                for placement in ("spread", "unseen"):
                    peer = f"{placement}{share}@corr.example"
                    selector = {"mailboxId": box, "participants": address_key(peer)}

                    def ours(peer: str = peer, store: MessageStore = store) -> object:
                        return store.with_participant(peer, limit=50)

                    def hand(selector: Doc = selector) -> object:
                        return list(db.messages.find(selector, LIST_PROJECTION).sort(desc).limit(51))

                    first = _first_read(uri, db.name, box, peer)
                    cold_store = MessageStore(db, mailbox_id=box)
                    counter.count = 0
                    cold_store.with_participant(peer, limit=50)
                    cold = counter.count
                    ours()
                    counter.count = 0
                    ours()
                    statements = counter.count
                    t_ours, t_hand = paired_medians(ours, hand, rounds)
                    rows.append(
                        {
                            "stored": stored,
                            "share": f"{share}%",
                            "placement": placement,
                            "matches": db.messages.count_documents(selector),
                            "ours_ms": t_ours * 1000,
                            "plain_ms": t_hand * 1000,
                            "ours/plain": t_ours / t_hand,
                            "statements": statements,
                            "cold": cold,
                            "first": len(first),
                            "first_statements": first,
                        }
                    )
                    print(table(rows[-1:], PARTICIPANT_COLUMNS), file=sys.stderr, flush=True)
    finally:
        client.close()
    return rows


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
    parser.add_argument("--participant-size", default=1500, type=int, help="with_participant on an archive: its size")
    parser.add_argument(
        "--participant-shares",
        default="1,6,60",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="with_participant on an archive: correspondents in these percents of it ('' skips it)",
    )


def run(ctx: Context) -> Doc:
    rows = bench_reads(ctx.client, ctx.args.sizes, ctx.args.rounds, ctx.args.archive_sizes)
    if rows:
        title = "reads (median ms; ours / the plain query; vs_smallest = ours / ours at the smallest size)"
        table_of(title, rows, READ_COLUMNS)
    participant = (
        bench_participant(ctx.uri, ctx.args.participant_size, ctx.args.participant_shares, ctx.args.rounds)
        if ctx.args.participant_shares
        else []
    )
    if participant:
        table_of(
            f"with_participant's first page on an archive of {ctx.args.participant_size:,} messages (newest three"
            " years old): median ms, ours / the hand-written query, statements (kept sample; cold: a new store's;"
            " first: a new client's)",
            participant,
            PARTICIPANT_COLUMNS,
        )
    return {"reads": rows, "participant_archive": participant}
