"""``Extractor``: the attachments of a batch of messages -> each one's text or error.

For each attachment with bytes, the caller's processors are tried first, in their order, in
this process (their ``accepts``/``process`` are the caller's code: a failure is recorded, a
hang is theirs to bound); the first that accepts it gives its text. Otherwise the built-in
extractor of its content type (``pure/attachment_text.builtin_kind``) runs in a limited worker
process (``sandbox.py``). Images are read only with ``ocr=True``; where Tesseract is missing,
that is said once and images are left alone.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..pure.attachment_text import MAX_ATTACHMENT_BYTES, MAX_TEXT_CHARS, builtin_kind
from ..pure.invisible import strip_hidden
from .sandbox import Limits, shared_pool

__all__ = ["AttachmentText", "Extractor"]

log = logging.getLogger("aecs_mongo")
_said: set[str] = set()


@dataclass(frozen=True)
class AttachmentText:
    """What extraction gave for one attachment: its text, or the error a person reads."""

    idx: int
    filename: str
    text: str | None = None
    error: str | None = None


def _once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(message)


class Extractor:
    """Attachment text with ``processors`` (the caller's, tried first) and the built-ins.

    ``ocr``: read images with Tesseract. ``limits``: what one built-in extraction may use.
    """

    def __init__(self, processors: Sequence[Any] = (), *, ocr: bool = False, limits: Limits | None = None) -> None:
        for processor in processors:
            if not callable(getattr(processor, "accepts", None)) or not callable(getattr(processor, "process", None)):
                raise TypeError(f"a processor needs accepts(attachment) and process(attachment, data): {processor!r}")
        self.processors = tuple(processors)
        self.ocr = bool(ocr)
        self.limits = limits or Limits()

    def _ocr_ready(self) -> bool:
        if not self.ocr:
            return False
        if shutil.which("tesseract") is None:
            _once(
                "tesseract",
                "OCR is on but the tesseract command is missing (Debian: apt-get install tesseract-ocr); "
                "images are not read",
            )
            return False
        return True

    def _own(self, att: Mapping[str, Any], data: bytes) -> AttachmentText | None:
        """The caller's processors: the first that accepts gives the text (or the error)."""
        name = str(att.get("filename") or "")
        for processor in self.processors:
            try:
                if not processor.accepts(att):
                    continue
                text = processor.process(att, data)
            except Exception as exc:  # the caller's code: recorded, never failing the store
                return AttachmentText(int(att["idx"]), name, error=str(exc) or type(exc).__name__)
            if text is not None and not isinstance(text, str):
                return AttachmentText(
                    int(att["idx"]), name, error=f"a processor returned {type(text).__name__}, not str"
                )
            if text is not None:
                text = strip_hidden(text[:MAX_TEXT_CHARS])[0].strip() or None
            return AttachmentText(int(att["idx"]), name, text)
        return None

    def extract(self, items: Sequence[tuple[Mapping[str, Any], bytes]]) -> list[AttachmentText]:
        """The text of each ``(attachment, data)`` that has any, or its error, in ``idx`` order;
        attachments that no processor and no built-in read give nothing."""
        return sorted((r for r in self.extract_each(items) if r is not None), key=lambda r: r.idx)

    def extract_each(self, items: Sequence[tuple[Mapping[str, Any], bytes]]) -> list[AttachmentText | None]:
        """One result per item, in item order (None: nothing read it)."""
        results: list[AttachmentText | None] = [None] * len(items)
        jobs: list[dict[str, Any]] = []
        places: list[tuple[int, int, str]] = []
        ocr = None
        for place, (att, data) in enumerate(items):
            idx, name = int(att["idx"]), str(att.get("filename") or "")
            if self.processors:
                own = self._own(att, data)
                if own is not None:
                    results[place] = own
                    continue
            kind = builtin_kind(att.get("contentType"), name)
            if kind is None:
                continue
            if kind == "image":
                ocr = self._ocr_ready() if ocr is None else ocr
                if not ocr:
                    continue
            if len(data) > MAX_ATTACHMENT_BYTES:
                error = f"too large to read ({len(data)} bytes; the limit is {MAX_ATTACHMENT_BYTES})"
                results[place] = AttachmentText(idx, name, error=error)
                continue
            plain = {k: att.get(k) for k in ("idx", "filename", "contentType", "size")}
            options = {"ocr": self.ocr, "timeout": self.limits.wall_seconds}
            jobs.append({"kind": kind, "data": bytes(data), "attachment": plain, "options": options})
            places.append((place, idx, name))
        if jobs:
            for (place, idx, name), outcome in zip(places, shared_pool(self.limits).run_all(jobs), strict=True):
                if outcome.missing is not None:
                    _once(
                        f"missing {outcome.missing}",
                        f"attachment text: {outcome.missing}; such attachments are not read",
                    )
                elif outcome.error is not None:
                    results[place] = AttachmentText(idx, name, error=outcome.error)
                elif outcome.text:
                    results[place] = AttachmentText(idx, name, outcome.text)
        return results
