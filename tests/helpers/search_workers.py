"""A child process that stores one message through the library, for the search tests to kill or
to let finish: ``python -m tests.helpers.search_workers URI DB MAILBOX INDEX|- MESSAGE.eml``.

Prints ``ready`` once connected, stores the message after ``go`` on stdin (with the local
search index at INDEX, or none for ``-``), then prints ``stored``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pymongo import MongoClient

from aecs_mongo import MessageStore


def main(argv: list[str]) -> None:
    uri, db_name, mailbox, index, message = argv
    client: MongoClient[dict[str, object]] = MongoClient(uri)
    store = MessageStore(client[db_name], mailbox_id=mailbox, search_index=None if index == "-" else index)
    print("ready", flush=True)
    sys.stdin.readline()
    store.store(Path(message).read_bytes())
    print("stored", flush=True)
    client.close()


if __name__ == "__main__":
    main(sys.argv[1:])
