"""Raw RFC 5322 bytes -> AECS-1 ``NormalizedEmail`` (plus attachment bytes and parse defects).

MIME work is done by the standard library's ``email`` package with the ``compat32`` policy:
its feed parser never raises on malformed input (it records defects instead), header values
stay raw so this package decodes them itself (RFC 2047 whitespace, 8-bit headers, unknown
charsets), and it is about twice as fast as ``email.policy.default`` on the corpus (see
``scripts/bench_normalize.py``). The tree is built by :mod:`.mime_tree`, which follows the
feed parser's algorithm but finds boundary lines by searching instead of reading every line
(the feed parser itself takes the few inputs it does not follow).

Which parts are what (where AECS-1 is silent, like the TypeScript reference on postal-mime):

* Every ``text/plain`` and ``text/html`` leaf whose ``Content-Disposition`` is not
  ``attachment`` is body. Leaves under one ``multipart/alternative`` form one group; a group
  contributes its plain text (or, when it has none, its HTML converted to text) to ``text``
  and its HTML (or its plain text as minimal HTML) to ``html``; groups are joined with
  ``"\\n"`` in MIME order. ``html`` is null when no HTML part exists.
* A multipart whose boundary is missing or never appears is read as one ``text/plain`` body
  part (what mail clients display for it), with a defect noted.
* A ``message/rfc822`` part without attachment disposition, in a message that holds no
  ``message/delivery-status`` or ``message/feedback-report`` part, is a forwarded message
  shown inline and, as in postal-mime, parsed in place (at most 10 levels deep): a group
  holding a header block (a ``Forwarded message`` marker, then From, Subject, Date, To, Cc,
  Bcc) joins the body, then its own groups, and its attachments join the list in MIME order.
* Every other leaf is an attachment, in MIME order: a forwarded message with attachment
  disposition or inside a report, delivery-status and other ``message/*`` parts are one
  attachment each. A part without a filename has filename ``""``. ``size`` is the length of
  the decoded original bytes: the Content-Transfer-Encoding (its first token, any case) is
  undone, base64 leniently (RFC 2045 §6.8), and the line break before the next boundary
  belongs to the boundary (RFC 2046 §5.1.1). ``message/*`` parts are never re-serialized.
* Quoted filename parameters follow RFC 5322's quoted-pair rule (``\\X`` is ``X``).
* ``cid`` is the Content-ID without brackets for inline parts; for a part whose disposition
  is ``attachment`` it is null unless the HTML body references it (``cid:...``), because
  then it is in fact shown inline.

Content levels: ``raw`` is the body text before normalization (line endings and spacing as
decoded; for HTML-only mail the converted text), ``text`` is ``raw`` normalized (LF, blanks
collapsed, NUL and other C0 controls except tab removed), ``clean``/``forAI`` follow
:mod:`aecs_mongo.normalizer.content`. A message with no text or HTML part at all has null
text levels; a body part that is empty gives empty strings.

``rawFull`` is the original octets as text: UTF-8 when they are valid UTF-8, else latin-1
(one character per byte). :func:`raw_full_to_bytes` inverts the UTF-8 case exactly; the
latin-1 case is ambiguous as text, so keep the original bytes when you need them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from email.parser import BytesParser
from email.policy import Compat32
from email.utils import collapse_rfc2231_value
from typing import Any

from ..errors import InputTooLargeError
from ..pure.documents import raw_full_from_bytes, raw_full_to_bytes
from ..pure.settings import SPEC_VERSION
from ..pure.transfer_encoding import decode_body, encoding_token
from .charsets import decode_bytes
from .content import clean_text, make_for_ai, normalize_text
from .dates import format_utc, parse_date
from .header_block import repair_header_block
from .headers import header_text, normalize_list_id, parse_addresses, unfold
from .html_text import html_to_text, text_to_html
from .message_ids import (
    compute_thread_id,
    generated_message_id,
    is_valid_message_id,
    normalize_message_id,
    parse_references,
)
from .mime_tree import parse_tree

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "SPEC_VERSION",
    "ParsedEmail",
    "format_processed_at",
    "normalize",
    "parse_email",
    "raw_full_from_bytes",
    "raw_full_to_bytes",
]

DEFAULT_MAX_BODY_BYTES = 50 * 1024 * 1024


class _RawCompat32(Compat32):
    """``compat32`` that hands out header values as raw strings.

    Plain ``compat32`` wraps values holding 8-bit octets in ``Header`` objects whose ``str()``
    replaces those octets; this package decodes them itself (UTF-8, else the body charset).
    """

    def header_fetch_parse(self, name: str, value: str) -> str:
        # Unfolded, so a parameter folded without ";" (boundary="foo\r\n bar") still reads.
        return unfold(value)


class _OpaqueMessagePart(Message):
    """A ``Message`` whose ``message/*`` parts the feed parser keeps as their original bytes.

    The feed parser reads a ``message/*`` part as a nested message, ignoring its
    Content-Transfer-Encoding (a base64-encoded forwarded message is lost) and losing its
    original bytes (re-serializing adds blank lines, closes unterminated multiparts, drops an
    envelope line). Reporting such a part as opaque to the parser keeps its body as a string
    payload of the original octets, less the line break that belongs to the next boundary
    (RFC 2046 §5.1.1); :func:`_declared_type` gives the real type, and a forwarded message
    shown inline is parsed from its decoded bytes.
    """

    def _memo(self) -> dict[str, Any]:
        """Values derived from the fields and the default type, kept while those stay the same."""
        state = (len(self._headers), self._default_type)  # type: ignore[attr-defined]
        memo: tuple[tuple[int, str], dict[str, Any]] | None = self.__dict__.get("_derived")
        if memo is None or memo[0] != state:
            memo = (state, {})
            self.__dict__["_derived"] = memo
        return memo[1]

    def declared_type(self) -> str:
        """``Message.get_content_type``: the part's own type, ``message/*`` included."""
        memo = self._memo()
        if "type" not in memo:
            memo["type"] = Message.get_content_type(self)
        return memo["type"]  # type: ignore[no-any-return]

    def get_content_type(self) -> str:
        ctype = self.declared_type()
        return _OPAQUE_TYPE if ctype.startswith("message/") else ctype

    def get_content_charset(self, failobj: Any = None) -> Any:
        memo = self._memo()
        if "charset" not in memo:
            memo["charset"] = Message.get_content_charset(self)  # None when there is none
        return failobj if memo["charset"] is None else memo["charset"]

    def get(self, name: str, failobj: Any = None) -> Any:
        """``Message.get`` (the first field of that name) through an index of the fields by
        lowercased name, rebuilt when the number of fields changes: the normalizer reads the
        same few fields of each part many times."""
        headers = self._headers  # type: ignore[attr-defined]
        index = self.__dict__.get("_field_index")
        if index is None or index[0] != len(headers):
            first: dict[str, tuple[str, str]] = {}
            for key, value in headers:
                first.setdefault(key.lower(), (key, value))
            index = self._field_index = (len(headers), first)
        found = index[1].get(name.lower())
        if found is None:
            return failobj
        return self.policy.header_fetch_parse(*found)


class _ParsingPolicy(_RawCompat32):
    message_factory = _OpaqueMessagePart


_OPAQUE_TYPE = "application/x-aecs-opaque-message"
_POLICY = _ParsingPolicy()
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MAX_PARTS = 10_000
#: Forwarded messages shown inline are parsed in place down to this depth (as postal-mime
#: does); deeper ones are attachments.
_MAX_INLINE_MESSAGE_DEPTH = 10
#: A message holding one of these parts is a report: its ``message/rfc822`` parts are
#: evidence, kept as attachments (postal-mime's ``forceRfc822Attachments``).
_REPORT_TYPES = frozenset({"message/delivery-status", "message/feedback-report"})
_FORWARD_MARKER = "---------- Forwarded message ----------"


@dataclass(frozen=True)
class ParsedEmail:
    """One normalized message.

    ``email`` is the AECS-1 NormalizedEmail dict; ``attachment_data[i]`` holds the decoded
    bytes of ``email["attachments"][i]``; ``defects`` lists every parse problem noticed
    (malformed MIME, bad charsets, invalid or missing Message-ID, unreadable Date, address
    entries without an addr-spec, ...); ``list_id`` is the ``List-Id`` header normalized
    (lowercased, brackets and display phrase removed), which AECS-1 has no field for.
    """

    email: dict[str, Any]
    attachment_data: list[bytes] = field(default_factory=list)
    #: ``(encoded body, transfer encoding)`` of each attachment: the octets the raw message
    #: holds it as (``pure/raw_parts.py`` takes them out to keep them once)
    attachment_encoded: list[tuple[bytes, str]] = field(default_factory=list)
    defects: list[str] = field(default_factory=list)
    list_id: str | None = None


def format_processed_at(value: datetime | str | None) -> str:
    """``processing.processedAt``: ISO 8601 UTC with second precision and ``Z``.

    A naive datetime is taken as UTC; a string must be ISO 8601 (a missing offset means UTC).
    """
    global _last_processed_at
    if isinstance(value, str) and _last_processed_at[0] == value:
        return _last_processed_at[1]  # a batch passes one value for every message
    if value is None:
        moment = datetime.now(UTC)
    elif isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"processed_at is not an ISO 8601 timestamp: {value!r}") from exc
    else:
        raise TypeError(f"processed_at must be a datetime, an ISO 8601 string or None, not {type(value).__name__}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    formatted = format_utc(delta.days * 86400 + delta.seconds)
    if isinstance(value, str):
        _last_processed_at = (value, formatted)
    return formatted


_last_processed_at: tuple[str | None, str] = (None, "")


class _Headers:
    """Raw header values by lowercased name, in message order."""

    def __init__(self, message: Message) -> None:
        self.values: dict[str, list[str]] = {}
        for name, value in message.raw_items():
            key = name.strip().lower()
            self.values.setdefault(key, []).append(value if isinstance(value, str) else str(value))

    def first(self, name: str) -> str | None:
        values = self.values.get(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return self.values.get(name, [])


def _defect_names(part: Message, where: str) -> Iterator[str]:
    for defect in getattr(part, "defects", ()):
        yield f"{where}: {type(defect).__name__}"


def _transfer_encoding(part: Message) -> str:
    """The Content-Transfer-Encoding's first token, lowercased, comments removed (``"base64 "`` is base64)."""
    return encoding_token(part.get("content-transfer-encoding"))


def encoded_body(part: Message) -> bytes:
    """A leaf part's body as the message holds it (still in its transfer encoding): the
    stored payload, since ``get_payload()`` would decode 8-bit octets with the charset."""
    payload = getattr(part, "_payload", None)
    if not isinstance(payload, str):
        return b""
    try:
        return payload.encode("ascii", errors="surrogateescape")
    except UnicodeEncodeError:
        return payload.encode("utf-8", errors="surrogateescape")


def _payload_bytes(part: Message, where: str, defects: list[str]) -> bytes:
    """A leaf part's body with its Content-Transfer-Encoding decoded; never raises."""
    data, defect = decode_body(encoded_body(part), _transfer_encoding(part))
    if defect is not None:
        defects.append(f"{where}: {defect}")
    return data


def _declared_type(part: Message) -> str:
    """The part's own content type (``message/*`` included), as the stdlib reads it."""
    if isinstance(part, _OpaqueMessagePart):
        return part.declared_type()
    return Message.get_content_type(part)


def _raw_header(part: Message, name: str) -> str | None:
    for key, value in part.raw_items():
        if key.strip().lower() == name:
            return value if isinstance(value, str) else str(value)
    return None


def _charset(part: Message) -> str | None:
    try:
        charset = part.get_content_charset()
    except Exception:
        return None
    return charset if isinstance(charset, str) else None


def _quoted_param(header: str, name: str) -> str | None:
    """Parameter ``name`` of a structured header when it is a quoted string, unquoted by RFC 5322.

    A quoted-pair ``\\X`` stands for ``X`` (``"C:\\TEMP\\x.png"`` is ``C:TEMPx.png``);
    the stdlib unescapes only ``\\\\`` and ``\\"``. ``None`` when the parameter is absent
    or not quoted.
    """
    position = 0
    length = len(header)
    while position < length:
        separator = header.find(";", position)
        if separator < 0:
            return None
        equals = header.find("=", separator)
        if equals < 0:
            return None
        key = header[separator + 1 : equals].strip().lower()
        position = equals + 1
        while position < length and header[position] in " \t":
            position += 1
        if position < length and header[position] == '"':
            chars: list[str] = []
            position += 1
            while position < length and header[position] != '"':
                if header[position] == "\\" and position + 1 < length:
                    position += 1
                chars.append(header[position])
                position += 1
            position += 1
            if key == name:
                return "".join(chars)
        elif key == name:
            return None
    return None


def _raw_filename(part: Message) -> str | None:
    for param, header in (("filename", "content-disposition"), ("name", "content-type")):
        value = part.get_param(param, None, header)
        if value is None:
            continue
        if isinstance(value, tuple):  # RFC 2231
            return str(collapse_rfc2231_value(value)).strip()
        raw_header = part.get(header)
        quoted = _quoted_param(raw_header, param) if isinstance(raw_header, str) and "\\" in raw_header else None
        return (quoted if quoted is not None else value).strip()
    return None


def _filename(part: Message, hint: str | None, defects: list[str]) -> str:
    try:
        name = _raw_filename(part)
    except Exception:
        name = None
    if not name:
        return ""
    text = header_text(str(name), hint_charset=hint, defects=defects) or ""
    return _CONTROL_RE.sub("", text)


def _disposition(part: Message) -> str | None:
    try:
        value = part.get_content_disposition()
    except Exception:
        return None
    return value


def _content_type(part: Message) -> str:
    try:
        ctype = _declared_type(part)
    except Exception:
        return "application/octet-stream"
    ctype = _CONTROL_RE.sub("", ctype.strip().lower())
    ctype = ctype.split(None, 1)[0] if ctype else ctype
    if "/" in ctype and len(ctype) <= 255 and ctype.isascii():
        return ctype
    return "application/octet-stream"


@dataclass
class _Attachment:
    part: Message
    content_type: str
    disposition: str | None
    data: bytes
    #: the body as the message holds it, and its transfer encoding (``decode_body`` reads it)
    encoded: bytes
    encoding: str


_Groups = dict[int, dict[str, list[str]]]


def _walk_mime(message: Message, defects: list[str]) -> tuple[_Groups, list[_Attachment], str | None]:
    """Body groups and attachments of ``message``, in MIME order; also the first charset.

    A group is a ``multipart/alternative`` (or a lone text part) holding its plain and HTML
    texts. A forwarded message shown inline (``message/rfc822`` without attachment
    disposition, in a message that is not a report) is parsed in place: a group holding its
    header block, then its own groups and attachments.
    """
    groups: _Groups = {}
    found: list[_Attachment] = []
    inline_messages: list[Message] = []  # kept alive: ids of their parts key ``groups``
    reports: dict[int, bool] = {}
    charsets: dict[int, str | None] = {id(message): _charset(message)}  # a message is often its own text part
    first_charset = charsets[id(message)]
    # (part, enclosing alternative, where, the message it belongs to, inline depth)
    stack: list[tuple[Message, Message | None, str, Message, int]] = [(message, None, "message", message, 0)]
    parts_seen = 0
    while stack:
        part, alternative, where, owner, depth = stack.pop()
        parts_seen += 1
        defects.extend(_defect_names(part, where))
        ctype = _content_type(part)
        if part.is_multipart():
            children = part.get_payload()
            if not isinstance(children, list):
                continue
            group = part if ctype == "multipart/alternative" else alternative
            if parts_seen + len(children) > _MAX_PARTS:
                defects.append(f"{where}: more than {_MAX_PARTS} MIME parts; the rest is ignored")
                children = children[: max(0, _MAX_PARTS - parts_seen)]
            prefix = "" if where == "message" else f"{where}."
            for number in range(len(children), 0, -1):
                child = children[number - 1]
                if isinstance(child, Message):
                    stack.append((child, group, f"{prefix}{number}", owner, depth))
            continue
        disposition = _disposition(part)
        if ctype == "message/rfc822" and disposition in (None, "", "inline"):
            report = reports.get(id(owner))
            if report is None:
                report = reports[id(owner)] = _has_report_part(owner)
            if not report and depth < _MAX_INLINE_MESSAGE_DEPTH:
                inner = _parse_message(_payload_bytes(part, where, defects), f"{where}.message", defects)
                inline_messages.append(inner)
                charsets[id(inner)] = _charset(inner)
                hint = charsets[id(inner)] or first_charset
                groups[id(part)] = {"plain": [_forward_header_block(inner, hint)], "html": []}
                stack.append((inner, None, f"{where}.message", inner, depth + 1))
                continue
            if not report:
                defects.append(f"{where}: forwarded messages nested too deep; kept as an attachment")
        broken_multipart = ctype.startswith("multipart/")
        if broken_multipart:
            defects.append(f"{where}: {ctype} without usable boundary read as text/plain")
        if (broken_multipart or ctype in ("text/plain", "text/html")) and disposition != "attachment":
            charset = charsets[id(part)] if id(part) in charsets else _charset(part)
            if charset and first_charset is None:
                first_charset = charset
            part_text = decode_bytes(_payload_bytes(part, where, defects), charset, defects, where=where)
            key = id(alternative if alternative is not None else part)
            slot = groups.setdefault(key, {"plain": [], "html": []})
            slot["html" if ctype == "text/html" else "plain"].append(part_text)
            continue
        encoded, encoding = encoded_body(part), _transfer_encoding(part)
        data, defect = decode_body(encoded, encoding)
        if defect is not None:
            defects.append(f"{where}: {defect}")
        found.append(_Attachment(part, ctype, disposition, data, encoded, encoding))
    return groups, found, first_charset


def _has_report_part(message: Message) -> bool:
    """True when ``message`` (not counting messages inside it) holds a delivery or feedback report."""
    stack = [message]
    while stack:
        part = stack.pop()
        payload = part.get_payload()
        if isinstance(payload, list):
            stack.extend(child for child in payload if isinstance(child, Message))
        elif _content_type(part) in _REPORT_TYPES:
            return True
    return False


def _parse_message(raw: bytes, where: str, defects: list[str]) -> Message:
    """The MIME tree of a message: the top-level one, or a forwarded one shown inline. The
    parser reads a copy whose header block was read leniently (``header_block.py``)."""
    repaired = repair_header_block(raw)
    try:
        return parse_tree(repaired, _POLICY)
    except Exception:
        pass  # a path the fast reader leaves to the feed parser (or its bug): the feed parser decides
    try:
        return BytesParser(policy=_POLICY).parsebytes(repaired)
    except Exception as exc:
        defects.append(f"{where}: MIME structure not parseable ({type(exc).__name__}); headers only")
        return _headers_only(raw)


def _format_addresses(addresses: list[Any]) -> str:
    shown = []
    for address in addresses:
        name, mail = address.get("name"), address.get("email")
        shown.append(f"{name} <{mail}>" if name and mail else name or mail or "")
    return ", ".join(item for item in shown if item)


def _forward_header_block(inner: Message, hint: str | None) -> str:
    """The header block that introduces a forwarded message's text in the body.

    The reference (postal-mime) writes From, Subject, Date, To, Cc and Bcc between dashed
    lines; here they follow a ``Forwarded message`` marker, which the content rules keep as
    forwarded content (it is not quoted history) and ``forAI`` condenses to one line.
    """
    headers = _Headers(inner)
    rows: list[tuple[str, str]] = []
    senders = parse_addresses(headers.all("from")[:1], hint_charset=hint)
    if senders:
        rows.append(("From", _format_addresses(senders)))
    for name in ("subject", "date"):
        value = header_text(headers.first(name), hint_charset=hint)
        if value:
            rows.append((name.capitalize(), value))
    for name in ("to", "cc", "bcc"):
        addresses = parse_addresses(headers.all(name), hint_charset=hint)
        if addresses:
            rows.append((name.capitalize(), _format_addresses(addresses)))
    lines = ["", _FORWARD_MARKER]  # a blank line sets the block off from the text above
    lines.extend(_CONTROL_RE.sub("", f"{key}: {value}") for key, value in rows if value)
    return "\n".join(lines) + "\n"


def parse_email(
    raw: bytes,
    *,
    for_ai_max_chars: int = 8000,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    processed_at: datetime | str | None = None,
) -> ParsedEmail:
    """Normalize one raw RFC 5322 message.

    Raises :class:`~aecs_mongo.errors.InputTooLargeError` when ``raw`` is longer than
    ``max_body_bytes`` (``None``: no limit), ``TypeError`` when ``raw`` is not bytes-like and
    ``ValueError`` for a bad option value; any content, however broken, is normalized and
    its problems are listed in :attr:`ParsedEmail.defects`.
    """
    if isinstance(raw, (bytearray, memoryview)):
        raw = bytes(raw)
    if not isinstance(raw, bytes):
        raise TypeError(f"raw must be bytes, not {type(raw).__name__}")
    if max_body_bytes is not None and len(raw) > max_body_bytes:
        raise InputTooLargeError(f"message is {len(raw)} bytes, over max_body_bytes={max_body_bytes}")
    if for_ai_max_chars < 12:
        raise ValueError("for_ai_max_chars must be at least 12")
    processed = format_processed_at(processed_at)
    defects: list[str] = []

    message = _parse_message(raw, "message", defects)
    headers = _Headers(message)

    groups, found, first_charset = _walk_mime(message, defects)
    hint = first_charset

    # --- headers -------------------------------------------------------------------------
    own_id_header = headers.first("message-id")
    own_id = normalize_message_id(unfold(own_id_header)) if own_id_header is not None else None
    own_id = _text_id(own_id, hint, defects)
    if own_id is not None and is_valid_message_id(own_id):
        message_id = own_id
    else:
        problem = "missing" if own_id_header is None else "invalid"
        defects.append(f"header: Message-ID {problem}; synthetic id used")
        message_id = generated_message_id(raw)
    in_reply_to_header = headers.first("in-reply-to")
    in_reply_to = _text_id(
        normalize_message_id(unfold(in_reply_to_header)) if in_reply_to_header is not None else None, hint, defects
    )
    references: list[str] = []
    # The first References header only (as the reference implementation): a second one is
    # usually a fragment added by a broken relay, not more history.
    for token in parse_references([unfold(value) for value in headers.all("references")[:1]]):
        reference = _text_id(token, hint, defects)
        if reference:
            references.append(reference)
    from_values = headers.all("from")[:1]
    senders = parse_addresses(from_values, hint_charset=hint, defects=defects)
    subject = header_text(headers.first("subject"), hint_charset=hint, defects=defects)
    date_header = header_text(headers.first("date"), hint_charset=hint, defects=None)
    date = parse_date(date_header)
    if date_header is not None and date.date is None:
        defects.append(f"header: Date not parseable: {date_header[:80]!r}")
    thread_id = compute_thread_id(
        message_id=own_id,
        in_reply_to=in_reply_to,
        references=references,
        from_email=senders[0]["email"] if senders else None,
        subject=subject,
        date=date.date,
    )
    metadata: dict[str, Any] = {}
    if senders:
        metadata["from"] = senders[0]
    metadata["to"] = parse_addresses(headers.all("to"), hint_charset=hint, defects=defects)
    metadata["cc"] = parse_addresses(headers.all("cc"), hint_charset=hint, defects=defects)
    metadata["bcc"] = parse_addresses(headers.all("bcc"), hint_charset=hint, defects=defects)
    metadata["subject"] = subject
    metadata["date"] = date.date
    metadata["timestamp"] = date.timestamp

    # --- content levels --------------------------------------------------------------------
    raw_parts: list[str] = []
    html_parts: list[str] = []
    has_html = any(entry["html"] for entry in groups.values())
    for entry in groups.values():
        if entry["plain"]:
            raw_parts.extend(entry["plain"])
        else:
            raw_parts.extend(html_to_text(markup) for markup in entry["html"])
        if has_html:
            html_parts.extend(entry["html"] if entry["html"] else [text_to_html(t) for t in entry["plain"]])
    body_raw = "\n".join(raw_parts) if groups else None
    html = "\n".join(html_parts) if has_html else None
    text: str | None = None
    if body_raw is not None:
        lf_text = body_raw.replace("\r\n", "\n").replace("\r", "\n")
        if _CONTROL_RE.search(lf_text):
            lf_text = _CONTROL_RE.sub("", lf_text)
            defects.append("body: control characters removed from text")
        text = normalize_text(lf_text)
    clean, clean_fallback = clean_text(text)
    for_ai = make_for_ai(clean, for_ai_max_chars)

    # --- attachments ---------------------------------------------------------------------------
    html_lower = html.lower() if html else ""
    attachments: list[dict[str, Any]] = []
    attachment_data: list[bytes] = []
    attachment_encoded: list[tuple[bytes, str]] = []
    for index, item in enumerate(found):
        cid_header = _raw_header(item.part, "content-id")
        cid = normalize_message_id(unfold(cid_header)) if cid_header is not None else None
        cid = _text_id(cid, hint, defects)
        if cid is not None and item.disposition == "attachment" and f"cid:{cid.lower()}" not in html_lower:
            cid = None
        attachments.append(
            {
                "id": f"{message_id}:{index}",
                "filename": _filename(item.part, hint, defects),
                "contentType": item.content_type,
                "size": len(item.data),
                "cid": cid,
            }
        )
        attachment_data.append(item.data)
        attachment_encoded.append((item.encoded, item.encoding))

    email: dict[str, Any] = {
        "messageId": message_id,
        "threadId": thread_id,
        "metadata": metadata,
        "content": {
            "rawFull": raw_full_from_bytes(raw),
            "raw": body_raw,
            "html": html,
            "text": text,
            "clean": clean,
            "forAI": for_ai,
        },
        "thread": {"position": None, "inReplyTo": in_reply_to, "references": references},
        "attachments": attachments,
        "processing": {"processedAt": processed, "specVersion": SPEC_VERSION, "cleanFallback": clean_fallback},
    }
    return ParsedEmail(
        email=email,
        attachment_data=attachment_data,
        attachment_encoded=attachment_encoded,
        defects=[_safe_text(defect) for defect in defects],
        list_id=normalize_list_id(headers.first("list-id")),
    )


def _text_id(value: str | None, hint: str | None, defects: list[str]) -> str | None:
    """An id token as clean text (8-bit octets decoded, control characters removed)."""
    if value is None:
        return None
    decoded = header_text(value, hint_charset=hint, defects=defects) if not value.isascii() else value
    if decoded is not None and _CONTROL_RE.search(decoded):
        decoded = _CONTROL_RE.sub("", decoded)
    return decoded or None


def _safe_text(value: str) -> str:
    """``value`` as valid Unicode: stray surrogate escapes become U+FFFD."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
    return value


def _headers_only(raw: bytes) -> Message:
    """A message holding just the header block, for input the MIME parser cannot take."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        end = raw.find(b"\n\n")
    head = raw if end < 0 else raw[:end]
    try:
        return BytesParser(policy=_POLICY).parsebytes(head, headersonly=True)
    except Exception:
        return Message(policy=_POLICY)


def normalize(
    raw: bytes,
    *,
    for_ai_max_chars: int = 8000,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    processed_at: datetime | str | None = None,
) -> dict[str, Any]:
    """The AECS-1 NormalizedEmail dict for ``raw`` (see :func:`parse_email`)."""
    return parse_email(
        raw, for_ai_max_chars=for_ai_max_chars, max_body_bytes=max_body_bytes, processed_at=processed_at
    ).email
