"""The ``durability`` section: ``store_many`` of real mail (1k and 10k messages, batches of 100)
by a durable store (the default: the write that completes each batch waits for the journal) and
by one made with ``durable=False``, alternating, on the run's server mode: messages/s of each and
the price of durability (durable time / fast time). Run it once per ``--mode``.
"""

from __future__ import annotations

import statistics
from typing import Any

from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, real_mail, table_of, timed


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


NAME = "durability"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--durability-sizes",
        default="1000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="messages per run",
    )


def run(ctx: Context) -> Doc:
    rows = bench_durability(ctx.client, ctx.args.durability_sizes, ctx.args.ingest_rounds, ctx.transactions)
    table_of(
        "durability: store_many durable (the default) vs durable=False (price = durable / fast time)",
        rows,
        ["messages", "MB", "transactions", "durable_s", "fast_s", "durable_msgs_per_s", "fast_msgs_per_s", "price"],
    )
    return {"durability": rows}
