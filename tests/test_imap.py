"""aecs_mongo.mail.imap: an IMAP account synced into the store, against a real Dovecot IMAP server.

Dovecot (Debian: dovecot-core + dovecot-imapd) runs with ``rawlog_dir`` set, so every command our
client sends after the login is written down by the server; FETCH commands are counted there.
Missing tools skip these tests with the reason, or fail them when ``AECS_REQUIRE_DOVECOT=1`` (CI).

The expected bytes of a message are what the server serves for it (``BODY.PEEK[]`` through a
separate admin connection), compared exactly with what the store kept (``get_raw_variants``: a
message whose Message-ID another message already has is kept as a variant of it).
"""

from __future__ import annotations

import contextlib
import functools
import imaplib
import importlib.util
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import MailboxAuthError, MailboxConnectionError, MessageStore, normalize
from aecs_mongo.mail import imap
from aecs_mongo.mail.sources import RawMessage, read_messages
from aecs_mongo.pure.imap_records import (
    SOURCES,
    decode_folder,
    encode_folder,
    plan_batches,
    plan_uid_lookups,
    same_length_runs,
    uid_ranges,
)
from tests.helpers.cli import Cli
from tests.helpers.dovecot import (
    NO_CONDSTORE,
    REQUIRE_ENV,
    DovecotServer,
    dovecot_binary,
    free_port,
    missing_services,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples" / "mailbox"
CORPUS = ROOT.parent / "shared" / "corpus" / "eml"
REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
PASSWORD_VAR = "AECS_TEST_IMAP_PASSWORD"
WORK, DRAFTS = "Work", "Entwürfe"  # DRAFTS is "Entw&APw-rfe" on the server


def need(tool: str, why: str) -> None:
    message = f"{tool} not available: {why}"
    if REQUIRED:
        pytest.fail(message + f" ({REQUIRE_ENV}=1)")
    pytest.skip(message)


# --- fixtures ------------------------------------------------------------------------------------


def _start(**kw: Any) -> DovecotServer:
    lacking = missing_services(imap=True)  # the server starts POP3 beside IMAP
    if lacking:
        need(", ".join(what for what, _ in lacking), "; ".join(how for _, how in lacking))
    binary = dovecot_binary()
    assert binary is not None
    server = DovecotServer(binary, imap=True, **kw)
    try:
        server.start()
    except BaseException:
        server.cleanup()
        raise
    return server


@pytest.fixture(scope="session")
def imap_server() -> Iterator[DovecotServer]:
    server = _start(rawlog=True)
    yield server
    server.cleanup()


@pytest.fixture
def dovecot(imap_server: DovecotServer) -> DovecotServer:
    """The session's Dovecot, running, with an empty account and an empty rawlog."""
    if imap_server.proc is None:
        imap_server.start()
    imap_server.reset_mail()
    return imap_server


@pytest.fixture
def mstore(db: Any) -> MessageStore:
    store = MessageStore(db, mailbox_id="imap")
    store.ensure_indexes()
    return store


def context(server: DovecotServer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.cert_path))


def run_sync(server: DovecotServer, store: Any, **kw: Any) -> Any:
    kw.setdefault("port", server.imaps_port)
    kw.setdefault("timeout", 10)
    return imap.sync(store, "127.0.0.1", server.user, server.password, ssl_context=context(server), **kw)


@contextlib.contextmanager
def admin(server: DovecotServer) -> Iterator[imaplib.IMAP4_SSL]:
    """A separate client (the mail program of the account's owner) to change the account."""
    conn = imaplib.IMAP4_SSL("127.0.0.1", server.imaps_port, ssl_context=context(server), timeout=10)
    conn.login(server.user, server.password)
    try:
        yield conn
    finally:
        with contextlib.suppress(imaplib.IMAP4.error, OSError):
            conn.logout()


def served(server: DovecotServer, folder: str) -> dict[int, tuple[bytes, bytes]]:
    """UID -> (flags response, bytes) of every message of ``folder``, read without marking it."""
    with admin(server) as conn:
        typ, _ = conn.select('"' + encode_folder(folder).decode() + '"', readonly=True)
        assert typ == "OK", folder
        typ, data = conn.uid("FETCH", "1:*", "(UID FLAGS BODY.PEEK[])")
    found = {}
    for item in data:
        if isinstance(item, tuple):
            uid = re.search(rb"UID (\d+)", item[0])
            assert uid is not None
            found[int(uid.group(1))] = (item[0], item[1])
    return found


def _gen_mbox() -> Any:
    spec = importlib.util.spec_from_file_location("gen_mbox", ROOT / "scripts" / "gen_mbox.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _distinct_mail() -> tuple[bytes, ...]:
    """Real messages with distinct Message-IDs (as the store reads them): the corpus
    (../shared/corpus/eml, which holds some messages twice) where present, else the sample mailbox."""
    files = sorted(CORPUS.glob("*.eml")) if CORPUS.is_dir() else []
    seen: set[str] = set()
    kept = []
    for path in files or sorted(SAMPLES.glob("*.eml")):
        raw = path.read_bytes()
        message_id = normalize(raw)["messageId"]
        if message_id not in seen:
            seen.add(message_id)
            kept.append(raw)
    return tuple(kept)


def real_mail(count: int, skip: int = 0) -> list[bytes]:
    """``count`` distinct real messages from position ``skip`` on; past the end of the pool they
    come again with fresh Message-IDs (scripts/gen_mbox.py's rounds), so all stay distinct."""
    pool = _distinct_mail()
    unique = _gen_mbox()._unique
    out = []
    for i in range(skip, skip + count):
        round_, index = divmod(i, len(pool))
        out.append(pool[index] if round_ == 0 else unique(pool[index], round_))
    return out


def identified_mail(count: int) -> list[bytes]:
    """``count`` distinct real messages that carry their own Message-ID, for tests that look a
    message up by ``normalize(raw)["messageId"]``. A message without one gets a synthetic id, a
    hash of its bytes; Dovecot serves CRLF line ends where the file had LF, so the id the sync
    stores would differ from the one computed here (the corpus's flanker__attached-pdf.eml)."""
    mail = [m for m in real_mail(count + 40) if not normalize(m)["messageId"].startswith("generated-")]
    assert len(mail) >= count, "not enough real mail with a Message-ID"
    return mail[:count]


def populate(server: DovecotServer) -> dict[str, int]:
    """Real mail in INBOX, Work and Entwürfe, the first INBOX message in Work too, and
    Archive.2024 whose parent Archive holds nothing (\\Noselect). Returns messages per folder."""
    inbox = real_mail(8)
    for raw in inbox:
        server.deliver_to("INBOX", raw)
    work = real_mail(10, skip=8)
    for raw in [*work, inbox[0]]:  # in two folders: stored once, recorded twice
        server.deliver_to("Work", raw)
    drafts = real_mail(6, skip=18)
    for raw in drafts:
        server.deliver_to(encode_folder(DRAFTS).decode(), raw)
    server.deliver_to("Archive.2024", real_mail(1, skip=24)[0])
    return {"INBOX": len(inbox), WORK: len(work) + 1, DRAFTS: len(drafts), "Archive.2024": 1}


def fetches(server: DovecotServer) -> list[str]:
    return [c for c in server.imap_commands() if c.upper().startswith(("FETCH", "UID FETCH"))]


def assert_exactly_once(server: DovecotServer, store: MessageStore, folders: list[str]) -> int:
    """Every message the server holds in ``folders`` has exactly one source record, and the store
    holds its bytes; no message is stored twice. Returns the number of server messages."""
    records = list(store.db[SOURCES].find({"mailboxId": store.mailbox_id}))
    by_position = {(r["folder"], r["uidvalidity"], r["uid"]): r for r in records}
    assert len(by_position) == len(records)
    total = 0
    for folder in folders:
        uidvalidity = {p.folder: p.uidvalidity for p in imap.positions(store)}[folder]
        for uid, (_, raw) in served(server, folder).items():
            record = by_position.pop((folder, uidvalidity, uid))
            assert raw in store.get_raw_variants(record["messageId"]), (folder, uid)
            total += 1
    assert by_position == {}  # no record of anything the server does not hold
    ids = store.message_ids()
    assert len(ids) == len(set(ids))
    stored_keys = {m["messageKey"] for m in store.db.messages.find({"mailboxId": store.mailbox_id})}
    assert {r["messageKey"] for r in records} <= stored_keys
    return total


# --- pure parts ------------------------------------------------------------------------------------


def test_modified_utf7_names() -> None:
    # RFC 3501 5.1.3's own example, and what Dovecot calls the folder in these tests
    assert decode_folder(b"~peter/mail/&U,BTFw-/&ZeVnLIqe-") == "~peter/mail/台北/日本語"
    assert encode_folder("~peter/mail/台北/日本語") == b"~peter/mail/&U,BTFw-/&ZeVnLIqe-"
    assert encode_folder(DRAFTS) == b"Entw&APw-rfe"
    for name in ["A&B", "&", "😀 smile", "Größe/ünd", "INBOX", ""]:
        assert decode_folder(encode_folder(name)) == name
    # not modified UTF-7: shown as sent, never refused
    assert decode_folder(b"&ZZZ") == "&ZZZ"
    assert decode_folder("Café".encode()) == "Café"  # UTF8=ACCEPT servers send UTF-8
    assert decode_folder(b"&AGE-") == "&AGE-"  # "a" must not be encoded: not valid, kept


def test_fetch_plan_bounds_count_and_bytes() -> None:
    sizes = [(5, 10), (1, 10), (2, 30), (3, 100), (4, 5)]
    assert plan_batches(sizes, 2, 50) == [[1, 2], [3], [4, 5]]  # UID order; a big one alone
    assert plan_batches(sizes, 10, 1000) == [[1, 2, 3, 4, 5]]
    assert plan_batches([], 10, 10) == []
    assert uid_ranges([9, 1, 2, 3, 7, 10]) == "1:3,7,9:10"
    assert same_length_runs([[1, 2], [3, 4], [5], [6], [7, 8]]) == [[[1, 2], [3, 4]], [[5], [6]], [[7, 8]]]
    with pytest.raises(ValueError):
        plan_batches(sizes, 0, 10)


def test_source_records_are_read_by_ranges_where_the_uids_are_dense() -> None:
    assert plan_uid_lookups(range(1, 2501)) == [(1, 1000), (1001, 2000), (2001, 2500)]  # a full listing
    assert plan_uid_lookups([5, 7, 9, 12]) == [(5, 12)]  # 8 UIDs long, 4 in it
    assert plan_uid_lookups([1, 100, 5000], points=2) == [[1, 100], [5000]]  # scattered: points
    assert plan_uid_lookups([]) == []
    mixed = plan_uid_lookups([*range(1, 11), 10_000], chunk=5)
    assert mixed == [(1, 5), (6, 10), (10_000, 10_000)]


def test_bad_arguments_are_refused_before_connecting(mstore: MessageStore) -> None:
    port = free_port()  # nothing listens: an argument error must come first
    with pytest.raises(ValueError, match="security"):
        imap.sync(mstore, "127.0.0.1", "u", "p", port=port, security="plain")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        imap.sync(mstore, "127.0.0.1", "u", "p", port=port, folders="INBOX")
    with pytest.raises(ValueError):
        imap.sync(mstore, "127.0.0.1", "u", "p", port=port, batch_size=0)
    with pytest.raises(TypeError):
        imap.sync(mstore, "127.0.0.1", "u", None, port=port)  # type: ignore[arg-type]


# --- syncing ------------------------------------------------------------------------------------


@pytest.mark.server
def test_first_sync_stores_all_second_fetches_nothing(dovecot: DovecotServer, mstore: MessageStore) -> None:
    counts = populate(dovecot)
    dovecot.clear_rawlog()
    report = run_sync(dovecot, mstore, folders="all", batch_size=4)
    by_folder = {f.folder: f for f in report.folders}
    # "Archive" is only a hierarchy level (\Noselect): skipped, not an error
    assert set(by_folder) == {"INBOX", WORK, DRAFTS, "Archive.2024"}
    assert all(f.error is None and f.failed == [] and f.listed == counts[f.folder] for f in report.folders)
    assert report.new + report.present == sum(counts.values())
    assert report.present == 1  # the message in two folders, fetched twice, stored once
    assert report.new == len(mstore.message_ids())
    # one listing per folder, then bodies in batches of at most 4
    commands = fetches(dovecot)
    assert sum("RFC822.SIZE" in c for c in commands) == 4
    assert sum("BODY.PEEK[]" in c for c in commands) == sum(-(-n // 4) for n in counts.values())
    assert not any(c.upper().startswith("SELECT") for c in dovecot.imap_commands())  # EXAMINE only
    assert assert_exactly_once(dovecot, mstore, list(counts)) == sum(counts.values())

    # where the shared message was seen: both folders, through the API
    shared = normalize(real_mail(1)[0])["messageId"]
    assert [s.folder for s in imap.sources(mstore, f"<{shared}>")] == ["INBOX", WORK]
    assert imap.sources(mstore, "no-such@example.com") == []
    # read-only: nothing was marked \Seen
    for folder in counts:
        assert all(b"\\Seen" not in flags for flags, _ in served(dovecot, folder).values())

    dovecot.clear_rawlog()
    again = run_sync(dovecot, mstore, folders="all")
    assert (again.new, again.present, again.failed) == (0, 0, [])
    assert fetches(dovecot) == []  # UIDNEXT said there was nothing: not one FETCH
    assert [f.position for f in again.folders] == [f.position for f in report.folders]


@pytest.mark.server
def test_delete_expire_and_erase_remove_the_source_records(dovecot: DovecotServer, mstore: MessageStore) -> None:
    """The deletion core knows the IMAP collections: a deleted message loses its source records
    (the folder positions stay, so it is not fetched again), expire removes the records of what
    it expires, and the erase leaves nothing of the mailbox in either collection."""
    import datetime as dt

    counts = populate(dovecot)
    run_sync(dovecot, mstore, folders="all")
    db, box = mstore.db, mstore.mailbox_id
    shared = normalize(real_mail(1)[0])["messageId"]
    assert len(imap.sources(mstore, shared)) == 2
    positions = imap.positions(mstore)
    assert mstore.delete(shared)
    assert imap.sources(mstore, shared) == []
    assert db[SOURCES].count_documents({"mailboxId": box}) == sum(counts.values()) - 2
    assert imap.positions(mstore) == positions
    dovecot.clear_rawlog()
    again = run_sync(dovecot, mstore, folders="all")
    assert (again.new, again.present) == (0, 0) and fetches(dovecot) == []  # deleted mail stays deleted

    oldest = min(m["ts"] for m in db.messages.find({"mailboxId": box}, {"ts": 1}))
    report = mstore.expire(dt.datetime.fromtimestamp(oldest + 1, dt.UTC))
    assert report.messages >= 1
    kept_keys = {m["messageKey"] for m in db.messages.find({"mailboxId": box}, {"messageKey": 1})}
    assert {r["messageKey"] for r in db[SOURCES].find({"mailboxId": box})} <= kept_keys

    mstore.erase_mailbox()
    assert db[SOURCES].count_documents({"mailboxId": box}) == 0
    assert db["imap_folders"].count_documents({"mailboxId": box}) == 0
    assert imap.positions(mstore) == []


@pytest.mark.server
def test_new_mail_appended_arrives_on_the_next_sync(dovecot: DovecotServer, mstore: MessageStore) -> None:
    for raw in real_mail(3):
        dovecot.deliver_to("INBOX", raw)
    first = run_sync(dovecot, mstore)
    assert (first.new, [f.folder for f in first.folders]) == (3, ["INBOX"])
    new_mail = (
        b"From: Carol <carol@example.com>\r\nTo: alice@example.com\r\nSubject: arrived later\r\n"
        b"Message-ID: <appended-1@example.com>\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n\r\nhello again\r\n"
    )
    with admin(dovecot) as conn:
        typ, _ = conn.append("INBOX", "", imaplib.Time2Internaldate(time.time()), new_mail)
        assert typ == "OK"
    dovecot.clear_rawlog()
    second = run_sync(dovecot, mstore)
    assert (second.new, second.present, second.folders[0].listed) == (1, 0, 1)
    assert mstore.get_raw("appended-1@example.com") == new_mail
    commands = fetches(dovecot)
    # the flag changes since the last run (the append moved HIGHESTMODSEQ: none here), the listing
    # above the saved UID, and the one body
    assert len(commands) == 3
    assert commands[0].startswith(f"UID FETCH 1:{first.folders[0].position} (UID FLAGS) (CHANGEDSINCE ")
    assert commands[1].startswith(f"UID FETCH {first.folders[0].position + 1}:*")
    assert second.folders[0].position == first.folders[0].position + 1
    assert_exactly_once(dovecot, mstore, ["INBOX"])


@pytest.mark.server
def test_changed_uidvalidity_reads_the_folder_again_without_duplicates(
    dovecot: DovecotServer, mstore: MessageStore
) -> None:
    mail = real_mail(5)
    for raw in mail:
        dovecot.deliver_to(WORK, raw)
    first = run_sync(dovecot, mstore, folders=[WORK])
    stored = len(mstore.message_ids())
    with admin(dovecot) as conn:  # the folder deleted and made again: new UIDVALIDITY
        assert conn.delete(WORK)[0] == "OK"
        assert conn.create(WORK)[0] == "OK"
        for raw in [*mail[:3], b"Message-ID: <recreated@example.com>\r\nSubject: new\r\n\r\nnew\r\n"]:
            assert conn.append(WORK, "", imaplib.Time2Internaldate(time.time()), raw)[0] == "OK"
    again = run_sync(dovecot, mstore, folders=[WORK])
    folder = again.folders[0]
    assert folder.reset and folder.uidvalidity != first.folders[0].uidvalidity
    assert (folder.new, folder.present) == (1, 3)
    assert len(mstore.message_ids()) == stored + 1
    # only the new UIDVALIDITY's records remain: the old UIDs name nothing now
    assert {r["uidvalidity"] for r in mstore.db.imap_sources.find()} == {folder.uidvalidity}
    assert_exactly_once(dovecot, mstore, [WORK])


@pytest.mark.server
def test_folder_names_select_and_errors(dovecot: DovecotServer, mstore: MessageStore) -> None:
    counts = populate(dovecot)
    report = run_sync(dovecot, mstore, folders=[DRAFTS, "Entw&APw-rfe", "Nope", "Archive", "inbox"])
    by_folder = {f.folder: f for f in report.folders}
    assert by_folder[DRAFTS].new == counts[DRAFTS]  # matched by its display name; the encoded one is the same
    assert by_folder["INBOX"].new == counts["INBOX"]  # INBOX is case-insensitive
    assert by_folder["Nope"].error == "no such folder on the server"
    assert "Noselect" in (by_folder["Archive"].error or "")
    assert [f for f in report.folders if f.folder == DRAFTS] == [by_folder[DRAFTS]]  # synced once
    assert report.folder_errors == [("Nope", "no such folder on the server"), ("Archive", by_folder["Archive"].error)]
    assert {p.folder for p in imap.positions(mstore)} == {DRAFTS, "INBOX"}
    assert imap.positions(mstore, account="someone@else") == []


@pytest.mark.server
def test_stop_ends_after_the_batch_in_hand_and_the_next_run_continues(
    dovecot: DovecotServer, mstore: MessageStore
) -> None:
    for raw in real_mail(12):
        dovecot.deliver_to("INBOX", raw)
    seen: list[int] = []
    report = run_sync(
        dovecot, mstore, batch_size=3, progress=lambda r, f: seen.append(f.done), stop=lambda: len(seen) >= 3
    )
    assert report.interrupted
    folder = report.folders[0]
    assert 3 <= folder.done < 12 and folder.done % 3 == 0  # whole batches only
    assert folder.position == sorted(served(dovecot, "INBOX"))[folder.done - 1]
    rest = run_sync(dovecot, mstore, batch_size=3)
    assert not rest.interrupted and folder.done + rest.folders[0].done == 12
    assert_exactly_once(dovecot, mstore, ["INBOX"])


# --- flags -----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def plain_imap_server() -> Iterator[DovecotServer]:
    server = _start(rawlog=True, capabilities=NO_CONDSTORE)
    yield server
    server.cleanup()


@pytest.fixture(params=["condstore", "no-condstore"])
def flag_server(request: pytest.FixtureRequest) -> DovecotServer:
    """The session's Dovecot (CONDSTORE), or one that does not offer it: empty, rawlog empty."""
    server: DovecotServer = request.getfixturevalue(
        "imap_server" if request.param == "condstore" else "plain_imap_server"
    )
    if server.proc is None:
        server.start()
    server.reset_mail()
    return server


def stored(store: MessageStore, message_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A message's ``tags`` and ``folders`` as the ``messages`` document holds them (sorted)."""
    row = store.db.messages.find_one({"mailboxId": store.mailbox_id, "messageId": message_id})
    assert row is not None, message_id
    return tuple(sorted(row.get("tags") or ())), tuple(sorted(row.get("folders") or ()))


def append(server: DovecotServer, folder: str, raw: bytes, flags: str = "") -> None:
    with admin(server) as conn:
        if folder != "INBOX":
            conn.create(folder)  # NO when it is there already
        assert conn.append(folder, flags, imaplib.Time2Internaldate(time.time()), raw)[0] == "OK"


def store_flags(server: DovecotServer, folder: str, changes: list[tuple[int, str, str]]) -> None:
    """Another client changes flags: ``(UID, "+FLAGS" | "-FLAGS", "(\\Seen ...)")`` each."""
    with admin(server) as conn:
        assert conn.select(folder)[0] == "OK"
        for uid, how, flags in changes:
            assert conn.uid("STORE", str(uid), how, flags)[0] == "OK"


@pytest.mark.server
def test_flags_and_folders_are_stored_with_each_message(flag_server: DovecotServer, mstore: MessageStore) -> None:
    mail = identified_mail(4)
    ids = [normalize(raw)["messageId"] for raw in mail]
    append(flag_server, "INBOX", mail[0], "(\\Seen \\Answered $Forwarded)")
    append(flag_server, "INBOX", mail[1], "(\\Flagged \\Draft $Junk Work)")
    append(flag_server, "INBOX", mail[2])
    append(flag_server, WORK, mail[3], "(\\Deleted $NotJunk)")
    append(flag_server, WORK, mail[0])  # in two folders: stored from INBOX, Work added to its folders
    report = run_sync(flag_server, mstore, folders=["INBOX", WORK])
    assert (report.new, report.present) == (4, 1)
    assert stored(mstore, ids[0]) == (("$answered", "$forwarded", "$seen"), ("INBOX", WORK))
    assert stored(mstore, ids[1]) == (("$draft", "$flagged", "$junk", "work"), ("INBOX",))
    assert stored(mstore, ids[2]) == ((), ("INBOX",))  # unread: no $seen (\\Recent is not kept)
    assert stored(mstore, ids[3]) == (("$notjunk", "deleted"), (WORK,))
    # each record keeps the flags of its folder: the INBOX copy's and the Work copy's differ
    records = {(r["folder"], r["messageId"]): r["flags"] for r in mstore.db[SOURCES].find()}
    assert records[("INBOX", ids[0])] == ["$answered", "$forwarded", "$seen"] and records[(WORK, ids[0])] == []
    # read-only as before: fetching set no \\Seen on the server
    assert all(b"\\Seen" not in flags for flags, _ in served(flag_server, WORK).values())


@pytest.mark.server
def test_flag_changes_on_the_server_reach_the_store(flag_server: DovecotServer, mstore: MessageStore) -> None:
    condstore = flag_server.capabilities is None
    mail = identified_mail(5)
    ids = [normalize(raw)["messageId"] for raw in mail]
    for raw in mail[:4]:
        append(flag_server, "INBOX", raw)
    append(flag_server, WORK, mail[0])
    run_sync(flag_server, mstore, folders=["INBOX", WORK])
    uids = sorted(served(flag_server, "INBOX"))
    mstore.tag([ids[2]], add=["todo", "$flagged"])  # tags set in the store alone
    position = mstore.db.imap_folders.find_one({"folder": "INBOX"})
    assert position is not None and ("modseq" in position) == condstore

    flag_server.clear_rawlog()
    store_flags(
        flag_server,
        "INBOX",
        [
            (uids[0], "+FLAGS", "(\\Seen \\Flagged)"),
            (uids[1], "+FLAGS", "($Junk Project-X)"),
            (uids[2], "+FLAGS", "(\\Seen)"),
        ],
    )
    append(flag_server, "INBOX", mail[4], "(\\Seen)")  # new mail arrives with its flags
    second = run_sync(flag_server, mstore, folders=["INBOX", WORK])
    assert second.new == 1 and [f.flags_changed for f in second.folders] == [3, 0]
    assert stored(mstore, ids[0])[0] == ("$flagged", "$seen")
    assert stored(mstore, ids[1])[0] == ("$junk", "project-x")
    assert stored(mstore, ids[2])[0] == ("$flagged", "$seen", "todo")  # the store's own tags stay
    assert stored(mstore, ids[3])[0] == ()
    assert stored(mstore, ids[4])[0] == ("$seen",)
    flag_fetches = [c for c in fetches(flag_server) if "(UID FLAGS)" in c]
    assert len(flag_fetches) == (1 if condstore else 2)  # with CONDSTORE, Work's HIGHESTMODSEQ did not move
    if condstore:  # only what changed since the saved HIGHESTMODSEQ was asked for
        assert all("CHANGEDSINCE" in c for c in flag_fetches)
    else:
        assert not any("CHANGEDSINCE" in c for c in flag_fetches)

    # removed on the server: removed in the store (unless set in the store alone)
    flag_server.clear_rawlog()
    store_flags(
        flag_server,
        "INBOX",
        [(uids[0], "-FLAGS", "(\\Seen)"), (uids[1], "-FLAGS", "($Junk)"), (uids[2], "-FLAGS", "(\\Seen)")],
    )
    store_flags(flag_server, WORK, [(min(served(flag_server, WORK)), "+FLAGS", "(\\Answered)")])
    third = run_sync(flag_server, mstore, folders=["INBOX", WORK])
    assert [f.flags_changed for f in third.folders] == [3, 1]
    assert stored(mstore, ids[0])[0] == ("$answered", "$flagged")  # \\Answered in Work: the same message
    assert stored(mstore, ids[1])[0] == ("project-x",)
    assert stored(mstore, ids[2])[0] == ("$flagged", "todo")

    # nothing changed: with CONDSTORE not one FETCH; without, one FLAGS listing per folder
    flag_server.clear_rawlog()
    fourth = run_sync(flag_server, mstore, folders=["INBOX", WORK])
    assert [f.flags_changed for f in fourth.folders] == [0, 0]
    assert fetches(flag_server) == (
        [] if condstore else [f"UID FETCH 1:{uids[-1] + 1} (UID FLAGS)", "UID FETCH 1:1 (UID FLAGS)"]
    )


@pytest.mark.server
def test_dovecots_own_maildir_ingested_reads_as_the_sync_does(dovecot: DovecotServer, mstore: MessageStore) -> None:
    """The same account read twice: by IMAP, and by ingesting the Maildir Dovecot keeps it in
    (file names with its flags, keyword letters in dovecot-keywords, Maildir++ folders): the
    same tags and folders, message for message (a folder without a dot in its name). Messages
    with a Message-ID: Dovecot keeps LF line ends on disk and serves CRLF, so a synthetic id
    (a hash of the bytes) differs between the two."""
    mail = identified_mail(6)
    append(dovecot, "INBOX", mail[0], "(\\Seen \\Answered $Forwarded)")
    append(dovecot, "INBOX", mail[1], "(\\Flagged $Junk Work)")
    append(dovecot, "INBOX", mail[2], "(\\Deleted \\Draft)")
    dovecot.deliver_to("INBOX", mail[3])  # delivered into new/, never seen
    append(dovecot, WORK, mail[4], "($NotJunk \\Seen)")
    append(dovecot, encode_folder(DRAFTS).decode(), mail[5], "(\\Draft)")
    store_flags(dovecot, "INBOX", [(min(served(dovecot, "INBOX")), "-FLAGS", "(\\Answered)")])
    run_sync(dovecot, mstore, folders="all")
    disk = MessageStore(mstore.db, mailbox_id="disk")
    for _ in disk.store_iter(m for m in read_messages([dovecot.maildir]) if isinstance(m, RawMessage)):
        pass
    assert len(disk.message_ids()) == 6

    def tags_and_folders(store: MessageStore) -> dict[str, Any]:
        return {m: stored(store, m) for m in store.message_ids()}

    synced = tags_and_folders(mstore)
    assert synced == tags_and_folders(disk)
    assert synced[normalize(mail[0])["messageId"]] == (("$forwarded", "$seen"), ("INBOX",))
    assert synced[normalize(mail[1])["messageId"]] == (("$flagged", "$junk", "work"), ("INBOX",))
    assert synced[normalize(mail[2])["messageId"]] == (("$draft", "deleted"), ("INBOX",))
    assert synced[normalize(mail[3])["messageId"]] == ((), ("INBOX",))
    assert synced[normalize(mail[5])["messageId"]] == (("$draft",), (DRAFTS,))


@pytest.mark.server
@pytest.mark.parametrize("fails", ["the tag change", "the records"])
def test_a_flag_update_cut_short_is_finished_by_the_next_run(
    dovecot: DovecotServer, mstore: MessageStore, client: Any, backend: str, fails: str
) -> None:
    """The database fails the flag update's first write (the messages' tags) or its second (the
    source records'): the run fails with the driver's error, nothing after the failure is
    written (no HIGHESTMODSEQ saved), and the next run ends as one clean run would."""
    if backend == "uri" and not os.environ.get("AECS_URI_HAS_FAILPOINTS"):
        pytest.skip("MONGODB_URI deployments need enableTestCommands (set AECS_URI_HAS_FAILPOINTS=1)")
    from pymongo.errors import PyMongoError

    mail = identified_mail(3)
    for raw in mail:
        append(dovecot, "INBOX", raw)
    run_sync(dovecot, mstore)
    ids = [normalize(raw)["messageId"] for raw in mail]
    modseq = mstore.db.imap_folders.find_one({"folder": "INBOX"})["modseq"]
    store_flags(
        dovecot, "INBOX", [(uid, "+FLAGS", "(\\Seen \\Flagged)") for uid in sorted(served(dovecot, "INBOX"))[:2]]
    )
    skip = 0 if fails == "the tag change" else 1  # updates: the messages' tags, then the records'
    client.admin.command(
        "configureFailPoint",
        "failCommand",
        mode={"skip": skip, "times": 1},
        data={"failCommands": ["update"], "errorCode": 2},
    )
    try:
        with pytest.raises(PyMongoError):
            run_sync(dovecot, mstore)
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")
    changed = [stored(mstore, m)[0] for m in ids]
    assert changed == ([(), (), ()] if skip == 0 else [("$flagged", "$seen"), ("$flagged", "$seen"), ()])
    assert {tuple(r["flags"]) for r in mstore.db[SOURCES].find()} == {()}  # the records: not yet
    assert mstore.db.imap_folders.find_one({"folder": "INBOX"})["modseq"] == modseq  # nor the position
    again = run_sync(dovecot, mstore)
    assert again.folders[0].flags_changed == 2  # the same change, measured against the same records
    assert [stored(mstore, m)[0] for m in ids] == [("$flagged", "$seen"), ("$flagged", "$seen"), ()]
    records = sorted(tuple(r["flags"]) for r in mstore.db[SOURCES].find())
    assert records == [(), ("$flagged", "$seen"), ("$flagged", "$seen")]
    dovecot.clear_rawlog()
    assert run_sync(dovecot, mstore).folders[0].flags_changed == 0 and fetches(dovecot) == []


@pytest.mark.server
def test_a_record_from_before_flags_were_kept_takes_the_server_flags(
    dovecot: DovecotServer, mstore: MessageStore
) -> None:
    """Mail synced by an older version: its records have no ``flags`` and its folder no
    ``modseq``; the next sync reads every flag once and adds the server's to the store."""
    mail = real_mail(2)
    append(dovecot, "INBOX", mail[0], "(\\Seen \\Flagged)")
    append(dovecot, "INBOX", mail[1])
    run_sync(dovecot, mstore)
    box = mstore.mailbox_id
    mstore.db[SOURCES].update_many({"mailboxId": box}, {"$unset": {"flags": ""}})
    mstore.db.imap_folders.update_many({"mailboxId": box}, {"$unset": {"modseq": ""}})
    mstore.db.messages.update_many({"mailboxId": box}, {"$unset": {"tags": "", "folders": ""}})
    dovecot.clear_rawlog()
    again = run_sync(dovecot, mstore)
    assert again.folders[0].flags_changed == 1
    assert [c for c in fetches(dovecot) if "FLAGS" in c] == ["UID FETCH 1:2 (UID FLAGS)"]
    assert stored(mstore, normalize(mail[0])["messageId"])[0] == ("$flagged", "$seen")
    assert all(r["flags"] is not None for r in mstore.db[SOURCES].find())
    dovecot.clear_rawlog()
    run_sync(dovecot, mstore)
    assert fetches(dovecot) == []  # the HIGHESTMODSEQ is saved now


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.one_server  # nothing is stored: the backend does not matter
def test_wrong_password_is_an_auth_error(dovecot: DovecotServer, mstore: MessageStore) -> None:
    dovecot.deliver_to("INBOX", real_mail(1)[0])
    with pytest.raises(MailboxAuthError, match="refused the login"):
        imap.sync(mstore, "127.0.0.1", dovecot.user, "wrong", port=dovecot.imaps_port, ssl_context=context(dovecot))
    with pytest.raises(MailboxAuthError):
        imap.sync(mstore, "127.0.0.1", "nobody-here", "x", port=dovecot.imaps_port, ssl_context=context(dovecot))
    assert mstore.message_ids() == [] and imap.positions(mstore) == []


@pytest.mark.server
def test_tls_is_verified_and_starttls_works(dovecot: DovecotServer, mstore: MessageStore) -> None:
    dovecot.deliver_to("INBOX", real_mail(1)[0])
    for security, port in (("ssl", dovecot.imaps_port), ("starttls", dovecot.imap_port)):
        # the default context verifies certificates: this self-signed one is refused
        with pytest.raises(MailboxConnectionError):
            imap.sync(mstore, "127.0.0.1", dovecot.user, dovecot.password, security=security, port=port, timeout=10)
    report = run_sync(dovecot, mstore, security="starttls", port=dovecot.imap_port)
    assert report.new == 1
    with pytest.raises(MailboxConnectionError, match="cannot connect"):
        run_sync(dovecot, mstore, port=free_port())


def test_a_server_without_starttls_is_refused_before_any_login(mstore: MessageStore) -> None:
    plain = _start(tls=False)
    try:
        with pytest.raises(MailboxConnectionError, match="does not offer STARTTLS"):
            imap.sync(mstore, "127.0.0.1", plain.user, plain.password, security="starttls", port=plain.imap_port)
        with pytest.raises(MailboxConnectionError):  # IMAPS against a port that speaks no TLS
            imap.sync(mstore, "127.0.0.1", plain.user, plain.password, port=plain.imap_port, timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and plain.log().count("imap-login") < 2:
            time.sleep(0.05)
        log = plain.log()
        assert "Login:" not in log and "auth failed" not in log  # the password never went out
        assert "no auth attempts" in log
    finally:
        plain.cleanup()


class Proxy:
    """A TCP proxy to ``target`` that, after ``cut_after`` bytes from the server, drops the
    connection (``mode="cut"``), stops forwarding and keeps it open (``"stall"``), or stops
    forwarding until ``resume()`` (``"pause"``; ``paused`` is set while it waits)."""

    def __init__(self, target: int, cut_after: int, *, mode: str = "cut") -> None:
        self.target = target
        self.cut_after = cut_after
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.forwarded = 0
        self.done = threading.Event()
        self.paused = threading.Event()
        self.resumed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def resume(self) -> None:
        self.resumed.set()

    def _serve(self) -> None:
        with self.listener:
            client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self.sockets = [client, upstream]

        def up() -> None:
            with contextlib.suppress(OSError):
                while data := client.recv(65536):
                    upstream.sendall(data)

        threading.Thread(target=up, daemon=True).start()
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                room = len(data) if self.paused.is_set() else max(self.cut_after - self.forwarded, 0)
                client.sendall(data[:room])
                self.forwarded += len(data)
                if self.forwarded < self.cut_after or self.paused.is_set():
                    continue
                if self.mode != "pause":
                    break
                self.paused.set()
                self.resumed.wait(60)
                client.sendall(data[room:])
        if self.mode == "stall":
            self.done.wait(30)
        self.close()

    def close(self) -> None:
        self.done.set()
        self.resumed.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def big_mail(count: int, kb: int = 40) -> list[bytes]:
    return [
        b"Message-ID: <big-%d@example.com>\r\nFrom: a@example.com\r\nSubject: big %d\r\n\r\n" % (n, n)
        + (b"%d" % n) * (kb * 1024 // len(b"%d" % n))
        + b"\r\n"
        for n in range(count)
    ]


@pytest.mark.parametrize("stall", [False, True], ids=["dropped", "timeout"])
@pytest.mark.server
def test_connection_lost_mid_sync_then_rerun_stores_every_message_once(
    dovecot: DovecotServer, mstore: MessageStore, stall: bool
) -> None:
    mail = big_mail(12)
    for raw in mail:
        dovecot.deliver_to("INBOX", raw)
    proxy = Proxy(dovecot.imaps_port, cut_after=250_000, mode="stall" if stall else "cut")  # in the 2nd batch
    try:
        with pytest.raises(MailboxConnectionError, match="timed out" if stall else None) as info:
            run_sync(dovecot, mstore, port=proxy.port, batch_size=4, timeout=2 if stall else 10)
    finally:
        proxy.close()
    partial = info.value.report
    assert isinstance(partial, imap.ImapSyncReport)
    folder = partial.folders[0]
    assert folder.new == 4  # the first batch, committed; nothing of the broken one
    assert len(mstore.message_ids()) == 4
    assert imap.positions(mstore)[0].uid == sorted(served(dovecot, "INBOX"))[3]
    assert folder.position == imap.positions(mstore)[0].uid

    rest = run_sync(dovecot, mstore, batch_size=4)
    assert (rest.new, rest.present) == (8, 0)
    assert assert_exactly_once(dovecot, mstore, ["INBOX"]) == 12
    assert all(mstore.get_raw(f"big-{n}@example.com") == raw for n, raw in enumerate(mail))


@pytest.mark.parametrize("how", ["SIGKILL to the session's imap process", "Dovecot shut down (BYE)"])
@pytest.mark.server
def test_server_gone_mid_sync_then_rerun_stores_every_message_once(
    dovecot: DovecotServer, mstore: MessageStore, how: str
) -> None:
    for raw in real_mail(24):
        dovecot.deliver_to("INBOX", raw)
    done: list[int] = []

    def kill_after_first_batch(report: Any, folder: Any) -> None:
        done.append(folder.done)
        if len(done) == 4:  # the first batch is committed: the server goes away now
            if how.startswith("SIGKILL"):
                pids = dovecot.session_pids("imap")
                assert pids
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            else:
                dovecot.stop()

    try:
        with pytest.raises(MailboxConnectionError) as info:
            run_sync(dovecot, mstore, batch_size=4, progress=kill_after_first_batch)
    finally:
        if dovecot.proc is None:
            dovecot.start()
    partial = info.value.report
    assert isinstance(partial, imap.ImapSyncReport)
    committed = partial.folders[0].done
    assert 4 <= committed < 24 and committed % 4 == 0
    assert len(mstore.message_ids()) == partial.new

    rest = run_sync(dovecot, mstore, batch_size=4)
    assert partial.folders[0].done + rest.folders[0].done == 24
    assert assert_exactly_once(dovecot, mstore, ["INBOX"]) == 24


@pytest.mark.server
def test_a_database_failure_propagates_and_nothing_is_recorded_ahead_of_it(
    dovecot: DovecotServer, mstore: MessageStore, client: Any, backend: str
) -> None:
    if backend == "uri" and not os.environ.get("AECS_URI_HAS_FAILPOINTS"):
        pytest.skip("MONGODB_URI deployments need enableTestCommands (set AECS_URI_HAS_FAILPOINTS=1)")
    from pymongo.errors import PyMongoError

    for raw in real_mail(12):
        dovecot.deliver_to("INBOX", raw)
    done: list[int] = []

    def database_down_after_first_batch(report: Any, folder: Any) -> None:
        done.append(folder.done)
        if len(done) == 4:  # before the batch's records and position are written
            client.admin.command(
                "configureFailPoint", "failCommand", mode="alwaysOn", data={"failCommands": ["insert"], "errorCode": 2}
            )

    try:
        with pytest.raises(PyMongoError):  # the store's error, as it is: not an IMAP failure
            run_sync(dovecot, mstore, batch_size=4, progress=database_down_after_first_batch)
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")
    assert len(mstore.message_ids()) == 4  # committed by the store
    assert mstore.db.imap_sources.count_documents({}) == 0  # but neither recorded ...
    assert imap.positions(mstore)[0].uid == 0  # ... nor passed: the next run fetches them again
    rest = run_sync(dovecot, mstore, batch_size=4)
    assert (rest.new, rest.present) == (8, 4)
    assert assert_exactly_once(dovecot, mstore, ["INBOX"]) == 12


@pytest.mark.one_server
def test_big_messages_are_fetched_alone_and_a_refused_one_is_reported(
    dovecot: DovecotServer, mstore: MessageStore
) -> None:
    attachment = os.urandom(15 * 1024 * 1024)
    import base64

    encoded = base64.encodebytes(attachment).replace(b"\n", b"\r\n")
    twenty = (
        b"Message-ID: <twenty@example.com>\r\nFrom: a@example.com\r\nSubject: 20 MB\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n'
        b"--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + encoded
        + b"--b--\r\n"
    )
    assert len(twenty) > 20_000_000
    # a References header so long that the messages document would pass 16 MiB: the store refuses it
    refs = b" ".join(b"<r%07d@example.com>" % i for i in range(560_000))
    refused = b"Message-ID: <refused@example.com>\r\nSubject: refs\r\nReferences: " + refs + b"\r\n\r\nhi\r\n"
    small = real_mail(2)
    for raw in (small[0], twenty, refused, small[1]):
        dovecot.deliver_to("INBOX", raw)
    dovecot.clear_rawlog()
    report = run_sync(dovecot, mstore, batch_bytes=8 * 1024 * 1024)
    bodies = [c for c in fetches(dovecot) if "BODY.PEEK[]" in c]
    folder = report.folders[0]
    assert folder.new == 3
    uids = sorted(served(dovecot, "INBOX"))
    assert [uid for uid, _ in folder.failed] == [uids[2]]
    assert "DocumentTooLargeError" in folder.failed[0][1]
    assert folder.position == uids[3]  # past the refused one: the same bytes would be refused again
    assert mstore.get_raw("twenty@example.com") == twenty
    assert mstore.get_attachment("twenty@example.com", 0) == attachment
    assert bodies == [
        f"UID FETCH {u} (UID INTERNALDATE FLAGS BODY.PEEK[])" for u in uids
    ]  # each alone: over 8 MB, or after one
    again = run_sync(dovecot, mstore)
    assert (again.new, again.present, again.failed) == (0, 0, [])


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.one_server
def test_cli_syncs_reports_and_fails_cleanly(
    dovecot: DovecotServer,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counts = populate(dovecot)
    monkeypatch.setenv(PASSWORD_VAR, dovecot.password)
    base = ["imap", "127.0.0.1", "--port", str(dovecot.imaps_port), "--user", dovecot.user]
    base += ["--password-env", PASSWORD_VAR, "--ca-file", str(dovecot.cert_path)]
    result = cli(*base, "--all-folders", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["new"] + data["present"] == sum(counts.values()) and data["failed"] == 0
    assert {f["folder"] for f in data["folders"]} == set(counts) and data["error"] is None

    store_flags(dovecot, encode_folder(DRAFTS).decode(), [(1, "+FLAGS", "(\\Seen)"), (2, "+FLAGS", "(\\Draft)")])
    result = cli(*base, "--folder", DRAFTS, "--folder", "Nope")
    assert result.code == 1  # a folder that is not there is a failure
    assert (
        f"{DRAFTS}: 0 new, 0 already stored, 0 failed, 2 with flags changed on the server;"
        f" position UID {counts[DRAFTS]}" in result.out
    )
    result = cli("--json", *base, "--folder", DRAFTS)
    assert result.json()["folders"][0]["flagsChanged"] == 0
    result = cli(*base, "--folder", DRAFTS, "--folder", "Nope")
    assert f"{DRAFTS}: 0 new, 0 already stored, 0 failed; position UID {counts[DRAFTS]}" in result.out
    assert "Nope: not synced: no such folder on the server" in result.out
    assert result.out.rstrip().endswith(f"0 new, 0 already stored, 0 failed in 1 folder of {dovecot.user}@127.0.0.1")

    monkeypatch.setenv(PASSWORD_VAR, "wrong")
    result = cli(*base)
    assert result.code == 1
    assert "error: IMAP: the IMAP server refused the login of 'alice'" in result.err
    assert "Traceback" not in result.err + result.out

    monkeypatch.delenv(PASSWORD_VAR)
    result = cli(*base)
    assert result.code == 2 and f"${PASSWORD_VAR}" in result.err  # no terminal to ask on
    result = cli("imap", "127.0.0.1", "--user", "u", "--password", "secret")
    assert result.code == 2 and "never taken from the command line" in result.err


@pytest.mark.one_server
def test_cli_ctrl_c_stops_after_the_batch_in_hand_and_resumes(
    dovecot: DovecotServer, servers: Any, backend: str, db: Any
) -> None:
    mail = big_mail(30, kb=20)
    for raw in mail:
        dovecot.deliver_to("INBOX", raw)
    env = {**os.environ, PASSWORD_VAR: dovecot.password, "PYTHONFAULTHANDLER": "1"}
    argv = [sys.executable, "-m", "aecs_mongo", "--uri", servers.uri(backend), "--db", db.name, "--json"]
    argv += ["imap", "127.0.0.1", "--user", dovecot.user, "--password-env", PASSWORD_VAR]
    argv += ["--ca-file", str(dovecot.cert_path), "--batch-size", "2"]
    # the server's bytes stop after about ten messages, so Ctrl-C comes while a batch is in hand
    proxy = Proxy(dovecot.imaps_port, cut_after=220_000, mode="pause")
    proc = subprocess.Popen(
        [*argv, "--port", str(proxy.port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # a shell gives its foreground job the default SIGINT, even when the suite itself runs in
        # the background (where it inherited SIGINT ignored, as the command then rightly keeps it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not (proxy.paused.is_set() and db.messages.count_documents({})) and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # the handler has run: the batch in hand is finished, no other is fetched
        proxy.resume()
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=20)
            raise AssertionError(err.decode()) from None
    finally:
        proxy.close()
    assert proc.returncode == 130, err.decode()
    assert b"stopping once the messages in hand are stored" in err
    report = json.loads(out)
    assert report["interrupted"] is True and 0 < report["new"] + report["present"] < 30
    rest = subprocess.run([*argv, "--port", str(dovecot.imaps_port)], env=env, capture_output=True, timeout=120)
    assert rest.returncode == 0, rest.stderr.decode()
    assert report["folders"][0]["position"] < json.loads(rest.stdout)["folders"][0]["position"]
    store = MessageStore(db, mailbox_id="default")
    assert assert_exactly_once(dovecot, store, ["INBOX"]) == 30
