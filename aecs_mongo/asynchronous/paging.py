"""Keyset pages and windowed reads: every list read of the store comes through here.

Each statement is sent as the server's dialect states it (``Dialect.statement``). A page is the
first ``limit`` rows after an opaque cursor on ``(ts, messageKey)`` (threads:
``(lastTs, _id)``), never skip/offset. Where the server stops a sorted query at its limit
that is one plain query. Where it reads the whole matched range first (the dialect says so, or
``explain`` shows it) a big read walks bounded ``ts`` windows (the pure ``pure/windows.py``) so a
page costs the same at 1,000 and 100,000 messages; a small one stays one plain query.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic
from typing import Any

from ..pure import queries, windows
from ..pure.extents import Extent
from ..pure.keys import doc_id
from ..pure.settings import SPEC_VERSION, check_limit
from . import capabilities, extents
from .context import AsyncStoreContext, to_list

#: where ``ctx.samples`` keeps the mailbox's sample (the reads' estimates sit beside it)
_SAMPLE_KEY = SPEC_VERSION
#: where the mailbox's extent is kept, with the time of the sample it was read with
_EXTENT_KEY = "extent"

__all__ = [
    "ThreadExtent",
    "few_matches",
    "mailbox_extent",
    "mailbox_sample",
    "page",
    "sorted_rows",
    "thread_extent",
    "walk_windows",
    "windowed_read",
]


async def page(
    ctx: AsyncStoreContext,
    query: queries.KeysetQuery,
    cursor: str | None,
    limit: int,
    projection: Mapping[str, Any] | None,
    thread: ThreadExtent | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a keyset read and the cursor of the next (None: the last page)."""
    check_limit(limit)
    after = queries.decode_cursor(query, cursor, ctx.mailbox_id)
    rows = await sorted_rows(ctx, query, after, limit + 1, projection, thread)
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = queries.encode_cursor(query, rows[-1])
    return rows, next_cursor


async def sorted_rows(
    ctx: AsyncStoreContext,
    query: queries.KeysetQuery,
    after: tuple[int, str] | None,
    need: int,
    projection: Mapping[str, Any] | None,
    thread: ThreadExtent | None = None,
) -> list[dict[str, Any]]:
    """The first ``need`` rows of a keyset read after ``after``: the plain query where the
    server stops at the limit, or where the read matches few documents (a thread of at most
    ``windows.PLAIN_MAX_THREAD`` messages by its summary, ``thread``; else what the mailbox's
    sample estimates), else bounded ``ts`` windows (``windows.py``), same rows. A thread's
    windows are placed from its summary (its first and last message, its count)."""
    speech = await capabilities.dialect(ctx)
    if ctx.capabilities.stops_at_limit:
        found = ctx.db[query.collection].find(speech.statement(queries.keyset_filter(query, after)), projection)
        found = found.sort(query.sort).limit(need)
        return await to_list(found if query.hint is None else found.hint(query.hint))
    # Where the server reads whole ranges it also walks a hinted index whole (every
    # mailbox's entries) and scans the collection for a top-level $or: flat filters only.
    if thread is not None:
        small = thread.count <= windows.PLAIN_MAX_THREAD
        read = await windowed_read(ctx, query, sample=False)
        if not small:
            hint, fraction = windows.summary_hint(thread.count, thread.first_ts, thread.last_ts)
            read = dataclasses.replace(
                read,
                now=thread.last_ts,
                hint=hint,
                hint_fraction=fraction,
                newest=thread.last_ts,
                oldest=thread.first_ts,
            )
    else:
        small = await few_matches(ctx, query)
        read = await windowed_read(ctx, query, sample=not small)
    rows: list[dict[str, Any]] = []

    async def take(batch: list[dict[str, Any]]) -> bool:
        rows.extend(batch[: need - len(rows)])
        return len(rows) >= need

    await walk_windows(ctx, query, read, after, need, projection, take, plain=small)
    return rows


async def few_matches(ctx: AsyncStoreContext, query: queries.KeysetQuery) -> bool:
    """What the mailbox's sample says the read matches: few (a small mailbox, a selective
    filter), so that reading all of them costs less than the windows that would find them.
    Kept with the sample (the same read again costs no second look at it)."""
    sampled, fraction = await mailbox_sample(ctx)
    key = f"few:{query.fingerprint}"
    kept = ctx.samples.get(key)
    if kept is not None and kept[0] == ctx.samples[_SAMPLE_KEY][0]:
        return bool(kept[1])
    if query.collection == "threads":
        few = await few_threads(ctx, sampled, fraction)
    else:
        hits = sum(queries.sample_match(query, row) for row in sampled)
        few = windows.plain_serves(hits, fraction)
    ctx.samples[key] = (ctx.samples[_SAMPLE_KEY][0], few)  # the sample few_threads may have grown
    return few


async def few_threads(ctx: AsyncStoreContext, sampled: list[dict[str, Any]], fraction: float) -> bool:
    """Whether the mailbox holds few threads (``windows.PLAIN_MAX_THREADS``): at once where it
    holds few messages (a thread holds one at least), else estimated from the sizes of the
    sampled messages' threads (one ``_id $in`` read of their summaries; ``estimated_threads``),
    on a sample of ``windows.THREAD_SAMPLE_ENOUGH`` messages at least (the few that size
    windows cannot bound the threads: 24 messages of a 100,000 still allow 16,000 threads).
    Counting the threads is no answer here: this server's count reads the whole collection."""
    if windows.estimated_matches(len(sampled), fraction) <= windows.PLAIN_MAX_THREADS:
        return True
    if len(sampled) < windows.THREAD_SAMPLE_ENOUGH:
        start = windows.thread_sample_fraction(len(sampled), fraction)
        sampled, fraction = await mailbox_sample(ctx, windows.THREAD_SAMPLE_ENOUGH, start)
    threads = [doc_id(ctx.mailbox_id, str(r["threadKey"])) if r.get("threadKey") else None for r in sampled]
    sizes: dict[str, int] = {}
    for selector in ctx.dialect.split_in(ctx.by_ids(sorted({t for t in threads if t is not None}))):
        async for row in ctx.threads.find(selector, {"messageCount": 1}):
            sizes[row["_id"]] = int(row.get("messageCount") or 1)
    counts = [1 if t is None else sizes.get(t, 1) for t in threads]  # no summary: a thread of one
    return windows.estimated_threads(counts, fraction) <= windows.PLAIN_MAX_THREADS


@dataclasses.dataclass(frozen=True)
class ThreadExtent:
    """What a thread's summary says of where its messages are: how many, the first's and the
    last's ``ts``."""

    count: int
    first_ts: int
    last_ts: int


async def thread_extent(ctx: AsyncStoreContext, tkey: str) -> ThreadExtent | None:
    """The thread's extent from its summary (None: no summary)."""
    summary = await ctx.threads.find_one(
        ctx.by_id(doc_id(ctx.mailbox_id, tkey)), {"messageCount": 1, "firstTs": 1, "lastTs": 1}
    )
    if summary is None:
        return None
    last = int(summary.get("lastTs") or 0)
    return ThreadExtent(int(summary.get("messageCount") or 0), int(summary.get("firstTs") or last), last)


async def walk_windows(
    ctx: AsyncStoreContext,
    query: queries.KeysetQuery,
    read: windows.WindowedRead,
    after: tuple[int, str] | None,
    need: int | None,
    projection: Mapping[str, Any] | None,
    take: Callable[[list[dict[str, Any]]], Awaitable[bool]],
    chunk: int = 500,
    plain: bool = False,
) -> None:
    """Walk a read's windows, handing each answer window's rows (sorted) to ``take`` until it
    says True or the range is exhausted. ``need``: rows wanted
    (None: the whole range, in windows of about ``chunk`` rows)."""
    flat, residual = queries.flat_filter(query)
    if residual is not None and projection is not None:
        projection = queries.with_fields(projection, [path for clause in residual for path in clause])
    collection = ctx.db[query.collection]
    speech = await capabilities.dialect(ctx)
    walker = windows.walk_plain(read, after) if plain else windows.walk(read, after, need, chunk)
    taken = 0
    try:
        window = next(walker)
        while True:
            selector = speech.statement(windows.merge_filter(flat, window, query.ts_field, query.key_field))
            found = collection.find(selector, queries.PROBE_PROJECTION if window.probe else projection)
            found = found.sort(query.sort)
            if need is not None and not window.probe and residual is None:
                found = found.limit(need - taken)
            batch = await to_list(found)
            if residual is not None and not window.probe:
                batch = [r for r in batch if queries.residual_match(r, residual)]
            if ctx.capabilities.stops_at_limit is None and not window.probe and len(batch) > 1:
                await capabilities.learn_limit_behaviour(ctx, collection, selector, query.sort)
            if not window.probe:
                taken += len(batch)
                if await take(batch):
                    return
            window = walker.send(len(batch))
    except StopIteration:
        return
    finally:
        walker.close()


async def windowed_read(
    ctx: AsyncStoreContext, query: queries.KeysetQuery, sample: bool = True
) -> windows.WindowedRead:
    """The read as ``windows.walk`` takes it, with the ``ts`` of the sampled messages it may
    match (``mailbox_sample``, ``queries.sample_match``): where its mail is, and about how much
    there is. The read's own matches, not the mailbox's: a probe sized from the mailbox's
    density holds a tenth of a match for a read of one correspondent in ten, so the walk would
    take mail for a gap and read thousands of rows."""
    read = queries.windowed_read(query, ctx.mailbox_id, int(_dt.datetime.now(_dt.UTC).timestamp()))
    if not sample:
        return read
    sampled, fraction = await mailbox_sample(ctx)
    hint = tuple(sorted(int(r["ts"]) for r in sampled if queries.sample_match(query, r)))
    stamps = sorted(int(r["ts"]) for r in sampled)
    ceiling = windows.read_ceiling(stamps, len(hint), fraction, query.descending)
    extent = await mailbox_extent(ctx)
    oldest, newest = (None, None) if extent is None else (extent.oldest, extent.newest)
    return dataclasses.replace(read, hint=hint, hint_fraction=fraction, newest=newest, oldest=oldest, ceiling=ceiling)


async def mailbox_extent(ctx: AsyncStoreContext) -> Extent | None:
    """The mailbox's extent (``pure/extents.py``; None: no mail), read with the mailbox's sample
    (``mailbox_sample``) and kept with it."""
    kept = ctx.samples.get(_EXTENT_KEY)
    sample = ctx.samples.get(_SAMPLE_KEY)
    if kept is not None and sample is not None and kept[0] == sample[0]:
        return kept[1]  # type: ignore[no-any-return]
    extent = await extents.read(ctx)
    if sample is not None:
        ctx.samples[_EXTENT_KEY] = (sample[0], extent)
    return extent


async def mailbox_sample(
    ctx: AsyncStoreContext, enough: int = windows.SAMPLE_ENOUGH, start: float = windows.SAMPLE_FRACTIONS[0]
) -> tuple[list[dict[str, Any]], float]:
    """A uniform sample of the mailbox's messages (``queries.SAMPLE_PROJECTION``) and the fraction
    of the mailbox it is: the messages whose key falls in the first fraction of the key space (a
    bounded range of the ``_id`` index, ``queries.sample_filter``), the fraction growing from
    ``start`` until the sample holds ``enough`` (mail under another spec version is left out: a
    hint only). Kept by the store for ``windows.SAMPLE_TTL`` seconds, so a run of reads samples
    once; a read that asks for more than the kept sample holds takes a bigger one, which the
    reads after it keep. The mailbox's extent is read with it (``mailbox_extent``): where it
    counts the mailbox's messages, the sample starts at the fraction that holds enough of them
    (one statement)."""
    now = monotonic()
    kept = ctx.samples.get(_SAMPLE_KEY)
    if kept is not None and now - kept[0] < windows.SAMPLE_TTL and (len(kept[1]) >= enough or kept[2] >= 1):
        return kept[1], kept[2]
    extent = await extents.read(ctx)  # where a first page starts; how big the mailbox is
    if extent is not None and extent.stored is not None:
        start = max(start, windows.sample_start(extent.stored, enough))
    found: list[dict[str, Any]] = []
    fraction = start
    for fraction in (start, *(f for f in windows.SAMPLE_FRACTIONS if f > start)):
        selector = queries.sample_filter(ctx.mailbox_id, SPEC_VERSION, fraction)
        found = await to_list(ctx.messages.find(selector, queries.SAMPLE_PROJECTION).hint(queries.ID_INDEX))
        if len(found) >= enough:
            break
    ctx.samples[_SAMPLE_KEY] = (now, found, fraction)
    ctx.samples[_EXTENT_KEY] = (now, extent)
    return found, fraction
