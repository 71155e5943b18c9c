"""Opening a database from a MongoDB URI, and the driver's errors as the package's own.

The code above the store (the command line and its handlers, the warm command host, the mail
adapters) imports no driver and names no collection. It opens its client here
(``AsyncMailClient``), gets a database as an ``AsyncMailDatabase`` (what a store opens on, and the
few reads across a database's mailboxes the commands make), and runs under
``database_errors()``, which raises the driver's exceptions as ``DatabaseError``,
``ServerUnavailableError`` and ``DatabaseUriError`` (``aecs_mongo/errors.py``).
"""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ..pure.blob_location import BLOBS_SETTING, SETTINGS_COLLECTION
from .driver_errors import database_errors
from .migration import MigrationReport, migrate_blobs
from .statements import holds_mail, resolve, to_list
from .store import AsyncMessageStore

__all__ = ["AsyncMailClient", "AsyncMailDatabase", "database_errors", "skip_monitor_join_at_exit"]

#: the name of the text index whose presence means the server's ``$text`` serves search
_TEXT_INDEX = "aecs_bodies_search"


class AsyncMailDatabase:
    """One database of mail: what stores open on (``open_store``), and the reads across its
    mailboxes."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @property
    def name(self) -> str:
        return str(self._handle.name)

    def open_store(self, **options: Any) -> AsyncMessageStore:
        """An ``AsyncMessageStore`` on this database (``options``: its keyword arguments)."""
        return AsyncMessageStore(self._handle, **options)

    async def mailboxes(self) -> list[str]:
        """Every mailbox that holds a message, sorted."""
        return sorted(await self._handle["messages"].distinct("mailboxId"))

    async def counts(self, mailbox_id: str) -> tuple[int, int]:
        """The messages and threads of one mailbox (one index count each)."""
        messages = await self._handle["messages"].count_documents({"mailboxId": mailbox_id})
        threads = await self._handle["threads"].count_documents({"mailboxId": mailbox_id})
        return int(messages), int(threads)

    async def has_text_index(self) -> bool:
        """Whether the server's ``$text`` index of bodies is there (it then serves search)."""
        listed = await to_list(await resolve(self._handle["bodies"].list_indexes()))
        return _TEXT_INDEX in {ix["name"] for ix in listed}

    async def recorded_blobs(self) -> dict[str, Any] | None:
        """The database's blob-location settings document (``pure/blob_location.py``), or None
        before the first write recorded one. By ``_id``: one indexed read."""
        found: dict[str, Any] | None = await self._handle[SETTINGS_COLLECTION].find_one({"_id": BLOBS_SETTING})
        return found

    async def holds_mail(self) -> bool:
        """Whether any message is stored (one read on the ``_id`` index)."""
        return await holds_mail(self._handle["messages"])

    async def migrate_blobs(self, to: str, *, source: str | None = None) -> MigrationReport:
        """Move every blob of the database to ``to`` (``migration.migrate_blobs``)."""
        return await migrate_blobs(self._handle, to, source=source)

    async def oplog(self) -> dict[str, Any] | None:
        """The server's oplog (``local.oplog.rs``): entries, bytes and its bounds, as far as the
        server says; None where there is none (a standalone server) or it cannot be read."""
        local = self._handle.client["local"]
        entry: dict[str, Any] = dict.fromkeys(("count", "size", "storageSize", "maxSize", "max"))
        found = False
        try:
            stats = await local.command({"collStats": "oplog.rs"})
            entry.update({k: stats.get(k) for k in entry})
            found = True
        except (PyMongoError, NotImplementedError):
            pass
        try:
            rows = await to_list(await resolve(local["oplog.rs"].aggregate([{"$collStats": {"storageStats": {}}}])))
            storage = rows[0].get("storageStats", {}) if rows else {}
            for key in entry:
                if entry[key] is None and storage.get(key) is not None:
                    entry[key] = storage[key]
                    found = True
        except (PyMongoError, NotImplementedError):
            pass
        return entry if found else None


class AsyncMailClient:
    """A client of one MongoDB deployment, opened from its URI: ``database(name)`` and
    ``close()``. ``timeout_ms`` bounds server selection and each connection attempt, so an
    unreachable server is a ``ServerUnavailableError`` after that long. An unusable URI is a
    ``DatabaseUriError`` here."""

    def __init__(self, uri: str, *, timeout_ms: int) -> None:
        with database_errors():
            self._client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
                uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms
            )

    def database(self, name: str) -> AsyncMailDatabase:
        return AsyncMailDatabase(self._client[name])

    async def ping(self) -> None:
        """Reach the server now (a ``ServerUnavailableError`` when it does not answer)."""
        with database_errors():
            await self._client.admin.command("ping")

    async def close(self) -> None:
        await self._client.close()


def skip_monitor_join_at_exit() -> None:
    """Leave out the driver's exit hook that joins the monitor threads of closed clients.

    Every client a command opened is closed before it exits, but PyMongo's exit hook still joins
    their monitor threads, which sleep in steps of 0.5 s (its minimum heartbeat interval): about
    half of a warm short command's time. Those threads are daemon threads of closed clients, so
    the command line's exit leaves the hook out; nothing where the driver has none."""
    import atexit
    import sys

    monitor = sys.modules.get("pymongo.synchronous.monitor")
    shutdown = getattr(monitor, "_shutdown_resources", None)
    allowed = getattr(sys.modules.get("pymongo.periodic_executor"), "_daemon_threads_allowed", None)
    if shutdown is not None and allowed is not None and allowed():
        atexit.unregister(shutdown)
