"""Every index the store needs, as data: the one source for ``ensure_indexes()`` and indexes.js.

The six indexes of AECS-1's MongoDB layout keep their names; where one ends before the keyset
tie-breaker (participant, threads) the tie-breaker is appended under the same name, so the index
provides the whole sort of the read it serves. The other ``aecs_*`` indexes back tags and
folders, the POP3 pipeline's header lookups (one multikey index, ``aecs_messages_lookups``:
``messages`` keeps at most 8 indexes besides ``_id``, as each one costs every write; the
mailbox's sample and the stale-row scan read ``_id`` ranges, on no index of their own), the IMAP
sync's records (``imap_sources``, ``imap_folders``) and the ingest
record of file sources (``file_sources``). The GridFS indexes are the ones drivers create only
on an empty bucket; creating them up front makes a bootstrap complete.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ATLAS_SEARCH_INDEX",
    "ATLAS_VECTOR_INDEX_NAME",
    "BARRIER_COLLECTION",
    "BLOCKS_COLLECTION",
    "INDEXES",
    "MAX_VECTOR_DIMENSIONS",
    "RETIRED_INDEXES",
    "TEXT_WEIGHT",
    "VECTORS_COLLECTION",
    "IndexReport",
    "IndexSpec",
    "SearchIndexSpec",
    "atlas_search_commands",
    "atlas_search_indexes",
    "atlas_vector_index",
    "blob_indexes",
    "gridfs_indexes",
    "index_specs",
    "text_index_is_older",
]

Key = tuple[str, "int | str"]

#: The ``$text`` weight of ``subject`` and ``clean`` (an attachment's text weighs 1), so a word
#: the sender wrote ranks above the same word in an attachment.
TEXT_WEIGHT = 5


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

    def text_weights(self) -> dict[str, int]:
        """Each text field's weight, as the server lists it (``weights``; 1 where not given)."""
        given = self.options.get("weights") or {}
        return {f: int(given.get(f, 1)) for f, direction in self.keys if direction == "text"}


def text_index_is_older(spec: IndexSpec, found: dict[str, Any]) -> bool:
    """Whether a listed text index is an earlier release's of ``spec``: some of its text fields
    (no other), not all of them or with other weights. mongod keeps ``_fts``/``_ftsx`` in
    ``key`` and lists the fields in ``weights``; a server that lists no weights (a test double)
    shows the text fields in ``key``. An index on fields ``spec`` lacks is not ours to drop."""
    wanted = spec.text_weights()
    weights = found.get("weights")
    if isinstance(weights, dict) and weights:
        have = {str(f): int(w) for f, w in weights.items()}
        return set(have) <= set(wanted) and have != wanted
    fields = {str(f) for f, direction in found["key"].items() if direction == "text"}
    return fields < set(wanted)


INDEXES: tuple[IndexSpec, ...] = (
    # AECS-1's MongoDB layout (thread, inbox, participant, references, search, threads)
    IndexSpec("messages", "aecs_messages_thread", (("mailboxId", 1), ("threadKey", 1), ("ts", 1), ("messageKey", 1))),
    IndexSpec("messages", "aecs_messages_inbox", (("mailboxId", 1), ("ts", -1), ("messageKey", -1))),
    IndexSpec(
        "messages",
        "aecs_messages_participant",
        (("mailboxId", 1), ("participants", 1), ("ts", -1), ("messageKey", -1)),
    ),
    IndexSpec("messages", "aecs_messages_references", (("mailboxId", 1), ("references", 1))),
    # tags and flags (JMAP keywords): tag: reads sorted like the inbox, store.tags() counts
    IndexSpec("messages", "aecs_messages_tags", (("mailboxId", 1), ("tags", 1), ("ts", -1), ("messageKey", -1))),
    # folder: reads (and set_folders/tag by a folder) sorted like the inbox
    IndexSpec("messages", "aecs_messages_folders", (("mailboxId", 1), ("folders", 1), ("ts", -1), ("messageKey", -1))),
    # full-text search covers subject, clean and the attachments' text (not forAI, not html);
    # the weights rank what the sender wrote above what an attachment holds
    IndexSpec(
        "bodies",
        "aecs_bodies_search",
        (("mailboxId", 1), ("subject", "text"), ("clean", "text"), ("attachmentTexts.text", "text")),
        {"weights": {"subject": TEXT_WEIGHT, "clean": TEXT_WEIGHT, "attachmentTexts.text": 1}},
    ),
    IndexSpec("threads", "aecs_threads_recent", (("mailboxId", 1), ("lastTs", -1), ("_id", -1))),
    # the POP3 pipeline's header lookups (find(), list_messages(sender=...), replies), one
    # multikey index over the prefixed keys of ``lookups`` (the attribute pattern): an equality
    # on one key, then the (ts, messageKey) order, walked backwards for newest first
    IndexSpec("messages", "aecs_messages_lookups", (("mailboxId", 1), ("lookups", 1), ("ts", 1), ("messageKey", 1))),
    IndexSpec("uidls", "aecs_uidls_mailbox", (("mailboxId", 1), ("uidl", 1)), {"unique": True}),
    IndexSpec("uidls", "aecs_uidls_message", (("mailboxId", 1), ("messageKey", 1))),
    # the exact vector search off Atlas (aecs_mongo.vectors): the unsealed vectors, and the blocks
    IndexSpec("vectors", "aecs_vectors_unsealed", (("mailboxId", 1), ("block", 1))),
    IndexSpec("vector_blocks", "aecs_vector_blocks_mailbox", (("mailboxId", 1), ("seq", -1))),
    # the IMAP sync (aecs_mongo.mail.imap): where each message was seen, and each folder's position
    IndexSpec("imap_sources", "aecs_imap_sources_message", (("mailboxId", 1), ("messageKey", 1))),
    IndexSpec(
        "imap_sources",
        "aecs_imap_sources_folder",
        (("mailboxId", 1), ("account", 1), ("folder", 1), ("uidvalidity", 1), ("uid", 1)),
    ),
    IndexSpec(
        "imap_folders", "aecs_imap_folders_mailbox", (("mailboxId", 1), ("account", 1), ("folder", 1)), {"unique": True}
    ),
    # the ingest record of file sources (aecs_mongo.mail.follow): a re-run's one read per source
    # root, and "is a copy of this message left anywhere" (--remove-missing)
    IndexSpec("file_sources", "aecs_file_sources_dir", (("mailboxId", 1), ("root", 1), ("dir", 1))),
    IndexSpec("file_sources", "aecs_file_sources_message", (("mailboxId", 1), ("messageKey", 1))),
)


#: Indexes earlier releases created that ``ensure_indexes()`` drops where it finds them, by
#: collection: the per-header lookup indexes that ``aecs_messages_lookups`` replaces, and the
#: spec-version index (the mailbox's sample and the stale-row scan read the ``_id`` index: a
#: mailbox's messages are one ``_id`` range).
RETIRED_INDEXES: tuple[tuple[str, str], ...] = (
    ("messages", "aecs_messages_from"),
    ("messages", "aecs_messages_in_reply_to"),
    ("messages", "aecs_messages_subject"),
    ("messages", "aecs_messages_list_id"),
    ("messages", "aecs_messages_recipients"),
    ("messages", "aecs_messages_spec_version"),
)


def gridfs_indexes(bucket_name: str) -> tuple[IndexSpec, ...]:
    """The GridFS spec's two indexes, under the names drivers give them."""
    return (
        IndexSpec(f"{bucket_name}.files", "filename_1_uploadDate_1", (("filename", 1), ("uploadDate", 1))),
        IndexSpec(f"{bucket_name}.chunks", "files_id_1_n_1", (("files_id", 1), ("n", 1)), {"unique": True}),
    )


def blob_indexes(bucket_name: str) -> tuple[IndexSpec, ...]:
    """The store's own index on GridFS ``files``: the blobs of given messages by the metadata
    every upload carries, whatever their names (``expire`` removes a batch's blobs with it)."""
    return (
        IndexSpec(
            f"{bucket_name}.files", "aecs_files_message", (("metadata.mailboxId", 1), ("metadata.messageKey", 1))
        ),
    )


def index_specs(bucket_name: str = "aecs") -> tuple[IndexSpec, ...]:
    """Every index of a store whose GridFS bucket is ``bucket_name``, in creation order."""
    return INDEXES + gridfs_indexes(bucket_name) + blob_indexes(bucket_name)


@dataclass
class IndexReport:
    """What ``ensure_indexes()`` did: names per outcome; ``skipped`` maps a name to the reason."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: indexes of earlier releases found and dropped (``RETIRED_INDEXES``)
    dropped: list[str] = field(default_factory=list)
    #: ``messages`` documents of earlier releases given their ``lookups`` (or rid of its ``to:`` keys)
    upgraded: int = 0

    @property
    def ok(self) -> bool:
        """True when every index exists, or only the optional text index was refused (a refused
        Atlas index, asked for with ``atlas=True``, is not ok)."""
        return all(name == "aecs_bodies_search" for name in self.skipped)


# --- Atlas Search and Atlas Vector Search (Atlas only; created by indexes.js with `var atlas=true`) ---

VECTORS_COLLECTION = "vectors"
"""One document per message: ``_id`` and ``mailboxId`` as in ``messages``, ``threadKey``, ``embedding``
(a BSON binData float32 vector, which the Atlas ``vector`` field type indexes as it is; older
releases wrote an array of doubles, indexed alike), ``rev``, and its ``int8`` copy until it is
sealed into a block (then ``block``; see ``vectors``)."""

BLOCKS_COLLECTION = "vector_blocks"
"""The quantized copies of sealed vectors, about a thousand per document (see ``vectors``)."""

BARRIER_COLLECTION = "journal_barrier"
"""One document (``_id: "journal"``, a counter) that a journaled write increments where a batch
wrote nothing new of its own, on a server whose dialect says a write that changes nothing is
not journaled (``Dialect.barrier_counter``): there the barrier must change something. It holds
no mail: no mailbox's data, not swept by an erase."""

ATLAS_VECTOR_INDEX_NAME = "aecs_vectors_atlas"
MAX_VECTOR_DIMENSIONS = 8192
"""The largest ``numDimensions`` Atlas Vector Search accepts."""


@dataclass(frozen=True)
class SearchIndexSpec:
    """One Atlas Search (``type="search"``) or Atlas Vector Search (``"vectorSearch"``) index."""

    collection: str
    name: str
    type: str
    definition: dict[str, Any]

    def model(self) -> dict[str, Any]:
        """The index document of a ``createSearchIndexes`` command (``type`` only when not the default)."""
        doc: dict[str, Any] = {"name": self.name}
        if self.type != "search":
            doc["type"] = self.type
        doc["definition"] = copy.deepcopy(self.definition)
        return doc

    def command(self) -> dict[str, Any]:
        """The ``createSearchIndexes`` command document for this index alone."""
        return {"createSearchIndexes": self.collection, "indexes": [self.model()]}


ATLAS_SEARCH_INDEX = SearchIndexSpec(
    "bodies",
    "aecs_bodies_atlas",
    "search",
    {
        "mappings": {
            "dynamic": False,
            "fields": {
                "subject": {"type": "string", "analyzer": "lucene.standard"},
                "clean": {"type": "string", "analyzer": "lucene.standard"},
                "attachmentTexts": {
                    "type": "document",
                    "fields": {"text": {"type": "string", "analyzer": "lucene.standard"}},
                },
                "mailboxId": {"type": "token"},
            },
        },
    },
)
"""Full-text search over the subject, the cleaned body and the attachments' text; ``mailboxId``
as a token so every query filters on it."""


def atlas_vector_index(num_dimensions: int = 1536) -> SearchIndexSpec:
    """The vector index on ``vectors.embedding`` (cosine), with ``mailboxId`` and ``threadKey`` as filters."""
    if isinstance(num_dimensions, bool) or not isinstance(num_dimensions, int):
        raise TypeError(f"num_dimensions must be an int, not {type(num_dimensions).__name__}")
    if not 1 <= num_dimensions <= MAX_VECTOR_DIMENSIONS:
        raise ValueError(f"num_dimensions must be between 1 and {MAX_VECTOR_DIMENSIONS}, not {num_dimensions}")
    return SearchIndexSpec(
        VECTORS_COLLECTION,
        ATLAS_VECTOR_INDEX_NAME,
        "vectorSearch",
        {
            "fields": [
                {"type": "vector", "path": "embedding", "numDimensions": num_dimensions, "similarity": "cosine"},
                {"type": "filter", "path": "mailboxId"},
                {"type": "filter", "path": "threadKey"},
            ],
        },
    )


def atlas_search_indexes(num_dimensions: int = 1536) -> tuple[SearchIndexSpec, ...]:
    """Every Atlas search index of a store, in creation order."""
    return (ATLAS_SEARCH_INDEX, atlas_vector_index(num_dimensions))


def atlas_search_commands(num_dimensions: int = 1536) -> list[tuple[str, dict[str, Any]]]:
    """``(collection, createSearchIndexes command)`` per Atlas index, for ``db.command(...)``.

    Each command is a fresh copy. Atlas builds search indexes asynchronously: poll
    ``$listSearchIndexes`` until ``queryable`` before relying on one.
    """
    return [(spec.collection, spec.command()) for spec in atlas_search_indexes(num_dimensions)]
