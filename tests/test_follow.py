"""Ingest again costs only what changed: the record of file sources, on the real server.

Through the Python API (``sync_files``) and the command line (``ingest``): Maildir deliveries,
renames (flag changes), moves between ``new``/``cur`` and folders, deletions (kept, or removed
with ``remove_missing`` when no copy is left), mbox appends and rewrites, interrupted runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from aecs_mongo import MessageStore
from aecs_mongo.mail.follow import FileSyncReport, sync_files
from aecs_mongo.pure import file_records as fr

from .helpers.cli import Cli, command_env

pytestmark = pytest.mark.server


def message(n: int, body: str = "Hello.") -> bytes:
    return (
        f"From: Sender {n} <s{n}@follow.example>\r\nTo: alice@follow.example\r\n"
        f"Subject: follow {n}\r\nDate: Tue, 3 Nov 2026 10:{n % 60:02d}:00 +0000\r\n"
        f"Message-ID: <m{n}@follow.example>\r\n\r\n{body} {n}\r\n"
    ).encode()


def mboxrd(numbers: list[int]) -> bytes:
    return b"".join(
        b"From s@follow.example Tue Nov  3 10:00:00 2026\n" + message(n).replace(b"\r\n", b"\n") + b"\n"
        for n in numbers
    )


def maildir(root: Path, *folders: str) -> Path:
    for folder in ("", *folders):
        for sub in ("cur", "new", "tmp"):
            (root / folder / sub).mkdir(parents=True, exist_ok=True)
    return root


def deliver(root: Path, n: int, sub: str = "new", info: str = "", folder: str = "") -> Path:
    path = root / folder / sub / (f"17000{n:05d}.M{n}P1.host" + (f":2,{info}" if info or sub == "cur" else ""))
    path.write_bytes(message(n))
    return path


def age(root: Path, seconds: float = 5.0) -> None:
    """Set every directory's mtime back: a directory changed within the last second is listed
    again on each run (``MTIME_TRUST_NS``), which the tests of the quiet path must not hit."""
    past = time.time() - seconds
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            os.utime(path, (past, past))


@pytest.fixture
def mstore(db: Any) -> MessageStore:
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    return store


def ids(store: MessageStore) -> set[str]:
    return set(store.message_ids())


def records(store: MessageStore, kind: str) -> list[dict[str, Any]]:
    return list(store.db[fr.COLLECTION].find({"mailboxId": store.mailbox_id, "kind": kind}))


def test_a_rerun_reads_nothing_when_nothing_changed(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir", ".Sent")
    for n in range(6):
        deliver(box, n, "cur" if n % 2 else "new", "S" if n % 2 else "")
    deliver(box, 6, folder=".Sent")
    age(box)
    first = sync_files(mstore, [box])
    assert (first.files, first.new, first.messages.stored) == (7, 7, 7)
    assert len(records(mstore, "maildir")) == 7
    # a file overwritten in place (never done to a Maildir file): not read again, since its
    # directory's mtime is as recorded; a re-read would find a message that is not mail
    victim = box / "cur" / next(p.name for p in (box / "cur").iterdir())
    with open(victim, "r+b") as f:
        f.write(b"\x00\x01 not mail any more")
    age(box)
    again = sync_files(mstore, [box])
    assert (again.files, again.new, again.unchanged, again.messages.processed) == (7, 0, 7, 0)
    assert again.messages.failures == []
    assert again.summary() == "7 files: 0 new, 0 flag changes, 0 gone (kept)"
    assert ids(mstore) == {f"m{n}@follow.example" for n in range(7)}


def test_new_files_and_deletions(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    paths = [deliver(box, n) for n in range(5)]
    sync_files(mstore, [box])
    paths[0].unlink()
    paths[1].unlink()
    deliver(box, 10)
    deliver(box, 11)
    report = sync_files(mstore, [box])
    assert (report.files, report.new, report.gone, report.removed) == (5, 2, 2, 0)
    assert report.messages.processed == 2  # only the new files were read
    assert report.summary() == "5 files: 2 new, 0 flag changes, 2 gone (kept)"
    assert "m0@follow.example" in ids(mstore)  # kept: an archive outlives its files
    assert len(records(mstore, "maildir")) == 5
    # a gone file already counted is not counted again
    assert sync_files(mstore, [box]).gone == 0


def test_remove_missing_removes_only_what_has_no_copy_left(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    other = tmp_path / "elsewhere"
    other.mkdir()
    paths = [deliver(box, n) for n in range(3)]
    (other / "copy.eml").write_bytes(message(1))  # message 1 has a second source
    sync_files(mstore, [box, other])
    paths[0].unlink()
    paths[1].unlink()
    report = sync_files(mstore, [box], remove_missing=True)
    assert (report.gone, report.removed) == (2, 1)
    assert report.summary() == "1 file: 0 new, 0 flag changes, 2 gone (1 removed)"
    assert ids(mstore) == {"m1@follow.example", "m2@follow.example"}
    (other / "copy.eml").unlink()
    report = sync_files(mstore, [other], remove_missing=True)
    assert (report.gone, report.removed) == (1, 1)
    assert ids(mstore) == {"m2@follow.example"}


def test_a_deleted_message_is_not_ingested_again_and_erase_removes_the_record(
    mstore: MessageStore, tmp_path: Path
) -> None:
    box = maildir(tmp_path / "Maildir")
    deliver(box, 1)
    deliver(box, 2)
    sync_files(mstore, [box])
    assert mstore.delete("m1@follow.example")
    deliver(box, 3)
    report = sync_files(mstore, [box])
    assert (report.new, report.messages.stored) == (1, 1)
    assert ids(mstore) == {"m2@follow.example", "m3@follow.example"}
    mstore.erase_mailbox()
    assert mstore.db[fr.COLLECTION].count_documents({"mailboxId": "alice"}) == 0


def test_a_changed_plain_file_is_read_again(mstore: MessageStore, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    (folder / "a.eml").write_bytes(message(1))
    (folder / "b.eml").write_bytes(message(2))
    (folder / "notes.txt").write_text("not mail\n")
    first = sync_files(mstore, [folder])
    assert (first.files, first.messages.stored, len(first.messages.ignored)) == (3, 2, 1)
    again = sync_files(mstore, [folder])
    assert (again.new, again.changed, again.messages.processed, again.messages.ignored) == (0, 0, 0, [])
    (folder / "b.eml").write_bytes(message(3))
    report = sync_files(mstore, [folder], remove_missing=True)
    assert (report.changed, report.messages.stored, report.removed) == (1, 1, 1)
    assert ids(mstore) == {"m1@follow.example", "m3@follow.example"}


def test_mbox_appended_is_read_from_where_the_last_run_stopped(mstore: MessageStore, tmp_path: Path) -> None:
    path = tmp_path / "inbox.mbox"
    path.write_bytes(mboxrd([1, 2, 3]))
    first = sync_files(mstore, [path])
    assert (first.new, first.messages.stored) == (1, 3)
    assert sync_files(mstore, [path]).messages.processed == 0
    with open(path, "ab") as f:
        f.write(mboxrd([4, 5]))
    report = sync_files(mstore, [path])
    assert (report.appended, report.changed, report.messages.stored, report.messages.present) == (1, 0, 2, 0)
    (record,) = records(mstore, "mbox")
    assert (record["offset"], record["messages"]) == (path.stat().st_size, 5)
    assert len(records(mstore, "mboxmsg")) == 5


def test_mbox_with_a_cut_last_message_is_read_again_once_complete(mstore: MessageStore, tmp_path: Path) -> None:
    path = tmp_path / "inbox.mbox"
    whole = mboxrd([1, 2])
    path.write_bytes(whole[:-20])  # message 2 is still being written
    first = sync_files(mstore, [path])
    assert first.messages.stored == 1
    path.write_bytes(whole)
    report = sync_files(mstore, [path])
    assert (report.appended, report.messages.stored, report.messages.present) == (1, 1, 0)


def test_mbox_rewritten_is_read_in_full(mstore: MessageStore, tmp_path: Path) -> None:
    path = tmp_path / "inbox.mbox"
    path.write_bytes(mboxrd([1, 2, 3]))
    sync_files(mstore, [path])
    path.write_bytes(mboxrd([2, 3, 4, 5]))  # message 1 expunged, two new: same size or not, rewritten
    report = sync_files(mstore, [path], remove_missing=True)
    assert (report.changed, report.appended) == (1, 0)
    assert (report.messages.stored, report.messages.present, report.removed) == (2, 2, 1)
    assert ids(mstore) == {f"m{n}@follow.example" for n in (2, 3, 4, 5)}
    assert len(records(mstore, "mboxmsg")) == 4


def test_mbox_in_a_directory_and_gone(mstore: MessageStore, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    (folder / "Inbox").write_bytes(mboxrd([1, 2]))  # no extension: recognised by its first line
    first = sync_files(mstore, [folder])
    assert (first.new, first.messages.stored) == (1, 2)
    assert sync_files(mstore, [folder]).messages.processed == 0
    (folder / "Inbox").unlink()
    report = sync_files(mstore, [folder], remove_missing=True)
    assert (report.gone, report.removed) == (1, 2)
    assert mstore.db[fr.COLLECTION].count_documents({"kind": {"$in": ["mbox", "mboxmsg"]}}) == 0


def test_a_failed_batch_leaves_records_only_for_what_was_stored(
    mstore: MessageStore, failpoints: Any, tmp_path: Path
) -> None:
    from .helpers.failpoints import failpoint

    box = maildir(tmp_path / "Maildir")
    for n in range(30):
        deliver(box, n)
    failpoint(failpoints, mode={"skip": 12, "times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
    with pytest.raises(OperationFailure):
        sync_files(mstore, [box], batch_size=5)
    failpoint(failpoints, mode="off")
    stored = {m["messageKey"] for m in mstore.db.messages.find({}, {"messageKey": 1})}
    recorded = [r["messageKey"] for r in records(mstore, "maildir")]
    assert 0 < len(recorded) < 30
    assert set(recorded) <= stored
    assert records(mstore, "dir") == []  # the directories are listed again next time
    report = sync_files(mstore, [box])
    assert report.new == 30 - len(recorded)
    assert len(ids(mstore)) == 30 and len(records(mstore, "maildir")) == 30


def test_a_killed_ingest_is_continued_by_the_next_run(servers: Any, backend: str, db: Any, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    for n in range(400):
        deliver(box, n)
    argv = [sys.executable, "-m", "aecs_mongo", "--uri", servers.uri(backend), "--db", db.name]
    proc = subprocess.Popen([*argv, "ingest", str(box), "--batch-size", "10", "--no-progress"], env=command_env())
    deadline = time.monotonic() + 120
    while db[fr.COLLECTION].count_documents({}) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = MessageStore(db, mailbox_id="default")
    stored = {m["messageKey"] for m in db.messages.find({}, {"messageKey": 1})}
    recorded = {r["messageKey"] for r in db[fr.COLLECTION].find({"kind": "maildir"})}
    assert recorded and recorded <= stored
    assert len(recorded) < 400, "the kill came after the whole run"
    done = subprocess.run([*argv, "ingest", str(box), "--json"], env=command_env(), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert len(ids(store)) == 400
    assert db[fr.COLLECTION].count_documents({"kind": "maildir"}) == 400


def test_cli_summary_and_json(cli: Cli, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    paths = [deliver(box, n) for n in range(4)]
    run = cli("ingest", str(box), "--no-progress")
    assert run.code == 0, run.err
    assert run.out.splitlines()[-1] == "4 files: 4 new, 0 flag changes, 0 gone (kept)"
    paths[0].unlink()
    deliver(box, 9)
    run = cli("ingest", str(box), "--json")
    summary = run.json()
    assert (summary["files"], summary["new"], summary["gone"], summary["flagChanges"]) == (4, 1, 1, 0)
    assert (summary["stored"], summary["present"], summary["removed"]) == (1, 0, 0)
    run = cli("ingest", str(box), "--remove-missing", "--json")
    assert run.json()["removed"] == 1
    run = cli("ingest", str(box), "--rescan", "--json")
    assert (run.json()["present"], run.json()["stored"]) == (4, 0)


def test_report_defaults() -> None:
    report = FileSyncReport(files=10_000, new=12, flag_changes=3, gone=2)
    assert report.summary() == "10,000 files: 12 new, 3 flag changes, 2 gone (kept)"


def tags_of(store: MessageStore, n: int) -> tuple[list[str], list[str]]:
    doc = store.db.messages.find_one({"messageId": f"m{n}@follow.example"}, {"tags": 1, "folders": 1})
    return sorted(doc.get("tags") or []), sorted(doc.get("folders") or [])


def test_renames_are_flag_changes_and_moves_are_folder_changes(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir", ".Archive")
    fresh = deliver(box, 1)  # new/: unread
    seen = deliver(box, 2, "cur", "S")
    other = deliver(box, 3, "cur", "S")
    first = sync_files(mstore, [box])
    assert first.messages.stored == 3
    assert tags_of(mstore, 1) == ([], ["INBOX"])
    assert tags_of(mstore, 2)[1] == ["INBOX"] and "$seen" in tags_of(mstore, 2)[0]
    mstore.tag(["m2@follow.example"], add=["todo"])  # a user tag: never touched by a rename
    # a mail reader: reads message 1 (new/ -> cur/ with S), flags and answers 2, archives 3
    fresh.rename(box / "cur" / (fresh.name + ":2,S"))
    seen.rename(seen.with_name(seen.name.replace(":2,S", ":2,FRS")))
    other.rename(box / ".Archive" / "cur" / other.name)
    report = sync_files(mstore, [box])
    assert (report.new, report.flag_changes, report.moved, report.gone, report.messages.processed) == (0, 2, 1, 0, 0)
    assert report.summary() == "3 files: 0 new, 2 flag changes, 0 gone (kept), 1 moved"
    assert tags_of(mstore, 1) == (["$seen"], ["INBOX"])
    assert tags_of(mstore, 2) == (["$answered", "$flagged", "$seen", "todo"], ["INBOX"])
    assert tags_of(mstore, 3) == (["$seen"], ["Archive"])
    # unflagged again, and nothing else: one flag change
    flagged = box / "cur" / (seen.name.replace(":2,S", ":2,FRS"))
    flagged.rename(flagged.with_name(flagged.name.replace(":2,FRS", ":2,RS")))
    report = sync_files(mstore, [box])
    assert (report.flag_changes, report.moved, report.unchanged) == (1, 0, 2)
    assert tags_of(mstore, 2) == (["$answered", "$seen", "todo"], ["INBOX"])


def test_cli_follows_a_rename(cli: Cli, db: Any, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    path = deliver(box, 1, "cur", "")
    assert cli("ingest", str(box), "--no-progress").code == 0
    path.rename(path.with_name(path.name.replace(":2,", ":2,F")))
    run = cli("ingest", str(box), "--json")
    assert (run.json()["flagChanges"], run.json()["stored"], run.json()["present"]) == (1, 0, 0)
    assert db.messages.find_one({"messageId": "m1@follow.example"})["tags"] == ["$flagged"]


def test_an_mbox_interrupted_halfway_is_read_on_from_its_last_stored_message(
    mstore: MessageStore, failpoints: Any, tmp_path: Path
) -> None:
    from .helpers.failpoints import failpoint

    path = tmp_path / "inbox.mbox"
    path.write_bytes(mboxrd(list(range(30))))
    failpoint(failpoints, mode={"skip": 12, "times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
    with pytest.raises(OperationFailure):
        sync_files(mstore, [path], batch_size=5)
    failpoint(failpoints, mode="off")
    stored = {m["messageKey"] for m in mstore.db.messages.find({}, {"messageKey": 1})}
    recorded = [r["messageKey"] for r in records(mstore, "mboxmsg")]
    assert 0 < len(recorded) < 30 and set(recorded) <= stored
    (record,) = records(mstore, "mbox")
    assert record["size"] is None and record["messages"] == len(recorded)  # not read to its end
    report = sync_files(mstore, [path], batch_size=5)
    assert (report.appended, report.changed) == (1, 0)
    assert report.messages.stored + report.messages.present == 30 - len(recorded)
    assert len(ids(mstore)) == 30 and len(records(mstore, "mboxmsg")) == 30
    assert sync_files(mstore, [path]).messages.processed == 0


def test_files_that_are_not_mail_are_recorded_without_any_message_stored(mstore: MessageStore, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("not mail\n")
    (folder / "b.mbox").write_bytes(b"From x Tue Nov  3 10:00:00 2026\n\n")  # an mbox of one empty entry
    first = sync_files(mstore, [folder])
    assert (first.messages.processed, first.messages.ignored, first.new) == (1, [str(folder / "a.txt")], 2)
    assert {r["kind"] for r in mstore.db[fr.COLLECTION].find()} >= {"file", "mbox"}
    again = sync_files(mstore, [folder])
    assert (again.messages.processed, again.messages.ignored, again.unchanged) == (0, [], 2)


def test_cli_mbox_appended_then_rewritten(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "inbox.mbox"
    path.write_bytes(mboxrd([1, 2]))
    assert cli("ingest", str(path), "--json").json()["stored"] == 2
    with open(path, "ab") as f:
        f.write(mboxrd([3]))
    run = cli("ingest", str(path), "--no-progress")
    assert run.out.splitlines()[-1] == "1 file: 0 new, 0 flag changes, 0 gone (kept), 1 mbox appended"
    assert "1 stored, 0 already present" in run.out
    path.write_bytes(mboxrd([3, 1]))  # message 2 expunged
    summary = cli("ingest", str(path), "--remove-missing", "--json").json()
    assert (summary["changed"], summary["present"], summary["removed"]) == (1, 2, 1)


def test_rescan_reads_everything_again_and_marks_nothing_gone(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir")
    seen = deliver(box, 1, "cur", "S")
    (tmp_path / "inbox.mbox").write_bytes(mboxrd([2, 3]))
    sync_files(mstore, [box, tmp_path / "inbox.mbox"])
    seen.rename(seen.with_name(seen.name + "F"))  # flagged meanwhile: a rescan still follows the rename
    report = sync_files(mstore, [box, tmp_path / "inbox.mbox"], rescan=True)
    assert (report.messages.present, report.messages.stored, report.flag_changes) == (2, 0, 1)
    assert records(mstore, "gone") == []
    assert tags_of(mstore, 1)[0] == ["$flagged", "$seen"]
    assert len(records(mstore, "mboxmsg")) == 2


def test_one_base_name_in_two_folders_is_stored_from_both(mstore: MessageStore, tmp_path: Path) -> None:
    box = maildir(tmp_path / "Maildir", ".Copy")
    deliver(box, 1, "cur", "S")
    copy = box / ".Copy" / "cur" / next((box / "cur").iterdir()).name
    copy.write_bytes(message(2))  # the same file name, other mail: one record key for two files
    report = sync_files(mstore, [box])
    assert (report.new, report.messages.stored, report.messages.failures) == (2, 2, [])
    assert len(records(mstore, "maildir")) == 1  # the second file's record replaced the first's


def test_remove_missing_keeps_a_message_the_imap_sync_holds(mstore: MessageStore, tmp_path: Path) -> None:
    from aecs_mongo.pure.imap_records import source_document
    from aecs_mongo.pure.keys import message_key

    box = maildir(tmp_path / "Maildir")
    paths = [deliver(box, n) for n in (1, 2)]
    sync_files(mstore, [box])
    key = message_key("m1@follow.example")
    mstore.db.imap_sources.insert_one(source_document("alice", "a@host", "INBOX", 7, 1, "m1@follow.example", key))
    for path in paths:
        path.unlink()
    report = sync_files(mstore, [box], remove_missing=True)
    assert (report.gone, report.removed) == (2, 1)
    assert ids(mstore) == {"m1@follow.example"}  # an IMAP folder still has it


def test_stat_numbers_over_the_signed_64_bit_range_are_stored_and_compared(
    mstore: MessageStore, tmp_path: Path
) -> None:
    """A file dated after 2262 has an mtime in nanoseconds over 2**63 - 1 (an exported message with
    such a Date:, the way an overlay file system's inode can be over it): BSON holds no such int,
    so the record keeps the two's complement, and the next run finds the file unchanged."""
    future = 2**63 + 10**18  # 2293: ext4 and tmpfs keep it
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "one.eml").write_bytes(message(1))
    (plain / "box.mbox").write_bytes(mboxrd([2, 3]))
    box = maildir(tmp_path / "Maildir")
    deliver(box, 4, "cur", "S")
    paths = [plain / "one.eml", plain / "box.mbox", *(box / "cur").iterdir(), box / "cur"]
    for path in paths:
        os.utime(path, ns=(future, future))
    if os.stat(plain / "one.eml").st_mtime_ns != future:
        pytest.skip("this file system cannot keep an mtime after 2262")
    first = sync_files(mstore, [plain, box])
    assert first.messages.failures == [] and first.messages.aborted is None
    assert (first.new, first.messages.stored) == (3, 4)
    stored = {doc["mtimeNs"] for doc in mstore.db[fr.COLLECTION].find({"mailboxId": "alice", "mtimeNs": {"$ne": None}})}
    assert future - 2**64 in stored and all(-(2**63) <= v < 2**63 for v in stored)
    again = sync_files(mstore, [plain, box])
    assert (again.new, again.changed, again.unchanged, again.messages.processed) == (0, 0, 3, 0)


def test_int64_keeps_a_stat_number_as_bson_can_hold_it() -> None:
    assert [fr.int64(v) for v in (0, 5, 2**63 - 1, 2**63, 2**64 - 1, -3)] == [0, 5, 2**63 - 1, -(2**63), -1, -3]
