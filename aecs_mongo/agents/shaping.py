"""What the agent tools return, shaped from what the store returns. Pure.

Every result is one JSON-ready dict: the tool's own fields (counts, cursors, flags, the engine)
at the top, and everything that came from a message under ``mail``, with the characters that
hide text removed (``pure/invisible``; identifiers escaped instead) and their number in
``hiddenCharactersRemoved``. ``truncated`` says a cap cut something. ``fit`` keeps a result
within its tool's byte cap, whatever the mail holds: it shortens the longest texts first and
drops trailing items only when identifiers alone are too long.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..pure.invisible import strip_hidden_in
from .specs import NAME_MAX_CHARS, NOTICE, SUBJECT_MAX_CHARS

__all__ = [
    "HANDLES",
    "Cuts",
    "date_of",
    "fit",
    "iso",
    "json_size",
    "person",
    "result",
    "sender",
    "summary_item",
    "thread_item",
]

#: fields whose values are handles an agent passes back: escaped, never cut
HANDLES = frozenset({"messageId", "threadId", "inReplyTo", "email", "references"})
_ELLIPSIS = "…"


class Cuts:
    """Cuts text to its caps and remembers whether anything was cut."""

    def __init__(self) -> None:
        self.any = False

    def text(self, value: object, limit: int) -> str | None:
        if value is None:
            return None
        text = str(value)
        if len(text) <= limit:
            return text
        self.any = True
        return text[: max(limit - 1, 0)] + _ELLIPSIS

    def items(self, values: Sequence[Any] | None, limit: int) -> list[Any]:
        values = list(values or ())
        if len(values) > limit:
            self.any = True
            return values[:limit]
        return values


def iso(ts: int | float) -> str:
    """Epoch seconds as ISO 8601 UTC (``2026-11-02T08:15:00Z``)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def person(address: Mapping[str, Any] | None, cuts: Cuts) -> dict[str, Any] | None:
    """``{name, email}`` of an address (the name cut to its cap), None without one."""
    if not address:
        return None
    return {"name": cuts.text(address.get("name"), NAME_MAX_CHARS), "email": address.get("email")}


def sender(address: Mapping[str, Any] | None) -> str | None:
    """An address as one line (``Name <address>``, or the address alone), None without one."""
    if not address:
        return None
    name, email = address.get("name"), address.get("email")
    return f"{name} <{email}>" if name else str(email)


def date_of(summary: Mapping[str, Any]) -> str | None:
    """A message's date for a model: the Date header's (ISO 8601 UTC), else its sort time ``ts``."""
    date = summary.get("date")
    if date:
        return str(date)
    ts = summary.get("ts")
    return iso(ts) if isinstance(ts, (int, float)) else None


def summary_item(summary: Mapping[str, Any], cuts: Cuts) -> dict[str, Any]:
    """One message of a listing: messageId, threadId, from, date, subject, attachmentCount."""
    return {
        "messageId": summary["messageId"],
        "threadId": summary.get("threadId"),
        "from": person(summary.get("from"), cuts),
        "date": date_of(summary),
        "subject": cuts.text(summary.get("subject"), SUBJECT_MAX_CHARS),
        "attachmentCount": int(summary.get("attachmentCount") or 0),
        "tags": [str(t) for t in summary.get("tags") or ()],
    }


def thread_item(thread: Mapping[str, Any], cuts: Cuts) -> dict[str, Any]:
    """One conversation of ``list_threads``."""
    return {
        "threadId": thread["threadId"],
        "subject": cuts.text(thread.get("subject"), SUBJECT_MAX_CHARS),
        "messageCount": int(thread["messageCount"]),
        "firstDate": iso(thread["firstTs"]),
        "lastDate": iso(thread["lastTs"]),
    }


def result(mail: object, cuts: Cuts | None = None, **fields: Any) -> dict[str, Any]:
    """A tool's result: its ``fields``, then ``mail`` with hidden characters removed, their count
    and ``truncated``. ``fields`` are the tool's own values (never message-derived text)."""
    cleaned, hidden = strip_hidden_in(mail, HANDLES)
    return {
        **fields,
        "truncated": bool(cuts is not None and cuts.any),
        "hiddenCharactersRemoved": hidden,
        "notice": NOTICE,
        "mail": cleaned,
    }


def json_size(value: object) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (as the MCP server sends it)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _shrink(value: object, ratio: float, key: str | None = None) -> object:
    """``value`` with every text longer than 64 characters cut to ``ratio`` of its length
    (handles are never cut)."""
    if isinstance(value, str):
        if key in HANDLES or len(value) <= 64:
            return value
        return value[: max(int(len(value) * ratio), 64) - 1] + _ELLIPSIS
    if isinstance(value, Mapping):
        return {k: _shrink(v, ratio, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v, ratio, key) for v in value]
    return value


def _longest_list(value: object) -> list[Any] | None:
    """The longest list inside ``value`` (where trailing items can go), or None."""
    best: list[Any] | None = value if isinstance(value, list) and value else None
    children = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    for child in children:
        found = _longest_list(child)
        if found is not None and (best is None or len(found) > len(best)):
            best = found
    return best


def fit(shaped: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``shaped`` within ``max_bytes`` of JSON: texts under ``mail`` shortened, longest first
    (in proportion), then trailing items of its longest list dropped; ``truncated`` set when
    anything changed."""
    size = json_size(shaped)
    if size <= max_bytes:
        return shaped
    shaped = {**shaped, "truncated": True}
    for _ in range(6):
        shaped["mail"] = _shrink(shaped["mail"], max_bytes / size * 0.9)
        size = json_size(shaped)
        if size <= max_bytes:
            return shaped
    while size > max_bytes:
        longest = _longest_list(shaped["mail"])
        if longest is None:
            shaped["mail"] = None
            break
        del longest[len(longest) // 2 :]
        size = json_size(shaped)
    return shaped
