"""The worker of tests/test_server_kill.py: a queue consumer that the database server dies under.

``python -m tests.helpers.server_kill_workers JOB URI DB ACKS INPUT...`` runs one job against the server
at URI, at least once: whatever raises a database error is delivered again (after a short
pause) until it returns, as a queue would redeliver an unacknowledged message. Each time a unit
of work returns, the worker appends its acknowledgement to ACKS as one JSON line and fsyncs the
file: what is in ACKS is what the store said was done. Jobs:

- ``store``: INPUT is a file listing raw message paths; batches of ``BATCH`` through
  ``store_many``, then the batch's vectors through ``set_embeddings``; one line per batch.
- ``expire``: INPUT is the cut-off (epoch seconds); one line with the report's counts.
- ``erase``: one line with the report's counts.
- ``delete``: INPUT is a file of Message-IDs, one ``delete`` each; one line per id.

With ``$AECS_TEST_BLOBS_DIR`` set, the blobs go to a file store there (``blobs_for``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from aecs_mongo import MessageStore

BATCH = 50
MAILBOX = "killed"
T = TypeVar("T")


def vector_for(message_id: str, dims: int = 8) -> list[float]:
    """A deterministic vector per message (the same in the killed and the clean run)."""
    digest = hashlib.sha256(message_id.encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:dims]]


def blobs_for(db_name: str) -> str | None:
    """The blob store of a database: a directory under ``$AECS_TEST_BLOBS_DIR`` (one per
    database) when the test sets it, else GridFS."""
    root = os.environ.get("AECS_TEST_BLOBS_DIR")
    return f"file://{root}/{db_name}" if root else None


def until_done(action: Callable[[], T], retries: list[str]) -> T:
    """``action()`` until it returns: a database error (the server is gone, or came back in the
    middle of the work) is a re-delivery of the same work."""
    while True:
        try:
            return action()
        except PyMongoError as exc:
            retries.append(type(exc).__name__)
            time.sleep(0.2)


def acknowledge(acks: Any, record: dict[str, Any]) -> None:
    acks.write(json.dumps(record) + "\n")
    acks.flush()
    os.fsync(acks.fileno())


def main(argv: list[str]) -> int:
    job, uri, db_name, acks_path, *inputs = argv
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=3000, connectTimeoutMS=2000)
    store = MessageStore(client[db_name], mailbox_id=MAILBOX, blobs=blobs_for(db_name))
    retries: list[str] = []
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    with open(acks_path, "a", encoding="utf-8") as acks:
        if job == "store":
            paths = Path(inputs[0]).read_text(encoding="utf-8").split("\n")
            raws = [Path(p).read_bytes() for p in paths if p]
            for start in range(0, len(raws), BATCH):
                batch = raws[start : start + BATCH]
                results = until_done(lambda batch=batch: store.store_many(batch, batch_size=BATCH), retries)
                ids = [r.message_id for r in results]
                until_done(lambda ids=ids: store.set_embeddings({m: vector_for(m) for m in ids}), retries)
                acknowledge(acks, {"batch": start // BATCH, "ids": ids})
        elif job == "expire":
            before = dt.datetime.fromtimestamp(int(inputs[0]), dt.UTC)
            report = until_done(lambda: store.expire(before), retries)
            acknowledge(acks, {"expired": report.messages})
        elif job == "erase":
            erased = until_done(store.erase_mailbox, retries)
            acknowledge(acks, {"erased": erased.messages, "remaining": erased.remaining})
        elif job == "delete":
            for mid in Path(inputs[0]).read_text(encoding="utf-8").split():
                until_done(lambda mid=mid: store.delete(mid), retries)
                acknowledge(acks, {"deleted": mid})
        else:
            raise SystemExit(f"unknown job {job!r}")
    print(json.dumps({"done": True, "retries": len(retries)}), flush=True)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
