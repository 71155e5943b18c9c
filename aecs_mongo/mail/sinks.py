"""Mail sinks: write raw messages out as an mbox file, a Maildir folder or a directory of ``.eml`` files.

The way back of :mod:`aecs_mongo.mail.sources`: what a writer here produces, ``read_messages`` (and so
``aecs-mongo ingest``) reads back byte for byte, in the order it was written::

    with open_writer("maildir", "out/") as writer:
        for copy in store.export_raw(variants=True):
            writer.write(copy.data, ts=copy.ts, sender=copy.sender)

Each writer holds one message at a time (memory is bounded by the largest message, never the
mailbox) and names what it writes so that a directory listing in name order is the write order.

- ``mbox``: **mboxrd**. Each message gets a ``From <sender> <asctime>`` line (its date: the
  message's sort time ``ts``, so a message without a Date keeps its place when read back), every
  line of it that starts with ``From ``, ``>From ``, ``>>From `` ... gets one more ``>`` (the
  reader removes exactly one), it is ended with a line break when it has none, and an empty line
  separates it from the next. The one thing mboxrd cannot carry: a message whose last byte is
  not a line break comes back with a ``\\n`` added. The file is created new, or with
  ``append=True`` added to. With ``status_headers=True`` each message's tags are written into
  it as ``Status:`` / ``X-Status:`` fields (``pure/flags.py``: ``RO`` read, ``O`` unread;
  ``A`` answered, ``F`` flagged, ``T`` draft, ``D`` deleted), replacing any there: mutt and
  most mbox readers show them, and ``ingest`` reads them back as tags. The bytes are then
  not the stored ones; without it (the default) they are, byte for byte.
- ``maildir``: ``tmp/``, ``new/``, ``cur/``; each message is written to ``tmp/`` and renamed into
  ``cur/`` (atomic: a reader never sees half a message) under a unique name
  ``<time>.M<sequence>P<pid>R<random>.<host>:2,<flags>``, or, given a ``key`` (the export
  gives the message key and copy number), ``<ts, 12 digits>.K<key>.aecs:2,<flags>``: a copy
  whose key is there already is not written again, so exporting twice into one Maildir does not
  double it. ``<flags>`` are the message's tags as Maildir flags in ASCII order
  (``pure/flags.py``: ``D`` draft, ``F`` flagged, ``P`` forwarded, ``R`` answered, ``S`` seen,
  ``T`` the tag ``deleted``). Every message goes to ``cur/``, unread mail too (no ``S``): a
  file in ``new/`` can carry no flags (unread and flagged would lose the flag), and mail
  readers show a ``cur/`` file without ``S`` as unread, as ``ingest`` reads it back.
  The file's modification time is ``ts`` (Maildir readers, and ``ingest``, take it as the
  delivery time). An existing Maildir is added to.
- ``eml``: one ``<sequence>.eml`` file per message, exactly the bytes, created exclusively (an
  existing file of that name is an error, never overwritten); ``append=True`` numbers on after
  the files there. Its modification time is ``ts`` too.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal

from ..pure.flags import maildir_flags, with_status_headers

__all__ = ["FORMATS", "EmlDirWriter", "MailWriter", "MaildirWriter", "MboxWriter", "open_writer"]

#: The export formats, as ``aecs-mongo export --format`` names them.
FORMATS = ("mbox", "maildir", "eml")
#: a line break before a line that mboxrd quotes (``>*From ``): where the ``>`` goes
_BEFORE_FROM_LINE = re.compile(rb"\n(?=>*From )")
_FROM_LINE_START = re.compile(rb">*From ")
#: The mbox file's write buffer (bytes).
WRITE_BUFFER = 1 << 20
_UNSAFE_SENDER = re.compile(r"[\s\x00-\x1f\x7f]+")
_KEYED_NAME = re.compile(r"^\d+\.K([0-9a-zA-Z_-]+)\.aecs(?::|$)")
_EML_NAME = re.compile(r"(\d{8,})\.eml")


class MailWriter:
    """Base of the writers: ``write(data)`` one message, ``close()`` at the end (or ``with``).

    ``count`` and ``bytes_written`` (message bytes, without any framing) keep the tally.
    """

    def __init__(self) -> None:
        self.count = 0
        self.bytes_written = 0
        self.already_there = 0  # copies not written because the target has them (Maildir keys)

    def write(
        self,
        data: bytes,
        *,
        ts: int | None = None,
        sender: str | None = None,
        key: str | None = None,
        tags: Iterable[str] = (),
    ) -> str:
        """Write one message; returns where (a path, or ``path#n`` in an mbox). ``ts`` (epoch
        seconds) is the mbox ``From`` line's date and a file's modification time; ``sender``
        goes into the ``From`` line; ``key`` (hex) names a Maildir file, so that a copy already
        there is not written again (``already_there`` counts them); ``tags`` (the message's):
        a Maildir file's flags, an mbox's ``Status:`` fields where asked for."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        if key is not None and not re.fullmatch(r"[0-9a-zA-Z_-]{1,80}", key):
            raise ValueError("key must be 1-80 letters, digits, _ or -")
        where = self._write(bytes(data), ts, sender, key, tuple(tags))
        if where is None:
            self.already_there += 1
            return ""
        self.count += 1
        self.bytes_written += len(data)
        return where

    def _write(
        self, data: bytes, ts: int | None, sender: str | None, key: str | None, tags: tuple[str, ...]
    ) -> str | None:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Finish writing (flush and close an open file)."""

    def __enter__(self) -> MailWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.close()


def mboxrd_quote(data: bytes) -> bytes:
    """One more ``>`` before every line that starts with ``>*From `` (mboxrd)."""
    if b"From " not in data:
        return data
    # lines end at LF alone, as the reader splits them: a CR inside a line does not start one.
    # One substitution after each such line break (no list of every line: a third faster)
    quoted = _BEFORE_FROM_LINE.sub(b"\n>", data)
    return b">" + quoted if _FROM_LINE_START.match(data) else quoted


def from_line(ts: int | None, sender: str | None) -> bytes:
    """The mbox separator line: ``From <sender> <asctime UTC>``."""
    who = _UNSAFE_SENDER.sub("", sender or "") or "MAILER-DAEMON"
    when = time.asctime(time.gmtime(ts if ts is not None and ts >= 0 else 0))
    return f"From {who} {when}\n".encode("utf-8", "replace")


def _set_mtime(path: Path, ts: int | None) -> None:
    if ts is not None and ts >= 0:
        os.utime(path, (ts, ts))


class MboxWriter(MailWriter):
    """Write an mboxrd file (see the module docstring); ``path`` must not exist yet, unless
    ``append`` (then it is added to); ``status_headers``: write each message's tags into it as
    ``Status:`` / ``X-Status:`` (the bytes are then not the stored ones)."""

    def __init__(self, path: str | os.PathLike[str], *, append: bool = False, status_headers: bool = False) -> None:
        super().__init__()
        self.path = Path(path)
        self.status_headers = status_headers
        # a large buffer: a message's three writes (From_ line, bytes, separator) and the small
        # messages after it leave in one system call per MiB, not one or more per message
        mode = "ab" if append else "xb"
        self._file = open(self.path, mode, buffering=WRITE_BUFFER)  # noqa: SIM115 - closed by close()
        if append and self._file.tell() > 0:
            self._ensure_separated()

    def _ensure_separated(self) -> None:
        """An mbox added to ends with an empty line before the next From_ line."""
        with open(self.path, "rb") as f:
            f.seek(max(0, self._file.tell() - 2))
            tail = f.read()
        if not tail.endswith(b"\n"):
            self._file.write(b"\n\n")
        elif not tail.endswith(b"\n\n"):
            self._file.write(b"\n")

    def _write(self, data: bytes, ts: int | None, sender: str | None, key: str | None, tags: tuple[str, ...]) -> str:
        if self.status_headers:
            data = with_status_headers(data, tags)
        self._file.write(from_line(ts, sender))
        self._file.write(mboxrd_quote(data))
        if not data.endswith(b"\n"):
            self._file.write(b"\n")
        self._file.write(b"\n")
        return f"{self.path}#{self.count + 1}"

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def _host_name() -> str:
    return socket.gethostname().replace("/", r"\057").replace(":", r"\072") or "localhost"


class MaildirWriter(MailWriter):
    """Deliver into a Maildir (created if absent): ``tmp/`` then an atomic rename into ``cur/``.

    ``fsync`` (the default, as Maildir delivery asks) makes each file durable before its rename;
    it costs about a millisecond per message on an SSD.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__()
        self.path = Path(path)
        self.fsync = fsync
        for sub in ("tmp", "new", "cur"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        # one time and one random part per writer: names sort in write order within a run
        self._stem = f"{int(time.time())}"
        self._tail = f"P{os.getpid()}R{secrets.token_hex(4)}.{_host_name()}"
        self._keys: set[str] | None = None  # the keys in the Maildir, read on the first keyed write

    def _keys_present(self) -> set[str]:
        if self._keys is None:
            self._keys = set()
            for sub in ("cur", "new"):
                for name in os.listdir(self.path / sub):
                    match = _KEYED_NAME.match(name)
                    if match:
                        self._keys.add(match.group(1))
        return self._keys

    def _write(
        self, data: bytes, ts: int | None, sender: str | None, key: str | None, tags: tuple[str, ...]
    ) -> str | None:
        if key is not None:
            if key in self._keys_present():
                return None
            # zero-padded time first: names sort in write order (the export's: ts, then key)
            name = f"{ts if ts is not None and ts >= 0 else 0:012d}.K{key}.aecs"
        else:
            name = f"{self._stem}.M{self.count:09d}{self._tail}"
        temporary = self.path / "tmp" / name
        with open(temporary, "xb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        _set_mtime(temporary, ts)
        final = self.path / "cur" / f"{name}:2,{maildir_flags(tags)}"
        os.rename(temporary, final)
        if key is not None:
            self._keys_present().add(key)
        return str(final)


class EmlDirWriter(MailWriter):
    """One ``.eml`` file per message in ``path`` (created if absent), named in write order;
    ``append``: numbered on after the ``NNNNNNNN.eml`` files already there."""

    def __init__(self, path: str | os.PathLike[str], *, append: bool = False) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._first = 1
        if append:
            numbers = [int(m.group(1)) for m in map(_EML_NAME.fullmatch, os.listdir(self.path)) if m]
            self._first = max(numbers, default=0) + 1

    def _write(self, data: bytes, ts: int | None, sender: str | None, key: str | None, tags: tuple[str, ...]) -> str:
        target = self.path / f"{self._first + self.count:08d}.eml"
        with open(target, "xb") as f:
            f.write(data)
        _set_mtime(target, ts)
        return str(target)


def open_writer(
    fmt: Literal["mbox", "maildir", "eml"] | str,
    path: str | os.PathLike[str],
    *,
    add: bool = False,
    status_headers: bool = False,
) -> MailWriter:
    """The writer for ``fmt`` (one of :data:`FORMATS`) at ``path``; ``add``: add to an existing
    mbox or ``.eml`` directory (a Maildir is always added to); ``status_headers``: the mbox's
    ``Status:`` fields (mbox only)."""
    if status_headers and fmt != "mbox":
        raise ValueError("status_headers is for the mbox format only (a Maildir carries flags in its file names)")
    if fmt == "mbox":
        return MboxWriter(path, append=add, status_headers=status_headers)
    if fmt == "maildir":
        return MaildirWriter(path)
    if fmt == "eml":
        return EmlDirWriter(path, append=add)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
