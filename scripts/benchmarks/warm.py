"""The ``warm`` section (not in the default list): warm commands beside notmuch, on the same mail.

``--warm-size`` messages of real mail (default 20,000: the corpus repeated with fresh
Message-IDs, plus one old message holding the only "xylophonist") written as a Maildir that
both ``aecs-mongo ingest`` (the embedded default, its shared server kept: the warm command host
starts with it) and ``notmuch new`` index (notmuch from Debian: ``apt-get install notmuch``; its
column is left out where it is missing). Then, medians of ``--warm-rounds`` of each command as
a user runs it (a new process each time, wall time, the console script ``aecs-mongo``):

- ``warm``: through the warm command host (``AECS_WARM=require``: a command the host did not
  run fails, so the in-process fallback cannot pass for it);
- ``in_process``: the same command with ``AECS_WARM=0`` (the shared server kept, as before);
- ``notmuch``: the nearest notmuch command (``notmuch search --limit=20 '*'``, ``notmuch search
  --limit=20 WORD``, ``notmuch count WORD``, ``notmuch show thread:ID``);
- ``floor``: ``python -c pass`` (the interpreter's start, what no command goes below).

And one MCP row: the ``search`` tool called through the MCP SDK's client on ``aecs-mongo mcp``
over stdio (the server process is warm by nature: its calls after the first), with the engine
its result names (``local``: the same index as ``aecs-mongo search``).
"""

from __future__ import annotations

import json
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

from benchmarks.common import RARE, ROOT, Context, Doc, real_mail, table_of

NAME = "warm"
DEFAULT = False
TARGET_MS = 50.0


def add_arguments(parser: Any) -> None:
    parser.add_argument("--warm-size", type=int, default=20_000, help="messages of real mail (default 20,000)")
    parser.add_argument("--warm-rounds", type=int, default=15, help="runs of each command (median)")
    parser.add_argument("--warm-word", default="meeting", help="the common word searched and counted")


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "aecs-mongo"
    return [str(script)] if script.exists() else [sys.executable, "-m", "aecs_mongo"]


def _notmuch_available() -> bool:
    if shutil.which("notmuch"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "notmuch"], capture_output=True, check=False)
    if shutil.which("notmuch") is None:
        print("warm: notmuch is not installed (apt-get install notmuch): its column is left out")
        return False
    return True


def _write_maildir(path: Path, raws: list[bytes]) -> None:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    for n, raw in enumerate(raws):
        (path / "cur" / f"{n:07d}.bench:2,S").write_bytes(raw)


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 1)


def _mcp_search_ms(env: dict[str, str], word: str, rounds: int) -> tuple[float, str]:
    """Median ms of the ``search`` tool through the SDK's client on ``aecs-mongo mcp`` (stdio)."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "aecs_mongo", "mcp"], cwd=str(ROOT), env=env)
    found: dict[str, Any] = {}

    async def run() -> None:
        async with Client(params) as client:
            await client.list_tools()
            samples = []
            for i in range(rounds + 1):
                started = time.perf_counter()
                result = await client.call_tool("search", {"query": word, "limit": 20})
                if result.is_error:
                    raise RuntimeError(f"search: {result.content[0].text}")
                if i:  # the first call warms
                    samples.append((time.perf_counter() - started) * 1000)
            found["ms"] = round(statistics.median(samples), 1)
            found["engine"] = json.loads(result.content[0].text).get("engine")

    anyio.run(run)
    return found["ms"], str(found["engine"])


def bench_warm(size: int, rounds: int, word: str) -> list[Doc]:
    aecs = _console_script()
    # compiled bytecode, as an installed package has it ($PYTHONDONTWRITEBYTECODE leaves a
    # checkout's edited modules to be compiled again by every command)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "aecs_mongo")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        maildir = work / "maildir"
        _write_maildir(maildir, [RARE, *real_mail(size - 1)])
        env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URI", "AECS_WARM", "COLUMNS")}
        env |= {"AECS_DATA_DIR": str(work / "data"), "AECS_KEEP_SERVER": "10m"}

        def cli(*argv: str, mode: str | None = None) -> subprocess.CompletedProcess[bytes]:
            run_env = env if mode is None else {**env, "AECS_WARM": mode}
            return subprocess.run([*aecs, *argv], env=run_env, cwd=work, capture_output=True, check=True)

        started = time.perf_counter()
        cli("ingest", str(maildir), "--no-progress")
        ingest_s = time.perf_counter() - started
        try:
            deadline = time.monotonic() + 120
            while subprocess.run(
                [*aecs, "count", "x"], env={**env, "AECS_WARM": "require"}, capture_output=True
            ).returncode:
                if time.monotonic() > deadline:
                    raise RuntimeError("no warm command host came up (see warm.log in the data directory)")
                time.sleep(0.5)
            listed = [json.loads(line) for line in cli("--json", "threads", "--limit", "50").stdout.splitlines()]
            listed = sorted((t for t in listed if "threadId" in t), key=lambda t: -t["messageCount"])
            count = int(cli("count", word).stdout)
            rows: list[Doc] = []
            notmuch = _notmuch_available()
            nm_env: dict[str, str] = {}
            biggest, thread = listed[0], ""
            if notmuch:
                config = work / "notmuch.config"
                config.write_text(
                    f"[database]\npath={maildir}\n[user]\nname=Bench\nprimary_email=owner@example.com\n"
                    "[new]\ntags=\n[search]\nexclude_tags=\n[maildir]\nsynchronize_flags=false\n"
                )
                nm_env = {**os.environ, "NOTMUCH_CONFIG": str(config)}
                subprocess.run(["notmuch", "new", "--quiet"], env=nm_env, check=True, capture_output=True)
                for candidate in listed:  # the biggest thread notmuch finds by one of its Message-IDs
                    member = json.loads(cli("--json", "thread", candidate["threadId"], "--limit", "1").stdout)
                    found = subprocess.run(
                        ["notmuch", "search", "--output=threads", f'id:"{member["messageId"]}"'],
                        env=nm_env,
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout.split()
                    if found:
                        biggest, thread = candidate, found[0]
                        break
            cases = [
                ("inbox --limit 20", ("inbox", "--limit", "20"), ["search", "--limit=20", "--sort=newest-first", "*"]),
                (f"search {word}", ("search", word), ["search", "--limit=20", word]),
                ("search xylophonist (rare)", ("search", "xylophonist"), ["search", "--limit=20", "xylophonist"]),
                (f"count {word}", ("count", word), ["count", word]),
                (
                    f"thread ID ({biggest['messageCount']} message{'' if biggest['messageCount'] == 1 else 's'})",
                    ("thread", biggest["threadId"]),
                    ["show", "--format=text", thread],
                ),
            ]
            for label, argv, nm_argv in cases:
                row: Doc = {"command": label, "messages": size}
                row["warm_ms"] = _median_ms(lambda a=argv: cli(*a, mode="require"), rounds)
                row["in_process_ms"] = _median_ms(lambda a=argv: cli(*a, mode="0"), rounds)
                row["in_process_over_warm"] = round(row["in_process_ms"] / row["warm_ms"], 1)
                if notmuch:
                    row["notmuch_ms"] = _median_ms(
                        lambda a=nm_argv: subprocess.run(["notmuch", *a], env=nm_env, check=True, capture_output=True),
                        rounds,
                    )
                    row["warm_over_notmuch"] = round(row["warm_ms"] / row["notmuch_ms"], 2)
                row["at_most_50ms"] = row["warm_ms"] <= TARGET_MS
                rows.append(row)
            mcp_ms, engine = _mcp_search_ms(env, word, rounds)
            rows.append(
                {
                    "command": f"MCP search tool ({engine})",
                    "messages": size,
                    "warm_ms": mcp_ms,
                    "at_most_50ms": mcp_ms <= TARGET_MS,
                }
            )
            floor = _median_ms(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), rounds)
            rows.append({"command": "floor: python -c pass", "warm_ms": floor})
            rows.append({"command": "ingest (s)", "messages": size, "warm_ms": round(ingest_s, 1), "count": count})
            return rows
        finally:
            cli("server", "stop")


def run(ctx: Context) -> Doc:
    args = ctx.args
    load = os.getloadavg()
    rows = bench_warm(args.warm_size, args.warm_rounds, args.warm_word)
    title = (
        f"warm: each command as a user runs it, median of {args.warm_rounds} (ms), {args.warm_size:,} messages, beside"
        f" notmuch on the same Maildir; load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    columns = ["command", "messages", "warm_ms", "in_process_ms", "in_process_over_warm", "notmuch_ms"]
    table_of(title, rows, [*columns, "warm_over_notmuch", "at_most_50ms"])
    return {"rows": rows, "loadAverage": [load[0], os.getloadavg()[0]]}
