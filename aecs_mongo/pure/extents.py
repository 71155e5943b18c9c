"""A mailbox's extent: where its mail is, kept where the store writes. Pure: no I/O.

One small document per mailbox in :data:`EXTENTS_COLLECTION`, ``_id`` ``<mailboxId>:extent``:
``newestTs`` and ``oldestTs``, the newest and oldest ``ts`` of its messages. Every write of new
messages widens them (``$max``, ``$min``) before it inserts them, so no stored message's ``ts``
lies outside them (a write that fails after it leaves them wide, which costs a windowed read a
little, never a row). A delete or an expiry leaves them as they are (still bounds); the erase
removes the document; a mailbox stored before it existed has them computed by the first read
that needs them (two sorted reads of the mailbox).

Windowed reads start their first page from them (``windows.WindowedRead.newest``, ``oldest``)
rather than from the clock: an archive's newest mail may be years old.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXTENTS_COLLECTION", "extent_id", "extent_update"]

EXTENTS_COLLECTION = "mailbox_extents"


def extent_id(mailbox_id: str) -> str:
    """The ``_id`` of the mailbox's extent document (inside the mailbox's ``_id`` range)."""
    return f"{mailbox_id}:extent"


def extent_update(mailbox_id: str, oldest: int, newest: int) -> dict[str, Any]:
    """The upsert that widens the mailbox's extent to hold ``oldest`` and ``newest`` (never
    narrows it)."""
    return {"$max": {"newestTs": newest}, "$min": {"oldestTs": oldest}, "$setOnInsert": {"mailboxId": mailbox_id}}
