"""The file store (``file:///DIR``): one zstd-compressed file per blob.

The blob ``aecs/<mailbox hash>/<messageKey>/<name>`` is the file
``DIR/aecs/<mailbox hash>/<messageKey[:2]>/<messageKey>.<name with / as .>`` (``raw.eml``,
``body.html``, ``att.0``, ``variants.<sha256>.eml``, ``body.json``): no directory per message,
whose blocks (4 KiB each, two per message with attachments) weighed more than the compressed
mail; 256 directories per mailbox instead.

A batch is made durable before ``put`` returns, in this order: every file is written to a
temporary name beside its final one (``.<name>.<random>.tmp``) and synced; each is then linked to
its final name, which fails where a file is already there (create-if-absent: the first
complete copy stays, as in GridFS), and its temporary name removed; last, every directory that
got a new name is synced (and the parent of every directory made). So a name always means a
complete, durable file, and a crash leaves at most temporary files, which ``delete_prefix``
and the sweep remove. The syncs of a batch run on a pool of threads: the kernel then commits
them together (a few threads: see ``SYNC_THREADS``).

Staged ahead (``stage``): ``store_iter`` puts the next batch's files while the current batch is
written to the database (its build thread): the same steps as ``put`` (written and synced under
temporary names, linked to their final names, the directories synced), so ``put`` of that batch
has nothing left to do for them and the batch's rows still come after durable files. Only the
first copy of each message of the batch is put ahead, and only where no raw blob of the message
is there (it is stored, or a crash left it): another copy's other parts would name blobs that
no row holds; ``put`` takes the rest, as before. A file staged for a message that is then never stored (the run stopped
before its batch, or the batch failed) is a blob without a row, as a crash between ``put`` and
the insert leaves: the next delivery of the message reuses it, the sweep removes it
(``sweep_blobs``, once it is older than the grace period).

Compressed with zstd (level 3), so a directory of blobs takes about a quarter of the mail's
size (``zstd -d`` reads a file).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import BlobStoreError
from ..pure.blob_location import BlobLocation, compress, decompress
from ..pure.keys import PARTS_FOLDER
from ..pure.lifecycle import RAW_NAMES

__all__ = ["FileBackend"]

T = TypeVar("T")
#: threads that sync files and directories at once (the kernel groups their journal commits);
#: 4, not 32: the files are synced ahead (``stage``), and on the 2-core test machine 32 threads
#: cost more in hand-offs than they saved (1,000 messages of real mail, ``aecs-mongo ingest``,
#: three rounds each, load 5: 168 msgs/s with 4, 118 with 8, 96 with 32)
SYNC_THREADS = 4
_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="aecs-fsync"))
    return _POOL[0]


def _each(fn: Callable[[T], object], items: Iterable[T]) -> None:
    """``fn`` on every item, on the pool; the first error raised."""
    for future in [_pool().submit(fn, item) for item in items]:
        future.result()


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _message_prefix(key: str) -> str:
    """``aecs/<mailbox>/<messageKey>`` of a blob key."""
    return "/".join(key.split("/", 3)[:3])


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


class FileBackend:
    """Blobs as files under one directory (made 0700 where it does not exist)."""

    def __init__(self, location: BlobLocation) -> None:
        self.url = location.url
        self.root = location.path
        #: blobs put ahead (``stage``), durable under their names: key -> the bytes staged
        self._staged: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if len(parts) < 4:  # a prefix's directory: aecs/, aecs/<mailbox>/
            return os.path.join(self.root, *parts)
        top, mailbox, mkey, name = parts[0], parts[1], parts[2], ".".join(parts[3:])
        if mkey == PARTS_FOLDER:  # aecs/<mailbox>/parts/<sha256>: a folder of its own
            return os.path.join(self.root, top, mailbox, PARTS_FOLDER, name[:2], name)
        return os.path.join(self.root, top, mailbox, mkey[:2], f"{mkey}.{name}")

    def _key(self, path: str) -> str:
        """The blob key of a file's path (``_path`` reversed)."""
        names = os.path.relpath(path, self.root).split(os.sep)
        if len(names) == 5 and names[2] == PARTS_FOLDER:
            return f"{names[0]}/{names[1]}/{PARTS_FOLDER}/{names[4]}"
        top, mailbox, _, filename = names
        mkey, _, name = filename.partition(".")
        kind, _, rest = name.partition(".")
        if kind in ("att", "variants"):
            name = f"{kind}/{rest}"
        return f"{top}/{mailbox}/{mkey}/{name}"

    def _message_files(self, prefix: str) -> list[str]:
        """The files of one message's prefix (``aecs/<mailbox>/<messageKey>/``), temporary ones too."""
        top, mailbox, mkey = prefix.rstrip("/").split("/")
        directory = os.path.join(self.root, top, mailbox, mkey[:2])
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [os.path.join(directory, n) for n in names if n.startswith((mkey + ".", f".{mkey}."))]

    def _failed(self, exc: OSError, what: str) -> BlobStoreError:
        reason = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return BlobStoreError(f"blob store {self.url}: cannot {what}: {reason}", url=self.url)

    def _makedirs(self, directory: str, made: set[str]) -> None:
        """``directory`` and its missing parents; each made one's parent goes in ``made``."""
        if os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        if parent != directory:
            self._makedirs(parent, made)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            return
        made.add(parent)

    def _write_temporary(self, key: str, data: bytes, made: set[str], temporary: list[tuple[str, str]]) -> None:
        final = self._path(key)
        directory, name = os.path.split(final)
        self._makedirs(directory, made)
        temp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        # private from its creation, and removed by the caller if the write fails (a full
        # disk): never a leftover that other users can read
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        temporary.append((temp, final))
        with open(fd, "wb") as out:
            out.write(compress(data))

    def stage(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Put the blobs of ``items`` ahead of their ``put`` (the first of a key; one staged
        already is left as it is): durable under their names on return. Best effort: on an
        error nothing is recorded as staged, and ``put`` does the work again and reports it."""
        with self._lock:
            fresh = {key: data for key, data in items if key not in self._staged}
        # a message whose raw blob is there is stored (or a crash left it): its copy here may
        # have other parts, which would name blobs its row does not hold; ``put`` decides
        prefixes = {key.rsplit("/", 1)[0] for key in fresh if key.rpartition("/")[2] in RAW_NAMES}
        taken = {p for p in prefixes if any(os.path.exists(self._path(f"{p}/{name}")) for name in RAW_NAMES)}
        fresh = {key: data for key, data in fresh.items() if _message_prefix(key) in prefixes - taken}
        if not fresh:
            return
        try:
            self._put(list(fresh.items()), durable=True)
        except OSError:
            return
        with self._lock:
            self._staged.update(fresh)

    def unstage(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Forget the staged blobs of ``items`` that no ``put`` took (their messages were stored
        before, or never will be: their files stay, a blob without a row, which the next
        delivery reuses and the sweep removes)."""
        with self._lock:
            for key, data in items:
                if self._staged.get(key) is data:
                    del self._staged[key]

    def put_many(self, items: Sequence[tuple[str, bytes]], absent: bool, durable: bool) -> None:
        with self._lock:
            # put ahead (``stage``), these very bytes: durable under their names already
            todo = [(key, data) for key, data in items if self._staged.pop(key, None) is not data]
        todo = [(key, data) for key, data in todo if absent or not os.path.exists(self._path(key))]
        if not todo:
            return
        try:
            self._put(todo, durable)
        except OSError as exc:
            raise self._failed(exc, "write blobs") from None

    def _put(self, todo: Sequence[tuple[str, bytes]], durable: bool) -> None:
        """Write ``todo`` to temporary names, sync them, link each to its name unless one is
        there, sync the directories (the module docstring's order). Raises ``OSError``, with
        no temporary file left."""
        made: set[str] = set()
        temporary: list[tuple[str, str]] = []
        try:
            for key, data in todo:
                self._write_temporary(key, data, made, temporary)
            if durable:
                # the files, and the parent of each directory made
                _each(_fsync_path, [temp for temp, _ in temporary] + sorted(made))
            directories: set[str] = set()
            for temp, final in temporary:
                try:
                    os.link(temp, final)
                except FileExistsError:  # a complete copy is there: it stays (create-if-absent)
                    pass
                except OSError as exc:  # a file system without hard links: rename, no check
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                        raise
                    os.replace(temp, final)
                directories.add(os.path.dirname(final))
            for temp, _ in temporary:
                if os.path.exists(temp):
                    os.unlink(temp)
            temporary = []
            if durable:
                _each(_fsync_path, sorted(directories))
        finally:
            for temp, _ in temporary:
                with contextlib.suppress(OSError):
                    os.unlink(temp)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as stored:
                data = stored.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._failed(exc, f"read {key}") from None
        try:
            return decompress(data)
        except Exception as exc:  # the zstd module's error type differs between versions
            raise BlobStoreError(f"blob store {self.url}: {key} is damaged ({exc})", url=self.url) from None

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found = {key: self.get(key) for key in keys}
        return {key: data for key, data in found.items() if data is not None}

    def delete(self, keys: Sequence[str]) -> int:
        removed = 0
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._failed(exc, f"remove {key}") from None
            removed += 1
        return removed

    def _is_message_prefix(self, prefix: str) -> bool:
        """``aecs/<mailbox>/<messageKey>/``: one message's files, in its mailbox's directory
        (the parts folder, ``aecs/<mailbox>/parts/``, is a directory of its own)."""
        return prefix.count("/") == 3 and prefix.split("/")[2] != PARTS_FOLDER

    def delete_prefix(self, prefix: str, dry_run: bool) -> int:
        if self._is_message_prefix(prefix):
            files = self._message_files(prefix)
            count = sum(1 for f in files if not _is_temporary(os.path.basename(f)))
            if not dry_run:
                try:
                    for path in files:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
                except OSError as exc:
                    raise self._failed(exc, f"remove {prefix}") from None
            return count
        top = self._path(prefix.rstrip("/"))
        count = sum(1 for _ in self._walk(top))
        if dry_run or not os.path.isdir(top):
            return count
        try:
            shutil.rmtree(top)
            _fsync_path(os.path.dirname(top))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._failed(exc, f"remove {prefix}") from None
        return count

    def _walk(self, top: str) -> Iterable[tuple[str, float]]:
        """``(path, modified)`` of every complete blob file under ``top``."""
        for directory, _, names in os.walk(top):
            for name in names:
                if _is_temporary(name):
                    continue
                path = os.path.join(directory, name)
                try:
                    modified = os.stat(path).st_mtime
                except OSError:  # removed meanwhile
                    continue
                yield path, modified

    def list_keys(self, prefix: str) -> list[tuple[str, float]]:
        if self._is_message_prefix(prefix):
            paths = [p for p in self._message_files(prefix) if not _is_temporary(os.path.basename(p))]
            found = [(self._key(p), os.stat(p).st_mtime) for p in paths if os.path.exists(p)]
        else:
            found = [(self._key(path), mtime) for path, mtime in self._walk(self._path(prefix.rstrip("/")))]
        return sorted(found)
