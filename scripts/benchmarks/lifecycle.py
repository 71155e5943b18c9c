"""The ``lifecycle`` section: a mailbox of 10k, 30k and 100k distinct real messages (beside a
neighbour of 2k): export as mbox and as Maildir (fsync per file) with every variant, MB/s vs the
read floor (one cursor over the mailbox's chunks: the bytes alone, unordered, unchecked),
``expire`` at the median date and ``erase_mailbox`` of the rest: time, statements, and the ratio
to ``delete()`` one by one (timed on a sample, the only way before them).
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient
from pymongo.database import Database

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, StatementCounter, corpus_source, fresh_slice, table_of


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

    from aecs_mongo.mail.sinks import open_writer
    from aecs_mongo.pure.lifecycle import mailbox_blob_root

    counter = StatementCounter()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[counter])
    db = client["aecs_bench_lifecycle"]
    client.drop_database(db.name)
    store = MessageStore(db, mailbox_id="bench")
    store.ensure_indexes()
    source = corpus_source()
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


NAME = "lifecycle"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--lifecycle-sizes",
        default="10000,30000,100000",
        type=lambda s: [int(x) for x in s.split(",")],
        help="mailbox sizes (each is ingested first: 100k takes several minutes)",
    )
    parser.add_argument("--delete-sample", type=int, default=200, help="delete() calls timed one by one")


def run(ctx: Context) -> Doc:
    rows = [bench_lifecycle(ctx.uri, size, ctx.args.delete_sample) for size in ctx.args.lifecycle_sizes]
    table_of(
        "lifecycle: export, expire at the median date, erase the rest (ratio = one-by-one delete() / ours)",
        rows,
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
    return {"lifecycle": rows}
