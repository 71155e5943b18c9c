"""The ``ingest`` section: ``store`` one by one and ``store_many`` of real mail as raw bytes
vs PyMongo inserting the very documents ours produces (prebuilt: the I/O floor; ratio =
baseline time / ours), then ``aecs-mongo ingest`` of a Maildir of real mail beside ``notmuch
new`` and ``mu index`` of the same Maildir (``--ingest-tool-sizes``): ours twice, on the
embedded default (its blobs in a directory of the data directory, zstd-compressed) and with
``--blobs gridfs`` (in the database, where they were before the directory blob store), with what
each keeps on disk beside the Maildir (``*_disk_x``: ours the whole data directory once its
server stopped, notmuch its database, mu its home), as a multiple of the Maildir's bytes.

The tools' comparison: for each size one Maildir of real mail is written (the corpus,
``../shared/corpus/eml``, repeated with fresh Message-IDs by ``gen_mbox.messages``: raw bytes,
HTML and attachments, and the corpus's own second copies of a Message-ID, which ours keeps as
variants and notmuch as a second file name), read once so the page cache holds it for every
tool, then each round runs the three tools one after the other, in a rotated order, each from
nothing: ours on the embedded default (no ``--uri``: a fresh data directory whose server is
started first, untimed, as ``aecs-mongo server start`` or the first command of a session starts
it; its start is reported apart), notmuch with a fresh database beside the Maildir
(``database.path``), mu with a fresh ``--muhome`` (``mu init`` and ``mu index`` both timed). A
tool that is not installed is left out (Debian: ``apt-get install notmuch maildir-utils``).
messages/s = files in the Maildir / wall seconds of the command (the interpreter's start
included for ours); medians of the rounds. One more, untimed run of ours in this process
counts what the server is asked per batch: commands, and documents written per message.

Only the tools' comparison: ``--sections ingest --ingest-messages 0``.

Re-runs (``--ingest-rerun-size``, default 10,000; 0 skips them; functions ``rerun_*``
below): one Maildir of real mail, ingested once by each tool (ours on the embedded default,
notmuch, mu), then, round after round, each tool's re-run with nothing changed, and each tool's
re-run after 100 new files (in ``new/``) and 100 flag changes (``:2,S`` renamed ``:2,FS``),
fresh files and renames each round. Beside them: our start-up (``ingest`` of an empty
directory: the interpreter, the imports, the connection to the running server, one empty
survey) and the cost of ingesting those 100 files alone (into another mailbox, the command
included), and the unchanged re-run's own work in this process (``sync_files`` on the command's
database, on its server). The targets: unchanged within notmuch's time + our start-up, the changes within
1 s + the 100 alone, each judged on the median of the per-round differences (ours unchanged -
our start-up; ours after the changes - the 100 alone), since the shared machine's load moves
a whole round.
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import gen_mbox
from pymongo import MongoClient, monitoring

from aecs_mongo import MessageStore
from aecs_mongo.pure.dialect import EMBEDDED
from benchmarks.common import (
    Context,
    Doc,
    baseline_batch,
    baseline_one,
    compile_bytecode,
    corpus_source,
    disk_usage,
    read_all,
    real_mail,
    run_notmuch,
    set_aside,
    storable,
    table,
    table_of,
    timed,
    timed_command,
    tool_env,
    write_maildir,
)


def bench_ingest(client: MongoClient[Doc], count: int, rounds: int, transactions: bool) -> dict[str, Any]:
    """Real mail as raw bytes (ours parses it too) vs the driver inserting the final documents."""
    raws, prebuilt = storable(real_mail(count))
    results: dict[str, list[float]] = {"store": [], "base_one": [], "store_many": [], "base_many": []}
    for r in range(rounds):
        for key, run in (
            ("store", lambda s, db: [s.store(raw) for raw in raws]),
            ("store_many", lambda s, db: s.store_many(raws, batch_size=100)),
            ("base_one", lambda s, db: [baseline_one(db, d) for d in prebuilt]),
            (
                "base_many",
                lambda s, db: [
                    baseline_batch(db, prebuilt[i : i + 100], transactions=transactions)
                    for i in range(0, len(raws), 100)
                ],
            ),
        ):
            name = f"aecs_bench_ingest_{key}_{r}"
            client.drop_database(name)
            db = client[name]
            store = MessageStore(db, mailbox_id="bench", transactions=transactions)
            store.ensure_indexes()
            results[key].append(timed(lambda: run(store, db)))  # noqa: B023
            client.drop_database(name)
    med = {k: statistics.median(v) for k, v in results.items()}
    return {
        "messages": len(raws),
        "MB": round(sum(map(len, raws)) / 1e6, 1),
        "rounds": rounds,
        "transactions": transactions,
        "store_s": med["store"],
        "baseline_one_s": med["base_one"],
        "store_ratio": med["base_one"] / med["store"],
        "store_many_s": med["store_many"],
        "baseline_many_s": med["base_many"],
        "store_many_ratio": med["base_many"] / med["store_many"],
        "store_many_msgs_per_s": len(raws) / med["store_many"],
    }


#: ours twice: the embedded default (its blob store: a directory in the data directory) and the
#: same with ``--blobs gridfs`` (the blobs in the database, where they were before the directory blob store)
TOOLS = ("aecs-mongo", "aecs-mongo-gridfs", "notmuch", "mu")


#: the parts of the embedded data directory the tools' comparison prints, in its order
PARTS = ("oplog", "journal", "documents", "indexes", "blobs", "search", "other")


def data_dir_parts(path: Path) -> dict[str, int]:
    """Bytes on disk of the embedded data directory ``path`` by what they hold: the server's
    files by their names (the ``stats`` command's kinds: ``oplog``, ``journal``, ``documents``,
    ``indexes``), the blob store's directory (``blobs``), the local search index (``search``),
    and the rest (``other``: the server's metadata, its log, the credentials)."""
    parts = dict.fromkeys(PARTS, 0)
    for folder, _, names in os.walk(path):
        top = Path(folder).relative_to(path).parts[:1]
        for name in names:
            with contextlib.suppress(OSError):
                size = os.lstat(os.path.join(folder, name)).st_blocks * 512
                if top in (("blobs",), ("search",)):
                    kind = top[0]
                else:
                    kind = next((k for prefix, k in EMBEDDED.data_files if name.startswith(prefix)), "other")
                parts[kind] += size
    return parts


def parts_line(parts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {parts[kind] / 1e6:.1f}" for kind in PARTS) + " MB"


def run_ours(
    maildir: Path, work: Path, blobs: str | None = None, python: str | None = None
) -> tuple[float, float, dict[str, int]]:
    """(ingest seconds, server start seconds, data directory bytes by part once the server
    stopped: ``data_dir_parts``) of
    ``aecs-mongo ingest`` on the embedded default; ``blobs``: a ``--blobs`` URL (default: the
    command line's own choice, a directory in the data directory); ``python``: another
    environment's interpreter (``--ingest-baseline``: an older checkout's, its own defaults)."""
    data = work / "aecs-data"
    cli = [python or sys.executable, "-m", "aecs_mongo", "--data-dir", str(data)]
    if blobs is not None:
        cli += ["--blobs", blobs]
    # another checkout's python imports its own package, never one this process was pointed at
    leave_out = ("AECS_BLOBS", "PYTHONPATH") if python else ("AECS_BLOBS",)
    env = {k: v for k, v in tool_env().items() if k not in leave_out}
    try:
        start = timed_command([*cli, "server", "start"], env, work)
        seconds = timed_command([*cli, "ingest", "--no-progress", str(maildir)], env, work)
        subprocess.run([*cli, "server", "stop"], env=env, cwd=work, capture_output=True)
        return seconds, start, data_dir_parts(data)
    finally:
        subprocess.run([*cli, "server", "stop"], env=env, cwd=work, capture_output=True)
        set_aside(data, work)


def run_mu(maildir: Path, work: Path) -> tuple[float, int]:
    home = work / "mu-home"
    env = tool_env()
    try:
        init = timed_command(["mu", "init", "--quiet", f"--muhome={home}", f"--maildir={maildir}"], env, work)
        return init + timed_command(["mu", "index", "--quiet", f"--muhome={home}"], env, work), disk_usage(home)
    finally:
        set_aside(home, work)


class _Counts:
    """What the command line sent while counting (``count_statements``)."""

    active = False
    commands: ClassVar[collections.Counter[str]] = collections.Counter()
    written: ClassVar[collections.Counter[str]] = collections.Counter()


def _listen() -> None:
    """Register the counting listener once per process (monitoring cannot unregister one):
    clients made after it report to it, and it counts only while ``_Counts.active``."""
    from pymongo import monitoring

    if getattr(_listen, "done", False):
        return

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if not _Counts.active:
                return
            name = event.command_name
            target = event.command.get(name)
            _Counts.commands[name] += 1
            if name in ("insert", "update") and isinstance(target, str):
                batch = event.command.get("documents") or event.command.get("updates") or ()
                _Counts.written[target] += len(batch)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    monitoring.register(Listener())
    _listen.done = True  # type: ignore[attr-defined]


_SETUP = {"createIndexes", "listIndexes", "hello", "isMaster", "ismaster", "saslStart", "saslContinue"}


_SETUP |= {"connectionStatus", "endSessions", "buildInfo", "ping"}


def count_statements(maildir: Path, batch_size: int = 100) -> Doc:
    """Commands per batch and documents written per message of one ``aecs-mongo ingest``, run in
    this process on a throw-away embedded server (the default replica set), counted by command
    monitoring (untimed). Set-up commands (indexes, the handshake) are left out of the batches'."""
    from aecs_mongo import cli
    from aecs_mongo.embedded.server import EmbeddedServer

    _listen()
    messages = sum(1 for _ in (maildir / "cur").iterdir())
    _Counts.commands.clear()
    _Counts.written.clear()
    with EmbeddedServer() as server:
        _Counts.active = True
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                argv = ["--uri", server.uri, "ingest", "--no-progress", "--batch-size", str(batch_size)]
                cli.main([*argv, str(maildir)])
        finally:
            _Counts.active = False
    batches = -(-messages // batch_size)
    per_batch = sum(n for name, n in _Counts.commands.items() if name not in _SETUP) / batches
    return {
        "commandsPerBatch": round(per_batch, 1),
        "documentsPerMessage": round(sum(_Counts.written.values()) / messages, 2),
        "commands": dict(_Counts.commands),
        "written": dict(_Counts.written),
    }


def bench_mail_tools(sizes: list[int], rounds: int, baseline: str | None = None, count: bool = True) -> list[Doc]:
    """The table's rows: one per size, every installed tool's median messages/s; ``baseline``:
    another environment's python, whose ``aecs-mongo ingest`` runs as one more tool (its rounds
    between ours, so the machine's load hits both) and ``ours_vs_baseline`` its time / ours."""
    compile_bytecode()
    installed = ["aecs-mongo", "aecs-mongo-gridfs"] + [tool for tool in TOOLS[2:] if shutil.which(tool)]
    if baseline:
        installed.insert(1, "baseline")
        compiled = (
            "import aecs_mongo, compileall, os; compileall.compile_dir(os.path.dirname(aecs_mongo.__file__), quiet=1)"
        )
        env = {k: v for k, v in tool_env().items() if k != "PYTHONPATH"}
        subprocess.run([baseline, "-c", compiled], check=True, env=env, cwd=tempfile.gettempdir())
    rows: list[Doc] = []
    # one directory for every size, removed at the end (``set_aside``: no round follows a removal)
    with tempfile.TemporaryDirectory(prefix="aecs-bench-ingest-") as top:
        for size in sizes:
            rows.append(_tools_row(Path(top) / str(size), size, rounds, installed, baseline, count))
    return rows


def _tools_row(work: Path, size: int, rounds: int, installed: list[str], baseline: str | None, count: bool) -> Doc:
    """One size of ``bench_mail_tools``, under ``work``."""
    work.mkdir()
    maildir = work / "Maildir"
    nbytes = write_maildir(maildir, size)
    read_all(maildir)
    times: dict[str, list[float]] = {tool: [] for tool in installed}
    sizes_on_disk: dict[str, list[int]] = {tool: [] for tool in installed}
    parts_of: dict[str, list[dict[str, int]]] = {tool: [] for tool in installed}
    starts: list[float] = []
    for r in range(rounds):
        order = installed[r % len(installed) :] + installed[: r % len(installed)]
        for tool in order:
            parts: dict[str, int] | None = None
            if tool == "baseline":
                seconds, _, parts = run_ours(maildir, work, python=baseline)
            elif tool.startswith("aecs-mongo"):
                blobs = "gridfs" if tool == "aecs-mongo-gridfs" else None
                seconds, start, parts = run_ours(maildir, work, blobs)
                starts.append(start)
            elif tool == "notmuch":
                seconds, used = run_notmuch(maildir, work)
            else:
                seconds, used = run_mu(maildir, work)
            if parts is not None:
                used = sum(parts.values())
                parts_of[tool].append(parts)
            times[tool].append(seconds)
            sizes_on_disk[tool].append(used)
            print(
                f"  ingest {size}: {tool} round {r + 1}: {size / seconds:.0f} msgs/s,"
                f" {used / 1e6:.0f} MB on disk ({used / nbytes:.2f}x the Maildir)"
                + (f": {parts_line(parts)}" if parts is not None else ""),
                flush=True,
            )
    counted = count_statements(maildir) if count else {}
    row: Doc = {"messages": size, "MB": round(nbytes / 1e6, 1), "rounds": rounds}
    for tool in (*TOOLS, "baseline"):
        if tool in times:
            median = statistics.median(times[tool])
            row[f"{tool}_s"] = round(median, 2)
            row[f"{tool}_msgs_per_s"] = round(size / median)
            row[f"{tool}_rounds"] = [round(size / t) for t in times[tool]]
            # what the tool keeps beside the Maildir (ours: the whole data directory)
            row[f"{tool}_disk_x"] = round(statistics.median(sizes_on_disk[tool]) / nbytes, 2)
            if parts_of[tool]:  # ours: the data directory by part, MB (the median of each)
                row[f"{tool}_parts_MB"] = {
                    kind: round(statistics.median(p[kind] for p in parts_of[tool]) / 1e6, 1) for kind in PARTS
                }
        elif tool != "baseline":
            row[f"{tool}_msgs_per_s"] = "not installed"
    if "notmuch" in times:
        ours, notmuch = statistics.median(times["aecs-mongo"]), statistics.median(times["notmuch"])
        row["ours_vs_notmuch"] = round(notmuch / ours, 2)
    if "baseline" in times:
        row["ours_vs_baseline"] = round(
            statistics.median(times["baseline"]) / statistics.median(times["aecs-mongo"]), 2
        )
    row["dir_vs_gridfs"] = round(
        statistics.median(times["aecs-mongo-gridfs"]) / statistics.median(times["aecs-mongo"]), 2
    )
    row["server_start_s"] = round(statistics.median(starts), 1)
    row["commandsPerBatch"] = counted.get("commandsPerBatch", "-")
    row["documentsPerMessage"] = counted.get("documentsPerMessage", "-")
    row["load"] = os.getloadavg()[0]
    print("  ingest", json.dumps(row), flush=True)
    return row


def parts_rows(rows: list[Doc]) -> list[Doc]:
    """One row per size and variant of ours: its data directory by part (``data_dir_parts``)."""
    out: list[Doc] = []
    for row in rows:
        for tool in ("aecs-mongo", "aecs-mongo-gridfs", "baseline"):
            parts = row.get(f"{tool}_parts_MB")
            if parts:
                every = round(sum(parts.values()), 1)
                out.append(
                    {
                        "messages": row["messages"],
                        "MB": row["MB"],
                        "tool": tool,
                        **parts,
                        "all": every,
                        "x": round(every / row["MB"], 2) if row["MB"] else "-",
                    }
                )
    return out


COLUMNS = [
    "messages",
    "MB",
    "aecs-mongo_msgs_per_s",
    "aecs-mongo-gridfs_msgs_per_s",
    "notmuch_msgs_per_s",
    "mu_msgs_per_s",
    "ours_vs_notmuch",
    "baseline_msgs_per_s",
    "ours_vs_baseline",
    "dir_vs_gridfs",
    "aecs-mongo_disk_x",
    "aecs-mongo-gridfs_disk_x",
    "notmuch_disk_x",
    "mu_disk_x",
    "server_start_s",
    "commandsPerBatch",
    "documentsPerMessage",
    "load",
]


NAME = "ingest"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--ingest-messages", type=int, default=2000, help="messages of the driver comparison (0: skip it)"
    )
    parser.add_argument(
        "--ingest-tool-sizes",
        default="1000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="Maildir sizes for aecs-mongo ingest beside notmuch new and mu index ('' skips it)",
    )
    parser.add_argument("--ingest-tool-rounds", type=int, default=3, help="rounds of each tool (median)")
    parser.add_argument(
        "--ingest-baseline",
        metavar="PYTHON",
        help="another environment's python (an older checkout's .venv/bin/python): its aecs-mongo ingest"
        " runs beside ours in the tools' comparison, ours_vs_baseline = its median time / ours",
    )
    parser.add_argument(
        "--ingest-no-statements",
        action="store_true",
        help="skip the untimed run that counts the statements per batch (tools' comparison)",
    )
    parser.add_argument(
        "--ingest-rerun-size",
        type=int,
        default=10_000,
        help="Maildir size of the re-run comparison beside notmuch new and mu index (0: skip it)",
    )


def run(ctx: Context) -> Doc:
    args = ctx.args
    report: Doc = {}
    if args.ingest_messages:
        report["ingest"] = [bench_ingest(ctx.client, args.ingest_messages, args.ingest_rounds, False)]
        if ctx.transactions:
            report["ingest"].append(bench_ingest(ctx.client, args.ingest_messages, args.ingest_rounds, True))
        table_of(
            "ingest (ratio = raw-driver time / ours; 1.0 = driver speed)",
            report["ingest"],
            [
                "messages",
                "transactions",
                "store_s",
                "baseline_one_s",
                "store_ratio",
                "store_many_s",
                "baseline_many_s",
                "store_many_ratio",
                "store_many_msgs_per_s",
            ],
        )
    if args.ingest_tool_sizes:
        rounds = args.ingest_tool_rounds
        print(f"\n== ingest beside notmuch and mu: one Maildir of real mail, messages/s (median of {rounds})")
        report["ingest_tools"] = bench_mail_tools(
            args.ingest_tool_sizes, rounds, args.ingest_baseline, not args.ingest_no_statements
        )
        print(table(report["ingest_tools"], COLUMNS))
        table_of(
            "the embedded default's data directory by part, MB (median of the rounds; x = all of it / the Maildir)",
            parts_rows(report["ingest_tools"]),
            ["messages", "MB", "tool", *PARTS, "all", "x"],
        )
    if args.ingest_rerun_size:
        rounds = args.ingest_tool_rounds
        print(f"\n== ingest again: a re-run beside notmuch new and mu index, seconds (median of {rounds})")
        report["ingest_rerun"] = rerun_bench(args.ingest_rerun_size, rounds)
        print(table([report["ingest_rerun"]], RERUN_COLUMNS))
    return report


# --- re-runs: what a run costs when little or nothing changed -----------------------------


#: extra pairs per round of ours unchanged and our start-up (the difference is small beside the
#: noise of the shared machine)
PAIRS = 3


def rerun_changes(maildir: Path, size: int, round_: int, count: int = 100) -> None:
    """``count`` new files in ``new/`` (new messages: the stream of :func:`write_maildir` past
    its ``size`` and the rounds before) and ``count`` flag changes (``:2,S`` -> ``:2,FS``) of files
    not renamed before: what a mail fetch and a mail reader leave behind."""
    source = corpus_source()
    first = size + round_ * count
    fresh = itertools.islice(gen_mbox.messages(64, source=source), first, first + count)
    for i, raw in enumerate(fresh):
        (maildir / "new" / f"{1_800_000_000 + first + i}.{first + i}.bench").write_bytes(raw)
    seen = sorted(p for p in (maildir / "cur").iterdir() if p.name.endswith(":2,S"))
    for path in seen[:count]:
        path.rename(path.with_name(path.name[: -len(":2,S")] + ":2,FS"))


def _notmuch_env(maildir: Path, work: Path) -> dict[str, str]:
    config = work / "notmuch-config"
    config.write_text(
        f"[database]\npath={work / 'notmuch-db'}\nmail_root={maildir}\n[user]\nname=Bench\n"
        "primary_email=bench@example.com\n[new]\ntags=unread;inbox;\n[maildir]\nsynchronize_flags=true\n"
    )
    (work / "notmuch-db").mkdir(exist_ok=True)
    return {**tool_env(), "NOTMUCH_CONFIG": str(config)}


def rerun_bench(size: int, rounds: int) -> Doc:
    """The re-run row: medians of each tool's unchanged re-run and of its re-run after the
    changes of :func:`rerun_changes`, our start-up and the 100 alone."""
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="aecs-bench-rerun-") as tmp:
        work = Path(tmp)
        maildir = work / "Maildir"
        write_maildir(maildir, size)
        read_all(maildir)
        data = work / "aecs-data"
        ours = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data)]
        env = tool_env()
        tools: dict[str, list[str]] = {"aecs-mongo": [*ours, "ingest", "--no-progress", str(maildir)]}
        envs: dict[str, dict[str, str]] = {"aecs-mongo": env}
        if shutil.which("notmuch"):
            tools["notmuch"] = ["notmuch", "new", "--quiet"]
            envs["notmuch"] = _notmuch_env(maildir, work)
        if shutil.which("mu"):
            home = work / "mu-home"
            subprocess.run(["mu", "init", "--quiet", f"--muhome={home}", f"--maildir={maildir}"], check=True, env=env)
            tools["mu"] = ["mu", "index", "--quiet", f"--muhome={home}"]
            envs["mu"] = env
        empty = work / "empty"
        empty.mkdir()
        try:
            timed_command([*ours, "server", "start"], env, work)
            first = {tool: timed_command(argv, envs[tool], work) for tool, argv in tools.items()}
            print("  first runs:", {k: round(v, 2) for k, v in first.items()}, flush=True)
            unchanged: dict[str, list[float]] = {tool: [] for tool in tools}
            changed: dict[str, list[float]] = {tool: [] for tool in tools}
            start_up: list[float] = []
            pairs: list[float] = []  # ours unchanged - our start-up, timed one after the other
            alone: list[float] = []
            for r in range(rounds):
                time.sleep(1.1)  # apart from the round before: a directory changed within 50 ms is listed again
                for tool, argv in tools.items():
                    unchanged[tool].append(timed_command(argv, envs[tool], work))
                start_up.append(timed_command([*ours, "ingest", "--no-progress", str(empty)], env, work))
                for _ in range(PAIRS):  # more pairs of ours unchanged and our start-up, in turn
                    pairs.append(
                        timed_command(tools["aecs-mongo"], env, work)
                        - timed_command([*ours, "ingest", "--no-progress", str(empty)], env, work)
                    )
                rerun_changes(maildir, size, r)
                for tool, argv in tools.items():
                    changed[tool].append(timed_command(argv, envs[tool], work))
                batch = work / f"alone-{r}"
                batch.mkdir()
                for path in sorted((maildir / "new").iterdir())[-100:]:
                    shutil.copy(path, batch / path.name)
                alone.append(
                    timed_command([*ours, "--mailbox", f"alone-{r}", "ingest", "--no-progress", str(batch)], env, work)
                )
                print(
                    f"  re-run round {r + 1}: unchanged",
                    {k: round(v[-1], 3) for k, v in unchanged.items()},
                    "changed",
                    {k: round(v[-1], 3) for k, v in changed.items()},
                    f"start-up {start_up[-1]:.3f} alone {alone[-1]:.3f}",
                    flush=True,
                )
            in_process = rerun_in_process(data, maildir, rounds)
            summary = json.loads(
                subprocess.run(
                    [*ours, "ingest", "--json", "--no-progress", str(maildir)], env=env, capture_output=True, check=True
                ).stdout
            )
        finally:
            subprocess.run([*ours, "server", "stop"], env=env, cwd=work, capture_output=True)
    row: Doc = {"messages": size, "rounds": rounds, "files": summary["files"]}
    for tool in tools:
        row[f"{tool}_unchanged_s"] = round(statistics.median(unchanged[tool]), 3)
        row[f"{tool}_changed_s"] = round(statistics.median(changed[tool]), 3)
    row["in_process_unchanged_s"] = round(statistics.median(in_process), 4)
    row["start_up_s"] = round(statistics.median(start_up), 3)
    row["alone_100_s"] = round(statistics.median(alone), 3)
    # the targets, paired within each round (the machine's load moves all of a round's runs):
    # ours unchanged minus our start-up against notmuch unchanged; ours after the changes minus
    # the 100 alone against 1 s
    over_start = [u - s for u, s in zip(unchanged["aecs-mongo"], start_up, strict=True)] + pairs
    over_alone = [c - a for c, a in zip(changed["aecs-mongo"], alone, strict=True)]
    row["unchanged_minus_start_up_s"] = round(statistics.median(over_start), 3)
    row["changed_minus_alone_s"] = round(statistics.median(over_alone), 3)
    if "notmuch" in tools:
        row["unchanged_within"] = row["unchanged_minus_start_up_s"] <= row["notmuch_unchanged_s"]
    row["changed_within"] = row["changed_minus_alone_s"] <= 1.0
    row["load"] = os.getloadavg()[0]
    print("  ingest re-run", json.dumps(row), flush=True)
    return row


def rerun_in_process(data: Path, maildir: Path, rounds: int) -> list[float]:
    """The unchanged re-run's own work, in this process (``sync_files`` on a store of the
    command's database and mailbox, on its running server): what the command adds to its
    start-up, without the interpreter and the connection, which the shared machine's load moves
    by seconds."""
    from aecs_mongo import sync_files
    from aecs_mongo.embedded import background

    with background.use(data, 300) as uri:
        client: MongoClient[Doc] = MongoClient(uri)
        try:
            from aecs_mongo.pure.blob_location import BLOBS_SETTING, SETTINGS_COLLECTION

            recorded = client["aecs"][SETTINGS_COLLECTION].find_one({"_id": BLOBS_SETTING}) or {}
            store = MessageStore(client["aecs"], mailbox_id="default", blobs=recorded.get("url", "gridfs"))
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                report = sync_files(store, [maildir])
                times.append(time.perf_counter() - started)
                assert report.messages.processed == 0, report.summary()
            return times
        finally:
            client.close()


RERUN_COLUMNS = [
    "messages",
    "aecs-mongo_unchanged_s",
    "notmuch_unchanged_s",
    "mu_unchanged_s",
    "in_process_unchanged_s",
    "start_up_s",
    "unchanged_minus_start_up_s",
    "unchanged_within",
    "aecs-mongo_changed_s",
    "notmuch_changed_s",
    "mu_changed_s",
    "alone_100_s",
    "changed_minus_alone_s",
    "changed_within",
    "load",
]
