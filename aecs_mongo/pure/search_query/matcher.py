"""The match of one message against a tree, in Python: what the scan runs.

``matches`` has the same semantics as the local index's FTS5 query (whole folded words, phrases
in one column, prefixes, dates, threads, labels). ``may_match`` is its cheap test first: a
substring search on the raw fields, False only where ``matches`` would be, so most messages of a
scan are never tokenized.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..keys import message_key
from .dates import date_range
from .tokens import ascii_folded, fold, words
from .tree import And, Date, Label, Node, Not, Or, Phrase, Thread, Word, columns_for

__all__ = ["matches", "may_match"]


class _Record:
    """One message's columns, each tokenized on first use."""

    def __init__(self, columns: Mapping[str, str | None]) -> None:
        self.columns = columns
        self.cache: dict[str, list[str]] = {}
        self.folded: dict[str, str] = {}

    def may_hold(self, column: str, wanted: Sequence[str]) -> bool:
        """False where the column cannot hold the words ``wanted`` (ASCII words only: each
        must be a substring of the column's ``ascii_folded`` text); tokenizing costs more."""
        if not all(w.isascii() for w in wanted):
            return True
        text = self.folded.get(column)
        if text is None:
            text = self.folded[column] = ascii_folded(self.columns.get(column) or "")
        return all(w in text for w in wanted)

    def tokens(self, column: str) -> list[str]:
        found = self.cache.get(column)
        if found is None:
            found = self.cache[column] = words(self.columns.get(column))
        return found


def _phrase_in(tokens: Sequence[str], wanted: Sequence[str], prefix: bool) -> bool:
    n = len(wanted)
    first, last = wanted[0], wanted[-1]
    for i in range(len(tokens) - n + 1):
        if tokens[i] != first and not (n == 1 and prefix and tokens[i].startswith(first)):
            continue
        if all(tokens[i + j] == wanted[j] for j in range(1, n - 1)) and (
            n == 1 or tokens[i + n - 1] == last or (prefix and tokens[i + n - 1].startswith(last))
        ):
            return True
    return False


def matches(
    node: Node,
    columns: Mapping[str, str | None],
    *,
    ts: int,
    thread_key: str,
    now: _dt.datetime,
    shared_view: bool,
    thread_key_of: Callable[[str], str],
    tags: Iterable[str] = (),
    folders: Iterable[str] = (),
    key: str = "",
) -> bool:
    """Whether one message matches the tree: ``columns`` are its text columns (:data:`COLUMNS`),
    ``ts`` its sort key, ``thread_key`` its thread's key (``thread_key_of`` maps a ``thread:``
    value to one), ``tags``/``folders``/``key`` its labels and message key. The same semantics
    as the local index's FTS5 query."""
    record = _Record(columns)
    labels = {"tag": set(tags), "folder": set(folders)}

    def test(n: Node) -> bool:
        if isinstance(n, And):
            return all(test(item) for item in n.items)
        if isinstance(n, Or):
            return any(test(item) for item in n.items)
        if isinstance(n, Not):
            return not test(n.item)
        if isinstance(n, (Date, Thread, Label)):
            return _message_leaf(n, ts, thread_key, now, thread_key_of, labels, key)
        wanted = _wanted(n)
        return any(
            record.may_hold(column, wanted) and _phrase_in(record.tokens(column), wanted, n.prefix)
            for column in columns_for(n.field, shared_view=shared_view)
        )

    return test(node)


@functools.lru_cache(maxsize=1024)
def _wanted(n: Word | Phrase) -> tuple[str, ...]:
    return (fold(n.text),) if isinstance(n, Word) else tuple(fold(w) for w in n.words)


def _message_leaf(
    n: Date | Thread | Label,
    ts: int,
    thread_key: str,
    now: _dt.datetime,
    thread_key_of: Callable[[str], str],
    labels: Mapping[str, set[str]],
    key: str,
) -> bool:
    if isinstance(n, Date):
        start, end = date_range(n, now)
        return (start is None or ts >= start) and (end is None or ts < end)
    if isinstance(n, Thread):
        return thread_key == thread_key_of(n.thread_id)
    return key == message_key(n.value) if n.field == "id" else n.value in labels[n.field]


def may_match(
    node: Node,
    haystacks: Mapping[str, str | None],
    *,
    ts: int,
    thread_key: str,
    now: _dt.datetime,
    shared_view: bool,
    thread_key_of: Callable[[str], str],
    tags: Iterable[str] = (),
    folders: Iterable[str] = (),
    key: str = "",
) -> bool:
    """The scan's cheap test before :func:`matches`, False only where it is: ``haystacks`` per
    column, a text each word of it is a substring of (None: unread). An ASCII-folded word holds
    where it is a substring of the ``ascii_folded`` haystack; other words and NOT may always
    hold; dates, threads and labels are tested as ``matches`` does. No tokens, no columns."""
    labels, folded = {"tag": set(tags), "folder": set(folders)}, dict[tuple[str, ...], str | None]()

    def hay(columns: tuple[str, ...]) -> str | None:
        if columns not in folded:
            parts = [haystacks.get(c) for c in columns]
            # a word holds no newline: a substring of the joined text where it is one of a part
            folded[columns] = None if None in parts else ascii_folded("\n".join(p for p in parts if p))
        return folded[columns]

    def test(n: Node) -> bool:
        if isinstance(n, And):
            return all(test(item) for item in n.items)
        if isinstance(n, Or):
            return any(test(item) for item in n.items)
        if isinstance(n, Not):
            return True
        if isinstance(n, (Date, Thread, Label)):
            return _message_leaf(n, ts, thread_key, now, thread_key_of, labels, key)
        wanted = _wanted(n)
        if not all(w.isascii() for w in wanted):
            return True
        text = hay(columns_for(n.field, shared_view=shared_view))
        return text is None or all(w in text for w in wanted)

    return test(node)
