"""Typed shapes of what the store takes and gives back, for a user's ``mypy --strict``.

``NormalizedEmail`` and its parts follow the AECS-1 schema
(``normalized-email.schema.json``): ``messageId`` and ``threadId`` are required, everything
the schema does not require is ``NotRequired``, and a field the spec documents as ``X | null``
is typed ``X | None``. Where the store gives back ``None`` for a field the schema leaves
non-nullable (``metadata.from`` of a message without a sender, ``processing.processedAt`` of an
object stored without one), the type says ``| None`` too: these types describe the objects the
store actually returns.

``x_`` extension fields (allowed at every level by AECS-1 §9) cannot be declared in a
``TypedDict``: the store accepts any ``Mapping[str, Any]`` as well, so a dict with ``x_`` fields
still type-checks as input, and reads return them at runtime (read them with
``cast(Mapping[str, Any], email)["x_..."]``).

The read records (``MessageSummary``, ``ContextEntry``, ``ThreadSummary``, ``SearchHit``,
``SemanticHit``) are the small dicts the list reads return, all keys always present.
"""

from __future__ import annotations

import datetime as _dt
from typing import NotRequired, Protocol, TypedDict

__all__ = [
    "Address",
    "Attachment",
    "Content",
    "ContextEntry",
    "MessageSummary",
    "Metadata",
    "NormalizedEmail",
    "Processing",
    "SearchHit",
    "SemanticHit",
    "Thread",
    "ThreadSummary",
]


class Address(TypedDict):
    """A mailbox: ``email`` (at least ``a@b``) and an optional display name."""

    email: str
    name: NotRequired[str | None]


# "from" is a keyword: the functional form is the only way to name the field
Metadata = TypedDict(
    "Metadata",
    {
        "from": NotRequired[Address | None],
        "to": NotRequired[list[Address]],
        "cc": NotRequired[list[Address]],
        "bcc": NotRequired[list[Address]],
        "subject": NotRequired[str | None],
        "date": NotRequired[str | None],  # ISO 8601 UTC, null when the Date header is absent or unparseable
        "timestamp": NotRequired[int | None],  # Unix seconds, null when date is
    },
)
"""The headers AECS-1 keeps (``metadata``): ``from``, ``to``, ``cc``, ``bcc``, ``subject``, ``date``
(ISO 8601 UTC) and ``timestamp`` (Unix seconds); ``date`` and ``timestamp`` are null when the Date
header is absent or unparseable."""


class Content(TypedDict, total=False):
    """The bodies: ``rawFull`` (base64 of the whole message), ``raw``, ``html``, ``text``,
    ``clean`` (quotes and signature removed) and ``forAI``."""

    rawFull: str | None
    raw: str | None
    html: str | None
    text: str | None
    clean: str | None
    forAI: str | None


class Thread(TypedDict, total=False):
    """Threading (``thread``): ``position`` in the conversation (0 = earliest; null where it is
    not computed), ``inReplyTo`` and ``references`` (Message-IDs without angle brackets, earliest
    first)."""

    position: int | None
    inReplyTo: str | None
    references: list[str]


class Attachment(TypedDict):
    """One MIME attachment's metadata (the bytes are stored apart): ``filename``, ``contentType``,
    ``size`` in bytes, ``id`` (``<messageId>:<index>`` in MIME order) and ``cid`` (Content-ID of an
    inline part)."""

    filename: str
    contentType: str
    size: int
    id: NotRequired[str | None]
    cid: NotRequired[str | None]
    extractedText: NotRequired[str | None]  # the first 4,000 characters read from it


class Processing(TypedDict, total=False):
    """How the object was made (``processing``): ``processedAt`` (ISO 8601 UTC), ``specVersion``
    (e.g. ``"1.1"``) and ``cleanFallback`` (AECS-1.1: ``clean`` fell back to ``text``)."""

    processedAt: str | None
    specVersion: str | None
    cleanFallback: bool | None  # AECS-1.1: clean fell back to text (the store keeps it)
    attachmentErrors: list[dict[str, str]]  # {filename, message}: attachments not read, and why


class NormalizedEmail(TypedDict):
    """An AECS-1 NormalizedEmail."""

    messageId: str
    threadId: str
    metadata: NotRequired[Metadata]
    content: NotRequired[Content]
    thread: NotRequired[Thread]
    attachments: NotRequired[list[Attachment]]
    processing: NotRequired[Processing]


# --- what the list reads return -------------------------------------------------------------------

MessageSummary = TypedDict(
    "MessageSummary",
    {
        "messageId": str,
        "threadId": str,
        "subject": str | None,
        "from": Address | None,
        "date": str | None,
        "ts": int,
        "inReplyTo": str | None,
        "attachmentCount": int,
        "tags": list[str],
    },
)
"""One message of ``list_messages``, ``with_participant`` and ``replies_to``."""
MessageSummary.__doc__ = "One message of ``list_messages``, ``with_participant`` and ``replies_to``."

ContextEntry = TypedDict(
    "ContextEntry",
    {
        "messageId": str,
        "from": Address | None,
        "subject": str | None,
        "date": str | None,
        "ts": int,
        "forAI": str | None,
        "position": int,
        "tags": list[str],
        # with thread_context(..., attachments=True): the attachments' text (attachments_for_ai)
        "attachmentsForAI": NotRequired[str | None],
    },
)
"""One message of ``thread_context``: what a prompt needs, with its position in the thread."""
ContextEntry.__doc__ = "One message of ``thread_context``: what a prompt needs, with its position in the thread."


class ThreadSummary(TypedDict):
    """One thread of ``list_threads``."""

    threadId: str
    subject: str | None
    messageCount: int
    firstTs: int
    lastTs: int
    firstMessageKey: str
    lastMessageKey: str
    #: the union of its messages' tags, sorted
    tags: list[str]


class SearchHit(TypedDict):
    """One result of ``search``: newest first, or best first with ``sort="relevance"``
    (``score``: the engine's, higher is better; None where it does not rank)."""

    messageId: str
    threadId: str
    subject: str | None
    ts: int
    snippet: str
    score: float | None
    #: the message's tags, sorted (``$seen`` read, ``$flagged``...; none: unread)
    tags: list[str]


class SemanticHit(TypedDict):
    """One result of ``semantic_search``, nearest first."""

    messageId: str
    subject: str | None
    ts: int
    score: float | None


class SourcedMessage(Protocol):
    """A message as a mail source hands it over (``aecs_mongo.RawMessage``): its bytes, and the
    date the source gives it (``store_many``/``store_iter`` store ``data`` with ``received_at``)."""

    @property
    def data(self) -> bytes: ...

    @property
    def received_at(self) -> _dt.datetime | None: ...
