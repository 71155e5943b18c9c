"""Export, expire and erase on real mail and a real server, both modes.

- Round trip: the corpus ingested, exported as mbox, Maildir and .eml files with every variant,
  and ingested into a new mailbox gives back every raw copy byte for byte (mbox: except a
  missing final line break, which mboxrd cannot carry) and the same thread summaries.
- Expire at the median date leaves exactly the younger messages, exact summaries, no blob or
  chunk of an expired message and no empty thread.
- Erase leaves nothing of the mailbox in any collection of the database while a second mailbox
  is unchanged, sends at most N/10 + a small constant statements (command monitoring), each on
  an index (explain), and finishes after being SIGKILLed mid-way, several times.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore, RawMessage, read_messages
from aecs_mongo.pure.explain import plan_stages
from aecs_mongo.pure.lifecycle import EXPORT_PAGE

from .helpers.budgets import budget
from .helpers.children import start_worker
from .helpers.cli import Cli
from .helpers.factories import recomputed_threads, stored_threads
from .helpers.lifecycle import snapshot, traces

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
#: the shared corpus beside the repository (``$AECS_CORPUS`` names it elsewhere, e.g. from a git worktree)
CORPUS = Path(os.environ.get("AECS_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus" / "eml")
SAMPLES = ROOT / "samples" / "mailbox"
ERASE_KILLS = budget("AECS_ERASE_KILLS", big=4, small=3)
#: statements an erase may send beyond N/10: a find per collection, the final check, slack
SMALL_CONSTANT = 30


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir() or not any(CORPUS.glob("*.eml")):
        pytest.skip(f"corpus not found at {CORPUS} (it lives in ../shared/corpus beside the repository)")
    return CORPUS


def corpus_mail(path: Path) -> list[bytes]:
    return [m.data for m in read_messages([path]) if isinstance(m, RawMessage)]


def fill(db: Any, mailbox: str, mail: list[bytes]) -> MessageStore:
    store = MessageStore(db, mailbox_id=mailbox)
    store.ensure_indexes()
    store.store_many(mail, on_error=lambda index, item, exc: None)
    for n, raw in enumerate(mail[:20]):
        store.add(f"uidl-{n}", raw)
    store.set_embedding(store.message_ids()[0], [0.5, 0.25])
    db.feed_checkpoints.insert_one({"_id": f"{mailbox}:reader", "mailboxId": mailbox, "position": {}})
    return store


def comparable_threads(db: Any, mailbox: str, leave_out: set[str]) -> dict[str, Any]:
    """Summaries by threadId, but those of threads with a message in ``leave_out``; where a
    member has no date its ``ts`` is the time it was processed, which differs between two
    ingests: there only the count is compared."""
    dated: dict[str, bool] = {}
    skipped: set[str] = set()
    for m in db.messages.find({"mailboxId": mailbox}, {"threadKey": 1, "timestamp": 1, "messageId": 1}):
        dated[m["threadKey"]] = dated.get(m["threadKey"], True) and m.get("timestamp") is not None
        if m["messageId"] in leave_out:
            skipped.add(m["threadKey"])
    out = {}
    for t in stored_threads(db, mailbox).values():
        if t["threadKey"] in skipped:
            continue
        if dated[t["threadKey"]]:
            # not the tags: an mbox's Status: lines are read as $seen, a .eml file's are not
            out[t["threadId"]] = {k: v for k, v in t.items() if k not in ("_id", "mailboxId", "tags")}
        else:
            out[t["threadId"]] = {"messageCount": t["messageCount"]}
    return out


@pytest.mark.ci_every_server
def test_round_trip_gives_back_every_raw_copy(backend: str, db: Any, cli: Cli, corpus: Path, tmp_path: Path) -> None:
    cli("--json", "--mailbox", "orig", "ingest", str(corpus)).json()
    orig = MessageStore(db, mailbox_id="orig")
    ids = orig.message_ids()
    originals = {mid: orig.get_raw_variants(mid) for mid in ids}
    for fmt in ("mbox", "maildir", "eml"):
        out, mailbox = tmp_path / ("out.mbox" if fmt == "mbox" else fmt), f"copy-{fmt}"
        run = cli("--json", "--mailbox", "orig", "export", "--format", fmt, "--variants", str(out))
        exported = run.json()
        assert run.code == 0, exported
        assert exported["messages"] == len(ids) > 300 and exported["withoutRaw"] == []
        run = cli("--json", "--mailbox", mailbox, "ingest", str(out))
        ingested = run.json()
        assert run.code == 0 and ingested["failed"] == 0, ingested
        expected = dict(originals)
        unterminated = 0
        if fmt == "mbox":  # mboxrd ends every message with a line break
            unterminated = sum(not c.endswith(b"\n") for copies in expected.values() for c in copies)
            expected = {mid: [c if c.endswith(b"\n") else c + b"\n" for c in cs] for mid, cs in expected.items()}
        copy = MessageStore(db, mailbox_id=mailbox)
        got = {mid: copy.get_raw_variants(mid) for mid in copy.message_ids()}
        moved, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        if fmt == "mbox":
            # a synthetic Message-ID hashes the bytes: an added line break gives the message another one
            assert all(mid.startswith("generated-") for mid in moved | extra)
            assert sorted(expected.pop(mid) for mid in moved) == sorted(got.pop(mid) for mid in extra)
        assert got == expected, fmt
        variants = sum(len(copies) - 1 for copies in expected.values())
        assert variants > 0 and exported["copies"] == len(ids) + variants
        assert comparable_threads(db, mailbox, extra) == comparable_threads(db, "orig", moved)
        print(
            f"\n{backend} {fmt}: {len(ids)} messages, {variants} variants; {unterminated} copies without a final"
            f" newline, {len(moved)} of them under a synthetic Message-ID that changed with it"
        )


def test_expire_at_the_median_date(servers: Any, backend: str, db: Any, corpus: Path) -> None:
    store = fill(db, "alice", corpus_mail(corpus))
    other = fill(db, "bob", corpus_mail(SAMPLES))
    before_other = snapshot(db, "bob")
    rows = list(db.messages.find({"mailboxId": "alice"}, {"ts": 1, "messageId": 1, "blobPrefix": 1}))
    median = sorted(r["ts"] for r in rows)[len(rows) // 2]
    younger = {r["messageId"] for r in rows if r["ts"] >= median}
    expired = [r for r in rows if r["ts"] < median]
    listener = Statements()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[listener])
    try:
        report = MessageStore(client[db.name], mailbox_id="alice").expire(dt.datetime.fromtimestamp(median, dt.UTC))
    finally:
        client.close()
    assert_on_indexes(db, listener.commands)
    assert report.messages == len(expired) > 100
    assert set(store.message_ids()) == younger
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")  # exact, and no empty thread
    assert db.bodies.count_documents({"mailboxId": "alice"}) == len(younger)
    for r in expired:
        upper = r["blobPrefix"][:-1] + "0"
        assert db["aecs.files"].count_documents({"filename": {"$gte": r["blobPrefix"], "$lt": upper}}) == 0
        assert db["aecs.chunks"].count_documents({"files_id": {"$gte": r["blobPrefix"], "$lt": upper}}) == 0
    for r in db.messages.find({"mailboxId": "alice"}).limit(50):
        assert store.get_raw(r["messageId"]) is not None  # the younger mail is whole
    assert snapshot(db, "bob") == before_other and other.message_ids()


class Statements(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        # the driver's own handshake and SCRAM login (redacted, empty) are not the erase's statements
        if event.command_name not in ("saslStart", "saslContinue", "authenticate", "hello", "isMaster"):
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


DRIVER_FIELDS = {"$db", "lsid", "$clusterTime", "$readPreference", "txnNumber", "readConcern", "batchSize"}


def as_finds(command: dict[str, Any]) -> list[dict[str, Any]]:
    """Each statement's filter as a ``find`` (the test server explains updates and deletes as
    collection scans whatever their filter; see test_server_behaviour)."""
    if "delete" in command:
        # with its hint, where it names one: the server plans what it is sent
        return [
            {"find": command["delete"], "filter": s["q"], **({"hint": s["hint"]} if "hint" in s else {})}
            for s in command["deletes"]
        ]
    if "find" in command:
        return [{k: v for k, v in command.items() if k not in DRIVER_FIELDS}]
    return []


def assert_on_indexes(db: Any, commands: list[dict[str, Any]]) -> None:
    """Every find and delete filter of ``commands`` plans on an index (explained as a find)."""
    checked = 0
    existing = set(db.list_collection_names())
    for statement in [s for c in commands for s in as_finds(c)]:
        if statement["find"] not in existing:
            # a collection nothing wrote yet (imap_* without IMAP imports) reads nothing; where it
            # exists, its statement must be on an index leading with mailboxId like every other
            continue
        explained = db.command({"explain": statement, "verbosity": "queryPlanner"})
        stages = {s["stage"] for s in plan_stages(explained)}
        assert "COLLSCAN" not in stages, (statement, stages)
        checked += 1
    assert checked >= 8


def test_erase_everything_in_few_indexed_statements(servers: Any, backend: str, db: Any, corpus: Path) -> None:
    fill(db, "erased", corpus_mail(corpus))
    fill(db, "kept", corpus_mail(SAMPLES) + corpus_mail(corpus)[:40])
    kept = snapshot(db, "kept")
    messages = db.messages.count_documents({"mailboxId": "erased"})
    documents = sum(map(len, traces(db, "erased").values()))
    listener = Statements()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[listener])
    try:
        report = MessageStore(client[db.name], mailbox_id="erased").erase_mailbox()
    finally:
        client.close()
    assert traces(db, "erased") == {}
    assert snapshot(db, "kept") == kept
    assert report.messages == messages and report.total == documents
    sent = [c for c in listener.commands if next(iter(c)) not in ("endSessions",)]
    assert len(sent) <= messages / 10 + SMALL_CONSTANT, (len(sent), messages)
    # the barrier's capability, asked once per store (SecantusDB's barrier changes a counter)
    assert len([c for c in sent if "buildInfo" in c]) <= 1  # none where a client to this server asked already
    sent = [c for c in sent if "buildInfo" not in c]
    # standalone: the erase's begin and end of the mailbox's change mark (pure/change_marks.py)
    marks = [c for c in sent if c.get("findAndModify") == "change_marks"]
    assert len(marks) == (2 if backend == "standalone" else 0), marks
    sent = [c for c in sent if c not in marks]
    kinds = {next(iter(c)) for c in sent}
    assert {"find", "delete"} <= kinds <= {"find", "getMore", "delete", "update"}, kinds
    # the one write that is not a delete: the journaled barrier that makes the sweeps durable
    (barrier,) = [c for c in sent if "update" in c]
    assert barrier is sent[-1]
    if "secantusVersion" in db.client.admin.command("buildInfo"):  # a counter only where the server needs it
        assert barrier["update"] == "journal_barrier" and barrier["updates"][0]["q"] == {"_id": "journal"}
        assert barrier["updates"][0]["u"] == {"$inc": {"writes": 1}}
    else:  # a journaled write that matches nothing
        assert barrier["update"] == "messages" and barrier["updates"][0]["q"] == {"_id": ":journal-barrier"}
    assert barrier["writeConcern"]["j"] is True
    assert_on_indexes(db, sent)
    print(f"\n{backend}: erased {messages} messages, {documents} documents in {len(sent)} statements")


def test_export_reads_each_group_of_blobs_in_one_indexed_statement(
    servers: Any, backend: str, db: Any, corpus: Path
) -> None:
    """The corpus exported with every variant: byte for byte what ``get_raw_variants`` gives, in
    (ts, messageKey) order; one ``messages`` find (and a getMore a page), one ``chunks`` find a
    group of at most the dialect's ``export_blobs`` blobs asking for all its chunks at once (no getMore), a
    ``files`` find only for the variants' lengths; every statement on an index."""
    store = fill(db, "alice", corpus_mail(corpus))
    fill(db, "bob", corpus_mail(SAMPLES))
    listener = Statements()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[listener])
    try:
        exporter = MessageStore(client[db.name], mailbox_id="alice")
        copies = list(exporter.export_raw(variants=True))
    finally:
        client.close()
    blobs_a_read = exporter.capabilities.dialect.export_blobs  # as the server's dialect says
    order = db.messages.find({"mailboxId": "alice"}, {"messageId": 1}).sort([("ts", 1), ("messageKey", 1)])
    expected = [
        (m["messageId"], n, data) for m in order for n, data in enumerate(store.get_raw_variants(m["messageId"]))
    ]
    assert [(c.message_id, c.copy, c.data) for c in copies] == expected
    messages, variants = sum(c.copy == 0 for c in copies), sum(c.copy > 0 for c in copies)
    assert messages > 300 and variants > 0
    sent = [c for c in listener.commands if next(iter(c)) != "endSessions"]
    count = Counter((next(iter(c)), c.get("find") or c.get("collection")) for c in sent)
    pages = math.ceil(messages / EXPORT_PAGE)
    # the new store's one settings read (its blob location), cached for every later use, and
    # its one question of which server it speaks to
    assert count.pop(("find", "aecs_settings")) == 1
    assert count.pop(("buildInfo", None), 0) <= 1  # none where a client to this server asked already
    assert count.pop(("find", "messages")) == 1 and count.pop(("getMore", "messages"), 0) <= pages
    # the parts of a group's packs (raw messages whose large attachments are kept once) are
    # read with one more chunks and files statement for the group
    groups = math.ceil(len(copies) / blobs_a_read) + pages
    assert count.pop(("find", "aecs.chunks")) <= 2 * groups
    files = [c for c in sent if c.get("find") == "aecs.files"]
    for_parts = [c for c in files if all("/parts/" in key for key in c["filter"]["_id"]["$in"])]
    assert len(for_parts) <= groups
    assert (
        count.pop(("find", "aecs.files")) == len(files) <= pages + math.ceil(variants / blobs_a_read) + len(for_parts)
    )
    # lengths read from files documents: the variants' and the packs' (a message's sizeBytes is
    # its whole raw length)
    lengths = [key for c in files if c not in for_parts for key in c["filter"]["_id"]["$in"]]
    assert all("/variants/" in key or key.endswith("/raw.pack") for key in lengths)
    assert count == {}, count  # no getMore on chunks or files
    assert_on_indexes(db, sent)
    print(f"\n{backend}: {len(copies)} copies exported in {len(sent)} statements")


def test_erase_killed_midway_then_rerun_completes(servers: Any, backend: str, db: Any, corpus: Path) -> None:
    uri = servers.uri(backend)
    fill(db, "victim", corpus_mail(corpus))
    fill(db, "kept", corpus_mail(SAMPLES))
    kept = snapshot(db, "kept")
    rng = random.Random(f"erase-{backend}")
    remaining = sum(map(len, traces(db, "victim").values()))
    kills = 0
    for _ in range(ERASE_KILLS):
        child = start_worker("lifecycle_workers", uri, db.name, "victim", "25")
        assert child.stdout is not None
        wanted = rng.randint(1, 6)
        seen = 0
        while seen < wanted and child.stdout.readline().strip() == "delete":
            seen += 1
        child.send_signal(signal.SIGKILL)
        child.communicate()
        left = sum(map(len, traces(db, "victim").values()))
        assert 0 < left < remaining, (left, remaining)  # killed mid-way: some gone, some not
        remaining = left
        kills += 1
    assert snapshot(db, "kept") == kept
    report = MessageStore(db, mailbox_id="victim").erase_mailbox()
    assert report.total == remaining and traces(db, "victim") == {}
    assert snapshot(db, "kept") == kept
    assert MessageStore(db, mailbox_id="victim").erase_mailbox().total == 0
    print(f"\n{backend}: {kills} erases killed mid-way, the re-run removed the last {remaining} documents")


@pytest.mark.one_server
def test_cli_export_expire_erase(db: Any, cli: Cli, tmp_path: Path) -> None:
    count = len(list(SAMPLES.glob("*.eml")))
    cli("--json", "ingest", str(SAMPLES)).json()
    run = cli("export", "--format", "eml", str(tmp_path / "all"))
    assert run.code == 0 and run.out.startswith(f"exported {count} messages ({count} copies, ")
    assert len(list((tmp_path / "all").glob("*.eml"))) == count
    run = cli(
        "--json",
        "export",
        "--format",
        "mbox",
        "--since",
        "2026-11-03",
        "--until",
        "2026-11-05",
        str(tmp_path / "w.mbox"),
    )
    window = run.json()
    assert run.code == 0 and window["messages"] == 2 and window["copies"] == 2 and (tmp_path / "w.mbox").is_file()
    run = cli("export", "--format", "mbox", str(tmp_path / "w.mbox"))
    assert (run.code, run.out) == (1, "")  # never overwrites
    run = cli("--json", "expire", "--before", "2026-11-04", "--dry-run")
    dry = run.json()
    assert run.code == 0 and dry["dryRun"] and dry["messages"] == 4
    assert len(cli("--json", "inbox", "--limit", "100").lines()) == count
    run = cli("expire", "--before", "2026-11-04T00:00:00+00:00")
    assert run.code == 0 and run.out.startswith("removed 4 messages older than 2026-11-04T00:00:00Z")
    run = cli("--json", "expire", "--older-than", "36500d")
    old = run.json()
    assert run.code == 0 and old["messages"] == 0 and not old["dryRun"]
    assert cli("expire", "--older-than", "soon").code == 2
    assert cli("erase").code == 2  # --yes is required
    run = cli("--json", "erase", "--yes")
    erased = run.json()
    assert run.code == 0 and erased["messages"] == count - 4 and erased["remaining"] == 0
    assert traces(db, "default") == {}
    run = cli("erase", "--yes")
    assert run.code == 0 and run.out.startswith("erased mailbox 'default': 0 messages, 0 blobs")
