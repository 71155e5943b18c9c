"""What every command handler shares: the context it gets, the output it returns, errors and exit
codes, the text columns of the tables and the lines written on stderr.

Light on purpose (standard library only at import time): the parser and ``main`` import it.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo.database import Database

    from ..synchronous.store import MessageStore

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Context",
    "Handler",
    "Handlers",
    "Output",
    "StatusLine",
    "column",
    "iso_utc",
    "json_default",
    "note",
    "on_terminal",
    "one_line",
    "sender",
    "stderr",
    "stdout",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as ``aecs-mongo: error: ...`` with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Output:
    """What a command prints, and how it exits; ``aecs_mongo.cli`` prints it.

    ``data``: the JSON-ready document printed with ``--json`` (None: nothing to print as JSON:
    the command streamed its output, or writes ``content``). ``text``: the lines printed without
    ``--json`` (a generator renders only when they are printed). ``content``: written to stdout
    as it is, without a newline (``show --raw`` bytes, ``show --html``). ``notes``: written to
    stderr after the output, as ``aecs-mongo: <note>``. ``code``: the exit code.
    """

    data: object = None
    text: Iterable[str] = ()
    code: int = EXIT_OK
    content: str | bytes | None = None
    notes: Sequence[str] = field(default_factory=tuple)


@dataclass
class Context:
    """What a command handler gets: the parsed arguments, an open store on its database, and
    ``emit``, which prints one item of a streaming command at once (as a JSON line with ``--json``)."""

    args: argparse.Namespace
    store: MessageStore
    db: Database[dict[str, Any]]
    emit: Callable[[Output], None]

    @property
    def json(self) -> bool:
        return bool(self.args.json)


Handler = Callable[[Context], Output]
#: The handlers of one module, by command name.
Handlers = Mapping[str, Handler]


# --- values as text ----------------------------------------------------------------------------


def iso_utc(value: dt.datetime) -> str:
    """``2026-11-02T09:15:00Z``: a naive time is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def json_default(value: object) -> object:
    """What ``json`` cannot encode: times in ISO 8601 UTC, bytes in base64, the rest as ``str``."""
    if isinstance(value, dt.datetime):
        return iso_utc(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def sender(message: Mapping[str, Any]) -> str:
    """``Name <address>`` (or the address) of a message's ``from``, ``?`` without one."""
    sent_by = message.get("from")
    if not sent_by:
        return "?"
    name, address = sent_by.get("name"), sent_by.get("email") or "?"
    return f"{name} <{address}>" if name else str(address)


def _char_cells(char: str) -> int:
    """Terminal cells of one character: wide and fullwidth (CJK) take two, combining marks and
    zero-width format characters none, the rest one (ambiguous-width ones too, as most terminals
    outside East Asian locales draw them)."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _cells(text: str) -> int:
    return sum(_char_cells(c) for c in text)


def one_line(text: object, width: int) -> str:
    """``text`` on one line, at most ``width`` terminal cells (cut with an ellipsis)."""
    flat = " ".join(str(text or "").split())
    if _cells(flat) <= width:
        return flat
    kept, used = [], 0
    for char in flat:
        cells = _char_cells(char)
        if used + cells > width - 1:  # room for the ellipsis
            break
        kept.append(char)
        used += cells
    return "".join(kept) + "…"


def column(text: object, width: int) -> str:
    """``one_line`` padded to exactly ``width`` cells, so the next column lines up."""
    line = one_line(text, width)
    return line + " " * (width - _cells(line))


# --- stderr: notes and progress lines ----------------------------------------------------------


def stdout() -> IO[str]:
    return sys.stdout


def stderr() -> IO[str]:
    return sys.stderr


def note(text: str) -> None:
    """``aecs-mongo: <text>`` on stderr."""
    # on a terminal, first clear a progress line the note would otherwise be appended to
    clear = "\r\x1b[K" if stderr().isatty() else ""
    print(f"{clear}aecs-mongo: {text}", file=stderr())


class StatusLine:
    """One line of progress on stderr, redrawn at most every 0.1 s (``force``: now), and only
    when ``enabled`` (stderr is a terminal); ``close`` clears it. Every command's progress uses it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0
        self._shown = False

    def due(self, *, force: bool = False) -> bool:
        """Whether a redraw now would be shown (callers skip building the text otherwise)."""
        return self.enabled and (force or not self._shown or time.monotonic() - self._last >= 0.1)

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.due(force=force):
            return
        self._last = time.monotonic()
        stderr().write("\r\x1b[K" + text)
        stderr().flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            stderr().write("\r\x1b[K")
            stderr().flush()
            self._shown = False


def on_terminal(no_progress: bool = False) -> bool:
    """Whether to show a progress line: stderr is a terminal and ``--no-progress`` was not given."""
    return stderr().isatty() and not no_progress
