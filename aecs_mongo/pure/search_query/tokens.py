"""The words of a text, as SQLite FTS5's ``unicode61`` tokenizer (``remove_diacritics 2``) makes them.

Runs of letters, digits and private-use characters; case folded, Latin diacritics removed
(``Köln`` -> ``koln``). The tables (``fts_tables.py``, generated from SQLite by
``scripts/gen_fts_tables.py``) are FTS5's, Unicode 6.1's, so the scan, the snippets and the local
index agree on every character. ``ascii_folded`` is the cheap substring test the scan runs
before it tokenizes anything.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator

from ..fts_tables import FOLD_EXCEPTIONS, TOKEN_RANGES

__all__ = ["WORD", "ascii_folded", "default_fold", "fold", "token_spans", "words"]

# the characters FTS5 keeps in words (letters, digits, private use, as of Unicode 6.1: so also
# everything assigned since, such as newer emoji), measured codepoint by codepoint
WORD = re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in TOKEN_RANGES) + "]+")


def default_fold(char: str) -> str:
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
    return default_fold(char) if found is None else found


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
        if not WORD.fullmatch(char):
            continue
        found = FOLD_EXCEPTIONS.get(code)
        folded = default_fold(char) if found is None else found
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
    return [w for w in (fold(m.group()) for m in WORD.finditer(text)) if w]


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, folded word)`` of each word of ``text``."""
    for m in WORD.finditer(text):
        word = fold(m.group())
        if word:
            yield m.start(), m.end(), word
