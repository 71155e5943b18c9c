"""``AsyncMessageStore``: the store's facade over its concern modules.

The class keeps the constructor and thin public methods; each concern lives in a module of its
own beside this one (``writing``, ``reading``, ``paging``, ``search``, ``maintenance``,
``lookups``, ``deletion``, ``export``, ``embeddings``, ``workers``), all reaching the database
through one ``AsyncStoreContext``. ``db`` is a PyMongo ``AsyncDatabase`` or a Motor database;
``aecs_mongo/synchronous/store.py`` (``MessageStore``) is generated from this file.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from email.message import EmailMessage
from typing import Any, Self

from pymongo import WriteConcern

from ..errors import DatabaseError
from ..pure.blob_location import parse_blob_url
from ..pure.indexes import IndexReport
from ..pure.lifecycle import EraseReport, ExpireReport, ExportedCopy
from ..pure.settings import SEARCH_ENGINES, Capabilities, StoreSettings
from ..results import MessagePage, SearchResults, StoreResult, TagReport, ThreadPage
from ..types import ContextEntry, MessageSummary, NormalizedEmail, SearchHit, SemanticHit, SourcedMessage
from . import (
    blobstore,
    deletion,
    embeddings,
    export,
    extracting,
    indexing,
    lookups,
    maintenance,
    pipeline,
    reading,
    search,
    stats,
    tagging,
    writing,
)
from .blobstores import AsyncBlobStore, open_external
from .capabilities import DURABLE_WRITES, completion_concern
from .context import REFUSED, AsyncStoreContext, Setting
from .driver_errors import translated
from .file_records import AsyncFileRecords
from .imap_records import AsyncImapRecords
from .views import AsyncMailboxViews
from .workers import AsyncFeed

__all__ = ["SEARCH_ENGINES", "AsyncMessageStore"]


class AsyncMessageStore:
    """One mailbox's mail in one database: ``messages``, ``bodies``, ``threads``, and blobs.

    ``owner_addresses`` are the mailbox owner's addresses: bcc is stored only on mail they sent.
    ``shared_view=True`` is for a store whose reads other people see: bcc is never returned, and
    ``with_participant`` does not match bcc recipients. ``transactions`` (default: detect) writes
    each batch's documents in one transaction. ``search_engine`` and ``scan_limit`` (an optional
    cap on the messages a scan search examines; None: all): ``search``; ``vector_engine``
    (``atlas``, ``exact`` or ``auto``): ``semantic_search``.
    ``search_index`` (a file path; default none): a local full-text index (SQLite FTS5) that the
    store keeps up with its writes and the change stream, and that ``search`` and ``count`` use
    (``search_engine="auto"`` or ``"local"``); the file is created private (0600, its directory
    0700), may be shared by the stores of every mailbox of one database, and is rebuilt by
    ``reindex`` (aecs_mongo/asynchronous/indexing.py says how it follows the store).
    ``sharded=True`` on a cluster sharded by ``scripts/shard.js``: point reads then carry the
    shard key and reach one shard. ``retry_seconds``: how long a batch's transaction retries
    transient errors (write conflicts, failovers, a crashed writer's open transaction).
    ``durable`` (default True): a write, batch or deletion returns only once the server's
    journal holds it (``j: true`` on the write that completes it, majority on a replica set),
    unless the client or database carries a write concern of its own, which is then used as
    it is. ``durable=False`` is for bulk imports that can be re-run: an acknowledgement then
    means applied, and a crash of the server soon after can lose it.
    ``blobs``: where raw.eml, body.html and attachment bytes go: ``gridfs`` (the default, bucket
    ``bucket_name``), ``gridfs://BUCKET``, ``file:///DIR``, ``s3://BUCKET/PREFIX`` (credentials and
    endpoint from the standard AWS environment), ``gs://...``, ``az://...``, or an
    ``AsyncBlobStore``. The database records its blob location on first use and refuses a store
    opened with another one (``BlobLocationError``); ``aecs-mongo blobs migrate`` moves them.
    ``attachment_text``, ``ocr``, ``processors``, ``attachments_in_for_ai``, ``extract_later``: extracting.py.
    ``whole_raw`` (default False): raw mail is kept as a pack, each large encoded attachment
    body taken out into a part kept once per mailbox and put back on every read
    (``pure/raw_parts.py``); True keeps every message whole as ``raw.eml``, for a deployment
    that reads the blob store itself (a CDN, another service). Each message is read back
    byte-exact either way, whichever layout wrote it.
    """

    mailbox_id = Setting[str]()
    bucket_name = Setting[str]()
    owner_addresses = Setting[frozenset[str]]()
    shared_view = Setting[bool]()
    sharded = Setting[bool]()
    for_ai_max_chars = Setting[int](writable=True)
    search_engine = Setting[str](writable=True)
    vector_engine = Setting[str](writable=True)
    scan_limit = Setting["int | None"](writable=True)
    retry_seconds = Setting[float](writable=True)
    durable = Setting[bool](writable=True)
    whole_raw = Setting[bool](writable=True)
    search_index = Setting["str | None"]()

    @property
    def blobs(self) -> AsyncBlobStore:
        """The blob store (``blobs.url`` says where)."""
        return self._context.blobs

    def __init__(
        self,
        db: Any,
        *,
        mailbox_id: str,
        bucket_name: str = "aecs",
        owner_addresses: Iterable[str] = (),
        for_ai_max_chars: int = 8000,
        search_engine: str = "auto",
        vector_engine: str = "auto",
        scan_limit: int | None = None,
        transactions: bool | None = None,
        shared_view: bool = False,
        sharded: bool = False,
        retry_seconds: float = 120.0,
        durable: bool = True,
        search_index: str | os.PathLike[str] | None = None,
        blobs: str | AsyncBlobStore | None = None,
        attachment_text: bool = True,
        ocr: bool = False,
        processors: Sequence[Any] = (),
        attachments_in_for_ai: bool = False,
        extract_later: bool = False,
        whole_raw: bool = False,
    ) -> None:
        if isinstance(blobs, str):
            location = parse_blob_url(blobs, bucket_name)
            if location.gridfs:
                if bucket_name not in ("aecs", location.bucket):
                    raise ValueError(f"bucket_name={bucket_name!r} and blobs={blobs!r} name two GridFS buckets")
                bucket_name = location.bucket
                blobs = None
            else:
                blobs = open_external(location)
        elif blobs is not None and not isinstance(blobs, AsyncBlobStore):
            raise TypeError(f"blobs must be a URL or an AsyncBlobStore, not {type(blobs).__name__}")
        elif blobs is not None and blobs.gridfs:  # another store's GridFS: this store's own, same bucket
            bucket_name, blobs = blobs.location.bucket, None
        settings = StoreSettings.checked(
            mailbox_id,
            owner_addresses,
            bucket_name=bucket_name,
            for_ai_max_chars=for_ai_max_chars,
            search_engine=search_engine,
            vector_engine=vector_engine,
            scan_limit=scan_limit,
            transactions=transactions,
            shared_view=shared_view,
            sharded=sharded,
            retry_seconds=retry_seconds,
            durable=durable,
            search_index=search_index,
            attachment_text=attachment_text,
            ocr=ocr,
            processors=processors,
            attachments_in_for_ai=attachments_in_for_ai,
            extract_later=extract_later,
            whole_raw=whole_raw,
        )
        self._context = AsyncStoreContext(db, settings, Capabilities(), blobs=blobs)
        self.db = db

    @property
    def capabilities(self) -> Capabilities:
        """What the driver and the server can do (learned once, shared with clones)."""
        return self._context.capabilities

    def with_write_concern(self, write_concern: WriteConcern) -> Self:
        """This store writing with ``write_concern`` (its transactions' commits too); for writes
        that must be durable before something irreversible, as POP3's delete-on-server."""
        clone = object.__new__(type(self))
        clone.db = self.db.with_options(write_concern=write_concern)
        clone._context = self._context.rebind(clone.db)
        return clone

    def with_durable_writes(self) -> Self:
        """This store writing with ``DURABLE_WRITES`` (majority, journaled): for writes that must
        be durable before something irreversible, as POP3's delete-on-server."""
        return self.with_write_concern(DURABLE_WRITES)

    async def checkpoint(self) -> None:
        """Make everything written so far durable on the server (its ``fsync`` command; nothing
        where the server takes no commands). The server's refusal, or a server without the
        command, is a ``DatabaseError``; a failure to reach the server stays the driver's."""
        try:
            await self.db.client.admin.command("fsync")
        except REFUSED as exc:
            found = translated(exc)
            raise (found if found is not exc else DatabaseError(f"fsync: no such command ({exc})")) from exc

    @property
    def file_records(self) -> AsyncFileRecords:
        """The records of the files ``sync_files`` read (``file_sources``), for it."""
        return AsyncFileRecords(self._context)

    @property
    def imap_records(self) -> AsyncImapRecords:
        """The IMAP sync's source records and folder positions, for ``aecs_mongo.mail.imap``."""
        return AsyncImapRecords(self._context)

    @property
    def views(self) -> AsyncMailboxViews:
        """The command line's extra reads of the mailbox (thread summaries, counts)."""
        return AsyncMailboxViews(self._context)

    def _keep_index_stream(self) -> None:
        """Internal (the warm command host's and the MCP server's stores, which serve many reads):
        keep the local index's change stream open between reads (``indexing.keep_stream``)."""
        indexing.keep_stream(self._context)

    async def ensure_indexes(self, atlas: bool = False, num_dimensions: int = 1536) -> IndexReport:
        """Create every index the store reads with; idempotent, like indexes.js. A refused text
        index, or an index of the same name with other keys, is reported under ``skipped``;
        ``atlas=True`` also asks for the Atlas Search and Vector Search indexes."""
        return await maintenance.ensure_indexes(self._context, atlas, num_dimensions)

    # --- writing ---------------------------------------------------------------------------

    async def store(
        self,
        email: NormalizedEmail | Mapping[str, Any] | bytes,
        attachments: Sequence[bytes | None] | None = None,
        uidl: str | None = None,
        received_at: _dt.datetime | None = None,
        *,
        tags: Iterable[str] = (),
        folders: Iterable[str] = (),
    ) -> StoreResult:
        """Store one message; a message already in the mailbox is left as it is (``inserted=False``).

        ``received_at`` (aware): when the mail source got it (mbox From_ line, Maildir file time,
        IMAP INTERNALDATE); the sort time ``ts`` of a message without a usable Date and without
        a Received header. The first stored copy of a Message-ID fixes ``ts``.
        ``tags`` (JMAP keywords such as ``$seen``, or the user's own; lowercased, a bad one is
        ``InvalidTagError``) and ``folders`` (where the source found it) are set when the message
        is inserted; a re-delivery never changes its tags and only adds a new folder."""
        docs = writing.build(self._context, email, attachments, uidl, received_at, tags, folders)
        (docs,) = await extracting.read_texts(self._context, [docs])
        (result,) = await writing.write_batch(self._context, [docs])
        return result

    async def store_many(
        self,
        items: Iterable[NormalizedEmail | Mapping[str, Any] | bytes | SourcedMessage],
        batch_size: int = 100,
        on_error: Callable[[int, Any, Exception], None] | None = None,
        *,
        tags: Iterable[str] = (),
    ) -> list[StoreResult]:
        """Store many messages in batches; the same end state as storing them one by one.

        An item is a NormalizedEmail, raw bytes, or a mail source's ``RawMessage`` (its ``data``
        stored with its ``received_at``, its ``tags`` and ``folders``, as ``store(data,
        received_at=..., tags=..., folders=...)`` would). ``tags`` are set on every message
        inserted, beside an item's own.

        Without ``on_error`` a message that cannot be stored (``AecsMongoError``) raises, after
        the batches before it were written and before its own batch is. With ``on_error(index,
        item, exc)`` it is reported there and skipped. ``store_iter`` streams the results.
        """
        return [r async for r in self.store_iter(items, batch_size, on_error, tags=tags)]

    def store_iter(
        self,
        items: Iterable[NormalizedEmail | Mapping[str, Any] | bytes | SourcedMessage],
        batch_size: int = 100,
        on_error: Callable[[int, Any, Exception], None] | None = None,
        *,
        tags: Iterable[str] = (),
    ) -> AsyncIterator[StoreResult]:
        """``store_many`` as a stream: memory is bounded by the batch, not by the input; the next
        batch is parsed on a worker thread while the current one is written (``pipeline.py``)."""
        return pipeline.store_iter(self._context, items, batch_size, on_error, tags)

    # --- tags and folders -------------------------------------------------------------------

    async def tag(
        self, target: str | Iterable[str], add: Iterable[str] = (), remove: Iterable[str] = (), *, dry_run: bool = False
    ) -> TagReport:
        """Add and remove tags on messages: ``target`` is a query (``id:<Message-ID>`` one
        message, ``thread:<id>`` one thread, ``tag:todo``, anything in the search language) or a
        list of Message-IDs; ``add``/``remove``: tags (``$seen`` marks read, ``$flagged``...;
        lowercased; a bad one is ``InvalidTagError``). Atomic per message (two writers tagging
        one message at once both land); in batches of 1,000, each durable before the next, so a
        change to any number of messages runs in bounded memory and, interrupted, is finished by
        running it again. Never brings back a message deleted meanwhile. ``dry_run``: count
        what it would change. Returns ``TagReport(matched, changed)``."""
        return await tagging.change(self._context, "tags", target, add, remove, dry_run=dry_run)

    async def set_folders(
        self, target: str | Iterable[str], add: Iterable[str] = (), remove: Iterable[str] = (), *, dry_run: bool = False
    ) -> TagReport:
        """``tag`` for the folders a message is filed in (``folder:`` in queries): add and remove
        folder names (kept as given) on the target's messages."""
        return await tagging.change(self._context, "folders", target, add, remove, dry_run=dry_run)

    async def tags(self) -> dict[str, int]:
        """Every tag of the mailbox with how many messages carry it, sorted by name (unread mail
        is the mail without ``$seen``: ``count("is:unread")``)."""
        return await tagging.tag_counts(self._context)

    # --- reading ---------------------------------------------------------------------------

    async def get_message(self, message_id: str, include_raw: bool = False) -> NormalizedEmail | None:
        """The AECS-1 object as stored (hot + warm; the cold tier too with ``include_raw``)."""
        return await reading.get_message(self._context, message_id, include_raw)

    async def get_raw(self, message_id: str) -> bytes | None:
        """The message exactly as received (``raw.eml``), or None."""
        return await blobstore.get_raw(self._context, message_id)

    async def get_raw_variants(self, message_id: str) -> list[bytes]:
        """Every copy of the message kept, as received: ``get_raw``'s first, then each copy with
        other bytes under the same Message-ID, in the order they came. Empty if absent."""
        return await blobstore.get_raw_variants(self._context, message_id)

    async def get_html(self, message_id: str) -> str | None:
        """The HTML body (``body.html``), or None."""
        return await blobstore.get_html(self._context, message_id)

    async def get_attachment(self, message_id: str, idx: int) -> bytes | None:
        """Attachment ``idx`` (MIME order), or None when absent or not stored."""
        return await blobstore.get_attachment(self._context, message_id, idx)

    async def get_attachment_text(self, message_id: str, idx: int) -> str | None:
        """The whole text read from attachment ``idx``; None: none (``get_message``: 4,000 chars)."""
        return await reading.get_attachment_text(self._context, message_id, idx)

    async def extract_pending(self, limit: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        """Read the attachments left unread (``extract_later``, older mail); resumable."""
        return await extracting.extract_pending(self._context, limit, progress)

    async def get_thread(self, thread_id: str) -> list[NormalizedEmail]:
        """Every message of a thread, oldest first, each with ``thread.position`` set."""
        return await reading.get_thread(self._context, thread_id)

    async def thread_context(self, thread_id: str, limit: int = 20, attachments: bool = False) -> list[ContextEntry]:
        """The newest ``limit`` messages of a thread, oldest first (``attachments``: attachmentsForAI)."""
        return await reading.thread_context(self._context, thread_id, limit, attachments)

    async def list_messages(
        self,
        cursor: str | None = None,
        limit: int = 50,
        sender: str | None = None,
        thread_id: str | None = None,
        since: object = None,
        until: object = None,
        order: str = "desc",
    ) -> MessagePage:
        """An inbox page (optionally one sender's or one thread's), keyset-paginated."""
        return await reading.list_messages(self._context, cursor, limit, sender, thread_id, since, until, order)

    async def with_participant(self, address: str, cursor: str | None = None, limit: int = 50) -> MessagePage:
        """Mail to or from one address (from, to, cc, stored bcc), newest first."""
        return await reading.with_participant(self._context, address, cursor, limit)

    async def list_threads(self, cursor: str | None = None, limit: int = 50) -> ThreadPage:
        """The conversation list: one summary per thread, most recent activity first."""
        return await reading.list_threads(self._context, cursor, limit)

    async def replies_to(self, message_id: str) -> list[MessageSummary]:
        """Messages whose References (or In-Reply-To) name ``message_id``, oldest first."""
        return await reading.replies_to(self._context, message_id)

    async def message_summaries(self, message_ids: Sequence[str]) -> list[MessageSummary]:
        """The list summaries (as ``list_messages`` gives them) of these messages, in the order
        given, in one read; messages that are not stored are left out. For search hits."""
        return await reading.message_summaries(self._context, message_ids)

    async def stale(self, spec_version: str, limit: int = 100) -> list[str]:
        """Message ids normalized under a spec version other than ``spec_version``."""
        return await reading.stale(self._context, spec_version, limit)

    async def search(
        self,
        query: str,
        limit: int = 20,
        progress: Callable[[int], None] | None = None,
        *,
        sort: str = "date",
        cursor: str | None = None,
    ) -> SearchResults[SearchHit]:
        """Messages matching ``query`` (the query language: words, "phrases", OR, NOT/-word,
        parentheses, prefix*, from:, to:, subject:, body:, attachment:, thread:, date:A..B; see
        ``aecs_mongo/pure/search_query/``): messageId, threadId, subject, ts, snippet, score.

        Newest first (``sort="date"``; ``next_cursor`` pages on with ``cursor=``), or best
        first (``sort="relevance"``) where the engine ranks (the local index, ``$text``, Atlas).
        The engine is ``search_engine`` (``auto``: the local index where the store has one, else
        ``$text`` where the server holds the text index and the query fits it, else the scan,
        which reads the mailbox newest first until it has ``limit`` hits or has looked at every
        message; ``scan_limit`` caps it: then ``complete=False``). ``progress(examined)`` after
        each window of the scan. A malformed query is a ``SearchQueryError`` that says where.
        """
        return await search.search(self._context, query, limit, progress, sort, cursor)

    async def count(self, query: str) -> int:
        """How many messages ``query`` matches: every match (the local index after catching it
        up; the server's count for ``$text`` and Atlas; else a scan of every message, which
        ``scan_limit`` does not cap)."""
        return await search.count(self._context, query)

    async def stats(self) -> dict[str, Any]:
        """The mailbox's size and the engines that serve its searches on this server:
        ``messages``, ``threads``; ``search`` (``atlas``, ``text`` or ``scan``); ``vectorSearch``
        (``atlas`` or ``exact``); ``windowedReads`` (None before the first page read told); and
        ``database``, ``mailboxId``, ``collections`` (every collection of mailbox data: the
        mailbox's documents, all documents, sizes), ``sizesFrom``, ``specVersions``."""
        return {**await maintenance.engines(self._context), **await stats.collection_stats(self._context)}

    # --- vectors ---------------------------------------------------------------------------

    async def set_embedding(self, message_id: str, vector: Sequence[float]) -> None:
        """Keep one vector per message for ``semantic_search``; replaces an earlier one.
        Stored as BSON binData float32 with an int8 copy that joins a block once a block's
        worth is written (``pure/vectors.py``). ``NotFoundError`` if the message is not stored."""
        await embeddings.set_embedding(self._context, message_id, vector)

    async def set_embeddings(self, vectors_by_id: Mapping[str, Sequence[float]]) -> int:
        """``set_embedding`` for many messages, in batched writes; returns how many were kept
        (a message not in the mailbox is skipped; every vector is checked before the first write)."""
        return await embeddings.set_embeddings(self._context, vectors_by_id)

    async def semantic_search(
        self, vector: Sequence[float], limit: int = 10, thread_id: str | None = None, *, scan_limit: int | None = None
    ) -> SearchResults[SemanticHit]:
        """Nearest messages by vector, best first: messageId, subject, ts, score. The engine is
        ``vector_engine``: Atlas ``$vectorSearch``, or the exact search of every vector of the
        mailbox (or thread); ``scan_limit`` (default: the store's) caps the vectors it considers
        and a capped search that left vectors out has ``complete=False``."""
        return await embeddings.semantic_search(self._context, vector, limit, thread_id, scan_limit)

    def watch(
        self,
        consumer: str,
        *,
        since: str = "now",
        auto_ack: bool = True,
        max_await_ms: int = 1000,
        tags: bool = False,
    ) -> AsyncFeed:
        """Every message stored in the mailbox, at least once, in commit order, across restarts.
        ``consumer`` names the reader (its position is kept in ``feed_checkpoints``). ``tags``:
        each tag or folder change too (records of kind ``"tags"``). Needs change streams (a
        replica set), else ``ServerFeatureError``."""
        return AsyncFeed(self, consumer, since=since, auto_ack=auto_ack, max_await_ms=max_await_ms, tags=tags)

    # --- deleting, retention, export ------------------------------------------------------------

    async def delete(self, message_id: str) -> bool:
        """Remove a message from every tier and recompute its thread summary. False if absent
        (leftovers of an interrupted store of it are still cleared)."""
        return await deletion.delete(self._context, message_id)

    async def expire(
        self,
        before: _dt.datetime,
        *,
        dry_run: bool = False,
        batch_size: int = 1000,
        on_progress: Callable[[Mapping[str, int]], None] | None = None,
    ) -> ExpireReport:
        """Retention: remove every message whose sort key ``ts`` is earlier than ``before`` (an
        aware datetime) from every tier; each affected thread summary is recomputed once, a
        thread left empty removed. Batched and resumable. ``dry_run``: count, change nothing.
        ``on_progress(removed)`` after each statement: documents removed so far per collection."""
        return await deletion.expire(
            self._context, before, dry_run=dry_run, batch_size=batch_size, on_progress=on_progress
        )

    async def erase_mailbox(
        self, *, batch_size: int = 1000, on_progress: Callable[[Mapping[str, int]], None] | None = None
    ) -> EraseReport:
        """Remove every document of the mailbox from every collection the store writes, and every
        GridFS file and chunk under its blob prefix. Batched, idempotent and resumable; other
        mailboxes are untouched."""
        return await deletion.erase_mailbox(self._context, batch_size=batch_size, on_progress=on_progress)

    def export_raw(
        self,
        *,
        variants: bool = False,
        since: _dt.datetime | None = None,
        until: _dt.datetime | None = None,
        on_missing: Callable[[str], None] | None = None,
    ) -> AsyncIterator[ExportedCopy]:
        """Stream every stored raw copy, oldest first: the first copy of each message (and with
        ``variants`` the other copies after it), ``since <= ts < until``. Memory holds one page
        of blobs, never the mailbox; write the copies with ``aecs_mongo.mail.sinks``."""
        return export.export_copies(self._context, variants=variants, since=since, until=until, on_missing=on_missing)

    # --- upkeep ------------------------------------------------------------------------------

    async def reparse_stale(self, spec_version: str | None = None) -> dict[str, int]:
        """Re-normalize, from ``raw.eml``, every message stored under another spec version
        (default: the normalizer's own); mail without ``raw.eml`` is counted as skipped."""
        return await maintenance.reparse_stale(self._context, spec_version)

    async def sweep_blobs(self, older_than: _dt.timedelta = _dt.timedelta(hours=1)) -> int:
        """Remove the blobs a crash left without their message (an interrupted store that was
        never delivered again), where every blob of that message is older than ``older_than``:
        a younger one may belong to a message whose row is about to commit, so it is never
        removed (writers commit within their retries, ``retry_seconds``). Returns how many."""
        if not isinstance(older_than, _dt.timedelta):
            raise TypeError(f"older_than must be a timedelta, not {type(older_than).__name__}")
        return await blobstore.sweep_blobs(self._context, older_than.total_seconds())

    async def wait_durable(self) -> None:
        """Return once every write acknowledged so far is in the server's journal, where this
        store is durable (one journaled write; nothing where it is not): for records a caller
        wrote beside the store's own writes and acknowledges with them, as ``sync_files`` does
        with its file records."""
        await self._context.journal_barrier(await completion_concern(self._context))

    async def reindex(self) -> dict[str, int]:
        """Rebuild every derived document from the primary ``messages`` documents:
        thread summaries, lookup fields, UIDL records (those of vanished messages removed), the
        vector blocks (old array vectors rewritten, unsealed ones sealed, dead entries dropped),
        and the local search index of a store with one (``searchIndexed``: messages it holds)."""
        return await maintenance.reindex(self._context)

    # --- the mailbox surface: a POP3 pipeline's message store ------------------------------------

    async def add(self, uidl: str, raw_bytes: bytes) -> str:
        """Store one downloaded message and record its UIDL; returns its message id. An
        already-stored Message-ID is not stored again (the UIDL is still recorded); mail without
        a valid Message-ID gets the AECS-1 synthetic id."""
        return await lookups.add(self._context, uidl, raw_bytes)

    async def contains_uidl(self, uidl: str) -> bool:
        """True when this UIDL was downloaded into the mailbox (and not deleted since)."""
        return await lookups.contains_uidl(self._context, uidl)

    async def uidls(self) -> list[str]:
        """Every UIDL recorded for the mailbox."""
        return await lookups.uidls(self._context)

    async def message_ids(self) -> list[str]:
        """Every message id in the mailbox, oldest first."""
        return await lookups.message_ids(self._context)

    async def get_email(self, message_id: str) -> EmailMessage | None:
        """The stored message as an ``email.message.EmailMessage``, parsed from ``raw.eml``."""
        return await lookups.get_email(self._context, message_id)

    async def find(self, header: str, value: str) -> list[str]:
        """Message ids whose ``header`` matches ``value`` (normalized like the stored key), oldest first."""
        return await lookups.find(self._context, header, value)

    async def walk_thread(self, message_id: str) -> list[str]:
        """Every stored message reachable from ``message_id`` by References / In-Reply-To, oldest
        first (gaps end a branch)."""
        return await lookups.walk_thread(self._context, message_id)
