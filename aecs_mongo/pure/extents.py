"""A mailbox's extent: where its mail is, kept where the store writes. Pure: no I/O.

One small document per mailbox in :data:`EXTENTS_COLLECTION`, ``_id`` ``<mailboxId>:extent``:
``oldestTs`` and ``newestTs``, the oldest and newest ``ts`` of its messages, and ``stored``, how
many messages were ever stored in it (``counted``: whether that is all of them). Every write of
new messages widens the extent (``$min``, ``$max``) and counts them before it inserts them, so
no stored message's ``ts`` lies outside it (a write that fails after it leaves it wide, which
costs a windowed read a little, never a row). A delete or an expiry leaves it as it is (still
bounds; the count an upper one); the erase removes the document. Where it is missing (a mailbox
stored before extents existed) the first write or read establishes it from the mailbox's
oldest and newest message (two sorted reads, once); the count is then unknown.

Windowed reads start their first page from it (``windows.WindowedRead.newest``, ``oldest``)
rather than from the clock (an archive's newest mail may be years old), and the mailbox's sample
is taken at the fraction the count says holds enough (one statement, not one per fraction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EXTENTS_COLLECTION", "Extent", "extent_id", "extent_of", "extent_update"]

EXTENTS_COLLECTION = "mailbox_extents"


@dataclass(frozen=True)
class Extent:
    """The oldest and newest ``ts`` of the mailbox's mail, and the messages ever stored in it
    (None: unknown; an upper bound where messages were removed)."""

    oldest: int
    newest: int
    stored: int | None


def extent_id(mailbox_id: str) -> str:
    """The ``_id`` of the mailbox's extent document (inside the mailbox's ``_id`` range)."""
    return f"{mailbox_id}:extent"


def extent_update(mailbox_id: str, oldest: int, newest: int, count: int) -> dict[str, Any]:
    """The update that widens the mailbox's extent to hold ``oldest`` and ``newest`` (never
    narrows it) and counts ``count`` more messages stored."""
    return {
        "$max": {"newestTs": newest},
        "$min": {"oldestTs": oldest},
        "$inc": {"stored": count},
        "$setOnInsert": {"mailboxId": mailbox_id},
    }


def extent_of(document: Mapping[str, Any] | None) -> Extent | None:
    """The extent a document holds (None: no document, or one without both bounds)."""
    if document is None:
        return None
    oldest, newest, stored = document.get("oldestTs"), document.get("newestTs"), document.get("stored")
    if not isinstance(oldest, int) or not isinstance(newest, int):
        return None
    counted = document.get("counted") is True
    return Extent(oldest, newest, stored if counted and isinstance(stored, int) else None)
