"""Code that runs in child processes of the reliability tests (importable by multiprocessing)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from aecs_mongo import MessageStore

from .factories import BASE_TS, email


def generated_mail(n: int) -> dict[str, Any]:
    """Message n of the concurrency set: 150 threads, timestamps that collide often."""
    thread = f"thread-{n % 150}@example.com"
    return email(n, thread=thread, ts=BASE_TS + (n // 7) * 60, subject=f"Topic {n % 150}")


def concurrent_worker(uri: str, db_name: str, numbers: list[int], seed: int) -> dict[str, Any]:
    """Store ``numbers`` (with repeats), some one by one and some in batches; retry what fails.

    A failed call puts back only what it did not store: in the one-by-one path the messages
    stored before the failure keep their results, so ``inserted`` counts every first write.
    """
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    store = MessageStore(client[db_name], mailbox_id="shared")
    rng = random.Random(seed)
    pending = list(numbers)
    stats: dict[str, Any] = {"inserted": 0, "present": 0, "retried": 0, "errors": []}
    while pending:
        batch, pending = pending[:25], pending[25:]
        results: list[Any] = []
        try:
            if rng.random() < 0.25:
                for n in batch:
                    results.append(store.store(generated_mail(n)))
            else:
                results = store.store_many([generated_mail(n) for n in batch], batch_size=25)
        except PyMongoError as exc:
            # at-least-once delivery: a worker that fails puts the mail back and tries again
            stats["retried"] += 1
            stats["errors"].append(f"{type(exc).__name__}: {str(exc)[:120]}")
            pending.extend(batch[len(results) :])
            time.sleep(rng.random() / 20)
        stats["inserted"] += sum(r.inserted for r in results)
        stats["present"] += sum(not r.inserted for r in results)
    client.close()
    return stats


def ingest(uri: str, db_name: str, mailbox: Path) -> None:
    """Store every .eml under ``mailbox`` with add() (uidl = file name), in batches of three."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    store = MessageStore(client[db_name], mailbox_id="crash")
    store.ensure_indexes()
    paths = sorted(mailbox.glob("*.eml"))
    for start in range(0, len(paths), 3):
        chunk = paths[start : start + 3]
        store.store_many([p.read_bytes() for p in chunk], batch_size=3)
        for p in chunk:
            store.add(p.name, p.read_bytes())
    client.close()


def crash_child() -> None:
    """``python -m tests.helpers.reliability_workers URI DB MAILBOX``: say ready, wait for a line, ingest."""
    uri, db_name, mailbox = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    client.admin.command("ping")
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    ingest(uri, db_name, mailbox)
    print(f"done {time.monotonic() - started:.3f}", flush=True)


VICTIM_APP = "aecs-victim"


def victim_mail(victim: int) -> list[dict[str, Any]]:
    """The mail one killed writer was storing: its own messages and one all victims share, in one
    thread, so the re-deliveries contend for the same summary."""
    own = [email(100 * victim + n, thread="contended@example.com") for n in range(8)]
    return [*own, email(999, thread="contended@example.com")]


def victim_child() -> None:
    """``python -m tests.helpers.reliability_workers victim URI DB N``: store victim N's mail and say when
    the commit (or, without transactions, the thread update) is on its way to the server."""
    from pymongo import monitoring

    _, _, uri, db_name, victim = sys.argv

    class Announce(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in ("commitTransaction", "update"):
                print("blocked", flush=True)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    client: MongoClient[dict[str, Any]] = MongoClient(uri, appname=VICTIM_APP, event_listeners=[Announce()])
    MessageStore(client[db_name], mailbox_id="victims").store_many(victim_mail(int(victim)), batch_size=20)
    print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "victim":
        victim_child()
    else:
        crash_child()
