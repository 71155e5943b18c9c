"""What the store's methods return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["MessagePage", "StoreResult", "ThreadPage"]


@dataclass(frozen=True)
class StoreResult:
    """One stored message: its ids and what happened (``outcome``).

    ``inserted``: this call created the message. Otherwise its Message-ID was stored already:
    ``variant`` says its raw bytes differ from every copy kept, and were kept beside the first
    (``get_raw_variants``); else the same bytes (or no raw bytes) were already there.
    """

    message_id: str
    message_key: str
    thread_id: str
    thread_key: str
    inserted: bool
    variant: bool = False

    @property
    def outcome(self) -> str:
        """``"stored"`` (new message), ``"variant"`` (other bytes kept) or ``"present"`` (nothing new)."""
        return "stored" if self.inserted else "variant" if self.variant else "present"


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
