#!/usr/bin/env python3
"""Store the sample mailbox and query it: the conversation list, one thread as an LLM sees it,
and an inbox page.

Uses ``MONGODB_URI`` (or ``--uri``) when given; otherwise starts the embedded SecantusDB server
(``pip install 'aecs-mongo[embedded]'``) in a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.embedded.server import INSTALL_HINT, EmbeddedServer, embedded_available
from aecs_mongo.mail.sources import Skipped, read_messages

ROOT = Path(__file__).resolve().parents[1]


def run(uri: str, db_name: str, mailbox: Path) -> None:
    client: MongoClient[dict[str, object]] = MongoClient(uri)
    try:
        store = MessageStore(client[db_name], mailbox_id="demo", owner_addresses=["alice@example.com"])
        report = store.ensure_indexes()
        print(f"indexes: {len(report.created)} created, {len(report.existing)} existing", end="")
        for name, reason in report.skipped.items():
            print(f"; skipped {name} ({reason})", end="")
        print()

        for item in read_messages([mailbox]):
            name = Path(item.origin.path).name
            if isinstance(item, Skipped):
                print(f"{'skipped':>15}  {name:24} {item.reason}")
                continue
            result = store.store(item.data)
            state = "stored" if result.inserted else "already stored"
            print(f"{state:>15}  {name:24} {result.message_id}")

        print("\nconversations, most recent first:")
        for t in store.list_threads(limit=10).threads:
            print(f"  {t['messageCount']} msg  {t['subject']!r:48} thread {t['threadId']}")

        thread_id = store.get_message("plan-1@example.com")
        assert thread_id is not None
        print(f"\nthread {thread_id['threadId']} as context for a prompt (oldest first):")
        for m in store.thread_context(thread_id["threadId"], limit=20):
            sender = m["from"]["email"] if m["from"] else "?"
            text = (m["forAI"] or "").replace("\n", " ")
            print(f"  [{m['position']}] {m['date']}  {sender}: {text[:70]}")

        print("\ninbox, newest first (page of 5):")
        page = store.list_messages(limit=5)
        for m in page.messages:
            sender = m["from"]["email"] if m["from"] else "?"
            print(f"  {m['date']}  {sender:28} {m['subject']}")
        print(f"  next page cursor: {page.next_cursor}")
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", default=os.environ.get("MONGODB_URI"), help="MongoDB URI (default: $MONGODB_URI)")
    parser.add_argument("--db", default="aecs_demo", help="database name (default: aecs_demo)")
    parser.add_argument("mailbox", nargs="?", type=Path, default=ROOT / "samples" / "mailbox")
    args = parser.parse_args(argv)
    if args.uri:
        run(args.uri, args.db, args.mailbox)
        return 0
    if not embedded_available():
        print(f"no MONGODB_URI and no embedded server; install it with: {INSTALL_HINT}", file=sys.stderr)
        return 2
    print("no MONGODB_URI given: using the embedded SecantusDB server", file=sys.stderr)
    with EmbeddedServer() as server:
        run(server.uri, args.db, args.mailbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
