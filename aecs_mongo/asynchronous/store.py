"""AsyncMessageStore: the I/O shell over documents.py, queries.py and blobs.py.

This file is the source: ``store.py`` (the synchronous ``MessageStore``) is generated from it by
``scripts/unasync.py`` and CI fails when the two differ. Keep logic in the pure modules; keep
this file to reads, writes and the order they happen in. ``db`` is a PyMongo ``AsyncDatabase``
or a Motor ``AsyncIOMotorDatabase``; the few calls that are coroutines in one driver and plain
calls in the other go through ``_resolve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime as _dt
import email
import email.policy
import hashlib
import inspect
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from email.message import EmailMessage
from time import monotonic
from typing import Any, Self, cast

from pymongo import ReplaceOne, UpdateOne, WriteConcern
from pymongo.errors import BulkWriteError, CollectionInvalid, DuplicateKeyError, OperationFailure, PyMongoError

from ..errors import AecsMongoError, NotFoundError
from ..pure import blobs, lifecycle, queries, vectors, windows
from ..pure.documents import (
    HOT_TEXT_CHARS,
    Blob,
    MessageDocuments,
    build_documents,
    context_entry,
    derived_fields,
    fold_thread_summary,
    merge_thread_summaries,
    message_summary,
    summary_merge_update,
    thread_summaries,
    thread_summary_from_messages,
    to_normalized_email,
    variant_blob_key,
)
from ..pure.indexes import BLOCKS_COLLECTION, VECTORS_COLLECTION, IndexReport, atlas_search_indexes, index_specs
from ..pure.keys import blob_prefix, check_mailbox_id, check_str, doc_id, message_key, strip_message_id, thread_key
from ..pure.lifecycle import EraseReport, ExpireReport, ExportedCopy
from ..results import MessagePage, SearchResults, StoreResult, ThreadPage
from ..types import ContextEntry, MessageSummary, NormalizedEmail, SearchHit, SemanticHit, ThreadSummary
from . import deletion, embeddings, stats
from .prefetch import AsyncPrefetch
from .workers import AsyncFeed

__all__ = ["SEARCH_ENGINES", "AsyncMessageStore"]

#: ``search_engine`` values: Atlas Search, ``$text``, the bounded scan, or pick (text, else scan).
SEARCH_ENGINES = ("auto", "atlas", "text", "scan")
log = logging.getLogger("aecs_mongo")

_DUPLICATE_KEY = 11000
_INDEX_ALREADY_EXISTS = 68
_THREAD_UPSERT_RETRIES = 5
_TXN_ATTEMPTS = 5
_REPAIR_BATCH = 500
_MAX_PAGE = 1000
_WALK_FIELDS = {"messageId": 1, "references": 1, "inReplyTo": 1, "ts": 1, "messageKey": 1}
_INDEX = re.compile(r"\[\d+\]")
_VECTOR_KEYS = {"threadKey": 1, "messageKey": 1}
_SUMMARY_FIELDS = {"mailboxId": 1, "threadKey": 1, "threadId": 1, "ts": 1, "messageKey": 1, "subject": 1}


async def _resolve(value: Any) -> Any:
    """Await ``value`` if the driver returned an awaitable (Motor and PyMongo async differ)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def _to_list(cursor: Any) -> list[Any]:
    """Drain a cursor (``to_list`` is missing from mongomock; iteration works everywhere)."""
    return [doc async for doc in cursor]


async def _insert_ignoring_duplicates(collection: Any, documents: Sequence[Mapping[str, Any]]) -> set[int]:
    """One unordered ``insert_many``; returns the indexes refused as duplicates (already stored)."""
    if not documents:
        return set()
    try:
        await collection.insert_many(documents, ordered=False)
    except BulkWriteError as exc:
        if not _only_duplicates(exc):
            raise
        return {e["index"] for e in exc.details["writeErrors"]}
    return set()


def _errmsg(exc: OperationFailure) -> str:
    return str((exc.details or {}).get("errmsg") or exc)


def _is_transient(exc: PyMongoError) -> bool:
    """Worth retrying the whole transaction: labelled transient, or a duplicate key because a
    concurrent writer committed the same message or thread after this transaction began."""
    if exc.has_error_label("TransientTransactionError"):
        return True
    if isinstance(exc, DuplicateKeyError):
        return True
    return isinstance(exc, BulkWriteError) and _only_duplicates(exc)


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= _MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {_MAX_PAGE}")
    return limit


def _check_limit_value(value: object, name: str) -> int:
    """A positive int (a cap)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be 1 or more")
    return value


def _only_duplicates(exc: BulkWriteError) -> bool:
    errors = exc.details.get("writeErrors", [])
    return (
        bool(errors)
        and all(e.get("code") == _DUPLICATE_KEY for e in errors)
        and not exc.details.get("writeConcernErrors")
    )


class AsyncMessageStore:
    """One mailbox's mail in one database: ``messages``, ``bodies``, ``threads``, GridFS blobs.

    ``owner_addresses`` are the mailbox owner's addresses: bcc is stored only on mail they sent.
    ``shared_view=True`` is for a store whose reads other people see: bcc is never returned, and
    ``with_participant`` does not match bcc recipients. ``transactions`` (default: detect) writes
    each batch's documents in one transaction. ``search_engine`` and ``scan_limit`` (an optional
    cap on the messages a scan search examines; None: all): ``search``; ``vector_engine``:
    ``semantic_search``.
    ``sharded=True`` on a cluster sharded by ``scripts/shard.js``: point reads then carry the
    shard key and reach one shard. ``retry_seconds``: how long a batch's transaction retries
    transient errors (write conflicts, failovers, a crashed writer's open transaction).
    """

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
    ) -> None:
        self.mailbox_id = check_mailbox_id(mailbox_id)
        self.bucket_name = check_str(bucket_name, "bucket_name")
        if isinstance(owner_addresses, str):
            raise TypeError("owner_addresses must be a collection of addresses, not one str")
        self.owner_addresses = frozenset(check_str(a, "owner address").strip().lower() for a in owner_addresses)
        self.for_ai_max_chars = for_ai_max_chars
        if search_engine not in SEARCH_ENGINES:
            raise ValueError(f"search_engine must be one of {', '.join(SEARCH_ENGINES)}")
        self.search_engine = search_engine
        if vector_engine not in vectors.VECTOR_ENGINES:
            raise ValueError(f"vector_engine must be one of {', '.join(vectors.VECTOR_ENGINES)}")
        #: ``semantic_search``'s engine: ``atlas`` ($vectorSearch), ``exact`` (cosine over every
        #: vector, see ``vectors``) or ``auto`` (atlas where its vector index is queryable, else exact)
        self.vector_engine = vector_engine
        if scan_limit is not None and (isinstance(scan_limit, bool) or not isinstance(scan_limit, int)):
            raise TypeError("scan_limit must be None (no cap) or an int")
        if scan_limit is not None and scan_limit < 1:
            raise ValueError("scan_limit must be None (no cap) or at least 1")
        self.scan_limit = scan_limit
        #: Whether the server's plan stops at a query's limit (mongod) or reads the whole matched
        #: range first (SecantusDB): learned from ``explain`` on the first windowed read.
        self._stops_at_limit: bool | None = None
        self._text_index: bool | None = None  # learned on first search
        self._said: set[str] = set()  # conditions already logged by this store (each said once)
        self._transactions = transactions  # None: detected on first write
        self.shared_view = bool(shared_view)
        self.sharded = bool(sharded)
        if isinstance(retry_seconds, bool) or not isinstance(retry_seconds, (int, float)) or retry_seconds < 0:
            raise ValueError("retry_seconds must be a number of seconds, 0 or more")
        self.retry_seconds = float(retry_seconds)
        self._bind(db)

    def _bind(self, db: Any) -> None:
        self.db = db
        # mongomock (the unit tier) cannot take current PyMongo's bulk updates, nor run $text
        self._mongomock = type(db).__module__.startswith("mongomock")
        self._messages = db["messages"]
        self._bodies = db["bodies"]
        self._threads = db["threads"]
        self._uidls = db["uidls"]
        self._vectors = db[VECTORS_COLLECTION]
        # vectors written since the last check for a block to seal (the first write checks)
        self._vector_writes = embeddings.SEAL_CHECK_EVERY
        self._files = db[f"{self.bucket_name}.files"]
        self._chunks = db[f"{self.bucket_name}.chunks"]

    def with_write_concern(self, write_concern: WriteConcern) -> Self:
        """This store writing with ``write_concern`` (its transactions' commits too); for writes
        that must be durable before something irreversible, as POP3's delete-on-server.
        (mongomock, the unit tier, has no write concerns: there it is this store.)"""
        if self._mongomock:
            return self
        clone = copy.copy(self)
        clone._bind(self.db.with_options(write_concern=write_concern))
        return clone

    # --- indexes -------------------------------------------------------------------------

    async def ensure_indexes(self, atlas: bool = False, num_dimensions: int = 1536) -> IndexReport:
        """Create every index the store reads with; idempotent, like indexes.js.

        A refused text index is reported under ``skipped``, as is an index of the same name with
        other keys or another ``unique`` option (a conflict to resolve by hand). ``atlas=True``
        also asks for the Atlas Search and Vector Search indexes (``createSearchIndexes``); a
        server that is not Atlas refuses them, and that is reported the same way.
        """
        report = IndexReport()
        existing: dict[str, dict[str, Any]] = {}
        for spec in index_specs(self.bucket_name):
            if spec.collection not in existing:
                cursor = await _resolve(self.db[spec.collection].list_indexes())
                existing[spec.collection] = {ix["name"]: ix async for ix in cursor}
            found = existing[spec.collection].get(spec.name)
            if found is not None:
                same_keys = spec.is_text or list(found["key"].items()) == list(spec.keys)
                if same_keys and bool(found.get("unique")) == bool(spec.options.get("unique")):
                    report.existing.append(spec.name)
                else:
                    report.skipped[spec.name] = (
                        f"an index of that name exists with keys {dict(found['key'])}"
                        f" (unique={bool(found.get('unique'))})"
                    )
                continue
            try:
                await self.db[spec.collection].create_index(list(spec.keys), name=spec.name, **spec.options)
            except OperationFailure as exc:
                if not spec.is_text:
                    raise
                report.skipped[spec.name] = f"the server refused the text index: {_errmsg(exc)}"
                continue
            report.created.append(spec.name)
        if atlas:
            await self._ensure_search_indexes(report, num_dimensions)
        return report

    async def _ensure_search_indexes(self, report: IndexReport, num_dimensions: int) -> None:
        with contextlib.suppress(CollectionInvalid, OperationFailure):
            await self.db.create_collection(VECTORS_COLLECTION)  # Atlas indexes need the collection
        for spec in atlas_search_indexes(num_dimensions):
            try:
                await self.db.command(spec.command())
            except OperationFailure as exc:
                if exc.code == _INDEX_ALREADY_EXISTS:
                    report.existing.append(spec.name)
                else:
                    report.skipped[spec.name] = f"the server refused the Atlas index: {_errmsg(exc)}"
                continue
            report.created.append(spec.name)

    # --- writing ---------------------------------------------------------------------------

    async def store(
        self,
        email: NormalizedEmail | Mapping[str, Any] | bytes,
        attachments: Sequence[bytes | None] | None = None,
        uidl: str | None = None,
    ) -> StoreResult:
        """Store one message; a message already in the mailbox is left as it is (``inserted=False``)."""
        (result,) = await self._write_batch([self._build(email, attachments, uidl)])
        return result

    def _build(
        self, email: Mapping[str, Any] | bytes, attachments: Sequence[bytes | None] | None, uidl: str | None
    ) -> MessageDocuments:
        if uidl is not None:
            check_str(uidl, "uidl")
        docs = self._build_documents(email, attachments, uidl)
        for path in docs.ignored:
            name = _INDEX.sub("[]", path)
            if self._first_time(f"ignored field {name}"):
                log.info("ignoring unknown field %s (AECS-1 §10.6); said once per store", name)
        return docs

    def _first_time(self, condition: str) -> bool:
        """True the first time this store meets ``condition``: what the library logs about normal
        conditions of real mail, or about a missing index, it says once per store."""
        if condition in self._said:
            return False
        self._said.add(condition)
        return True

    def _build_documents(
        self, email: Mapping[str, Any] | bytes, attachments: Sequence[bytes | None] | None, uidl: str | None
    ) -> MessageDocuments:
        if isinstance(email, (bytes, bytearray, memoryview)):
            raw = bytes(email)
            parsed = _parse_raw(raw, self.for_ai_max_chars)
            return build_documents(
                parsed.email,
                mailbox_id=self.mailbox_id,
                owner_addresses=self.owner_addresses,
                raw_bytes=raw,
                attachment_data=attachments if attachments is not None else parsed.attachment_data,
                list_id=parsed.list_id,
                uidl=uidl,
                raw_from_full=True,
            )
        return build_documents(
            email,
            mailbox_id=self.mailbox_id,
            owner_addresses=self.owner_addresses,
            attachment_data=attachments,
            uidl=uidl,
        )

    async def store_many(
        self,
        items: Iterable[NormalizedEmail | Mapping[str, Any] | bytes],
        batch_size: int = 100,
        on_error: Callable[[int, Any, Exception], None] | None = None,
    ) -> list[StoreResult]:
        """Store many messages in batches; the same end state as storing them one by one.

        Without ``on_error`` a message that cannot be stored (``AecsMongoError``) raises, after
        the batches before it were written and before its own batch is. With ``on_error(index,
        item, exc)`` it is reported there and skipped. ``store_iter`` streams the results.
        """
        return [r async for r in self.store_iter(items, batch_size, on_error)]

    async def store_iter(
        self,
        items: Iterable[NormalizedEmail | Mapping[str, Any] | bytes],
        batch_size: int = 100,
        on_error: Callable[[int, Any, Exception], None] | None = None,
    ) -> AsyncIterator[StoreResult]:
        """``store_many`` as a stream: memory is bounded by the batch, not by the input.

        The next batch is read and built on a worker thread while the current one is written
        (``prefetch.py``), so parsing raw mail overlaps the server's round trips.
        """
        _check_limit(batch_size)
        numbered = enumerate(items)
        Built = tuple[list[MessageDocuments], list[tuple[int, Any, AecsMongoError]]]

        def build_next() -> Built | None:
            batch: list[MessageDocuments] = []
            refused: list[tuple[int, Any, AecsMongoError]] = []  # reported from the caller's thread
            for index, item in numbered:
                try:
                    batch.append(self._build(item, None, None))
                except AecsMongoError as exc:
                    if on_error is None:
                        raise
                    refused.append((index, item, exc))
                if len(batch) >= batch_size:
                    break
            return (batch, refused) if batch or refused else None

        prefetch: AsyncPrefetch[Built] = AsyncPrefetch(build_next)
        try:
            while (built := await prefetch.next()) is not None:
                batch, refused = built
                for error in refused:
                    assert on_error is not None
                    on_error(*error)
                if batch:
                    for result in await self._write_batch(batch):
                        yield result
        finally:
            prefetch.close()

    async def _write_batch(self, batch: Sequence[MessageDocuments]) -> list[StoreResult]:
        """C.4 order, batched: blobs, bodies, messages (one unordered insert), thread updates.

        One ``_id $in`` find first tells the batch's new messages from copies of stored ones: only
        new messages upload blobs (a copy keeps nothing but its raw bytes, as a variant), so the
        end state does not depend on where batches begin, and the blob upload needs no lookup.
        """
        first: dict[str, MessageDocuments] = {}
        for docs in batch:
            first.setdefault(docs.message["_id"], docs)
        ids = list(first)
        stored = {m["_id"] async for m in self._messages.find(self._by_ids(ids), {"_id": 1})}
        unique = [d for d in first.values() if d.message["_id"] not in stored]
        await self._put_blobs([(blob, d.message_key) for d in unique for blob in d.blobs], absent=True)
        if not unique:
            created: set[str] = set()
        elif await self._use_transactions():
            created = await self._commit_in_transaction(unique)
        else:
            # no transactions: the insert is the commit point; a crash after it leaves the
            # thread summary short by one until reindex() (README, "Recovery")
            await _insert_ignoring_duplicates(self._bodies, [d.body for d in unique])
            rejected = await _insert_ignoring_duplicates(self._messages, [d.message for d in unique])
            inserted = [d for i, d in enumerate(unique) if i not in rejected]
            await self._fold_many([d.message for d in inserted])
            created = {d.message["_id"] for d in inserted}
        fresh = []
        for docs in batch:
            fresh.append(docs.message["_id"] in created)
            created.discard(docs.message["_id"])  # a repeat within the batch is "already stored"
        # a repeat within the batch, and every copy of a stored message, may be other bytes
        variants = await self._keep_variants([d for d, new in zip(batch, fresh, strict=True) if not new])
        return [
            StoreResult(d.message_id, d.message_key, d.thread_id, d.thread_key, new, id(d) in variants)
            for d, new in zip(batch, fresh, strict=True)
        ]

    async def _keep_variants(self, copies: Sequence[MessageDocuments]) -> set[int]:
        """Keep the raw bytes of each copy of a stored message that differ from every copy kept
        (compared by SHA-256), as a blob under the message's prefix and a ``variants`` record on it.

        Blob first, then the hash added to ``variantHashes`` (the commit point: atomic and
        idempotent, so the same bytes again or from a concurrent writer add nothing), then the
        copy's record (size, time, UIDL) appended to ``variants`` by the writer that added it.
        Returns ``id()`` of the copies kept. Costs nothing for mail without duplicates.
        """
        copies = [d for d in copies if d.message.get("rawSha256")]
        if not copies:
            return set()
        ids = list({d.message["_id"] for d in copies})
        fields = {"rawSha256": 1, "variantHashes": 1, "blobPrefix": 1, "blobs": 1, "messageKey": 1}
        stored = {m["_id"]: m async for m in self._messages.find(self._by_ids(ids), fields)}
        known: dict[str, set[str]] = {}
        todo: list[tuple[MessageDocuments, Mapping[str, Any], Blob]] = []
        for docs in copies:
            message = stored.get(docs.message["_id"])
            if message is None:  # deleted meanwhile: nothing to keep it beside
                continue
            if message["_id"] not in known:
                known[message["_id"]] = await self._kept_hashes(message)
            sha = docs.message["rawSha256"]
            if sha in known[message["_id"]]:
                continue
            known[message["_id"]].add(sha)
            raw = next(b.data for b in docs.blobs if b.key.endswith("/raw.eml"))
            todo.append((docs, message, Blob(variant_blob_key(message["blobPrefix"], sha), raw, "message/rfc822")))
        if not todo:
            return set()
        await self._put_blobs([(blob, message["messageKey"]) for _, message, blob in todo])
        kept: list[tuple[MessageDocuments, Mapping[str, Any], dict[str, Any]]] = []
        for docs, message, blob in todo:
            sha = docs.message["rawSha256"]
            # the hash is the commit point: $addToSet is atomic on every server (a conditional
            # pipeline update is not, on the test server), so exactly one writer claims a copy
            claim = await self._messages.update_one(self._by_id(message["_id"]), {"$addToSet": {"variantHashes": sha}})
            if claim.modified_count:
                record = {
                    "sha256": sha,
                    "size": len(blob.data),
                    "receivedAt": _dt.datetime.now(_dt.UTC).replace(microsecond=0),
                    "uidl": docs.message.get("uidl"),
                    "blobKey": blob.key,
                }
                kept.append((docs, message, record))
                log.debug("kept other bytes of %s as a variant (%s)", docs.message_id, sha[:12])
        # the records of the copies this writer claimed, in one round trip
        await self._write_each(
            self._messages, [(self._by_id(m["_id"]), {"$push": {"variants": r}}) for _, m, r in kept]
        )
        return {id(docs) for docs, _, _ in kept}

    async def _kept_hashes(self, message: Mapping[str, Any]) -> set[str]:
        """SHA-256 of every copy kept of a stored message (hashing raw.eml for mail stored before
        the store recorded ``rawSha256``)."""
        hashes = set(message.get("variantHashes") or ())
        if message.get("rawSha256"):
            hashes.add(message["rawSha256"])
        elif "raw.eml" in (message.get("blobs") or ()):
            raw = await self._get_blob(message["blobPrefix"] + "raw.eml")
            if raw is not None:
                hashes.add(hashlib.sha256(raw).hexdigest())
        return hashes

    async def _use_transactions(self) -> bool:
        """Transactions where the deployment has them: a replica set or a sharded cluster."""
        if self._transactions is None:
            if self._mongomock:
                self._transactions = False
            else:
                hello = await self.db.client.admin.command("hello")
                self._transactions = bool(hello.get("setName") or hello.get("msg") == "isdbgrid")
        return self._transactions

    async def _commit_in_transaction(
        self, unique: Sequence[MessageDocuments], deadline: float | None = None
    ) -> set[str]:
        """Body, message and thread summary of each new message in one transaction (C.4).

        Transient errors (a write conflict, a failover, the open transaction of a writer that
        died holding the same documents, which the server keeps until its
        ``transactionLifetimeLimitSeconds``: 60 s on mongod) retry the whole transaction with a
        jittered, capped backoff for up to ``retry_seconds`` (120 s by default, as the driver's
        ``with_transaction``); an unknown commit result retries the commit. A batch that keeps
        conflicting (``_TXN_ATTEMPTS`` times) is split in halves that share what is left of the
        budget: a smaller transaction touches fewer thread summaries, and atomicity is per
        message anyway. Other errors raise at once. Returns the ``_id`` of every message created.
        """
        if deadline is None:
            deadline = monotonic() + self.retry_seconds
        try:
            return await self._transaction_with_retries(unique, deadline)
        except PyMongoError as exc:
            if len(unique) == 1 or not _is_transient(exc) or monotonic() >= deadline:
                raise
        half = len(unique) // 2
        created = await self._commit_in_transaction(unique[:half], deadline)
        return created | await self._commit_in_transaction(unique[half:], deadline)

    async def _transaction_with_retries(self, unique: Sequence[MessageDocuments], deadline: float) -> set[str]:
        session = await _resolve(self.db.client.start_session())
        async with session:
            attempt = 0
            while True:
                attempt += 1
                await _resolve(session.start_transaction(write_concern=self.db.write_concern))
                try:
                    created = await self._transaction_writes(unique, session, recheck=attempt > 1)
                    await self._commit(session, deadline)
                    return created
                except PyMongoError as exc:
                    if session.in_transaction:
                        await session.abort_transaction()
                    remaining = deadline - monotonic()
                    if not _is_transient(exc) or remaining <= 0:
                        raise
                    if len(unique) > 1 and attempt >= _TXN_ATTEMPTS:
                        raise  # the caller splits the batch
                    log.debug("transaction attempt %d of %d messages: %s; retrying", attempt, len(unique), exc)
                    # jittered: writers that collided once must not retry in lock step
                    await asyncio.sleep(min(0.005 * 2**attempt * (1 + random.random()), 0.5, remaining))

    async def _commit(self, session: Any, deadline: float) -> None:
        while True:
            try:
                await session.commit_transaction()
                return
            except PyMongoError as exc:
                if not exc.has_error_label("UnknownTransactionCommitResult") or monotonic() > deadline:
                    raise

    async def _transaction_writes(self, unique: Sequence[MessageDocuments], session: Any, recheck: bool) -> set[str]:
        """Insert the batch's bodies and messages, merge each thread's new messages in one upsert.

        The first attempt trusts the caller's lookup (``unique`` were not stored) and inserts
        bodies outright: a concurrent writer's message, or a body a non-transactional crash left,
        aborts it as a duplicate key, a transient error. A retry (``recheck``) looks again inside
        the transaction and replaces bodies, so leftovers cannot block it.
        """
        new = list(unique)
        if recheck:
            ids = [d.message["_id"] for d in unique]
            stored = {m["_id"] async for m in self._messages.find(self._by_ids(ids), {"_id": 1}, session=session)}
            new = [d for d in unique if d.message["_id"] not in stored]
            if not new:
                return set()
            bodies = [ReplaceOne(self._upsert_key(d.body["_id"]), d.body, upsert=True) for d in new]
            await self._bodies.bulk_write(bodies, ordered=True, session=session)
        else:
            await self._bodies.insert_many([d.body for d in new], ordered=True, session=session)
        await self._messages.insert_many([d.message for d in new], ordered=True, session=session)
        await self._fold_in_transaction([d.message for d in new], session)
        return {d.message["_id"] for d in new}

    async def _fold_in_transaction(self, messages: Sequence[Mapping[str, Any]], session: Any) -> None:
        """Each thread's new messages in one write: a thread the batch starts is inserted whole,
        a stored one read and set to the merge (``merge_thread_summaries``). Exact: the read is
        the transaction's snapshot, and a concurrent change of the summary after it aborts the
        transaction (a write conflict, or a duplicate key for a thread inserted meanwhile)."""
        summaries = thread_summaries(messages)
        ids = [s["_id"] for s in summaries]
        stored = {t["_id"]: t async for t in self._threads.find(self._by_ids(ids), session=session)}
        fresh = [s for s in summaries if s["_id"] not in stored]
        if fresh:
            await self._threads.insert_many(fresh, ordered=True, session=session)
        sets = []
        for summary in summaries:
            if summary["_id"] in stored:
                old = stored[summary["_id"]]
                merged = merge_thread_summaries(old, summary)
                changed = {k: v for k, v in merged.items() if k not in old or old[k] != v}
                sets.append(UpdateOne(self._by_id(summary["_id"]), {"$set": changed}))
        if sets:
            await self._threads.bulk_write(sets, ordered=True, session=session)

    async def _fold_many(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Merge newly inserted messages into their threads without a transaction: a thread the
        batch starts is inserted whole (one unordered insert); a stored one, or one a concurrent
        writer inserted first, gets one atomic pipeline merge (``summary_merge_update``) per thread."""
        summaries = thread_summaries(messages)
        if not self._mongomock and summaries:
            ids = [s["_id"] for s in summaries]
            stored = {t["_id"] async for t in self._threads.find(self._by_ids(ids), {"_id": 1})}
            fresh = [s for s in summaries if s["_id"] not in stored]
            taken = await _insert_ignoring_duplicates(self._threads, fresh)
            summaries = [s for s in summaries if s["_id"] in stored] + [fresh[i] for i in sorted(taken)]
        updates = [summary_merge_update(s, sharded=self.sharded) for s in summaries]
        if len(updates) <= 1 or self._mongomock:
            for selector, pipeline in updates:
                await self._fold_into_thread(selector, pipeline)
            return
        try:
            await self._threads.bulk_write([UpdateOne(*update, upsert=True) for update in updates], ordered=True)
        except BulkWriteError as exc:
            if not _only_duplicates(exc):
                raise
            # a concurrent writer created a thread first: redo the failed op and the ones after it
            failed = exc.details["writeErrors"][0]["index"]
            for selector, pipeline in updates[failed:]:
                await self._fold_into_thread(selector, pipeline)

    async def _put_blobs(self, items: Sequence[tuple[Blob, str]], absent: bool = False) -> None:
        """Upload the blobs that have no ``files`` document yet; the cost is per blob, never per
        blob already stored: every statement is answered by the ``_id`` or ``files_id_1_n_1`` index.
        ``absent``: the blobs belong to messages not stored, so none is expected to be there and
        the ``files`` lookup is skipped (what an interrupted upload left is still found below).

        Leftovers of an interrupted upload are looked for only where there is a reason: a chunk
        insert refused as a duplicate (a chunk of that key is already there), or blobs with no
        chunks at all (one ``$in`` delete per batch). Uploads insert chunks in order, so a
        leftover that reaches past the new blob's end also holds its chunk 0, which the insert
        then reports.
        """
        if not items:
            return
        keys = [blob.key for blob, _ in items]
        done: set[str] = set()
        if not absent:
            done = {f["_id"] async for f in self._files.find({"_id": {"$in": keys}}, {"_id": 1})}
        todo = list({blob.key: (blob, mkey) for blob, mkey in items if blob.key not in done}.values())
        if not todo:
            return
        chunks = [c for blob, _ in todo for c in blobs.chunk_documents(blob.key, blob.data)]
        refused = await _insert_ignoring_duplicates(self._chunks, chunks)
        empty = [blob.key for blob, _ in todo if not blob.data]
        if absent and (refused or empty):
            # something is there after all: a blob whose files document (written last) exists is
            # complete (a concurrent writer's, or one a crash left before its message) and kept
            suspects = list({chunks[i]["files_id"] for i in refused} | set(empty))
            complete = {
                f["_id"]: f["length"] async for f in self._files.find({"_id": {"$in": suspects}}, {"length": 1})
            }
            for blob, _ in todo:
                length = complete.get(blob.key)
                if length is not None and blobs.chunk_count(len(blob.data)) > blobs.chunk_count(length):
                    # drop the chunks this upload added past the kept blob's end
                    await self._chunks.delete_many({"files_id": blob.key, "n": {"$gte": blobs.chunk_count(length)}})
            todo = [(blob, mkey) for blob, mkey in todo if blob.key not in complete]
            refused = {i for i in refused if chunks[i]["files_id"] not in complete}
            empty = [key for key in empty if key not in complete]
        if empty:  # no chunk insert to tell: drop any leftover of all of them in one statement
            await self._chunks.delete_many({"files_id": {"$in": empty}})
        if refused:
            await self._replace_leftover_chunks([chunks[i] for i in sorted(refused)], todo)
        files = [
            blobs.file_document(
                blob.key, len(blob.data), blob.content_type, {"mailboxId": self.mailbox_id, "messageKey": mkey}
            )
            for blob, mkey in todo
        ]
        await _insert_ignoring_duplicates(self._files, files)

    async def _replace_leftover_chunks(
        self, refused: Sequence[Mapping[str, Any]], todo: Sequence[tuple[Blob, str]]
    ) -> None:
        """Overwrite the chunks an interrupted upload left (they may hold other bytes) and drop any
        past the new end; each statement is on an index. Rare: only after an interrupted upload."""
        suspects = {c["files_id"] for c in refused}
        log.debug("completing %d interrupted blob upload(s)", len(suspects))
        # on a sharded cluster the chunks' shard key ({files_id, n}) must be in the filter
        keys = ("_id", "files_id", "n") if self.sharded else ("_id",)
        await self._write_each(self._chunks, [({k: c[k] for k in keys}, c) for c in refused], replace=True)
        for blob, _ in todo:
            if blob.key in suspects:
                await self._chunks.delete_many({"files_id": blob.key, "n": {"$gte": blobs.chunk_count(len(blob.data))}})

    async def _fold_into_thread(self, selector: Mapping[str, Any], pipeline: Sequence[Mapping[str, Any]]) -> None:
        for attempt in range(_THREAD_UPSERT_RETRIES):
            try:
                await self._threads.update_one(selector, pipeline, upsert=True)
                return
            except DuplicateKeyError:
                # two writers upserted the same new thread at once; the loser retries as an update
                if attempt == _THREAD_UPSERT_RETRIES - 1:
                    raise

    # --- blobs ---------------------------------------------------------------------------

    async def _get_blob(self, key: str) -> bytes | None:
        file_doc = await self._files.find_one({"_id": key})
        if file_doc is None:
            return None
        chunks = await _to_list(self._chunks.find({"files_id": key}, {"n": 1, "data": 1}).sort("n", 1))
        return blobs.assemble(file_doc, chunks)

    def _blob_key(self, message_id: str, name: str) -> str:
        return blob_prefix(self.mailbox_id, message_key(message_id)) + name

    async def get_raw(self, message_id: str) -> bytes | None:
        """The message exactly as received (``raw.eml``), or None."""
        return await self._get_blob(self._blob_key(message_id, "raw.eml"))

    async def get_raw_variants(self, message_id: str) -> list[bytes]:
        """Every copy of the message kept, as received: ``get_raw``'s first, then each copy with
        other bytes under the same Message-ID, in the order they came. Empty if absent."""
        message = await self._messages.find_one(
            self._by_id(self._id_for(message_id)), {"blobPrefix": 1, "blobs": 1, "variantHashes": 1}
        )
        if message is None:
            return []
        keys = [message["blobPrefix"] + "raw.eml"] if "raw.eml" in (message.get("blobs") or ()) else []
        keys += [variant_blob_key(message["blobPrefix"], sha) for sha in message.get("variantHashes") or ()]
        copies = [await self._get_blob(key) for key in keys]
        return [c for c in copies if c is not None]

    async def get_html(self, message_id: str) -> str | None:
        """The HTML body (``body.html``), or None."""
        data = await self._get_blob(self._blob_key(message_id, "body.html"))
        return None if data is None else data.decode("utf-8")

    async def get_attachment(self, message_id: str, idx: int) -> bytes | None:
        """Attachment ``idx`` (MIME order), or None when absent or not stored."""
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"idx must be an int, not {type(idx).__name__}")
        return await self._get_blob(self._blob_key(message_id, f"att/{idx}"))

    # --- reading one message -----------------------------------------------------------------

    def _by_id(self, _id: str) -> dict[str, Any]:
        """A point read by ``_id`` (which embeds the mailbox). On a sharded cluster it also names
        the mailbox, the shard key's prefix, so mongos sends it to one shard."""
        return {"_id": _id, "mailboxId": self.mailbox_id} if self.sharded else {"_id": _id}

    def _by_ids(self, ids: list[str]) -> dict[str, Any]:
        return {"_id": {"$in": ids}, "mailboxId": self.mailbox_id} if self.sharded else {"_id": {"$in": ids}}

    def _upsert_key(self, _id: str) -> dict[str, Any]:
        """The filter of every upsert: ``_id`` (which embeds the mailbox); on a sharded cluster the
        whole shard key (``mailboxId``, ``_id``), as an upsert there requires. Elsewhere the
        extra field only costs: the test server plans ``{_id, mailboxId}`` as a collection scan."""
        return self._by_id(_id)

    def _id_for(self, message_id: str) -> str:
        # the _id embeds the mailbox, so an _id lookup never crosses mailboxes
        return doc_id(self.mailbox_id, message_key(message_id))

    async def get_message(self, message_id: str, include_raw: bool = False) -> NormalizedEmail | None:
        """The AECS-1 object as stored (hot + warm; the cold tier too with ``include_raw``)."""
        _id = self._id_for(message_id)
        message = await self._messages.find_one(self._by_id(_id))
        if message is None:
            return None
        body = await self._bodies.find_one(self._by_id(_id))
        return await self._assemble(message, body, include_raw=include_raw)

    async def _assemble(
        self,
        message: Mapping[str, Any],
        body: Mapping[str, Any] | None,
        *,
        include_raw: bool,
        position: int | None = None,
    ) -> NormalizedEmail:
        spilled = None
        if body is not None and body.get("spill"):
            data = await self._get_blob(body["spill"])
            if data is None:
                raise AecsMongoError(f"the spilled body of {message['messageId']!r} is missing")
            spilled = json.loads(data.decode("utf-8"))
        raw_full = html = raw = None
        if include_raw:
            names = message.get("blobs") or ()
            prefix = message["blobPrefix"]
            if "raw.eml" in names:
                raw_full = await self._get_blob(prefix + "raw.eml")
            if "body.html" in names:
                html_bytes = await self._get_blob(prefix + "body.html")
                html = None if html_bytes is None else html_bytes.decode("utf-8")
            if message.get("rawFromFull") and raw_full is not None:
                raw = _parse_raw(raw_full, self.for_ai_max_chars).email.get("content", {}).get("raw")
        assembled = to_normalized_email(
            message,
            body,
            raw_full=raw_full,
            raw=raw,
            html=html,
            spilled=spilled,
            position=position,
            shared=self.shared_view,
        )
        return cast(NormalizedEmail, assembled)

    # --- threads ---------------------------------------------------------------------------

    def _thread_filter(self, thread_id: str) -> dict[str, Any]:
        return {"mailboxId": self.mailbox_id, "threadKey": thread_key(check_str(thread_id, "thread_id"))}

    async def get_thread(self, thread_id: str) -> list[NormalizedEmail]:
        """Every message of a thread, oldest first, each with ``thread.position`` set."""
        messages = await _to_list(
            self._messages.find(self._thread_filter(thread_id)).sort([("ts", 1), ("messageKey", 1)])
        )
        ids = [m["_id"] for m in messages]
        bodies = {b["_id"]: b async for b in self._bodies.find(self._by_ids(ids))}
        return [
            await self._assemble(m, bodies.get(m["_id"]), include_raw=False, position=i) for i, m in enumerate(messages)
        ]

    async def thread_context(self, thread_id: str, limit: int = 20) -> list[ContextEntry]:
        """The newest ``limit`` messages of a thread for a prompt, oldest first, with positions."""
        _check_limit(limit)
        selector = self._thread_filter(thread_id)
        query = queries.thread_context_query(self.mailbox_id, selector["threadKey"])
        size = await self._thread_size(selector["threadKey"])
        newest = await self._sorted_rows(query, None, limit, queries.THREAD_CONTEXT_PROJECTION, size)
        if not newest:
            return []
        total = len(newest)
        if total == limit:
            # a huge thread: its summary's count (counting it would read the whole thread here)
            big = size is not None and size > windows.PLAIN_MAX and not self._stops_at_limit
            total = size if big and size is not None else await self._messages.count_documents(selector)
        first_position = max(total - len(newest), 0)
        return [
            cast(ContextEntry, context_entry(m, first_position + offset)) for offset, m in enumerate(reversed(newest))
        ]

    # --- pages -----------------------------------------------------------------------------

    async def _page(
        self,
        query: queries.KeysetQuery,
        cursor: str | None,
        limit: int,
        projection: Mapping[str, Any] | None,
        size: int | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        _check_limit(limit)
        after = queries.decode_cursor(query, cursor, self.mailbox_id)
        rows = await self._sorted_rows(query, after, limit + 1, projection, size)
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = queries.encode_cursor(query, rows[-1])
        return rows, next_cursor

    async def _sorted_rows(
        self,
        query: queries.KeysetQuery,
        after: tuple[int, str] | None,
        need: int,
        projection: Mapping[str, Any] | None,
        size: int | None = None,
    ) -> list[dict[str, Any]]:
        """The first ``need`` rows of a keyset read after ``after``: the plain query where the
        server stops at the limit or the read matches at most ``windows.PLAIN_MAX`` documents
        (``size``, where known), else bounded ``ts`` windows (``windows.py``), same rows."""
        if self._stops_at_limit:
            found = self.db[query.collection].find(queries.keyset_filter(query, after), projection)
            found = found.sort(query.sort).limit(need)
            return await _to_list(found if query.hint is None else found.hint(query.hint))
        # Where the server reads whole ranges it also walks a hinted index whole (every
        # mailbox's entries) and scans the collection for a top-level $or: flat filters only.
        small = size is not None and size <= windows.PLAIN_MAX
        read = await self._windowed_read(query, sample=not small)
        if read.hint_fraction and len(read.hint) / read.hint_fraction <= windows.PLAIN_MAX:
            small = True  # a small mailbox: reading all of the range costs little
        rows: list[dict[str, Any]] = []

        def take(batch: list[dict[str, Any]]) -> bool:
            rows.extend(batch[: need - len(rows)])
            return len(rows) >= need

        await self._windows(query, read, after, need, projection, take, plain=small)
        return rows

    async def _thread_size(self, tkey: str) -> int | None:
        """The thread's message count from its summary (None: no summary)."""
        summary = await self._threads.find_one(self._by_id(doc_id(self.mailbox_id, tkey)), {"messageCount": 1})
        return None if summary is None else int(summary.get("messageCount") or 0)

    async def _windows(
        self,
        query: queries.KeysetQuery,
        read: windows.WindowedRead,
        after: tuple[int, str] | None,
        need: int | None,
        projection: Mapping[str, Any] | None,
        take: Callable[[list[dict[str, Any]]], Any],
        chunk: int = 500,
        plain: bool = False,
    ) -> None:
        """Walk a read's windows, handing each answer window's rows (sorted) to ``take`` (a plain or
        a coroutine function) until it says True or the range is exhausted. ``need``: rows wanted
        (None: the whole range, in windows of about ``chunk`` rows)."""
        flat, residual = queries.flat_filter(query)
        if residual is not None and projection is not None:
            projection = queries.with_fields(projection, [path for clause in residual for path in clause])
        collection = self.db[query.collection]
        walker = windows.walk_plain(read, after) if plain else windows.walk(read, after, need, chunk)
        taken = 0
        try:
            window = next(walker)
            while True:
                selector = windows.merge_filter(flat, window, query.ts_field, query.key_field)
                found = collection.find(selector, queries.PROBE_PROJECTION if window.probe else projection)
                found = found.sort(query.sort)
                if need is not None and not window.probe and residual is None:
                    found = found.limit(need - taken)
                batch = await _to_list(found)
                if residual is not None and not window.probe:
                    batch = [r for r in batch if queries.residual_match(r, residual)]
                if self._stops_at_limit is None and not window.probe and len(batch) > 1:
                    await self._learn_limit_behaviour(collection, selector, query.sort)
                if not window.probe:
                    taken += len(batch)
                    if await _resolve(take(batch)):
                        return
                window = walker.send(len(batch))
        except StopIteration:
            return
        finally:
            walker.close()

    async def _windowed_read(self, query: queries.KeysetQuery, sample: bool = True) -> windows.WindowedRead:
        """The read as ``windows.walk`` takes it, with a uniform sample of the mailbox's ``ts``
        (where its mail is, and about how much there is): the
        messages whose key falls in the first fraction of the key space, on
        ``aecs_messages_spec_version`` (a bounded key range there), the fraction growing until
        the sample holds enough (mail under another spec version is left out: a hint only)."""
        from ..normalize.parse import SPEC_VERSION

        read = queries.windowed_read(query, self.mailbox_id, int(_dt.datetime.now(_dt.UTC).timestamp()))
        if not sample:
            return read
        found: list[int] = []
        fraction = windows.SAMPLE_FRACTIONS[0]
        for fraction in windows.SAMPLE_FRACTIONS:
            selector = queries.sample_filter(self.mailbox_id, SPEC_VERSION, fraction)
            found = sorted([int(r["ts"]) async for r in self._messages.find(selector, {"_id": 0, "ts": 1})])
            if len(found) >= windows.SAMPLE_ENOUGH:
                break
        return dataclasses.replace(read, hint=tuple(found), hint_fraction=fraction)

    async def _learn_limit_behaviour(self, collection: Any, selector: Mapping[str, Any], sort: Any) -> None:
        """Whether the server stops at the limit: ``explain`` the window just read (2 rows or more)
        with ``limit(1)``; more than one document examined means it reads the range first."""
        if self._mongomock:
            self._stops_at_limit = False
            return
        command = {"find": collection.name, "filter": dict(selector), "sort": dict(sort), "limit": 1}
        try:
            explained = await self.db.command({"explain": command, "verbosity": "executionStats"})
        except OperationFailure:
            self._stops_at_limit = False  # no explain: keep the windows (right on any server)
            return
        examined = int(explained.get("executionStats", {}).get("totalDocsExamined", 2))
        self._stops_at_limit = examined <= 1
        log.debug("server stops at the limit: %s (examined %d for limit 1)", self._stops_at_limit, examined)

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
        if sender is not None:
            check_str(sender, "sender")
        tkey = None if thread_id is None else thread_key(check_str(thread_id, "thread_id"))
        query = queries.inbox_query(
            self.mailbox_id, sender=sender, thread_key=tkey, since=since, until=until, order=check_str(order, "order")
        )
        size = None if tkey is None else await self._thread_size(tkey)
        rows, next_cursor = await self._page(query, cursor, limit, queries.LIST_PROJECTION, size)
        return MessagePage([cast(MessageSummary, message_summary(r)) for r in rows], next_cursor)

    async def with_participant(self, address: str, cursor: str | None = None, limit: int = 50) -> MessagePage:
        """Mail to or from one address (from, to, cc, stored bcc), newest first."""
        query = queries.participant_query(self.mailbox_id, address, shared=self.shared_view)
        rows, next_cursor = await self._page(query, cursor, limit, queries.LIST_PROJECTION)
        return MessagePage([cast(MessageSummary, message_summary(r)) for r in rows], next_cursor)

    async def list_threads(self, cursor: str | None = None, limit: int = 50) -> ThreadPage:
        """The conversation list: one summary per thread, most recent activity first."""
        query = queries.threads_query(self.mailbox_id)
        rows, next_cursor = await self._page(query, cursor, limit, None)
        threads: list[ThreadSummary] = [
            {
                "threadId": r["threadId"],
                "subject": r.get("subject"),
                "messageCount": int(r["messageCount"]),
                "firstTs": int(r["firstTs"]),
                "lastTs": int(r["lastTs"]),
                "firstMessageKey": r["firstMessageKey"],
                "lastMessageKey": r["lastMessageKey"],
            }
            for r in rows
        ]
        return ThreadPage(threads, next_cursor)

    async def replies_to(self, message_id: str) -> list[MessageSummary]:
        """Messages whose References (or In-Reply-To) name ``message_id``, oldest first."""
        mid = strip_message_id(message_id)
        by_references = await _to_list(
            self._messages.find({"mailboxId": self.mailbox_id, "references": mid}, queries.LIST_PROJECTION)
        )
        by_parent = await _to_list(
            self._messages.find({"mailboxId": self.mailbox_id, "inReplyTo": mid}, queries.LIST_PROJECTION)
        )
        unique = {r["messageKey"]: r for r in by_references + by_parent}
        ordered = sorted(unique.values(), key=lambda r: (r["ts"], r["messageKey"]))
        return [cast(MessageSummary, message_summary(r)) for r in ordered]

    async def stale(self, spec_version: str, limit: int = 100) -> list[str]:
        """Message ids normalized under a spec version other than ``spec_version`` (C.4)."""
        check_str(spec_version, "spec_version")
        _check_limit(limit)
        rows = await _to_list(
            self._messages.find(
                {"mailboxId": self.mailbox_id, "specVersion": {"$ne": spec_version}}, {"_id": 0, "messageId": 1}
            )
            .sort([("specVersion", 1), ("messageKey", 1)])
            .hint("aecs_messages_spec_version")
            .limit(limit)
        )
        return [r["messageId"] for r in rows]

    # --- deleting ----------------------------------------------------------------------------

    async def delete(self, message_id: str) -> bool:
        """Remove a message from every tier and recompute its thread summary. False if absent
        (leftovers of an interrupted store of it are still cleared). The deletion core is
        ``deletion``'s, shared with ``expire`` and ``erase_mailbox``."""
        _id = self._id_for(message_id)
        deleter = deletion.AsyncDeleter(self)
        message = await self._messages.find_one(self._by_id(_id), lifecycle.MESSAGE_FIELDS)
        if message is None:
            await deleter.remove_leftovers(message_key(message_id))
            return False
        await deleter.delete_batch([message], by_prefix=True)
        return True

    async def expire(
        self,
        before: _dt.datetime,
        *,
        dry_run: bool = False,
        batch_size: int = 1000,
        on_progress: Callable[[Mapping[str, int]], None] | None = None,
    ) -> ExpireReport:
        """Retention: remove every message whose sort key ``ts`` is earlier than ``before`` (an
        aware datetime) from every tier; each affected thread summary is recomputed once, and a
        thread left empty is removed. Batched and resumable (run it again after a crash).
        ``dry_run``: count what would go, change nothing. ``on_progress(removed)`` after each
        statement: documents removed so far per collection. The vector blocks then lose the
        entries of the expired vectors (``removed["vector_blocks"]``: blocks left empty)."""
        report = await deletion.expire(self, before, dry_run=dry_run, batch_size=batch_size, on_progress=on_progress)
        if not dry_run and report.removed.get(VECTORS_COLLECTION):
            compacted = await embeddings.compact(self)
            if compacted["blocksRemoved"]:
                report.removed[BLOCKS_COLLECTION] = compacted["blocksRemoved"]
            log.debug(
                "expire in mailbox %r: %d vector block entries dropped", self.mailbox_id, compacted["entriesDropped"]
            )
        return report

    async def erase_mailbox(
        self, *, batch_size: int = 1000, on_progress: Callable[[Mapping[str, int]], None] | None = None
    ) -> EraseReport:
        """Remove every document of the mailbox from every collection the store writes, and every
        GridFS file and chunk under its blob prefix (README, "Export, retention and erasure").
        Batched, idempotent and resumable; other mailboxes are untouched."""
        return await deletion.erase_mailbox(self, batch_size=batch_size, on_progress=on_progress)

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
        of blobs (at most 16 MB, or the largest message), never the mailbox; write the copies
        with ``aecs_mongo.sinks``."""
        return deletion.export_copies(self, variants=variants, since=since, until=until, on_missing=on_missing)

    async def _recompute_thread(self, tkey: str) -> None:
        selector = {"mailboxId": self.mailbox_id, "threadKey": tkey}
        members = await _to_list(self._messages.find(selector, _SUMMARY_FIELDS))
        summary = thread_summary_from_messages(members)
        if summary is None:
            await self._threads.delete_one(self._by_id(doc_id(self.mailbox_id, tkey)))
        else:
            await self._threads.replace_one(self._upsert_key(summary["_id"]), summary, upsert=True)

    # --- search -------------------------------------------------------------------------------

    async def search(
        self, query: str, limit: int = 20, progress: Callable[[int], None] | None = None
    ) -> SearchResults[SearchHit]:
        """Full-text search of subject and clean text: messageId, subject, ts, snippet (best first).

        The engine is ``search_engine``: Atlas Search, ``$text`` on ``aecs_bodies_search``, or
        (``auto`` without a text index) the scan: a literal, case-insensitive match that goes
        through the mailbox newest first in bounded windows until it has ``limit`` hits or has
        looked at every message, newest hits first. ``scan_limit`` caps the messages it
        examines; a capped search has ``complete=False``. ``progress(examined)`` is called after
        each window of the scan. The query is always data.
        """
        check_str(query, "query")
        _check_limit(limit)
        engine = self.search_engine
        if engine == "auto":
            engine = "text" if await self._has_text_index() else "scan"
        if not query.strip():
            return SearchResults(engine=engine)
        examined, complete = 0, True
        if engine == "atlas":
            cursor = await _resolve(
                self._bodies.aggregate(queries.atlas_search_pipeline(self.mailbox_id, query, limit))
            )
            hits = await _to_list(cursor)
        elif engine == "text":
            hits = await _to_list(
                self._bodies.find(
                    queries.text_search_filter(self.mailbox_id, query),
                    {"subject": 1, "clean": 1, "score": {"$meta": "textScore"}},
                )
                .sort([("score", {"$meta": "textScore"})])
                .limit(limit)
            )
        else:
            if self._first_time("scan search"):
                log.info(
                    "search in mailbox %r reads the messages newest first: no text index (not an index); said once",
                    self.mailbox_id,
                )
            hits, examined, complete = await self._scan_search(query, limit, progress)
        rows = await self._messages_of(hits)
        results: SearchResults[SearchHit] = SearchResults(complete=complete, examined=examined, engine=engine)
        for hit in hits:
            message = rows.get(hit["_id"])
            if message is None:  # a body whose message insert never happened (an interrupted store)
                continue
            results.append(
                {
                    "messageId": message["messageId"],
                    "subject": message.get("subject"),
                    "ts": int(message["ts"]),
                    "snippet": queries.snippet(hit.get("clean") or hit.get("subject"), query),
                    "score": hit.get("score"),
                }
            )
        if engine == "scan":
            results.sort(key=lambda r: (-r["ts"], r["messageId"]))
        return results

    async def _scan_search(
        self, query: str, limit: int, progress: Callable[[int], None] | None
    ) -> tuple[list[dict[str, Any]], int, bool]:
        """The scan: ``(body hits newest first, messages examined, complete)``. Each window of
        messages (``_id``, hot subject) is matched on its subjects here and on its bodies' clean
        text by the server (``_id $in`` and a literal ``$regex``, never an ``$or``)."""
        pattern = queries.search_pattern(query)
        cap = self.scan_limit
        hits: list[dict[str, Any]] = []
        examined = 0
        capped = False

        async def take(batch: list[dict[str, Any]]) -> bool:
            nonlocal examined, capped
            if cap is not None and examined + len(batch) >= cap:
                batch, capped = batch[: cap - examined], True
            examined += len(batch)
            hits.extend(await self._match_bodies(batch, pattern))
            if progress is not None and batch:
                progress(examined)
            return capped or len(hits) >= limit

        inbox = queries.inbox_query(self.mailbox_id)
        read = await self._windowed_read(inbox)
        await self._windows(inbox, read, None, None, queries.SEARCH_WINDOW_PROJECTION, take)
        return hits[:limit], examined, not capped or len(hits) >= limit

    async def _match_bodies(self, window: list[dict[str, Any]], pattern: re.Pattern[str]) -> list[dict[str, Any]]:
        """The bodies of one window of messages that match, in the window's order."""
        if not window:
            return []
        subject_hits, cut = queries.scan_matches(pattern, window, HOT_TEXT_CHARS["subject"])
        regex = {"$regex": pattern.pattern, "$options": "i"}
        fields = {"subject": 1, "clean": 1}
        ids = [m["_id"] for m in window]
        found: dict[str, dict[str, Any]] = {}
        for selector in queries.split_in({**self._by_ids(ids), "clean": regex}):
            found.update({b["_id"]: b async for b in self._bodies.find(selector, fields)})
        rest = [i for i in subject_hits | set(cut) if i not in found]
        if rest:
            selector = self._by_ids(rest)
            async for body in self._bodies.find(selector, fields):
                if body["_id"] in subject_hits or pattern.search(body.get("subject") or ""):
                    found[body["_id"]] = body
        return [found[i] for i in ids if i in found]

    async def _messages_of(self, hits: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """The messages behind search hits (keyed like them, by ``_id``), in one read.

        A hit whose message is missing (a body left by an interrupted store) has no entry.
        """
        found = self._messages.find(self._by_ids([h["_id"] for h in hits]), {"messageId": 1, "subject": 1, "ts": 1})
        return {m["_id"]: m async for m in found}

    async def _has_text_index(self) -> bool:
        if self._text_index is None and self._mongomock:
            self._text_index = False
        if self._text_index is None:
            cursor = await _resolve(self._bodies.list_indexes())
            self._text_index = any([ix["name"] == "aecs_bodies_search" async for ix in cursor])
        return self._text_index

    async def stats(self) -> dict[str, Any]:
        """The mailbox's size and the engines that serve its searches on this server.

        ``messages``, ``threads``: documents of the mailbox. ``search``: ``atlas``, ``text`` or
        ``scan`` (what ``search`` uses); ``vectorSearch``: ``atlas`` or ``exact``.
        ``windowedReads``: pages are read as bounded windows (the server reads a query's whole
        matched range before its limit), or None before the first page read told. And from
        ``stats.collection_stats``: ``database``, ``mailboxId``, ``collections`` (every collection
        of mailbox data: the mailbox's documents, all documents, sizes), ``sizesFrom`` and
        ``specVersions``.
        """
        search = self.search_engine
        if search == "auto":
            search = "text" if await self._has_text_index() else "scan"
        vector = self.vector_engine
        if vector == "auto":
            vector = "atlas" if await self._has_atlas_vectors() else "exact"
        return {
            "messages": await self._messages.count_documents({"mailboxId": self.mailbox_id}),
            "threads": await self._threads.count_documents({"mailboxId": self.mailbox_id}),
            "search": search,
            "vectorSearch": vector,
            "windowedReads": None if self._stops_at_limit is None else not self._stops_at_limit,
            **await stats.collection_stats(self.db, self.mailbox_id, self.bucket_name),
        }

    async def set_embedding(self, message_id: str, vector: Sequence[float]) -> None:
        """Keep one vector per message (C.3) for ``semantic_search``; replaces an earlier one.

        Stored as a BSON binData float32 vector with an int8 copy beside it, which joins a block
        of the mailbox's quantized copies once a block's worth is written (``vectors``).
        """
        checked = vectors.check_vector(vector)
        _id = self._id_for(message_id)
        message = await self._messages.find_one(self._by_id(_id), {"threadKey": 1, "messageKey": 1})
        if message is None:
            raise NotFoundError(f"no message {strip_message_id(message_id)!r} in mailbox {self.mailbox_id!r}")
        await embeddings.write(self, [(message, checked)])

    async def semantic_search(
        self, vector: Sequence[float], limit: int = 10, thread_id: str | None = None, *, scan_limit: int | None = None
    ) -> SearchResults[SemanticHit]:
        """Nearest messages by vector, best first: messageId, subject, ts, score.

        The engine is ``vector_engine``: Atlas ``$vectorSearch``, or the exact search (``exact``,
        and ``auto`` where the Atlas vector index is not queryable), which considers every vector
        of the mailbox (or thread). ``scan_limit`` (default: the store's, itself None = no cap)
        caps the vectors it considers; a capped search that left vectors out has ``complete=False``.
        """
        _check_limit(limit)
        if scan_limit is not None:
            _check_limit_value(scan_limit, "scan_limit")
        else:
            scan_limit = self.scan_limit
        tkey = None if thread_id is None else thread_key(check_str(thread_id, "thread_id"))
        hits = await self._vector_hits(vector, limit, tkey, scan_limit)
        rows = await self._messages_of(hits)
        found: list[SemanticHit] = [
            {
                "messageId": rows[h["_id"]]["messageId"],
                "subject": rows[h["_id"]].get("subject"),
                "ts": int(rows[h["_id"]]["ts"]),
                "score": h.get("score"),
            }
            for h in hits
            if h["_id"] in rows
        ]
        return SearchResults(found, complete=hits.complete, examined=hits.examined, engine=hits.engine)

    # --- re-parsing (C.4) ----------------------------------------------------------------------

    async def reparse_stale(self, spec_version: str | None = None) -> dict[str, int]:
        """Re-normalize, from ``raw.eml``, every message stored under another spec version.

        ``spec_version`` defaults to the normalizer's own. Messages without ``raw.eml`` (stored
        from a NormalizedEmail without rawFull) cannot be re-parsed and are counted as skipped.
        """
        from ..normalize import SPEC_VERSION

        target = SPEC_VERSION if spec_version is None else check_str(spec_version, "spec_version")
        report = {"reparsed": 0, "skipped": 0}
        ids = await _to_list(
            self._messages.find(
                {"mailboxId": self.mailbox_id, "specVersion": {"$ne": target}}, {"_id": 0, "messageId": 1}
            ).hint("aecs_messages_spec_version")
        )
        for row in ids:
            if await self._reparse(row["messageId"]):
                report["reparsed"] += 1
            else:
                report["skipped"] += 1
        return report

    async def _reparse(self, message_id: str) -> bool:
        _id = self._id_for(message_id)
        old = await self._messages.find_one(self._by_id(_id))
        if old is None or "raw.eml" not in (old.get("blobs") or ()):
            return False
        raw = await self._get_blob(old["blobPrefix"] + "raw.eml")
        if raw is None:
            return False
        docs = self._build(raw, None, old.get("uidl"))
        if old.get("variants"):
            docs.message["variants"] = old["variants"]  # only the first copy is re-parsed
        if old.get("variantHashes"):
            docs.message["variantHashes"] = old["variantHashes"]
        await self._put_blobs([(blob, docs.message_key) for blob in docs.blobs])
        await self._bodies.replace_one(self._upsert_key(_id), docs.body, upsert=True)
        await self._messages.replace_one(self._by_id(_id), docs.message)
        await self._recompute_thread(old["threadKey"])
        if docs.thread_key != old["threadKey"]:
            await self._recompute_thread(docs.thread_key)
        return True

    # --- the seed-003 surface: a POP3 pipeline's message store ----------------------------------

    def _uidl_id(self, uidl: str) -> str:
        return doc_id(self.mailbox_id, check_str(uidl, "uidl"))

    async def add(self, uidl: str, raw_bytes: bytes) -> str:
        """Store one downloaded message and record its UIDL; returns its message id.

        An already-stored Message-ID is not stored again, but the UIDL is still recorded. Mail
        without a valid Message-ID gets the AECS-1 synthetic id (deterministic from its bytes).
        """
        check_str(uidl, "uidl")
        if not isinstance(raw_bytes, (bytes, bytearray, memoryview)):
            raise TypeError(f"raw_bytes must be bytes, not {type(raw_bytes).__name__}")
        result = await self.store(bytes(raw_bytes), uidl=uidl)
        await self._record_uidl(uidl, result.message_id, result.message_key)
        return result.message_id

    def _uidl_record(self, uidl: str, message_id: str, mkey: str) -> dict[str, Any]:
        return {"mailboxId": self.mailbox_id, "uidl": uidl, "messageId": message_id, "messageKey": mkey}

    async def _record_uidl(self, uidl: str, message_id: str, mkey: str) -> bool:
        """Record a downloaded UIDL (first record wins); True when this call created it."""
        outcome = await self._uidls.update_one(
            self._upsert_key(self._uidl_id(uidl)),
            {"$setOnInsert": self._uidl_record(uidl, message_id, mkey)},
            upsert=True,
        )
        return outcome.upserted_id is not None

    async def contains_uidl(self, uidl: str) -> bool:
        """True when this UIDL was downloaded into the mailbox (and not deleted since)."""
        return await self._uidls.find_one(self._by_id(self._uidl_id(uidl)), {"_id": 1}) is not None

    async def uidls(self) -> list[str]:
        """Every UIDL recorded for the mailbox, from the ``uidls`` index alone."""
        rows = await _to_list(
            self._uidls.find({"mailboxId": self.mailbox_id}, {"_id": 0, "uidl": 1})
            .sort([("mailboxId", 1), ("uidl", 1)])
            .hint("aecs_uidls_mailbox")
        )
        return [r["uidl"] for r in rows]

    async def message_ids(self) -> list[str]:
        """Every message id in the mailbox, oldest first."""
        rows = await _to_list(
            self._messages.find({"mailboxId": self.mailbox_id}, {"_id": 0, "messageId": 1})
            .sort([("ts", 1), ("messageKey", 1)])
            .hint("aecs_messages_inbox")
        )
        return [r["messageId"] for r in rows]

    async def get_email(self, message_id: str) -> EmailMessage | None:
        """The stored message as an ``email.message.EmailMessage``, parsed from ``raw.eml``."""
        raw = await self.get_raw(message_id)
        if raw is None:
            return None
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    async def find(self, header: str, value: str) -> list[str]:
        """Message ids whose ``header`` matches ``value`` (normalized like the stored key), oldest first."""
        selector, hint = queries.find_query(self.mailbox_id, header, value)
        found = self._messages.find(selector, {"_id": 0, "messageId": 1, "ts": 1, "messageKey": 1})
        found = found.sort([("ts", 1), ("messageKey", 1)])
        rows = await _to_list(found if hint is None else found.hint(hint))
        return [r["messageId"] for r in rows]

    async def walk_thread(self, message_id: str) -> list[str]:
        """Every stored message reachable from ``message_id`` by References / In-Reply-To, oldest first.

        Seed 003's walk: the root is the first References entry when stored, else the earliest
        stored ancestor along In-Reply-To; then breadth-first over replies. Gaps end a branch.
        """
        start = await self._messages.find_one(self._by_id(self._id_for(message_id)), _WALK_FIELDS)
        if start is None:
            raise NotFoundError(f"no message {strip_message_id(message_id)!r} in mailbox {self.mailbox_id!r}")
        root = start
        references = start.get("references") or []
        first = (
            await self._messages.find_one(self._by_id(self._id_for(references[0])), _WALK_FIELDS)
            if references
            else None
        )
        if first is not None:
            root = first
        else:
            seen = {root["messageKey"]}
            while root.get("inReplyTo"):
                parent = await self._messages.find_one(self._by_id(self._id_for(root["inReplyTo"])), _WALK_FIELDS)
                if parent is None or parent["messageKey"] in seen:
                    break
                seen.add(parent["messageKey"])
                root = parent
        found = {root["messageKey"]: root, start["messageKey"]: start}
        frontier = [root["messageId"]]
        while frontier:
            replies = await _to_list(
                self._messages.find(
                    {"mailboxId": self.mailbox_id, "inReplyTo": {"$in": frontier}},
                    {"messageId": 1, "ts": 1, "messageKey": 1},
                )
            )
            frontier = [r["messageId"] for r in replies if r["messageKey"] not in found]
            found.update((r["messageKey"], r) for r in replies)
        ordered = sorted(found.values(), key=lambda m: (m["ts"], m["messageKey"]))
        return [m["messageId"] for m in ordered]

    async def reindex(self) -> dict[str, int]:
        """Rebuild every derived document from the primary ``messages`` documents (seed 003).

        Thread summaries are recomputed, lookup fields re-derived, a UIDL record restored for
        every message that names one, and UIDL records of vanished messages removed. Records of
        duplicates (a second UIDL of a stored message) are kept: they are downloads, not caches.
        One pass over ``messages`` in batches (one body query, one bulk of fixes and one of UIDL
        upserts per batch); summaries are folded in memory and replaced in place, so readers
        never see a mailbox without threads. Vectors stored by an earlier release (BSON arrays) are
        rewritten in the binData form (``vectorsRewritten``); the vector blocks lose the entries of
        deleted or rewritten vectors (``vectorEntriesDropped``) and every unsealed vector is sealed
        (``vectorsSealed``).
        """
        report = {"threads": 0, "messagesFixed": 0, "uidlsAdded": 0, "uidlsRemoved": 0, "vectorsRewritten": 0}
        report |= {"vectorEntriesDropped": 0, "vectorsSealed": 0}
        summaries: dict[str, dict[str, Any]] = {}
        keys: set[str] = set()
        batch: list[dict[str, Any]] = []
        async for message in self._messages.find({"mailboxId": self.mailbox_id}):
            keys.add(message["messageKey"])
            summaries[message["threadKey"]] = fold_thread_summary(summaries.get(message["threadKey"]), message)
            batch.append(message)
            if len(batch) == _REPAIR_BATCH:
                await self._repair_messages(batch, report)
                batch = []
        if batch:
            await self._repair_messages(batch, report)
        dangling = [
            r["_id"]
            async for r in self._uidls.find({"mailboxId": self.mailbox_id}, {"messageKey": 1})
            if r.get("messageKey") not in keys
        ]
        for start in range(0, len(dangling), _REPAIR_BATCH):
            done = await self._uidls.delete_many(self._by_ids(dangling[start : start + _REPAIR_BATCH]))
            report["uidlsRemoved"] += done.deleted_count
        rows = list(summaries.values())
        for start in range(0, len(rows), _REPAIR_BATCH):
            chunk = rows[start : start + _REPAIR_BATCH]
            await self._write_each(self._threads, [(self._upsert_key(t["_id"]), t) for t in chunk], replace=True)
        report["threads"] = len(rows)
        current = {doc_id(self.mailbox_id, tkey) for tkey in summaries}
        stale = [
            t["_id"]
            async for t in self._threads.find({"mailboxId": self.mailbox_id}, {"_id": 1})
            if t["_id"] not in current
        ]
        for start in range(0, len(stale), _REPAIR_BATCH):
            await self._threads.delete_many(self._by_ids(stale[start : start + _REPAIR_BATCH]))
        report["vectorsRewritten"] = await embeddings.rewrite_old(self)
        report["vectorsSealed"] = await embeddings.seal(self, partial=True)
        # after the sealing, so the entries it made dead go now (an unsealed vector's are kept)
        report["vectorEntriesDropped"] = (await embeddings.compact(self))["entriesDropped"]
        return report

    async def _repair_messages(self, batch: Sequence[Mapping[str, Any]], report: dict[str, int]) -> None:
        """Rewrite the lookup fields that differ from a recomputation; restore missing UIDL records."""
        bodies = {b["_id"]: b async for b in self._bodies.find(self._by_ids([m["_id"] for m in batch]))}
        fixes = []
        for message in batch:
            derived = derived_fields(message, bodies.get(message["_id"]))
            changed = {k: v for k, v in derived.items() if message.get(k) != v}
            if changed:
                fixes.append((self._by_id(message["_id"]), {"$set": changed}))
        await self._write_each(self._messages, fixes)
        report["messagesFixed"] += len(fixes)
        records = [
            (
                self._upsert_key(self._uidl_id(m["uidl"])),
                {"$setOnInsert": self._uidl_record(m["uidl"], m["messageId"], m["messageKey"])},
            )
            for m in batch
            if m.get("uidl") is not None
        ]
        try:
            report["uidlsAdded"] += await self._write_each(self._uidls, records, upsert=True)
        except BulkWriteError as exc:
            if not _only_duplicates(exc):  # a concurrent add() recorded one first
                raise
            report["uidlsAdded"] += exc.details.get("nUpserted", 0)

    async def _write_each(
        self,
        collection: Any,
        writes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
        *,
        replace: bool = False,
        upsert: bool = False,
    ) -> int:
        """One unordered bulk of ``update_one`` (or upserting ``replace_one``) writes; the number
        upserted. mongomock's bulk API rejects PyMongo 4.x's ``UpdateOne``, so there each write
        runs alone."""
        if not writes:
            return 0
        upsert = upsert or replace
        if self._mongomock:
            method = collection.replace_one if replace else collection.update_one
            return sum([(await method(s, d, upsert=upsert)).upserted_id is not None for s, d in writes])
        op = ReplaceOne if replace else UpdateOne
        outcome = await collection.bulk_write([op(s, d, upsert=upsert) for s, d in writes], ordered=False)
        return int(outcome.upserted_count)

    # --- workers: the feed of new mail, and vector search without Atlas (issue 16) ---------------

    _atlas_vectors: bool | None = None  # learned on the first ``auto`` search

    def watch(self, consumer: str, *, since: str = "now", auto_ack: bool = True, max_await_ms: int = 1000) -> AsyncFeed:
        """Every message stored in the mailbox, at least once, in commit order, across restarts.

        ``consumer`` names the reader; its position is kept in ``feed_checkpoints`` (see
        ``AsyncFeed``). Needs change streams (a replica set), else ``ServerFeatureError``.
        """
        return AsyncFeed(self, consumer, since=since, auto_ack=auto_ack, max_await_ms=max_await_ms)

    async def set_embeddings(self, vectors_by_id: Mapping[str, Sequence[float]]) -> int:
        """``set_embedding`` for many messages; returns how many were kept.

        Written in batches of ``vectors.WRITE_BATCH`` (one bulk write each), whatever the number
        handed in. A message not in the mailbox (deleted since a worker saw it) is skipped,
        not an error. Every vector is checked before the first is written.
        """
        checked = {self._id_for(mid): vectors.check_vector(vector) for mid, vector in vectors_by_id.items()}
        ids, kept = list(checked), 0
        for start in range(0, len(ids), vectors.WRITE_BATCH):
            found = embeddings.read_ids(self, self._messages, ids[start : start + vectors.WRITE_BATCH], _VECTOR_KEYS)
            pairs = [(m, checked[m["_id"]]) async for m in found]
            kept += await embeddings.write(self, pairs) if pairs else 0
        return kept

    async def _vector_hits(
        self, vector: Sequence[float], limit: int, tkey: str | None, cap: int | None
    ) -> SearchResults[dict[str, Any]]:
        """``{_id, score}`` of the nearest vectors, by the engine ``vector_engine`` picks."""
        engine = self.vector_engine
        if engine not in vectors.VECTOR_ENGINES:
            raise ValueError(f"vector_engine must be one of {', '.join(vectors.VECTOR_ENGINES)}")
        if engine == "auto":
            engine = "atlas" if await self._has_atlas_vectors() else "exact"
        if engine == "atlas":
            pipeline = queries.vector_search_pipeline(self.mailbox_id, [float(v) for v in vector], limit, tkey)
            return SearchResults(await _to_list(await _resolve(self._vectors.aggregate(pipeline))), engine="atlas")
        search_numpy = vectors.numpy_backend()
        if self._first_time("exact vector search"):
            log.debug("semantic_search in mailbox %r: exact search over every vector (no Atlas index)", self.mailbox_id)
        if search_numpy is None and self._first_time("vectors without numpy"):
            log.warning(
                "semantic_search ranks vectors in pure Python (no numpy), slower: pip install"
                " 'aecs-mongo[vectors]'; said once per store"
            )
        return await embeddings.exact_search(self, self._messages, vector, limit, tkey, cap, search_numpy)

    async def _has_atlas_vectors(self) -> bool:
        """Whether Atlas lists the vector index as queryable (any refusal: no)."""
        if self._atlas_vectors is None:
            if self._mongomock:
                self._atlas_vectors = False
            else:
                try:
                    listed = await _to_list(await _resolve(self._vectors.aggregate(vectors.atlas_index_pipeline())))
                except OperationFailure:
                    listed = []
                self._atlas_vectors = any(ix.get("queryable") for ix in listed)
        return self._atlas_vectors


def _parse_raw(raw: bytes, for_ai_max_chars: int) -> Any:
    """Normalize raw RFC 5322 bytes (the normalizer is imported on first use)."""
    try:
        from ..normalize import parse_email
    except ImportError as exc:  # pragma: no cover - the normalizer ships with the package
        raise AecsMongoError(f"storing raw bytes needs the normalizer: {exc}") from exc
    return parse_email(raw, for_ai_max_chars=for_ai_max_chars)
