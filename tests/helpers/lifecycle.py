"""What a mailbox left in the database, for the export/expire/erase tests (issue 20)."""

from __future__ import annotations

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
