"""The command line as notmuch and mu users expect it: where the data lives, errors
on one line, the sort time of undated mail and the export round trip, ingest by content and
from standard input, short thread ids, output that fits the terminal, the import list of a
short command, a full disk, and a feed consumer that fell out of a bounded oplog."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aecs_mongo.cli import main

from .helpers.cli import Cli, aecs, command_env
from .helpers.paths import ROOT, require_corpus

SAMPLES = ROOT / "samples" / "mailbox"


#: how long a test that runs several commands keeps its data directory's server (stopped at its end)
KEEP = "5m"


def _embedded() -> None:
    from aecs_mongo.embedded.server import embedded_available

    if not embedded_available():
        pytest.skip("the embedded server is not installed")


def _message(n: int, *, date: str | None = None, received: str | None = None, body: str = "body") -> bytes:
    head = f"From: s{n}@example.com\r\nTo: alice@example.com\r\nSubject: note {n}\r\nMessage-ID: <n{n}@example.com>\r\n"
    if received:
        head = f"Received: from relay.example.com by mx.example.com; {received}\r\n" + head
    if date:
        head += f"Date: {date}\r\n"
    return (head + f"\r\n{body} {n}\r\n").encode()


def _one_line_error(err: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "using the embedded SecantusDB server" not in line]
    assert len(lines) == 1 and lines[0].startswith("aecs-mongo: error: "), err


# --- without a server ------------------------------------------------------------------------------


def test_version_and_one_place_for_the_global_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    import aecs_mongo

    assert capsys.readouterr().out.strip() == f"aecs-mongo {aecs_mongo.__version__}"
    assert main(["inbox", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert len(help_text.splitlines()) < 16  # 18 lines of global options were repeated here
    assert "global options" in help_text and "--data-dir" in help_text


@pytest.mark.parametrize(
    "uri", ["mongodb://user:pw@", "mongodb://a:b:c@host", "mongodb+srv://nonexistent.invalid", "http://x"]
)
def test_a_malformed_uri_is_one_line_exit_2(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert main(["--uri", uri, "inbox"]) == 2
    err = capsys.readouterr().err
    _one_line_error(err)
    assert "bad --uri" in err and "pw@" not in err.replace("***@", "")  # no password shown
    assert time.monotonic() - started < 10


def test_an_unreachable_server_fails_fast_and_short(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    assert main(["--uri", f"mongodb://127.0.0.1:{port}/", "inbox"]) == 1
    took = time.monotonic() - started
    err = capsys.readouterr().err
    _one_line_error(err)
    assert "cannot reach the MongoDB server" in err and f"127.0.0.1:{port}" in err
    assert len(err) < 300 and "Topology" not in err
    assert took < 6, took  # 10.9 s before


def test_the_store_layer_raises_the_drivers_errors_as_the_packages() -> None:
    """The command line imports no driver: the store layer translates the driver's exceptions
    (the refused statement keeps the server's message and code), and the one-line text of a
    refused hint still points at the missing indexes."""
    from pymongo.errors import AutoReconnect, InvalidURI, OperationFailure, ServerSelectionTimeoutError

    from aecs_mongo.commands.base import database_error_text
    from aecs_mongo.errors import DatabaseError, DatabaseUriError, ServerUnavailableError
    from aecs_mongo.synchronous.driver_errors import database_errors, translated

    hint = "error processing query: hint provided does not correspond to an existing index"
    refused = translated(OperationFailure("failed", code=2, details={"errmsg": hint}))
    assert isinstance(refused, DatabaseError) and type(refused) is DatabaseError
    assert str(refused) == hint and refused.code == 2
    assert type(translated(ServerSelectionTimeoutError("no server"))) is ServerUnavailableError
    assert type(translated(InvalidURI("bad"))) is DatabaseUriError
    assert type(translated(AutoReconnect("gone"))) is DatabaseError
    other = OSError("not the driver's")
    assert translated(other) is other
    with pytest.raises(ServerUnavailableError) as info, database_errors():
        raise ServerSelectionTimeoutError("no server")
    assert isinstance(info.value.__cause__, ServerSelectionTimeoutError)
    text = database_error_text(OperationFailure("failed", code=2, details={"errmsg": hint}), None)
    assert text.startswith(f"database: {hint}") and "run 'aecs-mongo indexes'" in text


def test_the_data_directory_is_one_per_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aecs_mongo.commands.base import user_data_dir

    assert user_data_dir({"AECS_DATA_DIR": "/x/y"}) == Path("/x/y")
    assert user_data_dir({"XDG_DATA_HOME": "/xdg"}) == Path("/xdg/aecs-mongo")
    assert user_data_dir({"XDG_DATA_HOME": "relative"}) == Path.home() / ".local/share/aecs-mongo"
    assert user_data_dir({}) == Path.home() / ".local/share/aecs-mongo"


# --- the embedded server, through the command -------------------------------------------------------


def test_wherever_it_runs_the_same_data_and_an_old_directory_is_pointed_out_once(tmp_path: Path) -> None:
    _embedded()
    home = tmp_path / "home"
    # one server per data directory, kept between the commands (fewer starts), stopped at the end
    env = {
        **command_env(drop=("MONGODB_URI", "AECS_DATA_DIR", "XDG_DATA_HOME")),
        "HOME": str(home),
        "AECS_KEEP_SERVER": "5m",
    }
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    old = tmp_path / "old"
    try:
        assert aecs("ingest", str(SAMPLES), cwd=one, env=env).returncode == 0
        inbox = aecs("--json", "inbox", cwd=two, env=env)  # elsewhere: the same mail, no second directory
        assert inbox.returncode == 0 and len(inbox.stdout.splitlines()) == 8, inbox.stderr.decode()
        assert (home / ".local/share/aecs-mongo/db").is_dir() and not (two / "aecs-data").exists()
        # stats: disk use in human units, per collection, for the oplog and the data directory by kind
        stats = aecs("stats", cwd=two, env=env).stdout.decode()
        assert re.search(r"^oplog +[\d,]+ .*\d (B|kB|MB)", stats, re.M), stats
        assert re.search(
            r"^data directory .*aecs-mongo: [\d.]+ (kB|MB) on disk \(documents .*, oplog [\d.]+ ", stats, re.M
        )
        # a release before kept ./aecs-data where it ran: said once, never moved; --data-dir reaches it
        stored = aecs(
            "--data-dir", str(old / "aecs-data"), "ingest", str(SAMPLES / "01-plan.eml"), cwd=tmp_path, env=env
        )
        assert stored.returncode == 0, stored.stderr.decode()
        first = aecs("inbox", cwd=old, env=env)
        assert b"an old data directory is here" in first.stderr and b"--data-dir aecs-data" in first.stderr
        again = aecs("inbox", cwd=old, env=env)
        assert b"old data directory" not in again.stderr  # once
        reached = aecs("--json", "--data-dir", "aecs-data", "inbox", cwd=old, env=env)
        assert [json.loads(line)["messageId"] for line in reached.stdout.splitlines()] == ["plan-1@example.com"]
        status = aecs("server", "status", cwd=one, env=env).stdout.decode()
        assert "it stops by itself once no command has used it for 5 min" in status  # "idle time" before
    finally:
        aecs("server", "stop", cwd=one, env=env)
        aecs("--data-dir", str(old / "aecs-data"), "server", "stop", cwd=tmp_path, env=env)


def test_export_refuses_a_non_empty_target_and_maildir_does_not_double(tmp_path: Path) -> None:
    _embedded()
    box = tmp_path / "box"
    box.mkdir()
    (box / "a.eml").write_bytes(_message(1, date="Mon, 02 Nov 2026 09:00:00 +0000"))
    (box / "b.eml").write_bytes(_message(1, date="Mon, 02 Nov 2026 09:00:00 +0000", body="other bytes"))
    (box / "c.eml").write_bytes(_message(2, date="Tue, 03 Nov 2026 09:00:00 +0000"))
    try:
        assert aecs("ingest", str(box), cwd=tmp_path, keep=KEEP).returncode == 0
        eml = aecs("export", "--format", "eml", str(tmp_path / "e"), cwd=tmp_path, keep=KEEP)
        assert eml.returncode == 0, eml.stderr.decode()
        assert b"left out: 1 other copy" in eml.stdout and b"--variants" in eml.stdout  # said, not silent
        again = aecs("export", "--format", "eml", str(tmp_path / "e"), cwd=tmp_path, keep=KEEP)
        assert again.returncode == 1  # a FileExistsError traceback before
        _one_line_error(again.stderr.decode())
        assert b"--add" in again.stderr
        maildir = tmp_path / "M"
        first = aecs("--json", "export", "--format", "maildir", "--variants", str(maildir), cwd=tmp_path, keep=KEEP)
        assert json.loads(first.stdout)["copies"] == 3
        assert aecs("export", "--format", "maildir", str(maildir), cwd=tmp_path, keep=KEEP).returncode == 1
        added = aecs(
            "--json",
            "export",
            "--format",
            "maildir",
            "--variants",
            "--add",
            str(maildir),
            cwd=tmp_path,
            keep=KEEP,
        )
        report = json.loads(added.stdout)
        assert (report["copies"], report["alreadyThere"]) == (0, 3)
        assert len(os.listdir(maildir / "cur")) == 3  # 738 files for 369 before
        mbox = tmp_path / "out.mbox"
        assert aecs("export", "--format", "mbox", str(mbox), cwd=tmp_path, keep=KEEP).returncode == 0
        assert aecs("export", "--format", "mbox", "--add", str(mbox), cwd=tmp_path, keep=KEEP).returncode == 0
        assert mbox.read_bytes().count(b"\nFrom ") + 1 == 4  # appended
    finally:
        aecs("server", "stop", cwd=tmp_path)


# --- the sort time of undated mail, and the round trip ---------------------------------------------


@pytest.mark.server
def test_undated_mail_sorts_by_received_then_the_source_date(cli: Cli, tmp_path: Path) -> None:
    received = _message(1, received="Tue, 03 Nov 2026 08:00:00 +0100")
    file_dated = tmp_path / "box" / "2.eml"
    file_dated.parent.mkdir()
    file_dated.write_bytes(_message(2))
    when = int(dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC).timestamp())
    os.utime(file_dated, (when, when))
    (tmp_path / "box" / "1.eml").write_bytes(received)
    mbox = tmp_path / "m.mbox"
    mbox.write_bytes(
        b"From someone@example.com Wed Jan  3 04:05:06 2024\n" + _message(3).replace(b"\r\n", b"\n") + b"\n"
    )
    assert cli("ingest", str(tmp_path / "box"), str(mbox)).code == 0
    ts = {m["messageId"]: m["ts"] for m in cli("inbox", "--json").lines()}
    assert ts["n1@example.com"] == int(dt.datetime(2026, 11, 3, 7, 0, tzinfo=dt.UTC).timestamp())  # Received
    assert ts["n2@example.com"] == when  # the file's time (a Maildir's delivery time)
    assert ts["n3@example.com"] == int(dt.datetime(2024, 1, 3, 4, 5, 6, tzinfo=dt.UTC).timestamp())  # From_ line
    lines = cli("inbox").out.splitlines()
    assert not any(line.startswith("-  ") for line in lines)  # every line has a date


@pytest.mark.server
def test_the_store_api_takes_the_source_date(make_store: Any) -> None:
    store = make_store("alice")
    at = dt.datetime(2023, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    store.store(_message(7), received_at=at)
    store.store(_message(7), received_at=at + dt.timedelta(days=9))  # a later copy does not move it
    store.store(_message(8, date="Fri, 01 Jan 2021 00:00:00 +0000"), received_at=at)  # a Date wins
    page = {m["messageId"]: m["ts"] for m in store.list_messages().messages}
    assert page == {"n7@example.com": int(at.timestamp()), "n8@example.com": 1609459200}
    with pytest.raises(ValueError):
        store.store(_message(9), received_at=dt.datetime(2023, 1, 1))  # naive
    with pytest.raises(TypeError):
        store.store(_message(9), received_at="2023-01-01")  # type: ignore[arg-type]


def _summaries(cli: Cli, mailbox: str) -> dict[str, tuple[Any, ...]]:
    found: dict[str, tuple[Any, ...]] = {}
    cursor: str | None = None
    while True:
        argv = ["threads", "--mailbox", mailbox, "--limit", "1000", "--json"] + (["--cursor", cursor] if cursor else [])
        items, trailer = cli(*argv).page()
        for t in items:
            found[t["threadId"]] = (t["subject"], t["messageCount"], t["firstTs"], t["lastTs"])
        cursor = trailer["next_cursor"] if trailer else None
        if cursor is None:
            return found


@pytest.mark.server
@pytest.mark.ci_every_server
@pytest.mark.parametrize(("fmt", "blobs"), [("mbox", "gridfs"), ("maildir", "gridfs"), ("maildir", "file")])
def test_export_and_reimport_of_the_corpus_keeps_every_thread_summary(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, blobs: str
) -> None:
    """Every thread summary survives export and re-import; on GridFS and on the file store (the
    embedded default's), whose blobs the export reads back byte for byte."""
    if blobs == "file":
        monkeypatch.setenv("AECS_BLOBS", f"file://{tmp_path / 'blobs'}")
    assert cli("ingest", str(require_corpus()), "--mailbox", "first").code in (0, 1)
    before = _summaries(cli, "first")
    out = tmp_path / ("out.mbox" if fmt == "mbox" else "Maildir")
    exported = cli("export", "--mailbox", "first", "--format", fmt, str(out))
    assert exported.code == 0, exported.err
    assert cli("ingest", str(out), "--mailbox", "second").code == 0
    after = _summaries(cli, "second")
    assert len(before) > 250 and after == before  # firstTs/lastTs moved for undated mail before
    if blobs == "file":
        assert any((tmp_path / "blobs").rglob("*.raw.eml")), "the blobs went to the file store"


@pytest.mark.server
def test_reindex_redates_undated_mail_stored_before(cli: Cli, make_store: Any, db: Any) -> None:
    store = make_store("default")
    store.store(_message(5, received="Tue, 03 Nov 2026 08:00:00 +0000"))
    right = int(dt.datetime(2026, 11, 3, 8, 0, tzinfo=dt.UTC).timestamp())
    # as an earlier release stored it: ts = processedAt (the ingest time)
    row = db.messages.find_one({"messageId": "n5@example.com"})
    processed = int(dt.datetime.fromisoformat(row["processedAt"].replace("Z", "+00:00")).timestamp())
    db.messages.update_one({"_id": row["_id"]}, {"$set": {"ts": processed}})
    db.threads.update_many({}, {"$set": {"firstTs": processed, "lastTs": processed}})
    report = cli("reindex", "--json").json()
    assert report["undatedRedated"] == 1
    assert db.messages.find_one({"_id": row["_id"]})["ts"] == right
    assert {(t["firstTs"], t["lastTs"]) for t in db.threads.find()} == {(right, right)}
    assert cli("reindex", "--json").json()["undatedRedated"] == 0  # once


# --- ingest ------------------------------------------------------------------------------------------


@pytest.mark.server
def test_ingest_recognises_mail_by_content_and_says_what_it_skipped(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "Mail"
    (folder / "inbox-mh").mkdir(parents=True)
    (folder / "Inbox").write_bytes(  # Thunderbird: an mbox without extension
        b"From - Mon Nov  2 09:00:00 2026\n" + _message(1, date="Mon, 02 Nov 2026 09:00:00 +0000") + b"\n"
    )
    (folder / "Inbox.msf").write_bytes(b'// <!-- <mdb:mork:z v="1.4"/> -->\n< <(a=c)> ')
    (folder / "inbox-mh" / "1").write_bytes(_message(2, date="Mon, 02 Nov 2026 10:00:00 +0000"))
    (folder / "inbox-mh" / "2").write_bytes(_message(3, date="Mon, 02 Nov 2026 11:00:00 +0000"))
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 binary")
    result = cli("ingest", str(folder), "--json")
    report = result.json()
    assert result.code == 0 and report["stored"] == 3 and report["failed"] == 0
    reasons = {Path(s["input"]).name: s["reason"] for s in report["skipped"]}
    assert set(reasons) == {"Inbox.msf", "picture.png"} and all("not mail" in r for r in reasons.values())
    assert cli("ingest", str(folder), "--json").json()["skipped"] == []  # recorded: not looked at again
    text = cli("ingest", str(folder), "--rescan").out
    assert f"skipped: {folder / 'picture.png'}: not mail" in text and "2 other files skipped" in text


def test_ingest_reads_standard_input_and_reports_a_truncated_mbox(tmp_path: Path) -> None:
    _embedded()
    try:
        first = _message(1, date="Mon, 02 Nov 2026 09:00:00 +0000")
        one = aecs("--json", "ingest", "-", cwd=tmp_path, stdin=first, keep=KEEP)
        assert one.returncode == 0 and json.loads(one.stdout)["stored"] == 1, one.stderr.decode()
        mbox = b"".join(
            b"From x@example.com Mon Nov  2 09:00:00 2026\n" + _message(n).replace(b"\r\n", b"\n") + b"\n"
            for n in (2, 3)
        )
        two = aecs("--json", "ingest", "-", cwd=tmp_path, stdin=mbox, keep=KEEP)  # procmail/fetchmail deliver so
        assert json.loads(two.stdout)["stored"] == 2
        cut = mbox + b"From x@example.com Mon Nov  2 09:00:00 2026\nFrom: a@b\nSubject: cut he"  # 16 bytes of it
        path = tmp_path / "cut.mbox"
        path.write_bytes(cut)
        three = aecs("--json", "ingest", str(path), cwd=tmp_path, keep=KEEP)
        assert three.returncode == 1
        report = json.loads(three.stdout)
        (failure,) = report["failures"]
        assert (
            failure["message"] == 3
            and cut[failure["offset"] :].startswith(b"From ")
            and "truncated" in failure["reason"]
        )
        stored = {
            json.loads(line)["messageId"]
            for line in aecs("--json", "inbox", cwd=tmp_path, keep=KEEP).stdout.splitlines()
        }
        assert stored == {"n1@example.com", "n2@example.com", "n3@example.com"}  # the cut one is not
    finally:
        aecs("server", "stop", cwd=tmp_path)


# --- output --------------------------------------------------------------------------------------------


def _cells(text: str) -> int:
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text
    )


@pytest.mark.server
@pytest.mark.parametrize("columns", [60, 100, 140])
def test_lines_fit_the_terminal(cli: Cli, monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    assert cli("ingest", str(SAMPLES)).code == 0
    monkeypatch.setenv("COLUMNS", str(columns))
    for argv in (["inbox"], ["threads"]):
        lines = [line for line in cli(*argv).out.splitlines() if not line.startswith("next_cursor")]
        assert lines and max(_cells(line) for line in lines) <= columns, (argv, lines)
    stats = cli("stats").out
    assert " kB" in stats and "data bytes" not in stats  # human units
    one = cli("ingest", str(SAMPLES / "01-plan.eml"), "--mailbox", "single")
    assert "1 message in " in one.out and "1 messages" not in one.out  # never "1 messages"
    assert "1 message, 1 thread;" in cli("stats", "--mailbox", "single").out


def _colliding_ids(prefix_len: int = 4) -> tuple[str, str]:
    """Two thread ids (Message-IDs of roots) whose thread keys share their first hex digits."""
    seen: dict[str, str] = {}
    for n in range(200_000):
        mid = f"root-{n}@example.com"
        key = hashlib.sha256(mid.encode()).hexdigest()[:prefix_len]
        if key in seen:
            return seen[key], mid
        seen[key] = mid
    raise AssertionError("no collision")


@pytest.mark.server
def test_short_thread_ids_like_git(cli: Cli, tmp_path: Path) -> None:
    first, second = _colliding_ids()
    for n, mid in enumerate((first, second)):
        (tmp_path / f"{n}.eml").write_bytes(
            f"From: a@example.com\r\nSubject: topic {n}\r\nMessage-ID: <{mid}>\r\n"
            f"Date: Mon, 02 Nov 2026 09:0{n}:00 +0000\r\n\r\nbody\r\n".encode()
        )
    assert cli("ingest", str(tmp_path)).code == 0
    rows = cli("threads").out.splitlines()[:-1]
    short = {row.split()[-1] for row in rows}
    key = hashlib.sha256(first.encode()).hexdigest()
    assert key[:8] in short and all(len(s) == 8 for s in short)
    shown = cli("thread", key[:8])
    assert shown.code == 0 and f"<{first}>" in shown.out
    assert cli("thread", key[:12].upper()).code == 0  # case does not matter
    ambiguous = cli("thread", key[:4])
    assert ambiguous.code == 2
    _one_line_error(ambiguous.err)
    assert "ambiguous" in ambiguous.err and "topic 0" in ambiguous.err and "topic 1" in ambiguous.err
    assert cli("thread", "ffffffffffff").code == 1  # no such thread


# --- start-up: what a short command imports ------------------------------------------------------------


@pytest.mark.one_server
def test_a_short_command_imports_only_what_it_needs(servers: Any, backend: str) -> None:
    """The warm-command budget (0.3 s) is kept by the import list, not by a timed test."""
    code = (
        "import sys\n"
        "from aecs_mongo.cli import main\n"
        "for argv in (['inbox'], ['threads'], ['stats'], ['show', 'x@y'], ['thread', 'x@y']):\n"
        "    main(['--uri', sys.argv[1], '--db', sys.argv[2], *argv])\n"
        "print(sorted(sys.modules))\n"
    )
    name = f"aecs_imports_{os.getpid()}"
    result = subprocess.run(
        [sys.executable, "-c", code, servers.uri(backend), name], capture_output=True, text=True, timeout=120
    )
    servers.client(backend).drop_database(name)
    loaded = set(eval(result.stdout.splitlines()[-1]))
    never = {
        "motor",
        "aecs_mongo.asynchronous.store",
        "aecs_mongo.normalizer",
        "aecs_mongo.normalizer.parse",
        "aecs_mongo.mail.imap",
        "aecs_mongo.mail.pop3",
        "aecs_mongo.mail.sources",
        "aecs_mongo.commands.ingest",
        "aecs_mongo.commands.lifecycle",
        "aecs_mongo.embedded.server",
        "numpy",
        "email.parser",
    }
    assert not never & loaded, sorted(never & loaded)
    assert "aecs_mongo.synchronous.store" in loaded  # it did run the commands


def test_the_public_names_stay_importable_and_sorted() -> None:
    code = (
        "import aecs_mongo, sys\n"
        "assert 'aecs_mongo.synchronous.store' not in sys.modules\n"
        "assert aecs_mongo.__all__ == sorted(aecs_mongo.__all__)\n"
        "from aecs_mongo import MessageStore, AsyncMessageStore, normalize, parse_email\n"
        "import aecs_mongo.normalizer.dates\n"
        "assert callable(aecs_mongo.normalize) and aecs_mongo.normalize is normalize\n"
        "assert all(getattr(aecs_mongo, n) is not None for n in aecs_mongo.__all__)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


# --- a full disk -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _small_filesystem(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_is_named_by_the_command_and_by_the_server(tmp_path: Path) -> None:
    _embedded()
    import base64
    import random

    rng = random.Random(32)
    mbox = tmp_path / "big.mbox"
    # 42 MB that do not compress, random attachments, each kept once: more than the 32 MB disk
    with open(mbox, "wb") as out:
        for n in range(60):
            blob = base64.encodebytes(rng.randbytes(700_000))
            out.write(
                f"From x@example.com Mon Nov  2 09:00:00 2026\nFrom: a@example.com\nMessage-ID: <big{n}@example.com>\n"
                f"Subject: big {n}\nDate: Mon, 02 Nov 2026 09:00:00 +0000\nMIME-Version: 1.0\n"
                "Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\nsee attached\n"
                "--b\nContent-Type: application/octet-stream\nContent-Transfer-Encoding: base64\n"
                'Content-Disposition: attachment; filename="r.bin"\n\n'.encode()
                + blob
                + b"--b--\n\n"
            )
    with _small_filesystem(tmp_path / "small", "32m") as small:
        data = small / "data"
        env = {**command_env(), "AECS_DATA_DIR": str(data)}
        try:
            ingest = aecs("--json", "ingest", str(mbox), "--batch-size", "4", cwd=tmp_path, env=env, timeout=600)
            assert ingest.returncode == 1, ingest.stderr.decode()
            err = ingest.stderr.decode()
            assert "disk is full" in err and str(data) in err and "free of" in err, err
            assert "Traceback" not in err
            report = json.loads(ingest.stdout)
            assert 0 < report["stored"] < 60
            aecs("server", "stop", cwd=tmp_path, env=env)
            filler = small / "filler"
            with contextlib.suppress(OSError), open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 1_000_000)
            start = aecs("inbox", cwd=tmp_path, env=env, timeout=120)
            assert start.returncode == 1
            _one_line_error(start.stderr.decode())
            assert "disk is full" in start.stderr.decode() and "did not start" in start.stderr.decode()
            filler.unlink(missing_ok=True)
            grown = subprocess.run(["mount", "-o", "remount,size=96m", str(small)], capture_output=True)
            assert grown.returncode == 0, grown.stderr
            stats = aecs("--json", "stats", cwd=tmp_path, env=env, timeout=120)
            assert stats.returncode == 0, stats.stderr.decode()
            # nothing stored was lost: what the first run reported stored is there
            assert json.loads(stats.stdout)["messages"] == report["stored"]
        finally:
            aecs("server", "stop", cwd=tmp_path, env=env)


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    _embedded()
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "db").write_text("not a directory")  # WiredTiger cannot open its home
    (data / "db").chmod(0o600)
    result = aecs("--data-dir", str(data), "inbox", cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    err = result.stderr.decode()
    _one_line_error(err)
    assert "the embedded server" in err and "exited at start-up: " in err
    assert not err.rstrip().endswith("start-up:")  # the server's own reason follows the colon


# --- the feed and a bounded oplog --------------------------------------------------------------------------


def test_a_consumer_that_fell_out_of_the_oplog_continues_by_backfill(caplog: pytest.LogCaptureFixture) -> None:
    _embedded()
    from pymongo import MongoClient

    from aecs_mongo import MessageStore
    from aecs_mongo.embedded.server import EmbeddedServer

    with EmbeddedServer(auth=False, oplog_max_entries=20) as server, MongoClient(server.uri) as client:
        store = MessageStore(client["feed"], mailbox_id="a")
        store.ensure_indexes()
        with store.watch("w", since="now", max_await_ms=200) as feed:
            feed.next_batch(1)  # position taken: the stream
        store.store(_message(0, date="Mon, 02 Nov 2026 09:00:00 +0000"))
        with store.watch("w", max_await_ms=200) as feed:
            assert [i.message_id for i in feed.next_batch(10)] == ["n0@example.com"]
        for n in range(1, 40):
            store.store(_message(n, date=f"Mon, 02 Nov 2026 08:{n:02d}:00 +0000"))  # dated before n0
        assert client.admin.command("secantusAdmin.pruneOplog")["pruned"] > 0  # the token is gone
        seen: set[str] = set()
        with caplog.at_level("WARNING", logger="aecs_mongo"), store.watch("w", max_await_ms=200) as feed:
            while batch := feed.next_batch(100):
                seen |= {i.message_id for i in batch}
        assert seen >= {f"n{n}@example.com" for n in range(1, 40)}  # no gap, whatever their dates
        assert sum("fell behind the server's oplog" in r.getMessage() for r in caplog.records) == 1
        store.store(_message(99, date="Mon, 02 Nov 2026 10:00:00 +0000"))
        with store.watch("w", max_await_ms=200) as feed:  # and then it follows the stream again
            assert [i.message_id for i in feed.next_batch(10)] == ["n99@example.com"]


def _cells_one_by_one(text: str) -> int:
    from aecs_mongo.commands.base import _char_cells

    return sum(_char_cells(c) for c in text)


def _one_line_one_by_one(text: str, width: int) -> str:
    from aecs_mongo.commands.base import _char_cells

    flat = " ".join(text.split())
    if _cells_one_by_one(flat) <= width:
        return flat
    kept, used = [], 0
    for char in flat:
        if used + _char_cells(char) > width - 1:
            break
        kept.append(char)
        used += _char_cells(char)
    return "".join(kept) + "…"


_LINE_CHARS = st.sampled_from(list("ab c\u0301日本語\u200b…é\tx\x07")) | st.characters()


@given(st.text(_LINE_CHARS, max_size=40), st.integers(0, 30))
@settings(max_examples=300, deadline=None)
def test_a_line_is_measured_and_cut_as_cell_by_cell(text: str, width: int) -> None:
    """``one_line``/``column`` measure ASCII text by its length and other text by each distinct
    character once: the same cells, the same cut, as counting character by character."""
    from aecs_mongo.commands.base import _cells, column, one_line

    assert _cells(text) == _cells_one_by_one(text)
    line = one_line(text, width)
    assert line == _one_line_one_by_one(text, width)
    assert column(text, width) == line + " " * (width - _cells_one_by_one(line))
