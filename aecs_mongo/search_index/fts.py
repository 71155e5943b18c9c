"""The query tree as SQLite FTS5 and SQL over one mailbox's tables. No I/O (``sqlite3`` is not
imported here): :mod:`aecs_mongo.search_index` runs what this builds.

Each mailbox has a ``docs_<n>`` table (``rowid``, message key, thread key) and an FTS5 table
``fts_<n>`` over the text columns with the same rowid. The rowid orders messages as the store
does, newest last: its high bits are the sort key ``ts`` and its low bits the start of the
message key (:func:`rowid_for`), so "newest first" is FTS5's own ``ORDER BY rowid DESC`` (it
stops after the page, whatever the number of matches) and a ``date:`` range is a rowid range.

A word is an FTS5 string (``"köln"``: FTS5's tokenizer folds it as it folded the text), a
phrase a string of several words, a prefix ``"budg" *``; a field is a column filter
(``{sender} : ...``). Where FTS5 has no form for a node (``NOT`` alone, ``OR`` beside a
``date:``, ``thread:``), the node becomes SQL around ``rowid IN (SELECT rowid ... MATCH ...)``.
A ``tag:``/``folder:`` term is a row of the ``labels_<n>`` table (``t:<tag>``, ``f:<folder>``,
:func:`label_rows`), an ``id:`` term the docs row of that message key.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..pure.keys import message_key
from ..pure.search_query import (
    COLUMNS,
    And,
    Date,
    Label,
    Node,
    Not,
    Or,
    Phrase,
    Thread,
    Word,
    columns_for,
    date_range,
)

__all__ = [
    "KEY_BITS",
    "RANK_WEIGHTS",
    "TS_MAX",
    "TS_MIN",
    "Plan",
    "compile_plan",
    "label_rows",
    "rowid_for",
    "ts_of_rowid",
]

#: Low bits of a rowid: the start of the message key (ties within one second).
KEY_BITS = 27
#: The ``ts`` a rowid can hold (about 1,089 years either side of 1970); others are clamped.
TS_MIN = -(2**35)
TS_MAX = 2**35 - 1
#: Column weights of the BM25 rank (``sort="relevance"``): subject and what the sender wrote
#: (clean) first, then names, file names, and the tails clean drops.
RANK_WEIGHTS = {
    "subject": 10.0,
    "clean": 5.0,
    "rest": 1.0,
    "html": 1.0,
    "sender": 3.0,
    "recipients": 1.0,
    "bcc": 1.0,
    "attachments": 3.0,
    "attachmenttext": 1.0,
}


def rowid_for(ts: int, key_hex: str) -> int:
    """The rowid a message is first tried at: ``ts`` (clamped) in the high bits, the key's
    first 27 bits below (a taken rowid moves up by one)."""
    clamped = min(max(int(ts), TS_MIN), TS_MAX)
    return ((clamped - TS_MIN) << KEY_BITS) | (int(key_hex[:7], 16) >> 1)


def label_rows(tags: Iterable[str], folders: Iterable[str]) -> tuple[str, ...]:
    """The ``labels_<n>`` rows of a message: ``t:<tag>`` and ``f:<folder>``."""
    return tuple(dict.fromkeys([*(f"t:{t}" for t in tags), *(f"f:{f}" for f in folders)]))


def ts_of_rowid(rowid: int) -> int:
    return (rowid >> KEY_BITS) + TS_MIN


def _rowid_bound(ts: int) -> int:
    """The first rowid of second ``ts``."""
    return (min(max(ts, TS_MIN), TS_MAX + 1) - TS_MIN) << KEY_BITS


@dataclass(frozen=True)
class Plan:
    """One query over a mailbox's tables. ``match``: the FTS5 expression that drives it (None:
    the docs table does, as for ``date:``-only or ``NOT``-only queries); ``where``/``params``:
    further SQL conditions on the driving table's rowid; ``lo``/``hi``: a rowid range (from the
    ``date:`` terms beside the words); ``empty``: nothing can match; ``label``: the row of the
    ``labels_<n>`` table a top-level ``tag:``/``folder:`` term needs (it drives the query where
    no rank is asked for: a tag's rows are far fewer than a common word's, and walked newest
    first), and ``labels``: that table."""

    match: str | None
    where: str
    params: tuple[object, ...]
    lo: int | None = None
    hi: int | None = None
    empty: bool = False
    label: str | None = None
    labels: str = "labels"

    @property
    def ranked(self) -> bool:
        return self.match is not None


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


class _Compiler:
    def __init__(
        self,
        fts: str,
        docs: str,
        shared_view: bool,
        now: _dt.datetime,
        thread_key_of: Callable[[str], str],
        labels: str,
    ) -> None:
        self.fts, self.docs, self.labels = fts, docs, labels
        self.shared_view = shared_view
        self.now = now
        self.thread_key_of = thread_key_of

    def leaf(self, node: Word | Phrase) -> str:
        text = node.text if isinstance(node, Word) else " ".join(node.words)
        expr = _quote(text) + (" *" if node.prefix else "")
        columns = columns_for(node.field, shared_view=self.shared_view)
        if columns == COLUMNS:
            return expr
        return "{" + " ".join(columns) + "} : " + expr

    def match(self, node: Node) -> str | None:
        """``node`` as one FTS5 expression, or None (it holds a date, a thread, or a NOT that
        has nothing to be subtracted from)."""
        if isinstance(node, (Word, Phrase)):
            return self.leaf(node)
        if isinstance(node, Or):
            parts = [self.match(item) for item in node.items]
            return None if any(p is None for p in parts) else " OR ".join(f"({p})" for p in parts)
        if isinstance(node, And):
            positive, negative = [], []
            for item in node.items:
                if isinstance(item, Not):
                    inner = self.match(item.item)
                    if inner is None:
                        return None
                    negative.append(inner)
                else:
                    part = self.match(item)
                    if part is None:
                        return None
                    positive.append(part)
            if not positive:
                return None
            expr = " AND ".join(f"({p})" for p in positive)
            for n in negative:
                expr = f"({expr}) NOT ({n})"
            return expr
        return None

    def condition(self, node: Node, rowid: str) -> tuple[str, list[object]]:
        """``node`` as an SQL condition on ``rowid`` (a column of the driving table)."""
        expr = self.match(node)
        if expr is not None:
            return f"{rowid} IN (SELECT rowid FROM {self.fts} WHERE {self.fts} MATCH ?)", [expr]
        if isinstance(node, Date):
            start, end = date_range(node, self.now)
            parts: list[str] = []
            params: list[object] = []
            if start is not None:
                parts.append(f"{rowid} >= ?")
                params.append(_rowid_bound(start))
            if end is not None:
                parts.append(f"{rowid} < ?")
                params.append(_rowid_bound(end))
            return ("(" + " AND ".join(parts) + ")" if parts else "1"), params
        if isinstance(node, Thread):
            key = bytes.fromhex(self.thread_key_of(node.thread_id))
            return f"{rowid} IN (SELECT rowid FROM {self.docs} WHERE thread = ?)", [key]
        if isinstance(node, Label):
            if node.field == "id":
                key = bytes.fromhex(message_key(node.value))
                return f"{rowid} IN (SELECT rowid FROM {self.docs} WHERE key = ?)", [key]
            row = label_rows([node.value], []) if node.field == "tag" else label_rows([], [node.value])
            return f"{rowid} IN (SELECT rowid FROM {self.labels} WHERE label = ?)", [row[0]]
        if isinstance(node, Not):
            inner, params = self.condition(node.item, rowid)
            return f"NOT ({inner})", params
        if isinstance(node, (Word, Phrase)):  # pragma: no cover - match() takes every leaf of text
            raise AssertionError(node)
        joiner = " AND " if isinstance(node, And) else " OR "
        pieces: list[str] = []
        values: list[object] = []
        for item in node.items:
            sql, more = self.condition(item, rowid)
            pieces.append(f"({sql})")
            values += more
        return joiner.join(pieces), values


def compile_plan(
    node: Node,
    *,
    fts: str,
    docs: str,
    shared_view: bool,
    now: _dt.datetime,
    thread_key_of: Callable[[str], str],
    labels: str = "labels",
) -> Plan:
    """The plan of ``node`` over the tables ``fts`` and ``docs``: the top-level words and
    phrases (and the NOTs beside them) drive the FTS5 query; top-level ``date:`` ranges bound
    its rowids; the rest are SQL conditions."""
    c = _Compiler(fts, docs, shared_view, now, thread_key_of, labels)
    items = list(node.items) if isinstance(node, And) else [node]
    text: list[Node] = []
    rest: list[Node] = []
    lo: int | None = None
    hi: int | None = None
    for item in items:
        if isinstance(item, Date):
            start, end = date_range(item, now)
            if start is not None:
                lo = _rowid_bound(start) if lo is None else max(lo, _rowid_bound(start))
            if end is not None:
                hi = _rowid_bound(end) if hi is None else min(hi, _rowid_bound(end))
        elif c.match(item) is not None or (isinstance(item, Not) and c.match(item.item) is not None):
            text.append(item)
        else:
            rest.append(item)
    match = c.match(And(tuple(text))) if len(text) > 1 else c.match(text[0]) if text else None
    if match is None:
        rest = text + rest  # only NOTs of text: conditions on the docs table
    label = next((i for i in rest if isinstance(i, Label) and i.field in ("tag", "folder")), None)
    if label is not None:
        rest = [i for i in rest if i is not label]
    column = "rowid"
    where, params = [], []
    for item in rest:
        sql, more = c.condition(item, column)
        where.append(f"({sql})")
        params += more
    empty = lo is not None and hi is not None and lo >= hi
    row = None
    if label is not None:
        row = (label_rows([label.value], []) if label.field == "tag" else label_rows([], [label.value]))[0]
    return Plan(match, " AND ".join(where), tuple(params), lo, hi, empty, row, labels)
