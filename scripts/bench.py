#!/usr/bin/env python3
"""Benchmark aecs-mongo against the raw driver doing the same work on the same server, in one run.

Sections (each prints a table; everything also goes to a JSON file):

- ingest: ``store`` one by one and ``store_many`` of real mail as raw bytes (the corpus with
  fresh Message-IDs: raw.eml, HTML and attachments are all written, and ours parses too) vs
  PyMongo inserting the very documents and blobs our code produces (prebuilt, so the baseline
  is the I/O floor). Ratio = baseline time / our time (1.0 = driver speed; target >= 0.8).
- floor: ``store_many`` (batches of 100) vs the raw driver's one unordered ``insert_many`` per
  collection of the very documents ours left (GridFS included): what our statements cost over
  the plain insert of their result. Synthetic AECS-1 objects and real mail; ratio = raw / ours.
- reads: at each mailbox size (default 1k, 10k, 50k messages, with two other mailboxes of the
  same size around it): every core read vs the same query written by hand with PyMongo, median
  latency of several rounds, ratio ours/hand (target <= 1.2), and from ``explain``: the index, and
  whether that index provides the sort (its keys after the equality prefix, in the same or the
  reverse order). Documents examined are reported as context: the SecantusDB test server sorts
  in memory even when the index provides the order; on a mongod (``MONGODB_URI``) the count is
  the real one and should not exceed returned + 1.
- reindex: ``reindex()`` of a consistent mailbox (1k and 10k messages) vs the floor of its
  work, reading every message and body document once with PyMongo; ratio = ours / floor.
- scaling: ``store_many`` of 100,000 distinct real messages into one mailbox in slices of 10,000:
  messages/s per slice (flat: no cost grows with the database), peak RSS, final database size.
- cli: ``aecs-mongo ingest`` of a generated 1 GB mbox of real mail: messages/s per 10% of the
  file (from its progress line) and its peak RSS.
- memory: peak RSS of ``aecs-mongo ingest`` on generated mboxes of 20 and 200 MB.
- normalize: messages/s and MB/s over ``../shared/corpus/eml`` vs the bare stdlib parse (the
  floor), and vs postal-mime under node (the JavaScript parser of the AECS-1 reference).

Usage: ``python scripts/bench.py [--sizes 1000,10000,50000] [--rounds 15] [--json out.json]``.
Uses ``MONGODB_URI`` if set, else starts the embedded server (``--mode standalone|rs``).
"""

from __future__ import annotations

import argparse
import contextlib
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

from pymongo import MongoClient, UpdateOne
from pymongo.database import Database

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gen_mbox  # noqa: E402

from aecs_mongo import MessageStore, explain  # noqa: E402
from aecs_mongo.blobs import chunk_documents, file_document  # noqa: E402
from aecs_mongo.documents import (  # noqa: E402
    MessageDocuments,
    build_documents,
    thread_summary_from_messages,
    thread_update,
)
from aecs_mongo.embedded import EmbeddedServer  # noqa: E402
from aecs_mongo.errors import AecsMongoError  # noqa: E402
from aecs_mongo.keys import address_key, subject_key, thread_key  # noqa: E402
from aecs_mongo.queries import LIST_PROJECTION, THREAD_CONTEXT_PROJECTION  # noqa: E402

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
            docs = builder._build(raw, None, None)
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


def plan_facts(
    db: Database[Doc], collection: str, selector: Doc, sort: list[tuple[str, int]], limit: int, hint: str | None
) -> Doc:
    command: Doc = {"find": collection, "filter": selector, "sort": dict(sort), "limit": limit}
    if hint:
        command["hint"] = hint
    return explain.plan_facts(db.command({"explain": command, "verbosity": "executionStats"}), selector, sort)


def bench_reads(client: MongoClient[Doc], size: int, rounds: int) -> list[Doc]:
    name = f"aecs_bench_reads_{size}"
    client.drop_database(name)
    db = client[name]
    store = MessageStore(db, mailbox_id="bench")
    store.ensure_indexes()
    for mailbox in ("before", "bench", "after"):
        populate(db, mailbox, size)
    rows = []
    thread_id = "root-7@bench.example"
    tkey = thread_key(thread_id)
    page19 = None
    cursor = None
    for _ in range(19):
        page = store.list_messages(cursor=cursor, limit=50)
        cursor = page.next_cursor
        page19 = page.messages[-1] if page.messages else None
    last = db.messages.find_one({"mailboxId": "bench", "messageId": page19["messageId"]}) if page19 else None
    mid = f"m{min(size - 1, 1000)}@bench.example"
    subject = "Re: Topic 7"
    peer = "peer3@x.example"

    def hand_context() -> object:
        rows = list(
            db.messages.find({"mailboxId": "bench", "threadKey": tkey}, THREAD_CONTEXT_PROJECTION)
            .sort([("ts", -1), ("messageKey", -1)])
            .limit(20)
        )
        return rows, db.messages.count_documents({"mailboxId": "bench", "threadKey": tkey})

    def keyset(selector: Doc) -> Doc:
        assert last is not None
        return {
            "$and": [
                selector,
                {"$or": [{"ts": {"$lt": last["ts"]}}, {"ts": last["ts"], "messageKey": {"$lt": last["messageKey"]}}]},
            ]
        }

    desc = [("ts", -1), ("messageKey", -1)]
    asc = [("ts", 1), ("messageKey", 1)]
    cases: list[tuple[str, Callable[[], object], Callable[[], object], str, Doc, list[tuple[str, int]], int]] = [
        (
            "thread_context",
            lambda: store.thread_context(thread_id, limit=20),
            hand_context,
            "messages",
            {"mailboxId": "bench", "threadKey": tkey},
            desc,
            20,
        ),
        (
            "list_messages p1",
            lambda: store.list_messages(limit=50),
            lambda: list(db.messages.find({"mailboxId": "bench"}, LIST_PROJECTION).sort(desc).hint(INBOX).limit(51)),
            "messages",
            {"mailboxId": "bench"},
            desc,
            51,
        ),
        (
            "list_messages p20",
            lambda: store.list_messages(cursor=cursor, limit=50),
            lambda: list(
                db.messages.find(keyset({"mailboxId": "bench"}), LIST_PROJECTION).sort(desc).hint(INBOX).limit(51)
            ),
            "messages",
            keyset({"mailboxId": "bench"}),
            desc,
            51,
        ),
        (
            "list_threads",
            lambda: store.list_threads(limit=50),
            lambda: list(db.threads.find({"mailboxId": "bench"}).sort([("lastTs", -1), ("_id", -1)]).limit(51)),
            "threads",
            {"mailboxId": "bench"},
            [("lastTs", -1), ("_id", -1)],
            51,
        ),
        (
            "with_participant",
            lambda: store.with_participant(peer, limit=50),
            lambda: list(
                db.messages.find({"mailboxId": "bench", "participants": address_key(peer)}, LIST_PROJECTION)
                .sort(desc)
                .limit(51)
            ),
            "messages",
            {"mailboxId": "bench", "participants": address_key(peer)},
            desc,
            51,
        ),
        (
            "replies_to",
            lambda: store.replies_to(mid),
            lambda: (
                list(db.messages.find({"mailboxId": "bench", "references": mid}, LIST_PROJECTION)),
                list(db.messages.find({"mailboxId": "bench", "inReplyTo": mid}, LIST_PROJECTION)),
            ),
            "messages",
            {"mailboxId": "bench", "inReplyTo": mid},
            asc,
            0,
        ),
        (
            "find subject",
            lambda: store.find("Subject", subject),
            lambda: list(
                db.messages.find({"mailboxId": "bench", "subjectKey": subject_key(subject)}, {"messageId": 1}).sort(asc)
            ),
            "messages",
            {"mailboxId": "bench", "subjectKey": subject_key(subject)},
            asc,
            0,
        ),
    ]
    for label, ours, hand, coll, selector, sort, limit in cases:
        t_ours = median_time(ours, rounds)
        t_hand = median_time(hand, rounds)
        facts = plan_facts(db, coll, selector, sort, limit, INBOX if label.startswith("list_messages") else None)
        rows.append(
            {
                "size": size,
                "read": label,
                "ours_ms": t_ours * 1000,
                "hand_ms": t_hand * 1000,
                "ratio": t_ours / t_hand,
                **facts,
            }
        )
    client.drop_database(name)
    return rows


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
        report["reads"] = []
        for size in args.sizes:
            report["reads"] += bench_reads(client, size, args.rounds)
        print("\n== reads (median ms; ratio = ours / hand-written PyMongo)")
        print(
            table(
                report["reads"],
                [
                    "size",
                    "read",
                    "ours_ms",
                    "hand_ms",
                    "ratio",
                    "index",
                    "sortProvidedByIndex",
                    "inMemorySortStage",
                    "docsExamined",
                    "returned",
                ],
            )
        )
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
    if "cli" in args.sections:
        report["cli"] = bench_cli(uri, args.cli_mb)
        print(
            f"\n== CLI: aecs-mongo ingest of a {args.cli_mb:.0f} MB mbox of real mail (messages/s per 10% of the file)"
        )
        print(table(report["cli"], ["uptoPercent", "messages", "msgs_per_s", "wallSeconds", "peakRssMB", "exitCode"]))
    if "memory" in args.sections:
        report["memory"] = bench_memory(uri, args.memory_mb)
        print("\n== memory (peak RSS of the ingest process; it must not grow with the mbox)")
        print(table(report["memory"], ["mboxMB", "stored", "failed", "wallSeconds", "peakRssMB", "baselinePeakRssMB"]))
    if "normalize" in args.sections:
        report["normalize"] = bench_normalize(args.rounds // 3 or 1)
        if report["normalize"]:
            print("\n== normalize (corpus)")
            print(table([report["normalize"]], list(report["normalize"])))
    client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("aecs_mongo").setLevel(logging.ERROR)  # rule-4 threading warnings are expected here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", default=os.environ.get("MONGODB_URI"))
    parser.add_argument("--mode", choices=["standalone", "rs"], default="standalone", help="embedded server mode")
    parser.add_argument("--sizes", default="1000,10000,50000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per read (median)")
    parser.add_argument("--ingest-messages", type=int, default=2000)
    parser.add_argument("--ingest-rounds", type=int, default=3)
    parser.add_argument("--floor-messages", type=int, default=1500, help="floor: messages per workload")
    parser.add_argument(
        "--sections", default="ingest,floor,reads,reindex,normalize,memory,scaling,cli", type=lambda s: s.split(",")
    )
    parser.add_argument("--reindex-sizes", default="1000,10000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument(
        "--memory-mb",
        default="20,200",
        type=lambda s: [float(x) for x in s.split(",")],
        help="mbox sizes for the memory section (200 MB takes tens of minutes on the test server)",
    )
    parser.add_argument("--scaling-messages", type=int, default=100_000, help="scaling: messages into one mailbox")
    parser.add_argument("--scaling-slice", type=int, default=10_000, help="scaling: messages per timed slice")
    parser.add_argument("--cli-mb", type=float, default=1024, help="cli: size of the generated mbox of real mail")
    parser.add_argument("--json", default="bench-results.json", help="where to write the JSON report")
    args = parser.parse_args(argv)
    if args.uri:
        report = run(args.uri, args, "MONGODB_URI")
    else:
        with EmbeddedServer(standalone=args.mode == "standalone") as server:
            report = run(server.uri, args, f"embedded SecantusDB ({args.mode})")
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
