"""A mailbox's extent: where its mail is, kept where the store writes. Pure: no I/O.

One small document per mailbox in :data:`EXTENTS_COLLECTION`, ``_id`` ``<mailboxId>:extent``:
``newestTs``, the newest ``ts`` of its messages. Every write of new messages raises it
(``$max``) before it inserts them, so it is never below a stored message's ``ts`` (a write that
fails after it leaves it high, which costs a windowed read a little, never a row). A delete or
an expiry leaves it as it is (still an upper bound); the erase removes it; a mailbox stored before
it existed has it computed by the first read that needs it (one sorted read of the mailbox).

Windowed reads start their first page from it (``windows.WindowedRead.newest``) rather than from
the clock: an archive's newest mail may be years old.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXTENTS_COLLECTION", "extent_id", "newest_update"]

EXTENTS_COLLECTION = "mailbox_extents"


def extent_id(mailbox_id: str) -> str:
    """The ``_id`` of the mailbox's extent document (inside the mailbox's ``_id`` range)."""
    return f"{mailbox_id}:extent"


def newest_update(mailbox_id: str, ts: int) -> dict[str, Any]:
    """The upsert that raises the mailbox's newest ``ts`` to ``ts`` (never lowers it)."""
    return {"$max": {"newestTs": ts}, "$setOnInsert": {"mailboxId": mailbox_id}}
