"""The POP3 mail pipeline over a ``MessageStore``: download, dispatch, migration.

Mail is downloaded over POP3 into a message store, then the stored mail is handed to handlers by
To address; handlers delete what they have dealt with. This module is that loop, with MongoDB as
the store where it used to be a GDBM file keyed by UIDL:

- ``download()`` fetches only the UIDLs the store has not seen, stores each message exactly as the
  server sent it, and deletes on the server (optionally) only what the store confirmed.
- ``dispatch()`` rebuilds each stored message as an ``EmailMessage`` and calls one handler per
  route with its batch of ``(message_id, message)`` pairs.
- ``migrate_from_uidl_store()`` seeds the store from the old UIDL-keyed GDBM file.

Everything here is synchronous and uses only the store's mailbox surface (``add``,
``contains_uidl``, ``message_ids``, ``get_email``), so it works on ``MessageStore`` and on
anything else that offers those four methods.

Errors: ``MailboxError`` (a child of ``AecsMongoError``) for the mail server and the GDBM file,
with ``MailboxConnectionError`` (unreachable, TLS, dropped connection, protocol) and
``MailboxAuthError`` (credentials refused) below it; ``DispatchError`` (also an
``AecsMongoError``) when handlers raise.
A message the store refuses is never an exception: it is a ``failed`` entry in the report, and
the run goes on with the next one.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email.utils
import logging
import poplib
import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterator, Mapping
from email.message import EmailMessage
from os import PathLike, fspath
from types import ModuleType
from typing import IO, Any, BinaryIO, Literal, Protocol, TypeVar, cast

from ..errors import (
    AecsMongoError,
    DatabaseError,
    DispatchError,
    MailboxAuthError,
    MailboxConnectionError,
    MailboxError,
)

# the reports live with the other results (so errors.py can name them without importing this
# module); imported here, where they were first defined, so old imports keep working
from ..results import DispatchReport, DownloadReport, MigrationReport
from ..synchronous.capabilities import DURABLE_WRITES

__all__ = [
    "DURABLE",
    "DispatchError",
    "DispatchReport",
    "DownloadReport",
    "Handler",
    "MailboxAuthError",
    "MailboxConnectionError",
    "MailboxError",
    "MailboxStore",
    "MigrationReport",
    "dispatch",
    "download",
    "durable_store",
    "migrate_from_uidl_store",
]

log = logging.getLogger(__name__)

Security = Literal["ssl", "starttls", "plain"]
Handler = Callable[[list[tuple[str, EmailMessage]]], object]
"""A dispatch handler: takes its whole batch of ``(message_id, EmailMessage)`` pairs at once."""

# poplib refuses lines over 2048 bytes (RFC 1939's limit for commands and responses), but a
# message line served by RETR can be far longer: unwrapped HTML and base64 without line breaks
# are common in real mail. The limit below only guards against a server that never sends LF.
_MAX_LINE = 64 * 1024 * 1024

# RFC 3206 response codes that say the failure is the server's, not the credentials'.
_NOT_AUTH_CODES = (b"[SYS/TEMP]", b"[SYS/PERM]", b"[IN-USE]", b"[LOGIN-DELAY]")


class MailboxStore(Protocol):
    """The part of ``MessageStore`` this module uses (its mailbox surface)."""

    def add(self, uidl: str, raw_bytes: bytes) -> str: ...

    def contains_uidl(self, uidl: str) -> bool: ...

    def message_ids(self) -> list[str]: ...

    def get_email(self, message_id: str) -> EmailMessage | None: ...


# --- errors --------------------------------------------------------------------------------------


# --- migration from the old GDBM store ---------------------------------------------------------


def migrate_from_uidl_store(store: MailboxStore, path: str | PathLike[str]) -> MigrationReport:
    """Copy every message of the old UIDL-keyed GDBM file into ``store``; idempotent.

    The old program kept each message as the latin-1 decoding of its raw bytes, a ``str``, and
    Python's ``dbm.gnu`` writes a ``str`` (key or value) as its UTF-8 encoding. So the bytes on
    disk are ``raw.decode("latin-1").encode("utf-8")`` and this reverses it exactly:
    ``value.decode("utf-8").encode("latin-1")`` gives back the original bytes 0x00-0xFF. A value
    that is not valid UTF-8, or that holds a character above U+00FF, was not written that way:
    it is reported in ``failed`` (never guessed at) and the migration goes on. Bytes are kept as
    they are: no BOM stripping or other normalization (raw.eml stays byte-exact).

    A UIDL the store already knows is skipped, so a second run changes nothing. The file is read
    with ``dbm.gnu`` when the interpreter has it, else with the ``gdbm_dump`` tool (Debian:
    ``gdbmtool``); a file neither can read is a ``MailboxError``.
    """
    report = MigrationReport()
    known_ids = set(store.message_ids())
    for key, value in _gdbm_records(fspath(path)):
        try:
            uidl = key.decode("utf-8")
        except UnicodeDecodeError as exc:
            report.failed.append((key.decode("utf-8", "backslashreplace"), f"UIDL key is not UTF-8: {exc}"))
            continue
        if store.contains_uidl(uidl):
            report.skipped += 1
            continue
        try:
            raw = value.decode("utf-8").encode("latin-1")
        except UnicodeError as exc:
            report.failed.append((uidl, f"value is not a latin-1 string written by dbm: {exc}"))
            continue
        try:
            message_id = store.add(uidl, raw)
        except AecsMongoError as exc:
            report.failed.append((uidl, f"the store refused it: {type(exc).__name__}: {exc}"))
            continue
        report.added += 1
        if message_id in known_ids:
            report.duplicates += 1
        known_ids.add(message_id)
    return report


def _gdbm_records(path: str) -> Iterator[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of a GDBM file, as bytes, by whichever reader is available."""
    try:
        import dbm.gnu as gnu
    except ImportError:
        yield from _gdbm_dump_records(path)
        return
    with _open_gnu(gnu, path) as gdbm_file:
        key = gdbm_file.firstkey()
        while key is not None:
            yield key, gdbm_file[key]
            key = gdbm_file.nextkey(key)


def _open_gnu(gnu: ModuleType, path: str) -> Any:
    """``dbm.gnu.open(path, "r")``, its failure as a ``MailboxError``."""
    try:
        return gnu.open(path, "r")
    except gnu.error as exc:
        raise MailboxError(f"cannot open GDBM file {path}: {exc}") from exc


def _gdbm_dump_records(path: str) -> Iterator[tuple[bytes, bytes]]:
    """Stream a GDBM file through ``gdbm_dump --format=ascii``, for interpreters without dbm.gnu.

    The ASCII dump is GDBM's documented portable format: a ``#`` header, then per datum a
    ``#:len=N`` line followed by base64 lines, key and value alternating, then ``#:count=N``.
    It is parsed as a stream so a large mail store never has to fit in memory twice.
    """
    tool = shutil.which("gdbm_dump")
    if tool is None:
        raise MailboxError(
            f"cannot read GDBM file {path}: this Python has no dbm.gnu and gdbm_dump is not on PATH"
            " (Debian: apt-get install gdbmtool)"
        )
    with subprocess.Popen([tool, "--format=ascii", path, "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            yield from _parse_ascii_dump(proc.stdout, path)
        finally:
            proc.stdout.close()
            errors = proc.stderr.read().decode("utf-8", "replace").strip()
            returncode = proc.wait()
        if returncode != 0:
            raise MailboxError(f"gdbm_dump failed on {path} (exit {returncode}): {errors}")


def _parse_ascii_dump(stream: IO[bytes], path: str) -> Iterator[tuple[bytes, bytes]]:
    data: list[bytes] = []  # data of the current datum: base64 lines
    length = -1  # declared length of the current datum, -1 outside one
    pending_key: bytes | None = None
    count = 0
    in_header = True

    def finish() -> bytes:
        try:
            decoded = base64.b64decode(b"".join(data), validate=True)
        except binascii.Error as exc:
            raise MailboxError(f"malformed GDBM dump of {path}: {exc}") from exc
        if len(decoded) != length:
            raise MailboxError(f"malformed GDBM dump of {path}: datum of {len(decoded)} bytes, declared {length}")
        return decoded

    for raw_line in stream:
        line = raw_line.rstrip(b"\r\n")
        if in_header:
            in_header = line != b"# End of header"
            continue
        if not line.startswith(b"#"):
            if length < 0:
                raise MailboxError(f"malformed GDBM dump of {path}: data outside a datum")
            data.append(line)
            continue
        if length >= 0:
            datum = finish()
            data, length = [], -1
            if pending_key is None:
                pending_key = datum
            else:
                yield pending_key, datum
                pending_key = None
                count += 1
        try:
            if line.startswith(b"#:len="):
                length = int(line[6:])
            elif line.startswith(b"#:count=") and (pending_key is not None or int(line[8:]) != count):
                raise MailboxError(f"malformed GDBM dump of {path}: record count mismatch")
        except ValueError:
            raise MailboxError(f"malformed GDBM dump of {path}: {line[:40]!r}") from None
    if in_header:
        raise MailboxError(f"malformed GDBM dump of {path}: no data section")


# --- POP3 download -------------------------------------------------------------------------------


class _LongLines:
    """``poplib._getline`` without the 2048-byte line limit and without altering line content.

    The stdlib version also drops the last byte of a line cut short by a dropped connection and
    strips a leading CR from LF-terminated lines; here a line is returned without its CRLF (or
    LF) and nothing else, and a line without LF means the connection broke mid-line.
    """

    file: BinaryIO

    def _getline(self) -> tuple[bytes, int]:
        line = self.file.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise poplib.error_proto("-ERR line too long")
        if not line:
            raise poplib.error_proto("-ERR EOF")
        if not line.endswith(b"\n"):
            raise poplib.error_proto("-ERR EOF in the middle of a line")
        cut = 2 if line.endswith(b"\r\n") else 1
        return line[:-cut], len(line)


class _POP3(_LongLines, poplib.POP3):
    pass


class _POP3SSL(_LongLines, poplib.POP3_SSL):
    pass


def download(
    store: MailboxStore,
    host: str,
    port: int,
    user: str,
    password: str,
    *,
    security: Security = "ssl",
    delete_on_server: bool = False,
    timeout: float = 30,
    ssl_context: ssl.SSLContext | None = None,
) -> DownloadReport:
    """Download every message whose UIDL the store has not seen; optionally delete on the server.

    ``security``: ``"ssl"`` (POP3 over TLS, port 995 usually), ``"starttls"`` (STLS on the plain
    port; a server that refuses STLS is an error, never a silent downgrade) or ``"plain"``.
    ``ssl_context`` defaults to ``ssl.create_default_context()`` (certificates verified).

    Each message is stored as the bytes the server sent: the RETR lines, dot-unstuffed, each
    ended by CRLF (``b"\\r\\n".join(lines) + b"\\r\\n"``). That is the message in its wire form:
    a server that keeps mail with LF endings (Dovecot's maildir) serves it with CRLF, and the
    store keeps what was served.

    With ``delete_on_server`` a message is marked for deletion (DELE) only after ``store.add``
    returned, and so are messages stored by an earlier run (their UIDL is known), so a run cut
    short is finished by the next: those last, once a durable write of this run or a flush
    (``fsync``) made their earlier writes durable too; a server that refuses the flush keeps
    them (said once) until a run that stores something new. The server deletes nothing before QUIT, so a dropped
    connection loses nothing: the stored messages are found again and skipped. The writes of a
    download that deletes on the server are durable before the DELE: they use ``DURABLE`` write
    concern (``{w: "majority", j: true}``: on disk, in the journal of a majority) when ``store``
    is a ``MessageStore``; any other store is trusted to write durably.

    Raises ``MailboxConnectionError`` (unreachable, TLS failure, dropped connection) and
    ``MailboxAuthError`` (credentials refused); the exception's ``report`` tells what was
    already stored. A message the store refuses (``AecsMongoError``) is a ``failed`` entry and
    stays on the server. Any other exception from the store (the database is down) propagates
    after QUIT, which commits only the deletions of messages already stored.
    """
    report = DownloadReport()
    if delete_on_server:
        store = durable_store(store)
    conn = _connect(host, port, security, timeout, ssl_context)
    try:
        _login(conn, user, password)
        to_delete = 0
        stored_before: list[int] = []  # by an earlier run, maybe not durably: deleted last
        for number, uidl in _uidl_listing(conn):
            if _from_store(store.contains_uidl, uidl):
                report.skipped += 1
                stored_before.append(number)
                continue
            _, lines, _ = conn.retr(number)
            raw = b"\r\n".join(lines) + b"\r\n"
            try:
                _from_store(store.add, uidl, raw)
            except AecsMongoError as exc:
                report.failed.append((uidl, f"the store refused it: {type(exc).__name__}: {exc}"))
                continue
            report.downloaded += 1
            if delete_on_server:
                conn.dele(number)
                to_delete += 1
        # a durable write of this run made the earlier writes durable too (one journal, in
        # order); without one, a flush does
        if delete_on_server and stored_before and (report.downloaded or _from_store(_flush, store)):
            for number in stored_before:
                conn.dele(number)
                to_delete += 1
        conn.quit()  # the server commits the deletions here
        report.deleted_on_server = to_delete
    except _StoreFailed as failure:
        # the store broke (not a refusal): commit the deletions of what it did store, re-raise
        _quit(conn)
        raise failure.original from None
    except poplib.error_proto as exc:
        raise MailboxConnectionError(f"POP3 protocol error from {host}:{port}: {_text(exc)}", report=report) from exc
    except OSError as exc:
        raise MailboxConnectionError(f"connection to {host}:{port} failed: {exc}", report=report) from exc
    finally:
        _close(conn)
    return report


DURABLE = DURABLE_WRITES
"""Write concern of a download that deletes on the server: acknowledged once journaled (on disk)
by a majority (``j: true`` syncs the server's log on that commit)."""

_S = TypeVar("_S", bound=MailboxStore)


def durable_store(store: _S) -> _S:
    """``store`` writing with ``DURABLE`` write concern when it is a ``MessageStore``; any other
    store (a wrapper too: its own ``add`` must stay in the path) is trusted to write durably."""
    from ..synchronous.store import MessageStore

    if not isinstance(store, MessageStore):
        return store
    return cast(_S, store.with_durable_writes())


def _flush(store: MailboxStore) -> bool:
    """Make everything the store wrote so far durable: the ``fsync`` command (a checkpoint) on a
    ``MessageStore``'s server; other stores are trusted. False when the server refuses it."""
    from ..synchronous.store import MessageStore

    if not isinstance(store, MessageStore):
        return True
    try:
        store.checkpoint()
    except DatabaseError as exc:
        if "fsync" not in _said:
            _said.add("fsync")
            log.warning(
                "the server refused fsync (%s): messages stored by an earlier run stay on the POP3 server "
                "until a download that stores new mail makes them durable",
                exc,
            )
        return False
    return True


_said: set[str] = set()


class _StoreFailed(Exception):
    """Carries an unexpected store exception past the POP3 error handlers, which must not
    mistake it (an ``OSError`` from the database side, say) for a broken POP3 connection."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


_T = TypeVar("_T")


def _from_store(call: Callable[..., _T], *args: object) -> _T:
    """Call the store; ``AecsMongoError`` (a refusal) passes, anything else becomes ``_StoreFailed``."""
    try:
        return call(*args)
    except AecsMongoError:
        raise
    except BaseException as exc:
        raise _StoreFailed(exc) from exc


def _connect(host: str, port: int, security: Security, timeout: float, context: ssl.SSLContext | None) -> poplib.POP3:
    if security not in ("ssl", "starttls", "plain"):
        raise ValueError(f"security must be 'ssl', 'starttls' or 'plain', not {security!r}")
    if security != "plain" and context is None:
        context = ssl.create_default_context()
    try:
        if security == "ssl":
            return _POP3SSL(host, port, timeout=timeout, context=context)
        conn = _POP3(host, port, timeout=timeout)
    except (poplib.error_proto, OSError) as exc:
        raise MailboxConnectionError(f"cannot connect to POP3 server {host}:{port}: {_text(exc)}") from exc
    if security == "starttls":
        try:
            conn.stls(context)
        except (poplib.error_proto, OSError) as exc:
            _close(conn)
            raise MailboxConnectionError(f"STARTTLS with {host}:{port} failed: {_text(exc)}") from exc
    return conn


def _login(conn: poplib.POP3, user: str, password: str) -> None:
    """USER/PASS; an ``-ERR`` is a credentials error unless its RFC 3206 code blames the server."""
    try:
        conn.user(user)
        conn.pass_(password)
    except poplib.error_proto as exc:
        response = exc.args[0] if exc.args and isinstance(exc.args[0], bytes) else b""
        if response.startswith(b"-ERR") and not any(code in response for code in _NOT_AUTH_CODES):
            raise MailboxAuthError(f"the POP3 server refused the login of {user!r}: {_text(exc)}") from exc
        raise MailboxConnectionError(f"POP3 login of {user!r} failed: {_text(exc)}") from exc


def _uidl_listing(conn: poplib.POP3) -> list[tuple[int, str]]:
    """``(message number, UIDL)`` for every message on the server, in server order."""
    _, lines, _ = conn.uidl()
    listing = []
    for line in lines:
        # RFC 1939 UIDLs are printable ASCII; latin-1 keeps any other byte stable and reversible
        number, _, uidl = line.decode("latin-1").partition(" ")
        if not (number.isascii() and number.isdigit()):
            raise MailboxConnectionError(f"the POP3 server sent a malformed UIDL line: {line[:80]!r}")
        listing.append((int(number), uidl.strip()))
    return listing


def _quit(conn: poplib.POP3) -> None:
    with contextlib.suppress(poplib.error_proto, OSError):
        conn.quit()


def _close(conn: poplib.POP3) -> None:
    """Close without raising: after a failed TLS handshake or a drop the socket may be gone."""
    with contextlib.suppress(OSError):
        conn.close()


def _text(exc: BaseException) -> str:
    if exc.args and isinstance(exc.args[0], bytes):
        return exc.args[0].decode("utf-8", "replace")
    return str(exc)


# --- dispatch ------------------------------------------------------------------------------------


def dispatch(
    store: MailboxStore,
    routes: Mapping[str, Handler],
    *,
    default: Handler | None = None,
) -> DispatchReport:
    """Hand every stored message to the handler of its recipient; one call per handler.

    ``routes`` maps a recipient address (compared case-insensitively) to a handler. A message
    goes to exactly one handler: that of its first routed address, To addresses first (in
    header order), then Cc, so no message is processed twice. A message no route matches goes
    to ``default`` when given; otherwise it stays in the store and is listed in ``unrouted``.

    Handlers receive ``[(message_id, EmailMessage), ...]`` oldest first and call
    ``store.delete(message_id)`` for what they have dealt with; what they leave is
    dispatched again next time. Every handler runs even if another raises; afterwards the
    first failure is raised as ``DispatchError`` (with the report and every error).
    """
    table: dict[str, tuple[str, Handler]] = {}
    for address, handler in routes.items():
        if not isinstance(address, str):
            raise TypeError(f"route addresses must be str, not {type(address).__name__}")
        table[address.strip().lower()] = (address, handler)

    report = DispatchReport()
    batches: dict[str, list[tuple[str, EmailMessage]]] = {}
    leftovers: list[tuple[str, EmailMessage]] = []
    for message_id in store.message_ids():
        message = store.get_email(message_id)
        if message is None:
            report.missing += 1
            continue
        route = next((table[a] for a in _recipients(message) if a in table), None)
        if route is not None:
            batches.setdefault(route[0], []).append((message_id, message))
        elif default is not None:
            leftovers.append((message_id, message))
        else:
            report.unrouted.append(message_id)

    errors: dict[str, Exception] = {}
    handlers = {name: handler for name, handler in table.values()}
    for name, batch in batches.items():
        report.routed[name] = len(batch)
        try:
            handlers[name](batch)
        except Exception as exc:
            errors[name] = exc
    if default is not None and leftovers:
        report.defaulted = len(leftovers)
        try:
            default(leftovers)
        except Exception as exc:
            errors["<default>"] = exc
    if errors:
        first = next(iter(errors.values()))
        raise DispatchError(f"{len(errors)} handler(s) failed: {sorted(errors)}", report=report, errors=errors) from (
            first
        )
    return report


def _recipients(message: EmailMessage) -> list[str]:
    """Lowercased addr-specs of To, then Cc, in header order, without duplicates."""
    values: list[str] = []
    for name in ("to", "cc"):
        values.extend(str(v) for v in message.get_all(name, []))
    seen: dict[str, None] = {}
    for _, address in email.utils.getaddresses(values):
        address = address.strip().lower()
        if address:
            seen.setdefault(address, None)
    return list(seen)
