#!/usr/bin/env python3
"""Peak RSS and wall time of ``aecs-mongo ingest`` on an mbox (the streaming check).

The CLI runs in a subprocess (``python -m aecs_mongo ingest MBOX --uri ... --db <fresh>``) and
its own peak RSS is read from ``os.wait4`` (the child's ``ru_maxrss``, KiB on Linux). The
database server is NOT the CLI's child here, so it is not counted: with ``--uri`` it is yours,
without it this script starts the embedded SecantusDB server itself (temporary data dir) and
passes its URI. A baseline (``aecs-mongo stats``, same connection) is measured too, so the
growth due to the input is visible. The fresh database is dropped afterwards.

    python scripts/gen_mbox.py --size-mb 200 --out /tmp/bench-200.mbox
    python scripts/measure_ingest_rss.py /tmp/bench-200.mbox            # embedded server
    python scripts/measure_ingest_rss.py /tmp/bench-200.mbox --uri mongodb://localhost:27017
    python scripts/measure_ingest_rss.py --size-mb 20                   # generate, then measure
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str]) -> tuple[int, float, int, bytes, bytes]:
    """(exit code, wall seconds, peak RSS in KiB, stdout, stderr) of one CLI run."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "aecs_mongo", *argv], stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return proc.returncode, seconds, usage.ru_maxrss, out.read(), err.read()


@contextlib.contextmanager
def server(uri: str | None) -> Iterator[str]:
    if uri:
        yield uri
        return
    from aecs_mongo.embedded.server import INSTALL_HINT, EmbeddedServer, embedded_available

    if not embedded_available():
        raise SystemExit(f"no --uri and no embedded server: {INSTALL_HINT}")
    with EmbeddedServer() as embedded:
        yield embedded.uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mbox", nargs="?", type=Path, help="the mbox to ingest")
    parser.add_argument("--size-mb", type=float, help="generate an mbox of this size first (scripts/gen_mbox.py)")
    parser.add_argument("--uri", default=os.environ.get("MONGODB_URI"), help="MongoDB URI (default: embedded)")
    parser.add_argument("--batch-size", default="100", help="passed to ingest (default: 100)")
    args = parser.parse_args(argv)
    if (args.mbox is None) == (args.size_mb is None):
        parser.error("give an mbox or --size-mb")
    with contextlib.ExitStack() as stack:
        mbox = args.mbox
        if mbox is None:
            sys.path.insert(0, str(REPO / "scripts"))
            from gen_mbox import write_mbox

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="aecs-rss-"))
            mbox = Path(tmp) / f"bench-{args.size_mb:g}.mbox"
            write_mbox(mbox, args.size_mb)
        uri = stack.enter_context(server(args.uri))
        db = f"aecs_rss_{uuid.uuid4().hex[:8]}"
        common = ["--uri", uri, "--db", db, "--json"]
        try:
            _, _, base_kib, _, _ = run_cli([*common, "stats"])
            code, seconds, kib, out, err = run_cli(
                [*common, "ingest", str(mbox), "--batch-size", args.batch_size, "--no-progress"]
            )
        finally:
            from pymongo import MongoClient

            with MongoClient(uri) as client:
                client.drop_database(db)
        summary = json.loads(out) if out.strip() else {}
        size_mb = mbox.stat().st_size / 1024 / 1024
        print(
            json.dumps(
                {
                    "mbox": str(mbox),
                    "mboxMB": round(size_mb, 1),
                    "exitCode": code,
                    "stored": summary.get("stored"),
                    "failed": summary.get("failed"),
                    "wallSeconds": round(seconds, 1),
                    "messagesPerSecond": round((summary.get("total") or 0) / seconds, 1) if seconds else None,
                    "peakRssMB": round(kib / 1024, 1),
                    "baselinePeakRssMB": round(base_kib / 1024, 1),
                },
                indent=2,
            )
        )
        if code != 0:
            sys.stderr.write(err.decode(errors="replace")[-2000:])
        return code


if __name__ == "__main__":
    sys.exit(main())
