"""Mail sinks: write raw messages out as an mbox file, a Maildir folder or a directory of ``.eml`` files.

The way back of :mod:`aecs_mongo.mail.sources`: what a writer here produces, ``read_messages`` (and so
``aecs-mongo ingest``) reads back byte for byte, in the order it was written::

    with open_writer("maildir", "out/") as writer:
        for copy in store.export_raw(variants=True):
            writer.write(copy.data, ts=copy.ts, sender=copy.sender)

Each writer holds one message at a time (memory is bounded by the largest message, never the
mailbox) and names what it writes so that a directory listing in name order is the write order.

- ``mbox``: **mboxrd**. Each message gets a ``From <sender> <asctime>`` line, every line of it
  that starts with ``From ``, ``>From ``, ``>>From `` ... gets one more ``>`` (the reader removes
  exactly one), it is ended with a line break when it has none, and an empty line separates it
  from the next. The one thing mboxrd cannot carry: a message whose last byte is not a line
  break comes back with a ``\\n`` added. The file is created new (never appended to).
- ``maildir``: ``tmp/``, ``new/``, ``cur/``; each message is written to ``tmp/`` and renamed into
  ``cur/`` (atomic: a reader never sees half a message) under a unique name
  ``<time>.M<sequence>P<pid>R<random>.<host>:2,`` (no flags: unread). An existing Maildir is
  added to.
- ``eml``: one ``<sequence>.eml`` file per message, exactly the bytes, created exclusively (an
  existing file of that name is an error, never overwritten).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Literal

__all__ = ["FORMATS", "EmlDirWriter", "MailWriter", "MaildirWriter", "MboxWriter", "open_writer"]

#: The export formats, as ``aecs-mongo export --format`` names them.
FORMATS = ("mbox", "maildir", "eml")
_FROM_LINE = re.compile(rb"^>*From ")
_UNSAFE_SENDER = re.compile(r"[\s\x00-\x1f\x7f]+")


class MailWriter:
    """Base of the writers: ``write(data)`` one message, ``close()`` at the end (or ``with``).

    ``count`` and ``bytes_written`` (message bytes, without any framing) keep the tally.
    """

    def __init__(self) -> None:
        self.count = 0
        self.bytes_written = 0

    def write(self, data: bytes, *, ts: int | None = None, sender: str | None = None) -> str:
        """Write one message; returns where (a path, or ``path#n`` in an mbox). ``ts`` (epoch
        seconds) and ``sender`` go into the mbox ``From`` line and are otherwise unused."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        where = self._write(bytes(data), ts, sender)
        self.count += 1
        self.bytes_written += len(data)
        return where

    def _write(self, data: bytes, ts: int | None, sender: str | None) -> str:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Finish writing (flush and close an open file)."""

    def __enter__(self) -> MailWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def mboxrd_quote(data: bytes) -> bytes:
    """One more ``>`` before every line that starts with ``>*From `` (mboxrd)."""
    if b"From " not in data:
        return data
    # split on LF alone, as the reader does: a CR inside a line does not start one
    return b"\n".join(b">" + line if _FROM_LINE.match(line) else line for line in data.split(b"\n"))


def from_line(ts: int | None, sender: str | None) -> bytes:
    """The mbox separator line: ``From <sender> <asctime UTC>``."""
    who = _UNSAFE_SENDER.sub("", sender or "") or "MAILER-DAEMON"
    when = time.asctime(time.gmtime(ts if ts is not None and ts >= 0 else 0))
    return f"From {who} {when}\n".encode("utf-8", "replace")


class MboxWriter(MailWriter):
    """Write an mboxrd file (see the module docstring); ``path`` must not exist yet."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._file = open(self.path, "xb")  # noqa: SIM115 - closed by close()

    def _write(self, data: bytes, ts: int | None, sender: str | None) -> str:
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

    def _write(self, data: bytes, ts: int | None, sender: str | None) -> str:
        name = f"{self._stem}.M{self.count:09d}{self._tail}"
        temporary = self.path / "tmp" / name
        with open(temporary, "xb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        final = self.path / "cur" / f"{name}:2,"
        os.rename(temporary, final)
        return str(final)


class EmlDirWriter(MailWriter):
    """One ``.eml`` file per message in ``path`` (created if absent), named in write order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def _write(self, data: bytes, ts: int | None, sender: str | None) -> str:
        target = self.path / f"{self.count + 1:08d}.eml"
        with open(target, "xb") as f:
            f.write(data)
        return str(target)


def open_writer(fmt: Literal["mbox", "maildir", "eml"] | str, path: str | os.PathLike[str]) -> MailWriter:
    """The writer for ``fmt`` (one of :data:`FORMATS`) at ``path``."""
    if fmt == "mbox":
        return MboxWriter(path)
    if fmt == "maildir":
        return MaildirWriter(path)
    if fmt == "eml":
        return EmlDirWriter(path)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
