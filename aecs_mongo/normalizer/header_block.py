"""Lenient reading of the top-level header block, as mail clients read it.

The standard library's feed parser ends the header block at the first line that is not
``Name:``, ``From `` or indented, and puts everything after it in the body. Real mail often
has such a line inside its header block, and then every later header (often From, Subject,
Date and the MIME structure) is lost. Mail clients read up to the first empty line instead.

:func:`repair_header_block` returns a copy of the message that the feed parser reads the way
a mail client does; the caller keeps the original octets for everything else (``rawFull``,
the synthetic Message-ID). Only the top-level header block changes; the body is untouched.

What is repaired (a general rule each, never a particular message):

* A UTF-8 byte-order mark before the first line is removed.
* ``Name<WSP>:`` (RFC 5322 §4.5 obsolete syntax) becomes ``Name:``; as the first line,
  ``From  : ...`` is then a From field, not an mbox envelope line.
* A field name alone on its line, with the colon starting the next (indented) line, is
  joined into one field.
* A field name holding octets that RFC 5322 does not allow (``Inval\\xecd:``) gets them
  replaced by ``_``: the field is kept (nobody reads it) instead of ending the block.
* Any other line that is neither a field nor indented (a continuation line that lost its
  indentation, a stray word before a field name) becomes a continuation of the field above
  it, when a field line still follows before the empty line. When none follows, the line
  is where the body starts, as the feed parser decides: this keeps the body of a message
  written without the empty line. A line starting with ``--`` (a MIME boundary) always
  starts the body.
"""

from __future__ import annotations

import re

__all__ = ["repair_header_block"]

_BOM = b"\xef\xbb\xbf"
# Header block already as the feed parser wants it, ending with an empty line: the fast path.
_WELL_FORMED_RE = re.compile(rb"(?:(?:From (?![ \t]*:)|[\x21-\x39\x3b-\x7e]*:|[ \t])[^\r\n]*\r?\n)*\r?\n")
_LINE_RE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_FIELD_RE = re.compile(rb"[\x21-\x39\x3b-\x7e]*:")
_OBS_FIELD_RE = re.compile(rb"([\x21-\x39\x3b-\x7e]+)[ \t]+:")
_BAD_NAME_FIELD_RE = re.compile(rb"([^\x00-\x20:\x7f]+):")
_BAD_NAME_BYTE_RE = re.compile(rb"[^\x21-\x39\x3b-\x7e]")
_NAME_ALONE_RE = re.compile(rb"([\x21-\x39\x3b-\x7e]+)[ \t]*(\r\n|\r|\n)")
_COLON_LINE_RE = re.compile(rb"[ \t]+:[ \t]*")
_ENVELOPE_RE = re.compile(rb"From (?![ \t]*:)")
_MAX_HEADER_BLOCK = 1 << 20  # a header block longer than this is not read leniently


def repair_header_block(raw: bytes) -> bytes:
    """``raw``, or a copy whose top-level header block the stdlib feed parser reads in full.

    Returns ``raw`` itself (no copy) when the header block is already well-formed. Linear in
    the length of the header block; a block longer than 1 MiB is read leniently up to there.
    """
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    elif _WELL_FORMED_RE.match(raw) is not None:
        return raw
    limit = min(len(raw), _MAX_HEADER_BLOCK)
    out: list[bytes] = []
    changed = False
    field_ahead = -1  # start of a field line known to follow, so a scan is not repeated
    position = 0
    while position < limit:
        match = _LINE_RE.match(raw, position, limit)
        if match is None:
            break
        line, end = match[0], match.end()
        kind = _kind(line)
        if kind == "empty":
            out.append(line)
            position = end
            break
        if kind in ("field", "cont", "envelope"):
            out.append(line)
        elif kind == "obs":
            name = _OBS_FIELD_RE.match(line)
            assert name is not None
            out.append(name[1] + b":" + line[name.end() :])
            changed = True
        elif kind == "badname":
            name = _BAD_NAME_FIELD_RE.match(line)
            assert name is not None
            out.append(_BAD_NAME_BYTE_RE.sub(b"_", name[1]) + line[name.end(1) :])
            changed = True
        elif kind == "alone" and (colon := _COLON_LINE_RE.match(raw, end, limit)) is not None:
            name = _NAME_ALONE_RE.fullmatch(line)
            assert name is not None
            rest = _LINE_RE.match(raw, colon.end(), limit)
            out.append(name[1] + b":" + (rest[0] if rest is not None else b""))
            end = rest.end() if rest is not None else colon.end()
            changed = True
        else:
            if out and not line.startswith(b"--") and field_ahead < end:
                field_ahead = _field_ahead(raw, end, limit)
            if not out or line.startswith(b"--") or field_ahead < end:
                break  # the body starts here, as the feed parser decides
            out.append(b" " + line)  # a continuation line that lost its indentation
            changed = True
        position = end
    if not changed:
        return raw
    return b"".join(out) + raw[position:]


def _field_ahead(raw: bytes, position: int, limit: int) -> int:
    """Start of the next line from ``position`` that begins a field, or -1 when an empty line
    (or the end) comes first."""
    while position < limit:
        match = _LINE_RE.match(raw, position, limit)
        if match is None:
            return -1
        kind = _kind(match[0])
        if kind in ("field", "obs", "badname"):
            return position
        if kind == "empty":
            return -1
        position = match.end()
    return -1


def _kind(line: bytes) -> str:
    """``field``, ``obs`` (``Name<WSP>:``), ``badname``, ``alone`` (a name without colon),
    ``cont`` (indented), ``empty``, ``envelope`` or ``other``."""
    if line in (b"\r\n", b"\n", b"\r"):
        return "empty"
    first = line[:1]
    if first in (b" ", b"\t"):
        return "cont"
    if _FIELD_RE.match(line):
        return "field"
    if _OBS_FIELD_RE.match(line):
        return "obs"
    if _ENVELOPE_RE.match(line):
        return "envelope"
    if _NAME_ALONE_RE.fullmatch(line):
        return "alone"
    if _BAD_NAME_FIELD_RE.match(line):
        return "badname"
    return "other"
