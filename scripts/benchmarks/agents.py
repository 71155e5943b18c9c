"""The ``agents`` section (not in the default list): warm tool-call latency for LLM agents.

A mailbox of ``--agents-size`` (default 10,000) real messages (the corpus repeated with fresh
Message-IDs, as ``real_mail`` does) plus one long thread of 300 replies. Measured warm, median
of ``--rounds`` calls each, in one run:

- ``search`` for a common word, a rare word (in one corpus message, so one copy per round of
  the corpus) and a word in no message (the engine reads everything it has), ``limit=20``;
- ``get_thread`` of a small corpus thread and of the long one (newest 20 within 24,000 chars);

each three ways: the store call alone (``store.search`` / ``store.thread_context``), the Python
tool (``MailTools``, what the MCP server runs per call: the store call, the summaries read,
shaping, hidden-character removal, the byte cap), and the whole MCP round trip (the SDK's
client to ``aecs-mongo mcp`` over stdio, a subprocess on the same server). ``engine`` is the
search engine that answered (``scan`` until the local index of the search issue exists).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient

from aecs_mongo import MessageStore, normalize
from aecs_mongo.agents import MailTools
from benchmarks.common import ROOT, Context, Doc, corpus_source, table_of

DB = "aecs_bench_agents"
LONG_THREAD = "agents-long-thread@bench.example"


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _long_thread(count: int) -> list[bytes]:
    """One thread of ``count`` messages, each replying to the one before (References chain)."""
    out = []
    for n in range(count):
        mid = LONG_THREAD if n == 0 else f"agents-long-{n}@bench.example"
        parent = None if n == 0 else (LONG_THREAD if n == 1 else f"agents-long-{n - 1}@bench.example")
        head = f"Message-ID: <{mid}>\r\n"
        if parent:
            head += f"In-Reply-To: <{parent}>\r\nReferences: <{LONG_THREAD}>\r\n"
        body = f"Reply {n} on the storage migration plan. " + "We compared the options and the numbers again. " * 20
        out.append(
            (
                f"From: Person {n % 7} <p{n % 7}@bench.example>\r\nTo: team@bench.example\r\n"
                f"Subject: {'Re: ' if n else ''}Storage migration\r\n"
                f"Date: Mon, 02 Nov 2026 {8 + n // 60 % 10:02d}:{n % 60:02d}:00 +0000\r\n{head}"
                f"Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
            ).encode()
        )
    return out


def _words(source: Path) -> tuple[str, str]:
    """A common word and a rare one (long, in exactly one corpus message's clean text)."""
    frequency: Counter[str] = Counter()
    for path in sorted(source.glob("*.eml")):
        try:
            clean = (normalize(path.read_bytes()).get("content") or {}).get("clean") or ""
        except Exception:  # a file of the corpus that is not mail
            continue
        frequency.update(set(re.findall(r"[a-z]{10,}", clean.lower())))
    rare = sorted(w for w, n in frequency.items() if n == 1)
    return "the", rare[len(rare) // 2] if rare else "zzzrare"


def _populate(db: Any, mailbox: str, size: int) -> None:
    store = MessageStore(db, mailbox_id=mailbox, durable=False)
    store.ensure_indexes()
    if db.messages.count_documents({"mailboxId": mailbox}) >= size:
        return  # built by an earlier run in the same --data-dir
    source = corpus_source()
    started = time.perf_counter()
    stream = gen_mbox.messages(64, source=source)
    stored = 0
    while stored < size:
        batch = [next(stream) for _ in range(500)]
        stored += sum(r.inserted for r in store.store_many(batch, on_error=lambda *_: None))
    store.store_many(_long_thread(300))
    print(f"  agents: stored {stored:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def _mcp_latencies(uri: str, mailbox: str, calls: list[tuple[str, str, Doc]], rounds: int) -> dict[str, float]:
    """Median ms of each call through the SDK's client to ``aecs-mongo mcp`` over stdio."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    argv = ["-m", "aecs_mongo", "--uri", uri, "--db", DB, "--mailbox", mailbox, "mcp"]
    params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(ROOT))
    medians: dict[str, float] = {}

    async def run() -> None:
        async with Client(params) as client:
            await client.list_tools()
            for label, name, arguments in calls:
                samples = []
                for i in range(rounds + 1):
                    start = time.perf_counter()
                    result = await client.call_tool(name, arguments)
                    if result.is_error:
                        raise RuntimeError(f"{name}: {result.content[0].text}")
                    if i:  # the first call warms
                        samples.append((time.perf_counter() - start) * 1000)
                medians[label] = statistics.median(samples)

    anyio.run(run)
    return medians


def bench_agents(client: MongoClient[Doc], uri: str, size: int, rounds: int, only: str = "") -> list[Doc]:
    """The rows of the section; ``only``: the calls whose label contains it (all by default)."""
    db = client[DB]
    mailbox = f"agents-{size}"
    _populate(db, mailbox, size)
    store = MessageStore(db, mailbox_id=mailbox, shared_view=True)
    tools = MailTools(store)
    common, rare = _words(corpus_source())
    thread = db.threads.find_one({"mailboxId": mailbox, "messageCount": {"$gte": 3, "$lte": 20}}) or {}
    small = thread.get("threadId") or LONG_THREAD
    cases: list[tuple[str, str, Doc, Callable[[], object]]] = [
        (f"search '{common}' (common)", "search", {"query": common}, lambda: store.search(common, limit=20)),
        (f"search '{rare}' (rare)", "search", {"query": rare}, lambda: store.search(rare, limit=20)),
        ("search 'qqxyzzyqq' (nowhere)", "search", {"query": "qqxyzzyqq"}, lambda: store.search("qqxyzzyqq", limit=20)),
        ("get_thread (corpus thread)", "get_thread", {"thread_id": small}, lambda: store.thread_context(small, 20)),
        (
            "get_thread (300 replies)",
            "get_thread",
            {"thread_id": LONG_THREAD},
            lambda: store.thread_context(LONG_THREAD, 20),
        ),
    ]
    cases = [c for c in cases if only in c[0]]
    rows: list[Doc] = []
    for label, name, arguments, raw in cases:
        result = tools.call(name, arguments)
        rows.append(
            {
                "call": label,
                "messages": db.messages.count_documents({"mailboxId": mailbox}),
                "engine": result.get("engine", "-"),
                "returned": result["returned"],
                "store_ms": round(_median_ms(raw, rounds), 1),
                "tool_ms": round(_median_ms(lambda n=name, a=arguments: tools.call(n, a), rounds), 1),
            }
        )
        row = rows[-1]
        row["tool_over_store"] = round(row["tool_ms"] / row["store_ms"], 2) if row["store_ms"] else None
        print(f"  agents: {row}", file=sys.stderr, flush=True)
    over_mcp = _mcp_latencies(uri, mailbox, [(r["call"], c[1], c[2]) for r, c in zip(rows, cases, strict=True)], rounds)
    for row in rows:
        row["mcp_stdio_ms"] = round(over_mcp[row["call"]], 1)
    return rows


COLUMNS = ["call", "messages", "engine", "returned", "store_ms", "tool_ms", "tool_over_store", "mcp_stdio_ms"]


NAME = "agents"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument("--agents-size", type=int, default=10_000, help="real messages in the mailbox")
    parser.add_argument("--agents-only", default="", help="only the calls whose label contains this")


def run(ctx: Context) -> Doc:
    args = ctx.args
    rows = bench_agents(ctx.client, ctx.uri, args.agents_size, args.rounds, args.agents_only)
    table_of(f"agents: warm tool calls at {args.agents_size:,} real messages (median ms; shared view)", rows, COLUMNS)
    return {"agents": rows}
