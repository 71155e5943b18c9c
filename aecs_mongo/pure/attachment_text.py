"""Attachment text: which built-in extractor reads an attachment, the bounds on what it gives,
and ``attachments_for_ai``, the one bounded string a prompt gets of a message's attachments.

``attachments_for_ai`` reproduces the AECS SDK's ``attachmentsForAI`` (its section 9.6): the
attachments with a non-empty ``extractedText`` (and, with ``include``, a content type that an
exact type, a ``type/*`` glob or ``*`` names), each cut to ``max_chars_per_attachment`` with
``[truncated — N chars shown of M]`` on a line of its own, wrapped in
``<attachment name=".." type="..">`` … ``</attachment>`` (attribute values escaped), the blocks
joined by a blank line, the whole cut at ``max_total_chars`` (a block that does not fit is cut
to what is left, and none follows it); None where no attachment has text.

``builtin_kind`` names the built-in extractor of an attachment by its content type, and by its
file name's extension where the type is generic (``application/octet-stream`` and the like).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "DEFAULT",
    "EXTRACTED_TEXT_CHARS",
    "MAX_ATTACHMENT_BYTES",
    "MAX_TEXT_CHARS",
    "AttachmentProcessor",
    "attachments_for_ai",
    "builtin_kind",
    "matches_include",
]

#: ``attachments[i].extractedText`` in a rebuilt AECS object: the SDK's ``maxCharsPerAttachment``
EXTRACTED_TEXT_CHARS = 4000
#: the most text kept of one attachment (the rest is dropped, the cut said in the errors)
MAX_TEXT_CHARS = 1_000_000
#: attachments larger than this are not extracted (the refusal is recorded as an error)
MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024


class _Default:
    """The default wrapper of ``attachments_for_ai``: the SDK's ``wrappers.xml("attachment")``."""

    def __repr__(self) -> str:
        return "DEFAULT"


#: ``attachments_for_ai(wrapper=DEFAULT)``: ``<attachment name=".." type="..">`` blocks
DEFAULT: Any = _Default()


@runtime_checkable
class AttachmentProcessor(Protocol):
    """The SDK's processor shape: ``accepts`` says whether it reads this attachment (a dict with
    ``filename``, ``contentType``, ``size``, ``idx``); ``process`` returns its text (None: nothing
    to say). An exception from either is recorded in ``processing.attachmentErrors``."""

    def accepts(self, attachment: Mapping[str, Any]) -> bool: ...

    def process(self, attachment: Mapping[str, Any], data: bytes) -> str | None: ...


#: content type -> built-in extractor
_BY_TYPE = {
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "sheet",
    "application/vnd.ms-excel.sheet.macroenabled.12": "sheet",
    "application/vnd.ms-excel": "sheet",
    "application/vnd.oasis.opendocument.spreadsheet": "sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.oasis.opendocument.text": "odt",
    "application/rtf": "rtf",
    "text/rtf": "rtf",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/calendar": "calendar",
    "application/ics": "calendar",
    "message/rfc822": "message",
    "message/global": "message",
}
#: file name extension -> built-in extractor, where the content type says nothing
_BY_EXTENSION = {
    "pdf": "pdf",
    "docx": "docx",
    "xlsx": "sheet",
    "xlsm": "sheet",
    "xls": "sheet",
    "ods": "sheet",
    "pptx": "pptx",
    "odt": "odt",
    "rtf": "rtf",
    "html": "html",
    "htm": "html",
    "ics": "calendar",
    "eml": "message",
    "txt": "text",
    "csv": "text",
    "md": "text",
    "png": "image",
    "jpg": "image",
    "jpeg": "image",
    "tif": "image",
    "tiff": "image",
    "gif": "image",
    "bmp": "image",
    "webp": "image",
}
_GENERIC = {
    "application/octet-stream",
    "application/binary",
    "application/x-download",
    "application/force-download",
    "",
}


def builtin_kind(content_type: str | None, filename: str | None) -> str | None:
    """The built-in extractor of an attachment (``pdf``, ``docx``, ``sheet``, ``pptx``, ``odt``,
    ``rtf``, ``html``, ``calendar``, ``message``, ``text``, ``image``), or None: not read."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype in _BY_TYPE:
        return _BY_TYPE[ctype]
    if ctype.startswith("text/"):
        return "text"
    if ctype.startswith("image/"):
        return "image"
    if ctype in _GENERIC or ctype.startswith("application/x-"):
        name = (filename or "").rsplit("/", 1)[-1]
        if "." in name:
            return _BY_EXTENSION.get(name.rsplit(".", 1)[1].lower())
    return None


def matches_include(content_type: str, patterns: Sequence[str] | None) -> bool:
    """The SDK's ``include``: no patterns take everything; ``*`` anything; ``type/*`` a prefix;
    else the exact type."""
    if not patterns:
        return True
    for pattern in patterns:
        if pattern == "*":
            return True
        if pattern.endswith("/*"):
            if content_type.startswith(pattern[:-1]):
                return True
        elif pattern == content_type:
            return True
    return False


def _escape_attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[truncated — {max_chars} chars shown of {len(text)}]"


def _text_of(att: Any) -> Any:
    return att.get("extractedText") if isinstance(att, Mapping) else getattr(att, "extractedText", None)


def _field(att: Any, name: str) -> Any:
    return att.get(name) if isinstance(att, Mapping) else getattr(att, name, None)


def attachments_for_ai(
    attachments: Iterable[Any],
    max_chars_per_attachment: int = 4000,
    max_total_chars: int = 16000,
    include: Sequence[str] | None = None,
    wrapper: Any = DEFAULT,
    label: Callable[[Any], str] | None = None,
) -> str | None:
    """One bounded string of the attachments' ``extractedText`` for a prompt (the AECS SDK's
    ``attachmentsForAI``, same format and defaults); None where no attachment has text.

    ``attachments``: AECS attachment dicts (``filename``, ``contentType``, ``extractedText``).
    ``include``: content types to take (exact, ``type/*`` or ``*``; default all).
    ``wrapper``: ``DEFAULT`` gives ``<attachment name=".." type="..">`` blocks; None gives the
    bare text; else an object with ``wrap(text, email)`` (the SDK's ``ForAIWrapper``; ``email``
    is None) or a callable ``wrapper(text, attachment)``. ``label``: the ``name`` of a block
    (default: the file name).
    """
    if isinstance(include, str):
        raise TypeError("include must be a list of content types, not a string")
    candidates = [
        att
        for att in attachments
        if isinstance(_text_of(att), str)
        and len(_text_of(att)) > 0
        and matches_include(str(_field(att, "contentType") or ""), include)
    ]
    if not candidates:
        return None
    blocks: list[str] = []
    total = 0
    for att in candidates:
        truncated = _truncate(_text_of(att), max_chars_per_attachment)
        if wrapper is DEFAULT:
            name = label(att) if label is not None else str(_field(att, "filename") or "")
            ctype = str(_field(att, "contentType") or "")
            block = f'<attachment name="{_escape_attr(name)}" type="{_escape_attr(ctype)}">\n{truncated}\n</attachment>'
        elif wrapper is None:
            block = truncated
        elif hasattr(wrapper, "wrap"):
            block = wrapper.wrap(truncated, None)
        else:
            block = wrapper(truncated, att)
        separator = 0 if not blocks else 2
        if total + separator + len(block) > max_total_chars:
            remaining = max_total_chars - total - separator
            if remaining > 0:
                blocks.append(block[:remaining])
                total += separator + remaining
            break
        blocks.append(block)
        total += separator + len(block)
    return "\n\n".join(blocks) if blocks else None
