"""The ``search`` section (not in the default list): the local index beside notmuch, on real mail.

For each size (default 1k, 10k, 100k messages: the corpus repeated with fresh Message-IDs, as
``gen_mbox`` makes it, plus one old message holding the only "xylophonist"), one mailbox is
stored by a store with the local index, and the same messages are written as a Maildir that
``notmuch new`` indexes (notmuch from Debian: ``apt-get install notmuch``; the column is left
out where it is missing). Then, medians of ``--search-rounds``:

- ``ours``: ``store.search(q, limit=20)`` on a store made for the round (catch-up from the change
  stream, the FTS5 query, the hit check against ``messages``, snippets), in this process;
- ``cli``: ``aecs-mongo search q`` as a user runs it (a new Python each time), beside the floor
  of the same command's start (``aecs-mongo --help``), so the query's share shows;
- ``notmuch``: ``notmuch search --output=messages --limit=20 q`` (or ``notmuch count``);
- the scan (``search_engine="scan"``) at the sizes up to ``--scan-max`` (one round).

And the ingest rate with and without the index (``store_many`` of ``--search-ingest`` messages,
alternating fresh databases, medians), and the index's size per MB of raw mail.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import RARE, Context, Doc, corpus_source, table_of

#: (label, our query, notmuch's query, count?)
QUERIES = [
    ("rare word", "xylophonist", "xylophonist", False),
    ("phrase", '"thank you"', '"thank you"', False),
    ("from:", "from:finnie", "from:finnie", False),
    ("date:", "date:2010..2012", "date:2010..2012", False),
    ("count common word", "the", "the", True),
]


def mail_of(size: int) -> list[bytes]:
    source = corpus_source()
    return [RARE, *itertools.islice(gen_mbox.messages(64, source=source), size - 1)]


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def notmuch_available() -> bool:
    if shutil.which("notmuch"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "notmuch"], capture_output=True, check=False)
    return shutil.which("notmuch") is not None


def write_maildir(path: Path, raws: list[bytes]) -> None:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    for n, raw in enumerate(raws):
        (path / "cur" / f"{n:07d}.bench:2,S").write_bytes(raw)


def notmuch_env(config: Path, maildir: Path) -> dict[str, str]:
    config.write_text(
        f"[database]\npath={maildir}\n[user]\nname=Bench\nprimary_email=owner@example.com\n"
        "[new]\ntags=\n[search]\nexclude_tags=\n[maildir]\nsynchronize_flags=false\n"
    )
    return {**os.environ, "NOTMUCH_CONFIG": str(config)}


def run_notmuch(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(["notmuch", *argv], env=env, capture_output=True, check=True, text=True).stdout


def cli_argv(uri: str, db: str, index: Path, *argv: str) -> list[str]:
    return [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--db", db, "--mailbox", "bench",
            "--search-index", str(index), *argv]  # fmt: skip


def bench_size(client: MongoClient[Doc], uri: str, size: int, rounds: int, scan_max: int, work: Path) -> list[Doc]:
    raws = mail_of(size)
    raw_mb = sum(map(len, raws)) / 1e6
    db_name = f"aecs_bench_search_{size}"
    client.drop_database(db_name)
    index = work / f"index-{size}.sqlite"
    # built without waiting for the journal (durable=False, as ingest --fast): the ingest rate is
    # bench_ingest's; here only the mailbox matters
    store = MessageStore(client[db_name], mailbox_id="bench", search_index=index, durable=False)
    store.ensure_indexes()
    started = time.perf_counter()
    stored = sum(r.inserted for r in store.store_many(raws, batch_size=100))
    ingest_s = time.perf_counter() - started
    store.count("the")  # caught up
    index_mb = store._context.search_index.file_bytes() / 1e6 if store._context.search_index else 0.0
    print(
        f"  search: {size:,} messages ({stored:,} stored, {raw_mb:.0f} MB) in {ingest_s:.0f} s; index {index_mb:.1f} MB"
    )
    notmuch = notmuch_available()
    env: dict[str, str] = {}
    notmuch_new_s = None
    if notmuch:
        maildir = work / f"maildir-{size}"
        write_maildir(maildir, raws)
        env = notmuch_env(work / f"notmuch-{size}.config", maildir)
        started = time.perf_counter()
        run_notmuch(env, "new", "--quiet")
        notmuch_new_s = time.perf_counter() - started
    floor_ms = median_ms(lambda: subprocess.run(cli_argv(uri, db_name, index, "--help"), capture_output=True), rounds)
    rows = []
    for label, ours_q, theirs_q, counting in QUERIES:

        def ours(q: str = ours_q, c: bool = counting) -> object:
            fresh = MessageStore(client[db_name], mailbox_id="bench", search_index=index)
            return fresh.count(q) if c else fresh.search(q, limit=20)

        command = cli_argv(
            uri, db_name, index, *(["count", ours_q] if counting else ["search", ours_q, "--limit", "20"])
        )

        def cli(a: list[str] = command) -> object:
            return subprocess.run(a, capture_output=True, check=True)

        row: Doc = {
            "size": size,
            "query": label,
            "text": ours_q,
            "ours_ms": median_ms(ours, rounds),
            "cli_ms": median_ms(cli, rounds),
            "cli_start_ms": floor_ms,
        }
        found = ours()
        row["hits"] = found if isinstance(found, int) else len(found)  # type: ignore[arg-type]
        if notmuch:
            args = ["count", theirs_q] if counting else ["search", "--output=messages", "--limit=20", theirs_q]
            row["notmuch_ms"] = median_ms(lambda a=args: run_notmuch(env, *a), rounds)
            out = run_notmuch(env, *args)
            row["notmuch_hits"] = int(out.strip()) if counting else len(out.split())
        if size <= scan_max:
            scan = MessageStore(client[db_name], mailbox_id="bench", search_engine="scan")
            started = time.perf_counter()
            scanned = scan.count(ours_q) if counting else scan.search(ours_q, limit=20)
            row["scan_ms"] = (time.perf_counter() - started) * 1000
            row["scan_hits"] = scanned if isinstance(scanned, int) else len(scanned)
        row.update(ingest_s=ingest_s, raw_MB=raw_mb, index_MB=index_mb, notmuch_new_s=notmuch_new_s)
        rows.append(row)
        print("  search", row, flush=True)
    client.drop_database(db_name)
    return rows


def bench_ingest(client: MongoClient[Doc], count: int, rounds: int, work: Path) -> Doc:
    """``store_many`` with and without the index, alternating, fresh databases: msgs/s medians."""
    raws = mail_of(count)
    rates: dict[bool, list[float]] = {True: [], False: []}
    for n in range(rounds):
        for indexed in (False, True) if n % 2 == 0 else (True, False):
            name = f"aecs_bench_search_ingest_{int(indexed)}"
            client.drop_database(name)
            path = work / f"ingest-{n}-{int(indexed)}.sqlite"
            store = MessageStore(client[name], mailbox_id="bench", search_index=path if indexed else None)
            store.ensure_indexes()
            if indexed:
                store.count("warm")  # the index exists (an empty mailbox) before the timing
            started = time.perf_counter()
            store.store_many(raws, batch_size=100)
            rates[indexed].append(len(raws) / (time.perf_counter() - started))
            client.drop_database(name)
    with_index, without = statistics.median(rates[True]), statistics.median(rates[False])
    return {"messages": count, "rounds": rounds, "without_msgs_per_s": without, "with_msgs_per_s": with_index,
            "ratio": with_index / without}  # fmt: skip


def measure(client: MongoClient[Doc], uri: str, sizes: list[int], rounds: int, ingest: int, scan_max: int) -> Doc:
    with tempfile.TemporaryDirectory(prefix="aecs-bench-search-") as tmp:
        work = Path(tmp)
        report: Doc = {"ingest": bench_ingest(client, ingest, 3, work), "load": os.getloadavg()}
        print("  search ingest", report["ingest"], flush=True)
        report["rows"] = [row for size in sizes for row in bench_size(client, uri, size, rounds, scan_max, work)]
        report["loadAfter"] = os.getloadavg()
    return report


NAME = "search"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--search-sizes", default="1000,10000,100000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--search-rounds", type=int, default=7, help="rounds per query (median)")
    parser.add_argument("--search-ingest", type=int, default=2000, help="messages per ingest round")
    parser.add_argument("--search-scan-max", type=int, default=10_000, help="the scan up to this size")


def run(ctx: Context) -> Doc:
    args = ctx.args
    report = measure(
        ctx.client, ctx.uri, args.search_sizes, args.search_rounds, args.search_ingest, args.search_scan_max
    )
    table_of(
        "search: the local index beside notmuch (median ms; cli: the whole command; cli_start: --help)",
        [report["ingest"]],
        ["messages", "without_msgs_per_s", "with_msgs_per_s", "ratio"],
    )
    columns = ["size", "query", "hits", "ours_ms", "cli_ms", "cli_start_ms", "notmuch_hits", "notmuch_ms"]
    table_of("search rows", report["rows"], [*columns, "scan_ms", "raw_MB", "index_MB", "ingest_s", "notmuch_new_s"])
    return {"search": report}
