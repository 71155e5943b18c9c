"""The built-in extractors: one function per kind (``pure/attachment_text.builtin_kind``), each
turning an attachment's bytes into plain text through a permissively licensed library of the
``attachments`` extra (imported on first use), or raising ``ExtractionError`` with a message
for ``processing.attachmentErrors``.

They run inside the limited worker processes (``sandbox.py``); the checks here are the ones a
library would not make itself: the uncompressed size an Office/OpenDocument archive declares,
an image's pixel count before OCR, the depth of attached messages.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MAX_INFLATED_BYTES", "MAX_MESSAGE_DEPTH", "MAX_OCR_PIXELS", "ExtractionError", "MissingLibrary", "extract"]

#: the most an Office/OpenDocument archive may declare uncompressed, all members together
MAX_INFLATED_BYTES = 256 * 1024 * 1024
#: the largest image OCR reads (pixels), about a 7,000 x 7,000 scan
MAX_OCR_PIXELS = 50_000_000
#: attached messages inside attached messages are read this deep
MAX_MESSAGE_DEPTH = 3


class ExtractionError(Exception):
    """An attachment whose text cannot be read; the message says why, for a person."""


class MissingLibrary(ExtractionError):
    """The library an extractor needs is not installed (said once, not an attachment's error)."""


def _library(name: str, extra_hint: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingLibrary(f"{extra_hint} is not installed (pip install 'aecs-mongo[attachments]')") from None


def _check_zip(data: bytes) -> zipfile.ZipFile:
    """The archive of an Office/OpenDocument file, refused when it declares more than
    ``MAX_INFLATED_BYTES`` uncompressed (a zip bomb); Python's zip reader never inflates a
    member past its declared size."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise ExtractionError(f"not a readable archive ({exc})") from None
    declared = sum(info.file_size for info in archive.infolist())
    if declared > MAX_INFLATED_BYTES:
        raise ExtractionError(
            f"the archive inflates to {declared} bytes, over the limit of {MAX_INFLATED_BYTES} (a zip bomb?)"
        )
    return archive


def _pdf(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    try:
        import pypdfium2 as pdfium  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return _pdf_pypdf(data)
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        text = str(exc)
        if "password" in text.lower():
            raise ExtractionError("the PDF is encrypted (a password is needed)") from None
        raise ExtractionError(f"not a readable PDF ({text})") from None
    pages = []
    try:
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            pages.append(textpage.get_text_bounded())
            textpage.close()
            page.close()
    finally:
        document.close()
    return "\n\n".join(p.replace("\r\n", "\n").strip() for p in pages)


def _pdf_pypdf(data: bytes) -> str:
    pypdf = _library("pypdf", "a PDF library (pypdfium2 or pypdf)")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ExtractionError("the PDF is encrypted (a password is needed)")
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except pypdf.errors.PdfError as exc:
        raise ExtractionError(f"not a readable PDF ({exc})") from None


def _docx(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    _check_zip(data)
    docx = _library("docx", "python-docx")
    from docx.table import Table  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from docx.text.paragraph import Paragraph  # type: ignore[import-untyped, import-not-found, unused-ignore]

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises many kinds for a broken package
        raise ExtractionError(f"not a readable DOCX ({type(exc).__name__}: {exc})") from None
    lines: list[str] = []
    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            lines.append(Paragraph(child, document).text)
        elif tag == "tbl":
            for row in Table(child, document).rows:
                lines.append("\t".join(cell.text for cell in row.cells))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sheet(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    if data[:2] == b"PK":
        _check_zip(data)
    calamine = _library("python_calamine", "python-calamine")
    try:
        workbook = calamine.CalamineWorkbook.from_filelike(io.BytesIO(data))
        parts = []
        for name in workbook.sheet_names:
            rows = workbook.get_sheet_by_name(name).to_python(skip_empty_area=True)
            lines = ["\t".join(_cell(v) for v in row).rstrip("\t") for row in rows]
            parts.append(f"Sheet: {name}\n" + "\n".join(line for line in lines if line))
    except Exception as exc:  # calamine's errors are of several kinds
        raise ExtractionError(f"not a readable spreadsheet ({type(exc).__name__}: {exc})") from None
    return "\n\n".join(parts)


def _pptx(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    _check_zip(data)
    pptx = _library("pptx", "python-pptx")
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:
        raise ExtractionError(f"not a readable PPTX ({type(exc).__name__}: {exc})") from None
    slides = []
    for number, slide in enumerate(presentation.slides, 1):
        lines = [f"Slide {number}"]
        for shape in slide.shapes:
            if getattr(shape, "has_text_frame", False) and shape.text_frame.text:
                lines.append(shape.text_frame.text)
            if getattr(shape, "has_table", False):
                for row in shape.table.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text
            if notes:
                lines.append(notes)
        slides.append("\n".join(lines))
    return "\n\n".join(slides)


_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


def _odt(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    import xml.etree.ElementTree as ET

    archive = _check_zip(data)
    try:
        content = archive.read("content.xml")
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ExtractionError(f"not a readable OpenDocument file ({exc})") from None
    if b"<!DOCTYPE" in content or b"<!ENTITY" in content:
        raise ExtractionError("the OpenDocument XML declares entities (refused)")
    try:
        root = ET.fromstring(content)
    except ET.ParseError as exc:
        raise ExtractionError(f"not a readable OpenDocument file ({exc})") from None
    lines = []
    for element in root.iter():
        if element.tag in (f"{{{_ODF_TEXT}}}p", f"{{{_ODF_TEXT}}}h"):
            lines.append("".join(element.itertext()))
    return "\n".join(lines)


def _rtf(data: bytes, _att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    striprtf = _library("striprtf.striprtf", "striprtf")
    return str(striprtf.rtf_to_text(data.decode("latin-1"), errors="ignore"))


def _charset(att: Mapping[str, Any]) -> str:
    found = re.search(r"charset\s*=\s*\"?([\w.:-]+)", str(att.get("contentType") or ""), re.I)
    return found.group(1) if found else "utf-8"


def _decode(data: bytes, att: Mapping[str, Any]) -> str:
    charset = _charset(att)
    try:
        return data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("latin-1")


def _text(data: bytes, att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    if b"\x00" in data[:4096]:
        raise ExtractionError("binary content under a text type")
    return _decode(data, att)


def _html(data: bytes, att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    from ..normalizer.html_text import html_to_text

    return html_to_text(_decode(data, att))


def _when(value: Any) -> str:
    dt = getattr(value, "dt", value)
    return dt.isoformat() if hasattr(dt, "isoformat") else str(dt)


def _ical_unescape(value: str) -> str:
    return re.sub(r"\\([nN,;\\])", lambda m: "\n" if m.group(1) in "nN" else m.group(1), value)


def _ical_date(value: str) -> str:
    """``20261210T100000Z`` as ``2026-12-10T10:00:00+00:00`` (icalendar's form); else as written."""
    found = re.fullmatch(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})(Z?))?", value.strip())
    if not found:
        return value
    y, mo, d, h, mi, se, z = found.groups()
    if h is None:
        return f"{y}-{mo}-{d}"
    return f"{y}-{mo}-{d}T{h}:{mi}:{se}" + ("+00:00" if z else "")


def _calendar_plain(text: str) -> str:
    """The events of an iCalendar text without the icalendar library: lines unfolded, the
    properties an event is read by taken from each VEVENT/VTODO (their parameters dropped)."""
    lines = re.sub(r"\r?\n[ \t]", "", text).splitlines()
    events: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in lines:
        name, _, value = line.partition(":")
        key = name.split(";", 1)[0].upper()
        if key == "BEGIN" and value.upper() in ("VEVENT", "VTODO"):
            current = {}
        elif key == "END" and value.upper() in ("VEVENT", "VTODO") and current is not None:
            events.append(current)
            current = None
        elif current is not None and key not in current:
            current[key] = _ical_unescape(value)
    out = []
    for event in events:
        parts = []
        if event.get("SUMMARY"):
            parts.append(f"Event: {event['SUMMARY']}")
        if event.get("DTSTART"):
            end = f" to {_ical_date(event['DTEND'])}" if event.get("DTEND") else ""
            parts.append(f"When: {_ical_date(event['DTSTART'])}{end}")
        if event.get("LOCATION"):
            parts.append(f"Where: {event['LOCATION']}")
        if event.get("ORGANIZER"):
            parts.append(f"Organizer: {event['ORGANIZER'].removeprefix('mailto:').removeprefix('MAILTO:')}")
        if event.get("DESCRIPTION"):
            parts.append(event["DESCRIPTION"])
        out.append("\n".join(parts))
    return "\n\n".join(out)


def _calendar(data: bytes, att: Mapping[str, Any], _opts: Mapping[str, Any]) -> str:
    try:
        icalendar = _library("icalendar", "icalendar")
    except MissingLibrary:
        return _calendar_plain(_decode(data, att))
    try:
        calendar = icalendar.Calendar.from_ical(_decode(data, att))
    except Exception as exc:
        raise ExtractionError(f"not a readable calendar ({type(exc).__name__}: {exc})") from None
    events = []
    for component in calendar.walk():
        if component.name not in ("VEVENT", "VTODO"):
            continue
        lines = []
        if component.get("summary"):
            lines.append(f"Event: {component.get('summary')}")
        start, end = component.get("dtstart"), component.get("dtend")
        if start is not None:
            lines.append(f"When: {_when(start)}" + (f" to {_when(end)}" if end is not None else ""))
        if component.get("location"):
            lines.append(f"Where: {component.get('location')}")
        if component.get("organizer"):
            lines.append(f"Organizer: {str(component.get('organizer')).removeprefix('mailto:')}")
        if component.get("description"):
            lines.append(str(component.get("description")))
        events.append("\n".join(lines))
    return "\n\n".join(events)


def _message(data: bytes, _att: Mapping[str, Any], opts: Mapping[str, Any]) -> str:
    from ..normalizer import parse_email

    depth = int(opts.get("depth", 0))
    parsed = parse_email(data)
    email = parsed.email
    meta = email["metadata"]
    sender = meta.get("from") or {}
    name, address = sender.get("name"), sender.get("email") or ""
    lines = [
        f"From: {name} <{address}>" if name else f"From: {address}",
        "To: " + ", ".join(a["email"] for a in meta.get("to") or ()),
        f"Subject: {meta.get('subject') or ''}",
        f"Date: {meta.get('date') or ''}",
        "",
        email["content"].get("text") or "",
    ]
    if depth < MAX_MESSAGE_DEPTH:
        from ..pure.attachment_text import builtin_kind

        inner_opts = {**opts, "depth": depth + 1}
        for inner, inner_data in zip(email["attachments"], parsed.attachment_data, strict=False):
            kind = builtin_kind(inner.get("contentType"), inner.get("filename"))
            if kind is None or kind == "image" or inner_data is None:
                continue
            try:
                text = extract(kind, inner_data, inner, inner_opts)
            except ExtractionError:
                continue
            if text:
                lines += ["", f"[{inner.get('filename') or inner.get('contentType')}]", text]
    return "\n".join(lines)


def _image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, BMP or JPEG header (None: another format)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if data[:2] == b"BM" and len(data) >= 26:
        return int.from_bytes(data[18:22], "little", signed=True), abs(
            int.from_bytes(data[22:26], "little", signed=True)
        )
    if data[:2] == b"\xff\xd8":
        at = 2
        while at + 9 <= len(data) and data[at] == 0xFF:
            marker, length = data[at + 1], int.from_bytes(data[at + 2 : at + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return int.from_bytes(data[at + 7 : at + 9], "big"), int.from_bytes(data[at + 5 : at + 7], "big")
            at += 2 + length
    return None


def _image(data: bytes, _att: Mapping[str, Any], opts: Mapping[str, Any]) -> str | None:
    if not opts.get("ocr"):
        return None
    tesseract = shutil.which("tesseract")
    if tesseract is None:
        raise ExtractionError("OCR needs the tesseract command (Debian: apt-get install tesseract-ocr)")
    size = _image_size(data)
    if size is None:
        try:
            from PIL import Image  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except ImportError:  # no size known: Tesseract's own limits apply
            pass
        else:
            Image.MAX_IMAGE_PIXELS = None  # the size is checked here, before anything is decoded
            try:
                with Image.open(io.BytesIO(data)) as image:
                    size = image.size
            except Exception as exc:  # Pillow's decoders raise many kinds
                raise ExtractionError(f"not a readable image ({type(exc).__name__}: {exc})") from None
    if size is not None:
        width, height = size
        if width * height > MAX_OCR_PIXELS:
            raise ExtractionError(
                f"the image is {width} x {height} pixels, over the OCR limit of {MAX_OCR_PIXELS} pixels"
            )
    languages = str(opts.get("ocr_languages") or "eng")
    done = subprocess.run(
        [tesseract, "stdin", "stdout", "-l", languages],
        input=data,
        capture_output=True,
        timeout=float(opts.get("timeout", 60)),
        check=False,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ExtractionError(f"OCR failed ({message[-1] if message else done.returncode})")
    return done.stdout.decode("utf-8", "replace")


_EXTRACTORS: dict[str, Callable[[bytes, Mapping[str, Any], Mapping[str, Any]], str | None]] = {
    "pdf": _pdf,
    "docx": _docx,
    "sheet": _sheet,
    "pptx": _pptx,
    "odt": _odt,
    "rtf": _rtf,
    "html": _html,
    "text": _text,
    "calendar": _calendar,
    "message": _message,
    "image": _image,
}


def extract(kind: str, data: bytes, attachment: Mapping[str, Any], options: Mapping[str, Any]) -> str | None:
    """The text of one attachment by the built-in extractor ``kind`` (None: nothing to read)."""
    return _EXTRACTORS[kind](data, attachment, options)
