"""What differs between the servers the store runs on, in one place. Pure: no I/O.

A ``Dialect`` is chosen once per store (``asynchronous/capabilities.py``: ``dialect``) from what
the server reports (``buildInfo``) and refined by what its plans are seen to do (``explain``:
whether a sorted query stops at its limit). It owns every workaround for one server: the
statements it restates (an integer range's lower bound), how many values one ``$in`` names,
the blobs one export read names, whether the journal barrier must change a document, how long
a search pattern may be. General code asks it, or has it restate a statement, and names no
server: mongod and Atlas get the plain statement.

The embedded SecantusDB (``buildInfo`` says ``secantusVersion``):

- drops the boundary value of ``$gte`` on a descending index field when it plans from the
  filter, so an integer ``$gte lo`` is sent as ``$gt lo - 1`` (the same range on integers);
- costs more per ``$in`` value the longer the list, so longer lists are split into statements
  of 100; it tests each document it fetches against the whole list (in Python), so a search
  scan reads its bodies 50 ids at a time and an export's ``chunks`` read names 32 blobs (the
  measurements: the manual's benchmarks page, "Measurements behind the code's choices");
- commits a journaled write that changes nothing without flushing its log, so the barrier
  changes a counter (``indexes.BARRIER_COLLECTION``); mongod journals up to its latest write
  for a write that matches nothing;
- reads the whole matched range before it applies a limit, which its ``explain`` shows: the
  reads then walk bounded windows (``windows.py``). The releases in ``RANGE_READING_RELEASES``
  were seen to, so their dialect says it at once (a store's first read sends no ``explain``);
  another release's behaviour is learned from ``explain`` on the first read that can tell;
- refuses a regular expression over 1,000 characters (mongod: 32,764 bytes);
- resolves a path through an array (``"$variants.sha256"``) to [] in an expression, so an
  array's members are tested with ``$filter``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CAUTIOUS",
    "EMBEDDED",
    "MONGODB",
    "RANGE_READING_RELEASES",
    "SECANTUSDB",
    "SORT_TIMES",
    "Dialect",
    "of_server",
]

#: The integer sort-time fields whose lower bounds a dialect may restate.
SORT_TIMES = ("ts", "lastTs")


@dataclass(frozen=True)
class Dialect:
    """One server's ways. The defaults are the plain statements (mongod, Atlas)."""

    name: str
    #: the server's name, as messages say it
    server: str = "MongoDB"
    #: an integer lower bound of a sort time (``SORT_TIMES``), ``$gte lo``, sent as ``$gt lo - 1``
    gte_as_gt: bool = False
    #: the most values one ``$in`` names (a longer list: several statements). mongod's own bound
    #: is the 16 MB a command may hold: 10,000 ids (about 70 bytes each) stay far below it,
    #: whatever the mailbox's size; None: one statement
    in_limit: int | None = 10_000
    #: the most ids one read of a search scan's bodies names (None: the window's, in one read)
    scan_in: int | None = None
    #: the most blobs one export ``chunks`` read names
    export_blobs: int = 100
    #: the journal barrier changes a counter (else an update that matches nothing)
    barrier_counter: bool = False
    #: a sorted query stops at its limit (True: one plain query a page); None: learned from
    #: ``explain`` on the first read that could tell
    stops_at_limit: bool | None = True
    #: the longest regular expression a search prefilter sends, in characters (mongod's limit is
    #: 32,764 bytes: 8,000 characters of four bytes at most)
    pattern_chars: int = 8_000
    #: an array's members are tested with ``$filter`` (else by the path through the array)
    filter_for_array_paths: bool = False
    #: what the server's data files hold, by the start of their names (the ``stats`` command's
    #: table of a data directory): ``(prefix, kind)``, kinds ``documents``, ``indexes``,
    #: ``oplog``, ``journal``; a file no prefix names is ``other``
    data_files: tuple[tuple[str, str], ...] = (("WiredTigerLog", "journal"),)

    def split_in(self, selector: Mapping[str, Any], limit: int | None = None) -> list[dict[str, Any]]:
        """``selector`` as the statements this server is sent: its (one) ``$in`` split into
        lists of at most ``limit`` (default: ``in_limit``; None: not split)."""
        most = self.in_limit if limit is None else limit
        if most is not None:
            for name, value in selector.items():
                if isinstance(value, Mapping) and isinstance(value.get("$in"), list) and len(value["$in"]) > most:
                    values = value["$in"]
                    parts = range(0, len(values), most)
                    return [{**selector, name: {**value, "$in": values[i : i + most]}} for i in parts]
        return [dict(selector)]

    def statement(self, selector: Mapping[str, Any]) -> dict[str, Any]:
        """``selector`` as this server is sent it: the same documents, its integer sort-time
        lower bounds restated where the server needs it (``gte_as_gt``), in ``$and``/``$or``
        too. The plain statement elsewhere."""
        if not self.gte_as_gt:
            return dict(selector)
        return _restated(selector)

    def member_test(self, array: str, field: str, value: Any) -> dict[str, Any]:
        """An expression: whether an element of ``array`` (a field path without ``$``) has
        ``field`` equal to ``value`` (an expression); an absent array has none."""
        if self.filter_for_array_paths:
            each = {"input": {"$ifNull": [f"${array}", []]}, "cond": {"$eq": [f"$$this.{field}", value]}}
            members = {"$filter": each}
            return {"$gt": [{"$size": members}, 0]}
        return {"$in": [value, {"$ifNull": [f"${array}.{field}", []]}]}


def _restated(selector: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in selector.items():
        if name in ("$and", "$or", "$nor") and isinstance(value, list):
            out[name] = [_restated(part) if isinstance(part, Mapping) else part for part in value]
        elif name in SORT_TIMES and isinstance(value, Mapping) and _int(value.get("$gte")) and "$gt" not in value:
            bounds = {k: v for k, v in value.items() if k != "$gte"}
            out[name] = {"$gt": value["$gte"] - 1, **bounds}
        else:
            out[name] = value
    return out


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: mongod and Atlas: the plain statements.
MONGODB = Dialect("mongodb")

#: The SecantusDB releases whose sorted queries were seen (``explain``) to read the whole matched
#: range before the limit: the release the ``embedded`` extra pins.
RANGE_READING_RELEASES = ("0.7.0b3",)

#: The embedded SecantusDB (see the module's docstring for each difference), as the releases of
#: ``RANGE_READING_RELEASES`` behave: a big read walks windows from the first.
SECANTUSDB = Dialect(
    "secantusdb",
    server="SecantusDB",
    gte_as_gt=True,
    in_limit=100,
    scan_in=50,
    export_blobs=32,
    barrier_counter=True,
    stops_at_limit=False,
    pattern_chars=900,
    filter_for_array_paths=True,
    data_files=(
        ("secantus_documents", "documents"),
        ("secantus_index_entries", "indexes"),
        ("secantus_unique_keys", "indexes"),
        ("secantus_oplog", "oplog"),
        ("secantus_preimages", "oplog"),
        ("WiredTigerLog", "journal"),
    ),
)

#: The server the command line starts where no ``--uri`` is given (``aecs_mongo.embedded``).
EMBEDDED = SECANTUSDB

#: Every workaround at once: statements right on every server, only slower on some; the
#: default of a pure function that is not handed the store's dialect.
CAUTIOUS = dataclasses.replace(SECANTUSDB, name="cautious")


def of_server(build_info: Mapping[str, Any] | None) -> Dialect:
    """The dialect of the server whose ``buildInfo`` this is (None or {}: it did not say, and
    the plain statements are sent; whether it stops at a limit is then learned)."""
    if build_info and "secantusVersion" in build_info:
        if str(build_info["secantusVersion"]) in RANGE_READING_RELEASES:
            return SECANTUSDB
        return dataclasses.replace(SECANTUSDB, stops_at_limit=None)  # another release: learned
    if not build_info:
        return Dialect("unknown", stops_at_limit=None)
    return MONGODB
