"""aecs-mongo: store AECS-1 email in MongoDB and keep it findable.

The public API is what this module exports; everything else is an implementation detail.
"""

from __future__ import annotations

from .asynchronous.store import AsyncMessageStore
from .errors import (
    AecsMongoError,
    DataDirError,
    DispatchError,
    DocumentTooLargeError,
    InputTooLargeError,
    InvalidCursorError,
    InvalidEmailError,
    MailboxAuthError,
    MailboxConnectionError,
    MailboxError,
    NotFoundError,
    ServerFeatureError,
    ToolError,
    UnsafeFieldNameError,
)
from .mail.sinks import EmlDirWriter, MaildirWriter, MailWriter, MboxWriter, open_writer
from .mail.sources import IngestReport, Origin, RawMessage, Skipped, read_messages

# the function shadows the subpackage's name here, on purpose (the public API is the function);
# import the subpackage's other names with ``from aecs_mongo.normalize import ...``
from .normalize import ParsedEmail, normalize, parse_email
from .pure.indexes import IndexReport
from .pure.lifecycle import EraseReport, ExpireReport, ExportedCopy
from .results import ImapFolderReport, ImapSyncReport, MessagePage, SearchResults, StoreResult, ThreadPage
from .synchronous.store import MessageStore
from .types import (
    Address,
    Attachment,
    Content,
    ContextEntry,
    MessageSummary,
    Metadata,
    NormalizedEmail,
    Processing,
    SearchHit,
    SemanticHit,
    Thread,
    ThreadSummary,
)

__version__ = "0.1.0"
"""The package's version (PEP 440), also the distribution's (``pyproject.toml`` reads it here)."""

__all__ = [
    "Address",
    "AecsMongoError",
    "AsyncMessageStore",
    "Attachment",
    "Content",
    "ContextEntry",
    "DataDirError",
    "DispatchError",
    "DocumentTooLargeError",
    "EmlDirWriter",
    "EraseReport",
    "ExpireReport",
    "ExportedCopy",
    "ImapFolderReport",
    "ImapSyncReport",
    "IndexReport",
    "IngestReport",
    "InputTooLargeError",
    "InvalidCursorError",
    "InvalidEmailError",
    "MailWriter",
    "MailboxAuthError",
    "MailboxConnectionError",
    "MailboxError",
    "MaildirWriter",
    "MboxWriter",
    "MessagePage",
    "MessageStore",
    "MessageSummary",
    "Metadata",
    "NormalizedEmail",
    "NotFoundError",
    "Origin",
    "ParsedEmail",
    "Processing",
    "RawMessage",
    "SearchHit",
    "SearchResults",
    "SemanticHit",
    "ServerFeatureError",
    "Skipped",
    "StoreResult",
    "Thread",
    "ThreadPage",
    "ThreadSummary",
    "ToolError",
    "UnsafeFieldNameError",
    "__version__",
    "normalize",
    "open_writer",
    "parse_email",
    "read_messages",
]
