"""Attachment text: the SDK's ``attachmentsForAI`` format, the built-in extractors on files made
here with the real libraries and on the corpus PDFs, hostile files that end within their limits
with the error recorded, and the store keeping, returning and bounding the text."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import time
import zipfile
import zlib
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import attachments_for_ai
from aecs_mongo.pure.attachment_text import builtin_kind

from .helpers.paths import require_corpus

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODT = "application/vnd.oasis.opendocument.text"


# --- attachments_for_ai: the SDK's format and defaults ------------------------------------------


def test_attachments_for_ai_matches_the_sdk_format() -> None:
    long = "x" * 12483
    atts = [
        {"filename": "invoice.pdf", "contentType": "application/pdf", "extractedText": long},
        {"filename": "photo.jpg", "contentType": "image/jpeg", "extractedText": "Room B"},
        {"filename": "none.bin", "contentType": "application/octet-stream"},
    ]
    out = attachments_for_ai(atts)
    assert out == (
        '<attachment name="invoice.pdf" type="application/pdf">\n'
        + "x" * 4000
        + "\n[truncated — 4000 chars shown of 12483]\n</attachment>\n\n"
        '<attachment name="photo.jpg" type="image/jpeg">\nRoom B\n</attachment>'
    )


def test_attachments_for_ai_bounds_include_wrapper_label() -> None:
    atts = [
        {"filename": 'a"<b>.txt', "contentType": "text/plain", "extractedText": "one"},
        {"filename": "b.pdf", "contentType": "application/pdf", "extractedText": "two"},
        {"filename": "c.pdf", "contentType": "application/pdf", "extractedText": ""},
    ]
    assert attachments_for_ai([]) is None
    assert attachments_for_ai(atts[2:]) is None
    assert attachments_for_ai(atts, include=["image/*"]) is None
    assert attachments_for_ai(atts, include=["application/*"]) == (
        '<attachment name="b.pdf" type="application/pdf">\ntwo\n</attachment>'
    )
    assert attachments_for_ai(atts, wrapper=None) == "one\n\ntwo"
    assert attachments_for_ai(atts, wrapper=None, max_total_chars=5) == "one"  # "one" + 2 > 5: two is cut to 0
    assert attachments_for_ai(atts, wrapper=None, max_total_chars=6) == "one\n\nt"
    assert "&quot;&lt;b&gt;" in (attachments_for_ai(atts) or "")
    assert attachments_for_ai(atts, label=lambda a: "L", include=["text/plain"]).startswith('<attachment name="L"')  # type: ignore[union-attr]

    class Wrap:
        def wrap(self, content: str, email: Any) -> str:
            return f"[{content}]"

    assert attachments_for_ai(atts, wrapper=Wrap()) == "[one]\n\n[two]"
    assert attachments_for_ai(atts, wrapper=lambda text, att: att["filename"][0] + text) == "aone\n\nbtwo"
    with pytest.raises(TypeError):
        attachments_for_ai(atts, include="text/plain")  # type: ignore[arg-type]


def test_builtin_kind_by_type_then_extension() -> None:
    assert builtin_kind("application/pdf", "x") == "pdf"
    assert builtin_kind("APPLICATION/PDF; name=x.pdf", "") == "pdf"
    assert builtin_kind("application/octet-stream", "Report.DOCX") == "docx"
    assert builtin_kind("application/octet-stream", "noext") is None
    assert builtin_kind("text/csv", "a.csv") == "text"
    assert builtin_kind("text/calendar", "") == "calendar"
    assert builtin_kind("image/png", "") == "image"
    assert builtin_kind("application/zip", "a.pdf") is None


# --- files made with the real libraries -----------------------------------------------------------


def make_docx() -> bytes:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_paragraph("Quarterly zebrafish report")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "tablecellword"
    table.cell(1, 1).text = "omega"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_xlsx() -> bytes:
    xlsxwriter = pytest.importorskip("xlsxwriter")
    out = io.BytesIO()
    workbook = xlsxwriter.Workbook(out)
    sheet = workbook.add_worksheet("Costs")
    sheet.write(0, 0, "walrusitem")
    sheet.write(0, 1, 12.5)
    workbook.close()
    return out.getvalue()


def make_pptx() -> bytes:
    pptx = pytest.importorskip("pptx")
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Slidetitleword"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def make_odt() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr(
            "content.xml",
            '<?xml version="1.0"?><office:document-content '
            'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
            "<text:h>Heading</text:h><text:p>Opendocword here</text:p></office:text></office:body>"
            "</office:document-content>",
        )
    return out.getvalue()


ICS = (
    b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:1@t\r\n"
    b"DTSTAMP:20261201T000000Z\r\nSUMMARY:Platypus planning\r\nLOCATION:Room 4\r\n"
    b"DTSTART:20261210T100000Z\r\nDTEND:20261210T110000Z\r\nDESCRIPTION:Bring numbers\r\n"
    b"END:VEVENT\r\nEND:VCALENDAR\r\n"
)
RTF = rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard Rtfword in a paragraph.\par}"


def forwarded() -> bytes:
    inner = EmailMessage()
    inner["From"] = "Carol <carol@example.org>"
    inner["To"] = "dave@example.org"
    inner["Subject"] = "inner subject"
    inner["Message-ID"] = "<inner@example.org>"
    inner.set_content("Innerbodyword is here.\n")
    inner.add_attachment(b"Nestedcsvword,1\n", maintype="text", subtype="csv", filename="n.csv")
    return bytes(inner)


def formats() -> list[tuple[str, str, bytes, str]]:
    """(filename, content type, bytes, a word only its text holds)"""
    return [
        ("r.docx", DOCX, make_docx(), "tablecellword"),
        ("c.xlsx", XLSX, make_xlsx(), "walrusitem"),
        ("s.pptx", PPTX, make_pptx(), "Slidetitleword"),
        ("d.odt", ODT, make_odt(), "Opendocword"),
        ("i.ics", "text/calendar", ICS, "Platypus"),
        ("t.rtf", "application/rtf", RTF, "Rtfword"),
        ("p.html", "text/html", b"<p>Hello <b>narwhalword</b></p>", "narwhalword"),
        ("d.csv", "text/csv", b"name,qty\nokapiword,3\n", "okapiword"),
        ("f.eml", "message/rfc822", forwarded(), "Nestedcsvword"),
    ]


def test_each_format_gives_its_text() -> None:
    from aecs_mongo.extraction import Extractor

    made = formats()
    items = [({"idx": i, "filename": f, "contentType": t}, data) for i, (f, t, data, _) in enumerate(made)]
    found = {r.idx: r for r in Extractor().extract(items)}
    for i, (name, _, _, word) in enumerate(made):
        assert found[i].error is None, (name, found[i].error)
        assert word in (found[i].text or ""), (name, found[i].text)
    assert "Where: Room 4" in (found[4].text or "") and "When: 2026-12-10T10:00" in (found[4].text or "")
    assert "Subject: inner subject" in (found[8].text or "") and "Innerbodyword" in (found[8].text or "")


def corpus_pdfs() -> list[bytes]:
    from aecs_mongo import parse_email

    pdfs = []
    for path in sorted(require_corpus().glob("*.eml")):
        raw = path.read_bytes()
        if b"pdf" not in raw.lower():
            continue
        parsed = parse_email(raw)
        for att, data in zip(parsed.email["attachments"], parsed.attachment_data, strict=False):
            if data and builtin_kind(att["contentType"], att["filename"]) == "pdf":
                pdfs.append(data)
    return pdfs


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="pdftotext (poppler-utils) is not installed")
def test_corpus_pdfs_agree_with_pdftotext(tmp_path: Path) -> None:
    pytest.importorskip("pypdfium2")
    from aecs_mongo.extraction import Extractor

    pdfs = corpus_pdfs()
    assert pdfs
    found = Extractor().extract(
        [({"idx": i, "filename": "a.pdf", "contentType": "application/pdf"}, d) for i, d in enumerate(pdfs)]
    )
    by_idx = {r.idx: r for r in found}
    agreed = 0
    for i, data in enumerate(pdfs):
        (tmp_path / "a.pdf").write_bytes(data)
        done = subprocess.run(["pdftotext", str(tmp_path / "a.pdf"), "-"], capture_output=True, check=False)
        words = {w for w in done.stdout.decode("utf-8", "replace").split() if w.isalpha() and len(w) > 3}
        ours = set((by_idx[i].text or "").split()) if i in by_idx else set()
        if not words:
            continue
        share = len(words & ours) / len(words)
        assert share >= 0.9, (i, share, sorted(words - ours)[:20])
        agreed += 1
    assert agreed


# --- hostile files --------------------------------------------------------------------------------


def zip_bomb_docx() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            zeros = b"\0" * (1 << 20)
            for _ in range(300):  # 300 MB of zeros, a few hundred KB compressed
                member.write(zeros)
    return out.getvalue()


def encrypted_pdf() -> bytes:
    pypdf = pytest.importorskip("pypdf")
    writer = pypdf.PdfWriter()
    writer.add_blank_page(100, 100)
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def looping_pdf() -> bytes:
    """A page tree whose kid is its own parent, and an xref that points back at itself."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Contents 4 0 R >>",
        b"<< /Length 4 0 R >>\nstream\nBT ET\nendstream",
    ]
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
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref, xref)
    )
    return out.getvalue()


def huge_png() -> bytes:
    """A PNG that says 20,000 x 20,000 pixels (its pixel data cut short)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\0" * (20001 * 4))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def hostile() -> list[tuple[str, str, bytes]]:
    pdf = corpus_pdfs()[0]
    return [
        ("bomb.docx", DOCX, zip_bomb_docx()),
        ("locked.pdf", "application/pdf", encrypted_pdf()),
        ("loop.pdf", "application/pdf", looping_pdf()),
        ("cut.pdf", "application/pdf", pdf[: len(pdf) // 3]),
        ("cut.docx", DOCX, make_docx()[:500]),
    ]


def test_hostile_files_end_in_time_with_an_error() -> None:
    from aecs_mongo.extraction import Extractor

    made = hostile()
    started = time.monotonic()
    found = {
        r.idx: r
        for r in Extractor().extract(
            [({"idx": i, "filename": f, "contentType": t}, d) for i, (f, t, d) in enumerate(made)]
        )
    }
    assert time.monotonic() - started < 60
    assert "zip bomb" in (found[0].error or "")
    assert "encrypted" in (found[1].error or "")
    assert found[3].error or found[3].text is None or len(found[3].text) < 100_000
    assert found[4].error


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract (tesseract-ocr) is not installed")
def test_a_huge_image_is_refused_before_ocr() -> None:
    from aecs_mongo.extraction import Extractor

    started = time.monotonic()
    (found,) = Extractor(ocr=True).extract(
        [({"idx": 0, "filename": "big.png", "contentType": "image/png"}, huge_png())]
    )
    assert time.monotonic() - started < 60
    assert "over the OCR limit" in (found.error or "")


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract (tesseract-ocr) is not installed")
def test_ocr_reads_an_image() -> None:
    pil = pytest.importorskip("PIL.Image")
    draw_mod = pytest.importorskip("PIL.ImageDraw")
    font_mod = pytest.importorskip("PIL.ImageFont")
    image = pil.new("L", (900, 200), 255)
    try:
        font = font_mod.load_default(size=64)
    except TypeError:
        pytest.skip("Pillow too old for a sized default font")
    draw_mod.Draw(image).text((20, 60), "INVOICE 4711", fill=0, font=font)
    out = io.BytesIO()
    image.save(out, "PNG")
    from aecs_mongo.extraction import Extractor

    assert Extractor().extract([({"idx": 0, "filename": "a.png", "contentType": "image/png"}, out.getvalue())]) == []
    (found,) = Extractor(ocr=True).extract(
        [({"idx": 0, "filename": "a.png", "contentType": "image/png"}, out.getvalue())]
    )
    assert "4711" in (found.text or ""), found


def test_a_worker_past_its_limits_is_replaced() -> None:
    from aecs_mongo.extraction.sandbox import Limits, WorkerPool

    job = {"kind": "text", "data": b"hello", "attachment": {}, "options": {}}
    slow = WorkerPool(1, Limits(wall_seconds=0.001))
    try:
        assert "time limit" in (slow.run(job).error or "")
    finally:
        slow.close()
    tiny = WorkerPool(1, Limits(memory_bytes=16 * 1024 * 1024))
    try:
        assert tiny.run(job).error
    finally:
        tiny.close()
    pool = WorkerPool(1)
    try:
        assert pool.run(job).text == "hello"
        assert pool.run({**job, "data": "a\u202eb\u200bc".encode()}).text == "abc"  # hidden characters go
    finally:
        pool.close()


# --- the store ------------------------------------------------------------------------------------


def message_with(files: list[tuple[str, str, bytes]], message_id: str = "att@example.org") -> bytes:
    msg = EmailMessage()
    msg["From"] = "Bob <bob@example.org>"
    msg["To"] = "alice@example.org"
    msg["Subject"] = "files only"
    msg["Date"] = "Mon, 29 Jun 2026 14:32:00 +0000"
    msg["Message-ID"] = f"<{message_id}>"
    msg.set_content("")
    for name, ctype, data in files:
        if ctype == "message/rfc822":
            from email import message_from_bytes, policy

            msg.add_attachment(message_from_bytes(data, policy=policy.default), filename=name)
            continue
        main, sub = ctype.split("/", 1)
        msg.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return bytes(msg)


@pytest.mark.server
def test_the_store_keeps_and_bounds_attachment_text(make_store: Any) -> None:
    made = formats()
    raw = message_with([(f, t, d) for f, t, d, _ in made] + [("locked.pdf", "application/pdf", encrypted_pdf())])
    store = make_store()
    store.store(raw)
    email = store.get_message("att@example.org", include_raw=True)
    assert (
        email["content"]["rawFull"].encode("utf-8", "surrogateescape") == raw or store.get_raw("att@example.org") == raw
    )
    assert store.get_raw("att@example.org") == raw
    by_name = {a["filename"]: a for a in email["attachments"]}
    for name, _, _, word in made:
        if name == "f.eml":
            continue
        assert word in (by_name[name].get("extractedText") or ""), name
        whole = store.get_attachment_text("att@example.org", email["attachments"].index(by_name[name]))
        assert whole is not None and word in whole
    assert email["processing"]["attachmentErrors"] == [
        {"filename": "locked.pdf", "message": "the PDF is encrypted (a password is needed)"}
    ]
    assert store.get_attachment_text("att@example.org", 99) is None
    assert store.get_attachment_text("nobody@example.org", 0) is None


@pytest.mark.server
def test_extracted_text_is_cut_to_4000_and_whole_on_request(make_store: Any) -> None:
    text = ("wordy " * 2000).encode()
    store = make_store()
    store.store(message_with([("long.txt", "text/plain", text)], "long@example.org"))
    (att,) = store.get_message("long@example.org")["attachments"]
    assert len(att["extractedText"]) == 4000
    assert store.get_attachment_text("long@example.org", 0) == text.decode().strip()


@pytest.mark.server
def test_processors_come_first_and_their_failures_are_recorded(make_store: Any) -> None:
    class Upper:
        def accepts(self, att: Any) -> bool:
            return att["contentType"] == "text/plain"

        def process(self, att: Any, data: bytes) -> str:
            return data.decode().upper()

    class Broken:
        def accepts(self, att: Any) -> bool:
            return att["contentType"] == "text/csv"

        def process(self, att: Any, data: bytes) -> str:
            raise ValueError("no model today")

    store = make_store(processors=[Upper(), Broken()])
    store.store(message_with([("a.txt", "text/plain", b"quiet"), ("b.csv", "text/csv", b"x,1")], "p@example.org"))
    email = store.get_message("p@example.org")
    assert email["attachments"][0]["extractedText"] == "QUIET"
    assert "extractedText" not in email["attachments"][1]
    assert email["processing"]["attachmentErrors"] == [{"filename": "b.csv", "message": "no model today"}]
    with pytest.raises(TypeError):
        make_store(processors=[object()])


@pytest.mark.server
def test_off_and_in_for_ai(make_store: Any) -> None:
    raw = message_with([("a.txt", "text/plain", b"capybaraword")], "off@example.org")
    off = make_store("offbox", attachment_text=False)
    off.store(raw)
    assert "extractedText" not in off.get_message("off@example.org")["attachments"][0]
    assert off.get_attachment_text("off@example.org", 0) is None
    inside = make_store("forai", attachments_in_for_ai=True)
    list(inside.store_many([raw]))
    for_ai = inside.get_message("off@example.org")["content"]["forAI"]
    assert for_ai.endswith('<attachment name="a.txt" type="text/plain">\ncapybaraword\n</attachment>')


@pytest.mark.server
def test_hostile_attachments_leave_the_message_stored(make_store: Any) -> None:
    raw = message_with(hostile(), "hostile@example.org")
    store = make_store()
    started = time.monotonic()
    store.store(raw)
    assert time.monotonic() - started < 60
    assert store.get_raw("hostile@example.org") == raw
    errors = {
        e["filename"]: e["message"] for e in store.get_message("hostile@example.org")["processing"]["attachmentErrors"]
    }
    assert {"bomb.docx", "locked.pdf", "cut.docx"} <= set(errors)


# --- search ---------------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("engine", ["scan", "local"])
def test_search_finds_words_of_each_format(make_store: Any, tmp_path: Path, engine: str) -> None:
    made = formats()
    options: dict[str, Any] = {"search_engine": engine}
    if engine == "local":
        options["search_index"] = tmp_path / "index.sqlite"
    store = make_store(f"find{engine}", **options)
    store.store(message_with([(f, t, d) for f, t, d, _ in made], "found@example.org"))
    store.store(message_with([("other.txt", "text/plain", b"nothing here")], "other@example.org"))
    for name, _, _, word in made:
        hits = store.search(word)
        assert [h["messageId"] for h in hits] == ["found@example.org"], (name, word, hits.engine)
        assert hits.engine == engine
        if name != "f.eml":
            assert hits[0]["snippet"].startswith(f"[{name}] "), (name, hits[0]["snippet"])
        assert [h["messageId"] for h in store.search(f"attachmenttext:{word}")] == ["found@example.org"]
        assert store.count(f"subject:{word}") == 0
    assert [h["messageId"] for h in store.search("attachment:other")] == ["other@example.org"]
    assert store.count("attachmenttext:other") == 0  # a file name is not its text


# --- agents ---------------------------------------------------------------------------------------


@pytest.mark.server
def test_thread_context_and_the_agent_tool_reach_the_text(make_store: Any, store_flavor: str) -> None:
    long = ("okapi " * 3000).encode()
    raw = message_with([("i.ics", "text/calendar", ICS), ("long.txt", "text/plain", long)], "agent@example.org")
    store = make_store("agents")
    store.store(raw)
    thread_id = store.get_message("agent@example.org")["threadId"]
    (plain,) = store.thread_context(thread_id)
    assert "attachmentsForAI" not in plain
    (entry,) = store.thread_context(thread_id, attachments=True)
    assert entry["attachmentsForAI"].startswith('<attachment name="i.ics" type="text/calendar">\nEvent: Platypus')
    assert "[truncated — 4000 chars shown of 17999]" in entry["attachmentsForAI"]
    if store_flavor != "sync":
        return
    pytest.importorskip("pydantic")
    from aecs_mongo.agents import MailTools
    from aecs_mongo.errors import ToolError

    tools = MailTools(store)
    first = tools.get_attachment_text("agent@example.org", 1, max_chars=1000)
    assert first["mail"]["filename"] == "long.txt" and len(first["mail"]["text"]) == 1000
    assert first["textChars"] == 17999 and first["nextOffset"] == 1000
    last = tools.get_attachment_text("agent@example.org", 1, offset=17000, max_chars=32000)
    assert last["nextOffset"] is None and last["mail"]["text"].endswith("okapi")
    with pytest.raises(ToolError):
        tools.get_attachment_text("agent@example.org", 5)
    plain_thread = tools.get_thread(thread_id)["mail"]["messages"][0]["text"]
    with_text = tools.get_thread(thread_id, attachments=True)["mail"]["messages"][0]["text"]
    assert "<attachment" not in plain_thread and '<attachment name="i.ics"' in with_text


# --- later: the deferred mode, the upgrade, and every tier on delete ------------------------------


@pytest.mark.server
def test_extract_later_then_pending_and_reindex_fill_the_text(make_store: Any, db: Any, tmp_path: Path) -> None:
    raws = [
        message_with([("a.txt", "text/plain", f"lemurword{n}".encode())], f"later{n}@example.org") for n in range(3)
    ]
    later = make_store("later", extract_later=True, search_engine="scan")
    list(later.store_many(raws))
    assert later.get_attachment_text("later0@example.org", 0) is None
    assert later.count("lemurword0") == 0
    seen: list[int] = []
    assert later.extract_pending(limit=2, progress=seen.append) == 2 and seen == [1, 2]
    assert later.extract_pending() == 1  # resumes: only what is left
    assert later.extract_pending() == 0
    assert later.get_attachment_text("later2@example.org", 0) == "lemurword2"
    assert [h["messageId"] for h in later.search("lemurword1")] == ["later1@example.org"]
    # mail stored before attachment text existed: no mark, no text; reindex reads it
    old = make_store("older", search_index=tmp_path / "i.sqlite")
    old.store(message_with([("b.txt", "text/plain", b"tapirword")], "old@example.org"))
    db.messages.update_one({"mailboxId": "older"}, {"$unset": {"attachmentsRead": 1, "attachments.0.textChars": 1}})
    db.bodies.update_one({"mailboxId": "older"}, {"$unset": {"attachmentTexts": 1}})
    assert old.get_attachment_text("old@example.org", 0) is None
    report = old.reindex()
    assert report["attachmentsRead"] == 1
    assert old.get_attachment_text("old@example.org", 0) == "tapirword"
    assert [h["messageId"] for h in old.search("tapirword")] == ["old@example.org"]
    assert old.reindex()["attachmentsRead"] == 0


@pytest.mark.server
def test_delete_and_erase_leave_no_attachment_text(make_store: Any, db: Any) -> None:
    store = make_store("gone")
    store.store(message_with([("a.txt", "text/plain", b"dingoword")], "gone@example.org"))
    store.store(message_with([("b.txt", "text/plain", b"dingoword")], "gone2@example.org"))
    assert db.bodies.count_documents({"mailboxId": "gone", "attachmentTexts.text": "dingoword"}) == 2
    assert store.delete("gone@example.org")
    assert db.bodies.count_documents({"mailboxId": "gone", "attachmentTexts.text": "dingoword"}) == 1
    assert store.count("dingoword") == 1
    store.erase_mailbox()
    for name in db.list_collection_names():
        assert db[name].count_documents({"mailboxId": "gone"}) == 0, name


# --- the command line -----------------------------------------------------------------------------


@pytest.mark.server
def test_extract_lists_prints_and_saves_safely(cli: Any, tmp_path: Path) -> None:
    from aecs_mongo.commands.attachments import safe_name

    raw = message_with(
        [
            ("../../escape.txt", "text/plain", b"quokkaword"),
            ("i.ics", "text/calendar", ICS),
            ("blob.bin", "application/octet-stream", b"\x00\x01"),
        ],
        "cli@example.org",
    )
    (tmp_path / "m.eml").write_bytes(raw)
    assert cli("ingest", str(tmp_path / "m.eml"), "--ocr").code == 0
    listed = cli("extract", "cli@example.org", "--json").json()
    parts = listed["parts"]
    assert [p["index"] for p in parts] == [0, 1, 2] and parts[0]["filename"] == "../../escape.txt"
    assert parts[0]["textChars"] == 10 and parts[1]["textChars"] > 0 and parts[2]["textChars"] == 0
    shown = cli("extract", "cli@example.org").out
    assert "10 chars of text" in shown and "no text" in shown
    assert cli("extract", "cli@example.org", "--text", "0").out == "quokkaword\n"
    assert cli("extract", "cli@example.org", "--text", "2").code != 0
    assert "has text: extract --text" in cli("show", "cli@example.org").out
    out = tmp_path / "out"
    saved = cli("extract", "cli@example.org", "--save", str(out), "--json").json()["saved"]
    assert sorted(p.name for p in out.iterdir()) == ["blob.bin", "escape.txt", "i.ics"]
    assert (out / "escape.txt").read_bytes() == b"quokkaword" and len(saved) == 3
    assert not (tmp_path / "escape.txt").exists()
    (out / "escape.txt").write_bytes(b"mine")
    again = cli("extract", "cli@example.org", "--save", str(out))
    assert again.code != 0 and (out / "escape.txt").read_bytes() == b"mine"
    assert cli("extract", "cli@example.org", "--save", str(out), "--overwrite").code == 0
    assert (out / "escape.txt").read_bytes() == b"quokkaword"
    assert safe_name("..\\..\\a:b", 3) == "a_b" and safe_name("...", 4) == "attachment-4"
    assert cli("extract", "--pending", "--json").json() == {"read": 0}


def test_texts_too_large_for_the_body_move_to_its_spill_object() -> None:
    import json
    from types import SimpleNamespace

    from aecs_mongo.normalizer.build import RawSpec, build_raw
    from aecs_mongo.pure.documents.attachment_texts import attachment_items, texts_by_idx, with_attachment_texts

    raw = message_with([("a.txt", "text/plain", b"x" * 100), ("b.txt", "text/plain", b"y")], "spill@example.org")
    docs = build_raw(RawSpec("box", frozenset(), 8000), raw, None, None, None)
    assert [att["idx"] for att, _ in attachment_items(docs)] == [0, 1]
    found = [
        SimpleNamespace(idx=0, filename="a.txt", text="x" * 5000, error=None),
        SimpleNamespace(idx=1, filename="b.txt", text=None, error="no"),
    ]
    small = with_attachment_texts(docs, found, body_spill_bytes=2000)
    assert "attachmentTexts" not in small.body and small.body["spill"].endswith("/body.json")
    assert "body.json" in small.message["blobs"]
    (blob,) = [b for b in small.blobs if b.key == small.body["spill"]]
    assert texts_by_idx(json.loads(blob.data)["attachmentTexts"]) == {"0": "x" * 5000}
    assert small.message["attachments"][0]["textChars"] == 5000 and "textChars" not in small.message["attachments"][1]
    assert small.message["attachmentErrors"] == [{"filename": "b.txt", "message": "no"}]


@pytest.mark.server
@pytest.mark.one_server
def test_the_ingest_command_ends_hostile_files_in_time_and_memory(servers: Any, backend: str, tmp_path: Path) -> None:
    """``aecs-mongo ingest`` of a message of hostile attachments: done within 60 s, its
    processes (the command and its extraction workers) under 700 MB at their peak."""
    import json
    import sys

    from .helpers.cli import command_env

    (tmp_path / "m.eml").write_bytes(message_with(hostile(), "cmd-hostile@example.org"))
    command = [sys.executable, "-m", "aecs_mongo", "--uri", servers.uri(backend), "--db", "aecs_hostile"]
    measure = (
        "import json, resource, subprocess, sys, time\n"
        "start = time.monotonic()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps({'code': done.returncode, 'seconds': time.monotonic() - start, 'peak': peak,"
        " 'err': done.stderr.decode()[-2000:]}))\n"
    )
    env = {**command_env(), "AECS_DATA_DIR": str(tmp_path / "data")}
    ran = subprocess.run(
        [sys.executable, "-c", measure, *command, "ingest", str(tmp_path / "m.eml"), "--no-progress"],
        capture_output=True,
        env=env,
        timeout=120,
        check=True,
    )
    report = json.loads(ran.stdout)
    assert report["code"] == 0, report["err"]
    assert report["seconds"] < 60 and report["peak"] < 700 * 1024 * 1024, report
    shown = subprocess.run([*command, "extract", "cmd-hostile@example.org", "--json"], capture_output=True, env=env)
    errors = {e["filename"] for e in json.loads(shown.stdout)["attachmentErrors"]}
    assert {"bomb.docx", "locked.pdf", "cut.docx"} <= errors


def test_the_calendar_reader_without_icalendar_and_image_sizes_from_headers() -> None:
    from aecs_mongo.extraction.formats import _calendar_plain, _image_size

    text = _calendar_plain(
        ICS.decode() + "BEGIN:VEVENT\r\nSUMMARY:Second\r\n  part\r\nDTSTART:20261211\r\nEND:VEVENT\r\n"
    )
    assert text.startswith("Event: Platypus planning\nWhen: 2026-12-10T10:00:00+00:00 to 2026-12-10T11:00:00+00:00")
    assert "Where: Room 4\nBring numbers" in text and text.endswith("Event: Second part\nWhen: 2026-12-11")
    assert _image_size(huge_png()) == (20000, 20000)
    jpeg = b"\xff\xd8\xff\xe0\x00\x04ab\xff\xc0\x00\x11\x08\x01\x2c\x02\x58\x03"
    assert _image_size(jpeg) == (600, 300)
    assert _image_size(b"GIF89a\x10\x00\x20\x00") == (16, 32)
    assert _image_size(b"not an image") is None


# --- the MongoDB engines ($text, Atlas Search) --------------------------------------------------


def test_the_mongodb_engines_search_attachment_text() -> None:
    from aecs_mongo.pure.indexes import ATLAS_SEARCH_INDEX, INDEXES, TEXT_WEIGHT
    from aecs_mongo.pure.search_compile import atlas_search, text_search
    from aecs_mongo.pure.search_query import parse

    (spec,) = [s for s in INDEXES if s.name == "aecs_bodies_search"]
    assert ("attachmentTexts.text", "text") in spec.keys
    weights = spec.text_weights()
    assert weights == {"subject": TEXT_WEIGHT, "clean": TEXT_WEIGHT, "attachmentTexts.text": 1} and TEXT_WEIGHT > 1
    fields = ATLAS_SEARCH_INDEX.definition["mappings"]["fields"]
    assert fields["attachmentTexts"]["fields"]["text"] == fields["clean"]
    # $text: plain words search every field of the index; attachmenttext: is refused, clearly
    assert text_search(parse("invoice")).text == '"invoice"'  # type: ignore[arg-type]
    refused = text_search(parse("attachmenttext:invoice"))  # type: ignore[arg-type]
    assert refused.text is None and refused.reason is not None and "attachmenttext:" in refused.reason
    # Atlas Search: plain words over the three paths, attachmenttext: over the attachments' text
    must = atlas_search(parse("invoice attachmenttext:total"), "alice").text["compound"]["must"]  # type: ignore[arg-type]
    assert must[0] == {"text": {"query": "invoice", "path": ["subject", "clean", "attachmentTexts.text"]}}
    assert must[1] == {"text": {"query": "total", "path": ["attachmentTexts.text"]}}
    phrase = atlas_search(parse('attachmenttext:"net total"'), "alice").text["compound"]["must"]  # type: ignore[arg-type]
    assert phrase == [{"phrase": {"query": "net total", "path": ["attachmentTexts.text"]}}]


def test_an_older_text_index_is_told_apart() -> None:
    from aecs_mongo.pure.indexes import INDEXES, text_index_is_older

    (spec,) = [s for s in INDEXES if s.name == "aecs_bodies_search"]
    # as mongod lists text indexes: _fts/_ftsx in key, the fields in weights
    old = {"key": {"mailboxId": 1, "_fts": "text", "_ftsx": 1}, "weights": {"subject": 1, "clean": 1}}
    assert text_index_is_older(spec, old)
    same_fields = {**old, "weights": {"clean": 1, "subject": 1, "attachmentTexts.text": 1}}
    assert text_index_is_older(spec, same_fields)  # the weights differ
    assert not text_index_is_older(spec, {**old, "weights": spec.text_weights()})
    assert not text_index_is_older(spec, {**old, "weights": {"text": 1}})  # not ours: left alone
    # a server that lists no weights (mongomock): the text keys
    assert text_index_is_older(spec, {"key": {"mailboxId": 1, "subject": "text", "clean": "text"}})
    assert not text_index_is_older(spec, {"key": dict(spec.keys)})


def test_ensure_indexes_replaces_the_older_text_index(make_store: Any, db: Any, backend: str) -> None:
    """The drop and re-creation, where the server takes text indexes (mongomock creates them;
    the test servers refuse them, and then there is nothing to upgrade)."""
    store = make_store("textupgrade")
    if "aecs_bodies_search" not in {ix["name"] for ix in db.bodies.list_indexes()}:
        pytest.skip(f"{backend} refuses text indexes")
    db.bodies.drop_index("aecs_bodies_search")
    db.bodies.create_index([("mailboxId", 1), ("subject", "text"), ("clean", "text")], name="aecs_bodies_search")
    report = store.ensure_indexes()
    assert report.dropped == ["aecs_bodies_search"] and report.created == ["aecs_bodies_search"] and report.ok
    (listed,) = [ix for ix in db.bodies.list_indexes() if ix["name"] == "aecs_bodies_search"]
    assert "attachmentTexts.text" in (listed.get("weights") or listed["key"])
    again = store.ensure_indexes()
    assert again.dropped == [] and again.created == [] and "aecs_bodies_search" in again.existing


@pytest.mark.server
def test_a_mongodb_engine_hit_in_an_attachment_names_it(make_store: Any, store_flavor: str) -> None:
    """The snippet of a ``$text``/Atlas hit whose subject and clean text lack the word comes
    from the attachment that holds it (no test server runs ``$text``: the hits are given; the
    synchronous engine is the asynchronous one generated)."""
    if store_flavor != "sync":
        pytest.skip("the synchronous engine is read directly")
    from aecs_mongo.pure.search_query import parse
    from aecs_mongo.synchronous.indexed_search import MongoSearchEngine
    from aecs_mongo.synchronous.search_engine import hit_snippet, messages_of

    store = make_store("engsnippet")
    store.store(message_with([("a.txt", "text/plain", b"first part"), ("inv.txt", "text/plain", b"total zorblax due")]))
    ctx = store._context
    (body,) = ctx.bodies.find({}, {"subject": 1, "clean": 1})
    hits = [{"_id": body["_id"], "subject": body.get("subject"), "clean": body.get("clean")}]
    stored = messages_of(ctx, hits)
    tree = parse("zorblax")
    for name in ("text", "atlas"):
        engine = MongoSearchEngine(ctx, name)
        texts = engine._attachment_texts(tree, hits, stored)
        columns = {"clean": body.get("clean"), "subject": body.get("subject"), "attachmenttext": texts.get(body["_id"])}
        assert hit_snippet(tree, columns, True, stored[body["_id"]]).startswith("[inv.txt] ")
    # a word of the subject needs no read of the attachments
    assert MongoSearchEngine(ctx, "text")._attachment_texts(parse("files"), hits, stored) == {}
