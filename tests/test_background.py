"""The command line's shared embedded server (aecs_mongo.background), run for real.

Every test runs ``aecs-mongo`` in subprocesses on a data directory of its own, with the shared
server asked for explicitly (``--keep-server``; the session sets ``AECS_KEEP_SERVER=0`` for
every other test), and stops what it started: ``server stop`` at the end, and the recorded pid
killed if that failed. Whether the second command starts no server is checked on the record
and the processes, never by timing (the benchmark measures the time: ``scripts/bench.py
--sections cli``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from aecs_mongo.embedded.server import embedded_available

from .helpers.cli import aecs, command_env

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples" / "mailbox"
SAMPLE_COUNT = len(list(SAMPLES.glob("*.eml")))

pytestmark = pytest.mark.skipif(not embedded_available(), reason="the embedded server is not installed")


def env() -> dict[str, str]:
    return command_env(("MONGODB_URI", "AECS_KEEP_SERVER"))


def run(data_dir: Path, *argv: str, keep: str = "60s") -> subprocess.CompletedProcess[bytes]:
    return aecs("--data-dir", str(data_dir), "--keep-server", keep, *argv, cwd=data_dir.parent, env=env())


def ok(result: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert result.returncode == 0, result.stderr.decode()
    return result


def record(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / "server.json"
    return json.loads(path.read_text()) if path.exists() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def servers_of(data_dir: Path) -> list[int]:
    """Pids of the SecantusDB processes serving ``data_dir`` (their command lines, in /proc)."""
    wanted = str(data_dir / "db")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if wanted in argv and alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.2)


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with the sample mailbox in it (ingested with ``--keep-server 0``)."""
    path = tmp_path_factory.mktemp("template") / "aecs-data"
    ok(run(path, "ingest", str(SAMPLES), keep="0"))
    assert record(path) is None and servers_of(path) == []
    return path


@pytest.fixture
def data_dir(ingested: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of ``ingested`` (its server is stopped: the files are at rest); stopped after."""
    path = tmp_path / "aecs-data"
    shutil.copytree(ingested, path)
    yield path
    run(path, "server", "stop")
    for pid in servers_of(path):  # a test that failed half-way: never leave a server running
        os.kill(pid, signal.SIGKILL)


def count(data_dir: Path) -> int:
    result = ok(run(data_dir, "--json", "inbox", "--limit", "100"))
    return len(result.stdout.splitlines())  # JSON lines: one per message


# --- one server, kept between commands -------------------------------------------------------------


def test_the_second_command_connects_to_the_server_the_first_started(data_dir: Path) -> None:
    assert count(data_dir) == SAMPLE_COUNT
    first = record(data_dir)
    assert first is not None and servers_of(data_dir) == [first["pid"]]
    ok(run(data_dir, "search", "Thursday"))
    ok(run(data_dir, "thread", "plan-1@example.com"))
    assert record(data_dir) == first  # no new server: the same pid, port and start time
    assert servers_of(data_dir) == [first["pid"]]
    for name in ("server.json", "server.lock", "server.clients", "server.used", "credentials.json"):
        assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    # private like the command's own server: no client without the credentials
    stranger: MongoClient[dict[str, Any]] = MongoClient(
        f"mongodb://127.0.0.1:{first['port']}/?directConnection=true", serverSelectionTimeoutMS=5000
    )
    with stranger, pytest.raises(OperationFailure) as refused:
        stranger["aecs"]["messages"].find_one()
    assert refused.value.code == 13


def test_status_then_stop_then_a_command_starts_a_new_server(data_dir: Path) -> None:
    before = json.loads(ok(run(data_dir, "--json", "server", "status")).stdout)
    assert before["running"] is False and before["dataDir"] == str(data_dir) and before["pid"] is None
    started = json.loads(ok(run(data_dir, "--json", "server", "start", keep="2m")).stdout)
    assert started["running"] and started["dataDir"] == str(data_dir) and started["idleSeconds"] == 120
    status = json.loads(ok(run(data_dir, "--json", "server", "status", keep="2m")).stdout)
    assert status["pid"] == started["pid"] and status["port"] == started["port"]
    assert status["uptimeSeconds"] >= 0 and 0 < status["stopsInSeconds"] <= 120
    text = ok(run(data_dir, "server", "status", keep="2m")).stdout.decode()
    assert f"pid {started['pid']}" in text and str(data_dir) in text and "stops in" in text
    stopped = ok(run(data_dir, "server", "stop"))
    assert f"pid {started['pid']}" in stopped.stdout.decode()
    assert not alive(started["pid"]) and record(data_dir) is None and servers_of(data_dir) == []
    assert b"no server running" in ok(run(data_dir, "server", "stop")).stdout
    assert count(data_dir) == SAMPLE_COUNT  # stopped cleanly: nothing lost; a new server
    again = record(data_dir)
    assert again is not None and again["pid"] != started["pid"]


def test_keep_server_0_stops_with_the_command_as_before(data_dir: Path) -> None:
    result = ok(run(data_dir, "--json", "inbox", keep="0"))
    assert len(result.stdout.splitlines()) == SAMPLE_COUNT
    assert record(data_dir) is None and servers_of(data_dir) == []


def test_keep_server_from_the_environment_and_bad_durations(data_dir: Path) -> None:
    environ = env() | {"AECS_KEEP_SERVER": "0"}
    argv = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "inbox"]
    ok(subprocess.run(argv, env=environ, capture_output=True, timeout=180))
    assert record(data_dir) is None and servers_of(data_dir) == []
    bad = run(data_dir, "inbox", keep="soon")
    assert bad.returncode == 2 and b"not a duration" in bad.stderr


# --- the idle stop, and a long watch ---------------------------------------------------------------


def test_the_server_stops_by_itself_when_idle(data_dir: Path) -> None:
    ok(run(data_dir, "inbox", keep="3s"))
    first = record(data_dir)
    assert first is not None and first["idleSeconds"] == 3
    # the idle watch checks every second
    wait_until(lambda: not alive(first["pid"]), 60, "the idle server stops")
    assert record(data_dir) is None and servers_of(data_dir) == []
    assert b"stopping the shared server: idle" in (data_dir / "server.log").read_bytes()
    assert count(data_dir) == SAMPLE_COUNT


def test_a_long_watch_keeps_the_server_past_its_idle_time(data_dir: Path) -> None:
    watch = subprocess.Popen(
        [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", "2s", "watch"],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: record(data_dir) is not None, 60, "the watch starts the server")
        first = record(data_dir)
        assert first is not None
        time.sleep(6)  # three times the idle time
        assert alive(first["pid"]) and record(data_dir) == first
        status = json.loads(ok(run(data_dir, "--json", "server", "status", keep="2s")).stdout)
        assert status["inUse"] and status["stopsInSeconds"] is None
        # a second command shares the server with the watch, which sees what it stores
        extra = data_dir.parent / "extra.eml"
        extra.write_bytes(b"Message-ID: <extra@example.com>\r\nFrom: x@example.com\r\nSubject: extra\r\n\r\nhi\r\n")
        ok(run(data_dir, "ingest", str(extra), keep="2s"))
        assert watch.stdout is not None
        assert b"<extra@example.com>" in watch.stdout.readline()
        assert record(data_dir) == first | {"idleSeconds": 2.0}
    finally:
        watch.terminate()
        watch.wait(timeout=60)
    wait_until(lambda: not alive(first["pid"]), 60, "the server stops once the watch is gone")


# --- one server per data directory -------------------------------------------------------------------


def test_two_first_commands_at_once_start_one_server(data_dir: Path) -> None:
    argv = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", "60s", "--json"]
    procs = [
        subprocess.Popen([*argv, "inbox"], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()
        assert len(out.splitlines()) == SAMPLE_COUNT
    rec = record(data_dir)
    assert rec is not None and servers_of(data_dir) == [rec["pid"]]


def test_a_sigkilled_server_is_replaced_by_the_next_command(data_dir: Path) -> None:
    ok(run(data_dir, "inbox"))
    first = record(data_dir)
    assert first is not None
    os.kill(first["pid"], signal.SIGKILL)
    wait_until(lambda: not alive(first["pid"]), 30, "the killed server is gone")
    assert record(data_dir) == first  # stale now
    assert count(data_dir) == SAMPLE_COUNT
    second = record(data_dir)
    assert second is not None and second["pid"] != first["pid"] and servers_of(data_dir) == [second["pid"]]


def test_a_record_naming_another_process_is_never_used_nor_signalled(data_dir: Path) -> None:
    """A stale record whose pid now belongs to another program (a reboot, a reused pid) and a
    record of another boot: replaced; the other program is left alone."""
    other = subprocess.Popen(["sleep", "120"])
    try:
        fake = {"pid": other.pid, "port": 1, "host": "127.0.0.1", "started": time.time(), "idleSeconds": 60}
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        for variant in ({"bootId": boot}, {"bootId": "another-boot"}):
            (data_dir / "server.json").write_text(json.dumps(fake | variant))
            (data_dir / "server.json").chmod(0o600)
            assert count(data_dir) == SAMPLE_COUNT
            rec = record(data_dir)
            assert rec is not None and rec["pid"] != other.pid and servers_of(data_dir) == [rec["pid"]]
            assert other.poll() is None  # not signalled
            ok(run(data_dir, "server", "stop"))
    finally:
        other.kill()
        other.wait()


def test_a_server_of_another_data_directory_is_never_used(data_dir: Path, tmp_path: Path) -> None:
    """Another directory's record copied in (same user, a live server of ours): its command line
    names the other directory, so it is not used; that server keeps running."""
    other_dir = tmp_path / "other-data"
    ok(run(other_dir, "indexes"))
    theirs = record(other_dir)
    assert theirs is not None
    try:
        (data_dir / "server.json").write_text(json.dumps(theirs))
        (data_dir / "server.json").chmod(0o600)
        assert count(data_dir) == SAMPLE_COUNT
        mine = record(data_dir)
        assert mine is not None and mine["pid"] != theirs["pid"]
        assert alive(theirs["pid"]) and record(other_dir) == theirs
    finally:
        run(other_dir, "server", "stop")


@pytest.mark.parametrize("launcher", ["module", "former source"])
def test_a_record_is_ours_by_the_launchers_command_line(launcher: str, tmp_path: Path) -> None:
    """A record is trusted only when its process runs the shared launcher for this data
    directory: the launcher module with ``--shared DATA_DIR``, or a shared server started by a
    release whose launcher ran as ``python -c`` (its source's first line); never a command's own
    server, nor another directory's."""
    from aecs_mongo.embedded import background

    data_dir = tmp_path / "aecs-data"
    stand_in = "import sys, time; time.sleep(120)"
    if launcher == "module":
        # a stand-in ``-m`` target with the launcher's arguments: only its command line counts
        (tmp_path / "aecs_mongo").mkdir()
        (tmp_path / "aecs_mongo" / "__init__.py").write_text("")
        (tmp_path / "aecs_mongo" / "embedded").mkdir()
        (tmp_path / "aecs_mongo" / "embedded" / "__init__.py").write_text("")
        (tmp_path / "aecs_mongo" / "embedded" / "launcher.py").write_text(stand_in)

        def argv(mode: str, where: Path) -> list[str]:
            return ["-m", "aecs_mongo.embedded.launcher", mode, str(where), "--", "--storage-path", str(where / "db")]

        cases = {("--shared", data_dir): True, ("--parent", data_dir): False, ("--shared", tmp_path): False}
    else:

        def argv(mode: str, where: Path) -> list[str]:
            mark = f"# aecs-mongo: the {mode} embedded SecantusDB server\n"
            return ["-c", mark + stand_in, "--storage-path", str(where / "db")]

        cases = {("shared", data_dir): True, ("", data_dir): False, ("shared", tmp_path): False}
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    for (mode, where), ours in cases.items():
        proc = subprocess.Popen([sys.executable, *argv(mode, where)], cwd=tmp_path)  # exec'd on return
        try:
            rec = {"pid": proc.pid, "port": 1, "bootId": boot}
            assert background._is_ours(rec, data_dir) is ours, (mode, where)
        finally:
            proc.kill()
            proc.wait()
