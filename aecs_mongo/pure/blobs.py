"""The GridFS cold tier as documents. Pure: no I/O.

The store writes GridFS-spec ``files`` and ``chunks`` documents itself instead of going through
a driver's bucket class: the same code then serves PyMongo, PyMongo async and Motor, a file's
``_id`` is its blob key (so a retried upload is a no-op), and chunk ids are derived from the key
(``<key>#<n>``), so re-sending the chunks of an interrupted upload inserts nothing twice. Any
GridFS reader (``gridfs.GridFSBucket``, mongofiles) reads what it writes.

An upload is complete once its ``files`` document exists; chunks without one are leftovers of an
interrupted upload, removed by the next upload of that key or by ``delete``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from bson.binary import Binary

from ..errors import AecsMongoError

__all__ = [
    "CHUNK_SIZE",
    "assemble",
    "chunk_count",
    "chunk_documents",
    "file_document",
    "join_chunks",
    "prefix_filter",
]

#: The GridFS default chunk size (255 KiB), what drivers use.
CHUNK_SIZE = 255 * 1024


def chunk_documents(key: str, data: bytes, chunk_size: int = CHUNK_SIZE) -> list[dict[str, Any]]:
    """The ``chunks`` documents of one blob, ids derived from the key."""
    return [
        {"_id": f"{key}#{n}", "files_id": key, "n": n, "data": Binary(data[start : start + chunk_size])}
        for n, start in enumerate(range(0, len(data), chunk_size))
    ]


def chunk_count(length: int, chunk_size: int = CHUNK_SIZE) -> int:
    """How many chunks a blob of ``length`` bytes has."""
    return -(-length // chunk_size)


def file_document(
    key: str, length: int, content_type: str, metadata: Mapping[str, Any], chunk_size: int = CHUNK_SIZE
) -> dict[str, Any]:
    """The ``files`` document that marks an upload complete."""
    return {
        "_id": key,
        "filename": key,
        "length": length,
        "chunkSize": chunk_size,
        "uploadDate": _dt.datetime.now(_dt.UTC).replace(microsecond=0),
        "metadata": {"contentType": content_type, **metadata},
    }


def assemble(file_doc: Mapping[str, Any], chunks: Sequence[Mapping[str, Any]]) -> bytes:
    """Join a blob's chunks (sorted by ``n``), checking them against its ``files`` document."""
    expected = chunk_count(int(file_doc["length"]), int(file_doc["chunkSize"]))
    if [c["n"] for c in chunks] != list(range(expected)):
        raise AecsMongoError(f"GridFS file {file_doc['_id']!r} is missing chunks")
    data = b"".join(bytes(c["data"]) for c in chunks)
    if len(data) != file_doc["length"]:
        raise AecsMongoError(f"GridFS file {file_doc['_id']!r} has {len(data)} bytes, expected {file_doc['length']}")
    return data


def join_chunks(chunks: Sequence[Mapping[str, Any]], length: int) -> bytes | None:
    """A blob's bytes from its chunks (sorted by ``n``) when they are all of it: ``n`` = 0, 1, ...
    and ``length`` bytes in all (a missing chunk breaks the run or shortens the total); None
    otherwise. What ``assemble`` checks without the ``files`` document, given the length."""
    if any(c["n"] != n for n, c in enumerate(chunks)):
        return None
    data = b"".join(c["data"] for c in chunks)
    return data if len(data) == length else None


def prefix_filter(field: str, prefix: str) -> dict[str, Any]:
    """Match every blob key under ``prefix`` as a key range (an index range scan everywhere).

    Blob prefixes end in ``/``; every key under one sorts before the prefix with ``0`` in place
    of that last ``/`` (the next code point), so the range is exact.
    """
    if not prefix:
        raise ValueError("an empty prefix would match every blob")
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return {field: {"$gte": prefix, "$lt": upper}}
