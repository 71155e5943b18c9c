"""Every index the store needs, as data: the one source for ``ensure_indexes()`` and indexes.js.

The six seed indexes keep their names; where a seed index ends before the keyset tie-breaker
(participant, threads) the tie-breaker is appended under the same name, so the index provides
the whole sort of the read it serves (AECS-1 C.2, C.3). The extra ``aecs_*`` indexes back the
seed-003 header lookups and the stale-row scan. The GridFS indexes are the ones drivers create
only on an empty bucket; creating them up front makes a bootstrap complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["INDEXES", "IndexReport", "IndexSpec", "gridfs_indexes", "index_specs"]

Key = tuple[str, "int | str"]


@dataclass(frozen=True)
class IndexSpec:
    """One index: the collection (``messages``, or a bucket suffix like ``{bucket}.files``)."""

    collection: str
    name: str
    keys: tuple[Key, ...]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def is_text(self) -> bool:
        return any(direction == "text" for _, direction in self.keys)

    def for_bucket(self, bucket_name: str) -> IndexSpec:
        return IndexSpec(self.collection.format(bucket=bucket_name), self.name, self.keys, dict(self.options))


INDEXES: tuple[IndexSpec, ...] = (
    # the seed's six (AECS-1 C.3 / the MongoDB layout)
    IndexSpec("messages", "aecs_messages_thread", (("mailboxId", 1), ("threadKey", 1), ("ts", 1), ("messageKey", 1))),
    IndexSpec("messages", "aecs_messages_inbox", (("mailboxId", 1), ("ts", -1), ("messageKey", -1))),
    IndexSpec(
        "messages",
        "aecs_messages_participant",
        (("mailboxId", 1), ("participants", 1), ("ts", -1), ("messageKey", -1)),
    ),
    IndexSpec("messages", "aecs_messages_references", (("mailboxId", 1), ("references", 1))),
    IndexSpec("bodies", "aecs_bodies_search", (("mailboxId", 1), ("clean", "text"))),
    IndexSpec("threads", "aecs_threads_recent", (("mailboxId", 1), ("lastTs", -1), ("_id", -1))),
    # lookups: list_messages(sender=...), seed 003 find(), replies, stale rows, UIDLs
    IndexSpec("messages", "aecs_messages_from", (("mailboxId", 1), ("from.email", 1), ("ts", -1), ("messageKey", -1))),
    IndexSpec(
        "messages", "aecs_messages_in_reply_to", (("mailboxId", 1), ("inReplyTo", 1), ("ts", 1), ("messageKey", 1))
    ),
    IndexSpec("messages", "aecs_messages_subject", (("mailboxId", 1), ("subjectKey", 1), ("ts", 1), ("messageKey", 1))),
    IndexSpec("messages", "aecs_messages_list_id", (("mailboxId", 1), ("listId", 1), ("ts", 1), ("messageKey", 1))),
    IndexSpec("messages", "aecs_messages_spec_version", (("mailboxId", 1), ("specVersion", 1), ("messageKey", 1))),
    IndexSpec("uidls", "aecs_uidls_mailbox", (("mailboxId", 1), ("uidl", 1)), {"unique": True}),
)


def gridfs_indexes(bucket_name: str) -> tuple[IndexSpec, ...]:
    """The GridFS spec's two indexes, under the names drivers give them."""
    return (
        IndexSpec(f"{bucket_name}.files", "filename_1_uploadDate_1", (("filename", 1), ("uploadDate", 1))),
        IndexSpec(f"{bucket_name}.chunks", "files_id_1_n_1", (("files_id", 1), ("n", 1)), {"unique": True}),
    )


def index_specs(bucket_name: str = "aecs") -> tuple[IndexSpec, ...]:
    """Every index of a store whose GridFS bucket is ``bucket_name``, in creation order."""
    return INDEXES + gridfs_indexes(bucket_name)


@dataclass
class IndexReport:
    """What ``ensure_indexes()`` did: names per outcome; ``skipped`` maps a name to the reason."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every index exists, or only the optional text index was refused."""
        return all(name == "aecs_bodies_search" for name in self.skipped)
