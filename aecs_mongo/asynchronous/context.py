"""The one internal interface between the store facade and its concern modules.

``AsyncStoreContext`` is what every concern module (writing, reading, paging, search,
maintenance, lookups, deletion, embeddings, stats) gets: the database and its collections, the
checked settings, the capabilities, and the few statements every module writes with (point
filters that carry the shard key, the unordered bulk of single-document writes, a blob read).
Nothing here is private to one module, so no module needs another's internals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, overload

from pymongo import ReplaceOne, UpdateOne, WriteConcern
from pymongo.errors import DuplicateKeyError

from ..pure import vectors
from ..pure.blob_location import BLOBS_SETTING, SETTINGS_COLLECTION, location_verdict, settings_document
from ..pure.change_marks import MARKS_COLLECTION
from ..pure.dialect import CAUTIOUS, Dialect
from ..pure.extents import EXTENTS_COLLECTION
from ..pure.indexes import BARRIER_COLLECTION, BLOCKS_COLLECTION, VECTORS_COLLECTION
from ..pure.keys import doc_id, message_key
from ..pure.settings import Capabilities, StoreSettings
from ..search_index import SearchIndex
from .blobstores import AsyncBlobStore
from .gridfsblobs import AsyncGridFSBlobs
from .statements import (
    MAX_REWRITES,
    REFUSED,
    errmsg,
    holds_mail,
    insert_ignoring_duplicates,
    log,
    only_duplicates,
    resolve,
    to_list,
)

__all__ = [
    "REFUSED",
    "AsyncStoreContext",
    "Setting",
    "errmsg",
    "insert_ignoring_duplicates",
    "log",
    "only_duplicates",
    "resolve",
    "to_list",
]

#: an ``_id`` no message has (ids are ``<mailboxId>:<64 hex digits>``): the no-op barrier's filter
_NO_MESSAGE = ":journal-barrier"
T = TypeVar("T")


class AsyncStoreContext:
    """One mailbox of one database, as the concern modules reach it.

    ``settings`` and ``capabilities`` are shared with every clone (``rebind``) so that what one
    learns about the server, or says once in the log, holds for all of them (the mailbox's
    sample for windowed reads too); so is the local search index (``search_index``: None unless
    the store was given one; opened on first use).
    """

    def __init__(
        self,
        db: Any,
        settings: StoreSettings,
        capabilities: Capabilities,
        said: set[str] | None = None,
        samples: dict[str, Any] | None = None,
        search_index: SearchIndex | None = None,
        blobs: AsyncBlobStore | None = None,
        blob_check: dict[str, bool] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.capabilities = capabilities
        self.mailbox_id = settings.mailbox_id
        self.sharded = settings.sharded
        self._said = set() if said is None else said
        #: the mailbox's sample for windowed reads, with when it was taken (``paging.mailbox_sample``)
        self.samples: dict[str, Any] = {} if samples is None else samples
        self.messages = db["messages"]
        self.bodies = db["bodies"]
        self.threads = db["threads"]
        self.uidls = db["uidls"]
        self.vectors = db[VECTORS_COLLECTION]
        self.blocks = db[BLOCKS_COLLECTION]
        self.barrier = db[BARRIER_COLLECTION]
        self.marks = db[MARKS_COLLECTION]
        self.extents = db[EXTENTS_COLLECTION]
        self.files = db[f"{settings.bucket_name}.files"]
        self.chunks = db[f"{settings.bucket_name}.chunks"]
        #: vectors written since the last check for a block to seal (the first write checks)
        self.vector_writes = vectors.SEAL_CHECK_EVERY
        if search_index is None and settings.search_index is not None:
            search_index = SearchIndex(settings.search_index)
        self.search_index = search_index
        #: the local index's change stream kept open between reads (``indexing.keep_stream``:
        #: long-lived stores only; not shared with clones)
        self.kept_stream: Any = None
        if blobs is None:
            blobs = AsyncGridFSBlobs(self)
        #: the blob store (``blob_store()`` checks it against the database's settings first)
        self.blobs = blobs
        self._blob_check = {"done": False} if blob_check is None else blob_check

    def rebind(self, db: Any) -> AsyncStoreContext:
        """The same mailbox, settings and capabilities over another handle of the database
        (``with_write_concern``)."""
        blobs = None if self.blobs.gridfs else self.blobs  # GridFS: over the new handle
        return AsyncStoreContext(
            db, self.settings, self.capabilities, self._said, self.samples, self.search_index, blobs, self._blob_check
        )

    async def blob_store(self) -> AsyncBlobStore:
        """The blob store, once it is known to be the database's: the settings document records
        where the database's blobs are; the first use records it where nothing does
        (``pure/blob_location.location_verdict``), and another location is a
        ``BlobLocationError``. One read per store (and its clones)."""
        if not self._blob_check["done"]:
            location = self.blobs.location
            settings = self.db[SETTINGS_COLLECTION]
            recorded = await settings.find_one({"_id": BLOBS_SETTING})
            has_mail = recorded is None and await holds_mail(self.messages)
            if location_verdict(recorded, has_mail, location) == "record":
                # journaled before any blob or row depends on it: a server that restarts after
                # the first batch must not have the rows without the record (the kill test
                # lost an acknowledged, unjournaled record and then refused the file store)
                if self.db.write_concern.is_server_default:
                    rs = await self.replica_set()  # learned here if no write taught it yet
                    durable = WriteConcern(w="majority", j=True) if rs else WriteConcern(j=True)
                    settings = settings.with_options(write_concern=durable)
                try:
                    await settings.insert_one(settings_document(location))
                except DuplicateKeyError:  # another store recorded it first: it must agree
                    location_verdict(await settings.find_one({"_id": BLOBS_SETTING}), has_mail, location)
            self._blob_check["done"] = True
        return self.blobs

    @property
    def dialect(self) -> Dialect:
        """How the server is spoken to (``pure/dialect.py``): learned by ``capabilities.dialect``,
        which each operation asks before its first statement that depends on it; every
        workaround (right on any server) where nothing has asked yet."""
        return self.capabilities.dialect or CAUTIOUS

    def first_time(self, condition: str) -> bool:
        """True the first time this store meets ``condition``: what the library logs about normal
        conditions of real mail, or about a missing index, it says once per store."""
        if condition in self._said:
            return False
        self._said.add(condition)
        return True

    # --- filters ---------------------------------------------------------------------------

    def by_id(self, _id: str) -> dict[str, Any]:
        """A point read by ``_id`` (which embeds the mailbox). On a sharded cluster it also names
        the mailbox, the shard key's prefix, so mongos sends it to one shard."""
        return {"_id": _id, "mailboxId": self.mailbox_id} if self.sharded else {"_id": _id}

    def by_ids(self, ids: list[str]) -> dict[str, Any]:
        return {"_id": {"$in": ids}, "mailboxId": self.mailbox_id} if self.sharded else {"_id": {"$in": ids}}

    def upsert_key(self, _id: str) -> dict[str, Any]:
        """The filter of every upsert: ``_id`` (which embeds the mailbox); on a sharded cluster the
        whole shard key (``mailboxId``, ``_id``), as an upsert there requires. Elsewhere the
        extra field only costs: the test server plans ``{_id, mailboxId}`` as a collection scan."""
        return self.by_id(_id)

    def id_for(self, message_id: str) -> str:
        """The ``_id`` of a message of this mailbox (it embeds the mailbox: never crosses one)."""
        return doc_id(self.mailbox_id, message_key(message_id))

    # --- statements every module writes with ---------------------------------------------

    async def write_each(
        self,
        collection: Any,
        writes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
        *,
        replace: bool = False,
        upsert: bool = False,
    ) -> int:
        """One unordered bulk of ``update_one`` (or upserting ``replace_one``) writes; the number
        upserted."""
        if not writes:
            return 0
        upsert = upsert or replace
        op = ReplaceOne if replace else UpdateOne
        outcome = await collection.bulk_write([op(s, d, upsert=upsert) for s, d in writes], ordered=False)
        return int(outcome.upserted_count)

    @staticmethod
    def completing(collection: Any, concern: Any) -> Any:
        """``collection`` for the write that completes a batch: with ``concern`` (the durable
        write concern of ``capabilities.completion_concern``), or as it is when that is None."""
        return collection if concern is None else collection.with_options(write_concern=concern)

    async def server_process(self) -> tuple[Any, Any] | None:
        """Which server process takes the writes: ``hello``'s ``topologyVersion.processId`` and
        the primary it names. It differs after a restart or a failover, which the driver's
        retries hide from the writer. None where the server says neither (servers before
        MongoDB 4.4, one that has no ``hello``)."""
        try:
            reply = await self.db.command("hello")
        except REFUSED:
            return None
        process = (reply.get("topologyVersion") or {}).get("processId")
        return None if process is None else (process, reply.get("primary") or reply.get("me"))

    async def across_restarts(
        self, once: Callable[[], Awaitable[None]], again: Callable[[], Awaitable[None]], what: str
    ) -> None:
        """``once``, then ``again`` while the server's process changed meanwhile (``server_process``
        before and after; at most ``MAX_REWRITES`` times). The driver retries a statement across a
        server restart, so a batch can complete on a server that lost its earlier unjournaled
        writes in the crash; ``again`` writes (or deletes) the batch once more, which repairs that.
        Two ``hello`` per batch; nothing to compare where the server does not say its process."""
        before = await self.server_process()
        await once()
        if before is None:
            return
        for _ in range(MAX_REWRITES):
            after = await self.server_process()
            if after == before:
                return
            log.debug("the server restarted while %s: again (%s -> %s)", what, before, after)
            before = after
            await again()

    async def replica_set(self) -> bool:
        """A replica set or a sharded cluster (``hello``), as opposed to a standalone server;
        learned once (``capabilities.replica_set``)."""
        caps = self.capabilities
        if caps.replica_set is None:
            try:
                hello = await self.db.client.admin.command("hello")
            except REFUSED:  # no hello: no replica set to speak of
                hello = {}
            caps.replica_set = bool(hello.get("setName") or hello.get("msg") == "isdbgrid")
        return caps.replica_set

    async def journal_barrier(self, concern: Any) -> None:
        """Make every write acknowledged so far durable when the batch's own last write was not
        journaled (it wrote nothing new): one journaled write under ``concern``, which the server
        acknowledges once its log, sequential, holds everything before it. Where the server's
        dialect says a write that changes nothing is not journaled (``capabilities.barrier_counter``)
        the write changes a counter (``BARRIER_COLLECTION``); elsewhere it is an update that
        matches nothing (the server journals up to its latest write for it): no collection, and
        no document that every writer of a deployment increments."""
        if concern is None:
            return
        if self.capabilities.barrier_counter is False:  # learned with the concern (completion_concern)
            await self.completing(self.messages, concern).update_one({"_id": _NO_MESSAGE}, {"$set": {"_": 1}})
            return
        barrier = self.completing(self.barrier, concern)
        try:
            await barrier.update_one({"_id": "journal"}, {"$inc": {"writes": 1}}, upsert=True)
        except DuplicateKeyError:  # a concurrent first barrier inserted it: it exists now
            await barrier.update_one({"_id": "journal"}, {"$inc": {"writes": 1}})

    async def get_blob(self, key: str) -> bytes | None:
        """One blob's bytes by its key, or None."""
        store = await self.blob_store()
        return await store.get(key)


class _WithContext(Protocol):
    _context: AsyncStoreContext


class Setting(Generic[T]):
    """A store attribute that lives in its ``StoreSettings`` (where the concern modules read it):
    ``store.scan_limit = 100`` changes what the next search does. Read-only unless ``writable``."""

    def __init__(self, *, writable: bool = False) -> None:
        self.writable = writable
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, store: None, owner: type | None = None) -> Setting[T]: ...

    @overload
    def __get__(self, store: _WithContext, owner: type | None = None) -> T: ...

    def __get__(self, store: _WithContext | None, owner: type | None = None) -> T | Setting[T]:
        if store is None:
            return self
        value: T = getattr(store._context.settings, self.name)
        return value

    def __set__(self, store: _WithContext, value: T) -> None:
        if not self.writable:
            raise AttributeError(f"{self.name} is fixed when the store is made")
        setattr(store._context.settings, self.name, value)
