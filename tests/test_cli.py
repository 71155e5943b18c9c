"""The ``aecs-mongo`` command line: in-process through ``main(argv)`` against the test servers,
and once for real in a subprocess with no URI (the embedded server in a temporary data dir)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo.cli import command_names, main
from aecs_mongo.commands.interrupts import finish_in_hand_on_interrupt
from aecs_mongo.mail.sources import iter_mbox
from aecs_mongo.pure.lifecycle import DATA_COLLECTIONS

from .helpers.cli import Cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples" / "mailbox"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "eml"
SAMPLE_COUNT = len(list(SAMPLES.glob("*.eml")))
SAMPLE_IDS = {
    "plan-1@example.com",
    "plan-2@example.org",
    "plan-3@example.net",
}


def mbox_from(messages: list[bytes]) -> bytes:
    """An mboxrd file: From_ lines, ``>``-quoted ``From `` lines, an empty line after each message."""
    out = []
    for raw in messages:
        body = b"".join(
            b">" + line if line.lstrip(b">").startswith(b"From ") else line for line in raw.splitlines(keepends=True)
        )
        if not body.endswith(b"\n"):
            body += b"\n"
        out.append(b"From sender@example.com Mon Nov  2 09:15:00 2026\n" + body + b"\n")
    return b"".join(out)


FROM_LINE_MESSAGE = (
    b"From: Dave <dave@example.com>\n"
    b"To: alice@example.com\n"
    b"Subject: quoting\n"
    b"Message-ID: <from-line@example.com>\n"
    b"Date: Tue, 03 Nov 2026 10:00:00 +0000\n"
    b"\n"
    b"A body line that starts like a separator:\n"
    b"\n"
    b"From the start of the project we knew.\n"
    b">From an already quoted line.\n"
)


# --- without a server ---------------------------------------------------------------------------


def test_help_of_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: aecs-mongo" in capsys.readouterr().out
    for name in command_names():
        assert main([name, "--help"]) == 0, name
        out = capsys.readouterr().out
        assert f"usage: aecs-mongo {name}" in out
        assert "global options" in out and "aecs-mongo --help" in out
        assert "--uri URI" not in out  # the global options are explained once, in the main help
    assert "--uri URI" in (main(["--help"]), capsys.readouterr().out)[1]


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["inbox", "--limit", "0"]) == 2
    assert main(["no-such-command"]) == 2
    capsys.readouterr()


def test_pop3_refuses_a_password_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``--password`` is refused, not taken as an abbreviation of ``--password-env`` (which then
    printed ``set $hunter2``: the password in the terminal and the log)."""
    argv = ["--uri", "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=100", "pop3", "host", "--user", "u"]
    assert main([*argv, "--password", "hunter2"]) == 2
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out + captured.err
    assert "--password-env" in captured.err and "never taken from the command line" in captured.err
    assert main([*argv, "--password=hunter2"]) == 2
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out + captured.err


def test_options_are_never_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    """An abbreviation of a long option is a usage error, in the main parser and every command's."""
    nowhere = ["--uri", "mongodb://127.0.0.1:9/"]  # never reached: parsing fails first
    assert main([*nowhere, "--mail", "bob", "inbox"]) == 2  # not --mailbox: 'bob' is then the command
    assert "invalid choice: 'bob'" in capsys.readouterr().err
    assert main([*nowhere, "inbox", "--mail", "bob"]) == 2
    assert "unrecognized arguments: --mail bob" in capsys.readouterr().err
    assert main([*nowhere, "inbox", "--lim", "3"]) == 2
    assert "unrecognized arguments: --lim" in capsys.readouterr().err


def test_the_command_table() -> None:
    """Each command names its handler (``module:function``) and its options builder, both found;
    the commands that write mail say in the table that they need the store's indexes (ensured
    before their handler runs); the reads that the warm command host runs are marked there, and
    the thin client routes by that mark."""
    from aecs_mongo import cli
    from aecs_mongo.commands import options, table
    from aecs_mongo.warm import client

    for command in table.COMMANDS:
        assert callable(cli._handler(command)), command.name
        assert callable(getattr(options, command.options)), command.name
    assert [c.name for c in table.COMMANDS if not c.store] == ["server"]
    assert {c.name for c in table.COMMANDS if c.indexes} == {
        "ingest",
        "reindex",
        "pop3",
        "migrate-gdbm",
        "imap",
        "tag",
        "folder",
    }
    warm = {
        "mailboxes",
        "inbox",
        "threads",
        "thread",
        "show",
        "with",
        "replies",
        "find",
        "search",
        "count",
        "tags",
        "stats",
    }
    assert {c.name for c in table.COMMANDS if c.warm} == warm
    assert warm == client.WARM


def _global_options(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """The spellings of a parser's global options: those that take a value, and the flags."""
    (group,) = [g for g in parser._action_groups if g.title == "global options"]
    valued = {o for a in group._group_actions if a.nargs != 0 for o in a.option_strings}
    flags = {o for a in group._group_actions if a.nargs == 0 for o in a.option_strings}
    return valued, flags


def test_the_client_knows_the_global_options_of_the_parser() -> None:
    """The thin client skips the value of exactly the parser's global options that take one (the
    word after ``--blobs`` is its URL, never the command) and takes its flags as flags; every
    command's parser takes the same options, after the command."""
    from aecs_mongo import cli
    from aecs_mongo.warm import client

    parser = cli.build_parser()
    valued, flags = _global_options(parser)
    assert "--blobs" in valued and "--search-index" in valued and "--json" in flags
    assert valued == client.VALUED
    assert flags == client.FLAGS
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        taken = {o for a in command._actions if a.help == argparse.SUPPRESS for o in a.option_strings}
        assert valued | flags <= taken, name
    assert "'aecs-mongo --help' explains the global options (--uri, --db, --mailbox" in sub.choices["inbox"].epilog


def test_the_word_after_a_global_option_that_takes_a_value_is_never_the_command(tmp_path: Path) -> None:
    """``aecs-mongo --blobs URL inbox`` is a read: the thin client hands it to the warm command
    host of the data directory, as it does ``inbox`` alone; ``tag`` after ``--blobs URL`` still
    takes notmuch's ``+NAME``/``-NAME`` words."""
    from aecs_mongo.cli import tag_changes
    from aecs_mongo.warm import client
    from aecs_mongo.warm.protocol import SOCKET_NAME

    env = {"AECS_DATA_DIR": str(tmp_path)}
    home = (os.path.realpath(tmp_path), SOCKET_NAME, None)
    assert client._route(["inbox"], env) == home
    for argv in (
        ["--blobs", "file:///srv/blobs", "inbox"],
        ["--blobs=file:///srv/blobs", "inbox"],
        ["inbox", "--blobs", "file:///srv/blobs"],
        ["--search-index", "none", "--json", "count", "x"],
        ["-v", "--keep-server", "5m", "--db", "x", "tags"],
    ):
        assert client._route(argv, env) == home, argv
    for argv in (["--blobs", "file:///srv/blobs", "ingest", "x.eml"], ["--blobs", "inbox", "ingest"], ["--blobs"]):
        assert client._route(argv, env) is None, argv
    assert tag_changes(["--blobs", "file:///srv/blobs", "tag", "+todo", "-inbox", "--", "from:boss"]) == [
        "--blobs",
        "file:///srv/blobs",
        "tag",
        "--add=todo",
        "--remove=inbox",
        "--",
        "from:boss",
    ]


@pytest.mark.one_server
def test_a_command_imports_only_its_own_handlers(servers: Any, backend: str) -> None:
    """The table imports the handlers' module of the command being run, and no other."""
    code = (
        "import sys\n"
        "from aecs_mongo.cli import main\n"
        "handlers = lambda: sorted(m for m in sys.modules if m.startswith('aecs_mongo.commands.'))\n"
        "print(handlers())\n"
        "main(['--uri', sys.argv[1], '--db', sys.argv[2], 'inbox'])\n"
        "print(handlers())\n"
    )
    name = f"aecs_cli_{uuid.uuid4().hex[:12]}"
    result = subprocess.run(
        [sys.executable, "-c", code, servers.uri(backend), name],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    servers.client(backend).drop_database(name)
    before, after = (line for line in result.stdout.splitlines() if line.startswith("["))
    # table: the commands as data, the handler of each named, imported by the one that runs
    parser = ["aecs_mongo.commands.base", "aecs_mongo.commands.options", "aecs_mongo.commands.table"]
    assert before == str(parser)
    # stores: the one place that opens every command's store (and decides its search index)
    opened = [*parser, "aecs_mongo.commands.reading"]
    assert after == str(sorted([*opened, "aecs_mongo.commands.stores"]))


def test_no_embedded_server_prints_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import aecs_mongo.embedded.server

    monkeypatch.delenv("MONGODB_URI", raising=False)
    monkeypatch.setattr(aecs_mongo.embedded.server, "embedded_available", lambda: False)
    assert main(["--data-dir", str(tmp_path / "data"), "inbox"]) == 2
    assert aecs_mongo.embedded.server.INSTALL_HINT in capsys.readouterr().err


# --- against the test servers --------------------------------------------------------------------


@pytest.mark.server
def test_ingest_twice_stores_nothing_new(cli: Cli) -> None:
    first = cli("ingest", str(SAMPLES))
    assert first.code == 0, first.err
    assert f"{SAMPLE_COUNT} stored, 0 already present, 0 failed" in first.out
    second = cli("ingest", str(SAMPLES), "--json")  # the file record: nothing is read again
    assert second.code == 0
    summary = second.json()
    assert (summary["stored"], summary["present"], summary["failed"], summary["new"]) == (0, 0, 0, 0)
    third = cli("ingest", str(SAMPLES), "--rescan", "--json")
    assert (third.json()["stored"], third.json()["present"]) == (0, SAMPLE_COUNT)
    fourth = cli("ingest", str(SAMPLES), "--rescan")
    assert "nothing new" in fourth.out


@pytest.mark.server
def test_ingest_mbox_streamed(cli: Cli, tmp_path: Path) -> None:
    originals = [p.read_bytes() for p in sorted(SAMPLES.glob("*.eml"))] + [FROM_LINE_MESSAGE]
    path = tmp_path / "mail"  # no extension: recognised by its first line
    path.write_bytes(mbox_from(originals))
    result = cli("ingest", str(path), "--batch-size", "3", "--json")
    assert result.code == 0, result.out + result.err
    summary = result.json()
    assert (summary["stored"], summary["present"], summary["failed"]) == (len(originals), 0, 0)
    raw = cli("show", "from-line@example.com", "--json").json()
    assert "From the start of the project" in raw["content"]["text"]
    assert ">From an already quoted line" in raw["content"]["text"]


@pytest.mark.server
def test_ingest_maildir(cli: Cli, tmp_path: Path) -> None:
    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    for i, sample in enumerate(sorted(SAMPLES.glob("*.eml"))):
        sub, suffix = ("cur", ":2,S") if i % 2 else ("new", "")
        shutil.copy(sample, maildir / sub / f"17000000{i}.M{i}P1.host{suffix}")
    (maildir / "tmp" / "half-delivered").write_bytes(b"Subject: x\n")  # tmp is never read
    sent = maildir / ".Sent"
    for sub in ("cur", "new", "tmp"):
        (sent / sub).mkdir(parents=True)
    (sent / "cur" / "1.M1.host:2,S").write_bytes(FROM_LINE_MESSAGE)
    result = cli("ingest", str(maildir), "--json")
    assert result.code == 0, result.out
    summary = result.json()
    assert (summary["stored"], summary["failed"], summary["ignored"]) == (SAMPLE_COUNT + 1, 0, [])


@pytest.mark.server
def test_broken_inputs_are_listed_with_reasons(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "box"
    shutil.copytree(SAMPLES, folder)
    (folder / "empty.eml").write_bytes(b"")
    (folder / "picture.eml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR binary, not mail\n")
    (folder / "dangling.eml").symlink_to(tmp_path / "gone.eml")
    (folder / "notes.txt").write_text("not an .eml\n")
    missing = tmp_path / "missing.eml"
    result = cli("ingest", str(folder), str(missing))
    assert result.code == 1
    lines = result.out.splitlines()
    failed = {line.split(": ", 2)[1]: line for line in lines if line.startswith("failed: ")}
    assert set(failed) == {str(folder / n) for n in ("empty.eml", "picture.eml", "dangling.eml")} | {str(missing)}
    assert "empty" in failed[str(folder / "empty.eml")]
    assert "not an email message" in failed[str(folder / "picture.eml")]
    assert "cannot read" in failed[str(folder / "dangling.eml")]
    assert "no such file" in failed[str(missing)]
    assert any(line.startswith(f"skipped: {folder / 'notes.txt'}: not mail") for line in lines)
    # the file record: a file read before (mail or not) is not read again; the unreadable one is tried again
    again = cli("ingest", str(folder), "--json").json()
    assert (again["stored"], again["present"], again["failed"], again["unchanged"]) == (0, 0, 1, SAMPLE_COUNT + 3)
    assert [f["input"] for f in again["failures"]] == [str(folder / "dangling.eml")]
    summary = cli("ingest", str(folder), "--rescan", "--json").json()
    assert (summary["stored"], summary["present"], summary["failed"]) == (0, SAMPLE_COUNT, 3)
    assert all(f["reason"] and f["input"] for f in summary["failures"])
    assert summary["ignored"] == [str(folder / "notes.txt")]


@pytest.mark.server
def test_mbox_failures_name_message_and_offset(cli: Cli, tmp_path: Path) -> None:
    good = (SAMPLES / "01-plan.eml").read_bytes()
    data = mbox_from([good, b"", b"just words\nno headers\n"])
    path = tmp_path / "box.mbox"
    path.write_bytes(data)
    summary = cli("ingest", str(path), "--json").json()
    assert summary["stored"] == 1
    failures = {f["message"]: f for f in summary["failures"]}
    assert set(failures) == {2, 3}
    assert failures[2]["reason"].startswith("empty") and failures[2]["input"] == str(path)
    assert data[failures[3]["offset"] :].startswith(b"From ")
    assert "not an email message" in failures[3]["reason"]


@pytest.mark.server
def test_show_raw_is_byte_exact(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("ingest", str(SAMPLES)).code == 0
    original = (SAMPLES / "07-latin1.eml").read_bytes()
    message_id = _message_id_of("07-latin1.eml")
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buffer, encoding="utf-8"))
    code = cli("show", message_id, "--raw").code
    assert code == 0
    assert buffer.getvalue() == original
    monkeypatch.undo()
    html = cli("show", "plan-1@example.com", "--html")
    assert html.code == 1 and "has no HTML body" in html.err
    assert cli("show", "nobody@example.com").code == 1
    assert cli("show", "plan-1@example.com", "--raw", "--json").code == 2


def _message_id_of(sample: str) -> str:
    for line in (SAMPLES / sample).read_bytes().splitlines():
        if line.lower().startswith(b"message-id:"):
            return line.split(b":", 1)[1].strip().decode()
    raise AssertionError(f"{sample} has no Message-ID")


@pytest.mark.server
def test_pagination_visits_everything_once(cli: Cli) -> None:
    assert cli("ingest", str(SAMPLES)).code == 0
    for command, total in (("inbox", SAMPLE_COUNT), ("threads", None)):
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            argv = [command, "--limit", "3", "--json"] + (["--cursor", cursor] if cursor else [])
            items, trailer = cli(*argv).page()
            seen += [item.get("messageId") or item["threadId"] for item in items]
            pages += 1
            cursor = trailer["next_cursor"] if trailer else None
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) and pages > 1
        if total is not None:
            assert len(seen) == total
    assert len(seen) == len(cli("threads", "--json").page()[0])
    # the text form prints the cursor too, and it continues
    text = cli("inbox", "--limit", "5").out
    cursor_line = [line for line in text.splitlines() if line.startswith("next_cursor: ")][-1]
    rest, trailer = cli("inbox", "--limit", "5", "--cursor", cursor_line.split(": ", 1)[1], "--json").page()
    assert len(rest) == SAMPLE_COUNT - 5 and trailer is None
    assert cli("inbox", "--cursor", "forged").code == 1


@pytest.mark.server
def test_every_data_command_prints_json_lines_or_one_object(cli: Cli) -> None:
    """Commands that list things print one JSON object per line (and a last one with
    next_cursor when there is more, search's engine and completeness); the others one object."""
    assert cli("ingest", str(SAMPLES), "--json").code == 0
    listings = [
        ["inbox"],
        ["inbox", "--sender", "alice@example.com"],
        ["threads"],
        ["thread", "plan-1@example.com"],
        ["with", "bob@example.org"],
        ["replies", "plan-1@example.com"],
        ["find", "Subject", "Quarterly planning"],
        ["search", "Thursday"],
        ["mailboxes"],
    ]
    singles = [["show", "plan-1@example.com"], ["reindex"], ["indexes"], ["stats"], ["delete", "<plan-3@example.net>"]]
    pages: dict[str, tuple[list[Any], dict[str, Any] | None]] = {}
    outputs = {}
    for argv in listings:
        result = cli(*argv, "--json")
        assert result.code == 0, (argv, result.err)
        assert all(line.startswith("{") and line.endswith("}") for line in result.out.splitlines()), argv
        pages[argv[0] + ("-sender" if "--sender" in argv else "")] = result.page()
    for argv in singles:
        result = cli(*argv, "--json")
        assert result.code in (0, 1), (argv, result.err)
        outputs[argv[0]] = result.json()
    thread, trailer = pages["thread"]
    assert [m["position"] for m in thread] == [0, 1, 2] and trailer is None
    assert {m["messageId"] for m in thread} == SAMPLE_IDS
    assert outputs["show"]["messageId"] == "plan-1@example.com"
    assert {m["messageId"] for m in pages["replies"][0]} == {"plan-2@example.org", "plan-3@example.net"}
    assert pages["find"][0][:1] == [{"messageId": "plan-1@example.com"}]
    hits, engine = pages["search"]
    assert "plan-2@example.org" in {r["messageId"] for r in hits}
    assert engine is not None and engine["engine"] and engine["complete"] in (True, False)
    assert all(m["from"]["email"] == "alice@example.com" for m in pages["inbox-sender"][0])
    assert pages["inbox"][1] is None and len(pages["inbox"][0]) == SAMPLE_COUNT  # one page: no trailer
    assert all(len(t["shortId"]) == 8 for t in pages["threads"][0])
    assert pages["mailboxes"][0] == [{"mailboxId": "default", "messages": SAMPLE_COUNT, "threads": 5}]
    assert outputs["stats"]["collections"]["messages"]["mailbox"] == SAMPLE_COUNT
    assert list(outputs["stats"]["collections"]) == [c.for_bucket("aecs").name for c in DATA_COLLECTIONS]
    assert sum(outputs["stats"]["specVersions"].values()) == SAMPLE_COUNT
    assert outputs["indexes"]["ok"] is True
    assert outputs["delete"] == {"messageId": "plan-3@example.net", "deleted": True}
    after = cli("thread", "plan-1@example.com", "--json").lines()
    assert [m["messageId"] for m in after] == ["plan-1@example.com", "plan-2@example.org"]
    assert cli("delete", "plan-3@example.net").code == 1
    more = cli("inbox", "--limit", "2", "--json").page()
    assert len(more[0]) == 2 and more[1] is not None and more[1]["next_cursor"]


@pytest.mark.server
def test_text_output_of_the_reads(cli: Cli) -> None:
    assert cli("ingest", str(SAMPLES)).code == 0
    thread = cli("thread", "plan-2@example.org", "--limit", "2")  # any message id of the thread works
    assert thread.code == 0
    assert thread.out.startswith("[1] ") and "\n[2] " in thread.out
    assert "Thursday works for me" in thread.out
    show = cli("show", "plan-1@example.com")
    assert "Subject:    Quarterly planning" in show.out and "Bob Builder <bob@example.org>" in show.out
    assert "planning" in cli("threads").out
    stats = cli("stats").out
    assert "messages" in stats and "specVersion" in stats
    assert "aecs_messages_thread" in cli("indexes").out
    assert cli("thread", "nothing@example.com").code == 1


@pytest.mark.server
def test_stats_counts_every_registry_collection(make_store: Callable[..., Any], db: Any, backend: str) -> None:
    """``store.stats()`` (what the ``stats`` command prints) lists every collection of the deletion
    core's registry and counts the mailbox's documents in each, apart from another mailbox's."""
    from bson import ObjectId

    from aecs_mongo.pure import file_records
    from aecs_mongo.pure.change_marks import mark_id
    from aecs_mongo.pure.feed import checkpoint_document
    from aecs_mongo.pure.imap_records import folder_document, source_document
    from aecs_mongo.pure.part_records import part_id
    from aecs_mongo.pure.vectors import block_id

    alice, bob = make_store("alice"), make_store("bob")
    raws = [p.read_bytes() for p in sorted(SAMPLES.glob("*.eml"))]
    first = alice.store(raws[0])
    alice.add("uidl-1", raws[4])  # a message and its UIDL record
    alice.set_embedding(first.message_id, [0.1, 0.2, 0.3])
    bob.store(raws[1])
    for mailbox in ("alice", "bob"):  # the records of the feed, the IMAP import, the vector blocks and the file ingest
        db.feed_checkpoints.insert_one(checkpoint_document(mailbox, "cli", {}))
        db.imap_sources.insert_one(source_document(mailbox, "a@host", "INBOX", 7, 1, "m@x", "k"))
        db.imap_folders.insert_one(folder_document(mailbox, "a@host", "INBOX", 7))
        db.vector_blocks.insert_one({"_id": block_id(mailbox, 0), "mailboxId": mailbox})
        db.blob_parts.insert_one({"_id": part_id(mailbox, "0" * 64), "mailboxId": mailbox, "refs": []})
        listed = file_records.Listed("file", "a.eml", "a.eml", "", 7, 10, 1_700_000_000_000_000_000)
        db.file_sources.insert_one(file_records.file_document(mailbox, "/mail", listed))
        # the change mark: written by the stores where there are no change streams, so here on
        # a replica set (a mark as a settled write leaves it)
        db.change_marks.update_one(
            {"_id": mark_id(mailbox)},
            {"$setOnInsert": {"mailboxId": mailbox, "epoch": ObjectId(), "n": 0, "pending": []}},
            upsert=True,
        )

    stats = alice.stats()
    names = [c.for_bucket("aecs").name for c in DATA_COLLECTIONS]
    assert list(stats["collections"]) == names
    files = [f["_id"] for f in db["aecs.files"].find({"metadata.mailboxId": "alice"}, {"_id": 1})]
    expected = {name: 1 for name in names} | {
        "messages": 2,
        "bodies": 2,
        "threads": db.threads.count_documents({"mailboxId": "alice"}),
        "aecs.files": len(files),
        "aecs.chunks": db["aecs.chunks"].count_documents({"files_id": {"$in": files}}),
    }
    assert files and expected["aecs.chunks"] >= len(files)
    assert {name: entry["mailbox"] for name, entry in stats["collections"].items()} == expected
    assert {name: entry["total"] for name, entry in stats["collections"].items()} == {
        name: db[name].count_documents({}) for name in names
    }
    assert (stats["database"], stats["mailboxId"], stats["messages"]) == (db.name, "alice", 2)
    assert sum(stats["specVersions"].values()) == 2
    if backend == "mongomock":  # no collStats, no $collStats: the sizes are unavailable, each says why
        assert stats["sizesFrom"] == []
        assert all(e["size"] is None and e["sizeError"] for e in stats["collections"].values())
    else:
        assert stats["sizesFrom"]
        assert all(isinstance(e["size"], int) for e in stats["collections"].values())


def test_stats_says_why_where_the_server_gives_no_sizes(make_store: Callable[..., Any], db: Any, backend: str) -> None:
    """A server without ``collStats`` or ``$collStats`` (mongomock): each collection there says
    why it has no sizes (the real servers' sizes: ``test_stats_counts_every_registry_collection``)."""
    if backend != "mongomock":
        pytest.skip(f"the {backend} backend gives sizes")
    stats = make_store("alice").stats()
    assert stats["sizesFrom"] == []
    assert all(e["size"] is None for e in stats["collections"].values())
    there = [e for name, e in stats["collections"].items() if name in db.list_collection_names()]
    assert there and all(e["sizeError"] for e in there)


def _terminal_cells(text: str) -> int:
    """Cells a terminal draws: East Asian wide/fullwidth 2, combining marks 0, others 1."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text
    )


WIDE_SUBJECTS = {
    "wide-ja@example.jp": ("山田太郎", "会議の議題について確認をお願いします"),
    "wide-zh@example.cn": ("王小明", "关于下周预算会议的安排和准备工作以及其他相关事项的详细说明与讨论"),
    "wide-mark@example.com": ("Rene\u0301e Dupont", "Cafe\u0301 re\u0301sume\u0301 for the week"),
    "wide-ascii@example.com": ("Bob Builder", "Plain subject"),
}


@pytest.mark.server
def test_tables_line_up_on_wide_characters(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from email.header import Header

    for n, (mid, (name, subject)) in enumerate(WIDE_SUBJECTS.items()):
        sender = Header(name, "utf-8").encode()
        (tmp_path / f"{n}.eml").write_bytes(
            f"From: {sender} <s{n}@example.com>\r\nTo: alice@example.com\r\n"
            f"Subject: {Header(subject, 'utf-8').encode()}\r\nMessage-ID: <{mid}>\r\n"
            f"Date: Mon, 02 Nov 2026 09:0{n}:00 +0000\r\n\r\nbody\r\n".encode()
        )
    assert cli("ingest", str(tmp_path)).code == 0

    monkeypatch.setenv("COLUMNS", "80")
    rows = cli("threads").out.splitlines()[:-1]  # the last line is next_cursor
    assert len(rows) == len(WIDE_SUBJECTS)
    # the short thread id column starts at the same cell on every row, whatever the subject's
    # script, and every row fits the 80 columns
    starts = {_terminal_cells(row[: row.rindex("  ") + 2]) for row in rows}
    assert starts == {80 - 8}, rows
    assert all(_terminal_cells(row) == 80 for row in rows), rows
    chinese = next(row for row in rows if "关于" in row)
    assert "…" in chinese  # 62 cells of subject, cut to fit 42

    lines = cli("inbox").out.splitlines()
    firsts = [line for line in lines if not line.startswith(" ") and not line.startswith("next_cursor")]
    assert len(firsts) == len(WIDE_SUBJECTS)
    for line in firsts:
        subject = next(s for _, s in WIDE_SUBJECTS.values() if s[:3] in line)
        # the subject column starts after the sender column (20 cells at 80 columns) on every row
        assert _terminal_cells(line[: line.index(subject[:3])]) == 16 + 2 + 20 + 2, line
        assert _terminal_cells(line) <= 80
    assert any("山田太郎" in line for line in firsts) and any("Rene\u0301e Dupont" in line for line in firsts)


@pytest.mark.server
def test_mailboxes_are_separate(cli: Cli) -> None:
    assert cli("ingest", str(SAMPLES), "--mailbox", "alice").code == 0
    empty = cli("inbox", "--mailbox", "bob", "--json")
    assert empty.lines() == [] and empty.code == 0
    # a read of an empty mailbox when others exist says so (a mistyped --mailbox)
    assert "mailbox 'bob' is empty" in empty.err and "'alice'" in empty.err and "aecs-mongo mailboxes" in empty.err
    assert len(cli("--mailbox", "alice", "inbox", "--json").lines()) == SAMPLE_COUNT
    listing = cli("mailboxes", "--mailbox", "alice")
    assert listing.code == 0 and "alice" in listing.out and f"{SAMPLE_COUNT}" in listing.out
    assert cli("inbox", "--mailbox", "alice").err == ""  # a mailbox with mail: no note


@pytest.mark.server
def test_pop3_and_migration_report_errors(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AECS_POP3_PASSWORD", "secret")
    result = cli("pop3", "127.0.0.1", "--port", str(port), "--security", "plain", "--user", "u", "--timeout", "5")
    assert result.code == 1 and "POP3" in result.err
    bogus = tmp_path / "old.gdbm"
    bogus.write_bytes(b"not a gdbm file")
    migrated = cli("migrate-gdbm", str(bogus))
    assert migrated.code == 1 and "migrate-gdbm" in migrated.err


@pytest.mark.server
def test_ingest_the_corpus(cli: Cli) -> None:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent")
    files = [p for p in CORPUS.iterdir() if not p.name.startswith(".")]
    result = cli("ingest", str(CORPUS), "--json")
    summary = result.json()
    assert summary["stored"] + summary["present"] + summary["failed"] == len(files)
    assert summary["failed"] == len(summary["failures"])
    assert all(f["reason"] for f in summary["failures"])
    assert result.code == (1 if summary["failed"] else 0)


# --- the real command, embedded server ------------------------------------------------------------


def test_subprocess_with_the_embedded_server(tmp_path: Path) -> None:
    from aecs_mongo.embedded.server import embedded_available

    if not embedded_available():
        pytest.skip("the embedded server is not installed")
    # the server kept between the three commands (a process each), stopped at the end
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"} | {"AECS_KEEP_SERVER": "5m"}
    data_dir = tmp_path / "data"

    def run(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=180,
        )

    try:
        _three_commands(run, data_dir)
    finally:
        run("server", "stop")


def _three_commands(run: Callable[..., subprocess.CompletedProcess[bytes]], data_dir: Path) -> None:
    ingest = run("ingest", str(SAMPLES))
    assert ingest.returncode == 0, ingest.stderr.decode()
    assert b"embedded" in ingest.stderr and str(data_dir).encode() in ingest.stderr
    assert f"{SAMPLE_COUNT} stored".encode() in ingest.stdout
    thread = run("thread", "plan-1@example.com", "--json")  # a second process: the data persisted
    assert thread.returncode == 0, thread.stderr.decode()
    # the server was running: said once, by the command that started it (or with -v)
    assert b"using the embedded SecantusDB server" not in thread.stderr
    context = [json.loads(line) for line in thread.stdout.splitlines()]
    assert {m["threadId"] for m in context} == {"plan-1@example.com"}
    assert [m["position"] for m in context] == [0, 1, 2]
    assert [m["messageId"] for m in context] == [
        "plan-1@example.com",
        "plan-2@example.org",
        "plan-3@example.net",
    ]
    assert "Thursday" in context[1]["forAI"]
    raw = run("show", "plan-1@example.com", "--raw", "-v")
    assert raw.stdout == (SAMPLES / "01-plan.eml").read_bytes()
    assert f"using the embedded SecantusDB server, data in {data_dir}".encode() in raw.stderr
    assert (data_dir / "db").is_dir()


# --- on a terminal: the progress line, and interrupts ------------------------------------------------


def _on_a_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m aecs_mongo argv`` with stderr on a pseudo-terminal (stdout piped) in a
    process group of its own, as a shell runs a foreground job; returns it and the pty's reader."""
    reader, writer = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aecs_mongo", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=writer,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        # a shell gives its foreground job the default SIGINT, even when the suite itself runs in
        # the background (where it inherited SIGINT ignored, as the command then rightly keeps it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(writer)
    return proc, reader


def _read_until(reader: int, pattern: re.Pattern[bytes] | None, timeout: float) -> bytes:
    """What the terminal showed, up to the first match of ``pattern`` (or the end, or the timeout)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while not (pattern and pattern.search(seen)) and time.monotonic() < deadline:
        ready, _, _ = select.select([reader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # EIO: every writer closed
                break
            if not chunk:
                break
            seen += chunk
    return seen


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _sigterm_to_another_thread(pid: int) -> None:
    """SIGTERM to one thread of ``pid`` that is not its main thread (``tgkill``), as the kernel
    sometimes delivers a signal sent to the process."""
    import ctypes

    others = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid]
    assert others, "the server runs threads besides its main one"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.tgkill(pid, others[0], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())


@pytest.mark.parametrize("launcher", ["command's own", "shared"])
def test_a_sigterm_given_to_another_thread_still_stops_the_server(launcher: str, tmp_path: Path) -> None:
    """CPython handles a signal in the main thread only, and SecantusDB's main thread waits on a
    lock, which only a signal given to that thread interrupts: a SIGTERM the kernel gives to
    another thread would never be handled, and the server would run on until it was killed. Both
    launchers pass it to the main thread; the server stops cleanly (exit status 0)."""
    from aecs_mongo.embedded.server import EmbeddedServer, embedded_available

    if not embedded_available() or not hasattr(__import__("ctypes").CDLL(None), "tgkill"):
        pytest.skip("needs the embedded server and tgkill (Linux, glibc 2.30+)")
    if launcher == "shared":
        env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"} | {"AECS_KEEP_SERVER": "5m"}
        data = tmp_path / "data"
        started = subprocess.run(
            [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data), "server", "start"],
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert started.returncode == 0, started.stderr.decode()
        pid = json.loads((data / "server.json").read_text())["pid"]
        try:
            _sigterm_to_another_thread(pid)
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _alive(pid), "the shared server did not stop on SIGTERM"
        finally:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        return
    server = EmbeddedServer(tmp_path / "data", auth=False)
    server.start()
    try:
        assert server._proc is not None
        _sigterm_to_another_thread(server._proc.pid)
        assert server._proc.wait(timeout=30) == 0  # a clean stop, not a kill
    finally:
        server.stop()


def test_a_server_whose_stop_hangs_still_ends_after_its_parent_is_killed(tmp_path: Path) -> None:
    """The launcher's promise without relying on the server's own SIGTERM handling: a stand-in
    server that ignores SIGTERM (a stop that hangs) still exits once the grace after its parent's
    death is over, so a SIGKILLed command never leaves the data directory held."""
    from aecs_mongo.embedded.launcher import MODULE

    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to follow the processes")
    stand_in = tmp_path / "secantus"
    stand_in.mkdir()
    (stand_in / "__init__.py").write_text("")
    (stand_in / "__main__.py").write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)\n"
    )
    parent_code = (
        "import os, subprocess, sys, time\n"
        "launcher = [sys.executable, '-m', sys.argv[1], '--parent', str(os.getpid()), '--grace', '2', '--']\n"
        "child = subprocess.Popen(launcher, stdout=sys.stdout)\n"
        "time.sleep(600)\n"
    )
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path}  # the stand-in first
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code, MODULE], env=env, stdout=subprocess.PIPE, cwd=tmp_path
    )
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"up\n"  # the stand-in runs, with SIGTERM ignored
    (server,) = _children(parent.pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)


@pytest.mark.server
def test_progress_line_on_a_terminal_only(servers: Any, backend: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    name = f"aecs_cli_{uuid.uuid4().hex[:12]}"
    base = ["--uri", servers.uri(backend), "--db", name, "ingest", str(SAMPLES)]
    proc, reader = _on_a_terminal(base, env, tmp_path)
    shown = _read_until(reader, None, timeout=120)  # everything, until the end
    out, _ = proc.communicate(timeout=60)
    os.close(reader)
    assert proc.returncode == 0, shown.decode(errors="replace")
    frames = [f for f in shown.split(b"\r\x1b[K") if f.startswith(b"ingest ")]
    assert frames, shown
    assert frames[-1].startswith(f"ingest 100% | {SAMPLE_COUNT}/{SAMPLE_COUNT} messages".encode())
    assert f"{SAMPLE_COUNT} stored, 0 present, 0 failed".encode() in frames[-1]
    assert shown.endswith(b"\r\x1b[K")  # the line is cleared when the ingest ends
    assert b"\x1b" not in out  # the summary on stdout is plain text
    assert f"{SAMPLE_COUNT} stored".encode() in out
    proc, reader = _on_a_terminal([*base, "--no-progress"], env, tmp_path)
    shown = _read_until(reader, None, timeout=120)
    proc.communicate(timeout=60)
    os.close(reader)
    assert proc.returncode == 0 and b"\x1b[K" not in shown
    servers.client(backend).drop_database(name)


@pytest.mark.server
def test_search_progress_on_a_terminal_and_its_count_in_json(servers: Any, backend: str, tmp_path: Path) -> None:
    """The scan's progress (a command without the local index: --search-index none)."""
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    name = f"aecs_cli_{uuid.uuid4().hex[:12]}"
    base = ["--uri", servers.uri(backend), "--db", name, "--search-index", "none"]
    for argv in ([*base, "ingest", str(SAMPLES), "--no-progress"], [*base, "search", "Thursday"]):
        proc, reader = _on_a_terminal(argv, env, tmp_path)
        shown = _read_until(reader, None, timeout=120)
        out, _ = proc.communicate(timeout=60)
        os.close(reader)
        assert proc.returncode == 0, shown.decode(errors="replace")
    frames = [f for f in shown.split(b"\r\x1b[K") if f.startswith(b"searched ")]
    assert frames and frames[-1] == f"searched {SAMPLE_COUNT} of {SAMPLE_COUNT}".encode(), shown
    assert shown.endswith(b"\r\x1b[K") and b"\x1b" not in out
    assert f"({SAMPLE_COUNT} messages searched)".encode() in out
    proc, reader = _on_a_terminal([*base, "search", "Thursday", "--json"], env, tmp_path)
    shown = _read_until(reader, None, timeout=120)
    out, _ = proc.communicate(timeout=60)
    os.close(reader)
    assert b"searched" not in shown  # --json: no progress line
    *hits, data = [json.loads(line) for line in out.splitlines()]  # JSON lines: the hits, then the engine
    assert data["examined"] == SAMPLE_COUNT and data["complete"] is True and data["engine"] == "scan"
    assert "plan-2@example.org" in {r["messageId"] for r in hits}
    stats = subprocess.run(
        [sys.executable, "-m", "aecs_mongo", *base, "stats", "--json"], env=env, capture_output=True, check=True
    )
    engines = json.loads(stats.stdout)
    assert (engines["messages"], engines["searchEngine"], engines["vectorEngine"]) == (SAMPLE_COUNT, "scan", "exact")
    servers.client(backend).drop_database(name)


@pytest.fixture(scope="module")
def interrupt_mbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An mbox of about 300 messages (16 batches of 20): long enough to interrupt mid-ingest,
    short enough that the resumed ingest is quick; written once for the three interruptions."""
    mbox = tmp_path_factory.mktemp("interrupt") / "big.mbox"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_mbox.py"), "--size-mb", "3", "--out", str(mbox)],
        check=True,
        capture_output=True,
    )
    return mbox


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to the command", "Ctrl-C to the process group", "SIGKILL to the command"])
def test_interrupted_ingest_stops_the_embedded_server_and_resumes(
    how: str, tmp_path: Path, interrupt_mbox: Path
) -> None:
    from aecs_mongo.embedded.server import embedded_available

    if not embedded_available():
        pytest.skip("the embedded server is not installed")
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to find the server process")
    mbox = interrupt_mbox
    total = sum(1 for _ in iter_mbox(mbox))
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    argv = ["--data-dir", str(tmp_path / "data"), "ingest", str(mbox), "--batch-size", "20", "--json"]
    proc, reader = _on_a_terminal(argv, env, tmp_path)
    shown = _read_until(reader, re.compile(rb"[1-9]\d* stored"), timeout=120)  # mid-ingest
    servers = [pid for pid in _children(proc.pid) if b"secantus" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(servers) == 1, shown.decode(errors="replace")
    if how.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
    elif how.startswith("SIGKILL"):
        proc.kill()
    else:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: every process of the job
    out, _ = proc.communicate(timeout=60)
    shown += _read_until(reader, None, timeout=5)
    os.close(reader)
    if how.startswith("SIGKILL"):
        # no cleanup ran: the server notices its parent is gone and stops, freeing the data dir
        deadline = time.monotonic() + 30
        while _alive(servers[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        log = tmp_path / "data" / "server.log"
        assert not _alive(servers[0]), log.read_text(errors="replace")[-4000:] if log.exists() else "no server.log"
        confirmed, unconfirmed = 0, total
    else:
        assert proc.returncode == 130, shown.decode(errors="replace")
        assert b"stopping once the messages in hand are stored" in shown
        report = json.loads(out)
        assert report["interrupted"] is True and 0 < report["stored"] < total
        assert report["unconfirmed"] == []  # the messages in hand were finished, not abandoned
        assert not _alive(servers[0])  # stopped, not orphaned
        confirmed, unconfirmed = report["stored"], 0
    again = subprocess.run(
        [sys.executable, "-m", "aecs_mongo", *argv], cwd=tmp_path, env=env, capture_output=True, timeout=300
    )
    assert again.returncode == 0, again.stderr.decode()
    resumed = json.loads(again.stdout)
    assert resumed["failed"] == 0 and resumed["appended"] == 1
    # the re-run reads on from the last message the file record holds: what the interrupted run
    # confirmed is not read again, what it did not send is stored now
    assert resumed["stored"] + resumed["present"] <= total - confirmed
    if not how.startswith("SIGKILL"):  # every message in hand was finished and recorded
        assert (resumed["stored"], resumed["present"]) == (total - confirmed, 0)
    else:
        assert resumed["present"] <= unconfirmed
    everything = subprocess.run(
        [sys.executable, "-m", "aecs_mongo", *argv, "--rescan"], cwd=tmp_path, env=env, capture_output=True, timeout=300
    )
    assert (json.loads(everything.stdout)["present"], json.loads(everything.stdout)["stored"]) == (
        total,
        0,
    )  # nothing lost


def test_a_second_interrupt_stops_at_once() -> None:
    # Ctrl-C as at a terminal, also when the suite itself runs as a background job
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with finish_in_hand_on_interrupt() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs at the next bytecode boundary
            assert stop.requested
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)


def test_signals_ignored_at_start_stay_ignored() -> None:
    """``nohup aecs-mongo ingest big.mbox &``: closing the terminal (SIGHUP) must not stop it."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with finish_in_hand_on_interrupt() as stop:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGTERM))  # the others are taken
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            assert not stop.requested
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
