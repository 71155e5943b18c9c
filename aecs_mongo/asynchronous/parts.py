"""Parts kept once per mailbox: a writer's hold, a remover's release, the sweep's repair.

The rules and the record are the pure ``pure/part_records.py``'s; the layout of a raw message
as a pack and its parts is ``pure/raw_parts.py``'s. A part's record lives in the database
whatever the blob store, so the same statements guard GridFS, a directory and object storage.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from ..pure import lifecycle, part_records
from ..pure.documents import Blob, MessageDocuments
from ..pure.keys import PARTS_FOLDER, doc_id, part_key, part_sha
from ..pure.part_records import PARTS_COLLECTION, part_id
from .context import AsyncStoreContext, log

__all__ = ["blob_owners", "hold", "own_blobs", "release", "sweep_parts"]

#: how long a writer waits, at most, between looks at a part a remover has claimed
_POLL_SECONDS = 0.5
_HOLD_ATTEMPTS = 5
#: every statement on the records selects by ``_id`` (some servers plan ``_id $in`` beside
#: another field as a collection scan unless told)
_BY_ID = [("_id", 1)]


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _parts_of(docs: MessageDocuments) -> Iterable[tuple[str, Blob]]:
    for blob in docs.blobs:
        sha = part_sha(blob.key)
        if sha is not None:
            yield sha, blob


def own_blobs(docs: MessageDocuments) -> list[Blob]:
    """A message's blobs but its parts (which are the mailbox's, put by ``hold``'s caller)."""
    return [blob for blob in docs.blobs if part_sha(blob.key) is None]


def blob_owners(docs: MessageDocuments) -> list[tuple[Blob, str]]:
    """Each blob of a message with the key it is put under: its message's, or for a part the
    parts folder (never a message's key: a part outlives any one message that holds it)."""
    return [(blob, docs.message_key if part_sha(blob.key) is None else PARTS_FOLDER) for blob in docs.blobs]


async def hold(ctx: AsyncStoreContext, batch: Sequence[MessageDocuments]) -> list[tuple[Blob, str]]:
    """Take hold of the parts of the messages ``batch`` is about to insert (before their blobs
    are relied on and before their rows commit); the part blobs to put, one per key. Returns
    once no remover is taking any of them away."""
    now = _now()
    ops: dict[tuple[str, str], UpdateOne] = {}
    blobs: dict[str, Blob] = {}
    for docs in batch:
        for sha, blob in _parts_of(docs):
            update = part_records.hold_update(ctx.mailbox_id, docs.message_key, len(blob.data), now)
            selector = {"_id": part_id(ctx.mailbox_id, sha)}
            ops.setdefault((sha, docs.message_key), UpdateOne(selector, update, upsert=True))
            blobs.setdefault(blob.key, blob)
    if not ops:
        return []
    collection = ctx.db[PARTS_COLLECTION]
    pending = list(ops.values())
    for attempt in range(_HOLD_ATTEMPTS):
        try:
            await collection.bulk_write(pending, ordered=False)
            break
        except BulkWriteError as exc:  # two writers upserting one new part: the loser's is retried
            errors = exc.details.get("writeErrors") or []
            if attempt + 1 == _HOLD_ATTEMPTS or any(e.get("code") != 11000 for e in errors):
                raise
            pending = [pending[e["index"]] for e in errors]
    await _wait_unclaimed(ctx, sorted({part_id(ctx.mailbox_id, sha) for sha, _ in ops}))
    return [(blob, PARTS_FOLDER) for blob in blobs.values()]


async def _wait_unclaimed(ctx: AsyncStoreContext, ids: list[str]) -> None:
    """Until none of ``ids`` is claimed by a remover: a live one finishes (the part's blob is
    then put again by the caller); a claim older than ``CLAIM_SECONDS`` is taken away."""
    collection = ctx.db[PARTS_COLLECTION]
    pause = 0.02
    while True:
        found = collection.find({"_id": {"$in": ids}, "dying": {"$exists": True}}, {"_id": 1}).hint(_BY_ID)
        claimed = [d["_id"] async for d in found]
        if not claimed:
            return
        log.debug("%d part(s) being removed while stored again; waiting for the remover", len(claimed))
        await collection.update_many(
            part_records.stale_claim_filter(claimed, _now()), {"$unset": {"dying": "", "dyingAt": ""}}, hint=_BY_ID
        )
        await asyncio.sleep(pause)
        pause = min(pause * 2, _POLL_SECONDS)
        ids = claimed


def _aware(value: Any) -> _dt.datetime:
    """A record's time as an aware datetime (a client may hand out naive UTC); none: the epoch."""
    if not isinstance(value, _dt.datetime):
        return _dt.datetime.fromtimestamp(0, _dt.UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)


async def release(ctx: AsyncStoreContext, messages: Sequence[Mapping[str, Any]]) -> int:
    """After the rows of ``messages`` are gone: their keys leave their parts' records, and the
    parts nothing holds any more are removed; how many."""
    shas = {sha for m in messages for sha in m.get("rawParts") or ()}
    if not shas:
        return 0
    ids = sorted(part_id(ctx.mailbox_id, sha) for sha in shas)
    collection = ctx.db[PARTS_COLLECTION]
    await collection.update_many(
        {"_id": {"$in": ids}}, part_records.release_update(m["messageKey"] for m in messages), hint=_BY_ID
    )
    return await _remove_unheld(ctx, ids)


async def _remove_unheld(ctx: AsyncStoreContext, ids: list[str]) -> int:
    """Claim the parts of ``ids`` nothing holds, delete their blobs, then their records where the
    claim still stands and nothing took hold meanwhile (``pure/part_records.py``)."""
    collection = ctx.db[PARTS_COLLECTION]
    token = secrets.token_hex(8)
    await collection.update_many(part_records.claim_filter(ids), part_records.claim_update(token, _now()), hint=_BY_ID)
    found = collection.find({"_id": {"$in": ids}, "dying": token}, {"_id": 1}).hint(_BY_ID)
    claimed = [d["_id"] async for d in found]
    if not claimed:
        return 0
    store = await ctx.blob_store()
    await store.delete([part_key(ctx.mailbox_id, part_records.sha_of(ctx.mailbox_id, _id)) for _id in claimed])
    result = await collection.delete_many(part_records.finish_filter(claimed, token), hint=_BY_ID)
    # a writer took hold meanwhile: the claim goes, and the writer puts the blob again
    await collection.update_many(
        {"_id": {"$in": claimed}, "dying": token}, {"$unset": {"dying": "", "dyingAt": ""}}, hint=_BY_ID
    )
    return int(result.deleted_count)


async def sweep_parts(ctx: AsyncStoreContext, grace_seconds: float, batch_size: int = 1000) -> int:
    """The parts' side of ``sweep_blobs``: keys of messages that never got a row leave the
    records older than the grace period, then what nothing holds is removed, and so are part
    blobs with no record (older than the grace period); how many parts were removed."""
    collection = ctx.db[PARTS_COLLECTION]
    cutoff = _now() - _dt.timedelta(seconds=grace_seconds)
    removed = 0
    recorded: set[str] = set()
    selector = lifecycle.id_range_filter(ctx.mailbox_id)
    batch: list[Mapping[str, Any]] = []

    async def settle(records: list[Mapping[str, Any]]) -> int:
        old = [r for r in records if _aware(r.get("touched")) < cutoff]
        refs = sorted({key for r in old for key in r.get("refs") or ()})
        rows: set[str] = set()
        for part in ctx.dialect.split_in({"_id": {"$in": [doc_id(ctx.mailbox_id, k) for k in refs]}}):
            rows.update([row["messageKey"] async for row in ctx.messages.find(part, {"messageKey": 1})])
        gone = [k for k in refs if k not in rows]
        ids = [r["_id"] for r in old]
        if gone:
            await collection.update_many(
                {"_id": {"$in": ids}, "touched": {"$lt": cutoff}}, part_records.release_update(gone), hint=_BY_ID
            )
        return await _remove_unheld(ctx, ids) if ids else 0

    async for record in collection.find(selector, {"refs": 1, "touched": 1}).hint([("_id", 1)]):
        recorded.add(part_records.sha_of(ctx.mailbox_id, record["_id"]))
        batch.append(record)
        if len(batch) == batch_size:
            removed += await settle(batch)
            batch = []
    if batch:
        removed += await settle(batch)
    store = await ctx.blob_store()
    folder = part_key(ctx.mailbox_id, "")
    orphans = [
        key
        for key, modified in await store.list_keys(folder)
        if key[len(folder) :] not in recorded and modified < cutoff.timestamp()
    ]
    if orphans:
        removed += await store.delete(orphans)
        log.debug("removed %d part blob(s) without a record in %r", len(orphans), ctx.mailbox_id)
    return removed
