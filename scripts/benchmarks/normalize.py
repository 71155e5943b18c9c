"""The ``normalize`` section: messages/s and MB/s over the corpus (``--corpus``, ``../shared/corpus/eml``) vs the bare
stdlib parse (the floor), and vs postal-mime under node (the JavaScript parser of the AECS-1
reference). Skipped where the corpus is absent. (``scripts/bench_normalize.py`` profiles it.)

Before and after, in one run: the normalizer of an earlier commit (``--normalize-before REF``;
by default main's last commit before the parse was made faster), extracted with
``git archive`` into a temporary package ``aecs_mongo_before``, is timed in turn with today's on
the same messages, round after round (``paired_medians``); every message's output is first
checked to be the same (``email``, attachment bytes, defects, List-Id). The ratio is given for
wall-clock time and for the process's CPU time (steadier on a shared machine), with the load
average.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gen_mbox

from benchmarks.common import ROOT, Context, Doc, median_time, paired_medians, table_of

#: main before the parse was made faster: the default "before" of the comparison
BEFORE_DEFAULT = "8432051afb2af14134f9ce75d06ab4c079e86250"


def bench_normalize(rounds: int) -> Doc | None:
    corpus = gen_mbox.CORPUS
    if not corpus.is_dir():
        return None
    import email
    import email.policy

    from aecs_mongo import normalize

    blobs = [p.read_bytes() for p in sorted(corpus.glob("*.eml"))]
    total = sum(len(b) for b in blobs)

    def stdlib() -> None:
        for b in blobs:
            msg = email.message_from_bytes(b, policy=email.policy.compat32)
            for part in msg.walk():
                part.get_payload(decode=True)

    def ours() -> None:
        for b in blobs:
            normalize(b, processed_at="2026-11-30T00:00:00Z")

    t_std = median_time(stdlib, rounds)
    t_ours = median_time(ours, rounds)
    result: Doc = {
        "messages": len(blobs),
        "megabytes": total / 1e6,
        "ours_msgs_per_s": len(blobs) / t_ours,
        "ours_mb_per_s": total / 1e6 / t_ours,
        "stdlib_msgs_per_s": len(blobs) / t_std,
        "ratio_vs_stdlib": t_std / t_ours,
    }
    # the JavaScript reference point: postal-mime (npm devDependency) on the same files
    node = shutil.which("node")
    if node and (ROOT / "node_modules" / "postal-mime").is_dir():
        out = subprocess.run(
            [node, str(ROOT / "scripts" / "bench_postal_mime.mjs"), str(corpus), str(rounds)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        js = json.loads(out)
        result["postal_mime_msgs_per_s"] = js["msgsPerS"]
        result["ratio_vs_postal_mime"] = result["ours_msgs_per_s"] / js["msgsPerS"]
    return result


def _before_package(ref: str, into: Path) -> Any | None:
    """``parse_email`` of the normalizer at ``ref`` (a package ``aecs_mongo_before`` under
    ``into``), or None with the reason printed where git or the commit is missing."""
    archive = into / "before.tar"
    try:
        with archive.open("wb") as out:
            subprocess.run(["git", "-C", str(ROOT), "archive", ref, "aecs_mongo"], stdout=out, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"\n== normalize before/after: skipped (no git archive of {ref}: {exc})")
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (into / "aecs_mongo").rename(into / "aecs_mongo_before")
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module("aecs_mongo_before.normalize.parse").parse_email
    finally:
        sys.path.remove(str(into))


def _cpu_paired_medians(ours: Callable[[], object], base: Callable[[], object], rounds: int) -> tuple[float, float]:
    """``paired_medians`` in the process's CPU time (time spent waiting for a core not counted)."""
    ours(), base()  # warm
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.process_time()
            (ours, base)[i]()
            times[i].append(time.process_time() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def bench_before_after(ref: str, rounds: int) -> Doc | None:
    """Today's normalizer against the one at ``ref``, same messages, interleaved rounds."""
    corpus = gen_mbox.CORPUS
    if not corpus.is_dir():
        return None
    from aecs_mongo.normalizer import parse_email

    blobs = [p.read_bytes() for p in sorted(corpus.glob("*.eml"))]
    megabytes = sum(len(b) for b in blobs) / 1e6
    with tempfile.TemporaryDirectory(prefix="aecs-normalize-before-") as tmp:
        before = _before_package(ref, Path(tmp))
        if before is None:
            return None
        for raw in blobs:  # the same output, field for field, before any timing
            old = before(raw, processed_at="2026-11-30T00:00:00Z", max_body_bytes=None)
            new = parse_email(raw, processed_at="2026-11-30T00:00:00Z", max_body_bytes=None)
            if (old.email, old.attachment_data, old.defects, old.list_id) != (
                new.email,
                new.attachment_data,
                new.defects,
                new.list_id,
            ):
                raise SystemExit(f"normalize before/after: outputs differ on {raw[:80]!r}")

        def ours() -> None:
            for raw in blobs:
                parse_email(raw, processed_at="2026-11-30T00:00:00Z")

        def base() -> None:
            for raw in blobs:
                before(raw, processed_at="2026-11-30T00:00:00Z")

        wall_ours, wall_base = paired_medians(ours, base, rounds)
        cpu_ours, cpu_base = _cpu_paired_medians(ours, base, rounds)
    return {
        "before": ref[:12],
        "messages": len(blobs),
        "megabytes": megabytes,
        "rounds": rounds,
        "before_msgs_per_s": len(blobs) / wall_base,
        "before_mb_per_s": megabytes / wall_base,
        "after_msgs_per_s": len(blobs) / wall_ours,
        "after_mb_per_s": megabytes / wall_ours,
        "ratio_wall": wall_base / wall_ours,
        "ratio_cpu": cpu_base / cpu_ours,
        "load_1min": os.getloadavg()[0],
    }


NAME = "normalize"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--normalize-before",
        default=BEFORE_DEFAULT,
        help=(
            "the commit whose normalizer is timed beside today's"
            " ('none': skip; default: main before the parse was made faster)"
        ),
    )


def run(ctx: Context) -> Doc:
    result = bench_normalize(ctx.args.rounds // 3 or 1)
    if result is None:
        print(f"\n== normalize: skipped (no corpus at {gen_mbox.CORPUS})")
        return {"normalize": None}
    table_of("normalize (corpus)", [result], list(result))
    report: Doc = {"normalize": result}
    ref = ctx.args.normalize_before
    if ref and ref != "none":
        compared = bench_before_after(ref, max(ctx.args.rounds, 5))
        if compared is not None:
            table_of(
                "normalize: before and after (same messages, same output, interleaved rounds)",
                [compared],
                list(compared),
            )
            report["normalize_before_after"] = compared
    return report
