"""aecs-mongo: store AECS-1 email in MongoDB and keep it findable.

The public API is what this module exports; everything else is an implementation detail. The
names are imported on first use (a module ``__getattr__``): ``import aecs_mongo`` and the
command line load only what they touch, so a short command does not import the async driver,
the normalizer or the mail adapters it does not run. ``from aecs_mongo import MessageStore``
works as ever.
"""

from __future__ import annotations

import importlib

# ``typing`` is not imported at run time: the command line's thin client (aecs_mongo.warm.client)
# imports this package first, and typing costs more than the rest of it (mypy knows the name)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .asynchronous.blobstores import AsyncBlobStore
    from .asynchronous.store import AsyncMessageStore
    from .errors import (
        AecsMongoError,
        BlobLocationError,
        BlobMissingError,
        BlobStoreError,
        DatabaseError,
        DatabaseUriError,
        DataDirError,
        DispatchError,
        DocumentTooLargeError,
        InputTooLargeError,
        InvalidCursorError,
        InvalidEmailError,
        InvalidTagError,
        MailboxAuthError,
        MailboxConnectionError,
        MailboxError,
        NotFoundError,
        SearchIndexError,
        SearchQueryError,
        ServerFeatureError,
        ServerUnavailableError,
        ToolError,
        UnsafeFieldNameError,
    )
    from .mail.follow import FileSyncReport, sync_files
    from .mail.sinks import EmlDirWriter, MaildirWriter, MailWriter, MboxWriter, open_writer
    from .mail.sources import IngestReport, Origin, RawMessage, Skipped, read_messages
    from .normalizer import ParsedEmail, normalize, parse_email
    from .pure.attachment_text import attachments_for_ai
    from .pure.indexes import IndexReport
    from .pure.lifecycle import EraseReport, ExpireReport, ExportedCopy
    from .results import (
        ImapFolderReport,
        ImapSyncReport,
        MessagePage,
        SearchResults,
        StoreResult,
        TagReport,
        ThreadPage,
    )
    from .synchronous.blobstores import BlobStore
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
    "AsyncBlobStore",
    "AsyncMessageStore",
    "Attachment",
    "BlobLocationError",
    "BlobMissingError",
    "BlobStore",
    "BlobStoreError",
    "Content",
    "ContextEntry",
    "DataDirError",
    "DatabaseError",
    "DatabaseUriError",
    "DispatchError",
    "DocumentTooLargeError",
    "EmlDirWriter",
    "EraseReport",
    "ExpireReport",
    "ExportedCopy",
    "FileSyncReport",
    "ImapFolderReport",
    "ImapSyncReport",
    "IndexReport",
    "IngestReport",
    "InputTooLargeError",
    "InvalidCursorError",
    "InvalidEmailError",
    "InvalidTagError",
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
    "SearchIndexError",
    "SearchQueryError",
    "SearchResults",
    "SemanticHit",
    "ServerFeatureError",
    "ServerUnavailableError",
    "Skipped",
    "StoreResult",
    "TagReport",
    "Thread",
    "ThreadPage",
    "ThreadSummary",
    "ToolError",
    "UnsafeFieldNameError",
    "__version__",
    "attachments_for_ai",
    "normalize",
    "open_writer",
    "parse_email",
    "read_messages",
    "sync_files",
]

#: Where each public name lives (imported on first use): the imports under ``TYPE_CHECKING``
#: above, for run time, where reading them would cost a parse of this file; mypy needs those
#: and ``__all__`` as written, so tests/test_declarations.py checks that the three agree.
_LAZY = {
    "Address": ".types",
    "AecsMongoError": ".errors",
    "AsyncBlobStore": ".asynchronous.blobstores",
    "AsyncMessageStore": ".asynchronous.store",
    "Attachment": ".types",
    "BlobLocationError": ".errors",
    "BlobMissingError": ".errors",
    "BlobStore": ".synchronous.blobstores",
    "BlobStoreError": ".errors",
    "Content": ".types",
    "ContextEntry": ".types",
    "DataDirError": ".errors",
    "DatabaseError": ".errors",
    "DatabaseUriError": ".errors",
    "DispatchError": ".errors",
    "DocumentTooLargeError": ".errors",
    "EmlDirWriter": ".mail.sinks",
    "EraseReport": ".pure.lifecycle",
    "ExpireReport": ".pure.lifecycle",
    "ExportedCopy": ".pure.lifecycle",
    "FileSyncReport": ".mail.follow",
    "ImapFolderReport": ".results",
    "ImapSyncReport": ".results",
    "IndexReport": ".pure.indexes",
    "IngestReport": ".mail.sources",
    "InputTooLargeError": ".errors",
    "InvalidCursorError": ".errors",
    "InvalidEmailError": ".errors",
    "InvalidTagError": ".errors",
    "MailWriter": ".mail.sinks",
    "MailboxAuthError": ".errors",
    "MailboxConnectionError": ".errors",
    "MailboxError": ".errors",
    "MaildirWriter": ".mail.sinks",
    "MboxWriter": ".mail.sinks",
    "MessagePage": ".results",
    "MessageStore": ".synchronous.store",
    "MessageSummary": ".types",
    "Metadata": ".types",
    "NormalizedEmail": ".types",
    "NotFoundError": ".errors",
    "Origin": ".mail.sources",
    "ParsedEmail": ".normalizer",
    "Processing": ".types",
    "RawMessage": ".mail.sources",
    "SearchHit": ".types",
    "SearchIndexError": ".errors",
    "SearchQueryError": ".errors",
    "SearchResults": ".results",
    "SemanticHit": ".types",
    "ServerFeatureError": ".errors",
    "ServerUnavailableError": ".errors",
    "Skipped": ".mail.sources",
    "StoreResult": ".results",
    "TagReport": ".results",
    "Thread": ".types",
    "ThreadPage": ".results",
    "ThreadSummary": ".types",
    "ToolError": ".errors",
    "UnsafeFieldNameError": ".errors",
    "attachments_for_ai": ".pure.attachment_text",
    "normalize": ".normalizer",
    "open_writer": ".mail.sinks",
    "parse_email": ".normalizer",
    "read_messages": ".mail.sources",
    "sync_files": ".mail.follow",
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use, then keep it here (``globals``) for the next."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
