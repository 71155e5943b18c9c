"""A store's settings and what its driver and server can do: values, checked once.

``StoreSettings`` holds the constructor's choices, validated here so that the async store, its
generated sync twin and every concern module read the same checked values. ``Capabilities`` is
what the driver and the deployment can do: the driver's part is known from the database handle
at construction, the server's part (transactions, a text index, whether a query stops at its
limit, an Atlas vector index) is learned on first need by ``asynchronous/capabilities.py`` and
kept here, so the I/O code asks a question instead of testing for a driver.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .dialect import Dialect
from .keys import check_mailbox_id, check_str
from .vectors import VECTOR_ENGINES

__all__ = [
    "MAX_PAGE",
    "SEARCH_ENGINES",
    "SPEC_VERSION",
    "Capabilities",
    "StoreSettings",
    "check_cap",
    "check_limit",
    "parse_duration",
]

#: The AECS-1 version the normalizer writes (``aecs_mongo.normalizer`` takes it from here, so a
#: read that needs the constant does not import the normalizer).
SPEC_VERSION = "1.1"

#: ``search_engine`` values: Atlas Search, ``$text``, the local index (``search_index=``), the
#: scan, or pick (the local index where the store has one, else ``$text`` where the server holds
#: the text index and the query fits it, else the scan).
SEARCH_ENGINES = ("auto", "atlas", "text", "local", "scan")
#: The largest page (and batch) any read or write takes.
MAX_PAGE = 1000


def check_limit(limit: object) -> int:
    """A page size or batch size: an int from 1 to ``MAX_PAGE``."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
    return limit


def check_cap(value: object, name: str) -> int:
    """A positive int (a cap)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be 1 or more")
    return value


@dataclass
class StoreSettings:
    """The store's constructor arguments, checked (``AsyncMessageStore`` documents each)."""

    mailbox_id: str
    bucket_name: str = "aecs"
    owner_addresses: frozenset[str] = frozenset()
    for_ai_max_chars: int = 8000
    search_engine: str = "auto"
    vector_engine: str = "auto"
    scan_limit: int | None = None
    transactions: bool | None = None
    shared_view: bool = False
    sharded: bool = False
    retry_seconds: float = 120.0
    durable: bool = True
    #: the local search index's file (``search_index=``), or None
    search_index: str | None = None
    #: read attachments' text when storing (``attachment_text=``); images too with ``ocr``
    attachment_text: bool = True
    ocr: bool = False
    #: leave attachments unread when storing; ``extract_pending`` reads them later
    extract_later: bool = False
    #: the caller's attachment processors (``accepts``/``process``), tried before the built-ins
    processors: tuple[Any, ...] = ()
    #: append the attachments' text to ``forAI`` (the AECS SDK's ``attachmentsInForAI``)
    attachments_in_for_ai: bool = False
    #: keep each raw message whole as ``raw.eml`` (for readers of the blob store itself), not
    #: as a pack with its large encoded bodies kept once per mailbox (``raw_parts.py``)
    whole_raw: bool = False

    @classmethod
    def checked(cls, mailbox_id: object, owner_addresses: Iterable[str] = (), **options: Any) -> StoreSettings:
        """Validated settings: a ``TypeError`` or ``ValueError`` names the first bad argument."""
        if isinstance(owner_addresses, str):
            raise TypeError("owner_addresses must be a collection of addresses, not one str")
        owners = frozenset(check_str(a, "owner address").strip().lower() for a in owner_addresses)
        settings = cls(check_mailbox_id(mailbox_id), owner_addresses=owners, **options)
        check_str(settings.bucket_name, "bucket_name")
        settings.checked_search_engine()
        settings.checked_vector_engine()
        scan_limit = settings.scan_limit
        if scan_limit is not None and (isinstance(scan_limit, bool) or not isinstance(scan_limit, int)):
            raise TypeError("scan_limit must be None (no cap) or an int")
        if scan_limit is not None and scan_limit < 1:
            raise ValueError("scan_limit must be None (no cap) or at least 1")
        seconds = settings.retry_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise ValueError("retry_seconds must be a number of seconds, 0 or more")
        settings.retry_seconds = float(seconds)
        settings.shared_view = bool(settings.shared_view)
        if not isinstance(settings.whole_raw, bool):
            raise TypeError(f"whole_raw must be a bool, not {type(settings.whole_raw).__name__}")
        settings.sharded = bool(settings.sharded)
        settings.durable = bool(settings.durable)
        settings.attachment_text = bool(settings.attachment_text)
        settings.ocr = bool(settings.ocr)
        settings.extract_later = bool(settings.extract_later)
        settings.attachments_in_for_ai = bool(settings.attachments_in_for_ai)
        if isinstance(settings.processors, (str, bytes)) or not isinstance(settings.processors, Iterable):
            raise TypeError("processors must be a list of objects with accepts() and process()")
        settings.processors = tuple(settings.processors)
        for processor in settings.processors:
            if not callable(getattr(processor, "accepts", None)) or not callable(getattr(processor, "process", None)):
                raise TypeError(f"a processor needs accepts(attachment) and process(attachment, data): {processor!r}")
        if settings.search_index is not None:
            path: object = settings.search_index
            if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"search_index must be a path (str or os.PathLike), not {type(path).__name__}")
            settings.search_index = os.path.abspath(os.path.expanduser(os.fspath(path)))
        return settings

    # the engines are attributes a caller may set later: checked again before each use

    def checked_search_engine(self) -> str:
        if self.search_engine not in SEARCH_ENGINES:
            raise ValueError(f"search_engine must be one of {', '.join(SEARCH_ENGINES)}")
        return self.search_engine

    def checked_vector_engine(self) -> str:
        if self.vector_engine not in VECTOR_ENGINES:
            raise ValueError(f"vector_engine must be one of {', '.join(VECTOR_ENGINES)}")
        return self.vector_engine


@dataclass
class Capabilities:
    """What the server can do, for one store and the clones it makes: each field None until
    learned from the server's answers (``asynchronous/capabilities.py``, the one place that asks)."""

    #: how the server is spoken to (``dialect.Dialect``), from its ``buildInfo``
    dialect: Dialect | None = None
    #: a replica set or a sharded cluster (``hello``): majority writes, change streams
    replica_set: bool | None = None
    #: each batch in one transaction (a replica set or a sharded cluster, unless the store was
    #: made with ``transactions=``)
    transactions: bool | None = None
    #: ``aecs_bodies_search`` exists (the server took the text index)
    text_index: bool | None = None
    #: the server's plan stops at a query's limit instead of reading the whole matched range
    #: first: the dialect's, else learned from ``explain`` on the first windowed read
    stops_at_limit: bool | None = None
    #: Atlas lists the vector index as queryable
    atlas_vectors: bool | None = None
    #: the journal barrier must change a document (``indexes.BARRIER_COLLECTION``): the
    #: dialect's (``Dialect.barrier_counter``)
    barrier_counter: bool | None = None
    #: every ``messages`` document of the store's mailbox carries ``lookups`` (checked, and
    #: filled where one did not, before the first read by it: ``lookups.ensure_lookups``)
    lookups_filled: bool | None = None


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h``, ``1.5m`` -> seconds; ``0`` = stop with the command."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (say 0, 90s, 5m or 1h)")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
