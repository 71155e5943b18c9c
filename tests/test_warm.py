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

from aecs_mongo.embedded.server import embedded_available
from aecs_mongo.warm.protocol import REQUEST, SOCKET_NAME, Request, encode_request, read_frame, send_frame

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
        env = {**self.env, "AECS_WARM": mode}
        return subprocess.Popen([sys.executable, "-m", "aecs_mongo", *argv], cwd=self.work, env=env, **kw)

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
