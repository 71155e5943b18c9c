"""A NormalizedEmail's shape, checked (``validate_email``), and the value forms the store keeps.

``validate_email`` returns a canonical copy (every spec field present, nulls filled in) or
raises ``InvalidEmailError`` naming the offending field, so building never meets a bad shape.
Unknown fields are dropped and named (AECS-1 §10.6) except ``x_`` extensions, whose key names
must be storable in MongoDB. Dates are ISO 8601 UTC strings in the spec and BSON dates in the
store; ``content.rawFull`` is a string in the spec and bytes in the store: the conversions both
ways live here, next to the checks that accept those values.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import InvalidEmailError, UnsafeFieldNameError
from ..keys import strip_message_id

__all__ = [
    "ATTACHMENT_FIELDS",
    "CONTENT_FIELDS",
    "METADATA_FIELDS",
    "PROCESSING_FIELDS",
    "THREAD_FIELDS",
    "TOP_FIELDS",
    "bson_datetime",
    "date_to_iso",
    "iso_to_datetime",
    "raw_full_from_bytes",
    "raw_full_to_bytes",
    "validate_email",
]

#: The dates AECS-1 writes: ISO 8601 in UTC (``Z`` or ``+00:00``), fractions of a second allowed.
_ISO_UTC = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|\+00:00)$", re.ASCII)
#: The fields AECS-1 names, per level (anything else is an ``x_`` extension or ignored).
TOP_FIELDS = ("messageId", "threadId", "metadata", "content", "thread", "attachments", "processing")
METADATA_FIELDS = ("from", "to", "cc", "bcc", "subject", "date", "timestamp")
CONTENT_FIELDS = ("rawFull", "raw", "html", "text", "clean", "forAI")
THREAD_FIELDS = ("position", "inReplyTo", "references")
ATTACHMENT_FIELDS = ("id", "filename", "contentType", "size", "cid")
PROCESSING_FIELDS = ("processedAt", "specVersion", "cleanFallback")
_ADDRESS = ("name", "email")


def _fail(path: str, expected: str, value: object) -> InvalidEmailError:
    return InvalidEmailError(f"{path} must be {expected}, not {type(value).__name__}")


def _opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(f"{path}.{key}", "a string or null", value)
    return value


def _opt_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(f"{path}.{key}", "an object or null", value)
    return value


def _opt_list(obj: Mapping[str, Any], key: str, path: str) -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise _fail(f"{path}.{key}", "an array or null", value)
    return value


def _check_field_names(value: Any, path: str) -> None:
    """Refuse key names MongoDB cannot store anywhere inside an ``x_`` value."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise UnsafeFieldNameError(f"{path} has a non-string key {key!r}")
            if key.startswith("$") or "." in key or "\x00" in key:
                raise UnsafeFieldNameError(f"{path}.{key!r}: field names may not start with '$' or contain '.' or NUL")
            _check_field_names(inner, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, inner in enumerate(value):
            _check_field_names(inner, f"{path}[{i}]")


def _extensions(
    obj: Mapping[str, Any], known: tuple[str, ...], path: str, ignored: list[str] | None = None
) -> dict[str, Any]:
    """The ``x_`` fields of one object; unknown other fields are ignored (§10.6) and their
    ``path.name`` appended to ``ignored`` (the store says so once per name)."""
    found: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise UnsafeFieldNameError(f"{path} has a non-string key {key!r}")
        if key in known:
            continue
        if key.startswith("x_"):
            _check_field_names({key: value}, path)
            found[key] = value
        elif ignored is not None:
            ignored.append(f"{path}.{key}")
    return found


def _address(value: object, path: str, ignored: list[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "an address object", value)
    email = value.get("email")
    if not isinstance(email, str):
        raise _fail(f"{path}.email", "a string", email)
    name = _opt_str(value, "name", path)
    result: dict[str, Any] = {"name": name, "email": email}
    result.update(_extensions(value, _ADDRESS, path, ignored))
    return result


def iso_to_datetime(text: str, path: str) -> _dt.datetime:
    match = _ISO_UTC.match(text)
    if not match:
        raise InvalidEmailError(f"{path} must be ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ), got {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    try:
        return _dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=_dt.UTC)
    except ValueError as exc:
        raise InvalidEmailError(f"{path}: {exc}") from None


def date_to_iso(value: _dt.datetime | None) -> str | None:
    """A stored BSON date -> AECS-1 ``YYYY-MM-DDTHH:MM:SSZ`` (milliseconds kept when set)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    value = value.astimezone(_dt.UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return text + "Z"


def bson_datetime(value: _dt.datetime) -> _dt.datetime:
    """What a BSON date round trip gives back (milliseconds, UTC)."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def validate_email(email: object, ignored: list[str] | None = None) -> dict[str, Any]:
    """Check one NormalizedEmail's shape and return a canonical copy (nulls filled in).

    Raises ``InvalidEmailError`` (or ``UnsafeFieldNameError``) naming the offending field.
    Unknown fields that are not ``x_`` extensions are dropped and named in ``ignored``.
    """
    if not isinstance(email, Mapping):
        raise TypeError(f"email must be a mapping (a NormalizedEmail) or bytes, not {type(email).__name__}")
    out: dict[str, Any] = {}
    for key in ("messageId", "threadId"):
        value = email.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InvalidEmailError(f"{key} is required and must be a non-empty string")
    message_id = strip_message_id(email["messageId"], "messageId")
    if not message_id:
        raise InvalidEmailError("messageId is empty once angle brackets are stripped")
    out["messageId"] = message_id
    out["threadId"] = email["threadId"]

    meta_in = _opt_map(email, "metadata", "email")
    frm = meta_in.get("from")
    meta: dict[str, Any] = {
        "from": None if frm is None else _address(frm, "metadata.from", ignored),
        "subject": _opt_str(meta_in, "subject", "metadata"),
        "date": _opt_str(meta_in, "date", "metadata"),
    }
    for key in ("to", "cc", "bcc"):
        meta[key] = [
            _address(a, f"metadata.{key}[{i}]", ignored) for i, a in enumerate(_opt_list(meta_in, key, "metadata"))
        ]
    timestamp = meta_in.get("timestamp")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise _fail("metadata.timestamp", "an integer or null", timestamp)
    meta["timestamp"] = timestamp
    if meta["date"] is not None:
        iso_to_datetime(meta["date"], "metadata.date")
    meta.update(_extensions(meta_in, METADATA_FIELDS, "metadata", ignored))
    out["metadata"] = meta

    content_in = _opt_map(email, "content", "email")
    content: dict[str, Any] = {key: _opt_str(content_in, key, "content") for key in CONTENT_FIELDS}
    content.update(_extensions(content_in, CONTENT_FIELDS, "content", ignored))
    out["content"] = content

    thread_in = _opt_map(email, "thread", "email")
    references = []
    for i, ref in enumerate(_opt_list(thread_in, "references", "thread")):
        if not isinstance(ref, str):
            raise _fail(f"thread.references[{i}]", "a string", ref)
        references.append(ref)
    in_reply_to = _opt_str(thread_in, "inReplyTo", "thread")
    thread: dict[str, Any] = {"position": None, "inReplyTo": in_reply_to, "references": references}
    thread.update(_extensions(thread_in, THREAD_FIELDS, "thread", ignored))
    out["thread"] = thread

    attachments = []
    for i, att in enumerate(_opt_list(email, "attachments", "email")):
        path = f"attachments[{i}]"
        if not isinstance(att, Mapping):
            raise _fail(path, "an object", att)
        size = att.get("size", 0)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise _fail(f"{path}.size", "a non-negative integer", size)
        item: dict[str, Any] = {
            "id": _opt_str(att, "id", path),
            "filename": _opt_str(att, "filename", path),  # as given: "" and null come back as they went in
            "contentType": _opt_str(att, "contentType", path),
            "size": size,
            "cid": _opt_str(att, "cid", path),
        }
        item.update(_extensions(att, ATTACHMENT_FIELDS, path, ignored))
        attachments.append(item)
    out["attachments"] = attachments

    proc_in = _opt_map(email, "processing", "email")
    clean_fallback = proc_in.get("cleanFallback")
    if clean_fallback is not None and not isinstance(clean_fallback, bool):
        raise _fail("processing.cleanFallback", "a boolean or null", clean_fallback)
    processing: dict[str, Any] = {
        "processedAt": _opt_str(proc_in, "processedAt", "processing"),
        "specVersion": _opt_str(proc_in, "specVersion", "processing"),
        "cleanFallback": clean_fallback,
    }
    if processing["processedAt"] is not None:
        iso_to_datetime(processing["processedAt"], "processing.processedAt")
    processing.update(_extensions(proc_in, PROCESSING_FIELDS, "processing", ignored))
    out["processing"] = processing

    out.update(_extensions(email, TOP_FIELDS, "email", ignored))
    return out


# --- rawFull -------------------------------------------------------------------------------


def raw_full_to_bytes(raw_full: str) -> bytes:
    """The bytes a ``content.rawFull`` string stands for: its UTF-8 encoding."""
    try:
        return raw_full.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEmailError(f"content.rawFull is not valid Unicode: {exc.reason}") from None


def raw_full_from_bytes(raw: bytes) -> str:
    """``raw.eml`` -> ``content.rawFull``: UTF-8 where the bytes are UTF-8, else latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
