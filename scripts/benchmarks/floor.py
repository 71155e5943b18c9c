"""The ``floor`` section: ``store_many`` (batches of 100) vs the raw driver's one unordered
``insert_many`` per collection of the very documents ours left (GridFS included): what our
statements cost over the plain insert of their result. Synthetic AECS-1 objects and real mail;
ratio = raw / ours.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, mail, real_mail, storable, table_of, timed

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


NAME = "floor"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument("--floor-messages", type=int, default=1500, help="messages per workload")


def run(ctx: Context) -> Doc:
    rows = bench_floor(ctx.client, ctx.args.floor_messages, ctx.args.ingest_rounds, ctx.transactions)
    table_of(
        "floor: store_many vs the raw driver's insert_many of the same final documents (ratio = raw / ours)",
        rows,
        ["workload", "messages", "threads", "MB", "transactions", "store_many_s", "insert_many_s", "ratio", "ratios"],
    )
    return {"floor": rows}
