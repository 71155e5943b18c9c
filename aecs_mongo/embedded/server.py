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
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote_plus

from ..errors import ServerFeatureError
from . import launcher
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
#: reads between two runs. Every message is five to ten oplog entries, each a copy of what it
#: wrote, so SecantusDB's default (100,000 entries, an hour) kept the last 10,000 messages' raw
#: mail and attachments a second time. A consumer whose position fell out of the oplog continues
#: by a backfill (``aecs_mongo.asynchronous.workers``), so a short oplog loses nothing.
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


def wake_listener(host: str, port: int | None) -> None:
    """Connect to the server's port once (and close): wakes SecantusDB's accept thread, which a
    stop waits for (:func:`aecs_mongo.embedded.launcher.wake_listener`). Harmless when nothing
    listens."""
    if port is None:
        return
    with contextlib.suppress(OSError):
        socket.create_connection((host, port), timeout=0.2).close()


#: Seconds the server may take to stop after its parent died before it exits hard
#: (:func:`aecs_mongo.embedded.launcher.watch_parent`).
ORPHAN_GRACE_SECONDS = 10


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

    def launch_args(self, port: int, *, auth: bool) -> list[str]:
        """The launcher's command line for this server on ``port``: stopped when this process is
        gone (:mod:`aecs_mongo.embedded.launcher`)."""
        options = ["--parent", str(os.getpid()), "--grace", str(ORPHAN_GRACE_SECONDS)]
        return launcher.command(options, self.server_args(port, auth=auth))

    def _launch(self, *, auth: bool) -> None:
        assert self._log is not None
        self.port = self.requested_port or _free_port(self.host)
        args = self.launch_args(self.port, auth=auth)
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
                env=launcher.child_env(),
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
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()
