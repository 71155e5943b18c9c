"""What the store's methods and the POP3 pipeline (``aecs_mongo.mail.pop3``) return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .types import MessageSummary, ThreadSummary

__all__ = [
    "DispatchReport",
    "DownloadReport",
    "ImapFolderReport",
    "ImapSyncReport",
    "MessagePage",
    "MigrationReport",
    "SearchResults",
    "StoreResult",
    "TagReport",
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
class TagReport:
    """What ``store.tag`` or ``store.set_folders`` did.

    ``matched``: messages the target named that are stored; ``changed``: those whose tags (or
    folders) this call changed (the others had them already). Running the same change again
    matches as many and changes none. ``dry_run``: nothing was written (``changed`` is what
    would have changed).
    """

    matched: int = 0
    changed: int = 0
    dry_run: bool = False


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
    """Hits of ``search`` or ``semantic_search`` (newest first, or best first), and how much was
    looked at.

    A list of the usual hit dicts, so code that iterates the hits keeps working. ``complete`` is
    False only when an explicit cap (``scan_limit``) stopped the engine before it had looked at
    every candidate: a better hit may exist. ``examined``: candidates the engine looked at
    (bodies or vectors; 0 where an index answered and does not say). ``engine``: which engine
    answered (``atlas``, ``text``, ``local``, ``scan``, ``exact``...). ``next_cursor``: pass it
    back (``search(..., cursor=)``) for the next page of a search newest first; None on the last.
    """

    def __init__(
        self,
        hits: list[HitT] | None = None,
        *,
        complete: bool = True,
        examined: int = 0,
        engine: str = "",
        next_cursor: str | None = None,
    ) -> None:
        super().__init__(hits or [])
        self.complete = complete
        self.examined = examined
        self.engine = engine
        self.next_cursor = next_cursor


# --- the IMAP sync (aecs_mongo.mail.imap) ------------------------------------------------------------


@dataclass
class ImapFolderReport:
    """What ``imap.sync`` did in one folder.

    ``folder``: its name, decoded from modified UTF-7. ``uidvalidity``: the server's, None when
    the folder could not be opened (``error`` says why). ``listed``: UIDs above the saved
    position when the folder was opened (what this run set out to fetch). ``new``: messages
    stored for the first time; ``present``: fetched messages the store already held (the same
    Message-ID, in another folder or from an earlier run that stopped before it saved its
    position); ``failed``: ``(uid, reason)`` of messages the store refused (the position moves
    past them: the same bytes would be refused again). ``vanished``: UIDs listed but expunged
    before they were fetched. ``reset``: the folder's UIDVALIDITY changed since the last run, so
    it was read again from the start. ``position``: the highest UID saved for the folder after
    this run. ``flags_changed``: messages the folder already had whose flags the server changed
    since the last run, brought into the store's tags.
    """

    folder: str
    uidvalidity: int | None = None
    listed: int = 0
    new: int = 0
    present: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    vanished: int = 0
    reset: bool = False
    position: int = 0
    error: str | None = None
    flags_changed: int = 0

    @property
    def done(self) -> int:
        """Listed messages dealt with so far (stored, present, refused or vanished)."""
        return self.new + self.present + len(self.failed) + self.vanished

    def as_dict(self) -> dict[str, object]:
        return {
            "folder": self.folder,
            "uidvalidity": self.uidvalidity,
            "listed": self.listed,
            "new": self.new,
            "present": self.present,
            "failed": [{"uid": uid, "reason": reason} for uid, reason in self.failed],
            "vanished": self.vanished,
            "reset": self.reset,
            "position": self.position,
            "flagsChanged": self.flags_changed,
            "error": self.error,
        }


@dataclass
class ImapSyncReport:
    """What ``imap.sync`` did: one ``ImapFolderReport`` per folder, in the order synced.

    ``interrupted``: a stop was requested and the run ended after the batch in hand. Everything
    counted as ``new`` or ``present`` is committed; the saved positions never run ahead of it.
    """

    account: str
    folders: list[ImapFolderReport] = field(default_factory=list)
    interrupted: bool = False

    @property
    def new(self) -> int:
        return sum(f.new for f in self.folders)

    @property
    def present(self) -> int:
        return sum(f.present for f in self.folders)

    @property
    def failed(self) -> list[tuple[str, int, str]]:
        """``(folder, uid, reason)`` of every refused message."""
        return [(f.folder, uid, reason) for f in self.folders for uid, reason in f.failed]

    @property
    def folder_errors(self) -> list[tuple[str, str]]:
        """``(folder, error)`` of every folder that could not be synced (not found, not selectable)."""
        return [(f.folder, f.error) for f in self.folders if f.error is not None]

    def as_dict(self) -> dict[str, object]:
        return {
            "account": self.account,
            "new": self.new,
            "present": self.present,
            "failed": len(self.failed),
            "interrupted": self.interrupted,
            "folders": [f.as_dict() for f in self.folders],
        }
