"""The ``storedonce`` section: the room the mail takes when attachments repeat.

1. Maildirs of real mail with forwarded attachments (``--storedonce-sizes``, messages of the
   corpus): the corpus repeated with fresh Message-IDs (as the ``ingest`` section writes it)
   plus a deal thread of ``--storedonce-deal-messages`` replies that forward four contract PDFs
   (a few hundred KB each: text pages and a scanned page, compressed as real PDFs are) back and
   forth, each reply carrying all or some of the four as base64 attachments. For each Maildir:
   ``aecs-mongo ingest`` on the command line's embedded default (no ``--uri``: a fresh data
   directory, its server started first, untimed) and ``notmuch new`` into a fresh database,
   rounds in turn (messages/s: files / wall seconds, medians); ours' data directory once its
   server stopped, whole and by part (the server's journal, its oplog, its data and index files,
   the search index, the blob directory), as a multiple of the Maildir's bytes, beside notmuch's
   index plus the mail it indexes; then ``aecs-mongo export --format maildir --variants``
   compared byte for byte with the input (``byte-exact: N of N``: input files whose exact bytes
   are among the exported files). ``repeated_MB``: the encoded attachment bodies of the Maildir
   that repeat one met before in it (the thread's forwards, and the corpus's own attachments,
   which repeat with every round of it): what storing each body once can save before
   compression.
2. The same attachment (``--storedonce-attachment-kb``, a contract PDF) in
   ``--storedonce-copies`` different messages, stored by a ``MessageStore`` on GridFS, on a
   directory (``file:///...``) and on S3 (moto's server as a subprocess; left out where moto,
   boto3 or obstore is not installed): the bytes the blob store holds for them, and that as a
   multiple of the attachment's size (stored once: about 1x).

Only the second part: ``--storedonce-sizes ''``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email
import email.message
import email.policy
import hashlib
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from pymongo.database import Database

from aecs_mongo import MessageStore
from benchmarks.common import (
    Context,
    Doc,
    compile_bytecode,
    corpus_source,
    disk_usage,
    read_all,
    run_notmuch,
    set_aside,
    table_of,
    timed_command,
    tool_env,
    write_maildir,
)

NAME = "storedonce"
DEFAULT = False

MB = 1e6


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--storedonce-sizes",
        default="3000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="messages of the corpus in each Maildir, the deal thread added ('' skips the Maildirs)",
    )
    parser.add_argument("--storedonce-rounds", type=int, default=3, help="ingest rounds of each tool (median)")
    parser.add_argument(
        "--storedonce-deal-messages", type=int, default=60, help="replies of the deal thread (default 60)"
    )
    parser.add_argument(
        "--storedonce-copies", type=int, default=20, help="messages carrying the same attachment (default 20)"
    )
    parser.add_argument(
        "--storedonce-attachment-kb", type=int, default=300, help="size of that attachment in KB (default 300)"
    )


# --- contract PDFs, written by hand -------------------------------------------------------------

_VOCABULARY = (
    "agreement party parties seller buyer purchaser shares closing completion consideration warranty warranties "
    "indemnity liability claim claims notice period business day schedule clause subject conditions precedent "
    "escrow agent account release amount deferred payment earn-out disclosure letter material adverse change "
    "governing law jurisdiction courts england wales termination breach remedy damages limitation cap basket "
    "threshold tax covenant employees pension intellectual property licence assignment confidentiality "
    "announcement costs counterparts entire variation waiver severance third rights notices accounts date "
    "relevant reasonable endeavours consent obligation pursuant hereto thereof whereas herein provided that"
)
_WORDS = tuple(_VOCABULARY.split())


def _page_text(rng: random.Random, title: str, page: int) -> bytes:
    """One page's content stream: a heading and 48 lines of clause text in Helvetica."""
    lines = [f"({title} - page {page + 1}) Tj T* T*".encode()]
    for line in range(48):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(9, 14)))
        lines.append(f"({page + 1}.{line + 1} {words}.) Tj T*".encode())
    return b"BT /F1 9 Tf 12 TL 50 800 Td " + b" ".join(lines) + b" ET"


def _scan_jpeg(rng: random.Random, size: int) -> tuple[bytes, int, int]:
    """A grey JPEG of noise (a scanned signature page) of about ``size`` bytes: (bytes, width, height)."""
    from PIL import Image

    def jpeg(width: int, height: int) -> bytes:
        image = Image.frombytes("L", (width, height), rng.randbytes(width * height))
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=60)
        return out.getvalue()

    width = 800
    per_row = len(jpeg(width, 100)) / 100
    height = max(8, int(size / per_row))
    return jpeg(width, height), width, height


def _pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 the catalog), with its cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _stream(dictionary: bytes, data: bytes) -> bytes:
    return b"<< " + dictionary + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def contract_pdf(title: str, kb: int, seed: int, pages: int = 12) -> bytes:
    """A contract of ``pages`` pages of clause text (deflated, as a word processor writes them)
    and a last page scanned (a JPEG), about ``kb`` KB in all: as incompressible as a real one."""
    rng = random.Random(seed)
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", font]  # the page tree: once its pages are known
    kids: list[int] = []

    def page(content: bytes, resources: bytes) -> None:
        objects.append(_stream(b"/Filter /FlateDecode", zlib.compress(content, 6)))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents %d 0 R /Resources << %s >> >>"
            % (len(objects), resources)
        )
        kids.append(len(objects))

    for n in range(pages):
        page(_page_text(rng, title, n), b"/Font << /F1 3 0 R >>")
    text_bytes = sum(len(o) for o in objects)
    scan, width, height = _scan_jpeg(rng, max(1024, kb * 1000 - text_bytes - 2000))
    image = b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray" % (width, height)
    objects.append(_stream(image + b" /BitsPerComponent 8 /Filter /DCTDecode", scan))
    page(b"q 495 0 0 742 50 50 cm /Scan Do Q", b"/XObject << /Scan %d 0 R >>" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    return _pdf_file(objects)


# --- the deal thread ------------------------------------------------------------------------------

#: the four contracts the thread forwards: file name, size in KB
CONTRACTS = (
    ("Share Purchase Agreement.pdf", 300),
    ("Disclosure Letter.pdf", 220),
    ("Escrow Agreement.pdf", 160),
    ("Term Sheet.pdf", 120),
)

_PEOPLE = (
    ("Anna Keller", "anna.keller@buyer-law.example"),
    ("Tom Reyes", "tom.reyes@seller-law.example"),
    ("Mia Chen", "mia.chen@falcon-holdings.example"),
)

_REPLIES = (
    "Please find attached our comments on the drafts.",
    "Attached are the revised drafts; the changes are in clause 7 and the escrow release.",
    "Forwarding the current versions for your review before tomorrow's call.",
    "We accept most of the changes. Our remaining points are marked in the attached.",
    "Attached for signature, subject to the points below.",
)


def _deal_message(n: int, pdfs: dict[str, bytes], start: datetime) -> bytes:
    """The ``n``-th reply of the thread, carrying all four contracts every fourth time, else a
    rotating one or two of them."""
    sender, recipient = _PEOPLE[n % 3], _PEOPLE[(n + 1) % 3]
    names = list(pdfs)
    carried = names if n % 4 == 0 else [names[(n + k) % 4] for k in range(1 + n % 2)]
    msg = email.message.EmailMessage()
    msg["From"] = f"{sender[0]} <{sender[1]}>"
    msg["To"] = f"{recipient[0]} <{recipient[1]}>"
    msg["Cc"] = f"{_PEOPLE[(n + 2) % 3][0]} <{_PEOPLE[(n + 2) % 3][1]}>"
    msg["Subject"] = ("Re: " if n else "") + "Project Falcon: contract drafts"
    msg["Date"] = format_datetime(start + timedelta(hours=7 * n))
    msg["Message-ID"] = f"<falcon-{n}@deal.example>"
    if n:
        msg["In-Reply-To"] = f"<falcon-{n - 1}@deal.example>"
        msg["References"] = " ".join(f"<falcon-{k}@deal.example>" for k in range(max(0, n - 10), n))
    quoted = "\n".join(f"> {line}" for line in _REPLIES[(n - 1) % len(_REPLIES)].splitlines()) if n else ""
    msg.set_content(f"Dear {recipient[0].split()[0]},\n\n{_REPLIES[n % len(_REPLIES)]}\n\n{sender[0]}\n\n{quoted}\n")
    for name in carried:
        msg.add_attachment(pdfs[name], maintype="application", subtype="pdf", filename=name)
    return msg.as_bytes(policy=email.policy.default)


def deal_thread(count: int) -> list[bytes]:
    """The thread's ``count`` messages, oldest first."""
    pdfs = {name: contract_pdf(name.removesuffix(".pdf"), kb, seed) for seed, (name, kb) in enumerate(CONTRACTS)}
    start = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)
    return [_deal_message(n, pdfs, start) for n in range(count)]


def write_mail(maildir: Path, size: int, deal: int) -> tuple[int, int]:
    """The Maildir: ``size`` messages of the corpus and the deal thread's ``deal``; (its bytes,
    the thread's)."""
    corpus = write_maildir(maildir, size)
    thread = 0
    for n, raw in enumerate(deal_thread(deal)):
        (maildir / "cur" / f"{1_750_000_000 + n}.falcon{n}.bench:2,S").write_bytes(raw)
        thread += len(raw)
    return corpus + thread, thread


def repeated_attachment_bytes(maildir: Path) -> int:
    """Bytes of the encoded attachment bodies that repeat one met before in the Maildir."""
    seen: set[bytes] = set()
    repeated = 0
    for path in sorted((maildir / "cur").iterdir()):
        parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.compat32)
        for part in parsed.walk():
            if not (part.get_filename() or part.get_content_disposition() == "attachment"):
                continue
            payload = part.get_payload()
            if not isinstance(payload, str):
                continue
            body = payload.encode("ascii", "surrogateescape")
            digest = hashlib.sha256(body).digest()
            repeated += len(body) if digest in seen else 0
            seen.add(digest)
    return repeated


# --- ours and notmuch on a Maildir ----------------------------------------------------------------


def data_part(relative: Path) -> str:
    """Which part of the embedded server's data directory a file is."""
    top, name = relative.parts[0], relative.name
    if top in ("blobs", "search"):
        return top
    if top != "db":
        return "other"
    if name.startswith(("WiredTigerLog.", "WiredTigerPreplog.", "WiredTigerTmplog.")):
        return "journal"
    if "oplog" in name:
        return "oplog"
    if "index_entries" in name or "unique_keys" in name:
        return "indexes"
    return "data"


PARTS = ("journal", "oplog", "data", "indexes", "search", "blobs", "other")


def data_breakdown(data: Path) -> dict[str, int]:
    """Bytes on disk of each part of a data directory (``PARTS``: allocated blocks, as ``du``
    counts them), and the blob directory's files and their own bytes (``blob_files``,
    ``blob_bytes``: what its blocks round up)."""
    parts = dict.fromkeys((*PARTS, "blob_files", "blob_bytes"), 0)
    for path in data.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.lstat()
            part = data_part(path.relative_to(data))
            parts[part] += stat.st_blocks * 512
            if part == "blobs":
                parts["blob_files"] += 1
                parts["blob_bytes"] += stat.st_size
    return parts


def file_hashes(folder: Path) -> set[bytes]:
    """SHA-256 of every file below ``folder``."""
    return {hashlib.sha256(p.read_bytes()).digest() for p in folder.rglob("*") if p.is_file()}


def byte_exact(maildir: Path, exported: Path) -> tuple[int, int, int]:
    """(input files whose exact bytes are among the exported files, input files, exported files)."""
    copies = file_hashes(exported)
    inputs = [p for p in (maildir / "cur").iterdir()]
    found = sum(hashlib.sha256(p.read_bytes()).digest() in copies for p in inputs)
    return found, len(inputs), sum(1 for p in exported.rglob("*") if p.is_file())


@dataclasses.dataclass
class OursRun:
    """One ``aecs-mongo ingest`` on the embedded default."""

    seconds: float
    parts: dict[str, int]
    exact: tuple[int, int, int] | None


def run_ours(maildir: Path, work: Path, export: bool) -> OursRun:
    """Ingest ``maildir`` into a fresh data directory (its server started first, untimed),
    measure the data directory once the server stopped; with ``export``, export the mailbox
    as a Maildir and compare it with the input."""
    data = work / "aecs-data"
    cli = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data)]
    env = {k: v for k, v in tool_env().items() if k != "AECS_BLOBS"}
    stop = [*cli, "server", "stop"]
    try:
        timed_command([*cli, "server", "start"], env, work)
        seconds = timed_command([*cli, "ingest", "--no-progress", str(maildir)], env, work)
        timed_command(stop, env, work)
        parts = data_breakdown(data)
        exact = None
        if export:
            out = work / "exported"
            timed_command([*cli, "export", "--no-progress", "--format", "maildir", "--variants", str(out)], env, work)
            exact = byte_exact(maildir, out)
            set_aside(out, work)
        return OursRun(seconds, parts, exact)
    finally:
        subprocess.run(stop, env=env, cwd=work, capture_output=True, check=False)
        set_aside(data, work)


def maildir_row(work: Path, size: int, deal: int, rounds: int) -> Doc:
    """One Maildir's row: ours and notmuch, rounds in turn."""
    maildir = work / "Maildir"
    nbytes, thread = write_mail(maildir, size, deal)
    files = size + deal
    repeated = repeated_attachment_bytes(maildir)
    read_all(maildir)
    ours, notmuch = tool_rounds(maildir, work, files, rounds)
    row: Doc = {
        "messages": files,
        "maildir_MB": round(nbytes / MB, 1),
        "maildir_du_MB": round(disk_usage(maildir) / MB, 1),
        "thread_MB": round(thread / MB, 1),
        "repeated_MB": round(repeated / MB, 1),
    }
    return row | summary_row(files, nbytes, ours, notmuch)


def tool_rounds(maildir: Path, work: Path, files: int, rounds: int) -> tuple[list[OursRun], list[tuple[float, int]]]:
    """Ours (the first run exported and compared) and notmuch (where installed), ``rounds``
    each, their order alternating."""
    has_notmuch = shutil.which("notmuch") is not None
    ours: list[OursRun] = []
    notmuch: list[tuple[float, int]] = []
    for r in range(rounds):
        for tool in ("ours", "notmuch") if r % 2 == 0 else ("notmuch", "ours"):
            if tool == "ours":
                ours.append(run_ours(maildir, work, export=not ours))
                seconds = ours[-1].seconds
            elif has_notmuch:
                notmuch.append(run_notmuch(maildir, work))
                seconds = notmuch[-1][0]
            else:
                continue
            print(f"  storedonce {files}: {tool} round {r + 1}: {files / seconds:.0f} msgs/s", flush=True)
    return ours, notmuch


def summary_row(files: int, nbytes: int, ours: list[OursRun], notmuch: list[tuple[float, int]]) -> Doc:
    """The medians and multiples of one Maildir's runs (the parts: the first run's)."""
    parts = ours[0].parts
    whole = sum(parts[part] for part in PARTS)
    row: Doc = {
        "ours_MB": round(whole / MB, 1),
        "ours_x": round(whole / nbytes, 2),
    }
    row |= {f"{part}_x": round(parts[part] / nbytes, 3) for part in PARTS}
    row |= {f"{part}_MB": round(parts[part] / MB, 1) for part in PARTS}
    row["blob_files"] = parts["blob_files"]
    row["blob_bytes_MB"] = round(parts["blob_bytes"] / MB, 1)
    row["ours_msgs_per_s"] = round(files / statistics.median(r.seconds for r in ours))
    row["ours_rounds"] = [round(files / r.seconds) for r in ours]
    if notmuch:
        row["notmuch_msgs_per_s"] = round(files / statistics.median(s for s, _ in notmuch))
        index = statistics.median(used for _, used in notmuch)
        row["notmuch_index_x"] = round(index / nbytes, 2)
        row["notmuch_total_x"] = round(1 + index / nbytes, 2)
    else:
        row["notmuch_msgs_per_s"] = "not installed"
    found, inputs, exported = ours[0].exact or (0, 0, 0)
    row["byte_exact"] = f"{found} of {inputs}"
    row["exported_files"] = exported
    row["load"] = round(os.getloadavg()[0], 2)
    return row


def bench_maildirs(sizes: list[int], deal: int, rounds: int) -> list[Doc]:
    compile_bytecode()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aecs-bench-storedonce-") as top:
        for size in sizes:
            work = Path(top) / str(size)
            work.mkdir()
            rows.append(maildir_row(work, size, deal, rounds))
            print(f"  byte-exact: {rows[-1]['byte_exact']}", flush=True)
    return rows


# --- the same attachment in many messages, on each blob store -------------------------------------


def copies_of(attachment: bytes, copies: int) -> list[bytes]:
    """``copies`` different messages, each carrying ``attachment``."""
    raws = []
    for n in range(copies):
        msg = email.message.EmailMessage()
        msg["From"] = f"{_PEOPLE[n % 3][0]} <{_PEOPLE[n % 3][1]}>"
        msg["To"] = "Owner <owner@example.com>"
        msg["Subject"] = f"The agreement, copy {n}"
        msg["Date"] = format_datetime(datetime(2026, 10, 1, tzinfo=UTC) + timedelta(hours=n))
        msg["Message-ID"] = f"<copy-{n}@once.example>"
        msg.set_content(f"Copy {n} of the agreement, attached.\n")
        msg.add_attachment(attachment, maintype="application", subtype="pdf", filename="Agreement.pdf")
        raws.append(msg.as_bytes(policy=email.policy.default))
    return raws


def gridfs_bytes(db: Database[Doc]) -> int:
    """Bytes of the GridFS chunks in ``db`` (it holds this mailbox only)."""
    return sum(len(c["data"]) for c in db["aecs.chunks"].find({}, {"data": 1}))


def directory_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@contextlib.contextmanager
def moto_bucket() -> Iterator[tuple[str, Callable[[], int]]]:
    """A bucket on moto's S3 server, started as a subprocess: (its ``s3://`` URL, a function
    counting the bytes of its objects); the AWS environment points obstore at it meanwhile."""
    import boto3

    from tests.helpers.children import free_port, serving

    port = free_port()
    server = serving([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, "moto's server")
    endpoint = f"http://127.0.0.1:{port}"
    settings = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": uuid.uuid4().hex,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="storedonce")

        def held() -> int:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket="storedonce")
            return sum(o["Size"] for page in pages for o in page.get("Contents", []))

        yield "s3://storedonce/mail", held
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.terminate()
        server.wait(timeout=30)


def s3_available() -> bool:
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def stored_bytes(ctx: Context, raws: list[bytes], blobs: str, held: Callable[[Database[Doc]], int]) -> int:
    """Store ``raws`` in a fresh database with the blob store ``blobs``; the bytes ``held`` counts."""
    name = f"aecs_bench_storedonce_{uuid.uuid4().hex[:8]}"
    try:
        store = MessageStore(ctx.client[name], mailbox_id="once", blobs=blobs)
        store.ensure_indexes()
        store.store_many(raws)
        return held(ctx.client[name])
    finally:
        ctx.client.drop_database(name)


def bench_copies(ctx: Context, copies: int, kb: int) -> list[Doc]:
    attachment = contract_pdf("Agreement", kb, seed=7)
    raws = copies_of(attachment, copies)
    measured: dict[str, int | None] = {"gridfs": stored_bytes(ctx, raws, "gridfs", gridfs_bytes)}
    with tempfile.TemporaryDirectory(prefix="aecs-bench-storedonce-") as tmp:
        root = Path(tmp)
        measured["directory"] = stored_bytes(ctx, raws, root.as_uri(), lambda _: directory_bytes(root))
    measured["s3"] = None
    if s3_available():
        with moto_bucket() as (url, objects):
            measured["s3"] = stored_bytes(ctx, raws, url, lambda _: objects())
    rows = []
    for store, held in measured.items():
        row: Doc = {"blob_store": store, "copies": copies, "attachment_KB": round(len(attachment) / 1e3, 1)}
        if held is None:
            row["held_MB"] = "moto, boto3 or obstore not installed"
        else:
            row["held_MB"] = round(held / MB, 2)
            row["x_attachment"] = round(held / len(attachment), 1)
        rows.append(row)
    return rows


MAILDIR_COLUMNS = [
    "messages",
    "maildir_MB",
    "thread_MB",
    "repeated_MB",
    "ours_MB",
    "ours_x",
    *(f"{part}_x" for part in PARTS),
    "notmuch_index_x",
    "notmuch_total_x",
    "ours_msgs_per_s",
    "notmuch_msgs_per_s",
    "byte_exact",
    "load",
]


def run(ctx: Context) -> Doc:
    args = ctx.args
    report: Doc = {}
    if args.storedonce_sizes:
        rounds = args.storedonce_rounds
        print(f"\n== stored once: Maildirs of {corpus_source()} and a deal thread (ingest median of {rounds})")
        report["storedonce_maildirs"] = bench_maildirs(args.storedonce_sizes, args.storedonce_deal_messages, rounds)
        table_of(
            "stored once: the embedded default's data directory and notmuch, x the Maildir's bytes",
            report["storedonce_maildirs"],
            MAILDIR_COLUMNS,
        )
    report["storedonce_copies"] = bench_copies(ctx, args.storedonce_copies, args.storedonce_attachment_kb)
    table_of(
        f"stored once: one attachment in {args.storedonce_copies} messages, bytes each blob store holds",
        report["storedonce_copies"],
        ["blob_store", "copies", "attachment_KB", "held_MB", "x_attachment"],
    )
    return report
