"""Blob stores outside the database (a local directory, object storage) as ``AsyncBlobStore``.

The file and object backends (``filestore.py``, ``objectstore.py``) are blocking code that does
its own parallel I/O on a pool of threads (a batch's fsyncs, a batch's PUTs, which the kernel
and the HTTP client then overlap); ``AsyncExternalBlobStore`` runs each call of theirs on a
thread of its own pool, so an event loop never waits on a disk or a socket. The sync twin runs
the same calls the same way and waits for them.
"""

from __future__ import annotations

from asyncio import wrap_future
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from ..pure.blob_location import BlobLocation, check_key
from ..pure.documents import Blob
from .blobstore import AsyncBlobStore

__all__ = ["AsyncExternalBlobStore", "Backend", "open_external"]

T = TypeVar("T")

#: the calls of every external store of the process (each fans its own I/O out further)
_RUNNER: list[ThreadPoolExecutor] = []


def _runner() -> ThreadPoolExecutor:
    if not _RUNNER:
        _RUNNER.append(ThreadPoolExecutor(8, thread_name_prefix="aecs-blobs"))
    return _RUNNER[0]


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

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        future = _runner().submit(fn, *args)
        return await wrap_future(future)

    async def put(self, items: Sequence[tuple[Blob, str]], *, absent: bool = False, durable: bool = True) -> None:
        unique = {check_key(blob.key): blob.data for blob, _ in items}
        if unique:
            await self._call(self.backend.put_many, list(unique.items()), absent, durable)

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
