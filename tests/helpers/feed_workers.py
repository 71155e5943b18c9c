"""Child processes of the feed tests: a consumer and an embedding worker, killed and restarted.

``python -m tests.helpers.feed_workers consume URI DB MAILBOX CONSUMER OUT``: follow the mailbox from
the beginning, appending each message id to OUT (flushed and fsynced before the next item is
asked for, which acknowledges it). ``... embed URI DB MAILBOX CONSUMER LOG BATCH PAUSE``: run
``embed_new``; the embedding function appends every text it gets to LOG, then pauses PAUSE s.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.synchronous.workers import embed_new


def text_vector(text: str) -> list[float]:
    """A deterministic stand-in for an embedding model: letter counts of a few letters, plus one."""
    return [float(text.count(c)) for c in "abcdefghij0123456789"] + [1.0]


def append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def consume(uri: str, db_name: str, mailbox: str, consumer: str, out: Path) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    store = MessageStore(client[db_name], mailbox_id=mailbox)
    with store.watch(consumer, since="beginning", max_await_ms=200) as feed:
        for item in feed:
            append_line(out, item.message_id)


def embed(uri: str, db_name: str, mailbox: str, consumer: str, log: Path, batch: int, pause: float) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    store = MessageStore(client[db_name], mailbox_id=mailbox)

    def fn(texts: list[str]) -> list[list[float]]:
        for text in texts:
            append_line(log, text)
        time.sleep(pause)
        return [text_vector(t) for t in texts]

    done = embed_new(store, consumer, fn, batch_size=batch, max_await_ms=200)
    print(f"embedded {done}", flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "consume":
        consume(args[0], args[1], args[2], args[3], Path(args[4]))
    else:
        embed(args[0], args[1], args[2], args[3], Path(args[4]), int(args[5]), float(args[6]))
