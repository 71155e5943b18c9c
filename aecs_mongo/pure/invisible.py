"""Characters that hide text from a person but not from a model, removed from mail shown to agents.

Mail is written by strangers, and what the agent tools return goes into a model's context. A
reader of the same text sees nothing of these characters; a model reads every one, so they are
how an instruction is smuggled past the person who checks a message (prompt injection by
email). What is done about each kind:

- **removed**: the Unicode tag characters U+E0000–U+E007F (an invisible copy of ASCII), the
  bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069: they reorder
  what is shown, so the text read is not the text seen), the deprecated invisible format
  controls U+206A–U+206F and the interlinear annotation marks U+FFF9–U+FFFB, and control
  characters other than tab, line feed and carriage return (C0, DEL, C1: a terminal draws
  none of them and some, like backspace or an escape sequence, hide what comes before).
- **zero-width runs** (U+200B, U+200C ZWNJ, U+200D ZWJ, U+2060–U+2064, U+FEFF, U+180E): a
  maximal run of them is removed, except a lone ZWJ or ZWNJ between two characters that join
  (letters, marks, symbols: Persian and Indic words, emoji sequences), which changes how the
  text is drawn and hides nothing. Removing the rest changes nothing a person sees.
- **variation selectors** (U+FE00–U+FE0F, U+E0100–U+E01EF): one after a visible character is
  how an emoji or an ideograph picks its form, and is kept; any further one in a row carries no
  form at all (it is how data is hidden "inside an emoji") and is removed.

Every function returns the count of what it took out, so a tool can report it in a field.
Identifiers (a Message-ID, an address) are handles an agent passes back: ``escape_hidden``
writes their hidden characters as visible ``\\u{XXXX}`` escapes instead, and ``unescape_hidden``
turns such escapes back into the characters, so the handle still names the stored message.
Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping

__all__ = [
    "HIDDEN_PATTERN",
    "escape_hidden",
    "is_hidden",
    "strip_hidden",
    "strip_hidden_in",
    "unescape_hidden",
]

_TAGS = "\U000e0000-\U000e007f"
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_FORMAT = "\u206a-\u206f\ufff9-\ufffb"
_CONTROLS = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060-\u2064\ufeff\u180e"
_SELECTORS = "\ufe00-\ufe0f\U000e0100-\U000e01ef"
_JOINERS = frozenset("\u200c\u200d")

#: any character this module removes or escapes (the fast path: most mail has none)
HIDDEN_PATTERN = re.compile(f"[{_TAGS}{_BIDI}{_FORMAT}{_CONTROLS}{_ZERO_WIDTH}{_SELECTORS}]")
_ALWAYS = re.compile(f"[{_TAGS}{_BIDI}{_FORMAT}{_CONTROLS}]+")
_ZERO_WIDTH_RUN = re.compile(f"[{_ZERO_WIDTH}]+")
_SELECTOR_RUN = re.compile(f"[{_SELECTORS}]+")
_ESCAPE = re.compile(r"\\u\{([0-9A-Fa-f]{1,6})\}")


def is_hidden(char: str) -> bool:
    """Whether ``char`` (one character) is one this module removes or escapes."""
    return HIDDEN_PATTERN.fullmatch(char) is not None


def _joins(char: str) -> bool:
    """A character a ZWJ/ZWNJ may stand beside: a letter, a mark or a symbol (emoji)."""
    category = unicodedata.category(char)
    return category[0] in "LM" or category in ("So", "Sk")


def strip_hidden(text: str) -> tuple[str, int]:
    """``text`` without the characters that hide text, and how many were removed."""
    if HIDDEN_PATTERN.search(text) is None:
        return text, 0
    removed = 0

    def drop(match: re.Match[str]) -> str:
        nonlocal removed
        removed += len(match[0])
        return ""

    text = _ALWAYS.sub(drop, text)

    def zero_width(match: re.Match[str]) -> str:
        nonlocal removed
        run, start, end = match[0], match.start(), match.end()
        string = match.string
        if (
            len(run) == 1
            and run in _JOINERS
            and start > 0
            and end < len(string)
            and _joins(string[start - 1])
            and _joins(string[end])
        ):
            return run
        removed += len(run)
        return ""

    text = _ZERO_WIDTH_RUN.sub(zero_width, text)

    def selectors(match: re.Match[str]) -> str:
        nonlocal removed
        start = match.start()
        kept = 1 if start > 0 and not match.string[start - 1].isspace() else 0
        removed += len(match[0]) - kept
        return match[0][:kept]

    text = _SELECTOR_RUN.sub(selectors, text)
    return text, removed


def escape_hidden(text: str) -> tuple[str, int]:
    """``text`` with each hidden character written as ``\\u{XXXX}`` (an identifier stays
    usable and its payload shows), and how many were escaped."""
    if HIDDEN_PATTERN.search(text) is None:
        return text, 0
    count = 0

    def escape(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"\\u{{{ord(match[0]):04X}}}"

    return HIDDEN_PATTERN.sub(escape, text), count


def unescape_hidden(text: str) -> str:
    """The inverse of ``escape_hidden``: each ``\\u{XXXX}`` that names a hidden character is
    that character again (other escapes are left as written)."""
    if "\\u{" not in text:
        return text

    def unescape(match: re.Match[str]) -> str:
        code = int(match[1], 16)
        char = chr(code) if code <= 0x10FFFF else ""
        return char if char and is_hidden(char) else match[0]

    return _ESCAPE.sub(unescape, text)


def strip_hidden_in(value: object, handles: frozenset[str] = frozenset()) -> tuple[object, int]:
    """A JSON-ready value (dicts, lists, strings, numbers) with ``strip_hidden`` applied to every
    string in it, except the values of keys in ``handles``, which get ``escape_hidden``; and
    the total count. Keys are left as they are (they are the tools' own names)."""
    total = 0

    def walk(item: object, clean: Callable[[str], tuple[str, int]]) -> object:
        nonlocal total
        if isinstance(item, str):
            cleaned, count = clean(item)
            total += count
            return cleaned
        if isinstance(item, Mapping):
            return {key: walk(sub, escape_hidden if key in handles else strip_hidden) for key, sub in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(sub, clean) for sub in item]
        return item

    return walk(value, strip_hidden), total
