"""The GridFS cold tier as documents. Pure: no I/O.

The store writes GridFS-spec ``files`` and ``chunks`` documents itself instead of going through
a driver's bucket class: the same code then serves PyMongo, PyMongo async and Motor, a file's
``_id`` is its blob key (so a retried upload is a no-op), and chunk ids are derived from the key
(``<key>#<n>``), so re-sending the chunks of an interrupted upload inserts nothing twice. Each
chunk also carries the SHA-256 of its bytes (``sha256``, beside the spec's fields), so the next
upload of that key keeps a chunk an interrupted one left where it holds the very bytes, and sends
only the others. Any GridFS reader (``gridfs.GridFSBucket``, mongofiles) reads what it writes.

An upload is complete once its ``files`` document exists; chunks without one are leftovers of an
interrupted upload, reused or replaced by the next upload of that key, or removed by ``delete``.
Uploads go in statements of at most ``STATEMENT_BYTES`` of chunk data, so a connection cut
mid-upload loses at most one statement's worth and what went before it stays, to be reused.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from bson.binary import Binary

from ..errors import AecsMongoError

__all__ = [
    "CHUNK_SIZE",
    "STATEMENT_BYTES",
    "assemble",
    "chunk_count",
    "chunk_documents",
    "file_document",
    "join_chunks",
    "prefix_filter",
    "statement_groups",
]

#: The GridFS default chunk size (255 KiB), what drivers use.
CHUNK_SIZE = 255 * 1024

#: The most chunk data one upload statement carries (four chunks): what a connection cut while
#: it is on the wire costs an upload, against one round trip per megabyte, which is noise
#: beside the megabyte's own writing.
STATEMENT_BYTES = 1 << 20


def chunk_documents(key: str, data: bytes, chunk_size: int = CHUNK_SIZE) -> list[dict[str, Any]]:
    """The ``chunks`` documents of one blob, ids derived from the key, each with the SHA-256 of
    its bytes."""
    return [
        {
            "_id": f"{key}#{n}",
            "files_id": key,
            "n": n,
            "data": Binary(piece),
            "sha256": Binary(hashlib.sha256(piece).digest()),
        }
        for n, piece in enumerate(data[start : start + chunk_size] for start in range(0, len(data), chunk_size))
    ]


def statement_groups(
    documents: Sequence[Mapping[str, Any]], max_bytes: int = STATEMENT_BYTES
) -> list[list[Mapping[str, Any]]]:
    """``documents`` (chunks) in order, in runs whose ``data`` adds up to at most ``max_bytes``
    (a single chunk larger than that goes alone)."""
    groups: list[list[Mapping[str, Any]]] = []
    size = max_bytes + 1
    for doc in documents:
        length = len(doc["data"])
        if size + length > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(doc)
        size += length
    return groups


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
