"""The local search index's upkeep: it follows the store the way ``mongot`` follows ``mongod``.

The index (``aecs_mongo/search_index``: SQLite FTS5, a file the store was given with
``search_index=``) is a cache of the ``messages`` and ``bodies`` documents and the HTML blobs.
It is kept up in three ways, so that neither a crash nor another writer leaves it behind:

- **after each write of this store**: ``write_batch`` hands the messages it created here right
  after the batch's commit (``after_write``); ``delete``/``expire`` remove their entries after
  the ``messages`` documents are gone (``after_delete``); ``erase_mailbox`` drops the mailbox's
  tables (``after_erase``); ``reparse_stale`` re-indexes what it re-parsed.
- **caught up from the change stream** of ``messages`` (a replica set or a sharded cluster):
  the index keeps its position (a resume token, per mailbox) and every read (``current``) first
  reads what happened since (so does a write of an indexing store, every few hundred messages:
  ``after_write``): inserts, replaces, updates and deletes of the mailbox's messages
  (``drain``). So a process killed between the commit and
  the index write, mail stored or deleted by another process through the library (indexed or
  not), all reach the index before it answers. A tag change (an update of only ``tags`` or
  ``folders``) re-reads just those two fields of the message (``set_labels``), not its text;
  ``store.tag`` also applies its changes here directly (``after_labels``), as a write does.
  The messages this store just indexed come back in the stream too and are recognised as
  present (no second read of their bodies).
- **reconciled** where there is no change stream (a standalone server) or no usable
  position (a new index, a rebuild, a position that fell out of the oplog, a dropped
  collection): the mailbox's message keys are read and compared with the index's, and what is
  missing is indexed, what is gone removed. Without change streams a read first reads the
  mailbox's change mark (``pure/change_marks.py``: one document that every write of every store
  bumps before and after it): the same settled mark as at the last check means nothing was
  written since, and the read costs that one ``find``; else it compares the mailbox's message
  count with the index's and reconciles only when they differ (a key read), then keeps the mark
  it read; where the mark's ``removals`` counter or epoch moved (a delete, an expire, an erase
  by any store) it reconciles whatever the count (a delete and a store of as many messages
  leave the count as it was); where its ``labels`` counter moved (a tag or folder change), it
  also reads every message's tags and folders and replaces the labels that differ. A store's
  own write, where it was the only one, leaves its index settled. A page of hits is always
  checked against the stored messages, so deleted mail is never shown.

A mailbox stored before its index existed is indexed on first use (the first search, count or
write of a store with the index): that is the upgrade; ``reindex`` rebuilds it from scratch.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import bson
from pymongo.errors import OperationFailure

from ..pure.change_marks import labels_moved, mark_key, removals_moved, settled
from ..pure.documents import MessageDocuments
from ..pure.keys import doc_id
from ..pure.search_compile import index_stream_pipeline, search_columns, stream_key
from ..pure.tags import row_tags
from ..search_index import MailboxIndex, Record
from ..search_index.fts import label_rows
from . import capabilities, changemarks
from .context import AsyncStoreContext, log, resolve

__all__ = [
    "after_delete",
    "after_erase",
    "after_labels",
    "after_reparse",
    "after_write",
    "caught_up",
    "current",
    "html_text",
    "keep_stream",
    "load_records",
    "read_blobs",
    "rebuild",
]

_APPLY_EVERY = 1000  # stream events applied (and the position saved) at least this often
#: messages this store indexes after its writes before it reads the stream (``after_write``)
_DRAIN_AFTER = 500
#: messages indexed after writes since the stream was last read, per mailbox index
_undrained: weakref.WeakKeyDictionary[MailboxIndex, int] = weakref.WeakKeyDictionary()
_LOAD_BATCH = 100
_MESSAGE_FIELDS = {
    "messageKey": 1,
    "messageId": 1,
    "threadKey": 1,
    "ts": 1,
    "subject": 1,
    "from": 1,
    "attachments": 1,
    "blobs": 1,
    "blobPrefix": 1,
    "tags": 1,
    "folders": 1,
}
_LABEL_FIELDS = ("tags", "folders")
_BODY_FIELDS = {"raw": 0, "forAI": 0, "mailboxId": 0}


def html_text(html: str) -> str:
    """The normalizer's text of an HTML body (imported on first use, as the normalizer is)."""
    from ..normalizer.html_text import html_to_text

    return html_to_text(html)


def html_pieces(html: str | None) -> str:
    """The cheap text of an HTML body that every word of ``html_text`` is a substring of ("" for
    none; the scan's test before ``html_text``)."""
    if html is None:
        return ""
    from ..normalizer.html_text import html_text_pieces

    return html_text_pieces(html)


def caught_up(ctx: AsyncStoreContext) -> None:
    """The index writes handed to the index's own thread (``after_write(later=True)``) done."""
    if ctx.search_index is not None:
        ctx.search_index.caught_up()


def mailbox_index(ctx: AsyncStoreContext) -> MailboxIndex | None:
    """This mailbox's part of the store's index (None: the store has none)."""
    index = ctx.search_index
    if index is None:
        return None
    if index.bound is None:
        index.bind(ctx.db.name)
    return index.mailbox(ctx.mailbox_id)


# --- records ------------------------------------------------------------------------------------


def record_of(docs: MessageDocuments) -> Record:
    """The index record of a message just written, from the documents in hand."""
    body: dict[str, Any] = dict(docs.body)
    html = None
    for blob in docs.blobs:
        if blob.key.endswith("/body.html"):
            html = blob.data.decode("utf-8", "replace")
        elif blob.key.endswith("/body.json") and body.get("spill"):
            body.update(json.loads(blob.data.decode("utf-8")))
    columns = search_columns(docs.message, body, html, html_text)
    return Record(docs.message_key, int(docs.message["ts"]), docs.thread_key, columns, _labels(docs.message))


def _labels(message: Mapping[str, Any]) -> tuple[str, ...]:
    return label_rows(row_tags(message), row_tags(message, "folders"))


async def load_records(ctx: AsyncStoreContext, keys: Sequence[str]) -> tuple[list[Record], list[str]]:
    """The records of stored messages (one read of each collection per batch: messages,
    bodies, the HTML and spilled bodies' blobs), and the keys of those not stored."""
    records: list[Record] = []
    gone: list[str] = []
    for start in range(0, len(keys), _LOAD_BATCH):
        part = list(keys[start : start + _LOAD_BATCH])
        ids = [doc_id(ctx.mailbox_id, k) for k in part]
        messages = {m["_id"]: m async for m in ctx.messages.find(ctx.by_ids(ids), _MESSAGE_FIELDS)}
        bodies = {b["_id"]: b async for b in ctx.bodies.find(ctx.by_ids(list(messages)), _BODY_FIELDS)}
        wanted = [m["blobPrefix"] + "body.html" for m in messages.values() if "body.html" in (m.get("blobs") or ())]
        wanted += [b["spill"] for b in bodies.values() if b.get("spill")]
        data = await read_blobs(ctx, wanted)
        for key, _id in zip(part, ids, strict=True):
            message = messages.get(_id)
            if message is None:
                gone.append(key)
                continue
            body = dict(bodies.get(_id) or {})
            if body.get("spill") and body["spill"] in data:
                body.update(json.loads(data[body["spill"]].decode("utf-8")))
            raw_html = data.get(message["blobPrefix"] + "body.html")
            html = None if raw_html is None else raw_html.decode("utf-8", "replace")
            columns = search_columns(message, body, html, html_text)
            records.append(Record(key, int(message["ts"]), str(message["threadKey"]), columns, _labels(message)))
    return records, gone


async def read_blobs(ctx: AsyncStoreContext, keys: Sequence[str]) -> dict[str, bytes]:
    """Several blobs at once (GridFS: one ``files`` and one ``chunks`` read per hundred); an
    upload interrupted mid-way gives no text."""
    store = await ctx.blob_store()
    return await store.get_many(keys)


# --- following the store ------------------------------------------------------------------------


async def current(ctx: AsyncStoreContext) -> MailboxIndex:
    """The mailbox's index, built if it never was and caught up with the store (before a read)."""
    index = mailbox_index(ctx)
    assert index is not None
    state = index.state()
    streams = await capabilities.change_streams(ctx)
    # without change streams: the mailbox's change mark, read before any check (a write after
    # this read changes it, so the next read checks again)
    mark = None if streams else await changemarks.read(ctx)
    if state is None or state.mode == "reconcile" or (state.mode == "stream") != streams:
        await _reconcile(ctx, index, streams)
        if not streams and state is not None and labels_moved(None, mark):
            await _relabel_all(ctx, index)  # the rows a rebuild kept may hold older labels
    elif streams:
        await _drain(ctx, index, state.token)
    elif mark is not None and settled(mark) and state.token == mark_key(mark):
        return index  # nothing written since the last check
    else:
        # after a removal the count proves nothing (removed and stored alike leave it as it was)
        if (
            removals_moved(state.token, mark)
            or await ctx.messages.count_documents({"mailboxId": ctx.mailbox_id}) != index.size()
        ):
            log.debug("mailbox %r: messages were removed, or the counts differ: reconciling", ctx.mailbox_id)
            await _reconcile(ctx, index, streams)
        if labels_moved(state.token, mark):  # a tag or folder change since (a count does not see it)
            await _relabel_all(ctx, index)
    if not streams:
        if mark is not None and settled(mark):
            index.set_state("count", mark_key(mark))
        else:
            await changemarks.forget_stale(ctx, mark)
    return index


async def after_write(
    ctx: AsyncStoreContext, created: Sequence[MessageDocuments], relabelled: Sequence[str] = (), *, later: bool = False
) -> None:
    """After a batch's commit: index the messages it created (and the new folders of those it
    found stored: ``relabelled`` keys), from the documents in hand; then catch up with the
    stream, once ``_DRAIN_AFTER`` messages were indexed so since the last time (the stream then
    brings this store's own inserts back, recognised as present, so reading it after every
    batch cost a stream's opening per batch for nothing new: a read catches up first anyway
    (``current``), and the position stays within the embedded server's oplog). ``later``: the
    records are made and written on the index's own thread while the caller writes its next
    batch (``store_iter``, which waits for them before it returns: ``caught_up``)."""
    index = mailbox_index(ctx)
    if index is None:
        return
    state = index.state()
    if state is None or state.mode == "reconcile":
        await current(ctx)  # never built (or a rebuild was interrupted): build it, these included
        return
    if later:
        batch = list(created)
        index.index.later(lambda: index.upsert([record_of(d) for d in batch]))
    else:
        index.upsert([record_of(d) for d in created])
    if relabelled:
        await _relabel(ctx, index, relabelled)
    if state.mode == "stream":
        done = _undrained.get(index, 0) + len(created) + len(relabelled)
        if done < _DRAIN_AFTER:
            _undrained[index] = done
            return
        _undrained[index] = 0
        await _drain(ctx, index, state.token)


async def after_labels(
    ctx: AsyncStoreContext, keys: Sequence[str], field: str, added: Sequence[str], removed: Sequence[str]
) -> None:
    """After a tag (or folder) change of these messages: the change applied to their entries
    (every one of them holds the added values and none of the removed ones now, whatever it held
    before: no read), then a catch-up. An index never built is left to its first use, which
    builds it with every label."""
    index = mailbox_index(ctx)
    if index is None:
        return
    state = index.state()
    if state is None or state.mode == "reconcile":
        return
    if field == "tags":
        index.change_labels(keys, label_rows(added, ()), label_rows(removed, ()))
    else:
        index.change_labels(keys, label_rows((), added), label_rows((), removed))
    if state.mode == "stream":
        await _drain(ctx, index, state.token)


async def _relabel(ctx: AsyncStoreContext, index: MailboxIndex, keys: Sequence[str]) -> None:
    for start in range(0, len(keys), 1000):
        ids = [doc_id(ctx.mailbox_id, k) for k in keys[start : start + 1000]]
        found = {
            str(m["messageKey"]): _labels(m)
            async for m in ctx.messages.find(ctx.by_ids(ids), {"messageKey": 1, "tags": 1, "folders": 1})
        }
        index.set_labels(found)


async def _relabel_all(ctx: AsyncStoreContext, index: MailboxIndex) -> None:
    """Every message's tags and folders read (one find of three fields), and the labels of the
    indexed ones that differ replaced."""
    have = index.labels_by_key()
    changed: dict[str, tuple[str, ...]] = {}
    async for m in ctx.messages.find(
        {"mailboxId": ctx.mailbox_id}, {"_id": 0, "messageKey": 1, "tags": 1, "folders": 1}
    ):
        labels = _labels(m)
        if tuple(sorted(labels)) != have.get(str(m["messageKey"]), ()):
            changed[str(m["messageKey"])] = labels
    index.set_labels(changed)


async def after_delete(ctx: AsyncStoreContext, keys: Sequence[str]) -> None:
    """After ``messages`` documents are deleted: their entries go, then a catch-up."""
    index = mailbox_index(ctx)
    if index is None:
        return
    index.remove(keys)
    state = index.state()
    if state is not None and state.mode == "stream":
        await _drain(ctx, index, state.token)


async def after_erase(ctx: AsyncStoreContext) -> None:
    """After the erase: the mailbox's tables and position go (a later use starts it afresh)."""
    if mailbox_index(ctx) is not None:
        assert ctx.search_index is not None
        ctx.search_index.drop_mailbox(ctx.mailbox_id)


async def after_reparse(ctx: AsyncStoreContext, docs: MessageDocuments, old_key: str) -> None:
    """A message re-parsed from its raw bytes: its entry follows the new documents."""
    index = mailbox_index(ctx)
    if index is None or index.state() is None:
        return
    if old_key != docs.message_key:
        index.remove([old_key])
    index.upsert([record_of(docs)])


async def rebuild(ctx: AsyncStoreContext) -> int:
    """``reindex``: the mailbox's index from scratch; how many messages it holds."""
    if mailbox_index(ctx) is None:
        return 0
    assert ctx.search_index is not None
    ctx.search_index.drop_mailbox(ctx.mailbox_id)
    return (await current(ctx)).size()


async def _reconcile(ctx: AsyncStoreContext, index: MailboxIndex, streams: bool) -> None:
    """Make the index hold exactly the stored messages. With change streams the position is
    taken first (so whatever is committed meanwhile comes from the stream), kept while the
    work goes on (an interrupted rebuild resumes from it), and the stream is read after."""
    state = index.state()
    token: bytes | None = None
    if streams:
        token = state.token if state is not None and state.mode == "reconcile" and state.token else None
        if token is None:
            token = await _position_now(ctx)
    index.set_state("reconcile", token)
    have = index.keys()
    stored: set[str] = set()
    async for row in ctx.messages.find({"mailboxId": ctx.mailbox_id}, {"_id": 0, "messageKey": 1}):
        stored.add(str(row["messageKey"]))
    missing = sorted(stored - have)
    if len(missing) > 1000 and ctx.first_time("search index build"):
        log.info("building the local search index of mailbox %r: %d messages to index", ctx.mailbox_id, len(missing))
    index.remove(have - stored)
    for start in range(0, len(missing), _LOAD_BATCH):
        records, gone = await load_records(ctx, missing[start : start + _LOAD_BATCH])
        index.upsert(records)
        index.remove(gone)
    index.set_state("stream" if streams else "count", token)
    if streams:
        await _drain(ctx, index, token)


async def _open_stream(ctx: AsyncStoreContext, token: bytes | None) -> Any:
    stream = await resolve(
        ctx.messages.watch(
            index_stream_pipeline(ctx.mailbox_id),
            resume_after=None if token is None else bson.decode(token),
            full_document="updateLookup",  # a tag change's labels come with it (no read per message)
            max_await_time_ms=1,
            batch_size=_APPLY_EVERY,
        )
    )
    return await stream.__aenter__()  # Motor opens the cursor here


async def _position_now(ctx: AsyncStoreContext) -> bytes:
    stream = await _open_stream(ctx, None)
    try:
        token = stream.resume_token
    finally:
        await stream.__aexit__(None, None, None)
    if token is None:
        raise OperationFailure("the server gave no change-stream position (postBatchResumeToken)")
    return bson.encode(dict(token))


class KeptStream:
    """The change stream a long-lived store keeps open between reads (``keep_stream``): the
    stream, and the index position (BSON) it stands at once drained (None while it is not known
    to match the index: a failure between the drain and the save). One user at a time (``lock``,
    never waited for: a read that finds it taken opens a stream of its own)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stream: Any = None
        self.token: bytes | None = None


def keep_stream(ctx: AsyncStoreContext) -> None:
    """Keep the change stream open between reads (the warm command host's and the MCP server's
    stores, which live for many commands): a read that finds the index where the kept stream
    stopped costs one ``getMore`` instead of opening a stream (``aggregate``), reading it and
    closing it (``killCursors``). Clones of the store open their own, as before."""
    if ctx.kept_stream is None:
        ctx.kept_stream = KeptStream()


async def _close(stream: Any) -> None:
    await stream.__aexit__(None, None, None)


async def _drain(ctx: AsyncStoreContext, index: MailboxIndex, token: bytes | None) -> None:
    """Read the stream from ``token`` to now and apply it; save the new position. A store that
    keeps its stream (``keep_stream``) reads on from where it stopped, where the index's
    position is still that one (another process may have moved it)."""
    kept = ctx.kept_stream
    mine = kept is not None and kept.lock.acquire(blocking=False)
    try:
        await _drain_with(ctx, index, token, kept if mine else None)
    finally:
        if mine:
            assert kept is not None
            kept.lock.release()


async def _drain_with(
    ctx: AsyncStoreContext, index: MailboxIndex, token: bytes | None, kept: KeptStream | None
) -> None:
    stream = None
    if kept is not None and kept.stream is not None:
        stream, kept.stream = kept.stream, None
        if token is None or kept.token != token:  # the index moved (another process), or unknown
            await _close(stream)
            stream = None
    if stream is None:
        try:
            stream = await _open_stream(ctx, token)
        except OperationFailure as exc:  # the position fell out of the oplog, or is not this server's
            log.info(
                "mailbox %r: the search index cannot resume its change stream (%s): reconciling", ctx.mailbox_id, exc
            )
            index.set_state("reconcile", None)
            await _reconcile(ctx, index, True)
            return
    pending: dict[str, str] = {}
    labels: dict[str, tuple[str, ...]] = {}  # the labels a tag change's event carried
    ended = keep = False
    try:
        while True:
            event = await stream.try_next()
            if event is None:
                break
            operation = event.get("operationType")
            if operation not in ("insert", "replace", "update", "delete"):
                ended = True  # drop, rename, dropDatabase, invalidate: the collection changed under us
                break
            key = stream_key(ctx.mailbox_id, (event.get("documentKey") or {}).get("_id"))
            if key is not None:
                pending[key] = _merged(pending.get(key), str(operation), event)
                if pending[key] == "labels" and isinstance(event.get("fullDocument"), Mapping):
                    labels[key] = _labels(event["fullDocument"])
                else:
                    labels.pop(key, None)
            if len(pending) >= _APPLY_EVERY:
                await _apply(ctx, index, pending, labels)
                pending, labels = {}, {}
                index.set_state("stream", bson.encode(dict(stream.resume_token)))
        position = None if ended else stream.resume_token
        keep = kept is not None and position is not None
    finally:
        if keep:
            assert kept is not None
            kept.stream, kept.token = stream, None  # its position is the index's once saved
        else:
            await _close(stream)
    await _apply(ctx, index, pending, labels)
    if ended or position is None:
        index.set_state("reconcile", None)
        await _reconcile(ctx, index, True)
        return
    saved = bson.encode(dict(position))
    index.set_state("stream", saved)
    if keep:
        assert kept is not None
        kept.token = saved


def _merged(before: str | None, operation: str, event: Mapping[str, Any]) -> str:
    """A message's pending operation after one more event: an update of only its tags or
    folders is ``labels`` (re-read those), unless a heavier operation is pending for it."""
    if operation == "update":
        change = event.get("updateDescription") or {}
        fields = [*(change.get("updatedFields") or {}), *(change.get("removedFields") or ())]
        fields += [str(t.get("field")) for t in change.get("truncatedArrays") or () if isinstance(t, Mapping)]
        if fields and all(f.split(".", 1)[0] in _LABEL_FIELDS for f in fields):
            if before is None or before == "labels":
                return "labels"
            return "update" if before == "insert" else before
    return operation


async def _apply(
    ctx: AsyncStoreContext,
    index: MailboxIndex,
    last: Mapping[str, str],
    labels: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """Apply each message's last event: a delete removes it; an insert indexes it unless it
    is indexed (this store wrote it); a replace or update reads it again."""
    if not last:
        return
    index.remove([k for k, op in last.items() if op == "delete"])
    inserted = [k for k, op in last.items() if op == "insert"]
    known = index.present(inserted)
    todo = [k for k, op in last.items() if op in ("replace", "update")] + [k for k in inserted if k not in known]
    carried = labels or {}
    index.set_labels({k: carried[k] for k, op in last.items() if op == "labels" and k in carried})
    relabel = [k for k, op in last.items() if op == "labels" and k not in carried]  # deleted since
    if relabel:
        await _relabel(ctx, index, relabel)
    if todo:
        records, gone = await load_records(ctx, todo)
        index.upsert(records)
        index.remove(gone)
