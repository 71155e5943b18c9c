"""Starting the warm command host (:mod:`aecs_mongo.warm.host`): beside the shared embedded server,
or for a ``--uri``.

Light (the standard library and the protocol's constants): the command line gives :func:`start`
to ``aecs_mongo.embedded.background.use``, the call every command that keeps the server makes; the thin
client calls :func:`start_uri` when it runs a ``--uri`` read in-process because no host took it.
"""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
from pathlib import Path

from .protocol import KEY_NAME, OFF, WARM_ENV, runtime_dir, uri_name

__all__ = [
    "LOCK_NAME",
    "LOG_NAME",
    "keep_seconds",
    "private_dir",
    "private_runtime_dir",
    "running",
    "start",
    "start_uri",
    "uri_key",
]

#: Held (``flock``) by the running host: one per data directory.
LOCK_NAME = "warm.lock"
LOG_NAME = "warm.log"


def running(data_dir: Path, lock_name: str = LOCK_NAME) -> bool:
    """Whether a host holds the lock ``lock_name`` (the data directory's, or a URI's)."""
    try:
        fd = os.open(data_dir / lock_name, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True  # cannot tell: start none
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def start(data_dir: Path) -> None:
    """Start the data directory's host in the background unless one runs or ``AECS_WARM=0``;
    returns at once (the command that calls it does not wait for it)."""
    if os.environ.get(WARM_ENV, "").lower() in OFF or running(data_dir):
        return
    fd = os.open(data_dir / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "aecs_mongo.warm.host", str(data_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # no terminal's signals; it outlives this command
            umask=0o077,
            cwd=data_dir,
        ).returncode = 0  # meant to outlive us: no "still running" warning


def private_runtime_dir(env: dict[str, str], create: bool) -> Path | None:
    """The runtime directory of ``--uri`` hosts (:func:`aecs_mongo.warm.protocol.runtime_dir`),
    made 0700 if ``create``; None unless it is a directory of this user's that nobody else can
    enter (under a shared ``/tmp`` another user could have made it first)."""
    return private_dir(Path(runtime_dir(env)), create)


def private_dir(where: Path, create: bool) -> Path | None:
    """``where`` if it is a directory of this user's that nobody else can enter (made so if
    ``create``), else None."""
    if create:
        try:
            where.mkdir(mode=0o700, parents=False, exist_ok=True)
        except OSError:
            return None
    try:
        found = os.lstat(where)
    except OSError:
        return None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        return None
    if stat.S_IMODE(found.st_mode) & 0o077:
        if not create:
            return None
        os.chmod(where, 0o700)
    return where


def uri_key(where: Path, create: bool = True) -> bytes | None:
    """The runtime directory's key (:data:`aecs_mongo.warm.protocol.KEY_NAME`), made once if
    ``create``: 32 random bytes, written whole before the file appears (a link of a finished
    file)."""
    path = where / KEY_NAME
    if create and not path.exists():
        draft = where / f"{KEY_NAME}.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(32))
        finally:
            os.close(fd)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another command made it first: theirs
        finally:
            os.unlink(draft)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 64)
    finally:
        os.close(fd)


def keep_seconds(argv: list[str], env: dict[str, str]) -> float | None:
    """The command's ``--keep-server`` (else ``$AECS_KEEP_SERVER``, else 5 minutes) in seconds;
    None when it does not parse (the command itself says so)."""
    from ..pure.settings import parse_duration

    value = env.get("AECS_KEEP_SERVER") or "5m"
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--keep-server" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--keep-server="):
            value = arg.partition("=")[2]
    try:
        return parse_duration(value)
    except ValueError:
        return None


def start_uri(uri: str, argv: list[str], env: dict[str, str]) -> None:
    """Start the host of ``uri`` in the background unless one runs, ``AECS_WARM=0`` or the
    command's ``--keep-server`` is 0 (how long the host waits for a command before it stops);
    returns at once. The URI goes to it on its standard input, never on its command line (which
    every user can read in ``/proc``), and no file name holds it."""
    idle = keep_seconds(argv, env)
    if env.get(WARM_ENV, "").lower() in OFF or not idle or idle <= 0:
        return
    try:
        where = private_runtime_dir(env, create=True)
        key = None if where is None else uri_key(where)
        if where is None or not key:
            return
        name = uri_name(key, uri)
        if running(where, f"{name}.lock"):
            return
        fd = os.open(where / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            host = subprocess.Popen(
                [sys.executable, "-m", "aecs_mongo.warm.host", "--uri", str(where), name, f"{idle:g}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
                umask=0o077,
                cwd=where,
            )
        assert host.stdin is not None
        with host.stdin:
            host.stdin.write(os.fsencode(uri) + b"\n")
        host.returncode = 0  # meant to outlive us: no "still running" warning
    except OSError:
        return  # no host: the commands run in-process, as before
