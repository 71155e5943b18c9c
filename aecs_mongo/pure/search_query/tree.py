"""The syntax tree of a query: its nodes, the helpers that build and read them, and the fields.

Every engine compiles this tree (``search_compile.py``, ``search_index/fts.py``) or matches it
(``matcher.py``), so a query means the same thing everywhere. The nodes are frozen dataclasses:
a tree is a value, compared and hashed as one. ``COLUMNS`` and ``TEXT_FIELDS`` say which text
columns a word of each field is looked for in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Union

__all__ = [
    "ATTACHMENT_TEXT_SEPARATOR",
    "COLUMNS",
    "FIELDS",
    "LABEL_FIELDS",
    "TEXT_FIELDS",
    "And",
    "Date",
    "Label",
    "Node",
    "Not",
    "Or",
    "Phrase",
    "Thread",
    "Word",
    "all_of",
    "any_of",
    "columns_for",
    "has_not",
    "has_text",
    "leaves",
    "negation",
    "positive_words",
]

#: The text columns every full-text engine keeps per message (the local index's columns, the
#: scan's record): subject; clean (the body as AECS-1 cleans it: ranked first); rest (the lines
#: of the whole text that clean drops: quoted history, signatures); html (lines only the HTML
#: part holds); sender and recipients (names and addresses; bcc apart); attachments (file names);
#: attachmenttext (the text read from attachments, one part each, in ``ATTACHMENT_TEXT_SEPARATOR``).
COLUMNS = ("subject", "clean", "rest", "html", "sender", "recipients", "bcc", "attachments", "attachmenttext")
#: Between two attachments' texts in the ``attachmenttext`` column (a control character: no word).
ATTACHMENT_TEXT_SEPARATOR = "\n\x1d\n"
#: The fields of the language that name text, and the columns each searches.
TEXT_FIELDS: dict[str | None, tuple[str, ...]] = {
    None: COLUMNS,
    "from": ("sender",),
    "to": ("recipients", "bcc"),
    "subject": ("subject",),
    "body": ("clean", "rest", "html"),
    "attachment": ("attachments",),
    "attachmenttext": ("attachmenttext",),
}
#: Every field name the parser knows.
FIELDS = (
    "attachment",
    "attachmenttext",
    "body",
    "date",
    "folder",
    "from",
    "id",
    "is",
    "subject",
    "tag",
    "thread",
    "to",
)
#: The fields of the language that name a message's labels (one value each, never a group).
LABEL_FIELDS = ("folder", "id", "is", "tag")


@dataclass(frozen=True)
class Word:
    """One word (as typed; engines fold it), in ``field`` (None: every text field); ``prefix``:
    any word that starts with it."""

    text: str
    field: str | None = None
    prefix: bool = False


@dataclass(frozen=True)
class Phrase:
    """Words next to each other in one field (``prefix``: the last word is a prefix)."""

    words: tuple[str, ...]
    field: str | None = None
    prefix: bool = False


@dataclass(frozen=True)
class Date:
    """``date:start..end``: the bounds as written (``2024-03-01``, ``2024-03``, ``2024``, ``30d``,
    ``today``...), either open (None). A bound is a whole UTC period: the start's first second
    to the end's last."""

    start: str | None
    end: str | None


@dataclass(frozen=True)
class Thread:
    """``thread:ID``: the messages of one thread (its id, without angle brackets)."""

    thread_id: str


@dataclass(frozen=True)
class Label:
    """``tag:NAME`` (``field="tag"``, the tag as stored: lowercase), ``folder:NAME`` (as written)
    or ``id:MESSAGE-ID`` (without angle brackets); ``is:`` flags parse to ``tag:`` labels."""

    field: str
    value: str


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node = Union[Word, Phrase, Date, Thread, Label, And, Or, Not]  # noqa: UP007 (a runtime alias)


def all_of(items: Iterable[Node]) -> Node:
    """And of ``items``, flattened (an And inside an And joins it; one item is itself)."""
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, And) else (item,))
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def any_of(items: Iterable[Node]) -> Node:
    """Or of ``items``, flattened like ``all_of``."""
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, Or) else (item,))
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def negation(item: Node) -> Node:
    """Not of ``item`` (NOT NOT x is x)."""
    return item.item if isinstance(item, Not) else Not(item)


def has_not(node: Node) -> bool:
    """Whether a NOT is in the tree (without one, more text in a message only adds matches)."""
    if isinstance(node, Not):
        return True
    return isinstance(node, (And, Or)) and any(has_not(item) for item in node.items)


def leaves(node: Node) -> Iterator[Word | Phrase | Date | Thread | Label]:
    """Every leaf of the tree, left to right."""
    if isinstance(node, (And, Or)):
        for item in node.items:
            yield from leaves(item)
    elif isinstance(node, Not):
        yield from leaves(node.item)
    else:
        yield node


def positive_words(node: Node, negated: bool = False) -> list[Word | Phrase]:
    """The word and phrase leaves that are not under a NOT (what a snippet shows)."""
    if isinstance(node, (And, Or)):
        return [w for item in node.items for w in positive_words(item, negated)]
    if isinstance(node, Not):
        return positive_words(node.item, not negated)
    if isinstance(node, (Word, Phrase)) and not negated:
        return [node]
    return []


def has_text(node: Node) -> bool:
    """Whether a word or phrase leaf is in the tree (one that only dates and threads has none)."""
    return any(isinstance(leaf, (Word, Phrase)) for leaf in leaves(node))


def columns_for(field: str | None, *, shared_view: bool) -> tuple[str, ...]:
    """The columns a word of ``field`` is looked for in; bcc never in a shared view."""
    columns = TEXT_FIELDS[field]
    return tuple(c for c in columns if c != "bcc") if shared_view else columns
