"""The search query language: words, tree, parser, printer, dates, and the match of one message.

Pure: no I/O. Every engine (``asynchronous/search.py``) compiles the tree :func:`parse` makes, so
a query means the same thing everywhere. The language is close to notmuch's:

- ``budget köln``: every word must match (any order, any field); ``"quarterly budget"``: a phrase
  (the words next to each other, in one field); ``budg*``: a word starting so.
- ``a OR b``, ``NOT a``, ``-a`` (no space after the dash), parentheses. ``AND`` may be written;
  words next to each other are ANDed. Precedence, strongest first: ``NOT``/``-``, ``AND``, ``OR``
  (``a b OR c`` is ``(a b) OR c``). The operators are the upper-case words only: ``or`` and
  ``not`` are words like any other.
- Fields: ``from:`` (the sender's name and address), ``to:`` (to, cc, and bcc where the view
  allows), ``subject:``, ``body:`` (the whole text: clean, quoted and signature tails, text only
  an HTML part holds), ``attachment:`` (file names), ``thread:ID`` (one thread: its thread id, or
  the Message-ID it started with) and ``date:A..B``. A field takes a word, a ``"phrase"``, a
  ``prefix*`` or a group: ``from:(alice OR bob)``. A word without a field is looked for in every
  field but ``thread`` and ``date``.
- ``date:`` days are UTC: ``date:2024-03-01..2024-03-31`` (both days included), open ends
  (``date:2024..``, ``date:..2023-12``), one period (``date:2024-03`` is March), relative bounds
  (``date:30d..`` is the last 30 days and today; ``d``, ``w``, ``m`` months, ``y``), ``today``,
  ``yesterday``.
- Tags, flags and folders (``pure/tags.py``): ``tag:todo`` (a tag; case-insensitive), ``is:unread``
  (no ``$seen``), ``is:read``, ``is:flagged``, ``is:answered``, ``is:draft`` (and ``is:forwarded``,
  ``is:junk``), ``folder:INBOX`` (a folder the message was found in, as the source names it:
  case kept), ``id:<Message-ID>`` (one message). Like ``thread:`` they take one value, never a
  group; a bad tag is a ``SearchQueryError``.

Words are what SQLite FTS5's ``unicode61`` tokenizer (``remove_diacritics 2``) makes of a text:
runs of letters, digits and private-use characters; case is folded and Latin diacritics are
removed, so ``koln`` finds Köln and ``KOLN`` finds it too; a word matches whole words, never a
substring (``storage`` does not find "storages"). :func:`words` is that tokenizer in Python, for
the engine that matches here (the scan) and for snippets: its tables (``fts_tables.py``,
generated from SQLite by ``scripts/gen_fts_tables.py``) are FTS5's, Unicode 6.1's, so the two
agree on every character (emoji added since 6.1 are word characters to both).

A value with more than one word (``bob@example.com``, ``foo-bar``, ``10.5``) is a phrase of its
words. A malformed query is a :class:`~aecs_mongo.errors.SearchQueryError` that says where.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from ..errors import SearchQueryError
from .fts_tables import FOLD_EXCEPTIONS, TOKEN_RANGES
from .keys import check_str, message_key, strip_message_id
from .tags import IS_FLAGS, check_folder, check_tag

__all__ = [
    "COLUMNS",
    "FIELDS",
    "LABEL_FIELDS",
    "MAX_DEPTH",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
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
    "ascii_folded",
    "columns_for",
    "date_range",
    "fold",
    "has_not",
    "has_text",
    "leaves",
    "matches",
    "may_match",
    "negation",
    "parse",
    "positive_words",
    "snippet",
    "to_text",
    "token_spans",
    "words",
]

#: The text columns every full-text engine keeps per message (the local index's columns, the
#: scan's record): subject; clean (the body as AECS-1 cleans it: ranked first); rest (the lines
#: of the whole text that clean drops: quoted history, signatures); html (lines only the HTML
#: part holds); sender and recipients (names and addresses; bcc apart); attachments (file names).
COLUMNS = ("subject", "clean", "rest", "html", "sender", "recipients", "bcc", "attachments")
#: The fields of the language that name text, and the columns each searches.
TEXT_FIELDS: dict[str | None, tuple[str, ...]] = {
    None: COLUMNS,
    "from": ("sender",),
    "to": ("recipients", "bcc"),
    "subject": ("subject",),
    "body": ("clean", "rest", "html"),
    "attachment": ("attachments",),
}
#: Every field name the parser knows.
FIELDS = ("attachment", "body", "date", "folder", "from", "id", "is", "subject", "tag", "thread", "to")
#: The fields of the language that name a message's labels (one value each, never a group).
LABEL_FIELDS = ("folder", "id", "is", "tag")
_ONE_VALUE = ("date", "thread", *LABEL_FIELDS)
#: Limits that keep a hostile query cheap: characters, words and phrases, nesting.
MAX_QUERY_CHARS = 10_000
MAX_TERMS = 200
MAX_DEPTH = 32

_OPERATORS = ("AND", "OR", "NOT")

# --- words -------------------------------------------------------------------------------------

# the characters FTS5 keeps in words (letters, digits, private use, as of Unicode 6.1: so also
# everything assigned since, such as newer emoji), measured codepoint by codepoint
_WORD = re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in TOKEN_RANGES) + "]+")


def _default_fold(char: str) -> str:
    """A word character folded as FTS5 folds most: Latin diacritics removed, case folded."""
    code = ord(char)
    base = char
    if code < 0x250 or 0x1E00 <= code < 0x1F00:
        # the Latin blocks, whose diacritics FTS5 removes
        stripped = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
        base = stripped if len(stripped) == 1 else char
    for folded in (base.casefold(), base.lower()):
        if len(folded) == 1:
            return folded
    return base


@functools.lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    found = FOLD_EXCEPTIONS.get(ord(char))
    return _default_fold(char) if found is None else found


def fold(word: str) -> str:
    """One word as the index keeps it: case folded, Latin diacritics removed (``Köln`` -> ``koln``)."""
    if word.isascii():
        return word.lower()
    return "".join(_fold_char(c) for c in word)


@functools.cache
def _ascii_folds() -> dict[int, str]:
    """``str.translate``'s table for the scan's pre-check: every word character that folds to
    an ASCII character (``É`` -> ``e``, ``K`` -> ``k``) or to nothing, mapped to its fold. Made
    once, from the same folding as ``fold`` (the supplementary planes fold nothing into ASCII)."""
    table: dict[int, str] = {}
    for code in (*range(0x41, 0x5B), *range(0x80, 0x10000), *FOLD_EXCEPTIONS):
        char = chr(code)
        if not _WORD.fullmatch(char):
            continue
        found = FOLD_EXCEPTIONS.get(code)
        folded = _default_fold(char) if found is None else found
        if folded != char and folded.isascii():
            table[code] = folded
    return table


@functools.cache
def _ascii_folds_re() -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_ascii_folds()) if c >= 0x80) + "]")


def ascii_folded(text: str) -> str:
    """``text`` with every character that folds into ASCII folded, the rest lowercased: a word
    of ``text`` whose fold is an ASCII word ``w`` is a substring equal to ``w`` here (a cheap
    test before tokenizing). One regex pass over the folding characters beyond ASCII, then
    ``str.lower`` (which lowercases nothing else into ASCII): a tenth of ``str.translate``."""
    if text.isascii():
        return text.lower()
    return _ascii_folds_re().sub(lambda m: _ascii_folds()[ord(m[0])], text).lower()


def words(text: str | None) -> list[str]:
    """The folded words of ``text``, in order (FTS5 ``unicode61 remove_diacritics 2``)."""
    if not text:
        return []
    return [w for w in (fold(m.group()) for m in _WORD.finditer(text)) if w]


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, folded word)`` of each word of ``text``."""
    for m in _WORD.finditer(text):
        word = fold(m.group())
        if word:
            yield m.start(), m.end(), word


# --- the tree ------------------------------------------------------------------------------------


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


# --- the parser ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # "(", ")", "OR", "AND", "NOT", "-", "term", "eof"
    position: int
    value: str = ""
    field: str | None = None
    quoted: bool = False
    prefix: bool = False
    field_position: int = 0


def _fail(query: str, position: int, why: str) -> SearchQueryError:
    return SearchQueryError(f"{why} at position {position}", position=position, query=query)


def _lex(query: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(query)
    while i < n:
        char = query[i]
        if char.isspace():
            i += 1
            continue
        if char in "()":
            tokens.append(_Token(char, i))
            i += 1
            continue
        if char == "-" and i + 1 < n and not query[i + 1].isspace() and query[i + 1] not in ")-":
            tokens.append(_Token("-", i))
            i += 1
            continue
        start = i
        field: str | None = None
        bare_end = i
        while bare_end < n and not query[bare_end].isspace() and query[bare_end] not in '()"':
            bare_end += 1
        head = query[start:bare_end]
        name, colon, _ = head.partition(":")
        if colon and name.lower() in FIELDS:
            field = name.lower()
            i = start + len(name) + 1
            if i >= n or query[i].isspace() or query[i] == ")":
                raise _fail(query, start, f"{field}: needs a value")
            if query[i] == "(":
                tokens.append(_Token("field(", start, field=field))
                i += 1
                tokens.append(_Token("(", i - 1))
                continue
        if i < n and query[i] == '"':
            close = query.find('"', i + 1)
            if close < 0:
                raise _fail(query, i, "a quote that is never closed")
            value, i = query[i + 1 : close], close + 1
            prefix = i < n and query[i] == "*"
            i += prefix
            if i < n and not query[i].isspace() and query[i] not in "()":
                raise _fail(query, i, "a space or a parenthesis must follow a closing quote")
            tokens.append(_Token("term", start, value, field, True, prefix))
            continue
        end = i
        while end < n and not query[end].isspace() and query[end] not in '()"':
            end += 1
        value = query[i:end]
        if field is None and value in _OPERATORS:
            tokens.append(_Token(value, start))
        else:
            prefix = value.endswith("*") and field not in _ONE_VALUE
            tokens.append(_Token("term", start, value[:-1] if prefix else value, field, False, prefix))
        i = end
    tokens.append(_Token("eof", n))
    return tokens


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = _lex(query)
        self.at = 0
        self.terms = 0
        self.open: list[_Token] = []  # the "(" of the groups being read

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, token: _Token, why: str) -> SearchQueryError:
        return _fail(self.query, token.position, why)

    def parse(self) -> Node:
        node = self.or_expr(None, 0)
        token = self.peek()
        if token.kind == ")":
            raise self.fail(token, 'a ")" without its "("')
        if token.kind != "eof":  # pragma: no cover - or_expr stops only at ) or the end
            raise self.fail(token, "unexpected text")
        return node

    def or_expr(self, field: str | None, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise self.fail(self.peek(), f"more than {MAX_DEPTH} levels of parentheses or NOT")
        items = [self.and_expr(field, depth)]
        while self.peek().kind == "OR":
            operator = self.take()
            if self.peek().kind in ("eof", ")", "OR", "AND"):
                raise self.fail(operator, "OR needs something on both sides")
            items.append(self.and_expr(field, depth))
        return any_of(items)

    def and_expr(self, field: str | None, depth: int) -> Node:
        first = self.peek()
        if first.kind in ("OR", "AND"):
            raise self.fail(first, f"{first.kind} needs something on both sides")
        if first.kind == "eof":
            if self.open:
                raise self.fail(self.open[-1], 'a "(" that is never closed')
            raise self.fail(first, "nothing to search for")
        if first.kind == ")":
            raise self.fail(first, 'an empty "( )"' if self.open else 'a ")" without its "("')
        items = [self.unary(field, depth)]
        while True:
            token = self.peek()
            if token.kind == "AND":
                self.take()
                if self.peek().kind in ("eof", ")", "OR", "AND"):
                    raise self.fail(token, "AND needs something on both sides")
                continue
            if token.kind in ("eof", ")", "OR"):
                return all_of(items)
            items.append(self.unary(field, depth))

    def unary(self, field: str | None, depth: int) -> Node:
        token = self.peek()
        if token.kind in ("NOT", "-"):
            if depth > MAX_DEPTH:
                raise self.fail(token, f"more than {MAX_DEPTH} levels of parentheses or NOT")
            self.take()
            if self.peek().kind in ("eof", ")", "OR", "AND"):
                raise self.fail(token, f"{'NOT' if token.kind == 'NOT' else '-'} needs something after it")
            return negation(self.unary(field, depth + 1))
        return self.atom(field, depth)

    def atom(self, field: str | None, depth: int) -> Node:
        token = self.take()
        if token.kind == "field(":
            if field is not None:
                raise self.fail(token, f"{token.field}: inside {field}:(...)")
            if token.field in _ONE_VALUE:
                raise self.fail(token, f"{token.field}: takes one value, not a group")
            self.take()  # the "("
            return self.group(token.field, depth, token)
        if token.kind == "(":
            return self.group(field, depth, token)
        if token.kind != "term":
            raise self.fail(token, f"unexpected {token.kind}")
        if token.field is not None and field is not None:
            raise self.fail(token, f"{token.field}: inside {field}:(...)")
        return self.term(token, token.field or field)

    def group(self, field: str | None, depth: int, opening: _Token) -> Node:
        self.open.append(opening)
        node = self.or_expr(field, depth + 1)
        closing = self.take()
        if closing.kind != ")":
            raise self.fail(opening, 'a "(" that is never closed')
        self.open.pop()
        return node

    def term(self, token: _Token, field: str | None) -> Node:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise self.fail(token, f"more than {MAX_TERMS} words and phrases")
        if field == "date":
            return _date_node(self.query, token)
        if field == "thread":
            thread_id = strip_message_id(token.value, "thread")
            if not thread_id:
                raise self.fail(token, "thread: needs a thread id")
            return Thread(thread_id)
        if field in LABEL_FIELDS:
            return self.label(token, field)
        found = [m.group() for m in _WORD.finditer(token.value)]
        if not found:
            what = f'"{token.value}"' if token.quoted else repr(token.value) if token.value else "this"
            raise self.fail(token, f"{what} has no letters or digits to search for")
        if len(found) == 1:
            return Word(found[0], field, token.prefix)
        return Phrase(tuple(found), field, token.prefix)

    def label(self, token: _Token, field: str) -> Node:
        value = token.value + ("*" if token.prefix else "")
        try:
            if field == "tag":
                return Label("tag", check_tag(value))
            if field == "folder":
                return Label("folder", check_folder(value))
        except ValueError as exc:
            raise self.fail(token, str(exc)) from None
        if field == "id":
            message_id = strip_message_id(value, "id")
            if not message_id:
                raise self.fail(token, "id: needs a Message-ID")
            return Label("id", message_id)
        flag = IS_FLAGS.get(value.lower())
        if flag is None:
            raise self.fail(token, f"is: takes one of {', '.join(IS_FLAGS)}")
        tag, absent = flag
        return Not(Label("tag", tag)) if absent else Label("tag", tag)


def parse(query: str) -> Node | None:
    """The syntax tree of ``query``; None for a blank query. ``SearchQueryError`` (with
    ``position``) for a malformed one; a non-string is a ``TypeError``."""
    text = check_str(query, "query")
    if len(text) > MAX_QUERY_CHARS:
        raise SearchQueryError(
            f"the query is {len(text):,} characters long, more than {MAX_QUERY_CHARS:,}",
            position=MAX_QUERY_CHARS,
            query=text[:80],
        )
    if not text.strip():
        return None
    return _Parser(text).parse()


# --- dates ---------------------------------------------------------------------------------------

_ABSOLUTE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?", re.ASCII)
_RELATIVE = re.compile(r"(\d{1,5})([dwmy])", re.ASCII)


def _check_bound(bound: str) -> str | None:
    """Why ``bound`` is not a date bound, or None."""
    lowered = bound.lower()
    if lowered in ("today", "yesterday") or _RELATIVE.fullmatch(lowered):
        return None
    m = _ABSOLUTE.fullmatch(bound)
    if not m:
        return f"{bound!r} is not a date (YYYY, YYYY-MM, YYYY-MM-DD, 30d, 2w, 6m, 1y, today)"
    year, month, day = int(m.group(1)), m.group(2), m.group(3)
    try:
        _dt.date(max(year, 1), int(month or 1), int(day or 1))
    except ValueError:
        return f"{bound!r} is not a date"
    return None


def _date_node(query: str, token: _Token) -> Date:
    value = token.value.strip()
    start, dots, end = value.partition("..")
    if not dots:
        end = start
    if not start and not end:
        raise _fail(query, token.position, "date: needs a day, a month, a year or a range A..B")
    bounds: list[str | None] = []
    for bound in (start, end):
        if not bound:
            bounds.append(None)
            continue
        why = _check_bound(bound)
        if why is not None:
            raise _fail(query, token.position, why)
        bounds.append(bound.lower())
    return Date(bounds[0], bounds[1])


def _period(bound: str, today: _dt.date) -> tuple[_dt.date, _dt.date]:
    """The first day of the UTC period a bound names, and the first day after it."""
    if bound == "today":
        return today, today + _dt.timedelta(days=1)
    if bound == "yesterday":
        return today - _dt.timedelta(days=1), today
    rel = _RELATIVE.fullmatch(bound)
    if rel:
        n, unit = int(rel.group(1)), rel.group(2)
        if unit in "dw":
            day = today - _dt.timedelta(days=n * (7 if unit == "w" else 1))
        else:
            months = n * (12 if unit == "y" else 1)
            year, month = divmod(today.year * 12 + today.month - 1 - months, 12)
            year = max(year, 1)
            month += 1
            day = _dt.date(year, month, min(today.day, _month_days(year, month)))
        return day, day + _dt.timedelta(days=1)
    m = _ABSOLUTE.fullmatch(bound)
    assert m is not None  # checked by the parser
    year = max(int(m.group(1)), 1)
    if m.group(3):
        first = _dt.date(year, int(m.group(2)), int(m.group(3)))
        return first, first + _dt.timedelta(days=1)
    if m.group(2):
        month = int(m.group(2))
        first = _dt.date(year, month, 1)
        return first, first + _dt.timedelta(days=_month_days(year, month))
    return _dt.date(year, 1, 1), (_dt.date(year + 1, 1, 1) if year < 9999 else _dt.date(9999, 12, 31))


def _month_days(year: int, month: int) -> int:
    following = _dt.date(year + (month == 12), month % 12 + 1, 1) if year < 9999 or month < 12 else None
    return 31 if following is None else (following - _dt.date(year, month, 1)).days


def _epoch(day: _dt.date) -> int:
    return int(_dt.datetime(day.year, day.month, day.day, tzinfo=_dt.UTC).timestamp())


def date_range(node: Date, now: _dt.datetime) -> tuple[int | None, int | None]:
    """``[start, end)`` in epoch seconds (either open: None) of a ``date:`` leaf, relative bounds
    counted back from ``now``'s UTC day. A range that ends before it starts matches nothing."""
    today = now.astimezone(_dt.UTC).date()
    start = None if node.start is None else _epoch(_period(node.start, today)[0])
    end = None if node.end is None else _epoch(_period(node.end, today)[1])
    return start, end


# --- the printer ---------------------------------------------------------------------------------


def _value(word: str) -> str:
    return f'"{word}"' if word in _OPERATORS else word


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


# --- matching one message (the scan) -------------------------------------------------------------


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


# --- snippets ------------------------------------------------------------------------------------


def snippet(texts: Iterable[str | None], terms: Sequence[Word | Phrase], width: int = 160) -> str:
    """About ``width`` characters around the first place one of ``terms`` matches, from the
    first of ``texts`` that holds one (whitespace folded; ``…`` where text was cut); the start
    of the first non-empty text when none does."""
    wanted = [(fold(t.text if isinstance(t, Word) else t.words[0]), t.prefix and isinstance(t, Word)) for t in terms]
    first_text = ""
    for text in texts:
        if not text:
            continue
        flat = " ".join(text.split())
        if not first_text:
            first_text = flat
        begin = _first_possible(flat, [w for w, _ in wanted])
        if begin is None:
            continue
        for m in _WORD.finditer(flat, begin):
            word = fold(m.group())
            if word and any(word == w or (prefix and word.startswith(w)) for w, prefix in wanted):
                return _cut(flat, max(m.start() - width // 3, 0), width)
    return _cut(first_text, 0, width) if first_text else ""


class _LazyAsciiFolds(dict[int, str]):
    """The table of :func:`_ascii_folds` filled one character at a time, as ``str.translate``
    asks for them (the whole table takes 0.1-0.2 s to make: too much for one command). Each
    character becomes at most one (no ``str.lower`` here, which can lengthen a text), so a
    place in the translated text is at or before its place in the text."""

    def __missing__(self, code: int) -> str:
        char = folded = chr(code)
        if (0x41 <= code < 0x5B or 0x80 <= code < 0x10000 or code in FOLD_EXCEPTIONS) and _WORD.fullmatch(char):
            found = FOLD_EXCEPTIONS.get(code)
            candidate = _default_fold(char) if found is None else found
            if candidate != char and candidate.isascii():
                folded = candidate
        self[code] = folded
        return folded


_LAZY_FOLDS = _LazyAsciiFolds()


def _first_possible(flat: str, wanted: Sequence[str]) -> int | None:
    """Where the first word of ``flat`` that can be one of the ``wanted`` folded words (or
    start with one) can start, or None when none can: for ASCII words, such a word holds one of
    them in the text with what folds into ASCII folded (:class:`_LazyAsciiFolds`: a place there
    is at or before its place in ``flat``), and the word around the first such place is the
    first candidate (a word is a run of word characters). 0 when a wanted word is not ASCII."""
    if not all(w and w.isascii() for w in wanted):
        return 0
    folded = flat.lower() if flat.isascii() else flat.translate(_LAZY_FOLDS)
    found = [at for at in (folded.find(w) for w in wanted) if at >= 0]
    if not found:
        return None
    at = min(found)
    while at > 0 and _WORD.match(flat, at - 1, at):
        at -= 1
    return at


def _cut(flat: str, start: int, width: int) -> str:
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
