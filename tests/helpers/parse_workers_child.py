"""A process that stores an endless stream of mail with parse workers, until Ctrl-C
(``tests/test_parse_workers.py``): ``python -m tests.helpers.parse_workers_child URI DB``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from pymongo import MongoClient

from aecs_mongo import MessageStore


def stream() -> Iterator[bytes]:
    number = 0
    while True:
        number += 1
        body = "".join(f"line {line} of message {number}\r\n" for line in range(200))
        yield (
            f"From: a@example.com\r\nTo: b@example.com\r\nSubject: s{number}\r\n"
            f"Date: Mon, 1 Jun 2026 09:00:00 +0000\r\nMessage-ID: <w{number}@example.com>\r\n\r\n{body}"
        ).encode()


def main() -> None:
    uri, name = sys.argv[1], sys.argv[2]
    store = MessageStore(MongoClient(uri)[name], mailbox_id="alice")
    print("storing", flush=True)
    for number, _result in enumerate(store.store_iter(stream(), batch_size=20)):
        if number == 0:
            print("stored", flush=True)  # one batch written: the workers build the next ones


if __name__ == "__main__":
    main()
