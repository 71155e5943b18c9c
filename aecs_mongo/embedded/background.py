"""The command line's shared embedded server: one per data directory, kept between commands.

A server started and stopped around each command would cost more than most commands take. Like
gpg-agent or ssh's ControlPersist, the command line keeps one server per data directory running
in the background and lets it stop itself once idle. The library's ``EmbeddedServer`` (a child
of its caller, stopped on exit) does not change: this module is the command line's choice.

In the data directory (private, like the rest of it; see :mod:`aecs_mongo.embedded.datadir`):

- ``server.json``: the record of the running server (pid, port, start time, idle time, boot id,
  uid), written while holding ``server.lock``. It is trusted only when its process is alive, ours
  (same uid, our launcher's command line with this data directory) and answers with this
  directory's credentials; otherwise it is stale (the server was SIGKILLed, the machine
  rebooted, the pid was reused) and is replaced: a process that is not ours is never signalled.
- ``server.lock``: held (``flock``, exclusive) to look at the record and start a server, so two
  commands started at once start one server; held by the server itself while it stops.
- ``server.clients``: every command that uses the server holds a shared ``flock`` on it for as
  long as it runs (a ``watch`` for hours); the kernel drops it when the command dies.
- ``server.used``: its mtime is the last time a command started or ended.

The server's launcher runs a watch thread (:func:`aecs_mongo.embedded.launcher.watch_idle`):
every second, when no command holds ``server.clients`` and nobody holds ``server.lock``, and the
last use is ``idleSeconds`` ago, it removes the record and stops the server cleanly (SIGTERM:
SecantusDB checkpoints and closes).
It also stops when the record no longer names it (removed, or replaced), so a server whose
starter died before writing the record, or whose data directory was deleted, does not linger.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServerFeatureError
from ..pure.settings import parse_duration
from .datadir import PRIVATE_UMASK, Credentials, make_private, read_record, remove_record, write_record
from .launcher import CLIENTS_LOCK, MODULE, RECORD, START_LOCK, USED, child_env, command
from .server import EmbeddedServer, _free_port, exit_reason, wake_listener

__all__ = [
    "DEFAULT_KEEP_SECONDS",
    "KEEP_ENV",
    "ServerStatus",
    "attach",
    "hold",
    "parse_duration",
    "running",
    "start",
    "status",
    "still_running",
    "stop",
    "use",
]

DEFAULT_KEEP_SECONDS = 300.0
KEEP_ENV = "AECS_KEEP_SERVER"
LOCK_TIMEOUT = 120.0  # a start (first start: two) or a stop holds the lock for seconds, never minutes
STOP_TIMEOUT = 60.0
_FORMER_MARK = "# aecs-mongo: the shared embedded SecantusDB server"
IDLE_TICK_SECONDS = 1.0  # how often the shared server looks whether it is idle
STOP_GRACE_SECONDS = 10.0  # how long its own stop may take before it exits hard


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie child of ours is reaped and counts as gone)."""
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_ours(record: dict[str, Any], data_dir: Path) -> bool:
    """The record's process runs, is ours and is our launcher serving this data directory."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(record.get("port"), int):
        return False
    if record.get("bootId") != _boot_id() or not _alive(pid):
        return False
    proc = Path(f"/proc/{pid}")
    if not proc.exists():  # no /proc: the credentials check below still tells
        return True
    try:
        if proc.stat().st_uid != os.geteuid():
            return False
        argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if MODULE in argv:
        shared = argv[argv.index(MODULE) + 1 : argv.index(MODULE) + 3] == ["--shared", str(data_dir)]
    else:  # a shared server started by a release whose launcher ran as ``python -c SOURCE``
        shared = any(a.startswith(_FORMER_MARK) for a in argv)
    return shared and str(data_dir / "db") in argv


def _uri(host: str, port: int, credentials: Credentials) -> str:
    server = EmbeddedServer(auth=True, host=host)
    server.port = port
    server._credentials = credentials
    return server.uri


def _answers(uri: str, timeout: float) -> bool | None:
    """True when the server at ``uri`` takes our credentials; False when it refuses them (it is
    not this directory's server); None when it does not answer within ``timeout``."""
    from pymongo import MongoClient
    from pymongo.errors import OperationFailure, PyMongoError

    deadline = time.monotonic() + timeout
    while True:
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=500)
            with client:
                client.admin.command("connectionStatus")
            return True
        except OperationFailure:
            return False
        except PyMongoError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


@contextlib.contextmanager
def _locked(path: Path, *, exclusive: bool = True, timeout: float = LOCK_TIMEOUT) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        flags = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        while True:
            try:
                fcntl.flock(fd, flags)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerFeatureError(f"{path} stayed locked for {timeout:.0f} s") from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)


def _touch(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    os.utime(path)


@dataclass
class _Live:
    record: dict[str, Any]
    uri: str


def _live(server: EmbeddedServer, credentials: Credentials, startup_timeout: float) -> _Live | None:
    """The running server of the data directory (lock held), or None; a stale record is
    removed, and a server of ours that stopped answering is stopped first."""
    data_dir = server._data_dir
    path = data_dir / RECORD
    record = read_record(path)
    if record is None:
        return None
    if not _is_ours(record, data_dir):
        remove_record(path)
        return None
    uri = _uri(str(record.get("host", server.host)), int(record["port"]), credentials)
    answer = _answers(uri, startup_timeout)  # a starter that died mid-start: the server may still come up
    if answer:
        return _Live(record, uri)
    if answer is None and Path(f"/proc/{record['pid']}").exists():
        _terminate(
            int(record["pid"]), str(record.get("host", "127.0.0.1")), record.get("port")
        )  # ours for sure (its command line said so), and hung
    remove_record(path)
    return None


def _terminate(pid: int, host: str, port: int | None) -> bool:
    """SIGTERM (SecantusDB's clean stop; its listener on ``host:port`` woken so the stop takes
    no 2 s), SIGKILL after ``STOP_TIMEOUT``; True when it stopped cleanly."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while _alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
            return False
        wake_listener(host, port)
        time.sleep(0.02)
    return True


def _spawn(server: EmbeddedServer, credentials: Credentials, keep_seconds: float) -> _Live:
    data_dir = server._data_dir
    port = _free_port(server.host)
    options = ["--shared", str(data_dir), "--tick", str(IDLE_TICK_SECONDS), "--grace", str(STOP_GRACE_SECONDS)]
    args = command(options, server.server_args(port, auth=True))
    server.mark_log()
    fd = os.open(data_dir / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # no terminal's signals; it outlives this command
            umask=PRIVATE_UMASK,
            cwd=data_dir,
            env=child_env(),
        )
    record = {
        "pid": proc.pid,
        "port": port,
        "host": server.host,
        "started": time.time(),
        "idleSeconds": keep_seconds,
        "bootId": _boot_id(),
        "uid": os.geteuid(),
        "dataDir": str(data_dir),
    }
    write_record(data_dir / RECORD, record)
    uri = _uri(server.host, port, credentials)
    deadline = time.monotonic() + server.startup_timeout
    while True:
        if proc.poll() is not None:
            remove_record(data_dir / RECORD)
            reason = exit_reason(proc.returncode, server.log_tail(5), data_dir / "server.log")
            raise ServerFeatureError(f"the embedded server exited at start-up: {reason}")
        answer = _answers(uri, 0.5)
        if answer:
            proc.returncode = 0  # it is meant to outlive us: no "still running" warning
            return _Live(record, uri)
        if answer is False or time.monotonic() > deadline:
            _terminate(proc.pid, server.host, port)
            remove_record(data_dir / RECORD)
            raise ServerFeatureError("the embedded server did not answer in time")


def _prepared(data_dir: Path, standalone: bool) -> tuple[EmbeddedServer, Credentials]:
    server = EmbeddedServer(data_dir, standalone=standalone)
    credentials = server.prepare()
    assert credentials is not None
    return server, credentials


@contextlib.contextmanager
def use(
    data_dir: Path,
    keep_seconds: float,
    *,
    standalone: bool = False,
    on_start: Callable[[], None] | None = None,
    companion: Callable[[Path], None] | None = None,
) -> Iterator[str]:
    """The URI of the data directory's shared server, started if none runs, for as long as the
    block runs (it holds ``server.clients``); ``keep_seconds`` becomes the server's idle time.
    ``on_start`` is called when this call starts the server (the command line's notice);
    ``companion`` with the data directory on every use, the server running (the command line
    starts its warm command host there)."""
    data_dir = Path(data_dir).absolute()
    make_private(data_dir)  # first: the lock files go into it
    with _locked(data_dir / START_LOCK):  # then the credentials: one first start provisions them
        server, credentials = _prepared(data_dir, standalone)
        live = _live(server, credentials, server.startup_timeout)
        if live is None:
            if on_start is not None:
                on_start()
            live = _spawn(server, credentials, keep_seconds)
        elif live.record.get("idleSeconds") != keep_seconds:
            live.record["idleSeconds"] = keep_seconds
            write_record(data_dir / RECORD, live.record)
        if companion is not None:
            companion(data_dir)
        with contextlib.ExitStack() as held:
            held.enter_context(_locked(data_dir / CLIENTS_LOCK, exclusive=False))
            _touch(data_dir / USED)
            clients = held.pop_all()
    with clients:
        try:
            yield live.uri
        finally:
            _touch(data_dir / USED)


@contextlib.contextmanager
def attach(data_dir: Path) -> Iterator[str | None]:
    """The URI of the data directory's shared server if one runs (held as ``use`` holds it),
    else None: the caller starts a server of its own."""
    data_dir = Path(data_dir).absolute()
    if not (data_dir / RECORD).exists():
        yield None
        return
    make_private(data_dir)
    with _locked(data_dir / START_LOCK):
        server, credentials = _prepared(data_dir, False)
        live = _live(server, credentials, server.startup_timeout)
        if live is None:
            clients = None
        else:
            with contextlib.ExitStack() as held:
                held.enter_context(_locked(data_dir / CLIENTS_LOCK, exclusive=False))
                _touch(data_dir / USED)
                clients = held.pop_all()
    if clients is None or live is None:
        yield None
        return
    with clients:
        try:
            yield live.uri
        finally:
            _touch(data_dir / USED)


def running(data_dir: Path) -> tuple[dict[str, Any], str] | None:
    """The record and the URI of the data directory's shared server when its record names a
    live server of ours, else None. Only looks: a stale record is left for the next command
    that starts a server (the warm command host calls this, and connects to check)."""
    data_dir = Path(data_dir).absolute()
    with _locked(data_dir / START_LOCK):
        record = read_record(data_dir / RECORD)
        if record is None or not _is_ours(record, data_dir):
            return None
        _, credentials = _prepared(data_dir, False)
    return record, _uri(str(record.get("host", "127.0.0.1")), int(record["port"]), credentials)


def still_running(data_dir: Path, pid: int) -> dict[str, Any] | None:
    """The data directory's record while it still names the server ``pid`` and that process
    runs (a zombie is gone), else None; a quick look (the warm command host's, per command)."""
    record = read_record(Path(data_dir) / RECORD)
    if record is None or record.get("pid") != pid or not _alive(pid):
        return None
    return record


@contextlib.contextmanager
def hold(data_dir: Path) -> Iterator[None]:
    """Count as a command using the shared server while the block runs (the warm command host
    runs each command in one): ``server.clients`` held, ``server.used`` touched at both ends."""
    data_dir = Path(data_dir).absolute()
    with _locked(data_dir / CLIENTS_LOCK, exclusive=False):
        _touch(data_dir / USED)
        try:
            yield
        finally:
            _touch(data_dir / USED)


@dataclass(frozen=True)
class ServerStatus:
    """What ``aecs-mongo server status`` shows."""

    data_dir: str
    running: bool
    pid: int | None = None
    port: int | None = None
    started: float | None = None
    idle_seconds: float | None = None
    idle_deadline: float | None = None
    in_use: bool = False

    def as_dict(self) -> dict[str, Any]:
        now = time.time()
        return {
            "dataDir": self.data_dir,
            "running": self.running,
            "pid": self.pid,
            "port": self.port,
            "uptimeSeconds": None if self.started is None else round(now - self.started, 1),
            "idleSeconds": self.idle_seconds,
            "inUse": self.in_use,
            "stopsInSeconds": None
            if self.idle_deadline is None or self.in_use
            else round(max(0.0, self.idle_deadline - now), 1),
        }


def _status_of(data_dir: Path, live: _Live | None) -> ServerStatus:
    if live is None:
        return ServerStatus(str(data_dir), running=False)
    record = live.record
    in_use = False
    fd = os.open(data_dir / CLIENTS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        in_use = True
    finally:
        os.close(fd)
    try:
        used = (data_dir / USED).stat().st_mtime
    except OSError:
        used = float(record["started"])
    idle = float(record.get("idleSeconds", DEFAULT_KEEP_SECONDS))
    return ServerStatus(
        str(data_dir),
        running=True,
        pid=int(record["pid"]),
        port=int(record["port"]),
        started=float(record["started"]),
        idle_seconds=idle,
        idle_deadline=max(used, float(record["started"])) + idle,
        in_use=in_use,
    )


def status(data_dir: Path) -> ServerStatus:
    """Is the data directory's shared server running; where, since when, until when."""
    data_dir = Path(data_dir).absolute()
    if not (data_dir / RECORD).exists():
        return ServerStatus(str(data_dir), running=False)
    with _locked(data_dir / START_LOCK):
        server, credentials = _prepared(data_dir, False)
        return _status_of(data_dir, _live(server, credentials, 5.0))


def start(
    data_dir: Path,
    keep_seconds: float,
    *,
    standalone: bool = False,
    companion: Callable[[Path], None] | None = None,
) -> ServerStatus:
    """Make sure the shared server runs (for scripts that want it up before their commands);
    ``companion`` as for ``use``."""
    data_dir = Path(data_dir).absolute()
    with use(data_dir, keep_seconds, standalone=standalone, companion=companion):
        pass
    return status(data_dir)


def stop(data_dir: Path) -> ServerStatus | None:
    """Stop the shared server cleanly (its data checkpointed and closed); returns what ran, or
    None when nothing did. Commands still using it lose their connection."""
    data_dir = Path(data_dir).absolute()
    if not (data_dir / RECORD).exists():
        return None
    with _locked(data_dir / START_LOCK):
        server, credentials = _prepared(data_dir, False)
        live = _live(server, credentials, 5.0)
        if live is None:
            return None
        was = _status_of(data_dir, live)
        clean = _terminate(int(live.record["pid"]), str(live.record.get("host", "127.0.0.1")), live.record.get("port"))
        remove_record(data_dir / RECORD)
    if not clean:
        raise ServerFeatureError(f"the server (pid {was.pid}) did not stop in {STOP_TIMEOUT:.0f} s and was killed")
    return was
