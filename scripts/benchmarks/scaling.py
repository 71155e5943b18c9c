"""The ``scaling`` section: ``store_many`` of 100,000 distinct real messages into one mailbox in
slices of 10,000: messages/s per slice (flat: no cost grows with the database), beside the raw
driver inserting the same slices, peak RSS, final database size.
"""

from __future__ import annotations

import json
import resource
import statistics
import time
from typing import Any

import gen_mbox
from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, baseline_batch, corpus_source, fresh_slice, table


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
    source = corpus_source()
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


NAME = "scaling"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument("--scaling-messages", type=int, default=100_000, help="messages into one mailbox")
    parser.add_argument("--scaling-slice", type=int, default=10_000, help="messages per timed slice")


def run(ctx: Context) -> Doc:
    args = ctx.args
    print(f"\n== scaling: {args.scaling_messages} distinct real messages, one mailbox, {args.scaling_slice} a slice")
    rows = bench_scaling(ctx.client, args.scaling_messages, args.scaling_slice, ctx.transactions)
    print(
        table(
            rows,
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
    last = rows[-1]
    print(
        f"last slices / first slices (medians of 3): ours {last['last_vs_first']:.2f}, raw driver "
        f"{last['base_last_vs_first']:.2f}; median ratio to the raw driver {last['median_ratio']:.2f}; "
        f"database: {last['dataSizeMB']:.0f} MB data, {last['storageSizeMB']:.0f} MB on disk"
    )
    return {"scaling": rows}
