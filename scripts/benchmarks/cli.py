"""The ``cli`` section: 20 short commands in a row (inbox, thread, show, search) on the embedded
default, with the server stopped after each (``--keep-server 0``, as before) and kept between
them (the default); ``AECS_BENCH_CLI_BASELINE=DIR`` (a source tree of another version: ``git
archive REV | tar -x -C DIR``) adds that version's commands in the same run, on the same data,
for the before/after ratio; then ``aecs-mongo ingest`` of a generated 1 GB mbox of real mail:
messages/s per 10% of the file (from its progress line) and its peak RSS (``--cli-mb 0`` skips it).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gen_mbox
from pymongo import MongoClient

from benchmarks.common import ROOT, Context, Doc, corpus_source, table_of


def bench_cli(uri: str, size_mb: float) -> list[Doc]:
    """``aecs-mongo ingest`` of a generated mbox of real mail (``size_mb``) end to end: messages/s
    per 10% of the file, read from the CLI's own progress line (its stderr is a pseudo-terminal),
    and the CLI's peak RSS (``wait4``). The server is not the CLI's child, so it is not counted."""
    import pty
    import re
    import uuid

    source = corpus_source()
    rows: list[Doc] = []
    with tempfile.TemporaryDirectory() as tmp:
        mbox = Path(tmp) / "bench.mbox"
        count = gen_mbox.write_mbox(mbox, size_mb, source=source)
        db_name = f"aecs_bench_cli_{uuid.uuid4().hex[:8]}"
        leader, follower = pty.openpty()
        argv = [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--db", db_name, "ingest", str(mbox)]
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower, cwd=ROOT)
        os.close(follower)
        progress = re.compile(rb"(\d+)% \| (\d+)/?\d* messages")
        marks: list[tuple[float, int, int]] = [(started, 0, 0)]  # (time, percent, messages)
        pending = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            pending = (pending + data)[-4096:]
            now = time.monotonic()
            for match in progress.finditer(pending):
                percent, done = int(match.group(1)), int(match.group(2))
                if percent >= (marks[-1][1] // 10 + 1) * 10:
                    marks.append((now, percent, done))
            pending = pending[pending.rfind(b"\r") :] if b"\r" in pending else pending
        _, status, usage = os.wait4(proc.pid, 0)
        os.close(leader)
        wall = time.monotonic() - started
        MongoClient(uri).drop_database(db_name)
    for (t0, _, m0), (t1, p1, m1) in itertools.pairwise(marks):
        rows.append({"uptoPercent": p1, "messages": m1, "msgs_per_s": (m1 - m0) / max(t1 - t0, 1e-9)})
    rows.append(
        {
            "uptoPercent": "all",
            "messages": count,
            "msgs_per_s": count / wall,
            "mboxMB": size_mb,
            "wallSeconds": round(wall, 1),
            "peakRssMB": usage.ru_maxrss / 1024,
            "exitCode": os.waitstatus_to_exitcode(status),
        }
    )
    return rows


def bench_cli_short(size_mb: float, commands: int = 20) -> list[Doc]:
    """``commands`` short commands in a row (inbox, thread, show, search) on the embedded default
    (no ``--uri``), after an ``ingest`` of a generated mbox of real mail (``size_mb``): each as
    the command line ran it before the shared server (``--keep-server 0``: start and stop a
    server every command) and with it (the default: the first command starts it, the rest
    connect). Wall time per command, as a user sees it (the interpreter's start included)."""

    source = corpus_source()
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "AECS_KEEP_SERVER")}
    rows: list[Doc] = []
    with tempfile.TemporaryDirectory() as tmp:
        mbox = Path(tmp) / "bench.mbox"
        count = gen_mbox.write_mbox(mbox, size_mb, source=source)
        data_dir = Path(tmp) / "aecs-data"

        def cli(*argv: str, keep: str = "0") -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", keep, *argv]
            return subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=tmp)

        cli("ingest", str(mbox), "--no-progress")
        page = [json.loads(line) for line in cli("--json", "inbox", "--limit", "10").stdout.splitlines()]
        ids = [m["messageId"] for m in page if "messageId" in m]  # JSON lines: the messages, then next_cursor
        sequence = [
            [
                ("inbox", "--limit", "5"),
                ("thread", ids[i % len(ids)]),
                ("show", ids[i % len(ids)]),
                ("search", "meeting"),
            ][i % 4]
            for i in range(commands)
        ]
        modes: list[tuple[str, str, dict[str, str]]] = [
            ("before: --keep-server 0", "0", {}),
            ("after: shared server (default 5m)", "5m", {}),
        ]
        baseline = os.environ.get("AECS_BENCH_CLI_BASELINE")
        if baseline:  # another version's source tree (git archive REV | tar -x -C DIR): same run, same data
            modes.append((f"baseline {Path(baseline).name}: shared server", "5m", {"PYTHONPATH": baseline}))
        for mode, keep, extra in modes:
            times = []
            for argv in sequence:
                started = time.monotonic()
                if extra:
                    subprocess.run(
                        [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "--keep-server", keep, *argv],
                        env={**env, **extra},
                        capture_output=True,
                        check=True,
                        cwd=baseline,
                    )
                else:
                    cli(*argv, keep=keep)
                times.append(time.monotonic() - started)
            rows.append(
                {
                    "mode": mode,
                    "messages": count,
                    "commands": len(times),
                    "totalSeconds": round(sum(times), 2),
                    "firstSeconds": round(times[0], 2),
                    "medianSeconds": round(statistics.median(times), 2),
                    "medianAfterFirst": round(statistics.median(times[1:]), 2),
                    "maxAfterFirst": round(max(times[1:]), 2),
                    # median of each kind, the first command (which starts the server) left out
                    **{
                        kind: round(
                            statistics.median(t for a, t in zip(sequence[1:], times[1:], strict=True) if a[0] == kind),
                            2,
                        )
                        for kind in ("inbox", "thread", "show", "search")
                    },
                }
            )
        cli("server", "stop", keep="5m")  # the benchmark stops what it started
        # the floor, in the same run: starting the interpreter and importing the command line
        floor = []
        for _ in range(5):
            started = time.monotonic()
            cli("--help")
            floor.append(time.monotonic() - started)
        rows.append(
            {"mode": "floor: aecs-mongo --help", "commands": 5, "medianAfterFirst": round(statistics.median(floor), 2)}
        )
    rows.append(
        {
            "mode": "ratio before/after (total)",
            "totalSeconds": round(rows[0]["totalSeconds"] / rows[1]["totalSeconds"], 1),
        }
    )
    return rows


NAME = "cli"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--cli-mb", type=float, default=1024, help="size of the generated mbox of real mail (0: skip that part)"
    )
    parser.add_argument(
        "--cli-short-mb", type=float, default=20, help="mbox of real mail ingested before the 20 short commands"
    )


def run(ctx: Context) -> Doc:
    args = ctx.args
    report: Doc = {"cliShort": bench_cli_short(args.cli_short_mb)}
    table_of(
        f"CLI: 20 short commands (inbox, thread, show, search) on the embedded default, "
        f"{args.cli_short_mb:.0f} MB of real mail ingested; wall seconds per command",
        report["cliShort"],
        [
            "mode",
            "messages",
            "commands",
            "totalSeconds",
            "firstSeconds",
            "medianAfterFirst",
            "maxAfterFirst",
            "inbox",
            "thread",
            "show",
            "search",
        ],
    )
    if args.cli_mb > 0:
        report["cli"] = bench_cli(ctx.uri, args.cli_mb)
        table_of(
            f"CLI: aecs-mongo ingest of a {args.cli_mb:.0f} MB mbox of real mail (messages/s per 10% of the file)",
            report["cli"],
            ["uptoPercent", "messages", "msgs_per_s", "wallSeconds", "peakRssMB", "exitCode"],
        )
    return report
