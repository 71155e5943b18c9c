"""Where a database's blobs live: blob-store URLs, the settings document, the file layout. Pure.

A blob store is named by a URL:

- ``gridfs`` or ``gridfs://BUCKET``: GridFS in the store's own database (the library default);
- ``file:///DIR``: one file per blob under a local directory, zstd-compressed;
- ``s3://BUCKET/PREFIX`` (S3 and S3-compatible services: R2, MinIO, Ceph), ``gs://BUCKET/PREFIX``,
  ``az://CONTAINER/PREFIX``: object storage through obstore, credentials and endpoint from the
  service's standard environment (never from the URL, which is recorded in the database).

The object keys are the GridFS ``_id`` values (``aecs/<sha256(mailboxId)>/<messageKey>/raw.eml``,
``body.html``, ``att/<idx>``, ``variants/<sha256>.eml``, ``body.json``) under the URL's prefix:
hashes and fixed names only, so no email content reaches a key or a path.

One settings document (``SETTINGS_COLLECTION``, ``_id`` ``"blobs"``) records the location the
database's blobs are in; a store opened with another one is refused (``location_verdict``).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import BlobLocationError
from .keys import PARTS_FOLDER

try:  # Python 3.14+: the standard library's; before, its backport (PSF licence, a dependency)
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on the Python version
    from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = [
    "BLOBS_SETTING",
    "SCHEMES",
    "SETTINGS_COLLECTION",
    "SWEEP_GRACE_SECONDS",
    "BlobLocation",
    "check_key",
    "compress",
    "decompress",
    "location_verdict",
    "parse_blob_url",
    "settings_document",
    "shown",
    "sweep_candidates",
]

#: The collection of database-wide settings (one document per setting).
SETTINGS_COLLECTION = "aecs_settings"
#: The ``_id`` of the document that records where the database's blobs are.
BLOBS_SETTING = "blobs"
#: The URL schemes a blob store can have.
SCHEMES = ("gridfs", "file", "s3", "gs", "az")
#: zstd level of the file store: level 3 compresses mail better than zlib's level 6, and about
#: eight times as fast (the benchmarks page has the numbers).
ZSTD_LEVEL = 3

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_SEGMENT = re.compile(r"[A-Za-z0-9._=+-]+")
#: a blob key: the hashed prefix, then fixed names (``att/3``, ``variants/<sha>.eml``)
_KEY = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


@dataclass(frozen=True)
class BlobLocation:
    """A parsed blob-store URL. ``bucket``: the GridFS bucket, or the object store's bucket or
    container; ``prefix``: the object keys' prefix ("" or ending in ``/``); ``path``: the file
    store's absolute directory."""

    scheme: Literal["gridfs", "file", "s3", "gs", "az"]
    bucket: str = ""
    prefix: str = ""
    path: str = ""

    @property
    def url(self) -> str:
        """The canonical URL, as the settings document records it (no secret: none is accepted)."""
        if self.scheme == "gridfs":
            return f"gridfs://{self.bucket}"
        if self.scheme == "file":
            return "file://" + self.path
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def gridfs(self) -> bool:
        return self.scheme == "gridfs"


def shown(url: object) -> str:
    """A URL as an error may show it: without user information (a secret someone put there)."""
    return re.sub(r"//[^/@]*@", "//***@", str(url))


def parse_blob_url(url: object, default_bucket: str = "aecs") -> BlobLocation:
    """``url`` as a ``BlobLocation``; a ``BlobLocationError`` says what is wrong with it.

    Credentials and options never go in the URL (the database records it): object stores take
    them from their standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...).
    """
    if not isinstance(url, str):
        raise TypeError(f"a blob store is a URL (str) or a blob store object, not {type(url).__name__}")
    text = url.strip()
    if text == "gridfs":
        return BlobLocation("gridfs", default_bucket)
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise BlobLocationError(
            f"not a blob store URL: {shown(text)!r} (say gridfs, gridfs://BUCKET, file:///DIR, "
            "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX)",
            url=shown(text),
        )
    if "?" in rest or "#" in rest:
        raise BlobLocationError(
            f"{shown(text)}: a blob store URL takes no options; object stores read theirs from the "
            "environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...)",
            url=shown(text),
        )
    if scheme == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost") or not slash:
            raise BlobLocationError(f"{shown(text)}: say file:///ABSOLUTE/DIR", url=shown(text))
        parts = [part for part in path.split("/") if part]
        path = "/" + "/".join(parts)
        if any(part in (".", "..") for part in parts):
            raise BlobLocationError(f"{text}: the directory must be a plain absolute path", url=text)
        return BlobLocation("file", path=path)
    if "@" in rest.split("/", 1)[0]:
        raise BlobLocationError(
            f"{shown(text)}: credentials do not go in a blob store URL (the database records it); "
            "set them in the environment",
            url=shown(text),
        )
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise BlobLocationError(f"{text}: {bucket!r} is not a bucket name", url=text)
    if scheme == "gridfs":
        if prefix.strip("/"):
            raise BlobLocationError(f"{text}: a GridFS bucket has no prefix", url=text)
        return BlobLocation("gridfs", bucket)
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") or not _SEGMENT.fullmatch(p) for p in parts):
        raise BlobLocationError(f"{text}: the prefix may hold letters, digits and ._=+- between slashes", url=text)
    return BlobLocation(scheme, bucket, "".join(p + "/" for p in parts))  # type: ignore[arg-type]


def check_key(key: str) -> str:
    """A blob key the store writes (hashes and fixed names); anything else is refused, so a key
    never climbs out of the file store's directory or the object store's prefix."""
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"not a blob key: {key!r}")
    return key


def compress(data: bytes) -> bytes:
    """One zstd frame (what the file store writes; ``zstd -d`` reads it)."""
    return bytes(zstd.compress(data, ZSTD_LEVEL))


def decompress(data: bytes) -> bytes:
    return bytes(zstd.decompress(data))


def settings_document(location: BlobLocation) -> dict[str, Any]:
    """The settings document that records ``location`` (its URL: no secret)."""
    return {
        "_id": BLOBS_SETTING,
        "url": location.url,
        "since": _dt.datetime.now(_dt.UTC).replace(microsecond=0),
    }


def location_verdict(
    recorded: Mapping[str, Any] | None, has_mail: bool, opened: BlobLocation
) -> Literal["ok", "record"]:
    """Whether a store opened with ``opened`` may use the database: ``ok`` (the settings
    document names it), ``record`` (no settings document and nothing stored that says
    otherwise: record it), or a ``BlobLocationError``.

    A database with mail but no settings document was written before blob stores had a choice:
    its blobs are in GridFS, so only a GridFS store may open it (``blobs migrate`` moves them).
    """
    if recorded is not None:
        url = str(recorded.get("url"))
        if url == opened.url:
            return "ok"
        raise BlobLocationError(
            f"this database's blobs are in {url}, not {opened.url}: open it with --blobs {url} "
            f"(or blobs={url!r}), or move them with: aecs-mongo blobs migrate --to {opened.url}",
            url=opened.url,
            recorded=url,
        )
    if has_mail and not opened.gridfs:
        raise BlobLocationError(
            "this database holds mail stored before blob stores were recorded, so its blobs are in "
            f"GridFS, not {opened.url}: open it with --blobs gridfs, or move them with: "
            f"aecs-mongo blobs migrate --to {opened.url}",
            url=opened.url,
            recorded="gridfs",
        )
    return "record"


#: The sweep's default grace: a blob younger than this is never removed, whatever its row. A
#: writer commits a message's row within its batch's retries (``retry_seconds``, 120 s by
#: default) of uploading its blobs; an hour leaves a wide margin over that.
SWEEP_GRACE_SECONDS = 3600.0


def sweep_candidates(listed: Iterable[tuple[str, float]], root: str, cutoff: float) -> dict[str, str]:
    """The message prefixes under a mailbox's blob ``root`` whose every blob is older than
    ``cutoff`` (epoch seconds): ``{messageKey: prefix}``. Only those may be swept, and only if
    no row names them: a blob younger than the cutoff may belong to a row about to commit."""
    newest: dict[str, float] = {}
    for key, modified in listed:
        message_key = key[len(root) :].split("/", 1)[0]
        if message_key == PARTS_FOLDER:  # the mailbox's parts: their records decide (part_records.py)
            continue
        newest[message_key] = max(newest.get(message_key, modified), modified)
    return {mkey: f"{root}{mkey}/" for mkey, modified in newest.items() if mkey and modified < cutoff}
