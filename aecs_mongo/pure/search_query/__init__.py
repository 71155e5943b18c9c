"""The search query language: words, tree, parser, dates, printer, the match of one message, snippets.

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

Words are what SQLite FTS5's ``unicode61`` tokenizer (``remove_diacritics 2``) makes of a text
(``tokens``): case is folded and Latin diacritics are removed, so ``koln`` finds Köln and
``KOLN`` finds it too; a word matches whole words, never a substring (``storage`` does not find
"storages"). A value with more than one word (``bob@example.com``, ``foo-bar``, ``10.5``) is a
phrase of its words. A malformed query is a :class:`~aecs_mongo.errors.SearchQueryError` that
says where.

One module per concern: ``tokens`` (the words of a text), ``tree`` (the nodes and fields),
``parser``, ``dates`` (``date:`` bounds), ``printer`` (tree -> text), ``matcher`` (one message,
for the scan) and ``snippets``. This package names what the rest of the library uses.
"""

from __future__ import annotations

from .dates import date_range
from .matcher import matches, may_match
from .parser import MAX_QUERY_CHARS, MAX_TERMS, parse
from .printer import to_text
from .snippets import found_snippet, snippet
from .tokens import ascii_folded, fold, token_spans, words
from .tree import (
    ATTACHMENT_TEXT_SEPARATOR,
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
    all_of,
    any_of,
    columns_for,
    has_not,
    has_text,
    leaves,
    negation,
    positive_words,
)

__all__ = [
    "ATTACHMENT_TEXT_SEPARATOR",
    "COLUMNS",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
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
    "found_snippet",
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
