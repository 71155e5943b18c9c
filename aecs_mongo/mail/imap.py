"""Bring an IMAP account into the store, incrementally, and keep it in step: ``sync``.

A folder's UIDs only grow while its UIDVALIDITY stays the same, so a saved position per folder
(``imap_folders``: UIDVALIDITY, the highest UID dealt with, HIGHESTMODSEQ) tells what is new.
Per folder: ``EXAMINE`` (read-only; ``BODY.PEEK[]`` never sets ``\\Seen``); the known messages'
flag changes brought in as tags (CONDSTORE's ``CHANGEDSINCE`` where the server offers it, else a
FLAGS listing; only what changed on the server changes in the store); then the new UIDs fetched
in batches bounded in messages and bytes and handed to ``store.store_iter`` as the server sent
them. Source records (``imap_sources``) and then the position are written only after the store
committed a batch, so the position never runs ahead of the store: a run that dies is continued
by the next, which at worst fetches a batch again and finds it ``present``. Another UIDVALIDITY
means the folder was recreated: it is read again from UID 1. Nothing is written to the server.

Failures: refused credentials are ``MailboxAuthError``; an unreachable server, TLS, a server
without STARTTLS under ``security="starttls"`` (there is no plain mode), a timeout, a dropped
connection or BYE are ``MailboxConnectionError`` (with the report so far as ``.report``). A
message the store refuses is a ``failed`` entry and the position moves past it; a folder that
cannot be selected is an ``error`` on its folder report. The client is the standard library's
``imaplib`` (the manual's Operations page says why), so the store is a blocking ``MessageStore``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import imaplib
import logging
import re
import ssl
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..errors import MailboxAuthError, MailboxConnectionError
from ..pure.flags import imap_tags, parse_imap_flags
from ..pure.imap_records import (
    account_name,
    decode_folder,
    flag_change,
    folder_document,
    folder_id,
    plan_batches,
    plan_uid_lookups,
    same_length_runs,
    source_document,
    uid_ranges,
)
from ..pure.keys import check_str, message_key
from ..pure.lifecycle import batches
from ..results import ImapFolderReport, ImapSyncReport, StoreResult

__all__ = [
    "ALL_FOLDERS",
    "FolderPosition",
    "ImapFolderReport",
    "ImapSource",
    "ImapSyncReport",
    "Security",
    "SyncStore",
    "positions",
    "sources",
    "sync",
]

log = logging.getLogger("aecs_mongo.imap")

ALL_FOLDERS = "all"
Security = Literal["ssl", "starttls"]

_DEFAULT_PORTS = {"ssl": 993, "starttls": 143}
_MAX_BATCH = 1000
# RFC 5530 response codes that say a failed login is the server's trouble, not the credentials'
_NOT_AUTH_CODES = ("[UNAVAILABLE]", "[SERVERBUG]", "[INUSE]", "[LIMIT]", "[CONTACTADMIN]")
# Message-IDs in one store.tag call, source records in one update: statements of 100 ids cost
# mongod a few more round trips than of 1,000, while the embedded server answers an $in in
# time quadratic in its length
_TAG_BATCH = 100

_UID = re.compile(rb"\bUID (\d+)")
_SIZE = re.compile(rb"\bRFC822\.SIZE (\d+)")
_INTERNALDATE = re.compile(rb'\bINTERNALDATE "([^"]+)"')
_BODY_LITERAL = re.compile(rb"\bBODY\[\] \{\d+\}$")
_LIST = re.compile(rb'^\((?P<flags>[^)]*)\) (?:NIL|"(?:[^"\\]|\\.)*"|\S+) ?(?P<name>.*)$')


class SyncStore(Protocol):
    """The part of ``MessageStore`` ``sync`` uses."""

    mailbox_id: str

    @property
    def imap_records(self) -> Any: ...

    def store_iter(
        self,
        items: Iterable[Any],
        batch_size: int = ...,
        on_error: Callable[[int, Any, Exception], None] | None = ...,
    ) -> Iterator[StoreResult]: ...

    def tag(self, target: Any, add: Iterable[str] = ..., remove: Iterable[str] = ...) -> Any: ...


@dataclass(frozen=True)
class ImapSource:
    """One place a stored message was seen: account, folder (decoded), UIDVALIDITY, UID."""

    account: str
    folder: str
    uidvalidity: int
    uid: int


@dataclass(frozen=True)
class FolderPosition:
    """A folder's saved position: the next sync fetches UIDs above ``uid`` (same UIDVALIDITY)."""

    account: str
    folder: str
    uidvalidity: int
    uid: int
    updated_at: dt.datetime | None


# --- reading the records -----------------------------------------------------------------------


def sources(store: SyncStore, message_id: str) -> list[ImapSource]:
    """Every place the message was seen by a sync (its folders), sorted; [] when none."""
    rows = store.imap_records.sources_of(message_key(check_str(message_id, "message_id")))
    found = [ImapSource(r["account"], r["folder"], r["uidvalidity"], r["uid"]) for r in rows]
    return sorted(found, key=lambda s: (s.account, s.folder, s.uidvalidity, s.uid))


def positions(store: SyncStore, account: str | None = None) -> list[FolderPosition]:
    """The saved folder positions of the mailbox (of one account when given), sorted."""
    rows = store.imap_records.positions(None if account is None else check_str(account, "account"))
    found = [FolderPosition(r["account"], r["folder"], r["uidvalidity"], r["uid"], r.get("updatedAt")) for r in rows]
    return sorted(found, key=lambda p: (p.account, p.folder))


# --- sync ----------------------------------------------------------------------------------------


class _ServerFailed(Exception):
    """An IMAP failure (protocol, socket, TLS, BYE) carried past the store, which must not
    mistake it for one of its own, nor let an ``OSError`` of the database pass for it."""

    def __init__(self, what: str, original: BaseException) -> None:
        super().__init__(f"{what}: {_text(original)}")
        self.what = what
        self.original = original


def sync(
    store: SyncStore,
    host: str,
    user: str,
    password: str,
    *,
    folders: Sequence[str] | Literal["all"] = ("INBOX",),
    security: Security = "ssl",
    port: int | None = None,
    batch_size: int = 100,
    batch_bytes: int = 32 * 1024 * 1024,
    timeout: float = 60.0,
    ssl_context: ssl.SSLContext | None = None,
    account: str | None = None,
    progress: Callable[[ImapSyncReport, ImapFolderReport], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> ImapSyncReport:
    """Fetch every message of ``folders`` above each folder's saved position into ``store``.

    ``security``: ``"ssl"`` (IMAPS, port 993 by default) or ``"starttls"`` (port 143; a server
    that does not offer STARTTLS is a ``MailboxConnectionError`` before anything is sent).
    ``ssl_context`` defaults to ``ssl.create_default_context()`` (certificates verified).
    ``batch_size`` (1..1000) and ``batch_bytes`` bound one FETCH and one store batch.
    ``timeout``: seconds a socket read may wait. ``account``: how the records name the account
    (default ``user@host``). ``progress(report, folder_report)`` is called after each message;
    ``stop()`` is asked before each batch is fetched and each folder is opened: when it says
    True the run ends after the batch in hand (``report.interrupted``).
    """
    check_str(host, "host")
    check_str(user, "user")
    check_str(password, "password")
    if security not in _DEFAULT_PORTS:
        raise ValueError(f"security must be 'ssl' or 'starttls', not {security!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= _MAX_BATCH:
        raise ValueError(f"batch_size must be an int between 1 and {_MAX_BATCH}")
    if isinstance(batch_bytes, bool) or not isinstance(batch_bytes, int) or batch_bytes < 1:
        raise ValueError("batch_bytes must be a positive int")
    wanted = _wanted_folders(folders)
    report = ImapSyncReport(account_name(user, host) if account is None else check_str(account, "account"))
    port = _DEFAULT_PORTS[security] if port is None else port
    where = f"{host}:{port}"
    conn = _connect(host, port, security, timeout, ssl_context)
    try:
        _login(conn, user, password)
        run = _Run(store, conn, report, batch_size, batch_bytes, progress, stop or (lambda: False))
        _enable_condstore(conn)  # then EXAMINE reports HIGHESTMODSEQ
        for raw, display in _select_targets(conn, wanted, report):
            if run.stop():
                report.interrupted = True
                break
            run.folder(raw, display)
            if report.interrupted:
                break
        with contextlib.suppress(imaplib.IMAP4.error, OSError):
            conn.logout()
    except _ServerFailed as failure:
        raise MailboxConnectionError(f"IMAP server {where}: {failure}", report=report) from failure.original
    except imaplib.IMAP4.error as exc:  # every IMAP call is wrapped; this is the safety net
        raise MailboxConnectionError(f"IMAP server {where}: {_text(exc)}", report=report) from exc
    finally:
        _close(conn)
    return report


def _wanted_folders(folders: Sequence[str] | str) -> list[str] | None:
    """None for every folder; else the names asked for, in order, without repeats."""
    if isinstance(folders, str):
        if folders == ALL_FOLDERS:
            return None
        raise TypeError(f"folders must be a sequence of folder names or {ALL_FOLDERS!r}, not one str")
    names = [check_str(name, "folder") for name in folders]
    if not names:
        raise ValueError("folders is empty: name at least one folder, or pass 'all'")
    return list(dict.fromkeys(names))


class _Run:
    """One sync's state over its folders: the connection, the store, the report."""

    def __init__(
        self,
        store: SyncStore,
        conn: imaplib.IMAP4,
        report: ImapSyncReport,
        batch_size: int,
        batch_bytes: int,
        progress: Callable[[ImapSyncReport, ImapFolderReport], None] | None,
        stop: Callable[[], bool],
    ) -> None:
        self.store = store
        self.conn = conn
        self.report = report
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.progress = progress
        self.stop = stop
        self.records = store.imap_records

    def folder(self, raw: bytes, display: str) -> None:
        folder = ImapFolderReport(display)
        self.report.folders.append(folder)
        status = _examine(self.conn, raw)
        if status is None:
            folder.error = "the server refused to open it (EXAMINE failed)"
            return
        uidvalidity, uidnext, exists, modseq = status
        folder.uidvalidity = uidvalidity
        last, saved_modseq = self._position(folder, uidvalidity)
        if last > 0 and exists > 0:
            self._update_flags(folder, uidvalidity, last, saved_modseq, modseq)
        if modseq != saved_modseq:  # the flags up to `last` are in the store as of `modseq`
            fid = folder_id(self.store.mailbox_id, self.report.account, folder.folder)
            self.records.set_modseq(fid, uidvalidity, modseq)
        if exists == 0 or (uidnext is not None and uidnext <= last + 1):
            log.debug("%s: nothing above UID %d", display, last)
            return
        listing = [(uid, size) for uid, size in _list_sizes(self.conn, last) if uid > last]
        if not listing:
            return
        folder.listed = len(listing)
        batches = plan_batches(listing, self.batch_size, self.batch_bytes)
        _FolderSync(self, folder, uidvalidity, batches).run()

    def _update_flags(
        self, folder: ImapFolderReport, uidvalidity: int, last: int, saved: int | None, modseq: int | None
    ) -> None:
        """Bring the flags of UIDs ``1..last`` into the store (see the module docstring)."""
        since = saved if modseq is not None else None
        if since is not None and modseq is not None and modseq <= since:
            return  # HIGHESTMODSEQ unchanged: no flag changed
        server = _fetch_flags(self.conn, last, since)
        account = self.report.account
        changes: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
        records: dict[tuple[str, ...], list[str]] = {}  # new flags -> the records to take them
        for lookup in plan_uid_lookups(server):
            for record in self.records.flags_in(account, folder.folder, uidvalidity, lookup):
                tags = server.get(record["uid"])
                if tags is None:
                    continue  # in the range, not in the answer: unchanged
                recorded = record.get("flags")
                change = flag_change(recorded, tags)
                if change != ((), ()):
                    changes.setdefault(change, []).append(record["messageId"])
                if recorded is None or change != ((), ()):
                    records.setdefault(tags, []).append(record["_id"])
        for (add, remove), message_ids in changes.items():
            for ids in batches(message_ids, _TAG_BATCH):
                self.store.tag(ids, add=add, remove=remove)
            folder.flags_changed += len(message_ids)
        for tags, record_ids in records.items():  # one statement per set of flags, as the tags
            for part in batches(record_ids, _TAG_BATCH):
                self.records.set_flags(part, tags)

    def _position(self, folder: ImapFolderReport, uidvalidity: int) -> tuple[int, int | None]:
        """The saved UID to continue after (0: from the start), resetting a recreated folder, and
        the saved HIGHESTMODSEQ (None: none)."""
        mailbox, account = self.store.mailbox_id, self.report.account
        fid = folder_id(mailbox, account, folder.folder)
        saved = self.records.position(fid)
        if saved is not None and saved.get("uidvalidity") == uidvalidity:
            folder.position = int(saved.get("uid", 0))
            modseq = saved.get("modseq")
            return folder.position, int(modseq) if modseq is not None else None
        if saved is not None:
            # recreated: its UIDs name other messages now. Old records first, then the position
            # (a crash between the two repeats the reset, never keeps stale records)
            folder.reset = True
            log.debug(
                "%s: UIDVALIDITY %s -> %s, reading it again", folder.folder, saved.get("uidvalidity"), uidvalidity
            )
            self.records.drop_other_generations(account, folder.folder, uidvalidity)
        self.records.save_position(folder_document(mailbox, account, folder.folder, uidvalidity))
        folder.position = 0
        return 0, None


class _FolderSync:
    """Fetch a folder's planned batches into the store; record sources, then the position."""

    def __init__(self, run: _Run, folder: ImapFolderReport, uidvalidity: int, batches: list[list[int]]) -> None:
        self.run_ = run
        self.folder = folder
        self.uidvalidity = uidvalidity
        self.batches = batches
        self.handed: deque[tuple[int, int]] = deque()  # (index in the stream, UID), in order
        self.refused: dict[int, str] = {}
        self.count = 0  # items handed to the current store stream
        self.stopped = False  # stop() said so before a batch was fetched
        self.pending: list[dict[str, Any]] = []  # source records of committed messages
        self.tags: dict[int, tuple[str, ...]] = {}  # UID -> its tags as fetched, for its record
        self.done_uid = folder.position  # highest UID dealt with
        self.saved_uid = folder.position  # highest UID saved as the position
        self.unflushed = 0

    def run(self) -> None:
        run = self.run_
        stopped = False
        try:
            for segment in same_length_runs(self.batches):
                # one store stream per run of equally long batches, its batch that length: the
                # store's batches are then the FETCH batches, bounded in bytes as they are (a 20 MB
                # message is written alone); everyday mail makes one stream of full batches
                self.count = 0  # the store numbers refusals within its stream
                stream = self._bodies(segment)
                for result in run.store.store_iter(stream, batch_size=len(segment[0]), on_error=self._refused):
                    self._settle(result)
                    if self.unflushed >= run.batch_size:
                        self._flush()
                self._settle(None)
                if self.handed:  # handed but not answered (not with MessageStore): never move past them
                    stopped = True
                    break
                if self.stopped:
                    stopped = True
                    break
        except _ServerFailed:
            self._settle(None)
            self._flush()
            raise
        if stopped:
            run.report.interrupted = True
        else:  # all dealt with, vanished ones after the last stored included
            self.done_uid = max(self.done_uid, self.batches[-1][-1])
        self._flush()

    def _bodies(self, batches: list[list[int]]) -> Iterator[_Fetched]:
        """The raw messages, batch by batch (runs on the store's worker thread)."""
        for batch in batches:
            if self.run_.stop():
                self.stopped = True
                return
            got = _fetch_bodies(self.run_.conn, batch, self.folder.folder)
            for uid in batch:
                raw = got.pop(uid, None)
                if raw is None:  # expunged since it was listed
                    self.folder.vanished += 1
                    continue
                self.tags[uid] = raw.tags
                self.handed.append((self.count, uid))
                self.count += 1
                yield raw

    def _refused(self, index: int, item: Any, exc: Exception) -> None:
        self.refused[index] = f"the store refused it: {type(exc).__name__}: {exc}"

    def _settle(self, result: StoreResult | None) -> None:
        """Match a store result (None: the end of the stream) with the UIDs handed out before it."""
        while self.handed:
            index, uid = self.handed[0]
            if index in self.refused:
                self.handed.popleft()
                self.tags.pop(uid, None)
                self.folder.failed.append((uid, self.refused.pop(index)))
                self._dealt_with(uid)
                continue
            if result is None:
                return  # handed, but its batch was never written: the next run fetches it again
            self.handed.popleft()
            if result.inserted:
                self.folder.new += 1
            else:
                self.folder.present += 1
            run = self.run_
            self.pending.append(
                source_document(
                    run.store.mailbox_id,
                    run.report.account,
                    self.folder.folder,
                    self.uidvalidity,
                    uid,
                    result.message_id,
                    result.message_key,
                    self.tags.pop(uid, ()),
                )
            )
            self._dealt_with(uid)
            return

    def _dealt_with(self, uid: int) -> None:
        self.done_uid = max(self.done_uid, uid)
        self.unflushed += 1
        if self.run_.progress is not None:
            self.run_.progress(self.run_.report, self.folder)

    def _flush(self) -> None:
        """Source records of what the store committed, then the position: never ahead of them."""
        run = self.run_
        if self.pending:
            run.records.add_sources(self.pending)
            self.pending = []
        if self.done_uid > self.saved_uid:
            fid = folder_id(run.store.mailbox_id, run.report.account, self.folder.folder)
            run.records.advance(fid, self.uidvalidity, self.done_uid)
            self.saved_uid = self.done_uid
        self.folder.position = self.saved_uid
        self.unflushed = 0


# --- the IMAP side -------------------------------------------------------------------------------


def _connect(host: str, port: int, security: Security, timeout: float, context: ssl.SSLContext | None) -> imaplib.IMAP4:
    if context is None:
        context = ssl.create_default_context()
    where = f"{host}:{port}"
    try:
        if security == "ssl":
            return imaplib.IMAP4_SSL(host, port, ssl_context=context, timeout=timeout)
        conn = imaplib.IMAP4(host, port, timeout=timeout)
    except (imaplib.IMAP4.error, OSError) as exc:
        raise MailboxConnectionError(f"cannot connect to IMAP server {where}: {_text(exc)}") from exc
    if "STARTTLS" not in conn.capabilities:
        _close(conn)
        raise MailboxConnectionError(
            f"IMAP server {where} does not offer STARTTLS: refusing to log in without TLS"
            " (use --security ssl if it serves IMAPS, usually on port 993)"
        )
    try:
        conn.starttls(context)
    except (imaplib.IMAP4.error, OSError) as exc:
        _close(conn)
        raise MailboxConnectionError(f"STARTTLS with IMAP server {where} failed: {_text(exc)}") from exc
    return conn


def _login(conn: imaplib.IMAP4, user: str, password: str) -> None:
    """AUTHENTICATE PLAIN (UTF-8 credentials) where offered, else LOGIN; only ever over TLS."""
    if conn.state != "NONAUTH":  # PREAUTH greeting: already logged in (over TLS: checked above)
        return
    try:
        if "AUTH=PLAIN" in conn.capabilities:
            payload = b"\0" + user.encode("utf-8") + b"\0" + password.encode("utf-8")
            conn.authenticate("PLAIN", lambda _challenge: payload)
        else:
            if not (user + password).isascii():
                raise MailboxAuthError(
                    f"cannot log in {user!r}: the server offers no AUTHENTICATE PLAIN, and LOGIN carries ASCII only"
                )
            conn.login(_quoted(user), password)  # imaplib quotes the password itself
    except imaplib.IMAP4.abort as exc:
        raise MailboxConnectionError(f"the connection dropped during the login of {user!r}: {_text(exc)}") from exc
    except imaplib.IMAP4.error as exc:
        text = _text(exc)
        if any(code in text.upper() for code in _NOT_AUTH_CODES):
            raise MailboxConnectionError(f"the IMAP server could not log in {user!r}: {text}") from exc
        raise MailboxAuthError(f"the IMAP server refused the login of {user!r}: {text}") from exc
    except OSError as exc:
        raise MailboxConnectionError(f"the connection failed during the login of {user!r}: {_text(exc)}") from exc


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _server_call(what: str, call: Callable[..., tuple[str, list[Any]]], *args: Any) -> list[Any]:
    """Run one imaplib command; anything but OK (or a broken connection) is ``_ServerFailed``."""
    try:
        typ, data = call(*args)
    except (imaplib.IMAP4.error, OSError) as exc:
        raise _ServerFailed(what, exc) from exc
    if typ != "OK":
        raise _ServerFailed(what, imaplib.IMAP4.error(_text_of(data)))
    return data


def _select_targets(conn: imaplib.IMAP4, wanted: list[str] | None, report: ImapSyncReport) -> list[tuple[bytes, str]]:
    """``(name as the server spells it, display name)`` of each folder to sync, in order. A
    named folder that is not there, or not selectable, gets its folder report with the error."""
    if wanted is not None and all(name.upper() == "INBOX" for name in wanted):
        return [(b"INBOX", "INBOX")]  # no LIST needed
    listed = _list_folders(conn)
    if wanted is None:
        return [(raw, display) for flags, raw, display in listed if not flags & {"\\NOSELECT", "\\NONEXISTENT"}]
    by_name: dict[str, tuple[set[str], bytes, str]] = {}
    for entry in listed:
        by_name.setdefault(entry[2], entry)
    for entry in listed:  # the encoded spelling, for a name typed as the server shows it
        by_name.setdefault(entry[1].decode("utf-8", "replace"), entry)
    targets: list[tuple[bytes, str]] = []
    for name in wanted:
        if name.upper() == "INBOX":
            entry = next((e for e in listed if e[1].upper() == b"INBOX"), (set(), b"INBOX", "INBOX"))
        else:
            found = by_name.get(name)
            if found is None:
                report.folders.append(ImapFolderReport(name, error="no such folder on the server"))
                continue
            entry = found
        flags, raw, display = entry
        if flags & {"\\NOSELECT", "\\NONEXISTENT"}:
            report.folders.append(ImapFolderReport(display, error="the server marks it \\Noselect: it holds no mail"))
            continue
        if all(raw != t[0] for t in targets):
            targets.append((raw, display))
    return targets


def _list_folders(conn: imaplib.IMAP4) -> list[tuple[set[str], bytes, str]]:
    """LIST "" "*": ``(flags uppercased, name as sent, display name)`` per folder."""
    data = _server_call("LIST", conn.list, '""', '"*"')
    found: list[tuple[set[str], bytes, str]] = []
    for item in data:
        if item is None:
            continue
        literal: bytes | None = None
        if isinstance(item, tuple):
            item, literal = item[0], item[1]
        match = _LIST.match(item)
        if match is None:
            log.debug("ignoring a LIST line this module cannot read: %r", item[:200])
            continue
        flags = {f.upper() for f in match.group("flags").decode("ascii", "replace").split()}
        raw = literal if literal is not None else _unquote(match.group("name"))
        found.append((flags, raw, decode_folder(raw)))
    return found


def _unquote(name: bytes) -> bytes:
    if len(name) >= 2 and name.startswith(b'"') and name.endswith(b'"'):
        return re.sub(rb"\\(.)", rb"\1", name[1:-1])
    return name


def _enable_condstore(conn: imaplib.IMAP4) -> bool:
    """``ENABLE CONDSTORE`` where the server offers it after the login (RFC 7162, RFC 5161):
    then EXAMINE reports HIGHESTMODSEQ and ``CHANGEDSINCE`` can be asked. False elsewhere."""
    data = _server_call("CAPABILITY", conn.capability)
    words = b" ".join(d for d in data if isinstance(d, bytes)).decode("ascii", "replace").upper().split()
    if "CONDSTORE" not in words or "ENABLE" not in words:
        return False
    conn.capabilities = tuple(words)  # imaplib keeps the ones from before the login
    try:
        _server_call("ENABLE", conn.enable, "CONDSTORE")
    except _ServerFailed as failure:  # refused: read every flag instead (a broken link fails next)
        log.debug("ENABLE CONDSTORE: %s", failure)
        return False
    _, enabled = conn.response("ENABLED")
    return any(isinstance(e, bytes) and b"CONDSTORE" in e.upper().split() for e in enabled)


def _examine(conn: imaplib.IMAP4, raw: bytes) -> tuple[int, int | None, int, int | None] | None:
    """EXAMINE (read-only SELECT): ``(UIDVALIDITY, UIDNEXT or None, EXISTS, HIGHESTMODSEQ or
    None)``; None when refused. HIGHESTMODSEQ comes only with CONDSTORE enabled, and not for a
    folder the server keeps no modification sequences for (``NOMODSEQ``)."""
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return None  # 8-bit names need UTF8=ACCEPT, which imaplib cannot speak
    try:
        typ, _ = conn.select(_quoted(name), readonly=True)
    except imaplib.IMAP4.abort as exc:
        raise _ServerFailed("EXAMINE", exc) from exc
    except imaplib.IMAP4.error as exc:  # BAD: the server could not read the name
        log.debug("EXAMINE %r: %s", name, exc)
        return None
    except OSError as exc:
        raise _ServerFailed("EXAMINE", exc) from exc
    if typ != "OK":
        return None
    uidvalidity = _number(conn, "UIDVALIDITY")
    if uidvalidity is None:
        raise _ServerFailed("EXAMINE", imaplib.IMAP4.error(f"the server sent no UIDVALIDITY for {name}"))
    return uidvalidity, _number(conn, "UIDNEXT"), _number(conn, "EXISTS") or 0, _number(conn, "HIGHESTMODSEQ")


def _number(conn: imaplib.IMAP4, name: str) -> int | None:
    _, values = conn.response(name)
    for value in reversed(values or []):
        if isinstance(value, bytes) and value.strip().isdigit():
            return int(value)
    return None


def _list_sizes(conn: imaplib.IMAP4, last: int) -> list[tuple[int, int]]:
    """``(UID, size)`` of every message from ``last + 1`` on (and, by IMAP's reading of ``n:*``,
    the highest one even when it is not above ``last``: the caller filters)."""
    data = _server_call("FETCH", conn.uid, "FETCH", f"{last + 1}:*", "(UID RFC822.SIZE)")
    found = []
    for item in data:
        line = item[0] if isinstance(item, tuple) else item
        if not isinstance(line, bytes):
            continue
        uid, size = _UID.search(line), _SIZE.search(line)
        if uid is not None and size is not None:  # else an unsolicited FETCH (flags) response
            found.append((int(uid.group(1)), int(size.group(1))))
    return found


def _fetch_flags(conn: imaplib.IMAP4, last: int, changed_since: int | None) -> dict[int, tuple[str, ...]]:
    """UID -> tags of the messages up to UID ``last``: every one, or with ``changed_since`` (a
    saved HIGHESTMODSEQ) those whose flags changed after it."""
    args = ["FETCH", f"1:{last}", "(UID FLAGS)"]
    if changed_since is not None:
        args.append(f"(CHANGEDSINCE {changed_since})")
    data = _server_call("FETCH", conn.uid, *args)
    found: dict[int, tuple[str, ...]] = {}
    for item in data:
        line = item[0] if isinstance(item, tuple) else item
        if not isinstance(line, bytes):
            continue
        uid, flags = _UID.search(line), parse_imap_flags(line)
        if uid is not None and flags is not None and int(uid.group(1)) <= last:
            found[int(uid.group(1))] = imap_tags(flags)
    return found


@dataclass(frozen=True)
class _Fetched:
    """One fetched message: its bytes, its INTERNALDATE, and its FLAGS as tags and its folder
    (``store_iter`` stores them all)."""

    data: bytes
    received_at: dt.datetime | None
    tags: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()


def _internal_date(*parts: bytes) -> dt.datetime | None:
    """The INTERNALDATE (``"17-Jul-1996 02:44:25 -0700"``) in a FETCH response, or None."""
    for part in parts:
        match = _INTERNALDATE.search(part)
        if match is not None:
            try:
                text = match.group(1).decode("ascii").strip()
                return dt.datetime.strptime(text, "%d-%b-%Y %H:%M:%S %z").astimezone(dt.UTC)
            except (UnicodeDecodeError, ValueError):
                return None
    return None


def _fetch_bodies(conn: imaplib.IMAP4, uids: list[int], folder: str) -> dict[int, _Fetched]:
    """``UID FETCH <uids> (UID INTERNALDATE FLAGS BODY.PEEK[])``: raw bytes, the server's
    arrival date and the flags by UID (missing: expunged meanwhile)."""
    data = _server_call("FETCH", conn.uid, "FETCH", uid_ranges(uids), "(UID INTERNALDATE FLAGS BODY.PEEK[])")
    found: dict[int, _Fetched] = {}
    data.reverse()  # popped from the end: each response is let go of once read
    while data:
        item = data.pop()
        if not isinstance(item, tuple) or not _BODY_LITERAL.search(item[0]):
            continue  # the closing ")" of a response, or an unsolicited FETCH (flags)
        prefix, raw = item
        after = data[-1] if data and isinstance(data[-1], bytes) else b""  # items after the body
        uid = _UID.search(prefix) or _UID.search(after)
        if uid is not None:
            flags = parse_imap_flags(prefix)
            if flags is None:
                flags = parse_imap_flags(after) or []
            found[int(uid.group(1))] = _Fetched(raw, _internal_date(prefix, after), imap_tags(flags), (folder,))
    return found


def _close(conn: imaplib.IMAP4) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown()


def _text_of(data: Sequence[Any]) -> str:
    last = data[-1] if data else b""
    return last.decode("utf-8", "replace") if isinstance(last, bytes) else str(last)


def _text(exc: BaseException) -> str:
    if exc.args and isinstance(exc.args[0], bytes):
        return exc.args[0].decode("utf-8", "replace")
    text = str(exc)
    return text or type(exc).__name__
