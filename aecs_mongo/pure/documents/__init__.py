"""NormalizedEmail <-> the documents and blobs the store writes. Pure: no I/O.

One AECS-1 object becomes three tiers:

- ``messages`` (hot): identity, sort keys, sender, participants, subject, forAI, attachment
  metadata: what every list, thread and LLM-context read touches. A few KB.
- ``bodies`` (warm): text, clean, the address lists with names; read when one message opens.
- GridFS (cold): ``raw.eml`` (byte-exact), ``body.html``, ``att/<idx>``; and ``body.json`` for a
  body too large for one document.

One module per step: ``validation`` (the shape checked, dates and rawFull converted),
``building`` (the documents and blobs of one message), ``threads`` (the thread summaries and
their merge) and ``rebuild`` (the way back: for a stored NormalizedEmail every field comes back
field for field; omitted and ``null`` fields mean the same, AECS-1 §10). This package names what
the rest of the library uses.

Decisions where the spec is silent:

- ``ts`` (the sort key) is ``metadata.timestamp``, else ``fallback_ts`` (the newest Received
  header's date, else the source's own date: the store works it out), else
  ``processing.processedAt`` (the processing time: a last resort), else 0.
- Only ``x_`` fields are kept besides the spec's own; other unknown fields are ignored as §10.6
  asks (``MessageDocuments.ignored``; the store says so once per field name). ``x_`` names
  MongoDB cannot store (``$`` first, a dot, NUL) are refused.
- The hot row cuts display strings (``HOT_TEXT_CHARS``) and keeps them whole in ``bodies``; only
  a ``messages`` document over MongoDB's 16 MiB is refused (the cuts keep the hot row small, and a
  mail store must not turn away mail a mail client shows).
- ``rawSha256`` identifies the bytes of the first copy; other bytes under the same Message-ID are
  kept as variants (``variants.variant_blob_key``) by the store.
- ``metadata.date`` is stored as a BSON date; a value that does not re-render identically (an
  offset of ``+00:00``, microseconds) is kept verbatim beside it so it comes back unchanged.
- ``content.rawFull`` is stored as bytes: the raw bytes given to ``store``, or the string's
  UTF-8 encoding. It comes back decoded as UTF-8, or as latin-1 where the bytes are not UTF-8.
"""

from __future__ import annotations

from .building import HOT_TEXT_CHARS, MAX_DOCUMENT_BYTES, Blob, MessageDocuments, build_documents, derived_fields
from .rebuild import context_entry, message_summary, to_normalized_email
from .threads import (
    fold_thread_summary,
    merge_thread_summaries,
    summary_merge_update,
    thread_summaries,
    thread_summary_from_messages,
    thread_update,
)
from .validation import raw_full_from_bytes, raw_full_to_bytes

__all__ = [
    "HOT_TEXT_CHARS",
    "MAX_DOCUMENT_BYTES",
    "Blob",
    "MessageDocuments",
    "build_documents",
    "context_entry",
    "derived_fields",
    "fold_thread_summary",
    "merge_thread_summaries",
    "message_summary",
    "raw_full_from_bytes",
    "raw_full_to_bytes",
    "summary_merge_update",
    "thread_summaries",
    "thread_summary_from_messages",
    "thread_update",
    "to_normalized_email",
]
