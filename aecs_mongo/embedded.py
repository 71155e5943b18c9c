"""The embedded server: SecantusDB (a MongoDB wire-protocol server) as a child process.

Used by the test fixtures, the demo and the CLI when no ``MONGODB_URI`` is given. SecantusDB is
GPL-2.0, so it is only ever run as a separate program from the optional ``embedded`` extra,
never imported: ``pip install 'aecs-mongo[embedded]'``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .errors import ServerFeatureError

__all__ = ["INSTALL_HINT", "EmbeddedServer", "embedded_available"]

INSTALL_HINT = "pip install 'aecs-mongo[embedded]'"


def embedded_available() -> bool:
    """True when the SecantusDB server can be started from this interpreter."""
    return importlib.util.find_spec("secantus") is not None


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
    time.sleep(grace)
    print("aecs-mongo: the server did not stop after its parent died; exiting", file=sys.stderr, flush=True)
    os._exit(1)


threading.Thread(target=end_when_orphaned, name="aecs-orphan-watch", daemon=True).start()
runpy.run_module("secantus", run_name="__main__", alter_sys=True)
"""


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
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        standalone: bool = False,
        test_commands: bool = False,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
    ) -> None:
        self.standalone = standalone
        self.test_commands = test_commands
        self.host = host
        self.startup_timeout = startup_timeout
        self._tmp: str | None = None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("the embedded server is not running")
        return f"mongodb://{self.host}:{self.port}/?directConnection=true"

    def start(self) -> str:
        """Start the server and wait until it answers ``ping``; returns its URI."""
        if not embedded_available():
            raise ServerFeatureError(f"the embedded server is not installed: {INSTALL_HINT}")
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="aecs-secantus-")
            self.data_dir = Path(self._tmp)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port(self.host)
        parent = os.getpid()  # the server's watch thread ends it when this process is gone
        args = [
            sys.executable,
            "-c",
            _LAUNCHER,
            str(parent),
            str(ORPHAN_GRACE_SECONDS),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--storage-path",
            str(self.data_dir / "db"),
            "--log-level",
            "WARNING",
        ]
        if self.standalone:
            args.append("--standalone")
        if self.test_commands:
            args.append("--enable-test-commands")
        self._log = self.data_dir / "server.log"
        with open(self._log, "ab") as log:
            # a session of its own: a terminal's Ctrl-C goes to the command, which stops the
            # server when it is done, instead of killing the server under a write
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self._wait_ready()
        return self.uri

    def _wait_ready(self) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ServerFeatureError(f"the embedded server exited at start-up: {self.log_tail()}")
            try:
                client: MongoClient[dict[str, object]] = MongoClient(self.uri, serverSelectionTimeoutMS=500)
                with client:
                    client.admin.command("ping")
                return
            except PyMongoError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerFeatureError("the embedded server did not answer in time") from None
                time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove a temporary data dir."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
