"""Private by default: the embedded server's data directory and port are the user's alone.

Run for real: the CLI in a subprocess with the umask a login shell has (022), the embedded
SecantusDB server, a second OS user (``nobody``, as root: CI runs as root; skipped with the
reason elsewhere) and a ``MongoClient`` without credentials.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from aecs_mongo import DataDirError
from aecs_mongo.embedded.server import EmbeddedServer, embedded_available

from .helpers.cli import aecs

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples" / "mailbox"
OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO
#: the umask of a login shell: the commands run with it
LOGIN_UMASK = 0o022

pytestmark = pytest.mark.skipif(not embedded_available(), reason="the embedded server is not installed")


def open_entries(directory: Path) -> list[str]:
    """Every entry at or below ``directory`` with a group or other bit, with its mode."""
    found = []
    for root, dirs, files in os.walk(directory):
        for path in [Path(root), *(Path(root, n) for n in (*dirs, *files))]:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & OPEN_BITS:
                found.append(f"{path} {stat.filemode(mode)}")
    return sorted(set(found))


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every user can enter (pytest's own tmp is 0700, which would hide the data
    directory from other users whatever its modes are)."""
    path = Path(tempfile.mkdtemp(prefix="aecs-private-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def server_port(data_dir: Path, timeout: float = 60) -> int:
    """The port of the embedded server of ``data_dir``, read from its command line in /proc."""
    wanted = str(data_dir / "db")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if wanted in argv and "--auth" in argv and "--port" in argv:
                return int(argv[argv.index("--port") + 1])
        time.sleep(0.2)
    raise AssertionError(f"no embedded server with --auth for {data_dir}")


def as_nobody(*argv: str) -> subprocess.CompletedProcess[bytes]:
    runuser = shutil.which("runuser")
    assert runuser is not None
    return subprocess.run([runuser, "-u", "nobody", "--", *argv], capture_output=True, timeout=30)


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to act as a second OS user (CI runs as root)")
    if shutil.which("runuser") is None:
        pytest.skip("needs runuser (util-linux) to act as a second OS user")


# --- the README's first command, in a fresh directory ---------------------------------------------


def test_ingest_in_a_fresh_directory_leaves_nothing_open_to_others(shared_tmp: Path) -> None:
    result = aecs("ingest", str(SAMPLES), cwd=shared_tmp, umask=LOGIN_UMASK)
    assert result.returncode == 0, result.stderr.decode()
    data_dir = shared_tmp / "aecs-data"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert (data_dir / "db" / "WiredTiger.turtle").exists()
    assert (data_dir / "server.log").exists()
    assert open_entries(data_dir) == []
    credentials = json.loads((data_dir / "credentials.json").read_text())
    assert len(credentials["password"]) >= 32
    # the secret is never printed: the note names the data directory, not the URI
    for output in (result.stdout, result.stderr):
        assert credentials["password"].encode() not in output
    assert str(data_dir).encode() in result.stderr
    # and a file the umask would have left readable is readable: the check above can fail
    control = shared_tmp / "control.txt"
    control.write_text("x")
    assert open_entries(shared_tmp) != []


def test_a_second_os_user_cannot_read_the_data_files(shared_tmp: Path) -> None:
    need_root()
    assert aecs("ingest", str(SAMPLES), cwd=shared_tmp, umask=LOGIN_UMASK).returncode == 0
    data_dir = shared_tmp / "aecs-data"
    control = shared_tmp / "control.txt"
    control.write_text("readable")
    control.chmod(0o644)
    seen = as_nobody("cat", str(control))
    assert seen.returncode == 0 and seen.stdout == b"readable"  # nobody can read what is open
    for target in (data_dir / "db" / "WiredTiger.turtle", data_dir / "credentials.json", data_dir / "server.log"):
        denied = as_nobody("cat", str(target))
        assert denied.returncode != 0, target
        assert b"Permission denied" in denied.stderr, denied.stderr
    listing = as_nobody("ls", str(data_dir))
    assert listing.returncode != 0 and b"Permission denied" in listing.stderr


# --- the port: no client without the credentials --------------------------------------------------


def test_while_watch_holds_the_server_a_client_without_credentials_is_refused(shared_tmp: Path) -> None:
    assert aecs("ingest", str(SAMPLES), cwd=shared_tmp, umask=LOGIN_UMASK).returncode == 0
    data_dir = shared_tmp / "aecs-data"
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"} | {"AECS_DATA_DIR": str(data_dir)}
    watch = subprocess.Popen(
        [sys.executable, "-m", "aecs_mongo", "watch", "--since", "beginning"],
        cwd=shared_tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the watch is running: the server is up
        assert b"@example" in first, first
        port = server_port(data_dir)
        stranger: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=5000
        )
        with stranger:
            assert stranger.admin.command("ping")["ok"] == 1  # it reached the server
            with pytest.raises(OperationFailure) as listing:
                stranger.list_database_names()
            assert listing.value.code == 13 and "requires authentication" in str(listing.value)
            with pytest.raises(OperationFailure) as reading:
                stranger["aecs"]["bodies"].find_one()
            assert reading.value.code == 13
        guesser: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://aecs:guess@127.0.0.1:{port}/?directConnection=true&authSource=admin",
            serverSelectionTimeoutMS=5000,
        )
        with guesser, pytest.raises(OperationFailure) as guessed:
            guesser["aecs"]["bodies"].find_one()
        assert guessed.value.code == 18  # AuthenticationFailed
        credentials = json.loads((data_dir / "credentials.json").read_text())
        owner: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://{credentials['user']}:{credentials['password']}@127.0.0.1:{port}/"
            "?directConnection=true&authSource=admin",
            serverSelectionTimeoutMS=5000,
        )
        with owner:
            assert owner["aecs"]["messages"].count_documents({}) > 0
    finally:
        watch.terminate()
        watch.wait(timeout=60)


# --- a data directory of the previous release, and one that is not ours -----------------------------


def _old_release_directory(data_dir: Path) -> None:
    """What the release before authentication left: mail in an open directory, no users."""
    server = EmbeddedServer(data_dir, auth=False)
    server.start()
    try:
        with MongoClient(server.uri) as client:
            client["aecs"]["messages"].insert_one({"_id": "old", "subject": "kept"})
    finally:
        server.stop()
    for name in ("credentials.json", "secantusd.toml"):
        (data_dir / name).unlink(missing_ok=True)
    for root, _dirs, files in os.walk(data_dir):
        Path(root).chmod(0o755)
        for name in files:
            Path(root, name).chmod(0o644)


def test_a_directory_of_the_previous_release_is_upgraded_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "old"
    _old_release_directory(data_dir)
    assert not (data_dir / "credentials.json").exists() and open_entries(data_dir)
    caplog.set_level(logging.WARNING, logger="aecs_mongo")
    with EmbeddedServer(data_dir) as server:
        with MongoClient(server.uri) as client:
            assert client["aecs"]["messages"].find_one({"_id": "old"}) == {"_id": "old", "subject": "kept"}
            assert [u["user"] for u in client.admin.command("usersInfo", forAllDBs=True)["users"]] == ["aecs"]
        stranger: MongoClient[dict[str, Any]] = MongoClient(f"mongodb://{server.address}/?directConnection=true")
        with stranger, pytest.raises(OperationFailure):
            stranger["aecs"]["messages"].find_one()
    tightened = [r for r in caplog.records if "readable by other users" in r.getMessage()]
    assert len(tightened) == 1 and str(data_dir) in tightened[0].getMessage()
    assert open_entries(data_dir) == []
    assert stat.S_IMODE((data_dir / "credentials.json").stat().st_mode) == 0o600
    caplog.clear()
    with EmbeddedServer(data_dir) as again, MongoClient(again.uri) as client:  # the same credentials
        assert client["aecs"]["messages"].count_documents({}) == 1
    assert not [r for r in caplog.records if "readable by other users" in r.getMessage()]  # said once


def test_the_cli_upgrades_an_old_directory_and_reads_its_mail(tmp_path: Path) -> None:
    data_dir = tmp_path / "aecs-data"
    _old_release_directory(data_dir)
    result = aecs("--json", "stats", cwd=tmp_path, umask=LOGIN_UMASK)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["collections"]["messages"]["total"] == 1
    assert b"readable by other users" in result.stderr
    assert open_entries(data_dir) == []


def test_a_data_directory_of_another_user_is_refused(shared_tmp: Path) -> None:
    need_root()
    import pwd

    nobody = pwd.getpwnam("nobody")
    theirs = shared_tmp / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(DataDirError, match="belongs to another user"):
        EmbeddedServer(theirs).start()
    assert list(theirs.iterdir()) == []  # nothing written into it
    result = aecs("--data-dir", str(theirs), "inbox", cwd=shared_tmp, umask=LOGIN_UMASK)
    assert result.returncode == 1
    assert b"belongs to another user" in result.stderr


def test_a_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_text("not a directory")
    with pytest.raises(DataDirError, match="not a directory"):
        EmbeddedServer(path).start()
    assert path.read_text() == "not a directory"


def test_credentials_the_server_refuses_are_a_clear_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with EmbeddedServer(data_dir):
        pass
    credentials = json.loads((data_dir / "credentials.json").read_text())
    credentials["password"] = "not-the-secret"
    (data_dir / "credentials.json").write_text(json.dumps(credentials))
    from aecs_mongo import ServerFeatureError

    with pytest.raises(ServerFeatureError, match="refused the credentials"):
        EmbeddedServer(data_dir).start()


def test_a_private_directory_is_not_walked_on_every_command(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Below a 0700 directory nobody else reaches anything, so ``make_private`` looks at the
    directory alone (one ``lstat`` a command, whatever the mail's size: the walk cost 4.5 s a
    command at 20,000 messages); the whole tree is tightened only when the directory was open."""
    from aecs_mongo.embedded.datadir import make_private

    data_dir = tmp_path / "aecs-data"
    make_private(data_dir)
    inner = data_dir / "blobs" / "f"
    inner.parent.mkdir(mode=0o755)
    inner.write_text("x")
    inner.chmod(0o644)
    caplog.set_level(logging.WARNING, logger="aecs_mongo")
    make_private(data_dir)
    assert stat.S_IMODE(inner.stat().st_mode) == 0o644 and not caplog.records  # behind 0700: left as is
    data_dir.chmod(0o755)
    make_private(data_dir)
    assert open_entries(data_dir) == [] and "readable by other users" in caplog.text
