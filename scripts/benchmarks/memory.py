"""The ``memory`` section: peak RSS of ``aecs-mongo ingest`` on generated mboxes of 20 and 200 MB
(measured by ``scripts/measure_ingest_rss.py`` in a process of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.common import ROOT, Context, Doc, table_of


def bench_memory(uri: str, sizes_mb: list[float]) -> list[Doc]:
    """Peak RSS of ``aecs-mongo ingest`` on generated mboxes (scripts/measure_ingest_rss.py)."""
    rows = []
    for size in sizes_mb:
        out = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "measure_ingest_rss.py"), "--size-mb", str(size), "--uri", uri],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out))
    return rows


NAME = "memory"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--memory-mb",
        default="20,200",
        type=lambda s: [float(x) for x in s.split(",")],
        help="mbox sizes (200 MB takes tens of minutes on the test server)",
    )


def run(ctx: Context) -> Doc:
    rows = bench_memory(ctx.uri, ctx.args.memory_mb)
    table_of(
        "memory (peak RSS of the ingest process; it must not grow with the mbox)",
        rows,
        ["mboxMB", "stored", "failed", "wallSeconds", "peakRssMB", "baselinePeakRssMB"],
    )
    return {"memory": rows}
