"""The embedded server: SecantusDB (a MongoDB wire-protocol server) as a child process.

Used by the test fixtures, the demo and the CLI when no ``MONGODB_URI`` is given. SecantusDB is
GPL-2.0, so it is only ever run as a separate program from the optional ``embedded`` extra,
never imported: ``pip install 'aecs-mongo[embedded]'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote_plus

from ..errors import ServerFeatureError
from .datadir import (
    CREDENTIALS_FILE,
    PRIVATE_UMASK,
    Credentials,
    load_credentials,
    make_private,
    new_credentials,
    save_credentials,
)

__all__ = ["INSTALL_HINT", "LOW_DISK_BYTES", "EmbeddedServer", "embedded_available", "low_on_disk", "wake_listener"]

INSTALL_HINT = "pip install 'aecs-mongo[embedded]'"

log = logging.getLogger(__name__)

_USER_EXISTS = 51003  # createUser of a user that exists


#: The oplog kept by the embedded server: what a feed consumer (``store.watch``, ``embed_new``)
#: reads between two runs. Every message is five to ten oplog entries (blobs, body, message,
#: thread), each a copy of what it wrote, so SecantusDB's default (100,000 entries, an hour) kept
#: a copy of the last 10,000+ messages, raw mail and attachments included: 372 MB of an 858 MB data
#: directory at 10,000 messages. A consumer whose position fell out of the oplog continues by a
#: backfill (``aecs_mongo.asynchronous.workers``), so a short oplog loses nothing.
OPLOG_MAX_ENTRIES = 10_000
OPLOG_RETENTION_SECONDS = 3600

#: Free bytes below which the data directory's disk counts as full: WiredTiger needs room for its
#: log and a checkpoint before it can start or commit.
LOW_DISK_BYTES = 16 * 1024 * 1024


def low_on_disk(path: str | os.PathLike[str]) -> bool:
    """True when the filesystem of ``path`` (or of its nearest existing parent) has less than
    ``LOW_DISK_BYTES`` free."""
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    try:
        return shutil.disk_usage(target).free < LOW_DISK_BYTES
    except OSError:
        return False


def exit_reason(returncode: int | None, tail: str, log_path: Path | None) -> str:
    """What a server that exited said: its log's last lines, else its exit status."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if any(line.startswith("Traceback") or line.startswith('File "') for line in lines):
        lines = lines[-1:]  # a Python traceback: its last line says what happened
    said = " | ".join(lines[-3:])
    status = f"exit status {returncode}" if returncode is not None else "exited"
    if said:
        return f"{said} ({status})"
    return f"{status}, nothing written to {log_path}" if log_path is not None else status


def embedded_available() -> bool:
    """True when the SecantusDB server can be started from this interpreter."""
    return importlib.util.find_spec("secantus") is not None


#: What both launchers (this module's and ``background``'s) run in the server's process.
#:
#: ``wake_listener``: SecantusDB's stop closes its listening socket and joins the accept thread
#: for up to 2 s, but closing a socket does not wake a thread blocked in ``accept()`` on Linux:
#: every clean stop took 2 s. A connection does wake it, so whoever stops the server connects to
#: its port until it is gone (``wake_listener`` below); the launchers' own stops do the same.
#:
#: ``relay_signals``: CPython runs a signal's Python handler in the main thread only, and a main
#: thread blocked in a lock wait (SecantusDB waits for its stop event so) is woken only when the
#: kernel gives the signal to it. Given to another thread, SIGTERM was never handled: the server
#: did not stop until it was killed (1 stop in 6 under pytest-xdist, a few in a thousand before
#: the connections above). The wakeup fd says a signal came; where the main thread is not in the
#: handler 50 ms later, the signal is sent to the main thread itself (its handler then runs
#: once: the flag it trips is the one the first signal tripped).
#:
#: ``memo_index_catalog``: SecantusDB 0.7 reads its index catalog (every index's options, a BSON
#: decode each) three times for each document it inserts and four for each it updates or
#: deletes, to learn options that cannot change while the statement holds the collection's lock.
#: With the 13 indexes of ``messages`` that was a fifth of the server's time in an ingest. The
#: launcher keeps the catalog for the length of one statement (an insert's or update's or
#: delete's chunk, a single update or delete) and reads it anew for the next, so an index
#: created or changed between two writes holds for the second
#: (``test_index_options_changed_between_writes_hold_for_the_next``). Where a SecantusDB release
#: has other internals, it leaves the server as it is.
LAUNCHER_HELPERS = """def wake_listener(seconds):
    # connect to our own port until this process is gone (at most seconds): wakes the accept thread
    import socket
    deadline = time.monotonic() + seconds
    try:
        address = (sys.argv[sys.argv.index("--host") + 1], int(sys.argv[sys.argv.index("--port") + 1]))
    except (ValueError, IndexError):
        address = None
    while time.monotonic() < deadline:
        if address is not None:
            try:
                socket.create_connection(address, timeout=0.2).close()
            except OSError:
                pass
        time.sleep(0.02)


def relay_signals():
    # from the main thread, before the server installs its handlers
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    main = threading.main_thread().ident

    def in_handler(signum):
        code = getattr(signal.getsignal(signum), "__code__", None)
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code is code:
                return True
            frame = frame.f_back
        return code is None

    def watch():
        while True:
            for signum in os.read(read_end, 64):
                if signum in (signal.SIGTERM, signal.SIGINT):
                    time.sleep(0.05)
                    if not in_handler(signum):
                        signal.pthread_kill(main, signum)

    threading.Thread(target=watch, name="aecs-signal-relay", daemon=True).start()


def memo_index_catalog():
    # the index catalog read once per write statement (see the comment above LAUNCHER_HELPERS)
    try:
        from secantus import storage
    except ImportError:
        return
    cls = getattr(storage, "Storage", None)
    # each runs under the collection's lock, start to end or from before its first catalog read
    statements = ("_insert_chunk", "_update_matching_single_txn", "_update_chunk", "_delete_chunk")
    statements += ("_delete_matching_single_txn",)
    if cls is None or not all(callable(getattr(cls, n, None)) for n in ("_index_options_map",) + statements):
        return
    local = threading.local()
    read_map = cls._index_options_map

    def _index_options_map(self, db, coll):
        memo = getattr(local, "memo", None)
        if memo is None:
            return read_map(self, db, coll)
        key = (id(self), db, coll)
        found = memo.get(key)
        if found is None:
            found = memo[key] = read_map(self, db, coll)
        return found

    def keeping(statement):
        def run(self, *args, **kwargs):
            outer = getattr(local, "memo", None)
            local.memo = {}
            try:
                return statement(self, *args, **kwargs)
            finally:
                local.memo = outer

        return run

    cls._index_options_map = _index_options_map
    for name in statements:
        setattr(cls, name, keeping(getattr(cls, name)))
"""


def wake_listener(host: str, port: int | None) -> None:
    """Connect to the server's port once (and close): wakes SecantusDB's accept thread, which a
    stop waits for (``LAUNCHER_HELPERS``). Harmless when nothing listens."""
    if port is None:
        return
    with contextlib.suppress(OSError):
        socket.create_connection((host, port), timeout=0.2).close()


# Runs SecantusDB in the child, with a watch thread that ends it when its parent dies (a command
# killed with SIGKILL must not leave a server holding the data dir): one SIGTERM, the clean stop,
# then, like ``EmbeddedServer.stop``, a hard exit if the server is still running
# ``ORPHAN_GRACE_SECONDS`` later. Not PR_SET_PDEATHSIG: Linux sends that signal again each time an
# exiting thread of the parent hands the child on to the next one, and SecantusDB's SIGTERM handler
# is not reentrant (a second SIGTERM inside it deadlocks the server: seen in CI, stack dumped).
ORPHAN_GRACE_SECONDS = 10
_LAUNCHER = """# aecs-mongo: the embedded SecantusDB server
import os, runpy, signal, sys, threading, time
parent, grace = int(sys.argv.pop(1)), float(sys.argv.pop(1))
if os.getppid() != parent:
    sys.exit("aecs-mongo: the parent of the embedded server is gone")


def end_when_orphaned():
    while os.getppid() == parent:
        time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGTERM)
    wake_listener(grace)
    print("aecs-mongo: the server did not stop after its parent died; exiting", file=sys.stderr, flush=True)
    os._exit(1)


threading.Thread(target=end_when_orphaned, name="aecs-orphan-watch", daemon=True).start()
relay_signals()
memo_index_catalog()
runpy.run_module("secantus", run_name="__main__", alter_sys=True)
"""
_LAUNCHER = _LAUNCHER.replace("\n\n\ndef end_when_orphaned", "\n\n" + LAUNCHER_HELPERS + "\n\ndef end_when_orphaned", 1)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """Start SecantusDB on a free loopback port; stop it (and remove a temporary data dir) on exit.

    ``standalone=True`` advertises a standalone server (no transactions); the default is a
    single-node replica set. ``data_dir=None`` uses a temporary directory. The server runs in a
    session of its own (a terminal's Ctrl-C reaches only us) and stops by itself when this
    process dies without stopping it (SIGTERM, then a hard exit after ``ORPHAN_GRACE_SECONDS``).

    Private by default (:mod:`aecs_mongo.embedded.datadir`): the data directory is made 0700 and the
    server creates its files with umask 077; with ``auth=True`` (the default) it requires
    SCRAM-SHA-256 authentication, and ``uri`` carries the credentials of its one user (``root``
    role), created on the first start with a random secret kept in ``credentials.json`` (0600).
    A directory without credentials (new, or made by a release before authentication) gets them
    on its first start: SecantusDB creates users only while authentication is off, so that start
    runs once without it, creates the user, removes any other user, stops and starts again with
    ``--auth``. ``sync_on_commit=True`` makes the server fsync its log on every commit.
    ``auth=False`` is for throw-away servers only. ``port``: listen there instead of on a free
    port (a server started again on its data directory keeps its address). The oplog is bounded
    (``oplog_max_entries``, ``oplog_retention_seconds``; see ``OPLOG_MAX_ENTRIES``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        standalone: bool = False,
        test_commands: bool = False,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        auth: bool = True,
        sync_on_commit: bool = False,
        port: int | None = None,
        oplog_max_entries: int = OPLOG_MAX_ENTRIES,
        oplog_retention_seconds: int = OPLOG_RETENTION_SECONDS,
    ) -> None:
        self.standalone = standalone
        self.requested_port = port
        self.test_commands = test_commands
        self.host = host
        self.startup_timeout = startup_timeout
        self.auth = auth
        self.sync_on_commit = sync_on_commit
        self.oplog_max_entries = oplog_max_entries
        self.oplog_retention_seconds = oplog_retention_seconds
        self._tmp: str | None = None
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self.port: int | None = None
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._credentials: Credentials | None = None
        self._log_start = 0

    def __repr__(self) -> str:
        return f"EmbeddedServer(data_dir={str(self.data_dir)!r}, port={self.port}, auth={self.auth})"

    @property
    def uri(self) -> str:
        """The server's URI, with the credentials when it requires authentication (keep it to
        yourself: print ``data_dir`` or ``address`` instead)."""
        if self.port is None:
            raise RuntimeError("the embedded server is not running")
        return self._uri(self._credentials if self.auth else None)

    @property
    def address(self) -> str:
        """``host:port``, nothing secret."""
        return f"{self.host}:{self.port}"

    def _uri(self, credentials: Credentials | None) -> str:
        if credentials is None:
            return f"mongodb://{self.host}:{self.port}/?directConnection=true"
        user, password = quote_plus(credentials.user), quote_plus(credentials.password)
        return (
            f"mongodb://{user}:{password}@{self.host}:{self.port}/?directConnection=true"
            "&authSource=admin&authMechanism=SCRAM-SHA-256"
        )

    def start(self) -> str:
        """Start the server and wait until it answers ``ping``; returns its URI."""
        self.prepare()
        self._launch(auth=self.auth)
        return self.uri

    def prepare(self) -> Credentials | None:
        """Everything before the server process: the private data directory, the server's empty
        configuration file and, with ``auth``, the credentials (the user created on the first
        start of a directory without them). Returns the credentials."""
        if not embedded_available():
            raise ServerFeatureError(f"the embedded server is not installed: {INSTALL_HINT}")
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="aecs-secantus-")  # 0700
            self.data_dir = Path(self._tmp)
        make_private(self.data_dir)
        # an empty configuration of our own: SecantusDB would otherwise read a secantusd.toml
        # from the working directory, ~/.secantus or /etc/secantus
        config = self.data_dir / "secantusd.toml"
        if not config.exists():
            os.close(os.open(config, os.O_WRONLY | os.O_CREAT, 0o600))
        self._log = self.data_dir / "server.log"
        if self.auth:
            self._credentials = load_credentials(self.data_dir)
            if self._credentials is None:
                self._provision()
        return self._credentials

    def server_args(self, port: int, *, auth: bool) -> list[str]:
        """SecantusDB's command line for this server on ``port`` (after ``prepare``)."""
        data_dir = self._data_dir
        args = ["--config", str(data_dir / "secantusd.toml"), "--host", self.host, "--port", str(port)]
        args += ["--storage-path", str(data_dir / "db"), "--log-level", "WARNING"]
        args += ["--oplog-max-entries", str(self.oplog_max_entries)]
        args += ["--oplog-retention-seconds", str(self.oplog_retention_seconds)]
        if auth:
            args.append("--auth")
        if self.standalone:
            args.append("--standalone")
        if self.test_commands:
            args.append("--enable-test-commands")
        if self.sync_on_commit:
            args.append("--sync-on-commit")
        return args

    def _launch(self, *, auth: bool) -> None:
        assert self._log is not None
        self.port = self.requested_port or _free_port(self.host)
        parent = os.getpid()  # the server's watch thread ends it when this process is gone
        args = [sys.executable, "-c", _LAUNCHER, str(parent), str(ORPHAN_GRACE_SECONDS)]
        args += self.server_args(self.port, auth=auth)
        self.mark_log()
        fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            # a session of its own: a terminal's Ctrl-C goes to the command, which stops the
            # server when it is done, instead of killing the server under a write; umask 077:
            # everything the server creates is private
            self._proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        self.pid = self._proc.pid
        self._wait_ready(self._credentials if auth else None)

    def _provision(self) -> None:
        """First start of a directory without credentials: create the server's one user while
        authentication is still off, on a fresh random port, then stop; ``start`` starts again
        with ``--auth``. Users that are not ours (created by anyone during that window, or in the
        directory before) are dropped: only the holder of the credentials file may connect."""
        from pymongo import MongoClient
        from pymongo.errors import OperationFailure

        credentials = new_credentials()
        self._launch(auth=False)
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(self._uri(None), serverSelectionTimeoutMS=5000)
            with client:
                admin = client.admin
                try:
                    admin.command("createUser", credentials.user, pwd=credentials.password, roles=["root"])
                except OperationFailure as exc:
                    if exc.code != _USER_EXISTS and "already exists" not in str(exc):
                        raise
                    # a start that created the user died before saving the credentials
                    admin.command("updateUser", credentials.user, pwd=credentials.password, roles=["root"])
                users = admin.command("usersInfo", forAllDBs=True).get("users", [])
                for user in users:
                    if (user.get("user"), user.get("db")) != (credentials.user, "admin"):
                        log.warning("dropping user %s@%s of the embedded server", user.get("user"), user.get("db"))
                        client[user["db"]].command("dropUser", user["user"])
            save_credentials(self._data_dir, credentials)
        except Exception as exc:
            raise ServerFeatureError(f"could not set up authentication on the embedded server: {exc}") from None
        finally:
            self.stop(remove_tmp=False)
        self._credentials = credentials

    @property
    def _data_dir(self) -> Path:
        if self.data_dir is None:
            raise RuntimeError("the embedded server has no data directory yet")
        return self.data_dir

    def _wait_ready(self, credentials: Credentials | None) -> None:
        from pymongo import MongoClient
        from pymongo.errors import OperationFailure, PyMongoError

        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                reason = exit_reason(self._proc.returncode, self.log_tail(5), self._log)
                raise ServerFeatureError(f"the embedded server exited at start-up: {reason}")
            try:
                client: MongoClient[dict[str, object]] = MongoClient(
                    self._uri(credentials), serverSelectionTimeoutMS=500
                )
                with client:
                    # an authenticated command: the credentials are checked before we say "up"
                    client.admin.command("ping" if credentials is None else "connectionStatus")
                return
            except OperationFailure as exc:
                self.stop(remove_tmp=False)
                raise ServerFeatureError(
                    f"the embedded server refused the credentials in {self._data_dir / CREDENTIALS_FILE}: {exc}"
                ) from None
            except PyMongoError:
                if time.monotonic() > deadline:
                    self.stop(remove_tmp=False)
                    raise ServerFeatureError("the embedded server did not answer in time") from None
                time.sleep(0.1)

    def mark_log(self) -> None:
        """Remember where the log ends: ``log_tail`` shows only what a start after this wrote."""
        try:
            self._log_start = self._log.stat().st_size if self._log is not None else 0
        except OSError:
            self._log_start = 0

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` the server wrote to its log since ``mark_log`` (its last start)."""
        if self._log is None or not self._log.exists():
            return ""
        with open(self._log, "rb") as f:
            f.seek(self._log_start)
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """End the server process with SIGKILL, as a crash would (no clean shutdown, no
        checkpoint); ``start`` starts it again on the same data directory and port."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def stop(self, *, remove_tmp: bool = True) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove a temporary data dir."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            deadline = time.monotonic() + 10
            while self._proc.poll() is None and time.monotonic() < deadline:
                wake_listener(self.host, self.port)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=0.02)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if remove_tmp and self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
