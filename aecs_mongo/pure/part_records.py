"""The records of parts kept once per mailbox (``raw_parts.py``): who holds each one. Pure.

One document per part in :data:`PARTS_COLLECTION`: ``_id`` ``<mailboxId>:<sha256>``, the
message keys that hold it (``refs``), when a writer last took hold of it (``touched``), and,
while a remover is taking it away, that remover's ``dying`` token and ``dyingAt`` time.

The rule that keeps a part safe: a blob is removed only when no message refers to it and
none that refers to it can still commit.

- A writer takes hold of a message's parts (:func:`hold_update`, an upsert adding its message
  key to ``refs``) *before* it uploads or relies on them and before the message's row commits.
  A record with a ``dying`` token is being removed: the writer waits for the remover to finish
  (or, past :data:`CLAIM_SECONDS`, takes the token away), then uploads the part again.
- A remover (delete, expire, the sweep) takes the keys of removed messages out of ``refs``
  (:func:`release_update`); a part left with no ``refs`` is claimed (:func:`claim_filter`, a
  ``dying`` token set only where ``refs`` is empty), its blob deleted, and its record deleted
  only where it is still claimed and still empty (:func:`finish_filter`). A writer that took
  hold meanwhile keeps the record, its token is removed and the writer uploads the part anew.
- A writer that died between its hold and its row leaves its key in ``refs``: the sweep
  takes out keys whose message has no row once the record is older than the grace period
  (the grace rule of the blob sweep: a writer commits within its retries of its hold).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

from .keys import doc_id

__all__ = [
    "CLAIM_SECONDS",
    "PARTS_COLLECTION",
    "claim_filter",
    "claim_update",
    "finish_filter",
    "hold_update",
    "part_id",
    "release_update",
    "sha_of",
    "stale_claim_filter",
]

PARTS_COLLECTION = "blob_parts"
#: how long a remover's claim stands: a writer that finds one older takes it away (the remover
#: died between its claim and its last step; a live one deletes a batch's blobs far sooner)
CLAIM_SECONDS = 60.0


def part_id(mailbox_id: str, sha256: str) -> str:
    return doc_id(mailbox_id, sha256)


def sha_of(mailbox_id: str, record_id: str) -> str:
    """The SHA-256 of the part a record of ``mailbox_id`` is about (``part_id`` reversed)."""
    return record_id[len(mailbox_id) + 1 :]


def hold_update(mailbox_id: str, message_key: str, size: int, now: _dt.datetime) -> dict[str, Any]:
    """A writer's hold on one part for one message (an upsert)."""
    return {
        "$addToSet": {"refs": message_key},
        "$set": {"touched": now},
        "$setOnInsert": {"mailboxId": mailbox_id, "size": size},
    }


def release_update(message_keys: Iterable[str]) -> dict[str, Any]:
    return {"$pull": {"refs": {"$in": sorted(set(message_keys))}}}


def claim_filter(ids: list[str]) -> dict[str, Any]:
    """The parts of ``ids`` that nothing holds and no remover has claimed."""
    return {"_id": {"$in": ids}, "refs": {"$size": 0}, "dying": {"$exists": False}}


def claim_update(token: str, now: _dt.datetime) -> dict[str, Any]:
    return {"$set": {"dying": token, "dyingAt": now}}


def finish_filter(ids: list[str], token: str) -> dict[str, Any]:
    """The claimed records a remover may delete: still its claim, still held by nothing."""
    return {"_id": {"$in": ids}, "dying": token, "refs": {"$size": 0}}


def stale_claim_filter(ids: list[str], now: _dt.datetime) -> dict[str, Any]:
    """Claims of ``ids`` older than :data:`CLAIM_SECONDS` (their remover died)."""
    return {"_id": {"$in": ids}, "dyingAt": {"$lt": now - _dt.timedelta(seconds=CLAIM_SECONDS)}}
