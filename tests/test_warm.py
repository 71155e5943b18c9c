"""The warm path (aecs_mongo.warm), through the command line on the real embedded server.

One data directory for the module, its shared server kept (``AECS_KEEP_SERVER=5m``), the
sample mailbox ingested (that command starts the server and the warm command host). Each read
runs twice as a subprocess, as a person runs it: through the host (``AECS_WARM=require``: a read
no host takes fails, so a silent fallback cannot pass for the warm path) and in-process
(``AECS_WARM=0``), and the two must print the same bytes on stdout and stderr and exit alike:
text, ``--json``, errors, an 80-column terminal, a closed pipe, Ctrl-C. Then the socket's
privacy (its directory 0700, another user's connection refused by ``SO_PEERCRED``), a host
killed (commands run in-process and start a new one) and the host stopping with its server.
Speed is measured by ``scripts/bench.py`` (the warm section), never here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo.embedded.server import embedded_available
from aecs_mongo.warm.client import socket_path
from aecs_mongo.warm.protocol import (
    DECLINE,
    REQUEST,
    SOCKET_NAME,
    Request,
    encode_request,
    read_frame,
    send_frame,
)

from .conftest import Servers, enabled_backends
from .helpers.cli import command_env
from .helpers.paths import ROOT

pytestmark = pytest.mark.skipif(not embedded_available(), reason="the embedded server is not installed")

SAMPLES = ROOT / "samples" / "mailbox"


def test_the_thin_client_imports_nothing_heavy() -> None:
    """What the entry point loads before it hands a read over: no argparse, no PyMongo, no
    typing, no json, not the command line (``python -X importtime`` shows the same)."""
    code = "import sys, aecs_mongo.warm.client; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "aecs_mongo.warm.client" in loaded
    heavy = {"argparse", "pymongo", "bson", "typing", "json", "enum", "aecs_mongo.cli", "aecs_mongo.commands.base"}
    assert not heavy & loaded, heavy & loaded


def test_the_command_imports_the_thin_client_alone(tmp_path: Path) -> None:
    """The ``aecs-mongo`` script (``bin/aecs-mongo``, installed as it is) on a read no host takes
    (``AECS_WARM=require``): only the client's modules, not ``re`` (pip's generated entry-point
    script imports it first)."""
    env = {**command_env(), "AECS_DATA_DIR": str(tmp_path / "none"), "AECS_WARM": "require"}
    env.pop("MONGODB_URI", None)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "bin" / "aecs-mongo"), "count", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "no warm command host" in done.stderr, done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "aecs_mongo.warm.client" in imported
    assert not {"re", "enum", "argparse", "typing", "pymongo", "aecs_mongo.cli"} & imported, imported


class Warm:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.data = work / "data"
        self.env = {**command_env(), "AECS_DATA_DIR": str(self.data), "AECS_KEEP_SERVER": "5m"}
        for name in ("AECS_WARM", "COLUMNS", "LINES"):
            self.env.pop(name, None)

    def run(
        self, *argv: str, mode: str | None, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        env = {**self.env, **(extra or {})}
        if mode is not None:
            env["AECS_WARM"] = mode
        return subprocess.run(
            [sys.executable, "-m", "aecs_mongo", *argv], cwd=self.work, env=env, capture_output=True, timeout=120
        )

    def popen(self, *argv: str, mode: str, **kw: Any) -> subprocess.Popen[bytes]:
        """The command as a terminal starts it: Ctrl-C reaches it even where this run was
        started in the background (``cmd &`` without job control ignores SIGINT, and a child
        inherits that)."""
        env = {**self.env, "AECS_WARM": mode}
        return subprocess.Popen(
            [sys.executable, "-m", "aecs_mongo", *argv],
            cwd=self.work,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            **kw,
        )

    def host_pid(self) -> int | None:
        """The host's pid from its socket's peer credentials, or None when none answers."""
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(self.data / SOCKET_NAME))
            except OSError:
                return None
            pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            return int(pid)

    def wait_for_host(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while (pid := self.host_pid()) is None:
            log = self.data / "warm.log"
            assert time.monotonic() < deadline, log.read_text(errors="replace") if log.exists() else "no warm.log"
            time.sleep(0.1)
        return pid

    def server_pid(self) -> int:
        return int(json.loads((self.data / "server.json").read_text())["pid"])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warm]:
    w = Warm(tmp_path_factory.mktemp("warm"))
    done = w.run("ingest", str(SAMPLES), mode=None)  # AECS_WARM=0 would start no host
    assert done.returncode == 0, done.stderr.decode()
    host = w.wait_for_host()
    try:
        yield w
    finally:
        w.run("server", "stop", mode="0")
        deadline = time.monotonic() + 30
        while not _gone(host) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _gone(host):
            os.kill(host, signal.SIGKILL)


def _same(warm: Warm, *argv: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    served = warm.run(*argv, mode="require", extra=extra)
    here = warm.run(*argv, mode="0", extra=extra)
    assert b"no warm command host" not in served.stderr, served.stderr.decode()
    assert (served.returncode, served.stdout, served.stderr) == (here.returncode, here.stdout, here.stderr), argv
    return served


READS = [
    ("inbox", "--limit", "3"),
    ("--json", "inbox", "--limit", "3"),
    ("threads",),
    ("threads", "--json"),
    ("thread", "plan-1@example.com"),
    ("thread", "plan-1@example.com", "--json", "--limit", "2"),
    ("show", "plan-1@example.com"),
    ("show", "plan-1@example.com", "--raw"),
    ("show", "plan-1@example.com", "--json"),
    ("search", "budget"),
    ("search", "budget", "--json"),
    ("search", "from:alice OR Köln", "--limit", "2", "--json"),
    ("count", "budget"),
    ("count", "budget", "--json"),
    ("with", "alice@example.com", "--limit", "2"),
    ("replies", "plan-1@example.com"),
    ("find", "Subject", "Quarterly planning"),
    ("mailboxes",),
    ("inbox", "--query", "budget", "--json"),
    ("-v", "inbox", "--limit", "1"),
    ("stats",),
    ("stats", "--json"),
]

ERRORS = [
    (("thread", "no-such-thread"), 1),
    (("show", "nope@example.com"), 1),
    (("show", "plan-1@example.com", "--raw", "--json"), 2),
    (("search", '"unclosed'), 2),
    (("inbox", "--cursor", "garbage"), None),
    (("inbox", "--mailbox", "nobody"), 0),
]


@pytest.mark.parametrize("argv", READS, ids=[" ".join(a) for a in READS])
def test_a_read_prints_the_same_through_the_host(warm: Warm, argv: tuple[str, ...]) -> None:
    done = _same(warm, *argv)
    assert done.returncode == 0 and done.stdout


def test_a_read_after_a_global_option_with_a_value_goes_through_the_host(warm: Warm) -> None:
    """``--blobs URL`` (the data directory's own blob store) before the command: the client takes
    the command after the URL, and the host runs the read as in-process does."""
    url = f"file://{(warm.data / 'blobs').resolve()}"
    for argv in (("--blobs", url, "inbox", "--limit", "2"), ("--search-index", "none", "count", "budget")):
        done = _same(warm, *argv)
        assert done.returncode == 0 and done.stdout


@pytest.mark.parametrize(("argv", "code"), ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_an_error_is_the_same_line_and_exit_code(warm: Warm, argv: tuple[str, ...], code: int | None) -> None:
    done = _same(warm, *argv)
    if code is not None:
        assert done.returncode == code
    assert b"Traceback" not in done.stderr


def test_what_the_host_declines_runs_in_process_alike(warm: Warm) -> None:
    """A usage error, --help, another --keep-server: the host does not take them (the client
    runs them in-process), and the output is the in-process one."""
    for argv in (("inbox", "--bogus"), ("inbox", "--help"), ("--keep-server", "90s", "count", "budget")):
        default = warm.run(*argv, mode=None)
        here = warm.run(*argv, mode="0")
        assert (default.returncode, default.stdout, default.stderr) == (here.returncode, here.stdout, here.stderr)
    assert warm.run("inbox", "--bogus", mode="require").returncode == 1  # no host took it
    warm.run("--keep-server", "5m", "count", "budget", mode="0")  # the server's idle time as before


def test_pages_follow_their_cursor_and_fit_80_columns(warm: Warm) -> None:
    first = _same(warm, "--json", "inbox", "--limit", "2")
    cursor = json.loads(first.stdout.splitlines()[-1])["next_cursor"]
    second = _same(warm, "--json", "inbox", "--limit", "2", "--cursor", cursor)
    assert not {json.loads(x).get("messageId") for x in first.stdout.splitlines()[:-1]} & {
        json.loads(x).get("messageId") for x in second.stdout.splitlines()
    }
    for command in ("inbox", "threads"):
        text = _same(warm, command, "--limit", "2", extra={"COLUMNS": "80"}).stdout.decode()
        assert text.splitlines()[-1].startswith("next_cursor: ")
        assert max(len(line) for line in text.splitlines()) <= 80, text


def test_a_closed_pipe_ends_both_alike(warm: Warm) -> None:
    """``| head`` gone before the output: exit 1, nothing on stderr, no traceback."""
    results = []
    for mode in ("require", "0"):
        proc = warm.popen("search", "budget", "--json", mode=mode, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        results.append((proc.wait(timeout=120), err))
    assert results[0] == results[1] == (1, b"")


def test_ctrl_c_stops_the_command_in_the_host_and_exits_130(warm: Warm) -> None:
    """The server stopped (SIGSTOP): the read hangs on it; Ctrl-C (SIGINT to the client) ends it
    with ``interrupted`` and 130, as in-process; the host serves the next command."""
    server = warm.server_pid()
    results = []
    os.kill(server, signal.SIGSTOP)
    try:
        for mode in ("require", "0"):
            proc = warm.popen("inbox", mode=mode, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(2.0)
            assert proc.poll() is None  # waiting for the server
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            results.append((proc.returncode, out, err))
    finally:
        os.kill(server, signal.SIGCONT)
    assert results[0] == results[1] == (130, b"", b"aecs-mongo: interrupted\n")
    _same(warm, "count", "budget")


def test_the_socket_is_the_users_alone(warm: Warm) -> None:
    assert stat.S_IMODE(warm.data.stat().st_mode) == 0o700
    assert stat.S_IMODE((warm.data / SOCKET_NAME).stat().st_mode) == 0o600
    if os.geteuid() != 0:
        pytest.skip("another user's connection needs root to make (setuid)")
    # a process of user 65534 that the file system lets through: SO_PEERCRED still refuses it
    request = Request(["count", "budget"], str(warm.work), warm.env, (False, False), None, (("utf-8", "strict"),) * 2)
    answer = _as_nobody(str(warm.data / SOCKET_NAME), encode_request(request))
    assert answer in (b"none", b"closed"), answer
    with socket.socket(socket.AF_UNIX) as mine:  # the user's own connection is answered
        mine.connect(str(warm.data / SOCKET_NAME))
        send_frame(mine, REQUEST, b"not a request")
        assert read_frame(mine) is None  # ...and a malformed request closed, the host serving on
    _same(warm, "count", "budget")


def _as_nobody(path: str, request: bytes) -> bytes:
    """Connect to ``path`` as user 65534, send a request; ``none`` or ``closed`` when nothing
    came back. A forked child (the interpreter lives under /root) whose effective uid is 65534
    (what the kernel reports as the peer's) and whose file-system uid stays 0 (``setfsuid``),
    so that the directory's mode is not what stops it."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        answer = b"error"
        try:
            import ctypes

            os.setresuid(65534, 65534, 0)
            ctypes.CDLL(None).setfsuid(0)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                send_frame(s, REQUEST, request)
                answer = b"none" if read_frame(s) is None else b"answered"
        except ConnectionError:
            answer = b"closed"
        except OSError as exc:
            answer = f"error {exc}".encode()
        finally:
            os.write(writer, answer)
            os._exit(0)
    os.close(writer)
    os.waitpid(child, 0)
    with os.fdopen(reader, "rb") as got:
        return got.read()


def test_a_killed_host_leaves_commands_working_and_is_started_again(warm: Warm) -> None:
    host = warm.wait_for_host()
    os.kill(host, signal.SIGKILL)
    while not _gone(host):
        time.sleep(0.05)
    assert (warm.data / SOCKET_NAME).exists()  # a socket nobody listens on
    here = warm.run("count", "budget", mode="0")
    default = warm.run("count", "budget", mode=None)  # the client falls back in-process
    assert (default.returncode, default.stdout, default.stderr) == (here.returncode, here.stdout, here.stderr)
    assert warm.wait_for_host() != host  # that in-process command started a new host
    _same(warm, "count", "budget")


def test_the_host_stops_with_its_server(tmp_path: Path) -> None:
    w = Warm(tmp_path)
    assert w.run("ingest", str(SAMPLES / "01-plan.eml"), mode=None).returncode == 0
    host = w.wait_for_host()
    assert w.run("server", "stop", mode="0").returncode == 0
    deadline = time.monotonic() + 30
    while not _gone(host):
        assert time.monotonic() < deadline, "the host outlived its server"
        time.sleep(0.1)
    assert not (w.data / SOCKET_NAME).exists()
    assert w.run("count", "plan", mode="require").returncode == 1  # no host: the read is not taken


# --- a --uri: its host in the user's runtime directory ---------------------------------------------


class UriWarm(Warm):
    """Commands with ``--uri`` (a SecantusDB of the fixtures) and ``--db``; the runtime directory
    (``$XDG_RUNTIME_DIR``) and the local index's cache are the test's own."""

    def __init__(self, work: Path, uri: str) -> None:
        super().__init__(work)
        self.uri = uri
        self.runtime = work / "run"
        self.runtime.mkdir(mode=0o700)
        self.env |= {"XDG_RUNTIME_DIR": str(self.runtime), "XDG_CACHE_HOME": str(work / "cache")}
        self.env.pop("MONGODB_URI", None)
        self.dir = self.runtime / "aecs-mongo"

    def run(
        self, *argv: str, mode: str | None, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return super().run("--uri", self.uri, "--db", "warm_uri", *argv, mode=mode, extra=extra)

    def sockets(self) -> list[Path]:
        return sorted(self.dir.glob("warm-*.sock")) if self.dir.exists() else []

    def host_pid(self) -> int | None:
        for path in self.sockets():
            where, fd = socket_path(str(path.parent), path.name)  # a deep tmp_path: longer than 108 bytes
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(where)
                    pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                    return int(pid)
            except OSError:
                continue
            finally:
                if fd is not None:
                    os.close(fd)
        return None

    def wait_for_host(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while (pid := self.host_pid()) is None:
            logs = "".join(p.read_text(errors="replace") for p in self.dir.glob("*.log")) if self.dir.exists() else ""
            assert time.monotonic() < deadline, logs or "no host log"
            time.sleep(0.1)
        return pid

    def stop_host(self) -> None:
        pid = self.host_pid()
        for path in self.sockets():
            path.unlink()  # the host stops when its socket is gone
        deadline = time.monotonic() + 30
        while pid is not None and not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def uri_of(request: pytest.FixtureRequest, servers: Servers) -> str:
    names = [b for b in ("rs", "standalone") if b in enabled_backends(request.config)]
    if not names:
        pytest.skip("needs a SecantusDB backend (rs or standalone) for --uri")
    return servers.uri(names[0])


@pytest.fixture(scope="module")
def uri_warm(tmp_path_factory: pytest.TempPathFactory, uri_of: str) -> Iterator[UriWarm]:
    w = UriWarm(tmp_path_factory.mktemp("warm_uri"), uri_of)
    done = w.run("ingest", str(SAMPLES), mode=None)
    assert done.returncode == 0, done.stderr.decode()
    assert w.host_pid() is None  # a write starts no host
    first = w.run("count", "budget", mode=None)  # a read with no host: in-process, and starts one
    assert first.returncode == 0, first.stderr.decode()
    w.wait_for_host()
    try:
        yield w
    finally:
        w.stop_host()
        with MongoClient(uri_of) as client:
            client.drop_database("warm_uri")


URI_READS = [
    ("inbox", "--limit", "3"),
    ("--json", "inbox", "--limit", "3"),
    ("threads", "--json"),
    ("thread", "plan-1@example.com"),
    ("show", "plan-1@example.com", "--raw"),
    ("search", "budget", "--json"),
    ("count", "budget"),
    ("with", "alice@example.com", "--limit", "2"),
    ("-v", "mailboxes"),
    ("stats", "--json"),
    ("show", "nope@example.com"),
    ("search", '"unclosed'),
]


@pytest.mark.parametrize("argv", URI_READS, ids=[" ".join(a) for a in URI_READS])
def test_a_uri_read_prints_the_same_through_its_host(uri_warm: UriWarm, argv: tuple[str, ...]) -> None:
    done = _same(uri_warm, *argv)
    assert done.stdout or done.stderr


def test_mongodb_uri_in_the_environment_reaches_the_same_host(uri_warm: UriWarm) -> None:
    host = uri_warm.wait_for_host()
    env = {**uri_warm.env, "MONGODB_URI": uri_warm.uri}
    results = []
    for mode in ("require", "0"):
        results.append(
            subprocess.run(
                [sys.executable, "-m", "aecs_mongo", "--db", "warm_uri", "count", "budget"],
                cwd=uri_warm.work,
                env={**env, "AECS_WARM": mode},
                capture_output=True,
                timeout=120,
            )
        )
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(0, b"3\n", b"")] * 2
    assert uri_warm.host_pid() == host


def test_the_uri_host_serves_its_uri_alone(uri_warm: UriWarm) -> None:
    """Another URI (the same server, another option) has no host: its read is not taken; a
    request for another URI sent to this host's socket is declined."""
    other = uri_warm.uri + "&appName=another"
    done = Warm.run(uri_warm, "--uri", other, "--db", "warm_uri", "count", "budget", mode="require")
    assert done.returncode == 1 and b"no warm command host" in done.stderr
    [path] = uri_warm.sockets()
    argv = ["--uri", other, "--db", "warm_uri", "count", "budget"]
    request = Request(argv, str(uri_warm.work), uri_warm.env, (False, False), None, (("utf-8", "strict"),) * 2)
    where, fd = socket_path(str(path.parent), path.name)  # a deep tmp_path: longer than 108 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(where)
            send_frame(s, REQUEST, encode_request(request))
            assert read_frame(s) == (DECLINE, b"")
    finally:
        if fd is not None:
            os.close(fd)
    _same(uri_warm, "count", "budget")


def test_no_file_name_or_file_of_the_host_holds_the_uri(uri_warm: UriWarm) -> None:
    password = uri_warm.uri.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert len(password) >= 8
    host = uri_warm.wait_for_host()
    assert stat.S_IMODE(uri_warm.dir.stat().st_mode) == 0o700
    for path in uri_warm.dir.iterdir():
        assert password not in path.name and "127.0.0.1" not in path.name
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path.name
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    [sock] = uri_warm.sockets()
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert password.encode() not in Path(f"/proc/{host}/cmdline").read_bytes()  # every user reads it


def test_another_users_connection_to_the_uri_host_is_refused(uri_warm: UriWarm) -> None:
    if os.geteuid() != 0:
        pytest.skip("another user's connection needs root to make (setuid)")
    [path] = uri_warm.sockets()
    argv = ["--uri", uri_warm.uri, "--db", "warm_uri", "count", "budget"]
    request = Request(argv, str(uri_warm.work), uri_warm.env, (False, False), None, (("utf-8", "strict"),) * 2)
    where, fd = socket_path(str(path.parent), path.name)  # the forked child inherits ``fd``
    try:
        assert _as_nobody(where, encode_request(request)) in (b"none", b"closed")
    finally:
        if fd is not None:
            os.close(fd)
    _same(uri_warm, "count", "budget")


def test_the_uri_host_idles_out_after_keep_server(uri_warm: UriWarm, tmp_path: Path) -> None:
    """``--keep-server 0`` starts no host; another one is the host's idle time."""
    w = UriWarm(tmp_path, uri_warm.uri)
    assert w.run("--keep-server", "0", "count", "budget", mode=None).returncode == 0
    assert not w.sockets()
    assert w.run("--keep-server", "10s", "count", "budget", mode=None).returncode == 0
    host = w.wait_for_host()
    assert w.run("--keep-server", "10s", "count", "budget", mode="require").stdout == b"3\n"
    deadline = time.monotonic() + 30
    while not _gone(host):
        assert time.monotonic() < deadline, "the host did not idle out"
        time.sleep(0.2)
    assert not w.sockets()
    assert w.run("--keep-server", "10s", "count", "budget", mode="require").returncode == 1
