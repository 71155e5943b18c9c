"""The embedded server's data directory, kept private: modes, the credentials file, the records.

A mail store is as private as a Maildir (700) or ``~/.gnupg``: the data directory is created
0700 and everything in it is created without group or other bits (the server runs with umask
077). A directory that is open to others is tightened once, whole, with a warning naming it; one that
belongs to another user, or that cannot be tightened, is refused (``DataDirError``): it is not
ours to change, and a server must not write mail into it.

The credentials of the server's one user (SCRAM-SHA-256, a random secret) are kept in
``credentials.json`` (0600), written atomically; so are the small JSON records other modules
keep there (where a server runs). Nothing here imports the server: it is plain file work.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataDirError

__all__ = [
    "CREDENTIALS_FILE",
    "PRIVATE_UMASK",
    "Credentials",
    "load_credentials",
    "make_private",
    "new_credentials",
    "read_record",
    "remove_record",
    "save_credentials",
    "write_record",
]

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
CREDENTIALS_FILE = "credentials.json"
_OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO


@dataclass(frozen=True)
class Credentials:
    """The embedded server's user: a name and a random secret (never printed: ``repr`` hides it)."""

    user: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, password=<hidden>)"


def new_credentials() -> Credentials:
    """A fresh user with a 256-bit random secret (URL-safe: it goes into a URI unquoted)."""
    return Credentials(user="aecs", password=secrets.token_urlsafe(32))


def make_private(directory: Path) -> None:
    """Create ``directory`` 0700, or make an existing one private: no group/other bits on it or
    anything below it (said once, with a warning: the mail was readable by other users until
    now). Raises ``DataDirError`` for a directory of another user, a path that is not a
    directory, or modes that cannot be changed.

    Every command calls this, so it costs one ``lstat`` when the directory is private already:
    nobody else can reach anything below a 0700 directory, so what is below is walked (and
    tightened) only when the directory itself was open. The walk is as long as the mail (a
    file per blob in ``blobs/``): seconds on a large mailbox, too long for every command."""
    try:
        directory.mkdir(mode=0o700, parents=True)
        return  # mkdir applies the umask, which can only remove bits from 0700
    except FileExistsError:
        pass
    except OSError as exc:
        raise DataDirError(f"cannot create the data directory {directory}: {exc}") from None
    try:
        info = directory.lstat()
    except OSError as exc:
        raise DataDirError(f"cannot read the data directory {directory}: {exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise DataDirError(f"the data directory {directory} exists and is not a directory")
    if info.st_uid != os.geteuid():
        raise DataDirError(
            f"the data directory {directory} belongs to another user (uid {info.st_uid}): "
            "refusing to keep mail in it; use a directory of your own (--data-dir)"
        )
    if not info.st_mode & _OPEN_BITS:
        return
    opened = _tighten(directory)
    if opened:
        log.warning(
            "the data directory %s was readable by other users (%d files and directories): "
            "removed their access (mode 0700 for directories, no group/other bits on files)",
            directory,
            opened,
        )


def _tighten(directory: Path) -> int:
    """Remove group/other bits below ``directory`` (symbolic links are neither followed nor
    changed); returns how many entries were open."""
    opened = 0
    for path in [directory, *_walk(directory)]:
        try:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode) or not info.st_mode & _OPEN_BITS:
                continue
            if info.st_uid != os.geteuid():
                raise DataDirError(
                    f"{path} in the data directory belongs to another user (uid {info.st_uid}) and is "
                    "readable by others: refusing to use the directory until its owner fixes that"
                )
            path.chmod(stat.S_IMODE(info.st_mode) & ~_OPEN_BITS)
            opened += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DataDirError(f"cannot make {path} private: {exc}") from None
    return opened


def _walk(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(directory, followlinks=False):
        found.extend(Path(root, name) for name in (*dirs, *files))
    return found


def _write_private(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a 0600 temporary file, fsynced, renamed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename is durable too
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _read_private(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when absent. A file others can read, or that is not a
    JSON object, is a ``DataDirError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirError(f"cannot read {path}: {exc}") from None
    with os.fdopen(fd, encoding="utf-8") as source:
        info = os.fstat(source.fileno())
        if info.st_mode & _OPEN_BITS or info.st_uid != os.geteuid():
            raise DataDirError(f"{path} is readable by other users or not yours: refusing to use it")
        try:
            data = json.load(source)
        except ValueError as exc:
            raise DataDirError(f"{path} is damaged (not JSON): {exc}") from None
    if not isinstance(data, dict):
        raise DataDirError(f"{path} is damaged (not a JSON object)")
    return data


def save_credentials(directory: Path, credentials: Credentials) -> None:
    _write_private(directory / CREDENTIALS_FILE, {"user": credentials.user, "password": credentials.password})


def load_credentials(directory: Path) -> Credentials | None:
    """The credentials kept in ``directory``; None when there are none yet (a new directory, or
    one made by a release without authentication)."""
    path = directory / CREDENTIALS_FILE
    data = _read_private(path)
    if data is None:
        return None
    user, password = data.get("user"), data.get("password")
    if not isinstance(user, str) or not isinstance(password, str) or not user or not password:
        raise DataDirError(f"{path} is damaged (no user and password)")
    return Credentials(user, password)


def write_record(path: Path, data: dict[str, Any]) -> None:
    """Write a small JSON record (0600, atomic)."""
    _write_private(path, data)


def read_record(path: Path) -> dict[str, Any] | None:
    """A record written by ``write_record``; None when absent."""
    return _read_private(path)


def remove_record(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
