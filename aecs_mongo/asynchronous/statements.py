"""The statements every concern module writes with, and the package's logger.

``context.py`` re-exports them (the concern modules import them from there); the GridFS blob
store (``gridfsblobs.py``), which the context builds, imports them from here.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pymongo.errors import BulkWriteError, OperationFailure

__all__ = ["MAX_REWRITES", "errmsg", "insert_ignoring_duplicates", "log", "only_duplicates", "resolve", "to_list"]

log = logging.getLogger("aecs_mongo")

_DUPLICATE_KEY = 11000
T = TypeVar("T")

#: how many times a batch is written (or deleted) again because the server restarted under it
MAX_REWRITES = 5


async def resolve(value: Any) -> Any:
    """Await ``value`` if the driver returned an awaitable: the one place for how Motor and
    PyMongo's async client differ (``aggregate``, ``list_indexes``, ``watch`` and
    ``start_session`` give a cursor or session in one and a coroutine in the other). It is not a
    sync/async bridge: the sync store is generated from this source."""
    if inspect.isawaitable(value):
        return await value
    return value


async def to_list(cursor: Any) -> list[Any]:
    """Drain a cursor (``to_list`` is missing from mongomock; iteration works everywhere)."""
    return [doc async for doc in cursor]


def errmsg(exc: OperationFailure) -> str:
    return str((exc.details or {}).get("errmsg") or exc)


def only_duplicates(exc: BulkWriteError) -> bool:
    """Every error of the bulk is a duplicate key (and no write concern failed)."""
    errors = exc.details.get("writeErrors", [])
    return (
        bool(errors)
        and all(e.get("code") == _DUPLICATE_KEY for e in errors)
        and not exc.details.get("writeConcernErrors")
    )


async def insert_ignoring_duplicates(collection: Any, documents: Sequence[Mapping[str, Any]]) -> set[int]:
    """One unordered ``insert_many``; returns the indexes refused as duplicates (already stored)."""
    if not documents:
        return set()
    try:
        await collection.insert_many(documents, ordered=False)
    except BulkWriteError as exc:
        if not only_duplicates(exc):
            raise
        return {e["index"] for e in exc.details["writeErrors"]}
    return set()


async def holds_mail(messages: Any, hinted: bool = True) -> bool:
    """Whether ``messages`` holds any document: one statement on the ``_id`` index (hinted:
    without it the empty filter is a collection scan, however short). ``hinted=False`` for the
    unit tier (mongomock refuses ``hint``)."""
    options: dict[str, Any] = {"hint": [("_id", 1)]} if hinted else {}
    return await messages.find_one({}, {"_id": 1}, **options) is not None
