"""Mail flags of other tools <-> the store's tags (``messages.tags``, JMAP keywords). No I/O here.

Every mapping reads the other tool's state into tags and writes tags back, so that a message
goes out and comes back in with the same tags (the round trip the export tests make):

- **Maildir** (https://cr.yp.to/proto/maildir.html): a file name is ``<base><sep>2,<flags>``;
  ``<sep>`` is ``:``, or ``!`` / ``;`` on systems whose file names cannot hold a colon (isync's
  ``InfoDelimiter``, Windows). A message's identity is its **base name**, the name without the
  info (:func:`maildir_base`): a mail reader renames ``x:2,`` to ``x:2,S`` when it reads it.
  Flags: ``P`` = ``$forwarded`` (passed), ``R`` = ``$answered`` (replied), ``S`` = ``$seen``,
  ``D`` = ``$draft``, ``F`` = ``$flagged``, ``T`` (trashed) = the user tag ``deleted``, as
  notmuch maps it (``maildir.synchronize_flags``), and as IMAP's ``\\Deleted`` maps (Dovecot
  stores ``\\Deleted`` as ``T``). Lowercase letters are Dovecot's keywords, named by the
  folder's ``dovecot-keywords`` file (:func:`dovecot_keywords`; ``0`` is ``a``); without it they
  are ignored. A file in ``new/`` has not been seen by any mail reader: it never reads as
  ``$seen``, whatever its name says. Written back, flags are in ASCII order (the spec asks it).
- **Maildir++ folders**: the root Maildir is ``INBOX``; a sub-folder directory ``.Sent`` is
  ``Sent``, ``.a.b`` is ``a/b`` (``.`` is Maildir++'s hierarchy separator); each part is decoded
  from IMAP's modified UTF-7, as Dovecot and Courier write names on disk (``.Entw&APw-rfe`` is
  ``Entwürfe``), so a folder has the name the IMAP sync of the same account gives it.
- **IMAP FLAGS** (RFC 9051 2.3.2): ``\\Seen \\Flagged \\Answered \\Draft`` are the ``$`` system
  tags, ``\\Deleted`` is ``deleted`` (as Maildir's ``T``); ``\\Recent`` is left out: it belongs to
  one session, not to the message. Keywords are case-insensitive (RFC 8621): ``$Forwarded``,
  ``$Junk``, ``$NotJunk`` and every other keyword that is a valid tag is stored lowercased
  (``$MDNSent`` -> ``$mdnsent``, Thunderbird's ``NonJunk`` -> ``nonjunk``); one that is not a
  valid tag is left out. Other ``\\`` flags (``\\*``, extensions) are not keywords: left out.
- **mbox** ``Status:`` (``R`` read -> ``$seen``; ``O`` old: seen in a listing, not read, no tag)
  and ``X-Status:`` (``A`` answered -> ``$answered``, ``F`` -> ``$flagged``, ``T`` draft ->
  ``$draft``, ``D`` deleted -> ``deleted``), as mutt and Thunderbird's import write them. The
  export writes them back (:func:`with_status_headers`): ``Status: RO`` for read mail, ``O``
  for unread, ``X-Status:`` with the letters that apply (left out when none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import InvalidTagError
from .imap_records import decode_folder, encode_folder
from .tags import check_tag

__all__ = [
    "ANSWERED",
    "DELETED",
    "DRAFT",
    "FLAGGED",
    "FORWARDED",
    "INBOX",
    "JUNK",
    "MAILDIR_FLAGS",
    "NOTJUNK",
    "SEEN",
    "MaildirName",
    "dovecot_keywords",
    "imap_flags",
    "imap_tags",
    "maildir_base",
    "maildir_flags",
    "maildir_folder",
    "maildir_name",
    "maildir_subfolder",
    "maildir_tags",
    "mbox_header_tags",
    "mbox_status",
    "mbox_tags",
    "parse_imap_flags",
    "split_maildir_name",
    "with_status_headers",
]

SEEN, FLAGGED, ANSWERED, DRAFT = "$seen", "$flagged", "$answered", "$draft"
FORWARDED, JUNK, NOTJUNK = "$forwarded", "$junk", "$notjunk"
#: Maildir's ``T`` and IMAP's ``\Deleted``: a user tag, as notmuch names it.
DELETED = "deleted"
#: The root Maildir's folder name, and IMAP's.
INBOX = "INBOX"

#: Maildir info flag -> tag.
MAILDIR_FLAGS: Mapping[str, str] = {
    "D": DRAFT,
    "F": FLAGGED,
    "P": FORWARDED,
    "R": ANSWERED,
    "S": SEEN,
    "T": DELETED,
}
_MAILDIR_LETTERS = {tag: letter for letter, tag in MAILDIR_FLAGS.items()}
_IMAP_SYSTEM = {"\\SEEN": SEEN, "\\FLAGGED": FLAGGED, "\\ANSWERED": ANSWERED, "\\DRAFT": DRAFT, "\\DELETED": DELETED}
_IMAP_BACK = {tag: name.title() for name, tag in _IMAP_SYSTEM.items()}
_IMAP_KEYWORD_BACK = {FORWARDED: "$Forwarded", JUNK: "$Junk", NOTJUNK: "$NotJunk"}

# <base><sep>2,<flags>: the info after the last separator; "1," (experimental info) has no flags
_INFO = re.compile(r"^(?P<base>.+?)(?P<sep>[:!;])(?P<info>2,[A-Za-z]*|1,[^:!;]*)$")
_FLAGS_ITEM = re.compile(rb"\bFLAGS \(([^)]*)\)")


def _tag(value: str) -> str | None:
    """``value`` as a tag (lowercased) when it is a valid one (``pure/tags.py``'s rules), else None."""
    try:
        return check_tag(value)
    except InvalidTagError:
        return None


def _sorted(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(tags)))


# --- Maildir ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaildirName:
    """A Maildir file name taken apart: ``base`` (the identity), ``sep`` (``:``, ``!``, ``;``
    or ``""`` when there is no info), ``info`` (``2,FS``; ``""`` when none) and ``flags``
    (``FS``: the letters of a ``2,`` info, ``""`` otherwise)."""

    base: str
    sep: str
    info: str

    @property
    def flags(self) -> str:
        return self.info[2:] if self.info.startswith("2,") else ""


def split_maildir_name(name: str) -> MaildirName:
    """``1700000000.M1P2.host:2,FS`` -> base ``1700000000.M1P2.host``, sep ``:``, info ``2,FS``."""
    match = _INFO.match(name)
    if match is None:
        return MaildirName(name, "", "")
    return MaildirName(match.group("base"), match.group("sep"), match.group("info"))


def maildir_base(name: str) -> str:
    """A Maildir message's identity: its file name without the ``:2,...`` info (which a mail
    reader changes when it marks the message)."""
    return split_maildir_name(name).base


def dovecot_keywords(text: str) -> dict[str, str]:
    """A ``dovecot-keywords`` file (``0 $Forwarded`` per line) -> ``{"a": "$Forwarded", ...}``:
    the lowercase flag letters Dovecot writes into a folder's file names. Bad lines are skipped."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        number, _, keyword = line.strip().partition(" ")
        if number.isdigit() and int(number) < 26 and keyword.strip():
            found[chr(ord("a") + int(number))] = keyword.strip()
    return found


def maildir_tags(name: str, *, new: bool = False, keywords: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The tags a Maildir file name gives its message (sorted): its flags, and with
    ``keywords`` (:func:`dovecot_keywords`) its lowercase keyword letters; ``new``: the file is
    in ``new/`` (never ``$seen``). Letters that mean nothing are ignored."""
    found = set()
    for letter in split_maildir_name(name).flags:
        if letter in MAILDIR_FLAGS:
            found.add(MAILDIR_FLAGS[letter])
        elif keywords is not None and letter in keywords:
            tag = _keyword_tag(keywords[letter])
            if tag is not None:
                found.add(tag)
    if new:
        found.discard(SEEN)
    return _sorted(found)


def maildir_flags(tags: Iterable[str]) -> str:
    """The Maildir flag letters of ``tags``, in ASCII order (``("$seen", "$flagged")`` -> ``FS``);
    tags without a letter are left out."""
    return "".join(sorted({_MAILDIR_LETTERS[t] for t in tags if t in _MAILDIR_LETTERS}))


def maildir_name(base: str, tags: Iterable[str], sep: str = ":") -> str:
    """The file name of a message with ``tags``: ``<base>:2,<flags>`` (``maildir_name("x",
    ["$seen"])`` is ``x:2,S``)."""
    if sep not in (":", "!", ";"):
        raise ValueError("sep must be ':', '!' or ';'")
    return f"{base}{sep}2,{maildir_flags(tags)}"


def maildir_folder(directory: str | None = None, parent: str = INBOX) -> str:
    """The folder of a Maildir: ``None`` (the root) -> ``INBOX``; a Maildir++ sub-folder's
    directory name ``.Sent`` -> ``Sent``, ``.a.b`` -> ``a/b`` (parts decoded from modified
    UTF-7); under a ``parent`` other than ``INBOX``, ``<parent>/a/b``."""
    if directory is None:
        return parent
    parts = [decode_folder(part) for part in directory.removeprefix(".").split(".") if part]
    name = "/".join(parts) or directory
    return name if parent == INBOX else f"{parent}/{name}"


def maildir_subfolder(folder: str) -> str:
    """The Maildir++ directory of a folder (the way back of :func:`maildir_folder`):
    ``a/b`` -> ``.a.b`` (parts in modified UTF-7); ``INBOX`` -> ``""`` (the root)."""
    if folder == INBOX:
        return ""
    return "." + ".".join(encode_folder(part).decode("ascii") for part in folder.split("/"))


# --- IMAP ---------------------------------------------------------------------------------------


def _keyword_tag(keyword: str) -> str | None:
    if keyword.startswith("\\"):
        return _IMAP_SYSTEM.get(keyword.upper())
    return _tag(keyword)


def parse_imap_flags(response: bytes) -> list[str] | None:
    """The flags of a FETCH response's ``FLAGS (...)`` item, as sent; None when it has none."""
    match = _FLAGS_ITEM.search(response)
    if match is None:
        return None
    return match.group(1).decode("ascii", "replace").split()


def imap_tags(flags: Iterable[str | bytes]) -> tuple[str, ...]:
    """IMAP FLAGS -> tags (sorted): ``\\Seen`` -> ``$seen`` ..., ``\\Deleted`` -> ``deleted``,
    keywords lowercased when they are valid tags; ``\\Recent``, other ``\\`` flags and keywords
    that are not valid tags are left out."""
    found = set()
    for flag in flags:
        text = flag.decode("ascii", "replace") if isinstance(flag, bytes) else flag
        tag = _keyword_tag(text)
        if tag is not None:
            found.add(tag)
    return _sorted(found)


def imap_flags(tags: Iterable[str]) -> tuple[str, ...]:
    """Tags -> IMAP flags (the way back of :func:`imap_tags`): ``$seen`` -> ``\\Seen`` ...,
    ``deleted`` -> ``\\Deleted``, ``$forwarded $junk $notjunk`` in their registered spelling,
    every other tag as the keyword it is. Sorted."""
    out = set()
    for tag in tags:
        out.add(_IMAP_BACK.get(tag) or _IMAP_KEYWORD_BACK.get(tag) or tag)
    return tuple(sorted(out))


# --- mbox ---------------------------------------------------------------------------------------

_STATUS_LETTERS = {"R": SEEN}
_X_STATUS_LETTERS = {"A": ANSWERED, "F": FLAGGED, "T": DRAFT, "D": DELETED}
_X_STATUS_ORDER = (("A", ANSWERED), ("F", FLAGGED), ("T", DRAFT), ("D", DELETED))
_STATUS_NAMES = (b"status", b"x-status")
_HEADER_SCAN_LINES = 2000
_EMPTY_LINE = re.compile(rb"\n\r?\n")
_STATUS_FIELD = re.compile(rb"^(?:x-)?status:", re.IGNORECASE | re.MULTILINE)


def mbox_tags(status: str | None, x_status: str | None) -> tuple[str, ...]:
    """The tags of an mbox message's ``Status:`` and ``X-Status:`` values (sorted)."""
    found = set()
    for value, letters in ((status, _STATUS_LETTERS), (x_status, _X_STATUS_LETTERS)):
        for letter in (value or "").strip().upper():
            if letter in letters:
                found.add(letters[letter])
    return _sorted(found)


def _header_end(data: bytes) -> int:
    """Where the header ends (a bound: at or after the empty line that ends it)."""
    end = _EMPTY_LINE.search(data)
    return end.start() + 1 if end is not None else len(data)


def _header_lines(data: bytes) -> tuple[list[bytes], int]:
    """The header's lines (with their line breaks) and the offset where the header ends: at the
    empty line that ends it (which is not counted), or at the end of ``data``."""
    lines: list[bytes] = []
    pos = 0
    while pos < len(data) and len(lines) < _HEADER_SCAN_LINES:
        end = data.find(b"\n", pos)
        line = data[pos:] if end < 0 else data[pos : end + 1]
        if line in (b"\n", b"\r\n"):
            return lines, pos
        lines.append(line)
        pos += len(line)
    return lines, pos


def _field(line: bytes) -> bytes | None:
    name, colon, _ = line.partition(b":")
    return name.strip().lower() if colon and not line[:1].isspace() else None


def mbox_header_tags(data: bytes) -> tuple[str, ...]:
    """The tags of a message's ``Status:`` and ``X-Status:`` header fields (the first of each),
    read from its header only."""
    if _STATUS_FIELD.search(data, 0, _header_end(data)) is None:
        return ()  # most mail: one search, no walk over the header's lines
    values: dict[bytes, str] = {}
    for line in _header_lines(data)[0]:
        name = _field(line)
        if name in _STATUS_NAMES and name not in values:
            values[name] = line.partition(b":")[2].decode("ascii", "replace")
    return mbox_tags(values.get(b"status"), values.get(b"x-status"))


def mbox_status(tags: Iterable[str]) -> tuple[str, str]:
    """``(Status, X-Status)`` values for ``tags``: ``RO`` for read mail, ``O`` for unread; the
    ``X-Status`` letters in ``AFTD`` order (``""`` when none applies)."""
    present = set(tags)
    status = "RO" if SEEN in present else "O"
    return status, "".join(letter for letter, tag in _X_STATUS_ORDER if tag in present)


def with_status_headers(data: bytes, tags: Iterable[str]) -> bytes:
    """``data`` with ``Status:`` / ``X-Status:`` fields that say ``tags``: any such fields there
    are removed (with their continuation lines), the new ones go at the end of the header, with
    the message's own line break (CRLF when its first line has one). The body is untouched;
    the bytes are then not the stored ones."""
    lines, end = _header_lines(data)
    newline = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    kept: list[bytes] = []
    dropping = False
    for line in lines:
        if line[:1] in (b" ", b"\t") and dropping:
            continue  # a continuation of a dropped field
        dropping = _field(line) in _STATUS_NAMES
        if not dropping:
            kept.append(line)
    if kept and not kept[-1].endswith(b"\n"):
        kept[-1] += newline
    status, x_status = mbox_status(tags)
    kept.append(b"Status: " + status.encode("ascii") + newline)
    if x_status:
        kept.append(b"X-Status: " + x_status.encode("ascii") + newline)
    rest = data[end:]
    if not rest:  # a header without a body: the empty line that ends a header
        rest = newline
    return b"".join(kept) + rest
