"""``aecs-mongo blobs migrate --to URL``: move a database's blobs to another blob store.

Resumable, in three steps that the settings document (``pure/blob_location.py``) records:

1. ``migratingTo`` is set to the target. Every blob that a stored message names (raw.eml,
   body.html, attachments, a spilled body, the raw variants) is read from the source, written to
   the target (create-if-absent: what an earlier run copied stays) and read back there: its
   SHA-256 must equal the source's (a copy that differs is written again, once). The stores keep
   reading and writing the source meanwhile.
2. Only when every blob is copied and verified, the location is switched to the target in one
   write (``url``), with ``removing`` set to the source.
3. The source's blobs are removed (everything under ``aecs/``: leftovers of interrupted uploads
   too) and ``removing`` is unset.

A run that stops anywhere is run again with the same ``--to``: step 1 skips nothing it cannot
check, step 3 finishes a removal. Writers should be stopped first: a store opened before the
switch keeps writing to the source (its location was checked when it opened).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

from pymongo import WriteConcern

from ..errors import BlobLocationError, BlobStoreError
from ..pure import lifecycle
from ..pure.blob_location import BLOBS_SETTING, SETTINGS_COLLECTION, BlobLocation, parse_blob_url, settings_document
from ..pure.documents import Blob
from ..pure.keys import PARTS_FOLDER
from ..pure.raw_parts import PACK_CONTENT_TYPE
from ..pure.settings import Capabilities, StoreSettings
from .blobstores import AsyncBlobStore, open_external
from .context import REFUSED, AsyncStoreContext
from .gridfsblobs import AsyncGridFSBlobs

__all__ = ["MigrationReport", "migrate_blobs"]

#: messages read per batch (their blobs are read, written and verified together)
BATCH = 200
_FIELDS = {"_id": 1, "mailboxId": 1, "messageKey": 1, "messageId": 1, "blobPrefix": 1, "blobs": 1}
_FIELDS.update({"variantHashes": 1, "rawParts": 1, "attachments.idx": 1, "attachments.contentType": 1})


@dataclass
class MigrationReport:
    """What ``blobs migrate`` did: blobs copied (and verified), found already copied by an
    earlier run, named by a message but missing from the source, and removed from the source."""

    source: str
    target: str
    copied: int = 0
    already: int = 0
    missing: list[str] = field(default_factory=list)
    removed: int = 0
    switched: bool = False
    seconds: float = 0.0


def _content_type(message: Mapping[str, Any], name: str) -> str:
    if name == "body.html":
        return "text/html; charset=utf-8"
    if name == "body.json":
        return "application/json"
    if name.startswith("att/"):
        idx = int(name[4:])
        for att in message.get("attachments") or ():
            if att.get("idx") == idx:
                return str(att.get("contentType") or "application/octet-stream")
        return "application/octet-stream"
    if name == "raw.pack":
        return PACK_CONTENT_TYPE
    return "message/rfc822"


class _Stores:
    """The stores of one location: GridFS needs one per mailbox (its files carry the mailbox)."""

    def __init__(self, db: Any, location: BlobLocation) -> None:
        self.db = db
        self.location = location
        self._external = None if location.gridfs else open_external(location)
        self._gridfs: dict[str, AsyncBlobStore] = {}

    def of(self, mailbox_id: str) -> AsyncBlobStore:
        if self._external is not None:
            return self._external
        if mailbox_id not in self._gridfs:
            settings = StoreSettings.checked(mailbox_id, bucket_name=self.location.bucket)
            ctx = AsyncStoreContext(self.db, settings, Capabilities())
            self._gridfs[mailbox_id] = AsyncGridFSBlobs(ctx)
        return self._gridfs[mailbox_id]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def migrate_blobs(
    db: Any, to: str, *, source: str | None = None, on_progress: Callable[[MigrationReport], None] | None = None
) -> MigrationReport:
    """Move every blob of the database ``db`` to the store named by ``to`` (module docstring).
    ``source``: the current location when no settings document records it (default: GridFS,
    bucket ``aecs``, as for mail stored before locations were recorded)."""
    started = monotonic()
    target = parse_blob_url(to)
    settings = await _durable(db, db[SETTINGS_COLLECTION])
    recorded = await settings.find_one({"_id": BLOBS_SETTING})
    if recorded is None:
        current = parse_blob_url(source or "gridfs")
        await settings.update_one({"_id": BLOBS_SETTING}, {"$setOnInsert": settings_document(current)}, upsert=True)
        recorded = await settings.find_one({"_id": BLOBS_SETTING})
    assert recorded is not None
    if recorded["url"] == target.url:
        removing = recorded.get("removing")
        report = MigrationReport(str(removing or target.url), target.url, switched=True)
        if removing:  # step 3 of a run that stopped there
            await _remove_source(db, parse_blob_url(removing), report)
        report.seconds = monotonic() - started
        return report
    if recorded.get("migratingTo") not in (None, target.url):
        raise BlobLocationError(
            f"a migration to {recorded['migratingTo']} is under way: run it again with --to {recorded['migratingTo']}",
            url=target.url,
            recorded=str(recorded["url"]),
        )
    origin = parse_blob_url(recorded["url"])
    report = MigrationReport(origin.url, target.url)
    await settings.update_one({"_id": BLOBS_SETTING}, {"$set": {"migratingTo": target.url}})
    sources, targets = _Stores(db, origin), _Stores(db, target)
    batch: list[Mapping[str, Any]] = []
    async for message in db["messages"].find({}, _FIELDS).sort("_id", 1).batch_size(BATCH):
        batch.append(message)
        if len(batch) == BATCH:
            await _copy_batch(batch, sources, targets, report)
            batch = []
            if on_progress is not None:
                on_progress(report)
    await _copy_batch(batch, sources, targets, report)
    switched = await settings.update_one(
        {"_id": BLOBS_SETTING, "url": origin.url, "migratingTo": target.url},
        {"$set": {"url": target.url, "removing": origin.url}, "$unset": {"migratingTo": ""}},
    )
    if not switched.modified_count:
        raise BlobLocationError("the blob location changed during the migration: run it again", url=target.url)
    report.switched = True
    await _remove_source(db, origin, report)
    report.seconds = monotonic() - started
    return report


async def _durable(db: Any, collection: Any) -> Any:
    """``collection`` writing with the journal (and a majority on a replica set): the switch
    must be on disk before the source's blobs are removed, or a restart could give back a
    settings document that names the emptied source."""
    if not db.write_concern.is_server_default:
        return collection
    try:
        hello = await db.command("hello")
    except REFUSED:  # no hello: no replica set to speak of
        hello = {}
    concern = WriteConcern(w="majority", j=True) if hello.get("setName") else WriteConcern(j=True)
    return collection.with_options(write_concern=concern)


async def _copy_batch(
    batch: list[Mapping[str, Any]], sources: _Stores, targets: _Stores, report: MigrationReport
) -> None:
    by_mailbox: dict[str, list[Mapping[str, Any]]] = {}
    for message in batch:
        by_mailbox.setdefault(message["mailboxId"], []).append(message)
    for mailbox_id, messages in by_mailbox.items():
        source, target = sources.of(mailbox_id), targets.of(mailbox_id)
        # key -> (the message naming it, its content type, the key it is put under)
        wanted: dict[str, tuple[Mapping[str, Any], str, str]] = {}
        for message in messages:
            for key in lifecycle.blob_keys(message):
                name = key[len(message["blobPrefix"]) :]
                wanted[key] = (message, _content_type(message, name), message["messageKey"])
            for key in lifecycle.part_keys(message, mailbox_id):  # kept once per mailbox
                wanted.setdefault(key, (message, "application/octet-stream", PARTS_FOLDER))
        data = await source.get_many(list(wanted))
        report.missing += sorted(f"{wanted[key][0].get('messageId')}: {key}" for key in wanted if key not in data)
        copied = await target.get_many(list(data))
        todo = [key for key in data if key not in copied or _sha(copied[key]) != _sha(data[key])]
        report.already += len(data) - len(todo)
        stale = [key for key in todo if key in copied]  # a different copy under the key: replaced
        if stale:
            await target.delete(stale)
        items = [(Blob(key, data[key], wanted[key][1]), wanted[key][2]) for key in todo]
        await target.put(items)
        check = await target.get_many(todo)
        bad = [key for key in todo if key not in check or _sha(check[key]) != _sha(data[key])]
        if bad:
            raise BlobStoreError(
                f"blob store {target.url}: {len(bad)} copied blob(s) read back different, e.g. {bad[0]}: "
                "nothing was switched; run the migration again",
                url=target.url,
            )
        report.copied += len(todo)


async def _remove_source(db: Any, origin: BlobLocation, report: MigrationReport) -> None:
    """Step 3: every blob under ``aecs/`` in the old location, then ``removing`` unset."""
    stores = _Stores(db, origin)
    report.removed += await stores.of("migration").delete_prefix("aecs/")
    await (await _durable(db, db[SETTINGS_COLLECTION])).update_one({"_id": BLOBS_SETTING}, {"$unset": {"removing": ""}})
