"""The ``export`` section (not in the default list; quicker than lifecycle): ``--export-messages``
(3,000) distinct real messages and a variant of every 50th, exported as mbox and as Maildir
(fsync per file) with every variant, and read alone (``export_raw``, no writer), beside the read
floor, round after round in one run (``--export-rounds``, medians), with the statements and the
load average.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, StatementCounter, corpus_source, fresh_slice, table_of


def bench_export(uri: str, size: int, rounds: int) -> list[Doc]:
    """Export alone beside its floor, in one run: a mailbox of ``size`` distinct real messages
    (every tier: the corpus repeated with fresh Message-IDs) and a second copy (a variant) of
    every 50th that has a Message-ID of its own, exported with every variant as mbox and as
    Maildir (fsync per file) and read alone (``export_raw``, nothing written), and the read
    floor (one cursor over the mailbox's chunks: the bytes alone, unordered, unchecked), one of
    each per round after a warm-up round, the output made and removed outside the timing; MB/s
    medians, the statements of one export, and the load average before and after (the machine
    may be shared). ``--data-dir`` keeps the mailbox for the next run."""

    from aecs_mongo.mail.sinks import open_writer
    from aecs_mongo.pure.lifecycle import mailbox_blob_root

    counter = StatementCounter()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[counter])
    db = client[f"aecs_bench_export_{size}"]
    store = MessageStore(db, mailbox_id="bench")
    if db.messages.count_documents({"mailboxId": "bench"}) != size:
        client.drop_database(db.name)
        store.ensure_indexes()
        source = corpus_source()
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


NAME = "export"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--export-messages", type=int, default=3000, help="real messages in the mailbox")
    parser.add_argument("--export-rounds", type=int, default=5, help="timed rounds (median)")


def run(ctx: Context) -> Doc:
    args = ctx.args
    rows = bench_export(ctx.uri, args.export_messages, args.export_rounds)
    table_of(
        f"export of {args.export_messages:,} real messages with every variant: MB/s, medians of"
        f" {args.export_rounds} rounds (floor: one cursor over the mailbox's chunks, all its blobs)",
        rows,
        ["read", "copies", "MB", "MB_per_s", "min", "max", "vs_floor", "statements", "load_before", "load_after"],
    )
    return {"export": rows}
