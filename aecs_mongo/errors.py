"""The exceptions aecs-mongo raises.

Every error the package raises on purpose derives from one root, so a worker can catch
``AecsMongoError`` and know the failure is ours (bad input, a refused document, a tampered
cursor) rather than the driver's or the server's. Argument type mistakes are plain
``TypeError``: they are programming errors, and a non-string never becomes a query operator.

    AecsMongoError
    ├── InvalidEmailError           a NormalizedEmail (or raw message) we cannot store
    │   ├── InputTooLargeError      raw input over the configured ``max_body_bytes``
    │   └── UnsafeFieldNameError    an x_ field name MongoDB cannot store ($, dot, NUL)
    ├── DocumentTooLargeError       a message MongoDB cannot hold (over 16 MiB; names the field)
    ├── InvalidTagError             a tag (or folder name) outside the safe set: JMAP's keyword rules
    ├── InvalidCursorError          a pagination cursor that is malformed, forged or foreign
    ├── SearchQueryError            a search query that does not parse (says where), or that the
    │                               chosen engine cannot express
    ├── NotFoundError               an operation that needs a stored message that is absent
    ├── ServerFeatureError          the server lacks something required (change streams, the embedded server)
    ├── DatabaseError               the database failed or refused a statement (the driver's error, as the
    │   │                           store layer hands it to the command line, the adapters and the warm host)
    │   ├── ServerUnavailableError  no MongoDB server answered within the selection timeout
    │   └── DatabaseUriError        a MongoDB URI that cannot be used (malformed, an SRV name that does not resolve)
    ├── DataDirError                the embedded server's data directory cannot be kept private (not ours)
    ├── SearchIndexError            the local search index file cannot be used (not private, not ours,
    │                               damaged, or following another database)
    ├── BlobStoreError              the blob store (GridFS, a directory, object storage) failed or refused
    │   ├── BlobLocationError       a bad blob-store URL, or a database whose blobs are elsewhere
    │   └── BlobMissingError        a stored message's blob is gone from the blob store
    ├── MailboxError                the POP3 or IMAP server, or the old GDBM store, failed as a whole
    │   ├── MailboxConnectionError  unreachable, TLS failed or refused (no STARTTLS), connection dropped
    │   └── MailboxAuthError        user name or password refused
    ├── DispatchError               one or more dispatch handlers raised (the others still ran)
    └── ToolError                   an agent tool refused a call (bad argument, write when read-only, not found)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import DispatchReport, DownloadReport, ImapSyncReport


class AecsMongoError(Exception):
    """Root of every exception aecs-mongo raises on purpose."""


class InvalidEmailError(AecsMongoError, ValueError):
    """The input is not a NormalizedEmail (or raw message) that can be stored."""


class InputTooLargeError(InvalidEmailError):
    """Raw input larger than the configured limit (``max_body_bytes``)."""


class UnsafeFieldNameError(InvalidEmailError):
    """An ``x_`` extension field name MongoDB cannot store: leading ``$``, a dot, or NUL."""


class DocumentTooLargeError(AecsMongoError, ValueError):
    """A ``messages`` document over MongoDB's 16 MiB limit even with its display fields cut;
    ``field`` names the largest part. Nothing of the message is written."""

    def __init__(self, message: str, *, field: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.field = field
        self.size = size
        self.limit = limit


class InvalidTagError(AecsMongoError, ValueError):
    """A tag that is not 1-255 characters of the safe ASCII set (no whitespace, parentheses,
    brackets, quotes, controls), or a folder name that is empty or holds a control character."""


class InvalidCursorError(AecsMongoError, ValueError):
    """A pagination cursor that was not produced by this store for this mailbox and query."""


class SearchQueryError(AecsMongoError, ValueError):
    """A search query that does not parse, or that the store's chosen engine cannot express.

    ``position``: the character offset (0-based) in ``query`` where the problem is, or None when
    it is not about one place (an engine that cannot express the query).
    """

    def __init__(self, message: str, *, position: int | None = None, query: str = "") -> None:
        super().__init__(message)
        self.position = position
        self.query = query


class NotFoundError(AecsMongoError, LookupError):
    """The operation needs a stored message that is not there."""


class ServerFeatureError(AecsMongoError):
    """The server refused a feature the operation requires."""


class DatabaseError(AecsMongoError):
    """The database failed or refused a statement: the driver's error, translated by the store
    layer (``aecs_mongo.synchronous.connection.database_errors``) for the code above it, which
    imports no driver. ``str()`` is the server's message; ``code`` its error code (None when the
    server gave none); ``__cause__`` the driver's exception."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ServerUnavailableError(DatabaseError):
    """No MongoDB server answered within the selection timeout (down, unreachable, or not a
    MongoDB server)."""


class DatabaseUriError(DatabaseError, ValueError):
    """A MongoDB URI that cannot be used: malformed, an unknown option, an SRV name that does not
    resolve."""


class DataDirError(AecsMongoError):
    """The embedded server's data directory cannot be kept private: it belongs to another user,
    its modes cannot be changed, or its credentials file is open to others or damaged."""


class SearchIndexError(AecsMongoError):
    """The local search index file cannot be used: it belongs to another user or is not a file,
    it is damaged (remove it: the next search rebuilds it), or it follows another database."""


class BlobStoreError(AecsMongoError):
    """The blob store (the cold tier: raw.eml, body.html, attachment bytes) failed or refused:
    a directory that cannot be written, an object store that is unreachable or refuses the
    credentials. ``url`` names the store (never a secret: credentials are not part of a blob
    URL). Nothing already stored is lost: the message whose blobs could not be written was not
    stored (its row is written after its blobs), and storing it again completes it."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class BlobLocationError(BlobStoreError, ValueError):
    """A blob-store URL that is not one (``gridfs``, ``gridfs://BUCKET``, ``file:///DIR``,
    ``s3://BUCKET/PREFIX``, ``gs://...``, ``az://...``), or a store opened with another blob
    location than the one its database records (``recorded``): open it with that one, or move
    the blobs with ``aecs-mongo blobs migrate --to URL``."""

    def __init__(self, message: str, *, url: str = "", recorded: str | None = None) -> None:
        super().__init__(message, url=url)
        self.recorded = recorded


class BlobMissingError(BlobStoreError, LookupError):
    """A stored message names a blob (``key``) that its blob store does not have: removed from
    under the database, or a blob store that is not the one the mail was stored with. Never
    answered with None (which means "no such message") or empty bytes. ``message_id`` names
    the message."""

    def __init__(self, message: str, *, url: str = "", message_id: str = "", key: str = "") -> None:
        super().__init__(message, url=url)
        self.message_id = message_id
        self.key = key


class MailboxError(AecsMongoError):
    """The mail server or the old GDBM store failed as a whole (not one message).

    ``report`` holds what a POP3 download (``DownloadReport``) or an IMAP sync
    (``ImapSyncReport``) did before it failed (None when it failed before any message was looked
    at): everything counted there as downloaded, new or present is safely in the store, so a
    re-run simply continues.
    """

    def __init__(self, message: str, *, report: DownloadReport | ImapSyncReport | None = None) -> None:
        super().__init__(message)
        self.report = report


class MailboxConnectionError(MailboxError):
    """The POP3 or IMAP server is unreachable, TLS failed (or STARTTLS was asked for and the server
    does not offer it: the password is never sent in the clear), the connection dropped, timed
    out, the server said BYE, or it broke protocol."""


class MailboxAuthError(MailboxError):
    """The POP3 or IMAP server refused the user name or password."""


class DispatchError(AecsMongoError):
    """One or more handlers raised; the others still ran. ``errors`` maps route to exception.

    ``report`` is the full ``DispatchReport``: every batch was handed out, and the messages of a
    failed handler are still in the store (only handlers delete), ready for the next dispatch.
    """

    def __init__(self, message: str, *, report: DispatchReport, errors: dict[str, Exception]) -> None:
        super().__init__(message)
        self.report = report
        self.errors = errors


class ToolError(AecsMongoError, ValueError):
    """A tool of ``aecs_mongo.agents`` refused a call: an argument that does not fit its schema,
    a write tool on a read-only tool set, a message or thread that is not there, or a store
    error. The message is written for the model that called the tool (it names no stored
    content), and the MCP server returns it as a tool error, never as a crash."""
