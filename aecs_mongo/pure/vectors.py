"""Vectors: their stored form, the blocks of quantized copies, and the complete exact search. Pure.

**Stored form.** One ``vectors`` document per message holds its vector as a BSON binData vector
(subtype 9, the form PyMongo's ``Binary.from_vector`` writes and Atlas Vector Search indexes):
``embedding`` in float32, a ``rev`` (an ObjectId, new on every write) and, while the vector is
*unsealed*, a quantized copy for the first pass of the exact search: ``int8`` (each value
``round(x / max|x| * 127)``), with ``int8Scale`` and ``int8Error`` such that for any unit vector
``u`` the cosine of ``u`` and the stored vector lies within ``int8Scale * (u · int8) ± int8Error``.
A zero vector (no cosine) has ``int8Scale`` 0. Vectors written by earlier releases (a BSON array
of doubles in ``embedding``, no ``int8``) are still read; ``reindex()`` or the next
``set_embedding`` rewrites them.

**Blocks.** The embedded server's cost is per document read (about 80 µs), so a first pass over
one document per vector costs seconds at 100,000 vectors. Once ``BLOCK_VECTORS`` vectors of a
mailbox are unsealed, they are *sealed*: their quantized copies are packed into one
``vector_blocks`` document (``ids``, the ``int8`` rows back to back, ``scales`` and ``errors`` as
float64 arrays) and each vector document gets ``block`` (the block's ``seq``) in place of its own
copy. A first pass then reads about one document per thousand vectors. The rules that keep it
exact whatever crashes or races happen (``seal``, in ``asynchronous/embeddings.py``, follows them):

- a block's ``seq`` is taken (its empty document inserted) *before* the revs of its vectors are
  checked, and the block is filled, then the vectors marked, only with the revs that still match;
- any write of a vector makes it unsealed again (a new document, no ``block``);
- so an unsealed vector's own copy wins over every block, and otherwise the block with the
  highest ``seq`` that lists the vector holds its current copy. Entries of deleted or rewritten
  vectors are harmless (the rescoring reads the current float32 vector, or none) and are dropped
  by ``reindex()`` (``compact_plan``).

**Exact search** (``ExactSearch``): a first pass over the quantized copy of every vector of the
mailbox (or thread) gives each an approximate cosine and a proven upper bound; the float32
vectors of the best candidates are then read and scored exactly, in batches, until no vector
left unread has an upper bound that could still reach the ``limit``-th exact score. The result
is the exact top ``limit`` (no recall loss, whatever the data), and usually costs one read of
the blocks plus one read of a few hundred float32 vectors. The first pass runs in numpy
when it is installed (``aecs-mongo[vectors]``) and in pure Python otherwise (same results,
slower); ``AECS_MONGO_NUMPY=0`` forces the pure-Python path. Scores are on Atlas's scale for
cosine, ``(1 + cosine) / 2`` in [0, 1], so results from both engines read the same.
"""

from __future__ import annotations

import heapq
import math
import operator
import os
import sys
from array import array
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from bson.binary import VECTOR_SUBTYPE, Binary, BinaryVectorDtype
from bson.objectid import ObjectId

from .indexes import ATLAS_VECTOR_INDEX_NAME

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_VECTORS",
    "FLOAT32_MAX",
    "NUMPY_SWITCH",
    "READ_BATCH",
    "RESCORE_BATCH",
    "VECTOR_ENGINES",
    "WRITE_BATCH",
    "ExactSearch",
    "NearestVectors",
    "atlas_index_pipeline",
    "block_document",
    "block_id",
    "block_rows",
    "check_query_vector",
    "check_vector",
    "compact_plan",
    "cosine",
    "counter_id",
    "decode_vector",
    "encode_float32",
    "first_pass_projection",
    "kept_block",
    "numpy_backend",
    "per_block",
    "plan_blocks",
    "quantize",
    "seal_projection",
    "sealed_update",
    "storable",
    "unsealed_selector",
    "vector_document",
    "vector_documents",
]

#: ``vector_engine`` values: Atlas ``$vectorSearch``, the complete exact search, or pick (Atlas
#: where its vector index is queryable, else exact).
VECTOR_ENGINES = ("auto", "atlas", "exact")

#: The largest finite float32: a value beyond it cannot be stored as a float32 vector.
FLOAT32_MAX = 3.4028234663852886e38
#: Environment switch: ``AECS_MONGO_NUMPY=0`` runs vector search and quantization in pure Python
#: even where numpy is installed (CI tests both paths this way).
NUMPY_SWITCH = "AECS_MONGO_NUMPY"
#: Float32 vectors read per rescoring round of the exact search.
RESCORE_BATCH = 200
#: Ids per ``$in`` read: small, as the embedded server's cost of one ``$in`` grows with the square
#: of its length.
READ_BATCH = 50
#: Messages per read and per write of ``set_embeddings`` and of the rewrite of old vectors.
WRITE_BATCH = 500
#: Vectors written by one store between two checks of whether a block is due (a store's first
#: write checks too). A check is one count of at most ``BLOCK_VECTORS`` index entries.
SEAL_CHECK_EVERY = 100
#: Vectors per block (fewer where ``dims`` is large: a block holds at most ``BLOCK_BYTES`` of rows).
BLOCK_VECTORS = 1000
#: The largest int8 payload of one block: far below BSON's 16 MB document limit.
BLOCK_BYTES = 4 * 1024 * 1024
#: Added to every upper bound: covers float64 rounding in the bound and in the exact score.
_SLACK = 1e-9
#: First-pass rows scored at once by numpy (bounds the memory of a pass to one chunk).
_CHUNK = 4096

_FLOAT32 = BinaryVectorDtype.FLOAT32.value[0]
_INT8 = BinaryVectorDtype.INT8.value[0]
_LITTLE = sys.byteorder == "little"


def numpy_backend() -> ModuleType | None:
    """numpy, where installed and not switched off by ``AECS_MONGO_NUMPY=0``; else None."""
    if os.environ.get(NUMPY_SWITCH, "").strip().lower() in {"0", "false", "no", "off"}:
        return None
    try:
        import numpy
    except ImportError:
        return None
    return numpy


# --- checking ------------------------------------------------------------------------------------


def check_vector(vector: object) -> list[float]:
    """A vector to store: a sequence of numbers (as ``set_embedding`` takes it), each finite and
    within float32 range (TypeError for non-numbers, ValueError for values float32 cannot hold)."""
    if isinstance(vector, (str, bytes)) or not isinstance(vector, Sequence):
        raise TypeError("vector must be a sequence of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector):
        raise TypeError("vector must be a sequence of numbers")
    values = [float(v) for v in vector]
    if not all(math.isfinite(v) and abs(v) <= FLOAT32_MAX for v in values):
        raise ValueError("vector values must be finite and within float32 range (about ±3.4e38)")
    return values


def check_query_vector(vector: object) -> list[float]:
    """A non-empty sequence of numbers, not all zero (cosine is undefined for the zero vector)."""
    if isinstance(vector, (str, bytes)) or not isinstance(vector, Sequence):
        raise TypeError("vector must be a sequence of numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector):
        raise TypeError("vector must be a sequence of numbers")
    values = [float(v) for v in vector]
    if not values or not any(values) or not all(math.isfinite(v) for v in values):
        raise ValueError("vector must be non-empty, finite and not all zeros")
    return values


# --- the stored form -------------------------------------------------------------------------------


def encode_float32(values: Sequence[float]) -> Binary:
    """A BSON binData float32 vector (PyMongo's ``Binary.from_vector``)."""
    return Binary.from_vector(list(values), BinaryVectorDtype.FLOAT32)


def _float32_values(values: Sequence[float]) -> list[float]:
    """``values`` rounded to float32, as the stored vector holds them."""
    return array("f", values).tolist()


def decode_vector(stored: object) -> list[float] | None:
    """A stored ``embedding`` as floats: a binData float32 vector, or an old BSON array of numbers.

    None for anything else (another binData type, a corrupt value): not a candidate.
    """
    if isinstance(stored, list):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in stored):
            return [float(v) for v in stored]
        return None
    if isinstance(stored, Binary) and stored.subtype == VECTOR_SUBTYPE and len(stored) >= 2:
        data = bytes(stored)
        if data[0] == _FLOAT32 and (len(data) - 2) % 4 == 0:
            values = array("f")
            values.frombytes(data[2:])
            if not _LITTLE:  # pragma: no cover
                values.byteswap()
            return values.tolist()
    return None


def storable(stored: object) -> list[float] | None:
    """An old array ``embedding`` as values to store again as float32; None if it cannot be."""
    values = decode_vector(stored)
    if values is None or not all(math.isfinite(v) and abs(v) <= FLOAT32_MAX for v in values):
        return None
    return values


def quantize(values: Sequence[float]) -> tuple[bytes, float, float]:
    """``(int8 values, scale, error)`` of one vector (already rounded to float32); see the module doc.

    ``scale * (u · q) - error <= cosine(u, x) <= scale * (u · q) + error`` for every unit ``u``.
    """
    peak = max((abs(v) for v in values), default=0.0)
    norm = math.sqrt(math.fsum(v * v for v in values))
    if peak == 0.0 or norm == 0.0:
        return bytes(len(values)), 0.0, 0.0
    step = peak / 127.0
    q = [round(v / peak * 127.0) for v in values]
    residual = math.sqrt(math.fsum((v - n * step) ** 2 for v, n in zip(values, q, strict=True)))
    return array("b", q).tobytes(), step / norm, residual / norm


def _quantize_many(rows: list[list[float]]) -> list[tuple[bytes, float, float]]:
    """``quantize`` of each row (float32 values); numpy where available, the same numbers either way."""
    np = numpy_backend()
    if np is None or not rows or len({len(r) for r in rows}) != 1:
        return [quantize(r) for r in rows]
    from .vectors_np import quantize_rows

    return quantize_rows(np, rows)


def vector_documents(
    mailbox_id: str, pairs: Iterable[tuple[Mapping[str, Any], Sequence[float]]]
) -> list[dict[str, Any]]:
    """The ``vectors`` documents of several messages: ``(message, checked vector)`` pairs."""
    messages, vectors = [], []
    for message, vector in pairs:
        messages.append(message)
        vectors.append(_float32_values(vector))
    documents = []
    for message, values, (q, scale, error) in zip(messages, vectors, _quantize_many(vectors), strict=True):
        documents.append(
            {
                "_id": message["_id"],
                "mailboxId": mailbox_id,
                "messageKey": message["messageKey"],
                "threadKey": message["threadKey"],
                "embedding": encode_float32(values),
                "int8": Binary(bytes((_INT8, 0)) + q, VECTOR_SUBTYPE),
                "int8Scale": scale,
                "int8Error": error,
                "rev": ObjectId(),
            }
        )
    return documents


def vector_document(mailbox_id: str, message: Mapping[str, Any], embedding: Sequence[float]) -> dict[str, Any]:
    """The ``vectors`` document of one message: the one ``set_embedding`` writes."""
    (document,) = vector_documents(mailbox_id, [(message, embedding)])
    return document


def first_pass_projection() -> dict[str, int]:
    """What the first pass of the exact search reads of each unsealed vector: the quantized copy only."""
    return {"int8": 1, "int8Scale": 1, "int8Error": 1}


# --- blocks ------------------------------------------------------------------------------------------


def unsealed_selector(mailbox_id: str) -> dict[str, Any]:
    """The mailbox's unsealed vectors (no ``block``), on the ``aecs_vectors_unsealed`` index."""
    return {"mailboxId": mailbox_id, "block": None}


def seal_projection() -> dict[str, int]:
    """What sealing reads of each unsealed vector: its quantized copy and its ``rev``."""
    return {**first_pass_projection(), "rev": 1}


def block_id(mailbox_id: str, seq: int) -> str:
    """``<mailboxId>:<seq, 12 digits>``: unique across mailboxes, as the suffix has one length."""
    return f"{mailbox_id}:{seq:012d}"


def counter_id(mailbox_id: str) -> str:
    """``<mailboxId>:next``: the mailbox's block counter (``next``: the last ``seq`` taken), kept in
    ``vector_blocks`` beside the blocks (it has no ``ids``: a search passes over it)."""
    return f"{mailbox_id}:next"


def per_block(dims: int) -> int:
    """How many vectors of ``dims`` dimensions one block holds."""
    return max(1, min(BLOCK_VECTORS, BLOCK_BYTES // max(dims, 1)))


#: One sealable vector: ``(_id, int8 values, scale, error, rev)``.
Sealable = tuple[str, bytes, float, float, Any]


def _sealable(row: Mapping[str, Any]) -> Sealable | None:
    q, scale, error = row.get("int8"), row.get("int8Scale"), row.get("int8Error")
    if (
        not isinstance(q, Binary)
        or q.subtype != VECTOR_SUBTYPE
        or len(q) < 3
        or q[0] != _INT8
        or not isinstance(scale, float)
        or not isinstance(error, float)
    ):
        return None  # an old array vector has no copy to seal: ``reindex()`` rewrites it first
    return (row["_id"], bytes(q)[2:], scale, error, row.get("rev"))


def plan_blocks(rows: Iterable[Mapping[str, Any]], *, partial: bool = False) -> list[list[Sealable]]:
    """The blocks to seal from unsealed rows (``seal_projection``): one length per block, full
    blocks only unless ``partial`` (then the rest too). Rows without a quantized copy are left."""
    by_dims: dict[int, list[Sealable]] = {}
    for row in rows:
        entry = _sealable(row)
        if entry is not None:
            by_dims.setdefault(len(entry[1]), []).append(entry)
    plans = []
    for dims, entries in sorted(by_dims.items()):
        size = per_block(dims)
        for start in range(0, len(entries), size):
            chunk = entries[start : start + size]
            if len(chunk) == size or partial:
                plans.append(chunk)
    return plans


def block_document(mailbox_id: str, seq: int, entries: Sequence[Sealable]) -> dict[str, Any]:
    """One block: the quantized copies of ``entries`` (one length) packed into one document."""
    dims = len(entries[0][1]) if entries else 0
    return {
        "_id": block_id(mailbox_id, seq),
        "mailboxId": mailbox_id,
        "seq": seq,
        "dims": dims,
        "count": len(entries),
        "ids": [e[0] for e in entries],
        "int8": Binary(b"".join(e[1] for e in entries)),
        "scales": Binary(_little_doubles(e[2] for e in entries)),
        "errors": Binary(_little_doubles(e[3] for e in entries)),
    }


def _little_doubles(values: Iterable[float]) -> bytes:
    """``values`` as little-endian float64s (the byte order ``_doubles`` reads back)."""
    packed = array("d", values)
    if not _LITTLE:  # pragma: no cover - big-endian machines
        packed.byteswap()
    return packed.tobytes()


def _doubles(data: object, count: int) -> list[float] | None:
    if not isinstance(data, bytes) or len(data) != 8 * count:
        return None
    values = array("d")
    values.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        values.byteswap()
    return values.tolist()


#: A block read back: ``(ids, int8 rows back to back, dims, scales, errors)``.
BlockRows = tuple[list[str], bytes, int, list[float], list[float]]


def block_rows(block: Mapping[str, Any]) -> BlockRows | None:
    """A block's rows, or None when it is not a well-formed block (its vectors are then read one
    by one, not lost; the counter document has none)."""
    ids, q, dims = block.get("ids"), block.get("int8"), block.get("dims")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not isinstance(dims, int):
        return None
    scales, errors = _doubles(block.get("scales"), len(ids)), _doubles(block.get("errors"), len(ids))
    if scales is None or errors is None or not isinstance(q, bytes) or len(q) != dims * len(ids):
        return None
    return ids, bytes(q), dims, scales, errors


def sealed_update(seq: int) -> dict[str, Any]:
    """Marks a vector sealed in block ``seq``: its own quantized copy now lives there."""
    return {"$set": {"block": seq}, "$unset": {"int8": "", "int8Scale": "", "int8Error": ""}}


def compact_plan(ids: Sequence[str], live: Container[str]) -> list[int] | None:
    """The entries of a block (its ``ids``) to keep; None when every entry is kept. ``live``: the
    vectors sealed in this block, and every unsealed vector.

    An entry is dropped when its vector is gone, or sealed in another block (which then holds
    its current copy). An unsealed vector's entry stays: a sealing may be marking it right now.
    """
    keep = [i for i, _id in enumerate(ids) if _id in live]
    return None if len(keep) == len(ids) else keep


def kept_block(block: Mapping[str, Any], keep: Sequence[int]) -> dict[str, Any] | None:
    """``block`` with only the entries ``keep`` (not empty); None when it is malformed."""
    rows = block_rows(block)
    if rows is None:
        return None
    ids, q, dims, scales, errors = rows
    entries = [(ids[i], q[i * dims : (i + 1) * dims], scales[i], errors[i], None) for i in keep]
    return block_document(str(block["mailboxId"]), int(block["seq"]), entries)


# --- exact search -----------------------------------------------------------------------------------


def _dot(a: Iterable[float], b: Iterable[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


#: ``math.sumprod`` (Python 3.12) where there is one: the dot product in C, several times faster
_sumprod: Callable[[Iterable[float], Iterable[float]], float] = getattr(math, "sumprod", _dot)


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


class ExactSearch:
    """The exact top ``limit`` vectors by cosine to ``query``, in two passes (see the module doc).

    The caller feeds the first pass: the unsealed vectors first (``offer``: ``_id`` and the
    fields of ``first_pass_projection``), then the blocks newest first (``offer_block``); a
    vector already offered is not offered again, so its newest copy is the one used. Then, while
    ``wanted()`` names ids, it reads their ``embedding``, hands each to ``rescore`` and calls
    ``asked``; ``results()`` is then exact. ``offer_exact`` scores a float32 vector at once (a
    thread's few vectors). Memory: a few numbers per vector plus one block of quantized rows.
    ``examined`` counts the vectors considered (a block entry whose vector turns out deleted is
    taken back); ``skipped`` the vectors that cannot be compared (another length, a zero vector,
    an unreadable value).
    """

    def __init__(self, query: Sequence[float], limit: int, *, numpy: ModuleType | None = None) -> None:
        values = check_query_vector(query)
        norm = math.sqrt(math.fsum(v * v for v in values))
        self.unit = [v / norm for v in values]
        self.limit = limit
        self.numpy = numpy
        self.examined = 0
        self.skipped = 0
        self._seen: set[str] = set()
        self._ids: list[str] = []
        self._upper: list[float] = []  # a proven upper bound of each first-pass row's cosine
        self._chunk: list[tuple[str, bytes, float, float]] = []
        self._unknown: list[str] = []  # rows with no quantized copy (old array vectors): read them
        self._exact: dict[str, float] = {}
        self._done: set[str] = set()
        self._order: list[int] | None = None
        self._next = 0

    def _first(self, _id: str) -> bool:
        """Counts ``_id`` as considered, unless it was already (a newer copy came first)."""
        if _id in self._seen:
            return False
        self._seen.add(_id)
        self.examined += 1
        return True

    def offer(self, row: Mapping[str, Any]) -> None:
        """One first-pass row: ``_id``, and ``int8``/``int8Scale``/``int8Error`` where present."""
        _id = row["_id"]
        if not self._first(_id):
            return
        q, scale, error = row.get("int8"), row.get("int8Scale"), row.get("int8Error")
        if q is None:
            self._unknown.append(_id)
            return
        if (
            not isinstance(q, Binary)
            or q.subtype != VECTOR_SUBTYPE
            or len(q) != len(self.unit) + 2
            or q[0] != _INT8
            or not isinstance(scale, float)
            or not isinstance(error, float)
            or scale <= 0.0
        ):
            self.skipped += 1  # another length, a zero vector (scale 0) or not ours
            return
        self._chunk.append((_id, bytes(q)[2:], scale, error))
        if len(self._chunk) >= _CHUNK:
            self._flush()

    def offer_block(self, block: Mapping[str, Any], room: int | None = None) -> int:
        """The entries of one block not offered before, at most ``room`` of them; returns how many
        such entries were left out for want of room (0: the whole block was considered).

        A malformed block's vectors are read one by one (as old vectors are), not lost.
        """
        rows = block_rows(block)
        if rows is None:
            unseen = [i for i in (block.get("ids") or []) if isinstance(i, str) and i not in self._seen]
            taken = unseen[:room] if room is not None else unseen
            for _id in taken:
                self._first(_id)
                self._unknown.append(_id)
            return len(unseen) - len(taken)
        ids, q, dims, scales, errors = rows
        fresh: Sequence[int]
        if (room is None or room >= len(ids)) and self._seen.isdisjoint(ids):
            fresh, left = range(len(ids)), 0  # the usual block: nothing in it was offered before
            self._seen.update(ids)
            self.examined += len(ids)
        else:
            unseen_rows = [i for i, _id in enumerate(ids) if _id not in self._seen]
            fresh = unseen_rows[:room] if room is not None else unseen_rows
            left = len(unseen_rows) - len(fresh)
            for i in fresh:
                self._first(ids[i])
        if dims != len(self.unit):
            usable: Sequence[int] = []
        elif isinstance(fresh, range) and min(scales, default=1.0) > 0.0:
            usable = fresh
        else:
            usable = [i for i in fresh if scales[i] > 0.0]
        self.skipped += len(fresh) - len(usable)
        if not usable:
            return left
        if self.numpy is not None:
            from .vectors_np import block_upper_bounds

            bounds = block_upper_bounds(self.numpy, self.unit, q, dims, usable, scales, errors, _SLACK)
        else:
            unit, view = self.unit, memoryview(q).cast("b")
            bounds = [scales[i] * _sumprod(unit, view[i * dims : (i + 1) * dims]) + errors[i] + _SLACK for i in usable]
        self._ids.extend(ids[i] for i in usable)
        self._upper.extend(bounds)
        return left

    def offer_exact(self, _id: str, stored: object) -> None:
        """A vector scored at once from its float32 value (no first pass)."""
        if self._first(_id):
            self.rescore(_id, stored)

    def _flush(self) -> None:
        if not self._chunk:
            return
        if self.numpy is not None:
            from .vectors_np import upper_bounds

            bounds = upper_bounds(self.numpy, self.unit, self._chunk, _SLACK)
        else:
            unit = self.unit
            bounds = [
                scale * _sumprod(unit, memoryview(q).cast("b")) + error + _SLACK for _, q, scale, error in self._chunk
            ]
        self._ids.extend(_id for _id, _, _, _ in self._chunk)
        self._upper.extend(bounds)
        self._chunk = []

    def wanted(self) -> list[str]:
        """The next ids whose float32 vector must be read (at most ``RESCORE_BATCH``); [] when done."""
        self._flush()
        if self._unknown:
            first, self._unknown = self._unknown[:RESCORE_BATCH], self._unknown[RESCORE_BATCH:]
            return first
        if self._order is None:
            upper = self._upper
            if self.numpy is not None:
                self._order = self.numpy.argsort(-self.numpy.asarray(upper), kind="stable").tolist()
            else:
                self._order = sorted(range(len(upper)), key=lambda i: -upper[i])
        threshold = self._threshold()
        batch: list[str] = []
        order, upper, ids = self._order, self._upper, self._ids
        while self._next < len(order) and len(batch) < RESCORE_BATCH:
            i = order[self._next]
            if upper[i] < threshold:
                self._next = len(order)  # sorted by bound: no later row can reach the threshold
                break
            self._next += 1
            if ids[i] not in self._done:
                batch.append(ids[i])
        return batch

    def _threshold(self) -> float:
        """The ``limit``-th best exact cosine so far (-inf while fewer are known)."""
        if len(self._exact) < self.limit:
            return -math.inf
        return heapq.nlargest(self.limit, self._exact.values())[-1]

    def rescore(self, _id: str, stored: object) -> None:
        """One vector read for ``wanted()``: its exact cosine (none if not comparable)."""
        self._done.add(_id)
        values = decode_vector(stored)
        similarity = None if values is None else cosine(self.unit, values, 1.0)
        if similarity is None:
            self.skipped += 1
        else:
            self._exact[_id] = similarity

    def asked(self, ids: Iterable[str]) -> None:
        """Marks ids as read: one not rescored is gone (deleted since it was sealed, or since the
        first pass) and is no result, nor counted as examined."""
        for _id in ids:
            if _id not in self._done:
                self._done.add(_id)
                self.examined -= 1

    def results(self) -> list[dict[str, Any]]:
        """``{"_id", "score"}`` best first (ties: smaller ``_id``); the score is ``(1 + cosine) / 2``."""
        ranked = heapq.nsmallest(self.limit, self._exact.items(), key=lambda item: (-item[1], item[0]))
        return [{"_id": _id, "score": (1.0 + similarity) / 2.0} for _id, similarity in ranked]


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
        values = decode_vector(embedding)
        similarity = None if values is None else cosine(self.query, values, self.query_norm)
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


def atlas_index_pipeline() -> list[dict[str, Any]]:
    """Lists the Atlas vector index on ``vectors`` (refused by servers that are not Atlas)."""
    return [{"$listSearchIndexes": {"name": ATLAS_VECTOR_INDEX_NAME}}]
