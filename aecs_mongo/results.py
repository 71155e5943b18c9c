"""What the store's methods and the POP3 pipeline (``aecs_mongo.mailbox``) return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .types import MessageSummary, ThreadSummary

__all__ = [
    "DispatchReport",
    "DownloadReport",
    "MessagePage",
    "MigrationReport",
    "SearchResults",
    "StoreResult",
    "ThreadPage",
]

HitT = TypeVar("HitT")


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

    messages: list[MessageSummary] = field(default_factory=list)
    next_cursor: str | None = None


@dataclass(frozen=True)
class ThreadPage:
    """One keyset page of thread summaries, most recent activity first."""

    threads: list[ThreadSummary] = field(default_factory=list)
    next_cursor: str | None = None


@dataclass
class MigrationReport:
    """What ``migrate_from_uidl_store`` did.

    ``added``: UIDLs newly recorded in the store. ``duplicates``: how many of those carried a
    Message-ID the store already held (the UIDL is recorded, the message is not stored twice).
    ``skipped``: UIDLs the store already knew, left alone. ``failed``: ``(uidl, reason)`` for
    records that could not be decoded or that the store refused.
    """

    added: int = 0
    skipped: int = 0
    duplicates: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class DownloadReport:
    """What ``download`` did.

    ``downloaded``: messages fetched and stored (their UIDLs are now recorded). ``skipped``: server
    UIDLs the store already knew. ``deleted_on_server``: deletions the server committed (set only
    after QUIT succeeded, since POP3 deletes nothing before QUIT). ``failed``: ``(uidl, reason)``
    for messages the store refused; they stay on the server.
    """

    downloaded: int = 0
    skipped: int = 0
    deleted_on_server: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class DispatchReport:
    """What ``dispatch`` did.

    ``routed``: messages handed to each route (by route address). ``defaulted``: messages handed
    to the default handler. ``unrouted``: ids of messages no route matched, left in the store
    (only without a default handler). ``missing``: ids listed but gone before they could be read
    (deleted concurrently).
    """

    routed: dict[str, int] = field(default_factory=dict)
    defaulted: int = 0
    unrouted: list[str] = field(default_factory=list)
    missing: int = 0


class SearchResults(list[HitT], Generic[HitT]):
    """Hits of ``search`` or ``semantic_search``, best first, and how much was looked at.

    A list of the usual hit dicts, so code that iterates the hits keeps working. ``complete`` is
    False only when an explicit cap (``scan_limit``) stopped the engine before it had looked at
    every candidate: a better hit may exist. ``examined``: candidates the engine looked at
    (bodies or vectors; 0 where an index answered and does not say). ``engine``: which engine
    answered (``atlas``, ``text``, ``scan``, ``exact``...).
    """

    def __init__(
        self, hits: list[HitT] | None = None, *, complete: bool = True, examined: int = 0, engine: str = ""
    ) -> None:
        super().__init__(hits or [])
        self.complete = complete
        self.examined = examined
        self.engine = engine
