"""The ``tags`` section (not in the default list): tag changes and tag reads beside ``notmuch tag``.

One mailbox of ``--tags-size`` messages (default 10,000: the real-mail corpus repeated with fresh
Message-IDs, as ``gen_mbox`` makes it), stored by a store with the local index (the command
line's embedded default), the first ``--tags-batch`` (1,000) of them with the tag ``batch``; the
same messages written as a Maildir that ``notmuch new`` indexes, the same 1,000 in its folder
``batch`` and tagged ``batch`` there (``notmuch tag +batch -- folder:batch``: setup, not timed).
notmuch from Debian (``apt-get install notmuch``; the section says so and stops without it).
Then, medians of ``--tags-rounds``, ours in this process, notmuch as its command:

- ``tag``: ``store.tag("tag:batch", add=["x"])`` against ``notmuch tag +x -- tag:batch``, and
  the same with ``remove`` / ``-x`` (each round changes all 1,000 messages: adds, then removes);
- ``count``: ``store.count("tag:x")`` against ``notmuch count tag:x`` (with the tag set);
- ``search``: ``store.search("tag:x WORD", limit=20)`` against ``notmuch search
  --output=messages --limit=20 tag:x WORD``;
- the server's floor for the change: the raw driver's ``update_many`` of one ``$inc`` on the
  same messages (what any write to them costs on this server), and the same statement on copies
  of those documents with only ``_id`` and with ``_id`` and the tags index (what the other
  indexes of ``messages`` cost: SecantusDB rewrites every entry of every index per document).

The two tools' sets differ (notmuch skips some files as non-mail and names messages without a
Message-ID its own way): the tag rows give each side's count of messages changed (``hits``
columns) and ``per_message``, ours per message over notmuch's per message.

The targets: the tag change within 2x notmuch's time for the same messages, the reads
within notmuch's + 10 ms. The load average is printed before and after. Run it with ``--mode rs``:
the command line's embedded server is a replica set, whose change stream the local index follows;
on a standalone server each read of the local index first reads the mailbox's change mark (one
``find``; the section says so), each write bumps it, and a write keeps no oplog.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox

from aecs_mongo import MessageStore
from benchmarks.common import Context, Doc, corpus_source, table_of

WORD = "the"


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _notmuch_available() -> bool:
    if shutil.which("notmuch"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "notmuch"], capture_output=True, check=False)
    return shutil.which("notmuch") is not None


def _notmuch(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(["notmuch", *argv], env=env, capture_output=True, check=True, text=True).stdout


def _maildir(path: Path, raws: list[bytes], batch: int) -> None:
    for folder in (path, path / "batch"):
        for sub in ("cur", "new", "tmp"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
    for n, raw in enumerate(raws):
        folder = path / "batch" if n < batch else path
        (folder / "cur" / f"{n:07d}.bench:2,S").write_bytes(raw)


def measure(ctx: Context, size: int, batch: int, rounds: int) -> Doc:
    raws = list(itertools.islice(gen_mbox.messages(64, source=corpus_source()), size))
    db_name = "aecs_bench_tags"
    ctx.client.drop_database(db_name)
    report: Doc = {"size": size, "batch": batch, "rounds": rounds, "load": os.getloadavg()}
    report["replicaSet"] = ctx.transactions
    if not ctx.transactions:
        print(
            "  tags: a standalone server: no change stream, so each read of the local index first reads the"
            " mailbox's change mark (the command line's embedded server is a replica set: --mode rs)"
        )
    with tempfile.TemporaryDirectory(prefix="aecs-bench-tags-") as tmp:
        work = Path(tmp)
        index = work / "index.sqlite"
        setup = MessageStore(ctx.client[db_name], mailbox_id="bench", search_index=index, durable=False)
        setup.ensure_indexes()
        setup.store_many(raws[:batch], tags=["batch"])
        setup.store_many(raws[batch:])
        store = MessageStore(ctx.client[db_name], mailbox_id="bench", search_index=index)
        report["stored"] = store.count("tag:batch"), ctx.client[db_name].messages.count_documents({})
        store.count(WORD)  # the local index is built and caught up
        if not _notmuch_available():
            print("  tags: notmuch is not installed (apt-get install notmuch): no comparison")
            return report
        maildir = work / "maildir"
        _maildir(maildir, raws, batch)
        config = work / "notmuch.config"
        config.write_text(
            f"[database]\npath={maildir}\n[user]\nname=Bench\nprimary_email=owner@example.com\n"
            "[new]\ntags=\n[search]\nexclude_tags=\n[maildir]\nsynchronize_flags=false\n"
        )
        env = {**os.environ, "NOTMUCH_CONFIG": str(config)}
        _notmuch(env, "new", "--quiet")
        _notmuch(env, "tag", "+batch", "--", "folder:batch")
        report["notmuch_batch"] = int(_notmuch(env, "count", "tag:batch"))

        # the tag change: alternate add and remove, so that every round changes every message
        ours_add, ours_remove, theirs_add, theirs_remove = [], [], [], []
        changed = []
        for _ in range(rounds):
            for timings, fn in (
                (ours_add, lambda: changed.append(store.tag("tag:batch", add=["x"]).changed)),
                (theirs_add, lambda: _notmuch(env, "tag", "+x", "--", "tag:batch")),
                (ours_remove, lambda: changed.append(store.tag("tag:batch", remove=["x"]).changed)),
                (theirs_remove, lambda: _notmuch(env, "tag", "-x", "--", "tag:batch")),
            ):
                started = time.perf_counter()
                fn()
                timings.append(time.perf_counter() - started)
        report["changed_per_round"] = sorted(set(changed))
        # the sets differ (notmuch skips files it takes for non-mail and names messages without a
        # Message-ID otherwise): per message is the comparison of the same work
        ours_n, theirs_n = max(changed), report["notmuch_batch"]
        store.tag("tag:batch", add=["x"])
        _notmuch(env, "tag", "+x", "--", "tag:batch")
        query = f"tag:x {WORD}"
        report["rows"] = [
            {
                "op": f"tag +x ({batch:,} files)",
                "ours_ms": statistics.median(ours_add) * 1000,
                "notmuch_ms": statistics.median(theirs_add) * 1000,
                "ours_hits": ours_n,
                "notmuch_hits": theirs_n,
            },
            {
                "op": f"tag -x ({batch:,} files)",
                "ours_ms": statistics.median(ours_remove) * 1000,
                "notmuch_ms": statistics.median(theirs_remove) * 1000,
                "ours_hits": ours_n,
                "notmuch_hits": theirs_n,
            },
            {
                "op": "count tag:x",
                "ours_ms": _median_ms(lambda: store.count("tag:x"), rounds),
                "notmuch_ms": _median_ms(lambda: _notmuch(env, "count", "tag:x"), rounds),
                "ours_hits": store.count("tag:x"),
                "notmuch_hits": int(_notmuch(env, "count", "tag:x")),
            },
            {
                "op": f"search {query} (20)",
                "ours_ms": _median_ms(lambda: store.search(query, limit=20), rounds),
                "notmuch_ms": _median_ms(
                    lambda: _notmuch(env, "search", "--output=messages", "--limit=20", query), rounds
                ),
                "ours_hits": store.count(query),
                "notmuch_hits": int(_notmuch(env, "count", query)),
            },
        ]
        # the server's floor for the same messages: the raw driver setting one field on each
        messages = ctx.client[db_name].messages
        floor_ms = _median_ms(
            lambda: messages.update_many({"mailboxId": "bench", "tags": "batch"}, {"$inc": {"benchFloor": 1}}), rounds
        )
        # where the floor comes from: the same statement on copies of these documents, with only
        # `_id` and with `_id` and the tags index (SecantusDB rewrites every index entry of every
        # document it updates)
        copies = []
        for name, indexes in (("_id only", []), ("_id and aecs_messages_tags", ["aecs_messages_tags"])):
            copy = ctx.client[db_name][f"bench_copy_{len(copies)}"]
            copy.insert_many(messages.find({"mailboxId": "bench", "tags": "batch"}))
            for spec in messages.list_indexes():
                if spec["name"] in indexes:
                    copy.create_index(list(spec["key"].items()), name=spec["name"])
            copy_ms = _median_ms(lambda copy=copy: copy.update_many({}, {"$inc": {"benchFloor": 1}}), rounds)
            copies.append({"op": f"floor: the same on a copy with {name}", "ours_ms": copy_ms})
        report["rows"][2:2] = [{"op": "floor: raw update_many $inc on them", "ours_ms": floor_ms}, *copies]
        local = MessageStore(ctx.client[db_name], mailbox_id="bench", search_index=index, search_engine="local")
        report["rows"].append(
            {
                "op": "count tag:x (the local index)",
                "ours_ms": _median_ms(lambda: local.count("tag:x"), rounds),
                "notmuch_ms": next(r["notmuch_ms"] for r in report["rows"] if r["op"] == "count tag:x"),
                "ours_hits": local.count("tag:x"),
            }
        )
        report["engine"] = {"count": store.search("tag:x").engine, "search": store.search(query).engine}
        floor = _median_ms(lambda: subprocess.run(["notmuch", "--version"], env=env, capture_output=True), rounds)
        report["notmuch_start_ms"] = floor
        for row in report["rows"]:
            if "notmuch_ms" in row:
                row["ratio"] = row["ours_ms"] / row["notmuch_ms"]
                row["over_ms"] = row["ours_ms"] - row["notmuch_ms"]
            if row["op"].startswith("tag "):  # the target: per message changed, ours / notmuch's
                row["per_message"] = (row["ours_ms"] / ours_n) / (row["notmuch_ms"] / theirs_n)
    ctx.client.drop_database(db_name)
    report["loadAfter"] = os.getloadavg()
    return report


NAME = "tags"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--tags-size", type=int, default=10_000, help="messages in the mailbox (default: 10,000)")
    parser.add_argument("--tags-batch", type=int, default=1_000, help="messages a tag change changes (default: 1,000)")
    parser.add_argument("--tags-rounds", type=int, default=7, help="rounds per operation (median)")


def run(ctx: Context) -> Doc:
    args = ctx.args
    report = measure(ctx, args.tags_size, args.tags_batch, args.tags_rounds)
    if "rows" in report:
        table_of(
            f"tags: beside notmuch on {report['size']:,} messages (median ms; ours in process, notmuch its command,"
            f" whose start alone is {report['notmuch_start_ms']:.1f} ms)",
            report["rows"],
            ["op", "ours_ms", "notmuch_ms", "ratio", "per_message", "over_ms", "ours_hits", "notmuch_hits"],
        )
    print(f"  load before {report['load']}, after {report['loadAfter']}; engines {report.get('engine')}")
    return {"tags": report}
