"""The ``attachments`` section: attachment text, per format and in the ingest.

1. Extraction throughput per format (attachments/s and MB/s) on the same files: the shared
   corpus's PDFs (with pypdfium2, with pypdf, and poppler's ``pdftotext`` beside them, one
   process per file as a command-line user runs it), and files made here with the real
   libraries (a DOCX with a table, an XLSX, a PPTX, an invite, a CSV, an HTML file, an attached
   message), each read by the store's own path: ``Extractor.extract`` in the limited worker
   processes (their start-up not counted: a store reuses them). For the PDFs, the share of
   ``pdftotext``'s words (alphabetic, four letters or more) each library's text holds.
2. The corpus's ingest rate with attachment text on against off (``store_many`` of the corpus
   as raw bytes into fresh mailboxes, OCR off), rounds in turn (``paired_medians``); the target
   is on >= 0.85x off.

Skipped parts say why (no corpus, no pdftotext, a library missing).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import gen_mbox

from aecs_mongo import MessageStore, parse_email
from aecs_mongo.extraction import Extractor
from aecs_mongo.extraction.formats import ExtractionError
from aecs_mongo.extraction.formats import extract as extract_here
from aecs_mongo.pure.attachment_text import builtin_kind
from benchmarks.common import Context, Doc, corpus_source, paired_medians, table_of

NAME = "attachments"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--attachments-copies", type=int, default=20, help="how many copies of each made file are read (default 20)"
    )


def corpus_pdfs() -> list[bytes]:
    """The PDFs attached to the corpus's messages."""
    found = []
    if not gen_mbox.CORPUS.is_dir():
        return found
    for path in sorted(gen_mbox.CORPUS.glob("*.eml")):
        raw = path.read_bytes()
        if b"pdf" not in raw.lower():
            continue
        parsed = parse_email(raw)
        for att, data in zip(parsed.email["attachments"], parsed.attachment_data, strict=False):
            if data and builtin_kind(att["contentType"], att["filename"]) == "pdf":
                found.append(data)
    return found


def text_pdf(pages: int) -> bytes:
    """A PDF of ``pages`` pages of text (Helvetica, 40 lines a page), written by hand."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    font = 3
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for page in range(pages):
        lines = b"".join(
            b"(Page %d line %d: the quarterly storage budget and its invoices) Tj T* " % (page, line)
            for line in range(40)
        )
        stream = b"BT /F1 10 Tf 14 TL 40 800 Td " + lines + b"ET"
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents %d 0 R"
            b" /Resources << /Font << /F1 %d 0 R >> >> >>" % (content, font)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
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


def made_files() -> dict[str, tuple[str, bytes]]:
    """One file of each other format, made with the real libraries: kind -> (content type, bytes)."""
    files: dict[str, tuple[str, bytes]] = {}
    try:
        import docx

        document = docx.Document()
        for n in range(40):
            document.add_paragraph(f"Paragraph {n} of the quarterly report on storage and budgets.")
        table = document.add_table(rows=20, cols=4)
        for r, row in enumerate(table.rows):
            for c, cell in enumerate(row.cells):
                cell.text = f"cell {r}.{c}"
        out = io.BytesIO()
        document.save(out)
        files["docx"] = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", out.getvalue())
    except ImportError:
        pass
    try:
        import xlsxwriter

        out = io.BytesIO()
        workbook = xlsxwriter.Workbook(out)
        sheet = workbook.add_worksheet("Costs")
        for r in range(500):
            sheet.write_row(r, 0, [f"item {r}", r * 1.5, "EUR", r % 7])
        workbook.close()
        files["xlsx"] = ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", out.getvalue())
    except ImportError:
        pass
    try:
        import pptx

        presentation = pptx.Presentation()
        for n in range(10):
            slide = presentation.slides.add_slide(presentation.slide_layouts[1])
            slide.shapes.title.text = f"Slide {n}: the plan"
        out = io.BytesIO()
        presentation.save(out)
        files["pptx"] = ("application/vnd.openxmlformats-officedocument.presentationml.presentation", out.getvalue())
    except ImportError:
        pass
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(
            "content.xml",
            '<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:'
            'office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
            + "<text:p>An OpenDocument paragraph of words.</text:p>" * 200
            + "</office:text></office:body></office:document-content>",
        )
    files["odt"] = ("application/vnd.oasis.opendocument.text", out.getvalue())
    files["ics"] = (
        "text/calendar",
        b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:1@b\r\nDTSTAMP:20261201T000000Z\r\n"
        b"SUMMARY:Planning\r\nLOCATION:Room 4\r\nDTSTART:20261210T100000Z\r\nDESCRIPTION:Numbers\r\n"
        b"END:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    files["csv"] = ("text/csv", "".join(f"row {n},{n * 3},ok\n" for n in range(2000)).encode())
    files["html"] = ("text/html", ("<p>An <b>HTML</b> paragraph with a <a href='x'>link</a>.</p>" * 300).encode())
    source = corpus_source()
    first = next(iter(sorted(source.glob("*.eml"))), None) if source.is_dir() else None
    if first is not None:
        files["eml"] = ("message/rfc822", first.read_bytes())
    return files


def _rate(label: str, blobs: list[bytes], seconds: float, **extra: Any) -> Doc:
    size = sum(len(b) for b in blobs)
    return {
        "format": label,
        "files": len(blobs),
        "attachments_per_s": round(len(blobs) / seconds, 1),
        "mb_per_s": round(size / 1e6 / seconds, 2),
        **extra,
    }


def _words(text: str) -> set[str]:
    return {w for w in text.split() if w.isalpha() and len(w) > 3}


def bench_pdfs(label: str, pdfs: list[bytes], extractor: Extractor) -> list[Doc]:
    """One set of PDFs read by pypdfium2 (in the workers and here), pypdf and pdftotext; the
    share of pdftotext's words each library's text holds (the least of the files)."""
    rows: list[Doc] = []
    if pdfs:
        attached = [({"idx": i, "filename": "a.pdf", "contentType": "application/pdf"}, d) for i, d in enumerate(pdfs)]
        start = time.perf_counter()
        ours = {r.idx: r.text or "" for r in extractor.extract(attached)}
        rows.append(_rate(f"{label}: pypdfium2, in the workers", pdfs, time.perf_counter() - start))
        start = time.perf_counter()
        for data in pdfs:
            with contextlib.suppress(ExtractionError):  # a broken file (the workers' pass recorded its error)
                extract_here("pdf", data, {}, {})
        rows.append(_rate(f"{label}: pypdfium2, in process", pdfs, time.perf_counter() - start))
        poppler: dict[int, str] = {}
        tool = shutil.which("pdftotext")
        if tool is not None:
            with tempfile.TemporaryDirectory() as tmp:
                paths = []
                for i, data in enumerate(pdfs):
                    paths.append(Path(tmp) / f"{i}.pdf")
                    paths[-1].write_bytes(data)
                start = time.perf_counter()
                for i, path in enumerate(paths):
                    done = subprocess.run([tool, str(path), "-"], capture_output=True, check=False)
                    poppler[i] = done.stdout.decode("utf-8", "replace")
                rows.append(_rate(f"{label}: pdftotext, a process each", pdfs, time.perf_counter() - start))
        try:
            import pypdf

            start = time.perf_counter()
            other = {}
            for i, data in enumerate(pdfs):
                try:
                    other[i] = "\n".join(p.extract_text() or "" for p in pypdf.PdfReader(io.BytesIO(data)).pages)
                except Exception:  # a file pypdf cannot read
                    other[i] = ""
            rows.append(_rate(f"{label}: pypdf, in process", pdfs, time.perf_counter() - start))
        except ImportError:
            other = {}
        if poppler:
            for name, texts in (("pypdfium2", ours), ("pypdf", other)):
                shares = [
                    len(_words(texts.get(i, "")) & _words(p)) / len(_words(p)) for i, p in poppler.items() if _words(p)
                ]
                if shares:
                    rows.append(
                        {"format": f"{label}: pdftotext's words found by {name}", "share": round(min(shares), 3)}
                    )
    return rows


def bench_formats(copies: int) -> list[Doc]:
    rows: list[Doc] = []
    extractor = Extractor()
    warm = [({"idx": 0, "filename": "w.pdf", "contentType": "application/pdf"}, text_pdf(1))]
    extractor.extract(warm * 4)  # the workers up, their PDF library imported
    pdfs = corpus_pdfs()
    if not pdfs:
        print("\n== attachments: no corpus PDFs (../shared/corpus/eml): those rows are left out")
    rows += bench_pdfs("corpus PDFs", pdfs, extractor)
    rows += bench_pdfs("50-page PDFs", [text_pdf(50)] * max(4, copies // 4), extractor)
    for kind, (ctype, data) in made_files().items():
        blobs = [data] * copies
        items = [({"idx": i, "filename": f"f.{kind}", "contentType": ctype}, d) for i, d in enumerate(blobs)]
        start = time.perf_counter()
        extractor.extract(items)
        rows.append(_rate(kind, blobs, time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(copies):
            extract_here(builtin_kind(ctype, f"f.{kind}") or "text", data, {"contentType": ctype}, {})
        rows[-1]["in_process_per_s"] = round(copies / (time.perf_counter() - start), 1)
    return rows


def bench_ingest(ctx: Context, rounds: int) -> Doc:
    """``store_many`` of the corpus as raw bytes, attachment text on against off."""
    raws = list(itertools.islice(gen_mbox.messages(64, source=corpus_source()), 0, 600))
    db = ctx.client["aecs_bench_attachments"]
    counter = itertools.count()
    MessageStore(db, mailbox_id="indexes").ensure_indexes()

    def run(on: bool) -> None:
        store = MessageStore(db, mailbox_id=f"m{next(counter)}", attachment_text=on, durable=False)
        list(store.store_iter(raws, batch_size=100))
        store.erase_mailbox()

    try:
        t_on, t_off = paired_medians(lambda: run(True), lambda: run(False), rounds)
    finally:
        ctx.client.drop_database("aecs_bench_attachments")
    return {
        "messages": len(raws),
        "on_msgs_per_s": round(len(raws) / t_on, 1),
        "off_msgs_per_s": round(len(raws) / t_off, 1),
        "on_vs_off": round(t_off / t_on, 3),
    }


def run(ctx: Context) -> Doc:
    rows = bench_formats(ctx.args.attachments_copies)
    table_of(
        "attachments: extraction per format",
        rows,
        ["format", "files", "attachments_per_s", "mb_per_s", "in_process_per_s", "share"],
    )
    ingest = bench_ingest(ctx, max(3, ctx.args.rounds // 3))
    table_of("attachments: corpus ingest, text on against off (target on >= 0.85x off)", [ingest], list(ingest))
    return {"attachments": {"formats": rows, "ingest": ingest}}
