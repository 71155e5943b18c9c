"""A mailbox's change mark: how the local search index learns, in one read, that nothing changed.

Where there are no change streams (a standalone server) the local index cannot read what
happened since its last look, and counting the mailbox's messages before every read would cost
about a second at 10,000 messages. Instead every write that can change what the index holds (a
batch stored, deleted or expired, a tag or folder change, an erase, a re-parse) brackets itself
with two updates of one document per mailbox in :data:`MARKS_COLLECTION`, by any store, with the
index or without:

- before its first write, :func:`begin_update`: ``n`` + 1 and its own token (an ObjectId) into
  ``pending``; a write that may change tags or folders of stored messages (a tag change, a
  batch whose mail carries folders) also bumps ``labels``, one that removes messages (a delete
  or expire batch) ``removals``;
- after its last write (and after its own index followed, where it keeps one),
  :func:`end_update`: ``n`` + 1 and its token out of ``pending``.

The document: ``_id`` ``<mailboxId>:changes``, ``mailboxId``, ``epoch`` (an ObjectId set when it
is created: an erase removes the document, and counting restarts under another epoch), ``n``,
``labels``, ``removals``, ``pending``. A mark is *settled* when ``pending`` is empty; the index
keeps the settled mark it last checked against (:func:`mark_key`), read before that check. A
read then costs one ``find`` by ``_id`` where the mark is the same settled one; anything else (a
write since, one under way, one killed midway: its token stays) sends the read to the check the
index always made (the count of the mailbox's messages, and a reconcile when it differs). A token older than
:data:`STALE_AFTER_S` is a writer that died (a batch takes seconds); the check that found it
takes it out (:func:`stale_tokens`), and the next read settles again. A check that finds
``labels`` moved since the mark it keeps (:func:`labels_moved`) also reads every message's tags
and folders: a count does not see a tag change. One that finds ``removals`` or the epoch moved
(:func:`removals_moved`) compares the message keys whatever the count: a delete and a store of
as many messages by another process leave the count as it was.

A store whose own write was the only change since the mark its index holds (its ``begin`` came
right after that mark, with no other writer's token, and its ``end`` right after its ``begin``)
keeps the index settled itself (:func:`only_change`): its own writes cost it no count.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

import bson
from bson import ObjectId

__all__ = [
    "MARKS_COLLECTION",
    "STALE_AFTER_S",
    "begin_update",
    "end_update",
    "labels_moved",
    "mark_id",
    "mark_key",
    "only_change",
    "removals_moved",
    "settled",
    "stale_tokens",
]

MARKS_COLLECTION = "change_marks"
#: a token this old is a writer that died between its two updates (a batch takes seconds)
STALE_AFTER_S = 3600.0


def mark_id(mailbox_id: str) -> str:
    """The ``_id`` of the mailbox's mark (under ``<mailboxId>:`` as every per-mailbox ``_id``)."""
    return f"{mailbox_id}:changes"


def begin_update(mailbox_id: str, token: ObjectId, labels: bool = False, removals: bool = False) -> dict[str, Any]:
    """The update (an upsert) a write sends before its first write (``labels``: it may change
    tags or folders of stored messages; ``removals``: it may remove messages)."""
    counts = {"n": 1}
    if labels:
        counts["labels"] = 1
    if removals:
        counts["removals"] = 1
    return {
        "$inc": counts,
        "$push": {"pending": token},
        "$setOnInsert": {"mailboxId": mailbox_id, "epoch": ObjectId()},
    }


def end_update(token: ObjectId) -> dict[str, Any]:
    """The update a write sends after its last write (never an upsert: an erase may have removed
    the document meanwhile, and a new one starts a new epoch)."""
    return {"$inc": {"n": 1}, "$pull": {"pending": token}}


def settled(mark: Mapping[str, Any] | None) -> bool:
    """No write under way (or killed midway) on the mailbox."""
    return mark is not None and not mark.get("pending")


def mark_key(mark: Mapping[str, Any]) -> bytes:
    """What the index keeps of a settled mark (its epoch and counts, as BSON)."""
    return bson.encode(
        {
            "epoch": mark.get("epoch"),
            "n": int(mark.get("n") or 0),
            "labels": int(mark.get("labels") or 0),
            "removals": int(mark.get("removals") or 0),
        }
    )


def _moved(kept: bytes | None, mark: Mapping[str, Any] | None, counter: str) -> bool:
    if mark is None:
        return False
    if kept is None:
        return True
    try:
        before = bson.decode(kept)
    except Exception:  # a position of another kind: start again
        return True
    return bool(before.get("epoch") != mark.get("epoch") or before.get(counter) != int(mark.get(counter) or 0))


def labels_moved(kept: bytes | None, mark: Mapping[str, Any] | None) -> bool:
    """Whether tags or folders may have changed since the mark ``kept`` (an index that keeps
    none: it may hold labels of any age). No mark: no write of a store that marks since."""
    return _moved(kept, mark, "labels")


def removals_moved(kept: bytes | None, mark: Mapping[str, Any] | None) -> bool:
    """Whether messages may have been removed since the mark ``kept`` (by a delete, an expire, or
    an erase: the epoch), so that a count equal to the index's proves nothing."""
    return _moved(kept, mark, "removals")


def only_change(
    begun: Mapping[str, Any] | None,
    ended: Mapping[str, Any] | None,
    token: ObjectId,
    labels: bool = False,
    removals: bool = False,
) -> tuple[bytes, bytes] | None:
    """Where one write (``token``: its ``begin`` gave ``begun``, its ``end`` gave ``ended``) was
    the only change since the mark before its ``begin`` was settled: that mark's key and
    ``ended``'s. An index settled at the first (checked when it is replaced), which followed the
    write, is settled at the second."""
    if begun is None or ended is None or not settled(ended):
        return None
    if begun.get("epoch") != ended.get("epoch") or list(begun.get("pending") or ()) != [token]:
        return None
    n, marked, removed = (int(begun.get(c) or 0) for c in ("n", "labels", "removals"))
    if int(ended.get("n") or 0) != n + 1 or int(ended.get("labels") or 0) != marked:
        return None
    if int(ended.get("removals") or 0) != removed:
        return None
    before = {
        "epoch": begun.get("epoch"),
        "n": n - 1,
        "labels": marked - 1 if labels else marked,
        "removals": removed - 1 if removals else removed,
    }
    return mark_key(before), mark_key(ended)


def stale_tokens(mark: Mapping[str, Any] | None, now: _dt.datetime) -> list[ObjectId]:
    """The pending tokens older than ``STALE_AFTER_S`` (their writers died midway)."""
    if mark is None:
        return []
    limit = now - _dt.timedelta(seconds=STALE_AFTER_S)
    return [t for t in mark.get("pending") or () if isinstance(t, ObjectId) and t.generation_time < limit]
