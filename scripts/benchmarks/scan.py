"""The ``scan`` section (not in the default list): the library's search without a local index.

A ``MessageStore(db)`` on a server without ``$text`` (the embedded SecantusDB) and without
``search_index=`` answers a search with the scan: every message newest first, matched here. A
mailbox of ``--scan-messages`` (20,000) real messages (the corpus repeated with fresh
Message-IDs; the sample mailbox where it is absent) plus one old message that alone holds a rare
word, built once per database (``--data-dir`` keeps it); then, round after round
(``--scan-rounds``, medians), ``search(word, limit=20)`` for the rare word (it walks the whole
mailbox) and ``count`` of it, with the messages examined and the hits.

``--scan-baseline DIR`` (or ``$AECS_BENCH_SCAN_BASELINE``): a source tree of another version
(``git archive REV | tar -x -C DIR``) runs the same search in a subprocess of its own, on the
same database, in turn with ours: the before/after ratio of one run.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient

from aecs_mongo import MessageStore
from benchmarks.common import RARE, Context, Doc, corpus_source, table_of

RARE_WORD = "xylophonist"


def server_cpu(client: Any) -> float | None:
    """The CPU seconds the server process has used (None: not a process of this machine). The
    machine is shared: CPU time says what a call costs where the wall clock says how busy it was."""
    try:
        pid = int(client.admin.command("serverStatus")["pid"])
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


#: what a baseline's subprocess runs: one search (or count), timed there; prints JSON
_CHILD = (
    "from typing import Any\nimport os\n"
    + inspect.getsource(server_cpu)
    + """
import json, logging, sys, time
logging.disable(logging.WARNING)
from pymongo import MongoClient
from aecs_mongo import MessageStore
uri, db, word, what = sys.argv[1:5]
client = MongoClient(uri)
store = MessageStore(client[db], mailbox_id="bench")
store.count("warm-up")
cpu, server = time.process_time(), server_cpu(client)
started = time.perf_counter()
found = store.count(word) if what == "count" else store.search(word, limit=20)
seconds = time.perf_counter() - started
out = {"seconds": seconds, "client_cpu_s": time.process_time() - cpu}
if server is not None:
    out["server_cpu_s"] = server_cpu(client) - server
if what == "count":
    out["hits"] = found
else:
    out.update(hits=len(found), examined=found.examined, engine=found.engine, complete=found.complete)
print(json.dumps(out))
"""
)


def build(client: MongoClient[Doc], name: str, size: int) -> None:
    """The mailbox: the rare message and ``size - 1`` real messages (kept where already built)."""
    db = client[name]
    if db.messages.count_documents({"mailboxId": "bench"}) >= size:
        return
    client.drop_database(name)
    store = MessageStore(db, mailbox_id="bench", durable=False)
    store.ensure_indexes()
    started = time.perf_counter()
    stream = itertools.chain([RARE], gen_mbox.messages(64, source=corpus_source()))
    while db.messages.count_documents({"mailboxId": "bench"}) < size:
        missing = size - db.messages.count_documents({"mailboxId": "bench"})
        store.store_many(list(itertools.islice(stream, missing)), batch_size=200, on_error=lambda *_: None)
    print(f"  scan: stored {size:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def ours(client: MongoClient[Doc], name: str, what: str) -> Doc:
    store = MessageStore(client[name], mailbox_id="bench")
    store.count("warm-up")  # the store's sample and capabilities, as a warm process has them
    cpu, server = time.process_time(), server_cpu(client)
    started = time.perf_counter()
    found = store.count(RARE_WORD) if what == "count" else store.search(RARE_WORD, limit=20)
    seconds = time.perf_counter() - started
    out: Doc = {"seconds": seconds, "client_cpu_s": time.process_time() - cpu}
    if server is not None:
        out["server_cpu_s"] = server_cpu(client) - server
    if isinstance(found, int):
        return {**out, "hits": found}
    return {
        **out,
        "hits": len(found),
        "examined": found.examined,
        "engine": found.engine,
        "complete": found.complete,
    }


def baseline(uri: str, name: str, what: str, tree: Path) -> Doc:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, uri, name, RARE_WORD, what],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


def bench_scan(ctx: Context, size: int, rounds: int, tree: Path | None) -> list[Doc]:
    name = f"aecs_bench_scan_{size}"
    build(ctx.client, name, size)
    rows: list[Doc] = []
    for what in ("search", "count"):
        runs: dict[str, list[Doc]] = {"ours": [], "baseline": []}
        for r in range(rounds):
            order = ["ours", "baseline"] if r % 2 == 0 else ["baseline", "ours"]
            for who in order:
                if who == "ours":
                    runs[who].append(ours(ctx.client, name, what))
                elif tree is not None:
                    runs[who].append(baseline(ctx.uri, name, what, tree))
        for who, done in runs.items():
            if not done:
                continue
            row: Doc = {
                "version": "this tree" if who == "ours" else f"baseline {tree}",
                "call": f"{what}({RARE_WORD!r})",
                "messages": ctx.client[name].messages.count_documents({"mailboxId": "bench"}),
                "median_s": statistics.median(d["seconds"] for d in done),
                "rounds": [round(d["seconds"], 2) for d in done],
                "cpu_s": statistics.median(d["client_cpu_s"] + d.get("server_cpu_s", 0.0) for d in done),
                "client_cpu_s": statistics.median(d["client_cpu_s"] for d in done),
                "server_cpu_s": statistics.median(d.get("server_cpu_s", 0.0) for d in done),
                **{k: v for k, v in done[-1].items() if k not in ("seconds", "client_cpu_s", "server_cpu_s")},
                "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            }
            rows.append(row)
            print("  scan", json.dumps(row), file=sys.stderr, flush=True)
        if len(runs["baseline"]) and len(runs["ours"]):
            rows[-1]["baseline_over_ours"] = rows[-1]["median_s"] / rows[-2]["median_s"]
            rows[-1]["cpu_baseline_over_ours"] = rows[-1]["cpu_s"] / rows[-2]["cpu_s"]
    return rows


NAME = "scan"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--scan-messages", type=int, default=20_000, help="real messages in the mailbox")
    parser.add_argument("--scan-rounds", type=int, default=3, help="rounds of each call (median)")
    parser.add_argument(
        "--scan-baseline",
        type=Path,
        default=os.environ.get("AECS_BENCH_SCAN_BASELINE") or None,
        help="another version's source tree: the same calls, in turn with ours (before/after)",
    )


def run(ctx: Context) -> Doc:
    args = ctx.args
    rows = bench_scan(ctx, args.scan_messages, args.scan_rounds, args.scan_baseline)
    table_of(
        f"scan: search without a local index at {args.scan_messages:,} real messages, a rare word (median s)",
        rows,
        [
            "version",
            "call",
            "messages",
            "median_s",
            "rounds",
            "cpu_s",
            "client_cpu_s",
            "server_cpu_s",
            "hits",
            "examined",
            "engine",
            "complete",
            "baseline_over_ours",
            "cpu_baseline_over_ours",
            "load",
        ],
    )
    return {"scan": rows}
