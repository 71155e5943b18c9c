"""Mail sources: raw messages read from ``.eml`` files, directories, Maildir folders and mbox files.

A worker that loads an archive iterates :func:`read_messages` and hands the bytes to
``store.store_iter``; :class:`IngestReport` keeps the tally and prints the same failure report as
``aecs-mongo ingest``::

    report = IngestReport()
    for result in store.store_iter(report.track(read_messages(paths)), on_error=report.refused):
        report.count(result)
    print("\\n".join(report.lines()))

Decisions, where the issue left them open:

- Inputs: ``.eml`` files, directories (recursive; ``*.eml`` and ``*.mbox`` files are read, other
  files are reported as ignored, hidden entries skipped), Maildir folders (a directory with
  ``cur`` and ``new``: every file in them, ``tmp`` skipped; Maildir++ sub-folders ``.Name`` too)
  and mbox files. A file named directly is an mbox when it ends in ``.mbox``, or when it does not
  end in ``.eml`` and starts with ``From ``; an ``.eml`` file is always one message, byte for
  byte (many real ``.eml`` files start with a ``From `` line).
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
  ``From `` line of an mbox. The normalizer accepts anything, so that floor is this module's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..results import StoreResult

__all__ = [
    "IngestReport",
    "InputFile",
    "MboxEntry",
    "Origin",
    "RawMessage",
    "Skipped",
    "find_inputs",
    "iter_mbox",
    "not_mail",
    "read_inputs",
    "read_messages",
]

_HEADER_LINE = re.compile(rb"^[\x21-\x39\x3b-\x7e]+[ \t]*:")
_BLANK_LINES = (b"\n", b"\r\n")
_HEADER_SCAN_BYTES = 256 * 1024


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
    """One message's bytes, as stored (mbox entries unquoted, without their From_ line)."""

    data: bytes
    origin: Origin
    size: int  # bytes of the input this message spans (for progress)


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

    kind: Literal["eml", "mbox"]
    path: Path
    size: int


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


def _listing(folder: Path) -> list[os.DirEntry[str]] | Skipped:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        return Skipped(Origin(str(exc.filename or folder)), f"cannot read directory: {exc.strerror or exc}")


def _maildir(folder: Path) -> Iterator[InputFile | Skipped]:
    for sub in ("new", "cur"):
        listing = _listing(folder / sub)
        if isinstance(listing, Skipped):
            yield listing
            continue
        for entry in listing:
            if not entry.name.startswith("."):
                path = Path(entry.path)
                yield InputFile("eml", path, _file_size(path))
    # Maildir++ folders (.Sent, .Archive, ...) live inside the top-level Maildir
    listing = _listing(folder)
    if isinstance(listing, Skipped):
        yield listing
        return
    for entry in listing:
        if entry.name.startswith(".") and entry.is_dir() and _is_maildir(Path(entry.path)):
            yield from _maildir(Path(entry.path))


def _directory(folder: Path) -> Iterator[InputFile | Skipped]:
    if _is_maildir(folder):
        yield from _maildir(folder)
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
            yield from _directory(path)
        elif suffix in (".eml", ".mbox"):
            yield InputFile("eml" if suffix == ".eml" else "mbox", path, _file_size(path))
        else:
            yield Skipped(Origin(str(path)), "not .eml or .mbox", ignored=True)


def find_inputs(paths: Iterable[str | os.PathLike[str]]) -> Iterator[InputFile | Skipped]:
    """Every input file under ``paths``, in a stable order, walked lazily; a path that cannot be
    read comes back as a :class:`Skipped`."""
    for name in paths:
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


def iter_mbox(path: str | os.PathLike[str]) -> Iterator[MboxEntry]:
    """Stream an mbox (mboxrd rules, see the module docstring) one message at a time.

    Data before the first ``From `` line that is not blank comes back as entry number 0.
    """
    with open(path, "rb") as f:
        lines: list[bytes] = []
        number = 0
        start = 0
        pos = 0
        previous_blank = True

        def finish() -> MboxEntry:
            if lines and lines[-1] in _BLANK_LINES:
                lines.pop()  # the separator's empty line
            data = b"".join(lines)
            return MboxEntry(number, start, data, pos - start)

        for line in f:
            if previous_blank and line.startswith(b"From "):
                if number > 0 or any(x.strip() for x in lines):
                    yield finish()
                lines = []
                number += 1
                start = pos
            else:
                lines.append(_unquote(line) if number else line)
            previous_blank = line in _BLANK_LINES
            pos += len(line)
        if number > 0 or any(x.strip() for x in lines):
            yield finish()


def _checked(data: bytes, origin: Origin, size: int) -> RawMessage | Skipped:
    problem = not_mail(data)
    return RawMessage(data, origin, size) if problem is None else Skipped(origin, problem, size)


def _read_mbox(source: InputFile) -> Iterator[RawMessage | Skipped]:
    path = str(source.path)
    try:
        for entry in iter_mbox(source.path):
            origin = Origin(path, entry.number, entry.offset)
            if entry.number == 0:
                yield Skipped(origin, "data before the first 'From ' line (not an mbox message)", entry.size)
            else:
                yield _checked(entry.data, origin, entry.size)
    except OSError as exc:
        yield Skipped(Origin(path), f"cannot read: {exc.strerror or exc}")


def read_inputs(inputs: Iterable[InputFile | Skipped]) -> Iterator[RawMessage | Skipped]:
    """The messages of ``inputs`` (from :func:`find_inputs`), one at a time; skips pass through."""
    for source in inputs:
        if isinstance(source, Skipped):
            yield source
        elif source.kind == "mbox":
            yield from _read_mbox(source)
        else:
            try:
                data = source.path.read_bytes()
            except OSError as exc:
                yield Skipped(Origin(str(source.path)), f"cannot read: {exc.strerror or exc}", source.size)
                continue
            yield _checked(data, Origin(str(source.path)), len(data))


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
    aborted: str | None = None
    interrupted: bool = False
    seconds: float = 0.0
    _handed_out: dict[int, Origin] = field(default_factory=dict, repr=False)
    _next_index: int = field(default=0, repr=False)

    @property
    def processed(self) -> int:
        return self.stored + self.present + len(self.failures)

    @property
    def unconfirmed(self) -> list[Origin]:
        """Messages handed to the store with no result yet (all of them once a batch failed)."""
        return list(self._handed_out.values())

    def skip(self, skipped: Skipped) -> None:
        if skipped.ignored:
            self.ignored.append(skipped.origin.path)
        else:
            self.failures.append(skipped)

    def track(self, items: Iterable[RawMessage | Skipped]) -> Generator[bytes, None, None]:
        """The bytes of each message in ``items``; skips are recorded, not yielded."""
        for item in items:
            if isinstance(item, Skipped):
                self.skip(item)
                continue
            self._handed_out[self._next_index] = item.origin
            self._next_index += 1
            yield item.data

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
            "aborted": self.aborted,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "unconfirmed": [str(origin) for origin in self.unconfirmed],
        }

    def lines(self) -> list[str]:
        """The human report: each failure with its input and reason, ignored files, a summary."""
        out = [f"failed: {failure.describe()}" for failure in self.failures]
        out += [f"ignored (not .eml or .mbox): {path}" for path in self.ignored]
        summary = f"{self.processed} messages in {self.seconds:.1f} s: {self.stored} stored, "
        summary += f"{self.present} already present"
        if self.variants:
            summary += f", of them {self.variants} kept as variants"
        summary += f", {len(self.failures)} failed"
        if self.ignored:
            summary += f"; {len(self.ignored)} other files ignored"
        out.append(summary)
        if self.processed and self.stored == 0 and not self.failures:
            out.append("nothing new: every message was already in the mailbox")
        unanswered = len(self._handed_out)
        if self.interrupted:
            out.append(
                f"interrupted: the inputs after these were not read ({unanswered} handed to the store unconfirmed)"
            )
        if self.aborted:
            out.append(f"aborted: {self.aborted} ({unanswered} messages of the last batch unconfirmed)")
        return out
