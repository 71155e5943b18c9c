"""Starting the warm command host (:mod:`aecs_mongo.warm.host`) beside the shared embedded server.

Light (the standard library and the protocol's constants): ``aecs_mongo.embedded.background``
calls :func:`start` from ``use``, the call every command that keeps the server makes.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from .protocol import OFF, WARM_ENV

__all__ = ["LOCK_NAME", "LOG_NAME", "running", "start"]

#: Held (``flock``) by the running host: one per data directory.
LOCK_NAME = "warm.lock"
LOG_NAME = "warm.log"


def running(data_dir: Path) -> bool:
    """Whether a host holds the data directory's lock."""
    try:
        fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
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
