"""The printer: syntax tree -> query text (``to_text``), the inverse of ``parse``.

``parse(to_text(tree)) == tree`` for every tree ``parse`` makes: a cursor's fingerprint and an
error message name the query as the tree understood it. Operator words used as words are
quoted, and parentheses are written only where precedence needs them.
"""

from __future__ import annotations

from .parser import OPERATORS
from .tree import And, Date, Label, Node, Not, Phrase, Thread, Word

__all__ = ["to_text"]


def _value(word: str) -> str:
    return f'"{word}"' if word in OPERATORS else word


def _print(node: Node, parent: str) -> str:
    if isinstance(node, Word):
        field = f"{node.field}:" if node.field else ""
        return field + _value(node.text) + ("*" if node.prefix else "")
    if isinstance(node, Phrase):
        field = f"{node.field}:" if node.field else ""
        return f'{field}"{" ".join(node.words)}"' + ("*" if node.prefix else "")
    if isinstance(node, Date):
        if node.start == node.end and node.start is not None:
            return f"date:{node.start}"
        return f"date:{node.start or ''}..{node.end or ''}"
    if isinstance(node, Thread):
        return (
            f'thread:"{node.thread_id}"'
            if any(c.isspace() or c in '()"' for c in node.thread_id)
            else (f"thread:{node.thread_id}")
        )
    if isinstance(node, Label):
        quote = node.value == "" or any(c.isspace() or c in '()"' for c in node.value)
        return f'{node.field}:"{node.value}"' if quote else f"{node.field}:{node.value}"
    if isinstance(node, Not):
        return "NOT " + _print(node.item, "not")
    if isinstance(node, And):
        text = " ".join(_print(item, "and") for item in node.items)
        return f"({text})" if parent == "not" else text
    text = " OR ".join(_print(item, "or") for item in node.items)
    return f"({text})" if parent in ("and", "not") else text


def to_text(node: Node | None) -> str:
    """The query text of a tree: :func:`parse` of it gives the same tree back."""
    return "" if node is None else _print(node, "")
