#!/usr/bin/env python3
"""Benchmark aecs-mongo against the raw driver (and notmuch, mu) doing the same work, in one run.

One module per section in ``scripts/benchmarks/`` (its docstring says what it measures; shared
helpers in ``benchmarks/common.py``); this file parses the arguments and runs the sections named
by ``--sections`` in the order of ``SECTIONS``. Each prints its tables; everything also goes to
a JSON file (``--json``).

Sections: ingest, durability, floor, reads, reindex, scaling, lifecycle, export, cli, memory,
search, scan, imap, normalize, vectors, agents, workers, tags, warm, attachments, storedonce (``--help`` lists
each one's options; the default list is those marked default in their module).

Usage: ``python scripts/bench.py [--sections reads,floor] [--sizes 1000,10000] [--rounds 15]
[--json out.json]``. Uses ``MONGODB_URI`` (or ``--uri``) if set, else starts the embedded server
(``--mode standalone|rs``; ``--data-dir`` keeps its data for the next run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchmarks  # noqa: F401  (puts the repository on sys.path)
import gen_mbox
from benchmarks import (
    agents,
    attachments,
    cli,
    durability,
    export,
    floor,
    hotcollection,
    imap,
    ingest,
    lifecycle,
    memory,
    normalize,
    reads,
    reindex,
    scaling,
    scan,
    search,
    storedonce,
    tags,
    vectors,
    warm,
    workers,
)
from benchmarks.common import Context
from pymongo import MongoClient

from aecs_mongo.embedded.server import EmbeddedServer

#: every section, in the order they run; a new one is a module in benchmarks/ added here
SECTIONS: list[ModuleType] = [
    ingest,
    durability,
    floor,
    reads,
    reindex,
    scaling,
    lifecycle,
    export,
    cli,
    memory,
    search,
    scan,
    imap,
    normalize,
    vectors,
    agents,
    workers,
    tags,
    hotcollection,
    warm,
    attachments,
    storedonce,
]


def parser() -> argparse.ArgumentParser:
    """The entry point's options, then one group per section (its own options)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", default=os.environ.get("MONGODB_URI"))
    p.add_argument("--mode", choices=["standalone", "rs"], default="standalone", help="embedded server mode")
    names = [section.NAME for section in SECTIONS]
    p.add_argument(
        "--sections",
        default=",".join(section.NAME for section in SECTIONS if section.DEFAULT),
        type=lambda s: [x for x in s.split(",") if x],
        help=f"comma-separated, of: {', '.join(names)}",
    )
    p.add_argument("--rounds", type=int, default=15, help="rounds per timed read or call (median)")
    p.add_argument("--ingest-rounds", type=int, default=3, help="rounds of the write sections (median)")
    p.add_argument("--json", default="bench-results.json", help="where to write the JSON report")
    p.add_argument(
        "--corpus", type=Path, default=gen_mbox.CORPUS, help=f"the real-mail corpus (default: {gen_mbox.CORPUS})"
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="the embedded server's data directory, kept (reads: mailboxes built there are reused)",
    )
    for section in SECTIONS:
        section.add_arguments(p.add_argument_group(f"section {section.NAME}"))
    return p


def run(uri: str, args: argparse.Namespace, server: str) -> dict[str, Any]:
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    report: dict[str, Any] = {"server": server, "machine": platform.platform(), "python": platform.python_version()}
    context = Context(uri, client, args)
    try:
        for section in SECTIONS:
            if section.NAME in args.sections:
                report.update(section.run(context))
    finally:
        client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("aecs_mongo").setLevel(logging.ERROR)  # rule-4 threading warnings are expected here
    args = parser().parse_args(argv)
    unknown = set(args.sections) - {section.NAME for section in SECTIONS}
    if unknown:
        print(f"bench.py: unknown sections: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    gen_mbox.CORPUS = args.corpus
    if args.uri:
        report = run(args.uri, args, "MONGODB_URI")
    else:
        with EmbeddedServer(args.data_dir, standalone=args.mode == "standalone") as server:
            report = run(server.uri, args, f"embedded SecantusDB ({args.mode})")
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
