"""What the store's methods return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["MessagePage", "StoreResult", "ThreadPage"]


@dataclass(frozen=True)
class StoreResult:
    """One ``store`` call: the ids, and whether this call created the message (False: already stored)."""

    message_id: str
    message_key: str
    thread_id: str
    thread_key: str
    inserted: bool


@dataclass(frozen=True)
class MessagePage:
    """One keyset page of message summaries; pass ``next_cursor`` back for the next (None: last page)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None


@dataclass(frozen=True)
class ThreadPage:
    """One keyset page of thread summaries, most recent activity first."""

    threads: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None
