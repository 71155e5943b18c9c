"""Object storage (``s3://``, ``gs://``, ``az://``) through obstore (PyPI ``obstore``, MIT).

Credentials, region and endpoint come from the service's standard environment, as obstore
reads it (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``, ``AWS_ENDPOINT_URL`` for S3-compatible services such as R2, MinIO or Ceph,
``AWS_ALLOW_HTTP`` for a plain-HTTP endpoint; ``GOOGLE_*``, ``AZURE_*``), or from options given
to ``AsyncBlobStore.from_url``; never from the URL, which the database records.

An upload is a PUT with ``If-None-Match: *`` (create-if-absent): an object that is there already
(a re-delivery, a retry, a concurrent writer) stays as it is. A PUT is all or nothing, so an
object under its key is complete. The uploads of a batch run at once (16 at a time) and
``put`` returns once every one was acknowledged. Objects are stored as they are (not
compressed): other tools read them, and object storage is priced for it.

S3 (moto's server in the tests) and Azure (Azurite, the emulator) are tested; ``gs://`` goes
through the same calls and is untested here (no GCS emulator speaks the XML API obstore uses).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import BlobStoreError
from ..pure.blob_location import BlobLocation

__all__ = ["ObjectBackend"]

T = TypeVar("T")
#: requests of one batch in flight at once
PARALLEL_REQUESTS = 16
_POOL: list[ThreadPoolExecutor] = []

#: obstore's retries of a failed request (its default waits up to 3 minutes on an unreachable
#: endpoint): 4 attempts within 30 s, then a ``BlobStoreError``; the writer's own re-delivery
#: retries the whole batch
RETRIES: dict[str, Any] = {"max_retries": 3, "retry_timeout": dt.timedelta(seconds=30)}

INSTALL_HINT = "pip install 'aecs-mongo[objects]'"


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(PARALLEL_REQUESTS, thread_name_prefix="aecs-objects"))
    return _POOL[0]


class ObjectBackend:
    """Blobs as objects under the URL's bucket and prefix."""

    def __init__(self, location: BlobLocation, **options: Any) -> None:
        self.url = location.url
        try:
            import obstore
            from obstore.store import from_url
        except ImportError:
            raise BlobStoreError(
                f"blob store {self.url} needs obstore, which is not installed: {INSTALL_HINT}", url=self.url
            ) from None
        self._obstore = obstore
        base = f"{location.scheme}://{location.bucket}/{location.prefix}"
        options.setdefault("retry_config", dict(RETRIES))
        try:
            self._store = from_url(base, **options)
        except Exception as exc:
            raise self._failed(exc, "open the store") from None

    def _failed(self, exc: BaseException, what: str) -> BlobStoreError:
        """The service's answer in one line (obstore's messages name the request's URL and
        status, never a credential), under our URL."""
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return BlobStoreError(f"blob store {self.url}: cannot {what}: {reason[:300]}", url=self.url)

    def _each(self, fn: Callable[[T], Any], items: Sequence[T], what: str) -> list[Any]:
        futures = [_pool().submit(fn, item) for item in items]
        results = []
        failure: BaseException | None = None
        for future in futures:  # every request finishes before the first failure is raised
            try:
                results.append(future.result())
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            if isinstance(failure, BlobStoreError):
                raise failure
            raise self._failed(failure, what) from None
        return results

    def put_many(self, items: Sequence[tuple[str, bytes]], absent: bool, durable: bool) -> None:
        exceptions = self._obstore.exceptions

        def put(item: tuple[str, bytes]) -> None:
            key, data = item
            # a complete copy is there: it stays (create-if-absent)
            with contextlib.suppress(exceptions.AlreadyExistsError, exceptions.PreconditionError):
                self._obstore.put(self._store, key, data, mode="create")

        self._each(put, list(items), "write blobs")

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self._obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failed(exc, f"read {key}") from None

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found = self._each(self.get, list(keys), "read blobs")
        return {key: data for key, data in zip(keys, found, strict=True) if data is not None}

    def delete(self, keys: Sequence[str]) -> int:
        present = [key for key, _ in self._listed(keys)]
        if present:
            try:
                self._obstore.delete(self._store, present)
            except Exception as exc:
                raise self._failed(exc, "remove blobs") from None
        return len(present)

    def _listed(self, keys: Sequence[str]) -> list[tuple[str, float]]:
        """The keys of ``keys`` that are stored (one listing of each message's prefix)."""
        wanted = set(keys)
        prefixes = sorted({key.rsplit("/", 1)[0] + "/" for key in keys})
        listed = [item for prefix in prefixes for item in self.list_keys(prefix)]
        return [item for item in listed if item[0] in wanted]

    def delete_prefix(self, prefix: str, dry_run: bool) -> int:
        keys = [key for key, _ in self.list_keys(prefix)]
        if dry_run or not keys:
            return len(keys)
        try:
            for start in range(0, len(keys), 1000):
                self._obstore.delete(self._store, keys[start : start + 1000])
        except Exception as exc:
            raise self._failed(exc, f"remove {prefix}") from None
        return len(keys)

    def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        try:
            found = [
                (str(meta["path"]), meta["last_modified"].timestamp())
                for chunk in self._obstore.list(self._store, prefix, chunk_size=1000)
                for meta in chunk
            ]
        except Exception as exc:
            raise self._failed(exc, f"list {prefix}") from None
        return sorted(found)
