"""What every benchmark section shares: the run's context, timing (medians, paired medians),
tables, synthetic and real mail, the raw-driver baselines and a statement counter.

Imports nothing of ``scripts/bench.py`` nor of another section: sections import this module only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient, UpdateOne, monitoring
from pymongo.database import Database

from aecs_mongo import MessageStore
from aecs_mongo.errors import AecsMongoError
from aecs_mongo.pure.blobs import chunk_documents, file_document
from aecs_mongo.pure.documents import (
    MessageDocuments,
    build_documents,
    thread_summary_from_messages,
    thread_update,
)
from aecs_mongo.synchronous import writing

Doc = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
BASE_TS = 1_780_000_000
INBOX = "aecs_messages_inbox"


@dataclasses.dataclass
class Context:
    """What every section gets: the server's URI, one client on it, and the parsed arguments
    (the entry point's and every section's own)."""

    uri: str
    client: MongoClient[Doc]
    args: argparse.Namespace

    @functools.cached_property
    def transactions(self) -> bool:
        """Whether the server is a replica set (transactions: the store's default there)."""
        return bool(self.client.admin.command("hello").get("setName"))


def corpus_source() -> Path:
    """The real-mail corpus (``--corpus``, ../shared/corpus/eml by default), or the sample
    mailbox shipped in the repository where it is absent."""
    return gen_mbox.CORPUS if gen_mbox.CORPUS.is_dir() else gen_mbox.SAMPLES


def table_of(title: str, rows: list[Doc], columns: list[str]) -> None:
    """Print a section's table under its title."""
    print(f"\n== {title}")
    print(table(rows, columns))


def mail(n: int, mailbox_threads: int = 400, base_ts: int = BASE_TS) -> Doc:
    """A realistic NormalizedEmail: threads of ~25, 6 senders, replies with References; the
    ``n``-th is dated ``base_ts + 37 n``."""
    t = n % mailbox_threads
    root = f"root-{t}@bench.example"
    parent = f"m{n - mailbox_threads}@bench.example" if n >= mailbox_threads else None
    ts = base_ts + n * 37
    body = f"Message {n} of thread {t}. " + "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 12
    return {
        "messageId": f"m{n}@bench.example",
        "threadId": root,
        "metadata": {
            "from": {"name": f"Sender {n % 6}", "email": f"sender{n % 6}@bench.example"},
            "to": [
                {"name": None, "email": "owner@bench.example"},
                {"name": "Peer", "email": f"peer{n % 11}@x.example"},
            ],
            "cc": [],
            "bcc": [],
            "subject": ("Re: " if parent else "") + f"Topic {t}",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)),
            "timestamp": ts,
        },
        "content": {"rawFull": None, "raw": body, "html": None, "text": body, "clean": body, "forAI": body[:400]},
        "thread": {"position": None, "inReplyTo": parent, "references": [root] + ([parent] if parent else [])},
        "attachments": [],
        "processing": {"processedAt": "2026-11-30T00:00:00Z", "specVersion": "1.1"},
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    return statistics.median(timed(fn) for _ in range(rounds))


def paired_medians(ours: Callable[[], object], base: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Medians of ``ours`` and ``base`` timed in turn, round after round (their order alternating):
    a shared machine's slow spells fall on both, so their ratio is steadier than that of two
    medians taken one after the other."""
    ours(), base()  # warm
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            times[i].append(timed((ours, base)[i]))
    return statistics.median(times[0]), statistics.median(times[1])


def real_mail(count: int, offset: int = 0) -> list[bytes]:
    """``count`` real messages (raw bytes): the corpus (../shared/corpus/eml; the sample mailbox
    where it is absent) repeated with fresh Message-IDs, plus a synthetic message with a 64 KiB
    attachment per round. Raw bytes, HTML and attachments: every tier gets written."""
    source = corpus_source()
    return list(itertools.islice(gen_mbox.messages(64, source=source), offset, offset + count))


def storable(raws: list[bytes]) -> tuple[list[bytes], list[MessageDocuments]]:
    """The messages the store accepts, first copy of each Message-ID only (the corpus holds the
    same message more than once), with the documents it writes for them."""
    builder = MessageStore(MongoClient(connect=False)["unused"], mailbox_id="bench")
    kept: dict[str, tuple[bytes, MessageDocuments]] = {}
    for raw in raws:
        try:
            docs = writing.build(builder._context, raw, None, None)
        except AecsMongoError:
            continue
        kept.setdefault(docs.message["_id"], (raw, docs))
    return [raw for raw, _ in kept.values()], [docs for _, docs in kept.values()]


def baseline_blobs(db: Database[Doc], batch: list[MessageDocuments], bucket: str = "aecs") -> None:
    chunks = [c for d in batch for b in d.blobs for c in chunk_documents(b.key, b.data)]
    if chunks:
        db[f"{bucket}.chunks"].insert_many(chunks, ordered=False)
    files = [file_document(b.key, len(b.data), b.content_type, {}) for d in batch for b in d.blobs]
    if files:
        db[f"{bucket}.files"].insert_many(files, ordered=False)


def baseline_batch(
    db: Database[Doc], batch: list[MessageDocuments], bucket: str = "aecs", transactions: bool = False
) -> None:
    """The raw driver writing what store_many writes: chunks, files, bodies, messages, threads;
    with ``transactions``, the last three in one transaction per batch, as the store does."""
    baseline_blobs(db, batch, bucket)
    with db.client.start_session() as session, contextlib.ExitStack() as stack:
        if transactions:
            stack.enter_context(session.start_transaction())
        txn = session if transactions else None
        db.bodies.insert_many([d.body for d in batch], ordered=False, session=txn)
        db.messages.insert_many([d.message for d in batch], ordered=False, session=txn)
        folds = [UpdateOne(*thread_update(d.message), upsert=True) for d in batch]
        db.threads.bulk_write(folds, ordered=True, session=txn)


def baseline_one(db: Database[Doc], d: MessageDocuments) -> None:
    baseline_blobs(db, [d])
    db.bodies.insert_one(d.body)
    db.messages.insert_one(d.message)
    db.threads.update_one(*thread_update(d.message), upsert=True)


def fresh_slice(stream: Iterator[bytes], seen: set[str], size: int) -> tuple[list[bytes], list[MessageDocuments]]:
    """The next ``size`` messages of ``stream`` whose Message-ID is not in ``seen``, with their
    documents. Both sides of the scaling run get these: the corpus holds some messages twice,
    which ours would keep as variants and the raw-driver baseline cannot."""
    raws: list[bytes] = []
    prebuilt: list[MessageDocuments] = []
    while len(raws) < size and (generated := list(itertools.islice(stream, size - len(raws)))):
        for raw, docs in zip(*storable(generated), strict=True):
            if docs.message["_id"] not in seen:
                seen.add(docs.message["_id"])
                raws.append(raw)
                prebuilt.append(docs)
    return raws, prebuilt


def populate(db: Database[Doc], mailbox: str, count: int, base_ts: int = BASE_TS) -> None:
    """Fill a mailbox fast with the exact documents store() writes, summaries computed in one pass."""
    batch: list[MessageDocuments] = []
    threads: dict[str, list[Doc]] = {}
    for n in range(count):
        docs = build_documents(mail(n, base_ts=base_ts), mailbox_id=mailbox)
        batch.append(docs)
        threads.setdefault(docs.thread_key, []).append(docs.message)
        if len(batch) == 1000 or n == count - 1:
            db.bodies.insert_many([d.body for d in batch], ordered=False)
            db.messages.insert_many([d.message for d in batch], ordered=False)
            batch = []
    db.threads.insert_many([summary for m in threads.values() if (summary := thread_summary_from_messages(m))])


class StatementCounter(monitoring.CommandListener):
    """Counts the statements a client sends (every command: finds, getMores, deletes, updates)."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def peak_rss_mb(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Peak RSS (MB) and exit code of ``argv``, measured in a wrapper process of its own."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "code = subprocess.run(sys.argv[1:]).returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *argv], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[-2]) / 1024, int(out[-1])


def table(rows: list[Doc], columns: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    widths = [max(len(c), *(len(fmt(r.get(c))) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)


#: one message whose word nothing else in the bench mail holds: the rare-word searches of the
#: search, scan and warm sections look for it
RARE = b"""From: Archivist <archivist@old.example>
To: owner@example.com
Subject: The oldest note
Date: Fri, 02 Jan 1998 09:00:00 +0000
Message-ID: <oldest-note@old.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8

Only this message mentions the xylophonist from the orchestra.
"""


# --- the command-line tools: a Maildir of real mail, each tool run as a user runs it ----------------


def disk_usage(path: Path) -> int:
    """Bytes on disk under ``path`` (allocated blocks, as ``du`` counts them)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def write_maildir(path: Path, count: int) -> int:
    """A Maildir of ``count`` real messages in ``cur/``; returns its size in bytes."""
    source = corpus_source()
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    size = 0
    for i, raw in enumerate(itertools.islice(gen_mbox.messages(64, source=source), count)):
        (path / "cur" / f"{1_700_000_000 + i}.{i}.bench:2,S").write_bytes(raw)
        size += len(raw)
    return size


def read_all(path: Path) -> None:
    """Read every file once: each tool then finds the Maildir in the page cache."""
    for file in sorted((path / "cur").iterdir()):
        file.read_bytes()


def set_aside(path: Path, work: Path) -> None:
    """Move a tool's finished data out of the way; it is removed with the whole comparison at its
    end, not between rounds. On an ext4 without a journal (this project's test machines), the
    allocator skips every inode freed in the last minute (five while its block is unwritten)
    and pays a look-up for each: a file store's ingest right after the removal of the last
    round's 13,000 files spent 4 s more of system time on 3,000 messages (perf: ``ext4_create``
    in ``recently_deleted``), which only the tool that creates a file per blob pays."""
    trash = work / "set-aside"
    trash.mkdir(exist_ok=True)
    if path.exists():
        path.rename(trash / f"{path.name}-{len(list(trash.iterdir()))}")


def tool_env() -> dict[str, str]:
    """This process's environment for a command-line tool: no server URI, no kept server, bytecode written."""
    leave_out = ("MONGODB_URI", "AECS_KEEP_SERVER", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in leave_out}


def timed_command(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one command (its output dropped; a failure raises)."""
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def run_notmuch(maildir: Path, work: Path) -> tuple[float, int]:
    """(seconds, bytes of its database) of ``notmuch new`` of ``maildir`` into a fresh database
    under ``work`` (set aside once measured)."""
    database = work / "notmuch-db"
    config = work / "notmuch-config"
    config.write_text(
        f"[database]\npath={database}\nmail_root={maildir}\n[user]\nname=Bench\nprimary_email=bench@example.com\n"
        "[new]\ntags=unread;inbox;\n[maildir]\nsynchronize_flags=false\n"
    )
    env = {**tool_env(), "NOTMUCH_CONFIG": str(config)}
    database.mkdir()
    try:
        return timed_command(["notmuch", "new", "--quiet"], env, work), disk_usage(database)
    finally:
        set_aside(database, work)


def compile_bytecode() -> None:
    """Compile the package and what its command and server import, as ``pip install`` does (a
    venv made with ``--no-compile`` under ``PYTHONDONTWRITEBYTECODE=1``, as scripts/test.sh
    makes, would otherwise time the compilation of every module in every command)."""
    import compileall
    import importlib.util

    for name in ("aecs_mongo", "pymongo", "bson", "gridfs", "secantus"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1, workers=0)
