"""The ``normalize`` section: messages/s and MB/s over the corpus (``--corpus``, ``../shared/corpus/eml``) vs the bare
stdlib parse (the floor), and vs postal-mime under node (the JavaScript parser of the AECS-1
reference). Skipped where the corpus is absent. (``scripts/bench_normalize.py`` profiles it.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import gen_mbox

from benchmarks.common import ROOT, Context, Doc, median_time, table_of


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


NAME = "normalize"
DEFAULT = True


def add_arguments(parser: Any) -> None:
    pass


def run(ctx: Context) -> Doc:
    result = bench_normalize(ctx.args.rounds // 3 or 1)
    if result is None:
        print(f"\n== normalize: skipped (no corpus at {gen_mbox.CORPUS})")
        return {"normalize": None}
    table_of("normalize (corpus)", [result], list(result))
    return {"normalize": result}
