"""What a mailbox left in the database, for the export/expire/erase tests."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from typing import Any

from aecs_mongo.pure.lifecycle import mailbox_blob_root


def traces(db: Any, mailbox_id: str) -> dict[str, list[Any]]:
    """Every document of ``mailbox_id`` in EVERY collection of the database: by ``mailboxId``
    (also in GridFS metadata), by an ``_id`` under ``<mailboxId>:``, or by a GridFS key
    (``_id``, ``filename``, ``files_id``) under the mailbox's blob root. An ``_id`` under the
    prefix that names another ``mailboxId`` is that mailbox's (``<mailboxId>:x`` is a mailbox too)."""
    root, prefix = mailbox_blob_root(mailbox_id), mailbox_id + ":"
    found: dict[str, list[Any]] = {}
    for name in db.list_collection_names():
        if name.startswith("system."):
            continue
        for doc in db[name].find():
            keys = [str(doc.get(f, "")) for f in ("_id", "filename", "files_id")]
            if (
                doc.get("mailboxId") == mailbox_id
                or (doc.get("metadata") or {}).get("mailboxId") == mailbox_id
                or (keys[0].startswith(prefix) and doc.get("mailboxId", mailbox_id) == mailbox_id)
                or any(k.startswith(root) for k in keys)
            ):
                found.setdefault(name, []).append(doc)
    return found


def snapshot(db: Any, mailbox_id: str) -> dict[str, list[str]]:
    """The mailbox's documents, comparable (upload times included: nothing may be rewritten)."""
    return {name: sorted(map(repr, docs)) for name, docs in traces(db, mailbox_id).items()}


# --- a small mailbox that writes every tier (tests/test_lifecycle.py, tests/test_blob_stores.py) ---

DAY = 86_400
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def raw(n: int, *, day: int, thread: int, attachment: bytes = b"") -> bytes:
    """Message ``n`` on day ``day`` after START, in thread ``thread``: text, HTML and (optionally)
    an attachment, so every tier is written."""
    when = (START + dt.timedelta(days=day, minutes=n)).strftime("%a, %d %b %Y %H:%M:%S +0000")
    parts = [
        f"Message-ID: <n{n}@example.com>\r\nFrom: Bob <bob@example.com>\r\nTo: alice@example.com\r\n"
        f"Subject: topic {thread}\r\nDate: {when}\r\nReferences: <root{thread}@example.com>\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        '--b\r\nContent-Type: multipart/alternative; boundary="a"\r\n\r\n'
        f"--a\r\nContent-Type: text/plain\r\n\r\nplain {n}\r\n"
        f"--a\r\nContent-Type: text/html\r\n\r\n<p>html {n}</p>\r\n--a--\r\n"
    ]
    if attachment:
        encoded = base64.encodebytes(attachment).decode()
        parts.append(
            "--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=a.bin\r\n"
            f"Content-Transfer-Encoding: base64\r\n\r\n{encoded}\r\n"
        )
    parts.append("--b--\r\n")
    return "".join(parts).encode()


def mailbox_mail(count: int) -> list[bytes]:
    """``count`` messages over ``count`` days in 5 threads; every third with a 2-chunk attachment."""
    big = bytes(range(256)) * 1100
    return [raw(n, day=n, thread=n % 5, attachment=big if n % 3 == 0 else b"") for n in range(count)]


def fill(store: Any, db: Any, count: int) -> None:
    store.store_many(mailbox_mail(count))
    store.add("uidl-1", mailbox_mail(1)[0])  # a UIDL record (and a repeat of a stored message)
    variant = raw(1, day=1, thread=1) + b"\r\nother bytes\r\n"
    assert store.store(variant).variant  # a variant blob beside n1
    store.set_embedding("n2@example.com", [0.1, 0.2, 0.3])
    db["feed_checkpoints"].insert_one(
        {"_id": f"{store.mailbox_id}:consumer", "mailboxId": store.mailbox_id, "position": {}}
    )


def exported(store: Any, **kwargs: Any) -> list[Any]:
    """``export_raw`` drained, from the sync store or the async one (driven on its loop)."""
    stream = store.export_raw(**kwargs)
    if not hasattr(stream, "__aiter__"):
        return list(stream)

    async def drain() -> list[Any]:
        return [copy async for copy in stream]

    return list(store._loop.run_until_complete(drain()))


def object_store_life(store: Any, db: Any, objects: Callable[[], list[str]], prefix: str) -> None:
    """A mailbox's life on an object store (``objects()``: every key in the bucket or container,
    read with the service's own client): store, read, export, a re-delivery that writes nothing,
    a delete, then an erase that leaves no object behind."""
    from aecs_mongo.pure.keys import message_key

    fill(store, db, 5)
    keys = objects()
    root = prefix + mailbox_blob_root(store.mailbox_id)
    assert keys and all(k.startswith(root) for k in keys)
    # n0's large attachment: the message a pack, its encoded body a part kept once per mailbox
    assert f"{root}{message_key('n0@example.com')}/raw.pack" in keys
    assert sum(f"{root}parts/" in k for k in keys) == 1
    assert db["aecs.files"].count_documents({}) == 0
    assert store.get_raw("n0@example.com") == mailbox_mail(1)[0]
    assert store.get_attachment("n0@example.com", 0) == bytes(range(256)) * 1100
    assert [c.data for c in exported(store)] == mailbox_mail(5)
    assert len(exported(store, variants=True)) == 6
    assert store.store(mailbox_mail(1)[0]).inserted is False  # a re-delivery: nothing new
    assert objects() == keys
    assert store.delete("n2@example.com")
    assert not [k for k in objects() if k.startswith(f"{root}{message_key('n2@example.com')}/")]
    report = store.erase_mailbox()
    assert report.messages == 4 and report.blobs == len(keys) - 2  # n2's raw.eml and body.html went before
    assert objects() == []
