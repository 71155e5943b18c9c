"""The ``reindex`` section: ``reindex()`` of a consistent mailbox (1k and 10k messages) vs the
floor of its work, reading every message and body document once with PyMongo; ratio = ours /
floor.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, median_time, populate, table_of


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


NAME = "reindex"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--reindex-sizes",
        default="1000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="mailbox sizes",
    )


def run(ctx: Context) -> Doc:
    rows = [bench_reindex(ctx.client, size, ctx.args.ingest_rounds) for size in ctx.args.reindex_sizes]
    table_of(
        "reindex (median s; ratio = reindex / reading every message and body once)",
        rows,
        ["size", "reindex_s", "read_floor_s", "ratio", "msgs_per_s"],
    )
    return {"reindex": rows}
