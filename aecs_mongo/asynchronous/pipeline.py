"""The ingest (``store_many``/``store_iter``, and so ``aecs-mongo ingest``) as a pipeline of named stages.

Each batch of the input goes through, in this order:

- **parse** (:class:`Parse`): the input's next batch taken and its documents built; the first
  batch here, the later ones in the parse worker processes where the machine has them
  (``parse_pool.py``). Runs on the prefetch thread (``prefetch.py``), up to two batches ahead
  of the write.
- **extract** (``extracting.extract_texts``): the batch's attachments read for their text in
  the limited extraction workers, on the prefetch thread right after the parse, so the write of
  the batch before it goes on meanwhile.
- **blobs** (:class:`Blobs`): on a durable file store, the batch's blobs are put (written,
  synced, named) on a thread of their own while the batches before it are written
  (``filestore.py``, "Staged ahead"); a batch is put ahead only once a batch was written (its
  write checked the blob location) and once every batch before it has its blobs named.
- **write** (:func:`write`): ``writing.write_batch``: blobs, bodies, the message insert and the
  thread updates, in a transaction where the server has them; it returns once the batch is
  durable. Runs in the caller's thread (its event loop), one batch at a time, in input order,
  after the batch's refusals are reported and its blobs put ahead are durable.
- **index** (:func:`index_caught_up`): the write hands the records of what each batch created
  to the local search index's writer thread (``indexing.after_write``) and goes on; the
  pipeline waits for that thread once, after the last batch.
- **results** (:func:`refusals`, then each batch's results yielded): the caller's records of
  what it stored (file records, uidls) follow each result, so a result is handed out only
  once its batch is durable; refusals and results come in input order.

A batch (:class:`Batch`) carries its number, documents, refusals, blobs put ahead and
results from stage to stage. The end state, the results and their order, and what a crash
leaves are those of storing the items one by one (``writing.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from asyncio import wrap_future
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import AecsMongoError
from ..pure.documents import MessageDocuments
from ..pure.pipeline import NamingOrder, Refusal, blob_items, is_raw_message, own_labels
from ..pure.settings import check_limit
from ..pure.tags import check_folders, check_tags
from ..results import StoreResult
from . import extracting, indexing, writing
from .context import AsyncStoreContext
from .parse_pool import ParsePool, worker_count
from .prefetch import AsyncPrefetch

__all__ = ["Batch", "Blobs", "Parse", "extract", "index_caught_up", "refusals", "store_iter", "write"]

OnError = Callable[[int, Any, Exception], None]


@dataclasses.dataclass(eq=False)
class Batch:
    """One batch on its way through the stages."""

    #: 1 for the first batch of the input, then 2, 3, ...
    number: int
    #: the documents built, in input order (a message's later copies included)
    messages: list[MessageDocuments]
    #: the items refused while parsing, in input order (only where there is an ``on_error``)
    refused: list[Refusal]
    #: the blobs put ahead (``Blobs``), and that put, on the blobs stage's thread
    ahead: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)
    put: Future[None] | None = None
    #: one result a message, in input order, once written
    results: list[StoreResult] = dataclasses.field(default_factory=list)


async def store_iter(
    ctx: AsyncStoreContext,
    items: Iterable[Any],
    batch_size: int,
    on_error: OnError | None,
    tags: Iterable[str] = (),
) -> AsyncIterator[StoreResult]:
    """Store ``items`` batch by batch through the stages; yield each message's result in input
    order. ``tags``: set on every message inserted, beside an item's own ``tags`` (a mail
    source's ``RawMessage`` carries its flags as ``tags`` and where it was found as ``folders``).
    """
    check_limit(batch_size)
    parse = Parse(ctx, items, batch_size, check_tags(tags), on_error)
    blobs = Blobs(ctx)

    def ahead() -> Batch | None:  # on the prefetch thread: parse, extract, then put the blobs ahead
        return blobs.start(extract(ctx, parse()))

    prefetch: AsyncPrefetch[Batch] = AsyncPrefetch(ahead)
    try:
        while (batch := await prefetch.next()) is not None:
            refusals(batch, on_error)
            await blobs.ready(batch)
            await write(ctx, batch)
            blobs.written(batch)
            for result in batch.results:
                yield result
        index_caught_up(ctx)
    finally:
        prefetch.close()  # the prefetch thread first: it is the one that uses parse and blobs
        parse.close()
        blobs.close()


# --- parse ---------------------------------------------------------------------------------------


class Parse:
    """The parse stage: each call takes the input's next batch and builds its documents (None:
    the input is done). Called on the prefetch thread only, one batch at a time.

    The first batch (and every batch where the machine has no cores to spare) is built here,
    item by item, until it holds ``batch_size`` messages; from the second on, ``batch_size``
    items are taken and their raw bytes built in the worker processes (an input of one batch
    never pays for starting them). Both give the same documents and the same typed errors in
    input order: an item's ``AecsMongoError`` is a refusal where there is an ``on_error``, and
    raised (when the batch is reached) where there is none.
    """

    def __init__(
        self,
        ctx: AsyncStoreContext,
        items: Iterable[Any],
        batch_size: int,
        every: Sequence[str],
        on_error: OnError | None,
    ) -> None:
        self._ctx = ctx
        self._items = enumerate(items)
        self._batch_size = batch_size
        self._every = every
        self._on_error = on_error
        self._workers = worker_count()  # where the machine has cores to spare (parse_pool.py)
        self._pool: ParsePool | None = None
        self._number = 0

    def __call__(self) -> Batch | None:
        self._number += 1
        if self._workers and self._number > 1:
            if self._pool is None:
                self._pool = ParsePool(writing.raw_spec(self._ctx), self._workers)
            taken = list(itertools.islice(self._items, self._batch_size))
            if not taken:
                return None
            messages, refused = self._in_workers(self._pool, taken)
        else:
            messages, refused = self._here()
            if not messages and not refused:
                return None
        return Batch(self._number, messages, refused)

    def close(self) -> None:
        """Stop the worker processes (none left behind)."""
        if self._pool is not None:
            self._pool.close()

    def _build(self, item: Any) -> MessageDocuments:
        """One item's documents, built here (``writing.build``)."""
        if is_raw_message(item):
            own, folders = own_labels(item, self._every)
            return writing.build(self._ctx, item.data, None, None, item.received_at, own, folders)
        return writing.build(self._ctx, item, None, None, tags=self._every)

    def _refuse(self, refused: list[Refusal], index: int, item: Any, exc: AecsMongoError) -> None:
        if self._on_error is None:
            raise exc
        refused.append(Refusal(index, item, exc))

    def _here(self) -> tuple[list[MessageDocuments], list[Refusal]]:
        messages: list[MessageDocuments] = []
        refused: list[Refusal] = []
        for index, item in self._items:
            try:
                messages.append(self._build(item))
            except AecsMongoError as exc:
                self._refuse(refused, index, item, exc)
            if len(messages) >= self._batch_size:
                break
        return messages, refused

    def _in_workers(
        self, pool: ParsePool, taken: list[tuple[int, Any]]
    ) -> tuple[list[MessageDocuments], list[Refusal]]:
        """Raw bytes built by the worker processes, anything else here."""
        jobs = []
        labels: dict[int, tuple[Sequence[str], Sequence[str]]] = {}  # by input index: raw jobs' tags, folders
        here: dict[int, MessageDocuments | AecsMongoError] = {}  # by input index: built here
        for index, item in taken:
            try:
                if is_raw_message(item) and isinstance(item.data, (bytes, bytearray, memoryview)):
                    own, folders = own_labels(item, self._every)
                    labels[index] = (check_tags(own), check_folders(folders))
                    jobs.append((index, bytes(item.data), item.received_at))
                elif isinstance(item, (bytes, bytearray, memoryview)):
                    labels[index] = (check_tags(self._every), check_folders(()))
                    jobs.append((index, bytes(item), None))
                else:
                    here[index] = self._build(item)
            except AecsMongoError as exc:
                here[index] = exc
        built = pool.build(jobs)
        messages: list[MessageDocuments] = []
        refused: list[Refusal] = []
        for index, item in taken:
            got = here[index] if index in here else built[index]
            if isinstance(got, AecsMongoError):
                self._refuse(refused, index, item, got)
            else:
                messages.append(writing.finish(self._ctx, got, *labels[index]) if index in labels else got)
        return messages, refused


# --- extract -------------------------------------------------------------------------------------


def extract(ctx: AsyncStoreContext, batch: Batch | None) -> Batch | None:
    """The extract stage: the batch's messages with their attachments' text."""
    if batch is not None and batch.messages:
        batch.messages = extracting.extract_texts(ctx, batch.messages)
    return batch


# --- blobs ---------------------------------------------------------------------------------------


class Blobs:
    """The blobs stage: a durable store with a stager (the file store) puts a batch's blobs on
    a thread of its own (``aecs-stage``) while the batches before it are written, so that the
    batch's write finds them durable under their names and the parse of the batch after it
    runs meanwhile. Elsewhere (no stager, or a store that need not be durable) it does nothing,
    and the write puts every blob.

    ``start`` (prefetch thread, after the parse) hands a batch's blobs to that thread, or marks
    the batch unnamed where nothing is put ahead yet (before the first write); ``ready`` (the
    write's thread) waits for its put; ``written`` marks it named, which lets the puts waiting
    for it go on, and forgets what no write took.
    """

    def __init__(self, ctx: AsyncStoreContext) -> None:
        self._stager = ctx.blobs.stager() if ctx.settings.durable else None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="aecs-stage") if self._stager is not None else None
        self._order = NamingOrder()
        self._named = threading.Condition()  # guards _order, _pending and _stopping
        self._pending: list[Batch] = []  # batches put ahead, not written yet
        self._checked = False  # a batch was written: its write checked the blob location
        self._stopping = False

    def start(self, batch: Batch | None) -> Batch | None:
        if batch is None:
            return None
        with self._named:
            if self._thread is None or not self._checked:
                self._order.unnamed(batch.number)
                return batch
            batch.ahead = blob_items(batch.messages)
            self._pending.append(batch)
        batch.put = self._thread.submit(self._put, batch.number, batch.ahead)
        return batch

    def _put(self, number: int, items: list[tuple[str, bytes]]) -> None:
        """On the stage thread: wait until every batch before ``number`` is named, then put."""
        assert self._stager is not None
        with self._named:
            self._named.wait_for(lambda: self._stopping or self._order.may_put(number))
            if self._stopping:
                return
        self._stager.stage(items)

    async def ready(self, batch: Batch) -> None:
        """Wait until the blobs ``batch`` put ahead are durable under their names."""
        if batch.put is not None:
            await wrap_future(batch.put)

    def written(self, batch: Batch) -> None:
        """After the write of ``batch``: its blobs are named; those put ahead that its write did
        not take (messages stored before) are forgotten."""
        if batch.messages:
            self._checked = True
        with self._named:
            self._order.named(batch.number)
            self._named.notify_all()
            if batch in self._pending:
                self._pending.remove(batch)
        if self._stager is not None and batch.messages:
            self._stager.unstage(batch.ahead)

    def close(self) -> None:
        """Stop the stage thread (a put waiting for its turn is dropped); forget what was put
        ahead for batches never written (their files stay: blobs without a row)."""
        if self._thread is None:
            return
        with self._named:
            self._stopping = True
            self._named.notify_all()
        self._thread.shutdown(wait=True)
        if self._stager is not None:
            for batch in self._pending:
                self._stager.unstage(batch.ahead)


# --- write, index, results -----------------------------------------------------------------------


async def write(ctx: AsyncStoreContext, batch: Batch) -> None:
    """The write stage (``writing.write_batch``); its index records go to the index's writer
    thread (``index_later``). A batch of refusals only writes nothing."""
    if batch.messages:
        batch.results = await writing.write_batch(ctx, batch.messages, index_later=True)


def index_caught_up(ctx: AsyncStoreContext) -> None:
    """The index stage's end: every record handed to the index's writer thread is written (the
    first of its writes that failed is raised)."""
    indexing.caught_up(ctx)


def refusals(batch: Batch, on_error: OnError | None) -> None:
    """Report the batch's refused items, in input order, from the caller's thread."""
    for refusal in batch.refused:
        assert on_error is not None
        on_error(refusal.index, refusal.item, refusal.error)
