"""What the server can do, learned once per store on first need and kept in its ``Capabilities``.

Each question is asked of the server at most once per store (and its clones): which dialect it
speaks (``pure/dialect.py``, from ``buildInfo``), whether it runs transactions, holds the text
index, stops a query at its limit, lists an Atlas vector index. A server that refuses the
question (a command it lacks, ``REFUSED``) answers "no", which is the choice that is right on
every server, only slower.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from pymongo import WriteConcern

from ..pure import vectors
from ..pure.dialect import Dialect, of_server
from .context import REFUSED, AsyncStoreContext, log, resolve, to_list

__all__ = [
    "DURABLE_WRITES",
    "atlas_vectors",
    "barrier_counter",
    "change_streams",
    "completion_concern",
    "dialect",
    "learn_limit_behaviour",
    "replica_set",
    "text_index",
    "transactions",
]

#: majority and journaled: the write concern of writes that must be durable before something
#: irreversible (``with_durable_writes``: POP3's delete-on-server); ``j: true`` syncs the
#: server's log on that commit.
DURABLE_WRITES = WriteConcern(w="majority", j=True)


async def replica_set(ctx: AsyncStoreContext) -> bool:
    """A replica set or a sharded cluster (``hello``), as opposed to a standalone server."""
    return await ctx.replica_set()


async def change_streams(ctx: AsyncStoreContext) -> bool:
    """Change streams on ``messages``: a replica set or a sharded cluster."""
    return await replica_set(ctx)


#: the dialect each client's server speaks, learned by the first store on that client: a new
#: store of the same client asks no ``buildInfo`` again (a client whose type cannot be weakly
#: referenced is asked once per store)
_SPOKEN: weakref.WeakKeyDictionary[Any, Dialect] = weakref.WeakKeyDictionary()


async def dialect(ctx: AsyncStoreContext) -> Dialect:
    """How the server is spoken to (``pure/dialect.py``), chosen from its ``buildInfo`` (a
    server that refuses it gets the plain statements) on first need and kept, for every store
    of the same client. What the dialect knows of the server (whether it stops at a limit, the
    journal barrier) fills the capabilities not learned yet."""
    caps = ctx.capabilities
    if caps.dialect is None:
        client = ctx.db.client
        chosen = _known(client)
        if chosen is None:
            try:
                info = await client.admin.command("buildInfo")
            except REFUSED:
                info = {}
            chosen = of_server(info)
            log.debug("the server speaks the %s dialect", chosen.name)
            with contextlib.suppress(TypeError):  # a client that cannot be weakly referenced
                _SPOKEN[client] = chosen
        if caps.stops_at_limit is None:
            caps.stops_at_limit = chosen.stops_at_limit
        if caps.barrier_counter is None:
            caps.barrier_counter = chosen.barrier_counter
        caps.dialect = chosen
    return caps.dialect


def _known(client: Any) -> Dialect | None:
    try:
        return _SPOKEN.get(client)
    except TypeError:  # a client that cannot be weakly referenced
        return None


async def transactions(ctx: AsyncStoreContext) -> bool:
    """Transactions where the deployment has them: a replica set or a sharded cluster (unless
    the store was made with ``transactions=`` set)."""
    caps = ctx.capabilities
    if caps.transactions is None:
        chosen = ctx.settings.transactions
        caps.transactions = chosen if chosen is not None else await replica_set(ctx)
    return caps.transactions


async def completion_concern(ctx: AsyncStoreContext) -> WriteConcern | None:
    """The write concern of the write that completes a batch, or None to leave the database's.

    A durable store (the default) whose database has the server's default write concern asks
    for the journal on that one write: ``{w: "majority", j: true}`` on a replica set or a
    sharded cluster, ``{j: true}`` on a standalone server. The journal is sequential, so that
    acknowledgement covers every earlier write of the batch. A write concern the user set on
    their client or database is theirs and is left alone; so is ``durable=False`` (re-runnable
    bulk imports: an acknowledgement then means applied, not yet on disk).
    """
    await dialect(ctx)  # the batch's statements are the server's
    if not ctx.settings.durable:
        return None
    if not ctx.db.write_concern.is_server_default:
        return None
    await barrier_counter(ctx)  # what the batch's barrier write will be, if it needs one
    return WriteConcern(w="majority", j=True) if await replica_set(ctx) else WriteConcern(j=True)


async def barrier_counter(ctx: AsyncStoreContext) -> bool:
    """Whether the journal barrier must change a counter (``Dialect.barrier_counter``). Learned
    with the first durable write's concern (``completion_concern``); until then the barrier
    changes the counter, which is right on every server."""
    caps = ctx.capabilities
    if caps.barrier_counter is None:
        caps.barrier_counter = (await dialect(ctx)).barrier_counter
    return caps.barrier_counter


async def text_index(ctx: AsyncStoreContext) -> bool:
    """Whether ``aecs_bodies_search`` exists (a server that refuses text indexes has none)."""
    caps = ctx.capabilities
    if caps.text_index is None:
        cursor = await resolve(ctx.bodies.list_indexes())
        caps.text_index = any([ix["name"] == "aecs_bodies_search" async for ix in cursor])
    return caps.text_index


async def learn_limit_behaviour(
    ctx: AsyncStoreContext, collection: Any, selector: Mapping[str, Any], sort: Any
) -> None:
    """Whether the server stops at the limit: ``explain`` a window just read (2 rows or more)
    with ``limit(1)``; more than one document examined means it reads the range first."""
    caps = ctx.capabilities
    command = {"find": collection.name, "filter": dict(selector), "sort": dict(sort), "limit": 1}
    try:
        explained = await ctx.db.command({"explain": command, "verbosity": "executionStats"})
    except REFUSED:
        caps.stops_at_limit = False  # no explain: keep the windows (right on any server)
        return
    examined = int(explained.get("executionStats", {}).get("totalDocsExamined", 2))
    caps.stops_at_limit = examined <= 1
    log.debug("server stops at the limit: %s (examined %d for limit 1)", caps.stops_at_limit, examined)


async def atlas_vectors(ctx: AsyncStoreContext) -> bool:
    """Whether Atlas lists the vector index as queryable (any refusal: no)."""
    caps = ctx.capabilities
    if caps.atlas_vectors is None:
        try:
            listed = await to_list(await resolve(ctx.vectors.aggregate(vectors.atlas_index_pipeline())))
        except REFUSED:
            listed = []
        caps.atlas_vectors = any(ix.get("queryable") for ix in listed)
    return caps.atlas_vectors
