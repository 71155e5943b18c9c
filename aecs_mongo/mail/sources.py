"""Mail sources: raw messages read from ``.eml`` files, directories, Maildir folders and mbox files.

A worker that loads an archive iterates :func:`read_messages` and hands the bytes to
``store.store_iter``; :class:`IngestReport` keeps the tally and prints the same failure report as
``aecs-mongo ingest``::

    report = IngestReport()
    for result in store.store_iter(report.track(read_messages(paths)), on_error=report.refused):
        report.count(result)
    print("\\n".join(report.lines()))

What is read, and how:

- Inputs: ``.eml`` files, directories (recursive, hidden entries skipped), Maildir folders (a
  directory with ``cur`` and ``new``: every file in them, ``tmp`` skipped; Maildir++ sub-folders
  ``.Name`` too), mbox files and ``-``, standard input (one message, or an mbox when it starts
  with ``From ``: what procmail or fetchmail deliver). Files are recognised by their content,
  not their name: an ``.eml`` file is always one message, byte for byte (many real ``.eml``
  files start with a ``From `` line); an ``.mbox`` file, and any other file that starts with
  ``From `` (a Thunderbird folder has no extension), is an mbox; any other file whose first
  line is a header field is one message (MH folders' numbered files, ``.msg``, no extension).
  Inside a directory, a file that is none of these is skipped (not mail) with the reason, and
  counted apart from failures; named directly, it is read as one message and fails if it is not.
- mbox is read as **mboxrd**, streamed line by line (memory is bounded by one message, never the
  file): a message starts at a line beginning ``From `` at the start of the file or after an
  empty line; the empty line before it is the separator and is dropped; one ``>`` is removed
  from every ``>From `` / ``>>From `` ... line. For an mboxo file (which quotes ``From `` but not
  ``>From ``) this turns an original ``>From `` body line into ``From ``: the two formats cannot
  be told apart, and mboxrd is what current writers produce. ``Content-Length`` (mboxcl) is not
  used.
- Directories are walked lazily, one listing at a time, in name order (stable across runs).
- Skipped, with a reason (a :class:`Skipped`, never an exception, so one bad file does not stop
  an archive): a file or directory that cannot be read, an empty file or mbox entry, data that is
  not a mail message (no header field before the first empty line), bytes before the first
  ``From `` line of an mbox, and an mbox's last message when the file ends inside it (no line
  break at the end: a cut download or copy; every mbox writer ends a message with one). The
  normalizer accepts anything, so that floor is this module's.
- ``received_at``: the date the source itself gives a message (the mbox ``From `` line's date,
  a file's modification time: a Maildir's delivery time), handed to the store with the bytes so
  that mail without a usable ``Date:`` sorts by it (``store_iter`` takes ``RawMessage`` items).
- ``tags`` and ``folders`` (``RawMessage`` attributes the store sets on a new message; the
  mappings are ``pure/flags.py``'s): a Maildir file's tags are its info flags (``:2,FRS``; a
  file in ``new/`` is never ``$seen``; Dovecot's keyword letters through the folder's
  ``dovecot-keywords``), its folder that of its Maildir: the Maildir named is ``INBOX``, its
  Maildir++ folders ``.a.b`` are ``a/b``, and a Maildir found while walking a directory is
  named by its path below that directory (``work``, ``lists/python``:
  notmuch's ``folder:``), its Maildir++ folders below that (``work/Sent``). An mbox message's
  tags are read from its ``Status:`` and ``X-Status:`` fields; its bytes are stored as they
  are, those fields included. Other files carry no tags and no folder.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from ..pure.flags import INBOX, dovecot_keywords, maildir_folder, maildir_tags, mbox_header_tags
from ..results import StoreResult

__all__ = [
    "STDIN",
    "IngestReport",
    "InputFile",
    "MboxEntry",
    "Origin",
    "RawMessage",
    "Skipped",
    "find_inputs",
    "from_line_date",
    "iter_mbox",
    "not_mail",
    "read_inputs",
    "read_messages",
    "sniff",
]

_HEADER_LINE = re.compile(rb"^[\x21-\x39\x3b-\x7e]+[ \t]*:")
_BLANK_LINES = (b"\n", b"\r\n")
_HEADER_SCAN_BYTES = 256 * 1024
_SNIFF_BYTES = 8192
#: ``-`` names standard input.
STDIN = "-"
_FROM_DATE = re.compile(rb"^From \S*\s+(.*?)\s*$")


@dataclass(frozen=True)
class Origin:
    """Where a message came from: a file, or an mbox file with the message number and byte offset."""

    path: str
    message: int | None = None  # mbox: 1-based; 0 for stray data before the first From_ line
    offset: int | None = None  # mbox: byte offset of the message's From_ line

    def __str__(self) -> str:
        if self.message is None:
            return self.path
        return f"{self.path} (message {self.message} at byte {self.offset})"


@dataclass(frozen=True)
class RawMessage:
    """One message's bytes, as stored (mbox entries unquoted, without their From_ line), and
    the date its source gives it (``received_at``: the From_ line's, a file's mtime), which the
    store uses as the sort time of mail without a usable Date (``store_iter`` takes these)."""

    data: bytes
    origin: Origin
    size: int  # bytes of the input this message spans (for progress)
    received_at: _dt.datetime | None = None
    tags: tuple[str, ...] = ()  # a new message's tags (Maildir flags, mbox Status)
    folders: tuple[str, ...] = ()  # the folder it was found in (Maildir)


@dataclass(frozen=True)
class Skipped:
    """An input that is not a message to store, and why.

    ``ignored`` is True for a file inside a directory whose name says it is not mail (not a
    failure); everything else is a failure the user should see.
    """

    origin: Origin
    reason: str
    size: int = 0
    ignored: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.origin.path,
            "message": self.origin.message,
            "offset": self.origin.offset,
            "reason": self.reason,
        }

    def describe(self) -> str:
        return f"{self.origin}: {self.reason}"


@dataclass(frozen=True)
class InputFile:
    """One input file: a single message (``eml``, also Maildir files) or an ``mbox``."""

    kind: Literal["eml", "mbox", "stdin"]
    path: Path
    size: int
    folder: str | None = None  # a Maildir file: its folder (INBOX, Sent, a/b)
    new: bool = False  # a Maildir file in new/ (not seen)
    keywords: dict[str, str] | None = field(default=None, compare=False, hash=False)  # Dovecot's letters


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() and (path / "new").is_dir()


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sniff_mbox(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(5) == b"From "
    except OSError:
        return False  # read as a single message, which reports the error


def sniff(path: str | os.PathLike[str]) -> Literal["eml", "mbox"] | str:
    """What a file in a directory holds, by its first bytes: ``mbox`` (starts with ``From ``),
    ``eml`` (starts with a header field), else why it is not mail."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if head.startswith(b"From "):
        return "mbox"
    if not head.strip():
        return "empty file"
    first = head.split(b"\n", 1)[0]
    if _HEADER_LINE.match(first):
        return "eml"
    return "not mail: its first line is not a header field nor an mbox 'From ' line"


def _listing(folder: Path) -> list[os.DirEntry[str]] | Skipped:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        return Skipped(Origin(str(exc.filename or folder)), f"cannot read directory: {exc.strerror or exc}")


def _keywords(folder: Path) -> dict[str, str] | None:
    """Dovecot's keyword letters of a Maildir folder (its ``dovecot-keywords``), None without."""
    try:
        return dovecot_keywords((folder / "dovecot-keywords").read_text("utf-8", "replace"))
    except OSError:
        return None


def _maildir(folder: Path, name: str = INBOX) -> Iterator[InputFile | Skipped]:
    keywords = _keywords(folder)
    for sub in ("new", "cur"):
        listing = _listing(folder / sub)
        if isinstance(listing, Skipped):
            yield listing
            continue
        for entry in listing:
            if not entry.name.startswith("."):
                path = Path(entry.path)
                yield InputFile("eml", path, _file_size(path), name, sub == "new", keywords)
    # Maildir++ folders (.Sent, .Archive, ...) live inside the top-level Maildir
    listing = _listing(folder)
    if isinstance(listing, Skipped):
        yield listing
        return
    for entry in listing:
        if entry.name.startswith(".") and entry.is_dir() and _is_maildir(Path(entry.path)):
            yield from _maildir(Path(entry.path), maildir_folder(entry.name, name))


def _directory(folder: Path, relative: str | None = None) -> Iterator[InputFile | Skipped]:
    """The inputs under ``folder``; ``relative``: its path below the directory named (None: it
    is the one named), which names a Maildir found there."""
    if _is_maildir(folder):
        yield from _maildir(folder, relative or INBOX)
        return
    listing = _listing(folder)
    if isinstance(listing, Skipped):
        yield listing
        return
    for entry in listing:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        suffix = path.suffix.lower()
        if entry.is_dir(follow_symlinks=False):
            yield from _directory(path, f"{relative}/{entry.name}" if relative else entry.name)
        elif suffix in (".eml", ".mbox"):
            yield InputFile("eml" if suffix == ".eml" else "mbox", path, _file_size(path))
        else:
            kind = sniff(path)
            if kind in ("eml", "mbox"):
                yield InputFile("mbox" if kind == "mbox" else "eml", path, _file_size(path))
            else:
                yield Skipped(Origin(str(path)), kind, ignored=True)


def find_inputs(paths: Iterable[str | os.PathLike[str]]) -> Iterator[InputFile | Skipped]:
    """Every input file under ``paths``, in a stable order, walked lazily; a path that cannot be
    read comes back as a :class:`Skipped`."""
    for name in paths:
        if str(name) == STDIN:
            yield InputFile("stdin", Path(STDIN), 0)
            continue
        path = Path(name)
        if path.is_dir():
            yield from _directory(path)
        elif path.exists() or path.is_symlink():
            suffix = path.suffix.lower()
            is_mbox = suffix == ".mbox" or (suffix != ".eml" and _sniff_mbox(path))
            yield InputFile("mbox" if is_mbox else "eml", path, _file_size(path))
        else:
            yield Skipped(Origin(str(name)), "no such file or directory")


def not_mail(data: bytes) -> str | None:
    """Why ``data`` is not a mail message, or None: it needs something, and at least one header
    field before the first empty line."""
    if not data.strip():
        return "empty: no message"
    for line in data[:_HEADER_SCAN_BYTES].splitlines():
        if not line:  # the empty line that ends the header (a line of blanks does not)
            break
        if _HEADER_LINE.match(line):
            return None
    return "not an email message: no header field before the first empty line"


def _unquote(line: bytes) -> bytes:
    """mboxrd: ``>From `` -> ``From ``, ``>>From `` -> ``>From ``, ..."""
    if line.startswith(b">") and line.lstrip(b">").startswith(b"From "):
        return line[1:]
    return line


@dataclass(frozen=True)
class MboxEntry:
    number: int  # 1-based
    offset: int  # byte offset of its From_ line (of the stray data for number 0)
    data: bytes
    size: int  # bytes of the file this entry spans
    from_line: bytes = b""  # its From_ line, as in the file
    truncated: bool = False  # the last entry, and the file ends inside it (no final line break)

    @property
    def received_at(self) -> _dt.datetime | None:
        """The date of the From_ line (``asctime``, UTC), None when it has none that parses."""
        return from_line_date(self.from_line)


def from_line_date(line: bytes) -> _dt.datetime | None:
    """The date of an mbox ``From sender Tue Nov  3 10:00:00 2026`` line, as UTC; None when
    there is no date that parses (anything after the year is ignored, as readers do)."""
    match = _FROM_DATE.match(line)
    if match is None:
        return None
    words = match.group(1).decode("ascii", "replace").split()
    try:
        return _dt.datetime.strptime(" ".join(words[:5]), "%a %b %d %H:%M:%S %Y").replace(tzinfo=_dt.UTC)
    except ValueError:
        return None


def iter_mbox(path: str | os.PathLike[str] | IO[bytes]) -> Iterator[MboxEntry]:
    """Stream an mbox (mboxrd rules, see the module docstring) one message at a time; ``path``
    may be an open binary file (standard input).

    Data before the first ``From `` line that is not blank comes back as entry number 0.
    """
    if isinstance(path, (str, os.PathLike)):
        with open(path, "rb") as f:
            yield from _mbox_entries(f)
    else:
        yield from _mbox_entries(path)


def _mbox_entries(f: Iterable[bytes]) -> Iterator[MboxEntry]:
    lines: list[bytes] = []
    number = 0
    start = 0
    pos = 0
    previous_blank = True
    separator = b""
    last = b"\n"

    def finish(*, at_end: bool = False) -> MboxEntry:
        truncated = at_end and number > 0 and not last.endswith(b"\n")
        if lines and lines[-1] in _BLANK_LINES:
            lines.pop()  # the separator's empty line
        data = b"".join(lines)
        return MboxEntry(number, start, data, pos - start, separator, truncated)

    for line in f:
        if previous_blank and line.startswith(b"From "):
            if number > 0 or any(x.strip() for x in lines):
                yield finish()
            lines = []
            number += 1
            start = pos
            separator = line
        else:
            lines.append(_unquote(line) if number else line)
        previous_blank = line in _BLANK_LINES
        pos += len(line)
        last = line
    if number > 0 or any(x.strip() for x in lines):
        yield finish(at_end=True)


def _checked(
    data: bytes,
    origin: Origin,
    size: int,
    received_at: _dt.datetime | None = None,
    tags: tuple[str, ...] = (),
    folders: tuple[str, ...] = (),
) -> RawMessage | Skipped:
    problem = not_mail(data)
    if problem is not None:
        return Skipped(origin, problem, size)
    return RawMessage(data, origin, size, received_at, tags, folders)


def _mbox_items(entries: Iterable[MboxEntry], path: str) -> Iterator[RawMessage | Skipped]:
    for entry in entries:
        origin = Origin(path, entry.number, entry.offset)
        if entry.number == 0:
            yield Skipped(origin, "data before the first 'From ' line (not an mbox message)", entry.size)
        elif entry.truncated:
            yield Skipped(
                origin,
                f"truncated: the file ends inside this message ({entry.size} bytes, no line break at the end);"
                " not stored",
                entry.size,
            )
        else:
            yield _checked(entry.data, origin, entry.size, entry.received_at, mbox_header_tags(entry.data))


def _read_mbox(source: InputFile) -> Iterator[RawMessage | Skipped]:
    path = str(source.path)
    try:
        yield from _mbox_items(iter_mbox(source.path), path)
    except OSError as exc:
        yield Skipped(Origin(path), f"cannot read: {exc.strerror or exc}")


def _read_stdin(stream: IO[bytes] | None = None) -> Iterator[RawMessage | Skipped]:
    """Standard input: an mbox when it starts with ``From ``, else one message."""
    source = stream if stream is not None else sys.stdin.buffer
    origin = "<stdin>"
    head = source.read(5)
    if head == b"From ":

        def lines() -> Iterator[bytes]:
            first = head + source.readline()
            yield first
            yield from source

        yield from _mbox_items(_mbox_entries(_LineReader(lines())), origin)
        return
    data = head + source.read()
    yield _checked(data, Origin(origin), len(data))


class _LineReader:
    """An iterator of lines that ``_mbox_entries`` reads like a file."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines = lines

    def __iter__(self) -> Iterator[bytes]:
        return self._lines


def _mtime(path: Path) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromtimestamp(int(path.stat().st_mtime), _dt.UTC)
    except (OSError, OverflowError, ValueError):
        return None


def read_inputs(inputs: Iterable[InputFile | Skipped]) -> Iterator[RawMessage | Skipped]:
    """The messages of ``inputs`` (from :func:`find_inputs`), one at a time; skips pass through."""
    for source in inputs:
        if isinstance(source, Skipped):
            yield source
        elif source.kind == "stdin":
            yield from _read_stdin()
        elif source.kind == "mbox":
            yield from _read_mbox(source)
        else:
            try:
                data = source.path.read_bytes()
            except OSError as exc:
                yield Skipped(Origin(str(source.path)), f"cannot read: {exc.strerror or exc}", source.size)
                continue
            if source.folder is None:
                yield _checked(data, Origin(str(source.path)), len(data), _mtime(source.path))
                continue
            tags = maildir_tags(source.path.name, new=source.new, keywords=source.keywords)
            yield _checked(data, Origin(str(source.path)), len(data), _mtime(source.path), tags, (source.folder,))


def read_messages(paths: Iterable[str | os.PathLike[str]]) -> Iterator[RawMessage | Skipped]:
    """Every message under ``paths`` (files, directories, Maildir folders, mbox files), streamed:
    memory holds one message and one directory listing at a time."""
    return read_inputs(find_inputs(paths))


@dataclass
class IngestReport:
    """The tally of a load through ``store_iter``, and the report ``aecs-mongo ingest`` prints.

    :meth:`track` turns a :func:`read_messages` stream into the bytes to store, recording skips
    and remembering where each message handed out came from; :meth:`refused` is ``store_iter``'s
    ``on_error``; :meth:`count` takes each result, in order.
    """

    stored: int = 0
    present: int = 0
    variants: int = 0  # of the present: other bytes under a stored Message-ID, kept beside it
    failures: list[Skipped] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)  # the ignored files, with their reasons
    aborted: str | None = None
    interrupted: bool = False
    seconds: float = 0.0
    stored_unconfirmed: int = 0  # of the stored: found in the mailbox after an interrupt, unanswered
    _handed_out: dict[int, Origin] = field(default_factory=dict, repr=False)
    _next_index: int = field(default=0, repr=False)

    @property
    def processed(self) -> int:
        return self.stored + self.present + len(self.failures)

    @property
    def unconfirmed(self) -> list[Origin]:
        """Messages handed to the store with no result yet (all of them once a batch failed)."""
        return list(self._handed_out.values())

    def drop_unconfirmed(self, count: int) -> None:
        """``count`` of the unconfirmed messages were found stored after all (oldest first: a
        batch is written in order)."""
        for index in list(self._handed_out)[:count]:
            del self._handed_out[index]

    def skip(self, skipped: Skipped) -> None:
        if skipped.ignored:
            self.ignored.append(skipped.origin.path)
            self.skipped.append(skipped)
        else:
            self.failures.append(skipped)

    def track(self, items: Iterable[RawMessage | Skipped]) -> Generator[RawMessage, None, None]:
        """Each message in ``items``, for ``store_iter`` (which stores its bytes with its
        ``received_at``); skips are recorded, not yielded."""
        for item in items:
            if isinstance(item, Skipped):
                self.skip(item)
                continue
            self._handed_out[self._next_index] = item.origin
            self._next_index += 1
            yield item

    def refused(self, index: int, item: object, exc: Exception) -> None:
        """``store_iter``'s ``on_error``: the store refused message number ``index``."""
        origin = self._handed_out.pop(index)
        self.failures.append(Skipped(origin, f"refused by the store: {exc}"))

    def count(self, result: StoreResult) -> None:
        """One ``store_iter`` result (they come in the order the messages were handed out)."""
        del self._handed_out[next(iter(self._handed_out))]
        if result.inserted:
            self.stored += 1
        else:
            self.present += 1
            self.variants += result.variant

    def as_dict(self) -> dict[str, Any]:
        return {
            "stored": self.stored,
            "present": self.present,
            "variants": self.variants,
            "failed": len(self.failures),
            "total": self.processed,
            "failures": [f.as_dict() for f in self.failures],
            "ignored": self.ignored,
            "skipped": [{"input": s.origin.path, "reason": s.reason} for s in self.skipped],
            "aborted": self.aborted,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "storedUnconfirmed": self.stored_unconfirmed,
            "unconfirmed": [str(origin) for origin in self.unconfirmed],
        }

    def lines(self) -> list[str]:
        """The human report: each failure with its input and reason, ignored files, a summary."""
        out = [f"failed: {failure.describe()}" for failure in self.failures]
        out += [f"skipped: {s.origin.path}: {s.reason}" for s in self.skipped]
        summary = f"{_plural(self.processed, 'message')} in {self.seconds:.1f} s: {self.stored:,} stored, "
        summary += f"{self.present:,} already present"
        if self.variants:
            summary += f", of them {self.variants:,} kept as variants"
        summary += f", {len(self.failures):,} failed"
        if self.ignored:
            summary += f"; {_plural(len(self.ignored), 'other file')} skipped (not mail)"
        out.append(summary)
        if self.processed and self.stored == 0 and not self.failures:
            out.append("nothing new: every message was already in the mailbox")
        unanswered = len(self._handed_out)
        if self.stored_unconfirmed:
            out.append(
                f"of the stored, {self.stored_unconfirmed:,} had no answer before the interruption:"
                " counted in the mailbox afterwards"
            )
        if self.interrupted:
            out.append(
                f"interrupted: the inputs after these were not read ({unanswered} handed to the store unconfirmed)"
            )
        if self.aborted:
            out.append(f"aborted: {self.aborted} ({_plural(unanswered, 'message')} of the last batch unconfirmed)")
        return out


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
