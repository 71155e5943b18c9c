"""The parser: query text -> syntax tree (``parse``), or a ``SearchQueryError`` that says where.

A hand-written lexer and a recursive-descent parser: ``OR`` binds weakest, then ``AND`` (written
or implied by words next to each other), then ``NOT``/``-``. Fields take a word, a phrase, a
prefix or a group; ``date:``, ``thread:`` and the labels take one value. The limits keep a
hostile query cheap (characters, words and phrases, nesting).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import SearchQueryError
from ..keys import check_str, strip_message_id
from ..tags import IS_FLAGS, check_folder, check_tag
from .dates import bound_error
from .tokens import WORD
from .tree import FIELDS, LABEL_FIELDS, Date, Label, Node, Not, Phrase, Thread, Word, all_of, any_of, negation

__all__ = ["MAX_DEPTH", "MAX_QUERY_CHARS", "MAX_TERMS", "OPERATORS", "parse"]

#: Limits that keep a hostile query cheap: characters, words and phrases, nesting.
MAX_QUERY_CHARS = 10_000
MAX_TERMS = 200
MAX_DEPTH = 32

#: The operator words (upper case only: ``or`` and ``not`` are words like any other).
OPERATORS = ("AND", "OR", "NOT")
#: The fields that take one value, never a group or a prefix.
_ONE_VALUE = ("date", "thread", *LABEL_FIELDS)


@dataclass(frozen=True)
class _Token:
    kind: str  # "(", ")", "OR", "AND", "NOT", "-", "term", "eof"
    position: int
    value: str = ""
    field: str | None = None
    quoted: bool = False
    prefix: bool = False


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
        if field is None and value in OPERATORS:
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
        found = [m.group() for m in WORD.finditer(token.value)]
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
        why = bound_error(bound)
        if why is not None:
            raise _fail(query, token.position, why)
        bounds.append(bound.lower())
    return Date(bounds[0], bounds[1])
