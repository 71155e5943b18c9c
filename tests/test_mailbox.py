"""aecs_mongo.mail.pop3: GDBM migration, the POP3 download loop against a real Dovecot, dispatch.

The POP3 tests need ``dovecot`` (Debian: dovecot-core + dovecot-pop3d) and ``openssl``; the
GDBM tests need a way to write a real GDBM file (``dbm.gnu`` or ``gdbm_load`` from gdbmtool).
Missing tools skip those tests with the reason, or fail them when ``AECS_REQUIRE_DOVECOT=1``
(CI sets it, so a broken install cannot pass as a skip).

"Byte-exact" over POP3: the store keeps exactly what the server sent (RETR lines, dot-unstuffed,
each ended by CRLF). Dovecot sends a maildir file with every line ending made CRLF and a final
CRLF added when missing; bare CR, NUL and 8-bit bytes pass unchanged. So a message kept with
CRLF endings comes back identical, and one kept with LF endings comes back as its CRLF form:
``wire_form`` below is that mapping, and the tests compare against it, never loosely.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import MessageStore
from aecs_mongo.errors import AecsMongoError, InvalidEmailError
from aecs_mongo.mail.pop3 import (
    DispatchError,
    Handler,
    MailboxAuthError,
    MailboxConnectionError,
    MailboxError,
    _gdbm_dump_records,
    _parse_ascii_dump,
    dispatch,
    download,
    migrate_from_uidl_store,
)
from tests.helpers.dovecot import REQUIRE_ENV, DovecotServer, dovecot_binary, free_port, missing_services

REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
HAVE_DBM_GNU = importlib.util.find_spec("_gdbm") is not None


def need(tool: str, why: str) -> None:
    """Skip (or, under AECS_REQUIRE_DOVECOT=1, fail) when a required tool is missing."""
    message = f"{tool} not available: {why}"
    if REQUIRED:
        pytest.fail(message + f" ({REQUIRE_ENV}=1)")
    pytest.skip(message)


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def mstore(db: Any) -> MessageStore:
    store = MessageStore(db, mailbox_id="pop")
    store.ensure_indexes()
    return store


@pytest.fixture(scope="session")
def dovecot_server() -> Iterator[DovecotServer]:
    lacking = missing_services(imap=False)
    if lacking:
        need(", ".join(what for what, _ in lacking), "; ".join(how for _, how in lacking))
    binary = dovecot_binary()
    if shutil.which("openssl") is None:
        need("openssl", "needed for the test certificate")
    assert binary is not None
    server = DovecotServer(binary)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def dovecot(dovecot_server: DovecotServer) -> DovecotServer:
    """The session's Dovecot, running, with an empty maildir."""
    if dovecot_server.proc is None:
        dovecot_server.start()
    for sub in ("new", "cur"):
        for path in (dovecot_server.maildir / sub).iterdir():
            path.unlink()
    return dovecot_server


def pop(server: DovecotServer, store: Any, **kw: Any) -> Any:
    kw.setdefault("security", "plain")
    return download(store, "127.0.0.1", server.pop3_port, server.user, server.password, timeout=10, **kw)


def wire_form(stored: bytes) -> bytes:
    """What a POP3 server sends for a message file: CRLF line endings, ending with CRLF."""
    out = re.sub(rb"\r?\n", b"\r\n", stored)
    return out if out.endswith(b"\r\n") else out + b"\r\n"


def msg(
    n: int, *, to: str = "someone@example.com", cc: str | None = None, body: bytes = b"hello", eol: bytes = b"\r\n"
) -> bytes:
    headers = [
        f"Message-ID: <m{n}@test.example>",
        "From: Sender <sender@example.com>",
        f"To: {to}",
        *([f"Cc: {cc}"] if cc else []),
        f"Subject: message {n}",
        f"Date: Mon, 0{1 + n % 9} Jun 2026 10:00:00 +0000",
    ]
    return eol.join(h.encode() for h in headers) + eol + eol + body + eol


def stored_raw(store: Any, n: int) -> bytes | None:
    raw = store.get_raw(f"m{n}@test.example")
    assert raw is None or isinstance(raw, bytes)
    return raw


# --- GDBM migration ------------------------------------------------------------------------------


def write_gdbm(path: Path, records: dict[bytes, bytes]) -> None:
    """A real GDBM file holding exactly these key/value bytes (dbm.gnu, else gdbm_load)."""
    if HAVE_DBM_GNU:
        import dbm.gnu

        with dbm.gnu.open(str(path), "n") as gdb:
            for key, value in records.items():
                gdb[key] = value
        return
    if shutil.which("gdbm_load") is None:
        need("gdbm_load", "install gdbmtool (this Python has no dbm.gnu)")
    lines = ["# GDBM dump file created by aecs-mongo tests", "#:version=1.1", "#:format=standard", "# End of header"]
    for key, value in records.items():
        for datum in (key, value):
            lines.append(f"#:len={len(datum)}")
            encoded = base64.b64encode(datum).decode()
            lines.extend(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    lines += [f"#:count={len(records)}", "# End of data"]
    dump = path.with_suffix(".dump")
    dump.write_text("\n".join(lines) + "\n")
    subprocess.run(["gdbm_load", str(dump), str(path)], check=True, capture_output=True)


def as_old_program_stored(raw: bytes) -> bytes:
    """The bytes Python's dbm.gnu writes for the str ``raw.decode("latin-1")``: its UTF-8."""
    return raw.decode("latin-1").encode("utf-8")


ALL_BYTES_BODY = bytes(b for b in range(256) if b not in b"\r\n") + b"\r\nend"
OLD_MESSAGES = {
    "uidl-1": msg(1, body=ALL_BYTES_BODY),
    "uidl-2": b"\xef\xbb\xbf" + msg(2, body="caf\u00e9 \u20ac".encode()),  # BOM kept, UTF-8 body
    "uidl-3": msg(3, eol=b"\n", body=b"latin-1 \xe9\xe8\n.leading dot"),
    "uidl-dup": msg(1, body=ALL_BYTES_BODY),  # same Message-ID as uidl-1, another UIDL
}


@pytest.mark.server
def test_migrate_round_trips_every_byte_and_reruns_as_no_op(tmp_path: Path, mstore: MessageStore) -> None:
    path = tmp_path / "email3.mail.gdbm"
    write_gdbm(path, {k.encode(): as_old_program_stored(v) for k, v in OLD_MESSAGES.items()})

    report = migrate_from_uidl_store(mstore, path)
    assert (report.added, report.skipped, report.duplicates, report.failed) == (4, 0, 1, [])
    # every message byte for byte (the BOM one included: its Message-ID line starts with the BOM,
    # so the store gives it the AECS synthetic id; that is the price of keeping bytes as they are)
    assert {mstore.get_raw(m) for m in mstore.message_ids()} == set(OLD_MESSAGES.values())
    assert stored_raw(mstore, 1) == OLD_MESSAGES["uidl-1"]
    assert stored_raw(mstore, 3) == OLD_MESSAGES["uidl-3"]
    assert sorted(mstore.uidls()) == sorted(OLD_MESSAGES)
    assert len(mstore.message_ids()) == 3

    again = migrate_from_uidl_store(mstore, str(path))
    assert (again.added, again.skipped, again.duplicates, again.failed) == (0, 4, 0, [])
    assert len(mstore.message_ids()) == 3


@pytest.mark.server
def test_migrate_reports_corrupt_records_and_keeps_going(tmp_path: Path, mstore: MessageStore) -> None:
    path = tmp_path / "old.gdbm"
    good = msg(7)
    write_gdbm(
        path,
        {
            b"bad-utf8": b"Message-ID: <x@y>\r\n\r\n\xff\xfe broken",  # not what dbm writes for a str
            b"above-latin1": "Subject: \u20ac\r\n\r\nx".encode(),  # U+20AC cannot be latin-1 text
            b"good": as_old_program_stored(good),
            b"\xff-key": as_old_program_stored(msg(8)),  # a key that is not UTF-8
        },
    )
    report = migrate_from_uidl_store(mstore, path)
    assert report.added == 1
    failed = dict(report.failed)
    assert set(failed) == {"bad-utf8", "above-latin1", "\\xff-key"}
    assert "not a latin-1 string" in failed["bad-utf8"]
    assert "not a latin-1 string" in failed["above-latin1"]
    assert "not UTF-8" in failed["\\xff-key"]
    assert stored_raw(mstore, 7) == good
    assert mstore.uidls() == ["good"]


@pytest.mark.server
def test_migrate_reports_messages_the_store_refuses(tmp_path: Path, mstore: MessageStore) -> None:
    class Refusing:
        def __init__(self, inner: MessageStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def add(self, uidl: str, raw_bytes: bytes) -> str:
            if uidl == "refused":
                raise InvalidEmailError("too odd")
            return self.inner.add(uidl, raw_bytes)

    path = tmp_path / "old.gdbm"
    write_gdbm(path, {b"refused": as_old_program_stored(msg(1)), b"fine": as_old_program_stored(msg(2))})
    report = migrate_from_uidl_store(Refusing(mstore), path)
    assert report.added == 1
    assert report.failed == [("refused", "the store refused it: InvalidEmailError: too odd")]


@pytest.mark.server
def test_migrate_file_written_by_python_dbm_str_values(tmp_path: Path, mstore: MessageStore) -> None:
    """The old program's own write path: a latin-1 ``str`` value handed to Python's dbm.gnu."""
    python = _python_with_dbm_gnu()
    if python is None:
        pytest.skip("no Python with dbm.gnu to write the file as the old program did (python3-gdbm)")
    path = tmp_path / "real.gdbm"
    raws = [msg(1, body=ALL_BYTES_BODY), b"\xef\xbb\xbf" + msg(2, body=b"\x00\x80\xff")]
    script = (
        "import dbm.gnu, sys\n"
        "db = dbm.gnu.open(sys.argv[1], 'c')\n"
        "for i, hexraw in enumerate(sys.argv[2:]):\n"
        "    db[str(1000 + i)] = bytes.fromhex(hexraw).decode('latin-1')\n"
        "db.close()\n"
    )
    subprocess.run([python, "-c", script, str(path), *(r.hex() for r in raws)], check=True)
    report = migrate_from_uidl_store(mstore, path)
    assert (report.added, report.failed) == (2, [])
    assert {mstore.get_raw(m) for m in mstore.message_ids()} == set(raws)


def _python_with_dbm_gnu() -> str | None:
    import sys

    for candidate in (sys.executable, "/usr/bin/python3"):
        if (
            os.access(candidate, os.X_OK)
            and subprocess.run([candidate, "-c", "import dbm.gnu"], capture_output=True).returncode == 0
        ):
            return candidate
    return None


def test_gdbm_dump_reader_matches_the_records(tmp_path: Path) -> None:
    """The gdbm_dump path (used when the interpreter lacks dbm.gnu) reads every byte back."""
    if shutil.which("gdbm_dump") is None:
        need("gdbm_dump", "install gdbmtool")
    records = {b"k%d" % i: bytes(range(256)) * i for i in range(1, 5)}
    path = tmp_path / "d.gdbm"
    write_gdbm(path, records)
    assert dict(_gdbm_dump_records(str(path))) == records


def test_ascii_dump_parser_handles_empty_data() -> None:
    """gdbm_dump writes an empty key or value as ``#:len=0`` with no data line (gdbm_load cannot
    load that back, so this is checked on the text gdbm_dump 1.23 produced)."""
    dump = (
        b"# GDBM dump file created by GDBM version 1.23. 04/02/2022\n#:version=1.1\n#:format=standard\n"
        b"# End of header\n#:len=1\nYQ==\n#:len=0\n#:len=0\n#:len=1\neA==\n#:count=2\n# End of data\n"
    )
    assert list(_parse_ascii_dump(io.BytesIO(dump), "x")) == [(b"a", b""), (b"", b"x")]
    with pytest.raises(MailboxError, match="count"):
        list(_parse_ascii_dump(io.BytesIO(dump.replace(b"count=2", b"count=3")), "x"))


def test_migrate_unreadable_file_is_a_mailbox_error(tmp_path: Path, mstore: MessageStore) -> None:
    bogus = tmp_path / "not-gdbm"
    bogus.write_bytes(b"this is not a gdbm file at all" * 10)
    with pytest.raises(MailboxError):
        migrate_from_uidl_store(mstore, bogus)
    with pytest.raises(MailboxError):
        migrate_from_uidl_store(mstore, tmp_path / "missing.gdbm")


# --- POP3 download against Dovecot ---------------------------------------------------------------

TRICKY = {
    1: msg(1, body=b".\r\n..two dots\r\n.one dot\r\nbare\rcr nul\x00 high\x80\xff"),  # CRLF, dot-stuffed lines
    2: msg(2, body=b"L" * 5000),  # longer than poplib's 2048-byte line limit
    3: msg(3, eol=b"\n", body=b"stored with LF endings\n\n.dot"),  # served as CRLF
    4: msg(4, body=b"no final newline")[:-2],  # the server adds the final CRLF
}


@pytest.mark.server
def test_download_stores_every_message_as_served_and_second_run_is_empty(
    dovecot: DovecotServer, mstore: MessageStore
) -> None:
    files = {n: dovecot.deliver(raw) for n, raw in TRICKY.items()}
    report = pop(dovecot, mstore)
    assert (report.downloaded, report.skipped, report.deleted_on_server, report.failed) == (4, 0, 0, [])
    for n, raw in TRICKY.items():
        assert stored_raw(mstore, n) == wire_form(raw), n
    # CRLF files are stored identical to the file; the LF file as its CRLF form
    assert stored_raw(mstore, 1) == TRICKY[1]
    assert stored_raw(mstore, 2) == TRICKY[2]
    assert stored_raw(mstore, 3) != TRICKY[3]
    assert set(dovecot.messages()) == set(files.values())  # nothing deleted on the server
    assert len(mstore.uidls()) == 4

    again = pop(dovecot, mstore)
    assert (again.downloaded, again.skipped, again.failed) == (0, 4, [])


@pytest.mark.parametrize(("security", "port_attr"), [("ssl", "pop3s_port"), ("starttls", "pop3_port")])
@pytest.mark.server
def test_download_over_tls(dovecot: DovecotServer, mstore: MessageStore, security: Any, port_attr: str) -> None:
    import ssl

    dovecot.deliver(msg(1))
    context = ssl.create_default_context(cafile=str(dovecot.cert_path))
    port = getattr(dovecot, port_attr)
    report = download(mstore, "127.0.0.1", port, dovecot.user, dovecot.password, security=security, ssl_context=context)
    assert report.downloaded == 1
    assert stored_raw(mstore, 1) == msg(1)
    # the default context verifies certificates: a self-signed one is refused, not ignored
    with pytest.raises(MailboxConnectionError):
        download(mstore, "127.0.0.1", port, dovecot.user, dovecot.password, security=security)


@pytest.mark.server
def test_delete_on_server_only_after_the_store_confirmed(dovecot: DovecotServer, mstore: MessageStore) -> None:
    class Refusing:
        def __init__(self, inner: MessageStore) -> None:
            self.inner = inner
            self.seen_on_server: list[bool] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def add(self, uidl: str, raw_bytes: bytes) -> str:
            # DELE is never sent before the store answered: the message is still there now
            self.seen_on_server.append(len(dovecot.messages()) == 3)
            if b"<m2@" in raw_bytes:
                raise InvalidEmailError("refused for the test")
            return self.inner.add(uidl, raw_bytes)

    names = {n: dovecot.deliver(msg(n)) for n in (1, 2, 3)}
    wrapped = Refusing(mstore)
    report = pop(dovecot, wrapped, delete_on_server=True)
    assert report.downloaded == 2
    assert report.deleted_on_server == 2
    assert [reason for _, reason in report.failed] == ["the store refused it: InvalidEmailError: refused for the test"]
    assert wrapped.seen_on_server == [True, True, True]
    assert set(dovecot.messages()) == {names[2]}  # the refused one stays on the server
    assert stored_raw(mstore, 1) == msg(1) and stored_raw(mstore, 3) == msg(3)
    assert stored_raw(mstore, 2) is None

    # next run: the store takes it now; it is stored, then deleted
    report = pop(dovecot, mstore, delete_on_server=True)
    assert (report.downloaded, report.deleted_on_server) == (1, 1)
    assert dovecot.messages() == {}


class CuttingProxy:
    """A TCP proxy to ``target`` that drops the connection after ``cut_after`` server bytes."""

    def __init__(self, target: int, cut_after: int) -> None:
        self.target = target
        self.cut_after = cut_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.forwarded = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.listener:
            client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.target))

        def up() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=up, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                room = self.cut_after - self.forwarded
                client.sendall(data[:room])
                self.forwarded += min(room, len(data))
                if self.forwarded >= self.cut_after:
                    break
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@pytest.mark.server
def test_dropped_connection_mid_message_loses_nothing(dovecot: DovecotServer, mstore: MessageStore) -> None:
    big = {n: msg(n, body=(b"%d" % n) * 40_000) for n in (1, 2, 3)}  # ~40 KB each
    for raw in big.values():
        dovecot.deliver(raw)
    proxy = CuttingProxy(dovecot.pop3_port, cut_after=100_000)  # inside the third message
    with pytest.raises(MailboxConnectionError) as info:
        download(mstore, "127.0.0.1", proxy.port, dovecot.user, dovecot.password, security="plain",
                 delete_on_server=True, timeout=10)  # fmt: skip
    partial = info.value.report
    assert partial is not None
    assert (partial.downloaded, partial.deleted_on_server) == (2, 0)
    assert stored_raw(mstore, 1) == big[1] and stored_raw(mstore, 2) == big[2]
    assert stored_raw(mstore, 3) is None  # no half message stored
    assert len(dovecot.messages()) == 3  # no QUIT, so the server deleted nothing

    report = pop(dovecot, mstore, delete_on_server=True)
    assert (report.downloaded, report.skipped, report.deleted_on_server) == (1, 2, 3)
    assert all(stored_raw(mstore, n) == big[n] for n in big)
    assert dovecot.messages() == {}


@pytest.mark.server
def test_server_dying_between_messages_loses_nothing(dovecot: DovecotServer, mstore: MessageStore) -> None:
    class KillsServer:
        def __init__(self, inner: MessageStore) -> None:
            self.inner = inner
            self.added = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def add(self, uidl: str, raw_bytes: bytes) -> str:
            result = self.inner.add(uidl, raw_bytes)
            self.added += 1
            if self.added == 2:
                dovecot.stop()
            return result

    for n in (1, 2, 3, 4):
        dovecot.deliver(msg(n))
    with pytest.raises(MailboxConnectionError) as info:
        pop(dovecot, KillsServer(mstore), delete_on_server=True)
    assert info.value.report is not None and info.value.report.downloaded == 2
    assert len(mstore.message_ids()) == 2

    dovecot.start()
    assert len(dovecot.messages()) == 4
    report = pop(dovecot, mstore, delete_on_server=True)
    assert (report.downloaded, report.skipped, report.deleted_on_server) == (2, 2, 4)
    assert all(stored_raw(mstore, n) == msg(n) for n in (1, 2, 3, 4))
    assert dovecot.messages() == {}


@pytest.mark.parametrize("error", [RuntimeError, ConnectionResetError])  # an OSError is not a POP3 error
@pytest.mark.server
def test_store_crash_commits_only_deletions_of_stored_messages(
    dovecot: DovecotServer, mstore: MessageStore, error: type[Exception]
) -> None:
    class Crashes:
        def __init__(self, inner: MessageStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def add(self, uidl: str, raw_bytes: bytes) -> str:
            if b"<m2@" in raw_bytes:
                raise error("database went away")
            return self.inner.add(uidl, raw_bytes)

    names = {n: dovecot.deliver(msg(n)) for n in (1, 2, 3)}
    with pytest.raises(error, match="database went away"):
        pop(dovecot, Crashes(mstore), delete_on_server=True)
    assert set(dovecot.messages()) == {names[2], names[3]}
    report = pop(dovecot, mstore, delete_on_server=True)
    assert (report.downloaded, report.deleted_on_server) == (2, 2)
    assert dovecot.messages() == {}
    assert len(mstore.message_ids()) == 3


def test_bad_credentials_are_an_auth_error(dovecot: DovecotServer, mstore: MessageStore) -> None:
    dovecot.deliver(msg(1))
    with pytest.raises(MailboxAuthError):
        download(mstore, "127.0.0.1", dovecot.pop3_port, dovecot.user, "wrong", security="plain", timeout=10)
    with pytest.raises(MailboxAuthError):
        download(mstore, "127.0.0.1", dovecot.pop3_port, "nobody-here", "x", security="plain", timeout=10)
    assert mstore.message_ids() == []


@pytest.mark.parametrize("security", ["plain", "ssl", "starttls"])
def test_unreachable_server_is_a_connection_error(mstore: MessageStore, security: Any) -> None:
    with pytest.raises(MailboxConnectionError, match="cannot connect"):
        download(mstore, "127.0.0.1", free_port(), "u", "p", security=security, timeout=5)


def test_errors_are_aecs_mongo_errors() -> None:
    assert issubclass(MailboxAuthError, MailboxError)
    assert issubclass(MailboxConnectionError, MailboxError)
    assert issubclass(MailboxError, AecsMongoError)
    assert issubclass(DispatchError, AecsMongoError)


# --- dispatch ------------------------------------------------------------------------------------


def recorder(store: MessageStore, *, delete: bool = True) -> tuple[list[list[str]], Handler]:
    calls: list[list[str]] = []

    def handler(batch: list[tuple[str, EmailMessage]]) -> None:
        calls.append([mid for mid, _ in batch])
        for mid, message in batch:
            assert isinstance(message, EmailMessage) and message["Message-ID"] == f"<{mid}>"
            if delete:
                store.delete(mid)

    return calls, handler


@pytest.mark.server
def test_dispatch_routes_by_to_then_cc_and_handlers_empty_the_store(mstore: MessageStore) -> None:
    mstore.add("u1", msg(1, to="Jobs <JOBS@Example.com>"))
    mstore.add("u2", msg(2, to="friend@example.com", cc="gym@example.com"))
    mstore.add("u3", msg(3, to="gym@example.com, jobs@example.com"))  # first routed address wins
    mstore.add("u4", msg(4, to="nobody@example.com"))
    mstore.add("u5", msg(5, to="jobs@example.com"))

    jobs_calls, jobs = recorder(mstore)
    gym_calls, gym = recorder(mstore)
    report = dispatch(mstore, {"jobs@example.com": jobs, "Gym@Example.com": gym})
    assert jobs_calls == [["m1@test.example", "m5@test.example"]]  # one call, oldest first
    assert gym_calls == [["m2@test.example", "m3@test.example"]]
    assert report.routed == {"jobs@example.com": 2, "Gym@Example.com": 2}
    assert report.unrouted == ["m4@test.example"]
    assert mstore.message_ids() == ["m4@test.example"]

    rest_calls, rest = recorder(mstore)
    report = dispatch(mstore, {"jobs@example.com": jobs}, default=rest)
    assert (rest_calls, report.defaulted, report.unrouted) == ([["m4@test.example"]], 1, [])
    assert len(jobs_calls) == 1  # no batch, no call
    assert mstore.message_ids() == []
    assert mstore.uidls() == []


@pytest.mark.server
def test_dispatch_runs_every_handler_and_reports_failures(mstore: MessageStore) -> None:
    mstore.add("u1", msg(1, to="a@example.com"))
    mstore.add("u2", msg(2, to="b@example.com"))
    b_calls, b = recorder(mstore)

    def broken(batch: list[tuple[str, EmailMessage]]) -> None:
        raise ValueError("handler bug")

    with pytest.raises(DispatchError) as info:
        dispatch(mstore, {"a@example.com": broken, "b@example.com": b})
    assert b_calls == [["m2@test.example"]]
    assert isinstance(info.value.errors["a@example.com"], ValueError)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.report.routed == {"a@example.com": 1, "b@example.com": 1}
    assert mstore.message_ids() == ["m1@test.example"]  # the failed handler's mail is kept


@pytest.mark.server
def test_download_then_dispatch_end_to_end(dovecot: DovecotServer, mstore: MessageStore) -> None:
    for n in (1, 2, 3):
        dovecot.deliver(msg(n, to="jobs@example.com" if n != 2 else "gym@example.com", eol=b"\n"))
    assert pop(dovecot, mstore, delete_on_server=True).downloaded == 3
    jobs_calls, jobs = recorder(mstore)
    gym_calls, gym = recorder(mstore)
    dispatch(mstore, {"jobs@example.com": jobs, "gym@example.com": gym})
    assert (jobs_calls, gym_calls) == ([["m1@test.example", "m3@test.example"]], [["m2@test.example"]])
    assert mstore.message_ids() == [] and dovecot.messages() == {}
    assert pop(dovecot, mstore).downloaded == 0


# --- durable before destructive ---------------------------------------------------------------------

_WRITES = {"insert", "update", "delete", "findAndModify", "commitTransaction"}


@pytest.mark.server
def test_delete_on_server_writes_are_durable_before_dele(
    dovecot: DovecotServer, servers: Any, backend: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Command monitoring and the POP3 commands on one timeline: every write of a download that
    deletes on the server, up to its last DELE, asks for ``{w: "majority", j: true}`` (outside a
    transaction on the write itself, in one on its commit), and the first DELE follows writes."""
    import poplib

    from pymongo import MongoClient, monitoring

    timeline: list[tuple[str, str, dict[str, Any]]] = []

    class Writes(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in _WRITES:
                timeline.append(("db", event.command_name, dict(event.command)))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    shortcmd = poplib.POP3._shortcmd

    def recording(self: poplib.POP3, line: str) -> bytes:
        timeline.append(("pop3", line.split()[0].upper(), {}))
        return shortcmd(self, line)

    monkeypatch.setattr(poplib.POP3, "_shortcmd", recording)  # the stdlib's, recorded and called
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[Writes()])
    try:
        store = MessageStore(client[db.name], mailbox_id="pop")
        store.ensure_indexes()
        timeline.clear()
        for n in (1, 2, 3):
            dovecot.deliver(msg(n))
        report = pop(dovecot, store, delete_on_server=True)
        assert (report.downloaded, report.deleted_on_server) == (3, 3)
        assert dovecot.messages() == {}
        assert stored_raw(store, 3) == msg(3)
    finally:
        client.close()
    deles = [i for i, (kind, name, _) in enumerate(timeline) if kind == "pop3" and name == "DELE"]
    assert len(deles) == 3
    writes = [(name, cmd) for kind, name, cmd in timeline[: deles[-1]] if kind == "db"]
    assert any(kind == "db" for kind, _, _ in timeline[: deles[0]]), "the first DELE follows the first message's writes"
    durable = {"w": "majority", "j": True}
    in_transaction = [name for name, cmd in writes if "txnNumber" in cmd and name != "commitTransaction"]
    for name, cmd in writes:
        if "txnNumber" in cmd and name != "commitTransaction" and "autocommit" in cmd:
            assert "writeConcern" not in cmd, name  # a write inside a transaction: its commit says it
        else:
            assert cmd.get("writeConcern") == durable, (name, cmd.get("writeConcern"))
    # the replica set writes each message in a transaction; the standalone without
    assert any(name == "commitTransaction" for name, _ in writes) == bool(in_transaction)


@pytest.mark.server
def test_without_delete_on_server_only_the_completing_writes_are_journaled(
    dovecot: DovecotServer, servers: Any, backend: str, db: Any
) -> None:
    """A plain download is durable too (the store's default), but pays for it once per message,
    not on every write: the write that completes it (the commit or the thread update, and the
    UIDL record) asks for the journal; the blobs, body and message before it do not."""
    from pymongo import MongoClient, monitoring

    concerns: list[object] = []

    class Writes(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in _WRITES:
                concerns.append(event.command.get("writeConcern"))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[Writes()])
    try:
        store = MessageStore(client[db.name], mailbox_id="pop")
        dovecot.deliver(msg(1))
        assert pop(dovecot, store).downloaded == 1
    finally:
        client.close()
    journaled = {"w": "majority", "j": True} if backend == "rs" else {"j": True}
    assert concerns[-1] == journaled  # the UIDL record, after the message
    assert concerns.count(None) > concerns.count(journaled) >= 2
    assert all(c in (None, journaled) for c in concerns)


def _server_argvs(wanted: str) -> list[list[str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if wanted in argv:
                    found.append(argv)
    return found


def test_cli_pop3_delete_on_server_runs_the_embedded_server_with_sync_on_commit(
    dovecot: DovecotServer, tmp_path: Path
) -> None:
    """``aecs-mongo pop3 --delete-on-server`` on the embedded default: the server it starts syncs
    its log on every commit (seen on its command line while it runs), and the mail moved."""
    import sys
    import time

    from aecs_mongo.embedded.server import embedded_available

    if not embedded_available():
        pytest.skip("the embedded server is not installed")
    for n in (1, 2):
        dovecot.deliver(msg(n))
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    env["AECS_POP3_PASSWORD"] = dovecot.password
    argv = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "pop3", "127.0.0.1"]
    argv += ["--port", str(dovecot.pop3_port), "--user", dovecot.user, "--security", "plain", "--delete-on-server"]
    command = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[list[str]] = []
    while command.poll() is None:
        seen += _server_argvs(str(data_dir / "db"))
        time.sleep(0.05)
    out, err = command.communicate()
    assert command.returncode == 0, err.decode()
    assert b"2 downloaded" in out and b"2 deleted on the server" in out
    assert dovecot.messages() == {}
    with_auth = [a for a in seen if "--auth" in a]
    assert with_auth and all("--sync-on-commit" in a for a in with_auth)


@pytest.mark.server
def test_messages_stored_by_an_earlier_run_are_flushed_before_their_dele(
    dovecot: DovecotServer, servers: Any, backend: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain download stores with the default write concern; a later delete-on-server run that
    stores nothing new deletes those messages only after an ``fsync`` (seen before any DELE)."""
    import poplib

    from pymongo import MongoClient, monitoring

    timeline: list[str] = []

    class Commands(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            timeline.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    shortcmd = poplib.POP3._shortcmd

    def recording(self: poplib.POP3, line: str) -> bytes:
        timeline.append("POP3 " + line.split()[0].upper())
        return shortcmd(self, line)

    monkeypatch.setattr(poplib.POP3, "_shortcmd", recording)
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[Commands()])
    try:
        store = MessageStore(client[db.name], mailbox_id="pop")
        store.ensure_indexes()
        for n in (1, 2):
            dovecot.deliver(msg(n))
        assert pop(dovecot, store).downloaded == 2  # stored, not deleted
        timeline.clear()
        report = pop(dovecot, store, delete_on_server=True)
        assert (report.downloaded, report.skipped, report.deleted_on_server) == (0, 2, 2)
        assert dovecot.messages() == {}
    finally:
        client.close()
    assert "fsync" in timeline and "POP3 DELE" in timeline
    assert timeline.index("fsync") < timeline.index("POP3 DELE")


def test_a_missing_dovecot_service_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with Dovecot's IMAP service but not its POP3 one (dovecot-imapd without
    dovecot-pop3d) starts no test server: the tests skip (or, with AECS_REQUIRE_DOVECOT=1,
    fail) naming the missing service and its package, rather than erroring in every test."""
    from tests.helpers import dovecot as helper

    (tmp_path / "imap").write_text("")
    (tmp_path / "imap").chmod(0o755)
    monkeypatch.setattr(helper, "LIBEXEC_DIRS", (str(tmp_path),))
    monkeypatch.setattr(helper, "dovecot_binary", lambda: "/usr/sbin/dovecot")
    assert missing_services(imap=True) == [(f"{tmp_path}/pop3", "install dovecot-pop3d")]
    assert missing_services(imap=False) == [(f"{tmp_path}/pop3", "install dovecot-pop3d")]
    (tmp_path / "pop3").write_text("")
    (tmp_path / "pop3").chmod(0o755)
    assert missing_services(imap=True) == []
