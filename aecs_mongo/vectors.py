"""Exact nearest-vector search, for deployments without Atlas Vector Search. Pure.

``semantic_search`` with the ``exact`` engine reads at most ``scan_limit`` of a mailbox's
vectors and ranks them here by cosine similarity, keeping only the best ``limit`` in memory.
Scores are on Atlas's scale for cosine, ``(1 + cosine) / 2`` in [0, 1], so results from both
engines read the same.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .indexes import ATLAS_VECTOR_INDEX_NAME

__all__ = [
    "VECTOR_ENGINES",
    "NearestVectors",
    "atlas_index_pipeline",
    "check_query_vector",
    "check_vector",
    "cosine",
    "mailbox_id_range",
    "vector_document",
]

#: ``vector_engine`` values: Atlas ``$vectorSearch``, the exact bounded scan, or pick (Atlas
#: where its vector index is queryable, else exact).
VECTOR_ENGINES = ("auto", "atlas", "exact")


def check_query_vector(vector: object) -> list[float]:
    """A non-empty sequence of numbers, not all zero (cosine is undefined for the zero vector)."""
    values = check_vector(vector)
    if not values or not any(values) or not all(math.isfinite(v) for v in values):
        raise ValueError("vector must be non-empty, finite and not all zeros")
    return values


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


#: ``math.sumprod`` (Python 3.12) where there is one: the dot product in C, several times faster
_sumprod: Callable[[Sequence[float], Sequence[float]], float] = getattr(math, "sumprod", _dot)


def check_vector(vector: object) -> list[float]:
    """A vector to store: a sequence of numbers (as ``set_embedding`` takes it)."""
    if isinstance(vector, (str, bytes)) or not isinstance(vector, Sequence):
        raise TypeError("vector must be a sequence of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector):
        raise TypeError("vector must be a sequence of numbers")
    return [float(v) for v in vector]


def vector_document(mailbox_id: str, message: Mapping[str, Any], embedding: list[float]) -> dict[str, Any]:
    """The ``vectors`` document of one message: the one ``set_embedding`` writes."""
    return {
        "_id": message["_id"],
        "mailboxId": mailbox_id,
        "messageKey": message["messageKey"],
        "threadKey": message["threadKey"],
        "embedding": embedding,
    }


def cosine(a: Sequence[float], b: Sequence[float], norm_a: float | None = None) -> float | None:
    """Cosine similarity; None when undefined (lengths differ, or either vector is zero).

    ``norm_a``: ``a``'s length, when the caller compares one vector with many.
    """
    if len(a) != len(b):
        return None
    norms = (math.hypot(*a) if norm_a is None else norm_a) * math.hypot(*b)
    if norms == 0.0 or not math.isfinite(norms):
        return None
    return float(_sumprod(a, b)) / norms


class NearestVectors:
    """The best ``limit`` candidates offered so far, by cosine to ``query`` (ties: smaller ``_id``).

    Memory is bounded by ``limit`` whatever the number offered. A stored vector of another
    length (an embedding model was changed) or a zero vector is not a candidate; ``skipped``
    counts them.
    """

    def __init__(self, query: Sequence[float], limit: int) -> None:
        self.query = list(query)
        self.query_norm = math.hypot(*self.query)
        self.limit = limit
        self.examined = 0
        self.skipped = 0
        self._heap: list[tuple[float, _Reversed, str]] = []

    def offer(self, _id: str, embedding: Any) -> None:
        self.examined += 1
        similarity = cosine(self.query, embedding, self.query_norm) if isinstance(embedding, list) else None
        if similarity is None:
            self.skipped += 1
            return
        entry = (similarity, _Reversed(_id), _id)
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, entry)
        elif entry > self._heap[0]:
            heapq.heapreplace(self._heap, entry)

    def results(self) -> list[dict[str, Any]]:
        """``{"_id", "score"}`` best first; the score is Atlas's ``(1 + cosine) / 2``."""
        ranked = sorted(self._heap, reverse=True)
        return [{"_id": _id, "score": (1.0 + similarity) / 2.0} for similarity, _, _id in ranked]


class _Reversed:
    """Orders ``_id`` strings backwards, so that on equal similarity the smaller ``_id`` ranks higher."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Reversed) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def mailbox_id_range(mailbox_id: str) -> dict[str, str]:
    """Every ``_id`` of one mailbox (``<mailboxId>:<key>``) as a range on the ``_id`` index."""
    return {"$gte": mailbox_id + ":", "$lt": mailbox_id + ";"}


def atlas_index_pipeline() -> list[dict[str, Any]]:
    """Lists the Atlas vector index on ``vectors`` (refused by servers that are not Atlas)."""
    return [{"$listSearchIndexes": {"name": ATLAS_VECTOR_INDEX_NAME}}]
