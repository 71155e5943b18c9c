"""The documents of raw mail, in the caller's process or in a parse worker (``asynchronous/parse_pool.py``).

:func:`build_raw` is ``store``'s raw path: normalized, kept byte-exact; :func:`build_chunk` runs
it over a worker's share of a batch and returns each message's documents or its typed error in
a form that crosses a process boundary (:func:`restore_error` makes the error again: some take
keyword-only arguments, which pickling an exception does not keep).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AecsMongoError
from ..pure.documents import MAX_DOCUMENT_BYTES, MessageDocuments, build_documents
from .dates import received_timestamp
from .parse import parse_email

__all__ = ["PortableError", "RawJob", "RawSpec", "build_chunk", "build_raw", "fallback_ts", "restore_error"]


def fallback_ts(raw: bytes | None, received_at: _dt.datetime | None) -> int | None:
    """The sort time of a message without a usable Date: the newest Received header's date,
    else the source's own date (``received_at``: an mbox From_ line, a file's time, IMAP
    INTERNALDATE); None: ``processedAt`` then (the processing time, a last resort)."""
    if raw is not None:
        found = received_timestamp(raw)
        if found is not None:
            return found
    if received_at is None:
        return None
    if not isinstance(received_at, _dt.datetime):
        raise TypeError(f"received_at must be a datetime, not {type(received_at).__name__}")
    if received_at.tzinfo is None:
        raise ValueError("received_at must be an aware datetime (UTC if unsure)")
    return int(received_at.timestamp())


@dataclass(frozen=True)
class RawSpec:
    """What building a raw message's documents needs of the store (picklable)."""

    mailbox_id: str
    owner_addresses: frozenset[str]
    for_ai_max_chars: int
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    #: keep ``raw.eml`` whole (the store's ``whole_raw``)
    whole_raw: bool = False


def build_raw(
    spec: RawSpec,
    raw: bytes,
    attachments: Sequence[bytes | None] | None,
    uidl: str | None,
    received_at: _dt.datetime | None,
) -> MessageDocuments:
    """The documents of raw bytes: normalized, kept byte-exact (``writing.build``'s raw path)."""
    parsed = parse_email(raw, for_ai_max_chars=spec.for_ai_max_chars)
    undated = parsed.email["metadata"].get("timestamp") is None
    return build_documents(
        parsed.email,
        mailbox_id=spec.mailbox_id,
        owner_addresses=spec.owner_addresses,
        raw_bytes=raw,
        attachment_data=attachments if attachments is not None else parsed.attachment_data,
        attachment_encoded=None if attachments is not None else parsed.attachment_encoded,
        whole_raw=spec.whole_raw,
        list_id=parsed.list_id,
        uidl=uidl,
        raw_from_full=True,
        max_document_bytes=spec.max_document_bytes,
        fallback_ts=fallback_ts(raw, received_at) if undated else None,
    )


#: one message for a worker: its index in the input, its bytes, its source's date
RawJob = tuple[int, bytes, "_dt.datetime | None"]
#: a typed error as it crosses the process boundary (some take keyword-only arguments, which
#: pickling an exception does not keep): its class, args and attributes
PortableError = tuple[type[AecsMongoError], tuple[Any, ...], dict[str, Any]]


def build_chunk(spec: RawSpec, jobs: list[RawJob]) -> list[tuple[int, MessageDocuments | None, PortableError | None]]:
    out: list[tuple[int, MessageDocuments | None, PortableError | None]] = []
    for index, raw, received_at in jobs:
        try:
            out.append((index, build_raw(spec, raw, None, None, received_at), None))
        except AecsMongoError as exc:
            out.append((index, None, (type(exc), exc.args, dict(vars(exc)))))
    return out


def restore_error(error: PortableError) -> AecsMongoError:
    cls, args, state = error
    exc = AecsMongoError.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc
