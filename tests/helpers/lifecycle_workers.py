"""Code that runs in child processes of the lifecycle tests: an erase to be killed mid-way."""

from __future__ import annotations

import sys
from typing import Any

from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore


class AnnounceDeletes(monitoring.CommandListener):
    """Prints ``delete`` as each delete statement is answered, so the parent can kill the erase
    after a chosen number of them (the kill then lands between or inside later statements)."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "delete":
            print("delete", flush=True)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def erase_child() -> None:
    """``python -m tests.helpers.lifecycle_workers URI DB MAILBOX BATCH``: say ready, wait for a line, erase."""
    uri, db_name, mailbox, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[AnnounceDeletes()])
    client.admin.command("ping")
    print("ready", flush=True)
    sys.stdin.readline()
    report = MessageStore(client[db_name], mailbox_id=mailbox).erase_mailbox(batch_size=batch)
    print(f"done {report.total}", flush=True)


if __name__ == "__main__":
    erase_child()
