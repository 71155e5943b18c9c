"""The pure part of the ingest pipeline (``asynchronous/pipeline.py``): a refused item, what a
mail source's item carries, which blobs of a batch are put ahead, and the order in which
batches may put theirs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import AecsMongoError
from .blob_location import check_key
from .documents import MessageDocuments
from .keys import part_sha
from .lifecycle import RAW_NAMES

__all__ = ["NamingOrder", "Refusal", "blob_items", "is_raw_message", "own_labels"]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An item the parse stage refused: reported as ``on_error(index, item, error)``."""

    index: int
    item: Any
    error: AecsMongoError


def is_raw_message(item: Any) -> bool:
    """A mail source's ``RawMessage`` (its bytes, the source's date, flags and folders)."""
    return hasattr(item, "received_at") and hasattr(item, "data")


def own_labels(item: Any, every: Iterable[str]) -> tuple[tuple[str, ...], Sequence[str]]:
    """The tags (``every`` and the item's own flags) and folders a ``RawMessage`` is stored with
    (unchecked: ``pure/tags.py`` checks them)."""
    return (*every, *getattr(item, "tags", ())), getattr(item, "folders", ())


def blob_items(batch: Sequence[MessageDocuments]) -> list[tuple[str, bytes]]:
    """``(key, bytes)`` of the blobs of the first copy of each message in a batch (the copy the
    write inserts; a later one with other parts would name blobs no row holds), of messages
    with raw bytes (``raw.eml`` or ``raw.pack``: the stager skips a message whose raw blob is
    there), but the parts kept once per mailbox, which are held before they are put."""
    items: dict[str, bytes] = {}
    seen: set[str] = set()
    for docs in batch:
        if docs.message["_id"] in seen:
            continue
        seen.add(docs.message["_id"])
        if any(blob.key.rpartition("/")[2] in RAW_NAMES for blob in docs.blobs):
            for blob in docs.blobs:
                if part_sha(blob.key) is None:  # a part is put after its hold (parts.py)
                    items.setdefault(check_key(blob.key), blob.data)
    return list(items.items())


class NamingOrder:
    """The batches parsed without putting their blobs ahead and not written yet, by number.

    A blob's name is taken by the first copy put under it, so a batch may put its blobs ahead
    only once every batch before it has its blobs named (written): a later batch's copy of a
    message must never take a name before the message's own blobs.
    """

    def __init__(self) -> None:
        self._unnamed: set[int] = set()

    def unnamed(self, number: int) -> None:
        """Batch ``number`` was parsed without putting its blobs ahead."""
        self._unnamed.add(number)

    def named(self, number: int) -> None:
        """Batch ``number`` was written: its blobs have their names."""
        self._unnamed.discard(number)

    def may_put(self, number: int) -> bool:
        """Whether batch ``number`` may put its blobs ahead now (no batch before it is unnamed)."""
        return all(n > number for n in self._unnamed)
