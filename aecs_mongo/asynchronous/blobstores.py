"""The blob-store interface (``AsyncBlobStore``), and the stores outside the database.

``AsyncBlobStore`` is the interface: put a batch of blobs (idempotent, create-if-absent, durable
before it returns), get one or many, delete by key or by a message's prefix, list a prefix. Three
kinds implement it, chosen by a URL (``pure/blob_location.py``): GridFS in the store's database
(``gridfsblobs.py``), a local directory (``filestore.py``) and object storage through obstore
(``objectstore.py``); the last two are ``AsyncExternalBlobStore`` here.

The file and object backends (``filestore.py``, ``objectstore.py``) are blocking code that does
its own parallel I/O on a pool of threads (a batch's fsyncs, a batch's PUTs, which the kernel
and the HTTP client then overlap); ``AsyncExternalBlobStore`` runs each call of theirs on a
thread of its own pool, so an event loop never waits on a disk or a socket. The sync twin runs
the same calls the same way and waits for them.
"""

from __future__ import annotations

from asyncio import wrap_future
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from ..pure.blob_location import BlobLocation, check_key, parse_blob_url
from ..pure.documents import Blob

__all__ = ["AsyncBlobStore", "AsyncExternalBlobStore", "Backend", "Stager", "open_external"]

T = TypeVar("T")

#: the calls of every external store of the process (each fans its own I/O out further)
_RUNNER: list[ThreadPoolExecutor] = []


def _runner() -> ThreadPoolExecutor:
    if not _RUNNER:
        _RUNNER.append(ThreadPoolExecutor(8, thread_name_prefix="aecs-blobs"))
    return _RUNNER[0]


class AsyncBlobStore:
    """Where a store keeps raw.eml, body.html and attachment bytes: one interface for GridFS, a
    local directory and object storage. ``MessageStore(db, blobs=...)`` takes a URL (``gridfs``,
    ``gridfs://BUCKET``, ``file:///DIR``, ``s3://BUCKET/PREFIX``, ``gs://...``, ``az://...``)
    or a store made by ``from_url`` (to pass obstore options such as credentials in code).

    Every kind gives the same guarantees: ``put`` returns once the blobs are durable (a file
    is written to a temporary name, synced, renamed and its directory synced; an object is
    PUT), and uploads a blob only where none is stored under its key (create-if-absent), so a
    re-delivery or a retry changes nothing; a blob is visible under its key only when complete.
    """

    #: the store's URL, as the database's settings document records it (no secret)
    url: str = ""
    #: GridFS in the store's own database (whose blobs the database statements reach directly)
    gridfs: bool = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncBlobStore:
        """A file or object store by its URL; ``options`` go to obstore's ``from_url`` (object
        stores: ``config``, ``client_options``, ``retry_config``, ``credential_provider``).
        GridFS lives in a database: give its URL (``gridfs://BUCKET``) to the message store."""
        return open_external(parse_blob_url(url), **options)

    @property
    def location(self) -> BlobLocation:
        return parse_blob_url(self.url)

    async def put(self, items: Sequence[tuple[Blob, str]], *, absent: bool = False, durable: bool = True) -> None:
        """Store each ``(blob, messageKey)`` whose key holds no blob yet; durable on return
        (``durable=False``: skip the syncs, for imports that can be re-run). ``absent``: the
        blobs belong to messages not stored, so none is expected (a hint; never required)."""
        raise NotImplementedError

    def put_started(self, items: Sequence[tuple[Blob, str]], *, durable: bool = True) -> Future[None] | None:
        """``put(items, absent=True)`` started on a thread, to be waited for before anything
        that needs the blobs (their records); None where a store has no such thread (GridFS:
        the caller puts them in order)."""
        return None

    async def get(self, key: str) -> bytes | None:
        """One blob's bytes, or None where none is stored under ``key``."""
        raise NotImplementedError

    async def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The blobs of ``keys`` that are stored (the missing ones left out)."""
        found = {key: await self.get(key) for key in keys}
        return {key: data for key, data in found.items() if data is not None}

    async def delete(self, keys: Sequence[str]) -> int:
        """Remove the blobs of ``keys`` (missing ones are no error); how many were there."""
        raise NotImplementedError

    async def delete_prefix(self, prefix: str, *, dry_run: bool = False) -> int:
        """Remove every blob whose key starts with ``prefix`` (a message's or a mailbox's, ending
        in ``/``), leftovers of interrupted uploads included; how many (``dry_run``: count)."""
        raise NotImplementedError

    async def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        """``(key, modified)`` of every complete blob under ``prefix`` (``modified``: epoch
        seconds), sorted by key."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the store holds (nothing for most)."""

    def stager(self) -> Stager | None:
        """What writes blobs ahead of their ``put`` (blocking calls, for a thread that builds the
        next batch): the file store's (``filestore.py``); None where a store has none."""
        return None


class Stager(Protocol):
    """Blobs written and synced ahead of their ``put``, which then only names them; ``unstage``
    removes those no ``put`` took. Keyed by blob key, matched by the very bytes object."""

    def stage(self, items: Sequence[tuple[str, bytes]]) -> None: ...

    def unstage(self, items: Sequence[tuple[str, bytes]]) -> None: ...


class Backend(Protocol):
    """What a file or object backend does, blocking (``AsyncBlobStore`` says each call's terms)."""

    url: str

    def put_many(self, items: Sequence[tuple[str, bytes]], absent: bool, durable: bool) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]: ...

    def delete(self, keys: Sequence[str]) -> int: ...

    def delete_prefix(self, prefix: str, dry_run: bool) -> int: ...

    def list_keys(self, prefix: str) -> list[tuple[str, float]]: ...


class AsyncExternalBlobStore(AsyncBlobStore):
    """A file or object store: ``backend``'s blocking calls, each on a thread."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.url = backend.url

    def stager(self) -> Stager | None:
        stage = getattr(self.backend, "stage", None)
        return self.backend if stage is not None else None  # type: ignore[return-value]

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        future = _runner().submit(fn, *args)
        return await wrap_future(future)

    async def put(self, items: Sequence[tuple[Blob, str]], *, absent: bool = False, durable: bool = True) -> None:
        unique = {check_key(blob.key): blob.data for blob, _ in items}
        if unique:
            await self._call(self.backend.put_many, list(unique.items()), absent, durable)

    def put_started(self, items: Sequence[tuple[Blob, str]], *, durable: bool = True) -> Future[None] | None:
        unique = {check_key(blob.key): blob.data for blob, _ in items}
        if not unique:
            return None
        return _runner().submit(self.backend.put_many, list(unique.items()), True, durable)

    async def get(self, key: str) -> bytes | None:
        return await self._call(self.backend.get, check_key(key))

    async def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        return await self._call(self.backend.get_many, [check_key(k) for k in keys])

    async def delete(self, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        return await self._call(self.backend.delete, [check_key(k) for k in keys])

    async def delete_prefix(self, prefix: str, *, dry_run: bool = False) -> int:
        return await self._call(self.backend.delete_prefix, _checked_prefix(prefix), dry_run)

    async def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        return await self._call(self.backend.list_keys, _checked_prefix(prefix))


def _checked_prefix(prefix: str) -> str:
    if not prefix.endswith("/"):
        raise ValueError(f"a blob prefix ends in '/': {prefix!r}")
    check_key(prefix[:-1])
    return prefix


def open_external(location: BlobLocation, **options: Any) -> AsyncExternalBlobStore:
    """The store of a ``file``, ``s3``, ``gs`` or ``az`` location."""
    if location.scheme == "file":
        from .filestore import FileBackend

        if options:
            raise TypeError(f"a file store takes no options ({', '.join(sorted(options))})")
        return AsyncExternalBlobStore(FileBackend(location))
    if location.scheme == "gridfs":
        raise ValueError("GridFS lives in the store's database: pass its URL (gridfs://BUCKET) to the store")
    from .objectstore import ObjectBackend

    return AsyncExternalBlobStore(ObjectBackend(location, **options))
