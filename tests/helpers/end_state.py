"""What two runs that should end alike are compared by: every collection, less the wall-clock
times (``tests/test_batches.py``, ``tests/test_parse_workers.py``)."""

from __future__ import annotations

from typing import Any

from aecs_mongo.pure.lifecycle import part_keys

COLLECTIONS = ("messages", "bodies", "threads", "uidls", "blob_parts", "aecs.files", "aecs.chunks")


def unreferenced_blobs(db: Any) -> list[str]:
    """GridFS files no message names (in ``blobs``, or as a variant's ``blobKey``)."""
    named = set()
    for message in db.messages.find({}, {"mailboxId": 1, "blobPrefix": 1, "blobs": 1, "variants": 1, "rawParts": 1}):
        named |= {message["blobPrefix"] + name for name in message.get("blobs") or ()}
        named |= {variant["blobKey"] for variant in message.get("variants") or ()}
        named |= set(part_keys(message, message["mailboxId"]))
    return sorted(f["_id"] for f in db["aecs.files"].find({}, {"_id": 1}) if f["_id"] not in named)


def canonical(db: Any) -> dict[str, list[dict[str, Any]]]:
    """Every collection, sorted by ``_id``, without what legitimately differs between two runs:
    the wall-clock times (``processedAt``, a variant's ``receivedAt``, a file's ``uploadDate``)
    and what derives from them: the sort key ``ts`` of a message without a date is its
    ``processedAt``, and so are the first/last fields of a thread holding such a message; and a
    thread's ``tagsRev`` token (random: no content)."""
    dump = {name: list(db[name].find({}).sort("_id", 1)) for name in COLLECTIONS}
    undated_threads = set()
    for message in dump["messages"]:
        message.pop("processedAt", None)
        if message.get("timestamp") is None:
            message.pop("ts")
            undated_threads.add(message["threadKey"])
        for variant in message.get("variants") or ():
            variant.pop("receivedAt")
    for thread in dump["threads"]:
        thread.pop("tagsRev", None)
        if thread["threadKey"] in undated_threads:
            for field in ("firstTs", "lastTs", "firstMessageKey", "lastMessageKey", "subject"):
                thread.pop(field)
    for file_doc in dump["aecs.files"]:
        file_doc.pop("uploadDate")
    for record in dump.get("blob_parts", ()):  # who holds a part: the order they came in is the write's
        record.pop("touched")
        record["refs"] = sorted(record["refs"])
    return dump
