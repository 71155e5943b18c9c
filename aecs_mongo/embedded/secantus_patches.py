"""Changes to SecantusDB's internals that the launcher (:mod:`aecs_mongo.embedded.launcher`) makes
in the server's process, each checked first against the release it was written for.

SecantusDB is GPL-2.0: this module runs only in the server's own process, never in the library's.
A patch whose internals differ from the ones it knows is left out, and the launcher says so.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CATALOG_MEMO",
    "CATALOG_STATEMENTS",
    "KNOWN_VERSION",
    "PATCHES",
    "TABLE_COMPRESSION",
    "TABLE_COMPRESSOR",
    "TABLE_PREFIX",
    "Patch",
    "apply",
    "catalog_differences",
    "compress_tables",
    "compression_differences",
    "memo_index_catalog",
]

#: The SecantusDB release whose internals these patches are written for (the ``embedded`` extra
#: pins it).
KNOWN_VERSION = "0.7.0b3"

#: The write statements of ``secantus.storage.Storage`` that read the index catalog, each under
#: the collection's lock from before its first catalog read to its end, with their parameters.
CATALOG_STATEMENTS: dict[str, tuple[str, ...]] = {
    name: tuple(parameters.split())
    for name, parameters in {
        "_insert_chunk": "self db coll prepared base_index ordered sync fresh_id_keys",
        "_update_matching_single_txn": "self db coll filter update multi upsert array_filters let collation "
        "validator validator_moderate journal return_post_images",
        "_update_chunk": "self db coll rids filter update array_filters let collation_obj validator "
        "validator_moderate journal want_posts",
        "_delete_chunk": "self db coll rids filter let collation_obj journal",
        "_delete_matching_single_txn": "self db coll filter limit let collation journal",
    }.items()
}
CATALOG_READ = ("_index_options_map", ("self", "db", "coll"))


@dataclass(frozen=True)
class Patch:
    """One change to the server: ``differences`` says how the installed internals (the
    ``secantus.storage`` module, the release's version) differ from the known ones (nothing: the
    patch applies), ``install`` makes the change; without an ``essential`` one the server is
    wrong and does not start."""

    name: str
    differences: Callable[[Any, str], list[str]]
    install: Callable[[Any], None]
    essential: bool = False


def _parameters(function: Callable[..., Any]) -> tuple[str, ...] | None:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


def catalog_differences(storage: Any, version: str) -> list[str]:
    """How ``storage`` (the ``secantus.storage`` module) and ``version`` differ from what the
    catalog memo knows; empty when it applies."""
    found: list[str] = []
    if version != KNOWN_VERSION:
        found.append(f"version {version}, not {KNOWN_VERSION}")
    cls = getattr(storage, "Storage", None)
    if not isinstance(cls, type):
        return [*found, "no class storage.Storage"]
    for name, known in [CATALOG_READ, *CATALOG_STATEMENTS.items()]:
        method = getattr(cls, name, None)
        if not callable(method):
            found.append(f"no method Storage.{name}")
            continue
        parameters = _parameters(method)
        if parameters != known:
            shown = "unknown" if parameters is None else ", ".join(parameters)
            found.append(f"Storage.{name}({shown}), not ({', '.join(known)})")
    return found


def memo_index_catalog(storage: Any) -> None:
    """Read the index catalog once per write statement instead of once per document.

    SecantusDB reads every index's options (a BSON decode each) three times for each document it
    inserts and four for each it updates or deletes, options that cannot change while the
    statement holds the collection's lock: with the indexes of ``messages`` that is a fifth of
    the server's time in an ingest. The catalog is kept for one statement (an insert's, update's
    or delete's chunk, a single update or delete) and read anew by the next, so an index created
    or changed between two writes holds for the second.
    """
    cls = storage.Storage
    local = threading.local()
    read_map = getattr(cls, CATALOG_READ[0])

    def _index_options_map(self: object, db: str, coll: str) -> Any:
        memo: dict[tuple[int, str, str], Any] | None = getattr(local, "memo", None)
        if memo is None:
            return read_map(self, db, coll)
        key = (id(self), db, coll)
        found = memo.get(key)
        if found is None:
            found = memo[key] = read_map(self, db, coll)
        return found

    def keeping(statement: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: object, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(local, "memo", None)
            local.memo = {}
            try:
                return statement(self, *args, **kwargs)
            finally:
                local.memo = outer

        return run

    setattr(cls, CATALOG_READ[0], _index_options_map)
    for name in CATALOG_STATEMENTS:
        setattr(cls, name, keeping(getattr(cls, name)))


CATALOG_MEMO = Patch("the index-catalog memo", catalog_differences, memo_index_catalog)

#: The tables SecantusDB creates (its documents, index entries, oplog, ...), by the start of
#: their WiredTiger names.
TABLE_PREFIX = "table:secantus_"
#: WiredTiger's block compressor for them: built into the WiredTiger that SecantusDB ships
#: (``lz4`` and ``zlib``), so any server of that release opens the tables.
#: ``lz4``: ``zlib`` makes the tables a third smaller again at several times the CPU of every
#: checkpoint and eviction, and with it the transaction of a 20,000-recipient message was
#: aborted as too slow in two of two full test runs (none with ``lz4``)
TABLE_COMPRESSOR = "lz4"


def compression_differences(storage: Any, version: str) -> list[str]:
    """How ``storage`` (the ``secantus.storage`` module) and ``version`` differ from what the
    table compression knows; empty when it applies."""
    found: list[str] = []
    if version != KNOWN_VERSION:
        found.append(f"version {version}, not {KNOWN_VERSION}")
    session = getattr(getattr(storage, "wt", None), "Session", None)
    if not isinstance(session, type) or not callable(getattr(session, "create", None)):
        found.append("no wiredtiger.Session.create in storage.wt")
    oplog = getattr(storage, "_OPLOG_TABLE", None)
    if not (isinstance(oplog, str) and oplog.startswith(TABLE_PREFIX)):
        found.append(f"storage._OPLOG_TABLE is {oplog!r}, not a name starting {TABLE_PREFIX!r}")
    return found


def compress_tables(storage: Any) -> None:
    """Create SecantusDB's tables with WiredTiger's block compression.

    SecantusDB creates its tables without a block compressor: its pages of mail (message rows,
    bodies, their index entries, and the oplog's copy of each of them) were written to disk as
    they are in memory, three times what ``zlib`` makes of them (3,000 real messages: oplog
    14.5 MB to 3.7 MB, documents 9.8 MB to 2.6 MB, index entries 6.9 MB to 2.0 MB). Only a table's
    creation takes the setting: the tables of a data directory made before keep theirs (a
    ``create`` of an existing table changes nothing), and a server without this patch reads and
    writes the compressed ones as they are. Pages are compressed where WiredTiger writes them
    (its checkpoints and eviction), not in the statements.
    """
    session = storage.wt.Session
    create = session.create

    def create_compressed(self: object, name: object, *rest: Any) -> Any:
        config = rest[0] if rest else None
        ours = isinstance(name, str) and name.startswith(TABLE_PREFIX)
        if ours and isinstance(config, str) and "block_compressor" not in config:
            setting = f"block_compressor={TABLE_COMPRESSOR}"
            rest = (f"{config},{setting}" if config else setting, *rest[1:])
        return create(self, name, *rest)

    session.create = create_compressed


TABLE_COMPRESSION = Patch("the tables' compression", compression_differences, compress_tables)
PATCHES = (CATALOG_MEMO, TABLE_COMPRESSION)


def apply(storage: Any, version: str, say: Callable[[str], None], patches: tuple[Patch, ...] = PATCHES) -> bool:
    """Install each patch whose internals are the known ones; say once, for each other one, the
    installed version and what differs. False when an essential patch could not be installed
    (the server must not run)."""
    whole = True
    for patch in patches:
        differences = patch.differences(storage, version)
        if not differences:
            patch.install(storage)
            continue
        what = "; ".join(differences)
        if patch.essential:
            known = "the release this launcher knows"
            say(f"aecs-mongo: SecantusDB {version} differs from {known} ({what}): not starting")
            whole = False
        else:
            known = "the release this launcher knows"
            say(f"aecs-mongo: SecantusDB {version} differs from {known} ({what}): running without {patch.name}")
    return whole
