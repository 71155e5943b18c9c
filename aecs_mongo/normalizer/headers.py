"""Header values: unfolding, RFC 2047 encoded-words, addresses, Message-IDs, List-Id, subject keys.

The MIME parser runs with the ``compat32`` policy, so header values reach this module as the
raw text of the message (non-ASCII octets carried as surrogate escapes). Everything here
turns them into clean Unicode without raising.
"""

from __future__ import annotations

import base64
import binascii
import re

from ..pure.keys import list_id_key, subject_key
from .charsets import decode_bytes

__all__ = [
    "Address",
    "decode_header_value",
    "header_text",
    "normalize_list_id",
    "parse_addresses",
    "subject_key",
    "unfold",
]

Address = dict[str, "str | None"]

_FOLD_RE = re.compile(r"\r?\n|\r")
_ENCODED_WORD_RE = re.compile(r"=\?([^?\s]+)\?([BbQq])\?([^?]*)\?=")
_QP_HEX_RE = re.compile(rb"=([0-9A-Fa-f]{2})")
_WS_RE = re.compile(r"\s+")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def unfold(value: str) -> str:
    """RFC 5322 §2.2.3 unfolding: drop the line breaks, keep the whitespace after them."""
    if "\n" in value or "\r" in value:
        value = _FOLD_RE.sub("", value)
    return value


def _surrogates_to_text(value: str, hint_charset: str | None, defects: list[str] | None) -> str:
    """Recover raw 8-bit header octets (RFC 6532 UTF-8, or legacy bytes) as text."""
    if value.isascii():
        return value  # no surrogate escape: nothing to recover
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return value
    raw = value.encode("utf-8", errors="surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if hint_charset:
        text = decode_bytes(raw, hint_charset, None)
        if "\ufffd" not in text:
            if defects is not None:
                defects.append(f"header: 8-bit octets read as {hint_charset[:40]!r}")
            return text
    return decode_bytes(raw, None, defects, where="header")


def _decode_word_bytes(encoding: str, payload: str) -> bytes:
    if encoding in "Bb":
        data = payload.strip().encode("ascii", errors="ignore")
        data = re.sub(rb"[^A-Za-z0-9+/]", b"", data)
        data += b"=" * (-len(data) % 4)
        try:
            return base64.b64decode(data)
        except (binascii.Error, ValueError):
            return b""
    # A raw 8-bit octet inside the word (a surrogate escape here) is kept, to be decoded in
    # the word's declared charset like the =XX ones: dropping it turned "Fr\xf6sche" into "Frsche".
    raw = payload.replace("_", " ").encode("utf-8", errors="surrogateescape")
    return _QP_HEX_RE.sub(lambda match: bytes((int(match[1], 16),)), raw)


def decode_header_value(value: str, *, hint_charset: str | None = None, defects: list[str] | None = None) -> str:
    """Unfold and decode RFC 2047 encoded-words; keep the whitespace around plain text.

    Whitespace between two encoded-words is dropped (RFC 2047 §6.2); whitespace between an
    encoded-word and ordinary text is kept. Adjacent encoded-words in the same charset are
    joined before decoding, so a multi-byte character split across two words survives.
    """
    value = unfold(value)
    if "=?" not in value:
        return _clean(_surrogates_to_text(value, hint_charset, defects))
    pieces: list[str] = []
    pending_charset: str | None = None
    pending: list[bytes] = []
    position = 0

    def flush() -> None:
        nonlocal pending_charset
        if pending:
            pieces.append(decode_bytes(b"".join(pending), pending_charset, defects, where="encoded-word"))
            pending.clear()
        pending_charset = None

    for match in _ENCODED_WORD_RE.finditer(value):
        between = value[position : match.start()]
        charset = match[1].split("*", 1)[0].lower()
        if between and not (pending and between.isspace()):
            flush()
            pieces.append(_surrogates_to_text(between, hint_charset, defects))
        elif pending and charset != pending_charset:
            flush()
        pending_charset = charset
        pending.append(_decode_word_bytes(match[2], match[3]))
        position = match.end()
    flush()
    pieces.append(_surrogates_to_text(value[position:], hint_charset, defects))
    return _clean("".join(pieces))


def _clean(text: str) -> str:
    if _CONTROL_RE.search(text):
        text = _CONTROL_RE.sub("", text)
    return text


def header_text(value: str | None, *, hint_charset: str | None = None, defects: list[str] | None = None) -> str | None:
    """A decoded, trimmed header value; ``None`` when absent."""
    if value is None:
        return None
    return decode_header_value(value, hint_charset=hint_charset, defects=defects).strip()


def parse_addresses(
    values: list[str], *, hint_charset: str | None = None, defects: list[str] | None = None
) -> list[Address]:
    """Addresses of one or more address-list header values, in order.

    ``email`` is the addr-spec, trimmed and lowercased (as the reference implementation
    does); ``name`` is the RFC 2047-decoded display name, ``None`` when there is none. Group
    names are dropped and their members kept. Read leniently, as mail clients read it:

    * An angle address wins over anything outside the brackets: ``a.b@host <a.b@real.tld>``
      is ``a.b@real.tld`` named ``a.b@host``. An angle address without a domain
      (``Name <localpart>``) is kept as it is.
    * Without brackets the address is the (first) word holding an ``@``; the other words are
      the name: ``Name Words addr@dom`` is ``addr@dom`` named ``Name Words``.
    * A word with several ``@`` (``a!b@c@d.e``) is kept whole: the domain is what follows the
      last ``@`` and the rest is an (unquoted) local part, as the reference does.
    * A comment is the name when there is no other (``a@b (Name)``).

    Entries without a usable address (none at all, shorter than three characters as the
    schema requires, a bare word without ``@``, or one holding ``:;,<>`` outside quotes,
    e.g. ``<Undisclosed-Recipient:;>``) are left out and noted in ``defects``.
    """
    out: list[Address] = []
    for value in values:
        text = unfold(value)
        entries = _simple_entries(text)
        for name, addr, bracketed in _address_entries(text) if entries is None else entries:
            email = _surrogates_to_text(addr, hint_charset, defects).strip().lower()
            if " " in email or not email.isprintable():  # every other blank or control is unprintable
                email = _CONTROL_RE.sub("", _WS_RE.sub("", email))
            usable = (
                len(email) >= 3
                and not email.startswith("@")
                and not email.endswith("@")
                and (email.startswith('"') or not _NOT_IN_ADDRESS_RE.search(email))
            )
            if not usable or ("@" not in email and not bracketed):
                if (email or name.strip()) and defects is not None:
                    defects.append(f"address: no usable addr-spec in {(name or addr)[:60]!r}")
                continue
            display = decode_header_value(name, hint_charset=hint_charset, defects=defects).strip()
            if len(display) >= 2 and display[0] == display[-1] and display[0] in "\"'":
                display = display[1:-1].strip()
            out.append({"name": display or None, "email": email})
    return out


# One lexical token of an address list: quoted string, comment opener, angle address,
# separator, group colon, or a run of other text (an unclosed quote or bracket runs to the end).
_ADDRESS_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"?|<[^<>]*>?|[(),;:]|[^"(),;:<]+|[<>]', re.DOTALL)
_QUOTED_PAIR_RE = re.compile(r"\\(.)", re.DOTALL)
_ROUTE_RE = re.compile(r"^(?:@[^:]*:)+")
_NOT_IN_ADDRESS_RE = re.compile(r"[:;,<>]")


# One entry of an address list in a form most mail uses (``a@b``, ``Name <a@b>``,
# ``"Name" <a@b>``), then a comma or the end: what ``_address_entries`` reads from it.
_SIMPLE_ENTRY_RE = re.compile(
    r'\s*(?:"(?P<quoted>[^"\\]*)"\s*<(?P<quoted_addr>[^\s"(),;:<>\\]*)>'
    r'|(?P<name>[^"(),;:<>\\]*)<(?P<addr>[^\s"(),;:<>\\]*)>'
    r'|(?P<bare>[^\s"(),;:<>\\@]+@[^\s"(),;:<>\\@]+))\s*(?:,|\Z)'
)


def _simple_entries(text: str) -> list[tuple[str, str, bool]] | None:
    """``_address_entries(text)`` when every entry has a simple form, else None (use that)."""
    entries: list[tuple[str, str, bool]] = []
    position = 0
    length = len(text)
    while position < length:
        match = _SIMPLE_ENTRY_RE.match(text, position)
        if match is None or match.end() == position:
            return None
        if match["bare"] is not None:
            entries.append(("", match["bare"], False))
        elif match["quoted"] is not None:
            entries.append((match["quoted"], match["quoted_addr"], True))
        else:
            entries.append((" ".join(match["name"].split()), match["addr"], True))
        position = match.end()
    return entries


def _comment_end(text: str, start: int) -> int:
    """Index just past the comment opening at ``text[start]`` (comments nest; ``\\`` escapes)."""
    depth = 0
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return len(text)


def _address_entries(text: str) -> list[tuple[str, str, bool]]:
    """``(name, addr, bracketed)`` per mailbox of an address list, groups flattened."""
    entries: list[tuple[str, str, bool]] = []
    # Words of the current entry: (text, as written, quoted, glued to the previous word).
    words: list[tuple[str, str, bool, bool]] = []
    comments: list[str] = []
    angles: list[str] = []
    glued = False
    any_at = False  # a word of the current entry holds an "@": a colon is then no group

    def finish() -> None:
        nonlocal any_at
        entry = _entry(words, comments, angles)
        if entry is not None:
            entries.append(entry)
        any_at = False
        words.clear()
        comments.clear()
        angles.clear()

    position = 0
    while position < len(text):
        char = text[position]
        if char == "(":
            end = _comment_end(text, position)
            comments.append(text[position + 1 : end - 1 if text[end - 1 : end] == ")" else end])
            position = end
            glued = False
            continue
        match = _ADDRESS_TOKEN_RE.match(text, position)
        assert match is not None  # the pattern accepts every character
        token = match[0]
        position = match.end()
        if token in (",", ";"):
            finish()
        elif token == ":":
            if angles or any_at:
                # not a group (an address came before it): a stray colon, part of a word
                words.append((token, token, False, True))
                glued = True
                continue
            words.clear()  # a group's display name: dropped, its members kept
            comments.clear()
        elif token[0] == "<" and len(token) > 1:
            angles.append(token[1:-1] if token.endswith(">") else token[1:])
        elif token[0] == '"':
            inner = token[1:-1] if len(token) > 1 and token.endswith('"') else token[1:]
            words.append((_QUOTED_PAIR_RE.sub(r"\1", inner), token, True, glued))
            any_at = any_at or "@" in token
            glued = True
            continue
        else:
            pieces = token.split()
            for index, piece in enumerate(pieces):
                words.append((piece, piece, False, glued and index == 0 and not token[0].isspace()))
            glued = bool(pieces) and not token[-1].isspace()
            any_at = any_at or "@" in token
            continue
        glued = False
    finish()
    return entries


def _entry(
    words: list[tuple[str, str, bool, bool]], comments: list[str], angles: list[str]
) -> tuple[str, str, bool] | None:
    """One mailbox from its words, comments and angle addresses (the first one wins)."""
    # Glue words written without space between them (``"a b"@c``) into one.
    runs: list[tuple[list[str], list[str], bool]] = []
    for text, written, quoted, glued in words:
        if glued and runs:
            texts, writtens, run_quoted = runs[-1]
            texts.append(text)
            writtens.append(written)
            if run_quoted and not quoted:
                runs[-1] = (texts, writtens, False)
        else:
            runs.append(([text], [written], quoted))
    joined = [("".join(texts), "".join(writtens), quoted) for texts, writtens, quoted in runs]
    if angles:
        addr = _ROUTE_RE.sub("", _WS_RE.sub("", _strip_comments(angles[0])))
        name_words = [text for text, _written, _quoted in joined]
        bracketed = True
    else:
        candidates = [index for index, (_text, written, quoted) in enumerate(joined) if "@" in written and not quoted]
        if not candidates:
            if not joined and not comments:
                return None
            return " ".join(text for text, _written, _quoted in joined) or " ".join(comments), "", False
        first, last = _obs_addr_span([written for _text, written, _quoted in joined], candidates[0])
        addr = "".join(written for _text, written, _quoted in joined[first : last + 1])
        name_words = [text for index, (text, _written, _quoted) in enumerate(joined) if not first <= index <= last]
        bracketed = False
    name = " ".join(name_words)
    if not name and comments:
        name = " ".join(comment.strip() for comment in comments)
    return name, addr, bracketed


def _obs_addr_span(written: list[str], chosen: int) -> tuple[int, int]:
    """First and last word of a bare addr-spec written with space around its dots or ``@``.

    RFC 5322 §4.4 (obs-local-part, obs-domain) allows CFWS around the dots and the ``@``:
    ``jdoe@test  . example`` is ``jdoe@test.example`` (RFC 2822 A.6.1) and ``john . doe @ x.y``
    is ``john.doe@x.y``. A word joins the address when the join point is a dot or ``@`` on the
    address's side or a word that starts with one; a word before the address that merely ends
    with a dot stays in the name (``Smith Jr. jdoe@x.y``), as does a quoted word.
    """
    first = last = chosen
    while first > 0 and (written[first][0] in ".@" or written[first - 1] in (".", "@")):
        first -= 1
    while last + 1 < len(written) and (
        written[last + 1][0] in ".@" or (written[last][-1] in ".@" and written[last + 1][0] != '"')
    ):
        last += 1
    return first, last


def _strip_comments(text: str) -> str:
    """``text`` without parenthesized comments."""
    if "(" not in text:
        return text
    out: list[str] = []
    position = 0
    while True:
        start = text.find("(", position)
        if start < 0:
            out.append(text[position:])
            return "".join(out)
        out.append(text[position:start])
        position = _comment_end(text, start)


def normalize_list_id(value: str | None) -> str | None:
    """``Debian <debian-announce.lists.debian.org>`` -> ``debian-announce.lists.debian.org``."""
    if value is None:
        return None
    return list_id_key(_surrogates_to_text(unfold(value), None, None))
