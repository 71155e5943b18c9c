"""Snippets: a short piece of a message's text around the first word a query matched.

Found with the same words as the match (``tokens``), so a snippet shows what matched, never a
substring that only looks like it. A cheap pre-check finds where the first candidate can start
before any text is tokenized: a snippet is made for every hit of a page.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..fts_tables import FOLD_EXCEPTIONS
from .tokens import WORD, default_fold, fold
from .tree import Phrase, Word

__all__ = ["found_snippet", "snippet"]


def snippet(texts: Iterable[str | None], terms: Sequence[Word | Phrase], width: int = 160) -> str:
    """About ``width`` characters around the first place one of ``terms`` matches, from the
    first of ``texts`` that holds one (whitespace folded; ``…`` where text was cut); the start
    of the first non-empty text when none does."""
    texts = list(texts)
    found = found_snippet(texts, terms, width)
    if found is not None:
        return found
    first_text = next((" ".join(t.split()) for t in texts if t and t.split()), "")
    return _cut(first_text, 0, width) if first_text else ""


def found_snippet(texts: Iterable[str | None], terms: Sequence[Word | Phrase], width: int = 160) -> str | None:
    """``snippet`` where one of ``terms`` matches in ``texts``; None where none does."""
    wanted = [(fold(t.text if isinstance(t, Word) else t.words[0]), t.prefix and isinstance(t, Word)) for t in terms]
    for text in texts:
        if not text:
            continue
        flat = " ".join(text.split())
        begin = _first_possible(flat, [w for w, _ in wanted])
        if begin is None:
            continue
        for m in WORD.finditer(flat, begin):
            word = fold(m.group())
            if word and any(word == w or (prefix and word.startswith(w)) for w, prefix in wanted):
                return _cut(flat, max(m.start() - width // 3, 0), width)
    return None


class _LazyAsciiFolds(dict[int, str]):
    """The table of ``tokens._ascii_folds`` filled one character at a time, as ``str.translate``
    asks for them (the whole table takes 0.1-0.2 s to make: too much for one command). Each
    character becomes at most one (no ``str.lower`` here, which can lengthen a text), so a
    place in the translated text is at or before its place in the text."""

    def __missing__(self, code: int) -> str:
        char = folded = chr(code)
        if (0x41 <= code < 0x5B or 0x80 <= code < 0x10000 or code in FOLD_EXCEPTIONS) and WORD.fullmatch(char):
            found = FOLD_EXCEPTIONS.get(code)
            candidate = default_fold(char) if found is None else found
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
    while at > 0 and WORD.match(flat, at - 1, at):
        at -= 1
    return at


def _cut(flat: str, start: int, width: int) -> str:
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
