"""What every command handler shares: the context it gets, the output it returns, errors and exit
codes, the text columns of the tables and the lines written on stderr.

Light on purpose (standard library only at import time): the parser and ``main`` import it.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import functools
import os
import shutil
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..synchronous.connection import MailDatabase
    from ..synchronous.store import MessageStore

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Context",
    "Handler",
    "JsonLines",
    "Output",
    "StatusLine",
    "column",
    "data_dir_of",
    "database_error_text",
    "disk_full_message",
    "human_size",
    "iso_utc",
    "json_default",
    "note",
    "on_terminal",
    "one_line",
    "plural",
    "sender",
    "stderr",
    "stdout",
    "terminal_width",
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
class JsonLines:
    """What a command that lists things prints with ``--json``: one JSON object per line for
    each of ``items``, then ``trailer`` on a line of its own when there is one (``next_cursor``
    when there is more; search's engine and completeness), so the output pipes into ``jq``."""

    items: Sequence[object]
    trailer: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Output:
    """What a command prints, and how it exits; ``aecs_mongo.cli`` prints it.

    ``data``: the JSON-ready document printed with ``--json`` (None: nothing to print as JSON:
    the command streamed its output, or writes ``content``; a :class:`JsonLines`: one line per
    result). ``text``: the lines printed without
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
    """What a command handler gets: the parsed arguments, an open store on its database (and the
    database, for what spans its mailboxes), and ``emit``, which prints one item of a streaming
    command at once (as a JSON line with ``--json``)."""

    args: argparse.Namespace
    store: MessageStore
    database: MailDatabase
    emit: Callable[[Output], None]

    @property
    def json(self) -> bool:
        return bool(self.args.json)


#: A command's handler (:data:`aecs_mongo.commands.table.COMMANDS` names each one).
Handler = Callable[[Context], Output]


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


@functools.lru_cache(maxsize=4096)
def _char_cells(char: str) -> int:
    """Terminal cells of one character: wide and fullwidth (CJK) take two, combining marks and
    zero-width format characters none, the rest one (ambiguous-width ones too, as most terminals
    outside East Asian locales draw them)."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _cells(text: str) -> int:
    cells = len(text)  # one each, what _char_cells says of every ASCII character
    if not text.isascii():
        cells += sum((_char_cells(c) - 1) * text.count(c) for c in set(text) if not c.isascii())
    return cells


def one_line(text: object, width: int) -> str:
    """``text`` on one line, at most ``width`` terminal cells (cut with an ellipsis)."""
    flat = " ".join(str(text or "").split())
    if _cells(flat) <= width:
        return flat
    if flat.isascii():
        return flat[: max(width - 1, 0)] + "…"
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


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,000 messages``."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def human_size(size: float | None) -> str:
    """Bytes in the largest unit that keeps the number at or above 1: ``512 B``, ``4.2 kB``,
    ``181 MB``, ``1.3 GB`` (decimal units, as ``df -H`` and ``du --si``); ``-`` for None."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def terminal_width(default: int = 100) -> int:
    """Cells per line of the terminal on stdout (``$COLUMNS`` first); ``default`` when stdout is
    not a terminal (a pipe or a file gets whole lines, cut only at ``default``)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not stdout().isatty():
        return default
    given = getattr(stdout(), "terminal_size", None)  # in the warm command host: the client's
    return max(40, given[0] if given else shutil.get_terminal_size((default, 24)).columns)


# --- where the data lives ------------------------------------------------------------------------

#: The data directory of releases before the per-user one: ``./aecs-data`` where the command ran.
LEGACY_DATA_DIR = "aecs-data"
DATA_DIR_ENV = "AECS_DATA_DIR"
_NOTICES = "legacy-notices"


def user_data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The one data directory per user: ``$AECS_DATA_DIR``, else ``$XDG_DATA_HOME/aecs-mongo``
    (an absolute ``XDG_DATA_HOME`` only, as the XDG spec says), else ``~/.local/share/aecs-mongo``."""
    if env.get(DATA_DIR_ENV):
        return Path(env[DATA_DIR_ENV]).expanduser().absolute()
    xdg = env.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return (base / "aecs-mongo").absolute()


def data_dir_of(args: argparse.Namespace) -> Path:
    """The data directory a command uses: ``--data-dir``, else :func:`user_data_dir`. Without
    ``--data-dir``, an old ``./aecs-data`` in the working directory (a data directory of an
    earlier release) is pointed out once, with the option that reaches it: never moved."""
    given = getattr(args, "data_dir", None)
    if given:
        return Path(given).expanduser().resolve()
    data_dir = user_data_dir().resolve()
    legacy = Path(LEGACY_DATA_DIR).resolve()
    if legacy != data_dir and ((legacy / "db").is_dir() or (legacy / "credentials.json").exists()):
        _legacy_notice(data_dir, legacy)
    return data_dir


def _legacy_notice(data_dir: Path, legacy: Path) -> None:
    """Say once per old directory (remembered in the new one) where the mail now lives."""
    marks = data_dir / _NOTICES
    try:
        seen = marks.read_text(encoding="utf-8").splitlines() if marks.exists() else []
    except OSError:
        seen = []
    if str(legacy) in seen:
        return
    note(
        f"an old data directory is here: {legacy}; the data directory is now one per user, {data_dir}"
        f" (${DATA_DIR_ENV} changes it); to read the old one add --data-dir {LEGACY_DATA_DIR}"
        " (nothing was moved; this is said once)"
    )
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(marks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            out.write(f"{legacy}\n")
    except OSError:
        pass  # said again next time: better than never


def disk_full_message(path: str | os.PathLike[str], what: str = "") -> str:
    """``the disk is full: /data has 0 B free of 48 MB``, for the path where a write failed."""
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    try:
        usage = shutil.disk_usage(target)
        room = f" has {human_size(usage.free)} free of {human_size(usage.total)}"
    except OSError:
        room = ""
    return f"the disk is full: {path}{room}" + (f" ({what})" if what else "")


def database_error_text(exc: BaseException, data_dir: Path | None) -> str:
    """A database error on one line (a driver exception as the store layer translates it);
    under the embedded server (``data_dir``) a full disk is named as such, with the path and the
    free space (a server out of space may say nothing useful, or drop the connection)."""
    from ..embedded.server import low_on_disk
    from ..errors import DatabaseError, ServerUnavailableError
    from ..synchronous.driver_errors import translated

    found = translated(exc)
    message = str(found)
    refused = isinstance(found, DatabaseError) and not isinstance(found, ServerUnavailableError)
    if refused and "hint" in message.lower() and "index" in message.lower():
        message += " (no indexes yet: run 'aecs-mongo indexes' or 'aecs-mongo ingest' first)"
    message = " ".join(message.split())[:300] or type(exc).__name__
    if data_dir is not None and (low_on_disk(data_dir) or "no space left" in message.lower()):
        return disk_full_message(data_dir, f"the database said: {message}")
    return f"database: {message}"


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
