"""The ``workers`` section (not in the default list; ``--mode rs``: it needs change streams):
the workers' paths, in one run.

- feed: messages/s delivered by ``store.watch`` from the beginning (backfill) and from the
  stream, acknowledging every item (``auto_ack``) and once per batch of 100 (``next_batch``);
  the floors are reading the same messages with one PyMongo ``find``, and draining the same
  change stream with PyMongo.
- embed: ``embed_new`` messages/s with an embedding function that costs nothing, so what is
  measured is the feed plus ``set_embedding``.
- exact search: median ``semantic_search`` latency over N stored vectors of 384 dimensions;
  the floor is reading those vectors with one PyMongo ``find``.

"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from aecs_mongo import MessageStore
from aecs_mongo.pure.feed import stream_pipeline
from aecs_mongo.synchronous.workers import Feed, embed_new
from benchmarks.common import Context, Doc
from tests.helpers.factories import email


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.0f} msg/s ({count} in {seconds:.2f} s)"


def drain(feed: Feed, auto_ack: bool, count: int) -> int:
    """Consume ``count`` items as a worker would: one by one (the feed acks each) or in batches of
    100 acked together."""
    seen = 0
    if auto_ack:
        for _ in feed:
            seen += 1
            if seen == count:
                break
    else:
        while seen < count:
            seen += len(feed.next_batch(100))
            feed.ack()
    return seen


def bench_feed(db: Any, count: int) -> None:
    store = MessageStore(db, mailbox_id="feed")
    store.ensure_indexes()
    store.store_many([email(i, thread=f"t{i % 50}@example.com") for i in range(count)], batch_size=500)
    started = time.perf_counter()
    rows = list(db.messages.find({"mailboxId": "feed"}, {"messageId": 1, "forAI": 1}))
    print(f"floor, one find:              {rate(len(rows), time.perf_counter() - started)}")
    for label, auto in (("backfill, ack every item:   ", True), ("backfill, ack per 100:      ", False)):
        started = time.perf_counter()
        with store.watch(f"bench-{auto}", since="beginning", auto_ack=auto, max_await_ms=100) as feed:
            seen = drain(feed, auto, count)
        print(f"{label}{rate(seen, time.perf_counter() - started)}")
    # the stream: consumers that start now (an open stream), then new mail arrives
    pipeline = stream_pipeline("feed")
    followers = {auto: store.watch(f"stream-{auto}", auto_ack=auto, max_await_ms=100) for auto in (False, True)}
    for follower in followers.values():
        assert follower.next_batch(1) == []  # started: the stream is open, its position kept
    with db.messages.watch(pipeline) as raw:
        token = raw.resume_token
    store.store_many([email(100_000 + i, thread="s@example.com") for i in range(count)], batch_size=500)
    started = time.perf_counter()
    seen = 0
    with db.messages.watch(pipeline, resume_after=token, max_await_time_ms=100) as raw:
        while seen < count:
            seen += raw.try_next() is not None
    print(f"floor, PyMongo change stream: {rate(seen, time.perf_counter() - started)}")
    for label, auto in (("stream, ack per 100:        ", False), ("stream, ack every item:     ", True)):
        started = time.perf_counter()
        with followers[auto] as feed:
            seen = drain(feed, auto, count)
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
        store.set_embeddings({f"m{i}@example.com": [rng.uniform(-1, 1) for _ in range(384)] for i in range(size)})
        started = time.perf_counter()
        rows = list(db.vectors.find({"mailboxId": name}, {"embedding": 1}))
        print(f"floor, reading {len(rows)} vectors: {(time.perf_counter() - started) * 1000:7.1f} ms")
        query = [rng.uniform(-1, 1) for _ in range(384)]
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            store.semantic_search(query, limit=10)
            times.append(time.perf_counter() - started)
        print(f"exact search, {size:6d} x 384:  median {statistics.median(times) * 1000:7.1f} ms")


NAME = "workers"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--workers-messages", type=int, default=2000, help="messages fed")
    parser.add_argument(
        "--workers-vectors", default="1000,5000", type=lambda s: [int(x) for x in s.split(",")], help="vectors searched"
    )


def run(ctx: Context) -> Doc:
    print("\n== workers: the feed, embed_new and the exact vector search")
    db = ctx.client["aecs_bench_workers"]
    ctx.client.drop_database(db.name)
    try:
        bench_feed(db, ctx.args.workers_messages)
        bench_exact(db, ctx.args.workers_vectors)
    finally:
        ctx.client.drop_database(db.name)
    return {}
