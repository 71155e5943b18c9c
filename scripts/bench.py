#!/usr/bin/env python3
"""Benchmark aecs-mongo against the raw driver doing the same work on the same server, in one run.

Sections (each prints a table; everything also goes to a JSON file):

- ingest: ``aecs-mongo ingest`` of a Maildir of real mail beside ``notmuch new`` and ``mu index``
  of the same Maildir, in the same run (``--ingest-tool-sizes``, 1k and 10k: messages/s, medians;
  ``scripts/bench_ingest.py``); then ``store`` one by one and ``store_many`` of real mail as raw bytes (the corpus with
  fresh Message-IDs: raw.eml, HTML and attachments are all written, and ours parses too) vs
  PyMongo inserting the very documents and blobs our code produces (prebuilt, so the baseline
  is the I/O floor). Ratio = baseline time / our time (1.0 = driver speed; target >= 0.8).
- floor: ``store_many`` (batches of 100) vs the raw driver's one unordered ``insert_many`` per
  collection of the very documents ours left (GridFS included): what our statements cost over
  the plain insert of their result. Synthetic AECS-1 objects and real mail; ratio = raw / ours.
- reads: one mailbox per size (default 1k, 10k, 100k messages) in one database, built once:
  inbox pages 1 and 20, threads, with_participant and thread_context, ours vs the plain query
  written by hand (median ms), and each read's cost relative to the smallest size (a page must
  cost a page); search for a word only in the newest and one only in the oldest message
  (``limit=1``: the second goes through the whole mailbox), with the messages examined.
- reindex: ``reindex()`` of a consistent mailbox (1k and 10k messages) vs the floor of its
  work, reading every message and body document once with PyMongo; ratio = ours / floor.
- scaling: ``store_many`` of 100,000 distinct real messages into one mailbox in slices of 10,000:
  messages/s per slice (flat: no cost grows with the database), peak RSS, final database size.
- cli: 20 short commands in a row (inbox, thread, show, search) on the embedded default, with
  the server stopped after each (``--keep-server 0``, as before) and kept between them (the
  default); ``AECS_BENCH_CLI_BASELINE=DIR`` (a source tree of another version: ``git archive REV |
  tar -x -C DIR``) adds that version's commands in the same run, on the same data, for the
  before/after ratio; then ``aecs-mongo ingest`` of a generated 1 GB mbox of real mail:
  messages/s per 10% of the file (from its progress line) and its peak RSS (``--cli-mb 0`` skips it).
- lifecycle: a mailbox of 10k, 30k and 100k distinct real messages (beside a neighbour of 2k):
  export as mbox and as Maildir (fsync per file) with every variant, MB/s vs the read floor (one
  cursor over the mailbox's chunks: the bytes alone, unordered, unchecked),
  ``expire`` at the median date and ``erase_mailbox`` of the rest: time, statements, and the ratio
  to ``delete()`` one by one (timed on a sample, the only way before them).
- export (``--sections export``, not in the default list): export alone, quicker than lifecycle:
  ``--export-messages`` (3,000) distinct real messages and a variant of every 50th, exported as
  mbox and as Maildir (fsync per file) with every variant, and read alone (``export_raw``, no
  writer), beside the read floor, round after round in one run (``--export-rounds``, medians),
  with the statements and the load average.
- memory: peak RSS of ``aecs-mongo ingest`` on generated mboxes of 20 and 200 MB.
- search (``--sections search``, not in the default list): the local search index beside notmuch
  on the same Maildir of real mail at 1k, 10k and 100k messages (``--search-sizes``), a rare
  word, a phrase, a ``from:``, a ``date:`` and a count of a common word; in process, through the
  command line (its Python start-up beside it), and the scan at the small sizes; the ingest rate
  with and without the index, and the index size per raw MB (``scripts/bench_search.py``).
- imap (``--sections imap``, not in the default list: it needs Dovecot): ``imap.sync`` of real
  mail from a local Dovecot over IMAPS vs a bare imaplib client fetching the same UIDs and
  storing nothing, and vs ``store_many`` of the served bytes from memory.
- durability: ``store_many`` of real mail (1k and 10k messages, batches of 100) by a durable
  store (the default: the write that completes each batch waits for the journal) and by one made
  with ``durable=False``, alternating, on the run's server mode: messages/s of each and the
  price of durability (durable time / fast time). Run it once per ``--mode``.
- normalize: messages/s and MB/s over ``../shared/corpus/eml`` vs the bare stdlib parse (the
  floor), and vs postal-mime under node (the JavaScript parser of the AECS-1 reference).
- vectors: at 10k and 100k vectors of 768 dimensions (``--vector-sizes``, ``--vector-dims``) in
  one mailbox of generated mail, clustered and random vectors: bytes per stored vector (BSON
  array of doubles, as earlier releases stored it, vs the binData float32 document plus its
  share of the block that holds its int8 copy), the documents a first pass reads,
  ``set_embeddings`` vectors/s, ``semantic_search`` median latency (limit 10) with numpy and in
  pure Python, vs the one-pass exact search written by hand (PyMongo reads every float32 vector,
  numpy ranks them), and recall@10 of our two-pass search against exact float search.

- agents (``--sections agents``, not in the default list): warm tool-call latency of the agent
  tools at ``--agents-size`` (10k) real messages: search and get_thread as the store call, the
  Python tool and the MCP round trip over stdio (``scripts/bench_agents.py``).

Usage: ``python scripts/bench.py [--sizes 1000,10000,100000] [--rounds 15] [--json out.json]``.
Uses ``MONGODB_URI`` if set, else starts the embedded server (``--mode standalone|rs``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import itertools
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pymongo import MongoClient, UpdateOne, monitoring
from pymongo.database import Database

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gen_mbox  # noqa: E402

from aecs_mongo import MessageStore  # noqa: E402
from aecs_mongo.embedded.server import EmbeddedServer  # noqa: E402
from aecs_mongo.errors import AecsMongoError  # noqa: E402
from aecs_mongo.pure import vectors  # noqa: E402
from aecs_mongo.pure.blobs import chunk_documents, file_document  # noqa: E402
from aecs_mongo.pure.documents import (  # noqa: E402
    MessageDocuments,
    build_documents,
    thread_summary_from_messages,
    thread_update,
)
from aecs_mongo.pure.keys import address_key, doc_id, message_key, thread_key  # noqa: E402
from aecs_mongo.pure.queries import LIST_PROJECTION, THREAD_CONTEXT_PROJECTION  # noqa: E402
from aecs_mongo.synchronous import writing  # noqa: E402

Doc = dict[str, Any]
BASE_TS = 1_780_000_000
INBOX = "aecs_messages_inbox"


def mail(n: int, mailbox_threads: int = 400) -> Doc:
    """A realistic NormalizedEmail: threads of ~25, 6 senders, replies with References."""
    t = n % mailbox_threads
    root = f"root-{t}@bench.example"
    parent = f"m{n - mailbox_threads}@bench.example" if n >= mailbox_threads else None
    ts = BASE_TS + n * 37
    body = f"Message {n} of thread {t}. " + "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 12
    return {
        "messageId": f"m{n}@bench.example",
        "threadId": root,
        "metadata": {
            "from": {"name": f"Sender {n % 6}", "email": f"sender{n % 6}@bench.example"},
            "to": [
                {"name": None, "email": "owner@bench.example"},
                {"name": "Peer", "email": f"peer{n % 11}@x.example"},
            ],
            "cc": [],
            "bcc": [],
            "subject": ("Re: " if parent else "") + f"Topic {t}",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)),
            "timestamp": ts,
        },
        "content": {"rawFull": None, "raw": body, "html": None, "text": body, "clean": body, "forAI": body[:400]},
        "thread": {"position": None, "inReplyTo": parent, "references": [root] + ([parent] if parent else [])},
        "attachments": [],
        "processing": {"processedAt": "2026-11-30T00:00:00Z", "specVersion": "1.1"},
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    return statistics.median(timed(fn) for _ in range(rounds))


def paired_medians(ours: Callable[[], object], base: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Medians of ``ours`` and ``base`` timed in turn, round after round (their order alternating):
    a shared machine's slow spells fall on both, so their ratio is steadier than that of two
    medians taken one after the other."""
    ours(), base()  # warm
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            times[i].append(timed((ours, base)[i]))
    return statistics.median(times[0]), statistics.median(times[1])


# --- ingest ------------------------------------------------------------------------------------


def real_mail(count: int, offset: int = 0) -> list[bytes]:
    """``count`` real messages (raw bytes): the corpus (../shared/corpus/eml; the sample mailbox
    where it is absent) repeated with fresh Message-IDs, plus a synthetic message with a 64 KiB
    attachment per round. Raw bytes, HTML and attachments: every tier gets written."""
    source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
    return list(itertools.islice(gen_mbox.messages(64, source=source), offset, offset + count))


def storable(raws: list[bytes]) -> tuple[list[bytes], list[MessageDocuments]]:
    """The messages the store accepts, first copy of each Message-ID only (the corpus holds the
    same message more than once), with the documents it writes for them."""
    builder = MessageStore(MongoClient(connect=False)["unused"], mailbox_id="bench")
    kept: dict[str, tuple[bytes, MessageDocuments]] = {}
    for raw in raws:
        try:
            docs = writing.build(builder._context, raw, None, None)
        except AecsMongoError:
            continue
        kept.setdefault(docs.message["_id"], (raw, docs))
    return [raw for raw, _ in kept.values()], [docs for _, docs in kept.values()]


def baseline_blobs(db: Database[Doc], batch: list[MessageDocuments], bucket: str = "aecs") -> None:
    chunks = [c for d in batch for b in d.blobs for c in chunk_documents(b.key, b.data)]
    if chunks:
        db[f"{bucket}.chunks"].insert_many(chunks, ordered=False)
    files = [file_document(b.key, len(b.data), b.content_type, {}) for d in batch for b in d.blobs]
    if files:
        db[f"{bucket}.files"].insert_many(files, ordered=False)


def baseline_batch(
    db: Database[Doc], batch: list[MessageDocuments], bucket: str = "aecs", transactions: bool = False
) -> None:
    """The raw driver writing what store_many writes: chunks, files, bodies, messages, threads;
    with ``transactions``, the last three in one transaction per batch, as the store does."""
    baseline_blobs(db, batch, bucket)
    with db.client.start_session() as session, contextlib.ExitStack() as stack:
        if transactions:
            stack.enter_context(session.start_transaction())
        txn = session if transactions else None
        db.bodies.insert_many([d.body for d in batch], ordered=False, session=txn)
        db.messages.insert_many([d.message for d in batch], ordered=False, session=txn)
        folds = [UpdateOne(*thread_update(d.message), upsert=True) for d in batch]
        db.threads.bulk_write(folds, ordered=True, session=txn)


def baseline_one(db: Database[Doc], d: MessageDocuments) -> None:
    baseline_blobs(db, [d])
    db.bodies.insert_one(d.body)
    db.messages.insert_one(d.message)
    db.threads.update_one(*thread_update(d.message), upsert=True)


def bench_ingest(client: MongoClient[Doc], count: int, rounds: int, transactions: bool) -> dict[str, Any]:
    """Real mail as raw bytes (ours parses it too) vs the driver inserting the final documents."""
    raws, prebuilt = storable(real_mail(count))
    results: dict[str, list[float]] = {"store": [], "base_one": [], "store_many": [], "base_many": []}
    for r in range(rounds):
        for key, run in (
            ("store", lambda s, db: [s.store(raw) for raw in raws]),
            ("store_many", lambda s, db: s.store_many(raws, batch_size=100)),
            ("base_one", lambda s, db: [baseline_one(db, d) for d in prebuilt]),
            (
                "base_many",
                lambda s, db: [
                    baseline_batch(db, prebuilt[i : i + 100], transactions=transactions)
                    for i in range(0, len(raws), 100)
                ],
            ),
        ):
            name = f"aecs_bench_ingest_{key}_{r}"
            client.drop_database(name)
            db = client[name]
            store = MessageStore(db, mailbox_id="bench", transactions=transactions)
            store.ensure_indexes()
            results[key].append(timed(lambda: run(store, db)))  # noqa: B023
            client.drop_database(name)
    med = {k: statistics.median(v) for k, v in results.items()}
    return {
        "messages": len(raws),
        "MB": round(sum(map(len, raws)) / 1e6, 1),
        "rounds": rounds,
        "transactions": transactions,
        "store_s": med["store"],
        "baseline_one_s": med["base_one"],
        "store_ratio": med["base_one"] / med["store"],
        "store_many_s": med["store_many"],
        "baseline_many_s": med["base_many"],
        "store_many_ratio": med["base_many"] / med["store_many"],
        "store_many_msgs_per_s": len(raws) / med["store_many"],
    }


def bench_durability(client: MongoClient[Doc], sizes: list[int], rounds: int, transactions: bool) -> list[Doc]:
    """``store_many`` with and without durable acknowledgements, the same mail, alternating."""
    rows = []
    for size in sizes:
        raws = real_mail(size)
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds):
            for durable in (True, False) if r % 2 == 0 else (False, True):
                name = f"aecs_bench_durability_{int(durable)}_{r}"
                client.drop_database(name)
                store = MessageStore(client[name], mailbox_id="bench", transactions=transactions, durable=durable)
                store.ensure_indexes()
                times[durable].append(timed(lambda store=store, raws=raws: store.store_many(raws, batch_size=100)))
                client.drop_database(name)
        durable_s, fast_s = statistics.median(times[True]), statistics.median(times[False])
        rows.append(
            {
                "messages": len(raws),
                "MB": round(sum(map(len, raws)) / 1e6, 1),
                "transactions": transactions,
                "rounds": rounds,
                "durable_s": durable_s,
                "fast_s": fast_s,
                "durable_msgs_per_s": len(raws) / durable_s,
                "fast_msgs_per_s": len(raws) / fast_s,
                "price": durable_s / fast_s,
            }
        )
    return rows


# --- floor: the final documents inserted by the raw driver -----------------------------------

FINAL_COLLECTIONS = ("aecs.chunks", "aecs.files", "bodies", "messages", "threads")


def insert_final(db: Database[Doc], final: dict[str, list[Doc]]) -> None:
    """The raw driver's floor: one unordered ``insert_many`` per collection of the end state."""
    for name, documents in final.items():
        if documents:
            db[name].insert_many(documents, ordered=False)


def bench_floor(client: MongoClient[Doc], count: int, rounds: int, transactions: bool) -> list[Doc]:
    """``store_many`` (batches of 100) vs the raw driver inserting the very documents it left in
    the database (every collection, GridFS included; one unordered ``insert_many`` each, no
    transaction): what the store's statements cost over the plain insert of their result.
    Synthetic AECS-1 objects (no parse; the same objects in two arrival orders) and real mail as
    raw bytes (parsed by ours, in the timing; distinct Message-IDs, every tier written)."""
    raws, _ = storable(real_mail(count))
    synthetic = [mail(n) for n in range(count)]
    workloads: dict[str, list[Any]] = {
        # 400 threads of ~4 messages: in date order every batch of 100 touches 100 threads, stored ones
        # from the fifth batch on; in thread order (a per-conversation export) a batch touches 4
        "synthetic, date order": synthetic,
        "synthetic, thread order": sorted(synthetic, key=lambda m: m["threadId"]),
        "real mail": raws,
    }
    rows = []
    for workload, items in workloads.items():
        ours_s, base_s = [], []
        for r in range(rounds):
            ours_db, base_db = client[f"aecs_bench_floor_ours_{r}"], client[f"aecs_bench_floor_base_{r}"]
            for db in (ours_db, base_db):
                client.drop_database(db.name)
                MessageStore(db, mailbox_id="bench").ensure_indexes()
            store = MessageStore(ours_db, mailbox_id="bench", transactions=transactions)
            ours_s.append(timed(lambda: store.store_many(items, batch_size=100)))  # noqa: B023
            final = {name: list(ours_db[name].find({})) for name in FINAL_COLLECTIONS}
            base_s.append(timed(lambda: insert_final(base_db, final)))  # noqa: B023
            for db in (ours_db, base_db):
                client.drop_database(db.name)
        ours, base = statistics.median(ours_s), statistics.median(base_s)
        rows.append(
            {
                "workload": workload,
                "messages": len(items),
                "threads": len(final["threads"]),
                "MB": round(sum(len(c["data"]) for c in final["aecs.chunks"]) / 1e6, 1),
                "transactions": transactions,
                "rounds": rounds,
                "store_many_s": ours,
                "insert_many_s": base,
                "ratio": base / ours,
                "ratios": [round(b / o, 2) for b, o in zip(base_s, ours_s, strict=True)],
            }
        )
        print("  floor", json.dumps(rows[-1]), flush=True)
    return rows


# --- scaling -----------------------------------------------------------------------------------


def fresh_slice(stream: Iterator[bytes], seen: set[str], size: int) -> tuple[list[bytes], list[MessageDocuments]]:
    """The next ``size`` messages of ``stream`` whose Message-ID is not in ``seen``, with their
    documents. Both sides of the scaling run get these: the corpus holds some messages twice,
    which ours would keep as variants and the raw-driver baseline cannot."""
    raws: list[bytes] = []
    prebuilt: list[MessageDocuments] = []
    while len(raws) < size and (generated := list(itertools.islice(stream, size - len(raws)))):
        for raw, docs in zip(*storable(generated), strict=True):
            if docs.message["_id"] not in seen:
                seen.add(docs.message["_id"])
                raws.append(raw)
                prebuilt.append(docs)
    return raws, prebuilt


def bench_scaling(client: MongoClient[Doc], total: int, slice_size: int, transactions: bool) -> list[Doc]:
    """``store_many`` of ``total`` distinct real messages into ONE mailbox, slice after slice, and beside it
    the raw driver inserting the same slices' final documents into another database: a cost that
    grows with the database shows as a falling rate, and the baseline tells ours from the
    server's. Slices are generated and prebuilt outside the timing."""
    ours_db, base_db = client["aecs_bench_scaling"], client["aecs_bench_scaling_base"]
    for db in (ours_db, base_db):
        client.drop_database(db.name)
        MessageStore(db, mailbox_id="bench").ensure_indexes()
    store = MessageStore(ours_db, mailbox_id="bench", transactions=transactions)
    source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
    stream = gen_mbox.messages(64, source=source)
    seen: set[str] = set()
    rows = []
    done = 0
    while done < total:
        raws, prebuilt = fresh_slice(stream, seen, min(slice_size, total - done))
        refused: list[int] = []
        started = time.perf_counter()
        results = store.store_many(raws, batch_size=100, on_error=lambda i, item, exc, out=refused: out.append(i))
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(0, len(prebuilt), 100):
            baseline_batch(base_db, prebuilt[i : i + 100], transactions=transactions)
        base_seconds = time.perf_counter() - started
        done += len(raws)
        rows.append(
            {
                "transactions": transactions,
                "upTo": done,
                "msgs_per_s": len(raws) / seconds,
                "MB_per_s": sum(map(len, raws)) / 1e6 / seconds,
                "stored": sum(r.inserted for r in results),
                "already": sum(not r.inserted for r in results),
                "refused": len(refused),
                "base_msgs_per_s": len(prebuilt) / base_seconds,
                "ratio": (base_seconds / len(prebuilt)) / (seconds / sum(r.inserted for r in results)),
                "peakRssMB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
        print("  scaling", json.dumps(rows[-1]), flush=True)
    stats = ours_db.command("dbStats")
    rows[-1]["dataSizeMB"] = stats.get("dataSize", 0) / 1e6
    rows[-1]["storageSizeMB"] = stats.get("storageSize", 0) / 1e6
    # a shared machine is noisy: compare the median of the first three slices with the last three
    third = max(1, min(3, len(rows) // 3))

    def trend(key: str) -> float:
        return statistics.median(r[key] for r in rows[-third:]) / statistics.median(r[key] for r in rows[:third])

    rows[-1]["last_vs_first"] = trend("msgs_per_s")
    rows[-1]["base_last_vs_first"] = trend("base_msgs_per_s")
    rows[-1]["median_ratio"] = statistics.median(r["ratio"] for r in rows)
    for db in (ours_db, base_db):
        client.drop_database(db.name)
    return rows


# --- reads -------------------------------------------------------------------------------------


def populate(db: Database[Doc], mailbox: str, count: int) -> None:
    """Fill a mailbox fast with the exact documents store() writes, summaries computed in one pass."""
    batch: list[MessageDocuments] = []
    threads: dict[str, list[Doc]] = {}
    for n in range(count):
        docs = build_documents(mail(n), mailbox_id=mailbox)
        batch.append(docs)
        threads.setdefault(docs.thread_key, []).append(docs.message)
        if len(batch) == 1000 or n == count - 1:
            db.bodies.insert_many([d.body for d in batch], ordered=False)
            db.messages.insert_many([d.message for d in batch], ordered=False)
            batch = []
    db.threads.insert_many([summary for m in threads.values() if (summary := thread_summary_from_messages(m))])


def bench_reads(client: MongoClient[Doc], sizes: list[int], rounds: int) -> list[Doc]:
    """Every paged read and search at each size, in one database: one mailbox per size (built
    once, raw inserts of the documents store() writes). Ours (bounded windows where the server
    reads a query's whole range) vs the plain query written by hand (what the store sent before:
    the index that provides the sort, hinted where the mailbox is the only equality, and a
    limit), timed once: on the embedded server a hinted query reads the whole index. Search: a
    word only the newest message holds and one only the oldest holds, ``limit=1``, once each
    (the second reads the whole mailbox)."""
    name = "aecs_bench_reads"
    db = client[name]
    MessageStore(db, mailbox_id="setup").ensure_indexes()
    for size in sizes:
        if db.messages.count_documents({"mailboxId": f"m{size}"}) == size:
            continue  # built by an earlier run in the same --data-dir
        db.messages.delete_many({"mailboxId": f"m{size}"})
        db.bodies.delete_many({"mailboxId": f"m{size}"})
        db.threads.delete_many({"mailboxId": f"m{size}"})
        started = time.perf_counter()
        populate(db, f"m{size}", size)
        print(f"  populated {size:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    rows: list[Doc] = []
    for size in sizes:
        rows += reads_at(db, size, rounds)
        print(table([r for r in rows if r["size"] == size], READ_COLUMNS), file=sys.stderr, flush=True)
    smallest = {r["read"]: r["ours_ms"] for r in rows if r["size"] == sizes[0]}
    for r in rows:
        r["vs_smallest"] = r["ours_ms"] / smallest[r["read"]]
    return rows


def reads_at(db: Database[Doc], size: int, rounds: int) -> list[Doc]:
    mailbox = f"m{size}"
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
READ_COLUMNS = ["size", "read", "ours_ms", "plain_ms", "ours/plain", "vs_smallest", "examined", "found", "complete"]


# --- reindex -----------------------------------------------------------------------------------


def bench_reindex(client: MongoClient[Doc], size: int, rounds: int) -> Doc:
    """reindex() of a consistent mailbox vs the floor of its work: reading every message and body."""
    name = f"aecs_bench_reindex_{size}"
    client.drop_database(name)
    db = client[name]
    store = MessageStore(db, mailbox_id="bench")
    store.ensure_indexes()
    populate(db, "bench", size)

    def floor() -> object:
        return list(db.messages.find({"mailboxId": "bench"})), list(db.bodies.find({"mailboxId": "bench"}))

    ours = median_time(store.reindex, rounds)
    hand = median_time(floor, rounds)
    client.drop_database(name)
    return {
        "size": size,
        "reindex_s": ours,
        "read_floor_s": hand,
        "ratio": ours / hand,
        "msgs_per_s": size / ours,
    }


# --- normalize ---------------------------------------------------------------------------------


def bench_normalize(rounds: int) -> Doc | None:
    corpus = ROOT.parent / "shared" / "corpus" / "eml"
    if not corpus.is_dir():
        return None
    import email
    import email.policy

    from aecs_mongo import normalize

    blobs = [p.read_bytes() for p in sorted(corpus.glob("*.eml"))]
    total = sum(len(b) for b in blobs)

    def stdlib() -> None:
        for b in blobs:
            msg = email.message_from_bytes(b, policy=email.policy.compat32)
            for part in msg.walk():
                part.get_payload(decode=True)

    def ours() -> None:
        for b in blobs:
            normalize(b, processed_at="2026-11-30T00:00:00Z")

    t_std = median_time(stdlib, rounds)
    t_ours = median_time(ours, rounds)
    result: Doc = {
        "messages": len(blobs),
        "megabytes": total / 1e6,
        "ours_msgs_per_s": len(blobs) / t_ours,
        "ours_mb_per_s": total / 1e6 / t_ours,
        "stdlib_msgs_per_s": len(blobs) / t_std,
        "ratio_vs_stdlib": t_std / t_ours,
    }
    # the JavaScript reference point: postal-mime (npm devDependency) on the same files
    node = shutil.which("node")
    if node and (ROOT / "node_modules" / "postal-mime").is_dir():
        out = subprocess.run(
            [node, str(ROOT / "scripts" / "bench_postal_mime.mjs"), str(corpus), str(rounds)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        js = json.loads(out)
        result["postal_mime_msgs_per_s"] = js["msgsPerS"]
        result["ratio_vs_postal_mime"] = result["ours_msgs_per_s"] / js["msgsPerS"]
    return result


# --- imap ------------------------------------------------------------------------------------------


def _bare_imap_fetch(server: Any, context: Any, batch_size: int) -> tuple[int, int]:
    """A bare client that stores nothing: login, EXAMINE, the same listing and the same UID
    batches ``imap.sync`` sends, every body read and dropped. Returns (messages, bytes)."""
    import imaplib

    from aecs_mongo.pure.imap_records import plan_batches, uid_ranges

    conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context, timeout=60)
    conn.login(server.user, server.password)
    conn.select("INBOX", readonly=True)
    _, data = conn.uid("FETCH", "1:*", "(UID RFC822.SIZE)")
    sizes = []
    for line in data:
        if isinstance(line, bytes):
            fields = line.replace(b"(", b" ").replace(b")", b" ").split()
            sizes.append((int(fields[fields.index(b"UID") + 1]), int(fields[fields.index(b"RFC822.SIZE") + 1])))
    count = total = 0
    for batch in plan_batches(sizes, batch_size, 32 * 1024 * 1024):
        _, data = conn.uid("FETCH", uid_ranges(batch), "(UID BODY.PEEK[])")
        for item in data:
            if isinstance(item, tuple):
                count += 1
                total += len(item[1])
    conn.logout()
    return count, total


def bench_imap(client: MongoClient[Doc], sizes: list[int], rounds: int, transactions: bool) -> list[Doc]:
    """``imap.sync`` of real mail from a local Dovecot (IMAPS, its own process) into a fresh
    mailbox, vs (1) a bare imaplib client fetching the same UIDs in the same batches and storing
    nothing, (2) ``store_many`` of the very bytes the server serves, from memory (the store's
    floor). Medians of ``rounds``; ratios = other / ours (1.0: ours costs nothing more)."""
    import ssl

    sys.path.insert(0, str(ROOT))
    from aecs_mongo.mail import imap
    from tests.helpers.dovecot import DovecotServer, dovecot_binary

    binary = dovecot_binary()
    if binary is None or not Path("/usr/lib/dovecot/imap").exists():
        print("imap: skipped (needs dovecot-core and dovecot-imapd)")
        return []
    rows = []
    for size in sizes:
        server = DovecotServer(binary, imap=True)
        try:
            server.start()
            for raw in real_mail(size, offset=size):
                server.deliver_to("INBOX", raw)
            context = ssl.create_default_context(cafile=str(server.cert_path))
            count, total = _bare_imap_fetch(server, context, 100)  # warm: Dovecot indexes the maildir
            served = _served(server, context)
            bare = statistics.median(
                timed(functools.partial(_bare_imap_fetch, server, context, 100)) for _ in range(rounds)
            )
            ours_t, floor_t = [], []
            report = None
            for r in range(rounds):
                db = client[f"bench_imap_{size}_{r}"]
                client.drop_database(db.name)
                store = MessageStore(db, mailbox_id="bench", transactions=transactions)
                store.ensure_indexes()
                start = time.perf_counter()
                report = imap.sync(store, "127.0.0.1", server.user, server.password, port=server.imaps_port,
                                   ssl_context=context, batch_size=100)  # fmt: skip
                ours_t.append(time.perf_counter() - start)
                client.drop_database(db.name)
                floor_db = client[f"bench_imap_floor_{size}_{r}"]
                client.drop_database(floor_db.name)
                floor = MessageStore(floor_db, mailbox_id="bench", transactions=transactions)
                floor.ensure_indexes()
                floor_t.append(timed(functools.partial(floor.store_many, served, batch_size=100)))
                client.drop_database(floor_db.name)
            assert report is not None and report.new + report.present == count, report
            ours, floor_s = statistics.median(ours_t), statistics.median(floor_t)
            rows.append(
                {
                    "messages": count,
                    "MB": round(total / 1e6, 1),
                    "transactions": transactions,
                    "bare_fetch_s": bare,
                    "store_many_s": floor_s,
                    "sync_s": ours,
                    "sync_msgs_per_s": round(count / ours),
                    "bare_ratio": bare / ours,
                    "store_ratio": floor_s / ours,
                }
            )
        finally:
            server.cleanup()
    return rows


def _peak_rss_mb(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Peak RSS (MB) and exit code of ``argv``, measured in a wrapper process of its own."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "code = subprocess.run(sys.argv[1:]).returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *argv], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[-2]) / 1024, int(out[-1])


def bench_imap_memory(uri: str, count: int, size_mb: int) -> list[Doc]:
    """Peak RSS of ``aecs-mongo imap`` syncing ``count`` messages of ``size_mb`` MB each (a
    random attachment) from a local Dovecot, next to ``aecs-mongo ingest`` of the same files."""
    import base64
    import tempfile

    sys.path.insert(0, str(ROOT))
    from tests.helpers.dovecot import DovecotServer, dovecot_binary

    binary = dovecot_binary()
    if binary is None or not Path("/usr/lib/dovecot/imap").exists():
        return []
    server = DovecotServer(binary, imap=True)
    work = Path(tempfile.mkdtemp(prefix="aecs-imap-mem-"))
    try:
        server.start()
        for n in range(count):
            payload = base64.encodebytes(os.urandom(size_mb * 1024 * 1024 * 3 // 4)).replace(b"\n", b"\r\n")
            raw = (
                b"Message-ID: <big-%d@bench.example>\r\nFrom: a@example.com\r\nSubject: big %d\r\n"
                b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n'
                b"Content-Type: text/plain\r\n\r\nattached\r\n--b\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Transfer-Encoding: base64\r\n\r\n" % (n, n) + payload + b"--b--\r\n"
            )
            server.deliver_to("INBOX", raw)
            (work / f"big-{n}.eml").write_bytes(raw)
        env = {**os.environ, "AECS_BENCH_IMAP_PASSWORD": server.password}
        cli = [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--json"]
        imap_rss, imap_code = _peak_rss_mb(
            [*cli, "--db", "bench_imap_mem", "imap", "127.0.0.1", "--port", str(server.imaps_port),
             "--user", server.user, "--password-env", "AECS_BENCH_IMAP_PASSWORD", "--ca-file", str(server.cert_path)],
            env,
        )  # fmt: skip
        ingest_rss, ingest_code = _peak_rss_mb([*cli, "--db", "bench_ingest_mem", "ingest", str(work)], env)
        client: MongoClient[Doc] = MongoClient(uri)
        for name in ("bench_imap_mem", "bench_ingest_mem"):
            client.drop_database(name)
        client.close()
        total = sum(p.stat().st_size for p in work.iterdir()) / 1e6
        return [
            {"command": "imap", "messages": count, "MB": round(total), "peakRssMB": imap_rss, "exitCode": imap_code},
            {
                "command": "ingest",
                "messages": count,
                "MB": round(total),
                "peakRssMB": ingest_rss,
                "exitCode": ingest_code,
            },
        ]
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def _served(server: Any, context: Any) -> list[bytes]:
    """Every INBOX message as the server serves it (CRLF line ends), in UID order."""
    import imaplib

    conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context, timeout=60)
    conn.login(server.user, server.password)
    conn.select("INBOX", readonly=True)
    _, data = conn.uid("FETCH", "1:*", "(BODY.PEEK[])")
    conn.logout()
    return [item[1] for item in data if isinstance(item, tuple)]


# --- lifecycle: export, expire, erase ---------------------------------------------------------------


class StatementCounter(monitoring.CommandListener):
    """Counts the statements a client sends (every command: finds, getMores, deletes, updates)."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def bench_counts(db: Database[Doc]) -> list[int]:
    """The bench mailbox's messages, bodies, files and chunks."""
    from aecs_mongo.pure.lifecycle import mailbox_blob_root

    root = mailbox_blob_root("bench")
    blob_range = {"$gte": root, "$lt": root[:-1] + "0"}
    return [
        db.messages.count_documents({"mailboxId": "bench"}),
        db.bodies.count_documents({"_id": {"$gte": "bench:", "$lt": "bench;"}}),
        db["aecs.files"].count_documents({"filename": blob_range}),
        db["aecs.chunks"].count_documents({"files_id": blob_range}),
    ]


def bench_lifecycle(uri: str, size: int, sample: int) -> Doc:
    """One mailbox of ``size`` distinct real messages (every tier) beside a neighbour of 2,000:
    export (Maildir, all variants) vs the read floor (one cursor over the mailbox's chunks), then
    ``delete()`` of ``sample`` messages one by one (the only way before ``expire``/``erase``),
    ``expire`` at the median date and ``erase_mailbox`` of the rest, each with its statements."""
    import tempfile

    from aecs_mongo.mail.sinks import open_writer
    from aecs_mongo.pure.lifecycle import mailbox_blob_root

    counter = StatementCounter()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[counter])
    db = client["aecs_bench_lifecycle"]
    client.drop_database(db.name)
    store = MessageStore(db, mailbox_id="bench")
    store.ensure_indexes()
    source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
    stream = gen_mbox.messages(64, source=source)
    seen: set[str] = set()
    started = time.perf_counter()
    for done in range(0, size, 10_000):
        raws, _ = fresh_slice(stream, seen, min(10_000, size - done))
        store.store_many(raws, batch_size=100, on_error=lambda i, item, exc: None)
    ingest_s = time.perf_counter() - started
    neighbour = MessageStore(db, mailbox_id="neighbour")
    neighbour.store_many(fresh_slice(stream, seen, 2000)[0], on_error=lambda i, item, exc: None)
    messages = db.messages.count_documents({"mailboxId": "bench"})
    row: Doc = {"size": messages, "ingest_s": ingest_s}

    with tempfile.TemporaryDirectory() as tmp:
        exported: dict[str, float] = {}
        for fmt in ("mbox", "maildir"):
            started = time.perf_counter()
            with open_writer(fmt, Path(tmp) / fmt) as writer:
                for copy in store.export_raw(variants=True):
                    writer.write(copy.data, ts=copy.ts, sender=copy.sender)
            exported[fmt] = time.perf_counter() - started
    root = mailbox_blob_root("bench")
    started = time.perf_counter()
    floor_bytes = sum(
        len(c["data"])
        for c in db["aecs.chunks"].find({"files_id": {"$gte": root, "$lt": root[:-1] + "0"}}, {"data": 1})
    )
    floor_s = time.perf_counter() - started
    row.update(
        export_MB=writer.bytes_written / 1e6,
        mbox_MB_per_s=writer.bytes_written / 1e6 / exported["mbox"],
        maildir_MB_per_s=writer.bytes_written / 1e6 / exported["maildir"],
        floor_MB_per_s=floor_bytes / 1e6 / floor_s,
        mbox_vs_floor=floor_s / floor_bytes * writer.bytes_written / exported["mbox"],
    )

    youngest = [m["messageId"] for m in db.messages.find({"mailboxId": "bench"}).sort("ts", -1).limit(sample)]
    counter.count = 0
    started = time.perf_counter()
    for mid in youngest:
        store.delete(mid)
    per_delete = (time.perf_counter() - started) / len(youngest)
    row.update(delete_one_ms=per_delete * 1000, delete_one_statements=counter.count / len(youngest))

    ts = sorted(m["ts"] for m in db.messages.find({"mailboxId": "bench"}, {"ts": 1}))
    median = dt.datetime.fromtimestamp(ts[len(ts) // 2], dt.UTC)
    counter.count = 0
    started = time.perf_counter()
    expired = store.expire(median)
    expire_s = time.perf_counter() - started
    row.update(
        expired=expired.messages,
        expire_s=expire_s,
        expire_statements=counter.count,
        expire_vs_delete=per_delete * expired.messages / expire_s,
    )
    neighbour_state = [db[c].count_documents({}) for c in ("messages", "bodies", "aecs.files", "aecs.chunks")]
    neighbour_state = [n - d for n, d in zip(neighbour_state, bench_counts(db), strict=True)]
    counter.count = 0
    started = time.perf_counter()
    erased = store.erase_mailbox()
    erase_s = time.perf_counter() - started
    row.update(
        erased=erased.messages,
        erased_documents=erased.total,
        erase_s=erase_s,
        erase_statements=counter.count,
        erase_vs_delete=per_delete * erased.messages / erase_s,
        neighbour_intact=[db[c].count_documents({}) for c in ("messages", "bodies", "aecs.files", "aecs.chunks")]
        == neighbour_state,
    )
    client.drop_database(db.name)
    client.close()
    print("  lifecycle", json.dumps(row), flush=True)
    return row


def bench_export(uri: str, size: int, rounds: int) -> list[Doc]:
    """Export alone beside its floor, in one run: a mailbox of ``size`` distinct real messages
    (every tier: the corpus repeated with fresh Message-IDs) and a second copy (a variant) of
    every 50th that has a Message-ID of its own, exported with every variant as mbox and as
    Maildir (fsync per file) and read alone (``export_raw``, nothing written), and the read
    floor (one cursor over the mailbox's chunks: the bytes alone, unordered, unchecked), one of
    each per round after a warm-up round, the output made and removed outside the timing; MB/s
    medians, the statements of one export, and the load average before and after (the machine
    may be shared). ``--data-dir`` keeps the mailbox for the next run."""
    import tempfile

    from aecs_mongo.mail.sinks import open_writer
    from aecs_mongo.pure.lifecycle import mailbox_blob_root

    counter = StatementCounter()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[counter])
    db = client[f"aecs_bench_export_{size}"]
    store = MessageStore(db, mailbox_id="bench")
    if db.messages.count_documents({"mailboxId": "bench"}) != size:
        client.drop_database(db.name)
        store.ensure_indexes()
        source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
        stream = gen_mbox.messages(64, source=source)
        seen: set[str] = set()
        started = time.perf_counter()
        for done in range(0, size, 1000):
            raws, docs = fresh_slice(stream, seen, min(1000, size - done))
            store.store_many(raws, batch_size=100, on_error=lambda i, item, exc: None)
            # other bytes under the same Message-ID (a synthetic one would change with the bytes)
            named = [
                raw for raw, d in zip(raws, docs, strict=True) if not d.message["messageId"].startswith("generated-")
            ]
            store.store_many([raw + b"\r\n" for raw in named[::50]], on_error=lambda i, item, exc: None)
        print(f"  export: stored {size:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    root = mailbox_blob_root("bench")

    def floor(out: Path) -> int:
        chunks = db["aecs.chunks"].find({"files_id": {"$gte": root, "$lt": root[:-1] + "0"}}, {"data": 1})
        return sum(len(c["data"]) for c in chunks)

    def export(fmt: str) -> Callable[[Path], int]:
        def run(out: Path) -> int:
            with open_writer(fmt, out / fmt) as writer:  # closing it syncs the file(s) to disk
                for copy in store.export_raw(variants=True):
                    writer.write(copy.data, ts=copy.ts, sender=copy.sender)
            return writer.bytes_written

        return run

    def read_only(out: Path) -> int:  # the store's part alone: every copy read, none written
        return sum(len(copy.data) for copy in store.export_raw(variants=True))

    runs = {"mbox": export("mbox"), "maildir": export("maildir"), "export_raw": read_only, "floor": floor}
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    sent: dict[str, int] = {}
    volume: dict[str, int] = {}
    for round_ in range(rounds + 1):
        for name, run in runs.items():
            with tempfile.TemporaryDirectory() as tmp:  # made and removed outside the timing
                counter.count = 0
                started = time.perf_counter()
                volume[name] = run(Path(tmp))
                seconds = time.perf_counter() - started
            sent[name] = counter.count
            if round_:  # the first round warms the server's cache
                rates[name].append(volume[name] / 1e6 / seconds)
    load_after = os.getloadavg()
    copies = db.messages.count_documents({"mailboxId": "bench"}) + sum(
        len(m.get("variantHashes") or ()) for m in db.messages.find({"mailboxId": "bench"}, {"variantHashes": 1})
    )
    floor_rate = statistics.median(rates["floor"])
    rows = [
        {
            "read": name,
            "messages": size,
            "copies": None if name == "floor" else copies,
            "MB": volume[name] / 1e6,
            "MB_per_s": statistics.median(rates[name]),
            "min": min(rates[name]),
            "max": max(rates[name]),
            "vs_floor": statistics.median(rates[name]) / floor_rate,
            "statements": sent[name],
            "rounds": rounds,
            "load_before": " ".join(f"{x:.1f}" for x in load_before),
            "load_after": " ".join(f"{x:.1f}" for x in load_after),
        }
        for name in runs
    ]
    client.close()
    return rows


# --- memory ------------------------------------------------------------------------------------


def bench_memory(uri: str, sizes_mb: list[float]) -> list[Doc]:
    """Peak RSS of ``aecs-mongo ingest`` on generated mboxes (scripts/measure_ingest_rss.py)."""
    rows = []
    for size in sizes_mb:
        out = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "measure_ingest_rss.py"), "--size-mb", str(size), "--uri", uri],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out))
    return rows


def bench_cli(uri: str, size_mb: float) -> list[Doc]:
    """``aecs-mongo ingest`` of a generated mbox of real mail (``size_mb``) end to end: messages/s
    per 10% of the file, read from the CLI's own progress line (its stderr is a pseudo-terminal),
    and the CLI's peak RSS (``wait4``). The server is not the CLI's child, so it is not counted."""
    import pty
    import re
    import tempfile
    import uuid

    source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
    rows: list[Doc] = []
    with tempfile.TemporaryDirectory() as tmp:
        mbox = Path(tmp) / "bench.mbox"
        count = gen_mbox.write_mbox(mbox, size_mb, source=source)
        db_name = f"aecs_bench_cli_{uuid.uuid4().hex[:8]}"
        leader, follower = pty.openpty()
        argv = [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--db", db_name, "ingest", str(mbox)]
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower, cwd=ROOT)
        os.close(follower)
        progress = re.compile(rb"(\d+)% \| (\d+)/?\d* messages")
        marks: list[tuple[float, int, int]] = [(started, 0, 0)]  # (time, percent, messages)
        pending = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            pending = (pending + data)[-4096:]
            now = time.monotonic()
            for match in progress.finditer(pending):
                percent, done = int(match.group(1)), int(match.group(2))
                if percent >= (marks[-1][1] // 10 + 1) * 10:
                    marks.append((now, percent, done))
            pending = pending[pending.rfind(b"\r") :] if b"\r" in pending else pending
        _, status, usage = os.wait4(proc.pid, 0)
        os.close(leader)
        wall = time.monotonic() - started
        MongoClient(uri).drop_database(db_name)
    for (t0, _, m0), (t1, p1, m1) in itertools.pairwise(marks):
        rows.append({"uptoPercent": p1, "messages": m1, "msgs_per_s": (m1 - m0) / max(t1 - t0, 1e-9)})
    rows.append(
        {
            "uptoPercent": "all",
            "messages": count,
            "msgs_per_s": count / wall,
            "mboxMB": size_mb,
            "wallSeconds": round(wall, 1),
            "peakRssMB": usage.ru_maxrss / 1024,
            "exitCode": os.waitstatus_to_exitcode(status),
        }
    )
    return rows


def bench_cli_short(size_mb: float, commands: int = 20) -> list[Doc]:
    """``commands`` short commands in a row (inbox, thread, show, search) on the embedded default
    (no ``--uri``), after an ``ingest`` of a generated mbox of real mail (``size_mb``): each as
    the command line ran it before the shared server (``--keep-server 0``: start and stop a
    server every command) and with it (the default: the first command starts it, the rest
    connect). Wall time per command, as a user sees it (the interpreter's start included)."""
    import tempfile

    source = gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "AECS_KEEP_SERVER")}
    rows: list[Doc] = []
    with tempfile.TemporaryDirectory() as tmp:
        mbox = Path(tmp) / "bench.mbox"
        count = gen_mbox.write_mbox(mbox, size_mb, source=source)
        data_dir = Path(tmp) / "aecs-data"

        def cli(*argv: str, keep: str = "0") -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", keep, *argv]
            return subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=tmp)

        cli("ingest", str(mbox), "--no-progress")
        page = [json.loads(line) for line in cli("--json", "inbox", "--limit", "10").stdout.splitlines()]
        ids = [m["messageId"] for m in page if "messageId" in m]  # JSON lines: the messages, then next_cursor
        sequence = [
            [
                ("inbox", "--limit", "5"),
                ("thread", ids[i % len(ids)]),
                ("show", ids[i % len(ids)]),
                ("search", "meeting"),
            ][i % 4]
            for i in range(commands)
        ]
        modes: list[tuple[str, str, dict[str, str]]] = [
            ("before: --keep-server 0", "0", {}),
            ("after: shared server (default 5m)", "5m", {}),
        ]
        baseline = os.environ.get("AECS_BENCH_CLI_BASELINE")
        if baseline:  # another version's source tree (git archive REV | tar -x -C DIR): same run, same data
            modes.append((f"baseline {Path(baseline).name}: shared server", "5m", {"PYTHONPATH": baseline}))
        for mode, keep, extra in modes:
            times = []
            for argv in sequence:
                started = time.monotonic()
                if extra:
                    subprocess.run(
                        [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", keep, *argv],
                        env={**env, **extra},
                        capture_output=True,
                        check=True,
                        cwd=baseline,
                    )
                else:
                    cli(*argv, keep=keep)
                times.append(time.monotonic() - started)
            rows.append(
                {
                    "mode": mode,
                    "messages": count,
                    "commands": len(times),
                    "totalSeconds": round(sum(times), 2),
                    "firstSeconds": round(times[0], 2),
                    "medianSeconds": round(statistics.median(times), 2),
                    "medianAfterFirst": round(statistics.median(times[1:]), 2),
                    "maxAfterFirst": round(max(times[1:]), 2),
                    # median of each kind, the first command (which starts the server) left out
                    **{
                        kind: round(
                            statistics.median(t for a, t in zip(sequence[1:], times[1:], strict=True) if a[0] == kind),
                            2,
                        )
                        for kind in ("inbox", "thread", "show", "search")
                    },
                }
            )
        cli("server", "stop", keep="5m")  # the benchmark stops what it started
        # the floor, in the same run: starting the interpreter and importing the command line
        floor = []
        for _ in range(5):
            started = time.monotonic()
            cli("--help")
            floor.append(time.monotonic() - started)
        rows.append(
            {"mode": "floor: aecs-mongo --help", "commands": 5, "medianAfterFirst": round(statistics.median(floor), 2)}
        )
    rows.append(
        {
            "mode": "ratio before/after (total)",
            "totalSeconds": round(rows[0]["totalSeconds"] / rows[1]["totalSeconds"], 1),
        }
    )
    return rows


# --- vectors ----------------------------------------------------------------------------------------


def vector_rows(kind: str, count: int, dims: int, seed: int) -> Any:
    """``count`` float32 vectors: ``random`` (Gaussian) or ``clustered`` (200 centres, noise 0.5)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((count, dims), dtype=np.float32)
    centres = rng.standard_normal((200, dims), dtype=np.float32)
    return centres[rng.integers(0, 200, count)] + 0.5 * rng.standard_normal((count, dims), dtype=np.float32)


def bench_vectors(client: MongoClient[Doc], size: int, dims: int, rounds: int, pure_rounds: int) -> list[Doc]:
    """Storage, write speed, latency and recall@10 of the exact vector search at one mailbox size."""
    import bson
    import numpy as np

    db = client[f"bench_vectors_{size}"]
    client.drop_database(db.name)
    populate(db, "owner", size)
    store = MessageStore(db, mailbox_id="owner")
    store.ensure_indexes()
    ids = [f"m{n}@bench.example" for n in range(size)]
    rows: list[Doc] = []
    for kind in ("clustered", "random"):
        data = vector_rows(kind, size, dims, seed=size + len(kind))
        db.vectors.delete_many({})  # each kind is written into an empty vector store
        db.vector_blocks.delete_many({})
        written = 0.0
        for start in range(0, size, 10_000):
            chunk = {ids[n]: data[n].tolist() for n in range(start, min(start + 10_000, size))}
            written += timed(lambda chunk=chunk: store.set_embeddings(chunk))
        sample = db.vectors.find_one({"_id": doc_id(store.mailbox_id, message_key(ids[0]))})
        assert sample is not None
        legacy = {k: sample[k] for k in ("_id", "mailboxId", "messageKey", "threadKey")}
        legacy["embedding"] = [float(v) for v in data[0]]
        float32_only = {k: v for k, v in sample.items() if not k.startswith("int8")}
        blocks = [b for b in db.vector_blocks.find({"mailboxId": "owner"}) if "ids" in b]  # not the counter
        in_blocks = sum(b["count"] for b in blocks)
        block_share = sum(len(bson.encode(b)) for b in blocks) / in_blocks if in_blocks else 0.0
        unsealed = db.vectors.count_documents(vectors.unsealed_selector("owner"))
        stored_bytes = len(bson.encode(float32_only)) + block_share if "block" in sample else len(bson.encode(sample))
        rng = np.random.default_rng(size)
        near = [data[i] + 0.1 * rng.standard_normal(dims, dtype=np.float32) for i in rng.integers(0, size, rounds)]
        queries = near if kind == "clustered" else list(rng.standard_normal((rounds, dims), dtype=np.float32))
        unit = data.astype(np.float64)
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        ours_ms, hand_ms, recall = [], [], []
        for q in queries:
            query = q.tolist()
            start = time.perf_counter()
            hits = store.semantic_search(query, limit=10)
            ours_ms.append((time.perf_counter() - start) * 1000)
            assert hits.complete and hits.examined == size
            start = time.perf_counter()
            hand = hand_exact_search(db, "owner", q, 10)
            hand_ms.append((time.perf_counter() - start) * 1000)
            truth = np.argsort(-(unit @ (q.astype(np.float64) / np.linalg.norm(q))), kind="stable")[:10]
            expected = {ids[i] for i in truth}
            recall.append(len(expected & {h["messageId"] for h in hits}) / 10)
            assert len(hand) == 10
        pure_ms = []
        os.environ[vectors.NUMPY_SWITCH] = "0"
        try:
            for q in queries[:pure_rounds]:
                pure_ms.append(timed(lambda q=q: store.semantic_search(q.tolist(), limit=10)) * 1000)
        finally:
            del os.environ[vectors.NUMPY_SWITCH]
        rows.append(
            {
                "vectors": size,
                "dims": dims,
                "kind": kind,
                "arrayBytes": len(bson.encode(legacy)),
                "float32Bytes": len(bson.encode(float32_only)),
                "storedBytes": round(stored_bytes),
                "arrayOverStored": len(bson.encode(legacy)) / stored_bytes,
                "firstPassDocs": len(blocks) + unsealed,
                "writes_per_s": size / written,
                "ours_ms": statistics.median(ours_ms),
                "pure_python_ms": statistics.median(pure_ms) if pure_ms else None,
                "hand_one_pass_ms": statistics.median(hand_ms),
                "ratio": statistics.median(ours_ms) / statistics.median(hand_ms),
                "recall_at_10": statistics.fmean(recall),
                "queries": len(queries),
            }
        )
    client.drop_database(db.name)
    return rows


def hand_exact_search(db: Database[Doc], mailbox: str, query: Any, k: int) -> list[str]:
    """The one-pass exact search by hand: PyMongo reads every float32 vector, numpy ranks them."""
    import numpy as np

    ids, blobs = [], []
    for doc in db.vectors.find({"_id": {"$gte": mailbox + ":", "$lt": mailbox + ";"}}, {"embedding": 1}):
        ids.append(doc["_id"])
        blobs.append(bytes(doc["embedding"])[2:])
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    scores = (matrix @ query.astype(np.float64)) / np.linalg.norm(matrix, axis=1)
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


# --- main --------------------------------------------------------------------------------------


def table(rows: list[Doc], columns: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    widths = [max(len(c), *(len(fmt(r.get(c))) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def run(uri: str, args: argparse.Namespace, server: str) -> Doc:
    client: MongoClient[Doc] = MongoClient(uri)
    report: Doc = {"server": server, "machine": platform.platform(), "python": platform.python_version()}
    if "ingest" in args.sections:
        txn_capable = bool(client.admin.command("hello").get("setName"))
        report["ingest"] = [bench_ingest(client, args.ingest_messages, args.ingest_rounds, False)]
        if txn_capable:
            report["ingest"].append(bench_ingest(client, args.ingest_messages, args.ingest_rounds, True))
        print("\n== ingest (ratio = raw-driver time / ours; 1.0 = driver speed)")
        print(
            table(
                report["ingest"],
                [
                    "messages",
                    "transactions",
                    "store_s",
                    "baseline_one_s",
                    "store_ratio",
                    "store_many_s",
                    "baseline_many_s",
                    "store_many_ratio",
                    "store_many_msgs_per_s",
                ],
            )
        )
    if "ingest" in args.sections and args.ingest_tool_sizes:
        import bench_ingest as tools

        rounds = args.ingest_tool_rounds
        print(f"\n== ingest beside notmuch and mu: one Maildir of real mail, messages/s (median of {rounds})")
        report["ingest_tools"] = tools.bench_mail_tools(args.ingest_tool_sizes, rounds)
        print(table(report["ingest_tools"], tools.COLUMNS))
    if "durability" in args.sections:
        txn_capable = bool(client.admin.command("hello").get("setName"))
        report["durability"] = bench_durability(client, args.durability_sizes, args.ingest_rounds, txn_capable)
        print("\n== durability: store_many durable (the default) vs durable=False (price = durable / fast time)")
        print(
            table(
                report["durability"],
                [
                    "messages",
                    "MB",
                    "transactions",
                    "durable_s",
                    "fast_s",
                    "durable_msgs_per_s",
                    "fast_msgs_per_s",
                    "price",
                ],
            )
        )
    if "floor" in args.sections:
        txn_capable = bool(client.admin.command("hello").get("setName"))
        report["floor"] = bench_floor(client, args.floor_messages, args.ingest_rounds, txn_capable)
        print("\n== floor: store_many vs the raw driver's insert_many of the same final documents (ratio = raw / ours)")
        print(
            table(
                report["floor"],
                [
                    "workload",
                    "messages",
                    "threads",
                    "MB",
                    "transactions",
                    "store_many_s",
                    "insert_many_s",
                    "ratio",
                    "ratios",
                ],
            )
        )
    if "reads" in args.sections:
        report["reads"] = bench_reads(client, args.sizes, args.rounds)
        print("\n== reads (median ms; ours / the plain query; vs_smallest = ours / ours at the smallest size)")
        print(table(report["reads"], READ_COLUMNS))
    if "reindex" in args.sections:
        report["reindex"] = [bench_reindex(client, size, args.ingest_rounds) for size in args.reindex_sizes]
        print("\n== reindex (median s; ratio = reindex / reading every message and body once)")
        print(table(report["reindex"], ["size", "reindex_s", "read_floor_s", "ratio", "msgs_per_s"]))
    if "scaling" in args.sections:
        txn_capable = bool(client.admin.command("hello").get("setName"))
        print(
            f"\n== scaling: {args.scaling_messages} distinct real messages, one mailbox, {args.scaling_slice} a slice"
        )
        report["scaling"] = bench_scaling(client, args.scaling_messages, args.scaling_slice, txn_capable)
        print(
            table(
                report["scaling"],
                [
                    "transactions",
                    "upTo",
                    "msgs_per_s",
                    "MB_per_s",
                    "stored",
                    "already",
                    "refused",
                    "base_msgs_per_s",
                    "ratio",
                    "peakRssMB",
                ],
            )
        )
        last = report["scaling"][-1]
        print(
            f"last slices / first slices (medians of 3): ours {last['last_vs_first']:.2f}, raw driver "
            f"{last['base_last_vs_first']:.2f}; median ratio to the raw driver {last['median_ratio']:.2f}; "
            f"database: {last['dataSizeMB']:.0f} MB data, "
            f"{last['storageSizeMB']:.0f} MB on disk"
        )
    if "lifecycle" in args.sections:
        report["lifecycle"] = [bench_lifecycle(uri, size, args.delete_sample) for size in args.lifecycle_sizes]
        print("\n== lifecycle: export, expire at the median date, erase the rest (ratio = one-by-one delete() / ours)")
        print(
            table(
                report["lifecycle"],
                [
                    "size",
                    "export_MB",
                    "mbox_MB_per_s",
                    "maildir_MB_per_s",
                    "floor_MB_per_s",
                    "mbox_vs_floor",
                    "delete_one_ms",
                    "expired",
                    "expire_s",
                    "expire_statements",
                    "expire_vs_delete",
                    "erased",
                    "erased_documents",
                    "erase_s",
                    "erase_statements",
                    "erase_vs_delete",
                ],
            )
        )
    if "export" in args.sections:
        report["export"] = bench_export(uri, args.export_messages, args.export_rounds)
        print(
            f"\n== export of {args.export_messages:,} real messages with every variant: MB/s, medians of"
            f" {args.export_rounds} rounds (floor: one cursor over the mailbox's chunks, all its blobs)"
        )
        print(
            table(
                report["export"],
                [
                    "read",
                    "copies",
                    "MB",
                    "MB_per_s",
                    "min",
                    "max",
                    "vs_floor",
                    "statements",
                    "load_before",
                    "load_after",
                ],
            )
        )
    if "cli" in args.sections:
        report["cliShort"] = bench_cli_short(args.cli_short_mb)
        print(
            f"\n== CLI: 20 short commands (inbox, thread, show, search) on the embedded default, "
            f"{args.cli_short_mb:.0f} MB of real mail ingested; wall seconds per command"
        )
        print(
            table(
                report["cliShort"],
                [
                    "mode",
                    "messages",
                    "commands",
                    "totalSeconds",
                    "firstSeconds",
                    "medianAfterFirst",
                    "maxAfterFirst",
                    "inbox",
                    "thread",
                    "show",
                    "search",
                ],
            )
        )
    if "cli" in args.sections and args.cli_mb > 0:
        report["cli"] = bench_cli(uri, args.cli_mb)
        print(
            f"\n== CLI: aecs-mongo ingest of a {args.cli_mb:.0f} MB mbox of real mail (messages/s per 10% of the file)"
        )
        print(table(report["cli"], ["uptoPercent", "messages", "msgs_per_s", "wallSeconds", "peakRssMB", "exitCode"]))
    if "memory" in args.sections:
        report["memory"] = bench_memory(uri, args.memory_mb)
        print("\n== memory (peak RSS of the ingest process; it must not grow with the mbox)")
        print(table(report["memory"], ["mboxMB", "stored", "failed", "wallSeconds", "peakRssMB", "baselinePeakRssMB"]))
    if "search" in args.sections:
        import bench_search

        report["search"] = bench_search.run(
            client, uri, args.search_sizes, args.search_rounds, args.search_ingest, args.search_scan_max
        )
        print("\n== search: the local index beside notmuch (median ms; cli: the whole command; cli_start: --help)")
        print(table([report["search"]["ingest"]], ["messages", "without_msgs_per_s", "with_msgs_per_s", "ratio"]))
        columns = ["size", "query", "hits", "ours_ms", "cli_ms", "cli_start_ms", "notmuch_hits", "notmuch_ms"]
        print(table(report["search"]["rows"], [*columns, "scan_ms", "raw_MB", "index_MB", "ingest_s", "notmuch_new_s"]))
    if "imap" in args.sections:
        txn_capable = bool(client.admin.command("hello").get("setName"))
        report["imap"] = bench_imap(client, args.imap_messages, args.ingest_rounds, txn_capable)
        print("\n== imap: sync of real mail from a local Dovecot (ratios = other / ours; medians)")
        print(
            table(
                report["imap"],
                [
                    "messages",
                    "MB",
                    "transactions",
                    "bare_fetch_s",
                    "store_many_s",
                    "sync_s",
                    "sync_msgs_per_s",
                    "bare_ratio",
                    "store_ratio",
                ],
            )
        )
    if "imap" in args.sections:
        report["imap_memory"] = bench_imap_memory(uri, 5, 20)
        print("\n== imap memory: peak RSS syncing 5 messages of 20 MB, next to ingest of the same files")
        print(table(report["imap_memory"], ["command", "messages", "MB", "peakRssMB", "exitCode"]))
    if "normalize" in args.sections:
        report["normalize"] = bench_normalize(args.rounds // 3 or 1)
        if report["normalize"]:
            print("\n== normalize (corpus)")
            print(table([report["normalize"]], list(report["normalize"])))
    if "vectors" in args.sections:
        report["vectors"] = []
        for size in args.vector_sizes:
            report["vectors"] += bench_vectors(client, size, args.vector_dims, args.vector_rounds, args.pure_rounds)
        print("\n== vectors (bytes per stored vector; median ms of semantic_search limit 10; ratio = ours / hand)")
        print(
            table(
                report["vectors"],
                [
                    "vectors",
                    "dims",
                    "kind",
                    "arrayBytes",
                    "float32Bytes",
                    "storedBytes",
                    "arrayOverStored",
                    "firstPassDocs",
                    "writes_per_s",
                    "ours_ms",
                    "pure_python_ms",
                    "hand_one_pass_ms",
                    "ratio",
                    "recall_at_10",
                ],
            )
        )
    if "agents" in args.sections:
        import bench_agents

        report["agents"] = bench_agents.bench_agents(client, uri, args.agents_size, args.rounds, args.agents_only)
        print(f"\n== agents: warm tool calls at {args.agents_size:,} real messages (median ms; shared view)")
        print(table(report["agents"], bench_agents.COLUMNS))
    client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("aecs_mongo").setLevel(logging.ERROR)  # rule-4 threading warnings are expected here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", default=os.environ.get("MONGODB_URI"))
    parser.add_argument("--mode", choices=["standalone", "rs"], default="standalone", help="embedded server mode")
    parser.add_argument("--sizes", default="1000,10000,100000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per read (median)")
    parser.add_argument("--ingest-messages", type=int, default=2000)
    parser.add_argument("--ingest-rounds", type=int, default=3)
    parser.add_argument(
        "--ingest-tool-sizes",
        default="1000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="ingest: Maildir sizes for aecs-mongo ingest beside notmuch new and mu index ('' skips it)",
    )
    parser.add_argument("--ingest-tool-rounds", type=int, default=3, help="ingest: rounds of each tool (median)")
    parser.add_argument("--floor-messages", type=int, default=1500, help="floor: messages per workload")
    parser.add_argument(
        "--sections",
        default="ingest,durability,floor,reads,reindex,normalize,memory,scaling,lifecycle,cli",
        type=lambda s: s.split(","),
    )
    parser.add_argument("--durability-sizes", default="1000,10000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--reindex-sizes", default="1000,10000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument(
        "--memory-mb",
        default="20,200",
        type=lambda s: [float(x) for x in s.split(",")],
        help="mbox sizes for the memory section (200 MB takes tens of minutes on the test server)",
    )
    parser.add_argument("--scaling-messages", type=int, default=100_000, help="scaling: messages into one mailbox")
    parser.add_argument("--scaling-slice", type=int, default=10_000, help="scaling: messages per timed slice")
    parser.add_argument(
        "--cli-mb", type=float, default=1024, help="cli: size of the generated mbox of real mail (0: skip that part)"
    )
    parser.add_argument(
        "--cli-short-mb", type=float, default=20, help="cli: mbox of real mail ingested before the 20 short commands"
    )
    parser.add_argument(
        "--imap-messages",
        default="500,2000",
        type=lambda s: [int(x) for x in s.split(",")],
        help="imap: folder sizes to sync from a local Dovecot (needs dovecot-imapd)",
    )
    parser.add_argument("--vector-sizes", default="10000,100000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--vector-dims", type=int, default=768)
    parser.add_argument("--vector-rounds", type=int, default=5, help="vectors: queries per kind and size")
    parser.add_argument("--pure-rounds", type=int, default=1, help="vectors: of those, run in pure Python too")
    parser.add_argument(
        "--lifecycle-sizes",
        default="10000,30000,100000",
        type=lambda s: [int(x) for x in s.split(",")],
        help="lifecycle: mailbox sizes (each is ingested first: 100k takes several minutes)",
    )
    parser.add_argument("--export-messages", type=int, default=3000, help="export: real messages in the mailbox")
    parser.add_argument("--export-rounds", type=int, default=5, help="export: timed rounds (median)")
    parser.add_argument("--delete-sample", type=int, default=200, help="lifecycle: delete() calls timed one by one")
    parser.add_argument("--search-sizes", default="1000,10000,100000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--search-rounds", type=int, default=7, help="search: rounds per query (median)")
    parser.add_argument("--search-ingest", type=int, default=2000, help="search: messages per ingest round")
    parser.add_argument("--search-scan-max", type=int, default=10_000, help="search: the scan up to this size")
    parser.add_argument("--agents-size", type=int, default=10_000, help="agents: real messages in the mailbox")
    parser.add_argument("--agents-only", default="", help="agents: only the calls whose label contains this")
    parser.add_argument("--json", default="bench-results.json", help="where to write the JSON report")
    parser.add_argument(
        "--corpus", type=Path, default=gen_mbox.CORPUS, help=f"the real-mail corpus (default: {gen_mbox.CORPUS})"
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="the embedded server's data directory, kept (reads: mailboxes built there are reused)",
    )
    args = parser.parse_args(argv)
    gen_mbox.CORPUS = args.corpus
    if args.uri:
        report = run(args.uri, args, "MONGODB_URI")
    else:
        with EmbeddedServer(args.data_dir, standalone=args.mode == "standalone") as server:
            report = run(server.uri, args, f"embedded SecantusDB ({args.mode})")
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
