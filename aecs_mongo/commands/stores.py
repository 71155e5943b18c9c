"""The one place that opens a command's store, and so decides its search engine, its local index
and its blob store.

Every surface of the command line reads through a store made here: the read and write commands
(``aecs_mongo.cli``), the MCP server (``aecs-mongo mcp``, a shared view of the same mailbox) and
the warm command host (``aecs_mongo.warm``), which keeps the stores it opened. Agent tools made
from such a store (``MailTools(store)``) search as it does. So ``aecs-mongo search`` and an
agent's search tool in the same data directory answer from the same engine and index file.

The local search index: automatic for the embedded default, in its data directory; for
``--uri`` without a text index (``$text`` or Atlas Search), one per deployment and database in
the user's cache directory; ``--search-index`` names another file, or ``none``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..synchronous.connection import MailDatabase
    from ..synchronous.store import MessageStore

__all__ = ["blobs_for", "deployment", "open_store", "search_index_for"]


def search_index_for(args: argparse.Namespace, database: MailDatabase) -> Path | None:
    """The local search index file of a command's store, or None (the server's own text index
    serves search, or ``--search-index none``). ``args.embedded_dir`` is set (None with
    ``--uri``) by the run that started or found the server."""
    chosen = getattr(args, "search_index", None)
    if chosen is not None:
        return None if chosen == "none" else Path(chosen).expanduser().resolve()
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in args.database_name)
    if not args.uri:
        return Path(args.embedded_dir).resolve() / "search" / f"{name}.sqlite"
    if database.has_text_index():
        return None  # the server's $text index serves search
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aecs-mongo" / "search"
    where = hashlib.sha256(f"{deployment(args.uri)}\n{args.database_name}".encode()).hexdigest()[:16]
    return cache / f"{name}-{where}.sqlite"


def deployment(uri: str) -> str:
    """The hosts of a MongoDB URI (its scheme and host list, without credentials or options):
    the same deployment gives the same name whoever connects."""
    scheme, _, rest = uri.partition("://")
    hosts = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return scheme + "://" + ",".join(sorted(hosts.lower().split(",")))


def blobs_for(args: argparse.Namespace, database: MailDatabase) -> str:
    """The blob store of the command: ``--blobs`` or ``$AECS_BLOBS``; else the one the database
    records; else, for the embedded server, a directory in its data directory (``blobs``),
    unless the database holds mail stored before locations were recorded (GridFS); else GridFS
    (``--uri``, as the library's default)."""
    given = getattr(args, "blobs", None)
    if given:
        return str(given)
    recorded = database.recorded_blobs()
    if recorded is not None:
        url = str(recorded["url"])
        return url
    if args.uri:
        return "gridfs"
    if database.holds_mail():  # only for a data directory's first store: on the _id index
        return "gridfs"
    return "file://" + str(Path(args.embedded_dir).resolve() / "blobs")


def open_store(
    args: argparse.Namespace,
    database: MailDatabase,
    *,
    shared_view: bool = False,
    long_lived: bool = False,
) -> MessageStore:
    """The store a command reads and writes through: ``--mailbox``, ``--owner``, ``--fast``, the
    local search index of :func:`search_index_for` and the blob store of :func:`blobs_for`.
    ``shared_view``: what the store reads is seen by others (the MCP server): bcc is never shown.
    ``long_lived``: the store serves many reads (the warm command host, the MCP server): its
    local index keeps its change stream open between them (one ``getMore`` a read)."""
    blobs = blobs_for(args, database)
    store = database.open_store(
        mailbox_id=args.mailbox,
        owner_addresses=getattr(args, "owner", None) or (),
        durable=not getattr(args, "fast", False),
        shared_view=shared_view,
        search_index=search_index_for(args, database),
        blobs=blobs,
        ocr=bool(getattr(args, "ocr", False)),
    )
    if long_lived:
        store._keep_index_stream()
    return store
