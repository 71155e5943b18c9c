#!/usr/bin/env python3
"""Write an mbox (mboxrd) of about a given size for the ingest memory benchmark.

Each round is the sample mailbox with every Message-ID made unique for the round (``<id>`` ->
``<r<round>.id>``, also in In-Reply-To and References, so threads stay threads), the message
without a Message-ID given a unique ``X-Gen-Round`` header, plus one synthetic message with a
body line that starts with ``From `` (quoted ``>From `` in the file) and a base64 attachment of
``--attachment-kb`` random bytes. Rounds are appended until the file reaches ``--size-mb``.

    python scripts/gen_mbox.py --size-mb 200 --out /tmp/bench-200.mbox
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples" / "mailbox"
_ID = re.compile(rb"<([^<>@\s]+@[^<>\s]+)>")
_ID_HEADERS = (b"message-id:", b"in-reply-to:", b"references:")
FROM_LINE = b"From sender@example.com Mon Nov  2 09:15:00 2026\n"
_HEADER_END = re.compile(rb"\r?\n\r?\n")
#: real mail written elsewhere (../shared/corpus/eml, or $AECS_CORPUS from a git worktree), when present
CORPUS = Path(os.environ.get("AECS_CORPUS") or REPO.parent / "shared" / "corpus" / "eml")


def _unique(raw: bytes, round_: int) -> bytes:
    """Prefix the Message-IDs in the id headers (folded lines too) with the round; mark mail
    without a usable id with a header, so its synthetic id differs per round. CRLF and LF alike."""
    match = _HEADER_END.search(raw)
    end = match.start() if match else len(raw)
    lines = raw[:end].split(b"\n")
    has_id = in_id_header = False
    for i, line in enumerate(lines):
        if line[:1] not in (b" ", b"\t"):
            lower = line.lower()
            in_id_header = lower.startswith(_ID_HEADERS)
            has_id = has_id or lower.startswith(b"message-id:")
        if in_id_header:
            lines[i] = _ID.sub(lambda m: b"<r%d.%s>" % (round_, m.group(1)), line)
    if not has_id or not any(_ID.search(line) for line in lines if line.lower().startswith(b"message-id:")):
        lines.insert(0, b"X-Gen-Round: %d" % round_)  # no usable id: the synthetic id hashes the bytes
    return b"\n".join(lines) + raw[end:]


def _synthetic(round_: int, rng: random.Random, attachment_kb: int) -> bytes:
    payload = base64.encodebytes(rng.randbytes(attachment_kb * 1024))
    return (
        b"From: Generator <gen@example.com>\n"
        b"To: alice@example.com\n"
        b"Subject: Synthetic report %d\n"
        b"Date: Tue, 03 Nov 2026 10:00:00 +0000\n"
        b"Message-ID: <synthetic-%d@gen.example.com>\n"
        b"MIME-Version: 1.0\n"
        b'Content-Type: multipart/mixed; boundary="b%d"\n'
        b"\n"
        b"--b%d\n"
        b"Content-Type: text/plain; charset=utf-8\n"
        b"\n"
        b"The report for round %d is attached.\n"
        b"\n"
        b"From the start this line looked like an mbox separator.\n"
        b"--b%d\n"
        b"Content-Type: application/octet-stream\n"
        b'Content-Disposition: attachment; filename="report-%d.bin"\n'
        b"Content-Transfer-Encoding: base64\n"
        b"\n" % ((round_,) * 7) + payload + b"--b%d--\n" % round_
    )


def _mboxrd(raw: bytes) -> bytes:
    """One mbox entry: the From_ line, ``>``-quoted ``From `` lines, a trailing empty line."""
    raw = raw.replace(b"\r\n", b"\n")
    body = b"".join(
        b">" + line if line.lstrip(b">").startswith(b"From ") else line for line in raw.splitlines(keepends=True)
    )
    if not body.endswith(b"\n"):
        body += b"\n"
    return FROM_LINE + body + b"\n"


def messages(attachment_kb: int, seed: int = 1, source: Path = SAMPLES) -> Iterator[bytes]:
    """An endless stream of unique messages, round after round: the ``.eml`` files of ``source``
    (the sample mailbox, or the real-mail corpus) with fresh Message-IDs, plus a synthetic one."""
    samples = [p.read_bytes() for p in sorted(source.glob("*.eml"))]
    if not samples:
        raise SystemExit(f"no .eml files in {source}")
    rng = random.Random(seed)
    round_ = 0
    while True:
        for raw in samples:
            yield _unique(raw, round_)
        yield _synthetic(round_, rng, attachment_kb)
        round_ += 1


def write_mbox(path: Path, size_mb: float, attachment_kb: int = 64, source: Path = SAMPLES) -> int:
    """Write the mbox; returns the number of messages written."""
    target = int(size_mb * 1024 * 1024)
    count = 0
    with open(path, "wb") as out:
        for raw in messages(attachment_kb, source=source):
            out.write(_mboxrd(raw))
            count += 1
            if out.tell() >= target:
                break
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, required=True, help="stop once the file is this large")
    parser.add_argument("--out", type=Path, required=True, help="the mbox file to write")
    parser.add_argument(
        "--attachment-kb", type=int, default=64, help="random attachment per round (default: 64; 0: none)"
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=SAMPLES,
        help=f"the .eml files to repeat (default: the sample mailbox; real mail: {CORPUS})",
    )
    args = parser.parse_args(argv)
    count = write_mbox(args.out, args.size_mb, args.attachment_kb, args.source)
    size = os.path.getsize(args.out)
    print(f"{args.out}: {count} messages, {size / 1024 / 1024:.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
