#!/usr/bin/env python3
"""Measure the workers' paths on the embedded replica set (or ``MONGODB_URI``), in one run.

- feed: messages/s delivered by ``store.watch`` from the beginning (backfill) and from the
  stream, acknowledging every item (``auto_ack``) and once per batch of 100 (``next_batch``);
  the floor is reading the same messages with one PyMongo ``find``.
- embed: ``embed_new`` messages/s with an embedding function that costs nothing, so what is
  measured is the feed plus ``set_embedding``.
- exact search: median ``semantic_search`` latency over N stored vectors of 384 dimensions.

Usage: ``python scripts/bench_workers.py [--messages 2000] [--vectors 1000,5000]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aecs_mongo import MessageStore  # noqa: E402
from aecs_mongo.embedded import EmbeddedServer  # noqa: E402
from aecs_mongo.workers import embed_new  # noqa: E402
from tests.factories import email  # noqa: E402


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.0f} msg/s ({count} in {seconds:.2f} s)"


def bench_feed(db: Any, count: int) -> None:
    store = MessageStore(db, mailbox_id="feed")
    store.ensure_indexes()
    store.store_many([email(i, thread=f"t{i % 50}@example.com") for i in range(count)], batch_size=500)
    started = time.perf_counter()
    rows = list(db.messages.find({"mailboxId": "feed"}, {"messageId": 1, "forAI": 1}))
    print(f"floor, one find:              {rate(len(rows), time.perf_counter() - started)}")
    for label, auto in (("backfill, ack every item:   ", True), ("backfill, ack per 100:      ", False)):
        started = time.perf_counter()
        seen = 0
        with store.watch(f"bench-{auto}", since="beginning", auto_ack=auto, max_await_ms=100) as feed:
            if auto:
                for _ in feed:
                    seen += 1
                    if seen == count:
                        break
            else:
                while seen < count:
                    seen += len(feed.next_batch(100))
                    feed.ack()
        print(f"{label}{rate(seen, time.perf_counter() - started)}")
    # the stream: new messages after the consumers caught up
    more = [email(100_000 + i, thread="s@example.com") for i in range(count)]
    store.store_many(more, batch_size=500)
    for label, auto in (("stream, ack every item:     ", True), ("stream, ack per 100:        ", False)):
        started = time.perf_counter()
        seen = 0
        with store.watch(f"bench-{auto}", auto_ack=auto, max_await_ms=100) as feed:
            if auto:
                for _ in feed:
                    seen += 1
                    if seen == count:
                        break
            else:
                while seen < count:
                    seen += len(feed.next_batch(100))
                    feed.ack()
        print(f"{label}{rate(seen, time.perf_counter() - started)}")
    started = time.perf_counter()
    done = embed_new(store, "bench-embed", lambda texts: [[1.0, float(len(t))] for t in texts], batch_size=100)
    print(f"embed_new, free function:     {rate(done, time.perf_counter() - started)}")


def bench_exact(db: Any, sizes: list[int], rounds: int = 5) -> None:
    rng = random.Random(7)
    for size in sizes:
        name = f"vectors{size}"
        store = MessageStore(db, mailbox_id=name, scan_limit=size)
        store.ensure_indexes()
        store.store_many([email(i) for i in range(size)], batch_size=500)
        for i in range(size):
            store.set_embedding(f"m{i}@example.com", [rng.uniform(-1, 1) for _ in range(384)])
        query = [rng.uniform(-1, 1) for _ in range(384)]
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            store.semantic_search(query, limit=10)
            times.append(time.perf_counter() - started)
        print(f"exact search, {size:6d} x 384:  median {statistics.median(times) * 1000:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--vectors", default="1000,5000")
    args = parser.parse_args()
    logging.getLogger("aecs_mongo").setLevel(logging.ERROR)  # the exact engine's one warning
    server = None
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        server = EmbeddedServer()
        uri = server.start()
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    db = client["aecs_bench_workers"]
    client.drop_database(db.name)
    try:
        bench_feed(db, args.messages)
        bench_exact(db, [int(s) for s in args.vectors.split(",")])
    finally:
        client.drop_database(db.name)
        client.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
