#!/usr/bin/env python3
"""Benchmark aecs_mongo.normalizer over a directory of .eml files.

Reports messages/s and MB/s (median of several rounds) for ``parse_email`` and, as the
floor, for the bare stdlib work it builds on: ``BytesParser(policy=compat32)`` (the
policy the normalizer uses), walking every part and decoding every payload. ``--profile``
adds a cProfile of one normalize round.

    python scripts/bench_normalize.py [EML_DIR] [--rounds 5] [--profile]

EML_DIR defaults to ../shared/corpus/eml relative to the repository root.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import compat32, default
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aecs_mongo.normalizer import parse_email  # noqa: E402


def stdlib_floor(raw: bytes, policy: object = compat32) -> int:
    message = BytesParser(policy=policy).parsebytes(raw)  # type: ignore[arg-type]
    total = 0
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            total += len(payload)
    return total


def normalize_one(raw: bytes) -> int:
    return len(parse_email(raw, processed_at="2026-01-01T00:00:00Z", max_body_bytes=None).email["messageId"])


def run(label: str, func: Callable[[bytes], int], messages: list[bytes], rounds: int) -> tuple[str, float, float]:
    size_mb = sum(len(m) for m in messages) / 1e6
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for raw in messages:
            func(raw)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return label, len(messages) / median, size_mb / median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eml_dir", nargs="?", default=str(REPO.parent / "shared" / "corpus" / "eml"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one normalize round")
    parser.add_argument("--compare-default-policy", action="store_true", help="also time email.policy.default")
    args = parser.parse_args()

    logging.getLogger("aecs_mongo.normalizer").setLevel(logging.ERROR)
    files = sorted(Path(args.eml_dir).glob("*.eml"))
    if not files:
        print(f"no .eml files in {args.eml_dir}", file=sys.stderr)
        return 2
    messages = [path.read_bytes() for path in files]
    print(f"{len(messages)} messages, {sum(map(len, messages)) / 1e6:.2f} MB, median of {args.rounds} rounds")

    rows = [run("stdlib floor (compat32)", stdlib_floor, messages, args.rounds)]
    if args.compare_default_policy:
        rows.append(run("stdlib (policy.default)", lambda raw: stdlib_floor(raw, default), messages, args.rounds))
    rows.append(run("aecs_mongo.normalizer", normalize_one, messages, args.rounds))
    floor = rows[0][1]
    print(f"{'':26} {'msgs/s':>10} {'MB/s':>8} {'x floor':>8}")
    for label, rate, mbps in rows:
        print(f"{label:26} {rate:10.1f} {mbps:8.2f} {floor / rate:8.2f}")

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for raw in messages:
            normalize_one(raw)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
