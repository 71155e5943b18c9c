"""The ``aecs-mongo`` command line as the tests run it: one in-process runner, one subprocess runner.

- In this process: the ``cli`` fixture (tests/conftest.py) is ``cli(*argv) -> Result``, which runs
  ``aecs_mongo.cli.main(["--uri", <backend>, "--db", <the test's database>, *argv])`` with stdout
  and stderr captured. A later ``--db`` in ``argv`` names another database (the test drops it).
- In a subprocess: ``aecs(*argv, cwd=...)`` runs ``python -m aecs_mongo argv`` without
  ``MONGODB_URI`` (so the embedded server is used unless ``--uri`` is given).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Result:
    """What one in-process run gave: its exit code and what it wrote (bytes, as ``--raw`` does)."""

    code: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode()

    @property
    def err(self) -> str:
        return self.stderr.decode()

    def json(self) -> Any:
        """The one JSON document a single-object command (show, stats, a report) printed."""
        return json.loads(self.stdout)

    def lines(self) -> list[Any]:
        """The JSON lines a listing command printed with ``--json`` (results, then any trailer)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def page(self) -> tuple[list[Any], dict[str, Any] | None]:
        """A listing's results and its last object (``next_cursor``, search's engine), if any."""
        found = self.lines()
        if found and ("next_cursor" in found[-1] or "engine" in found[-1]):
            return found[:-1], found[-1]
        return found, None


Cli = Callable[..., Result]


def in_process(uri: str, db_name: str, capture: pytest.CaptureFixture[bytes]) -> Cli:
    """``run(*argv)``: ``main`` against ``uri`` and ``db_name``; ``capture`` is ``capsysbinary``."""

    from aecs_mongo.cli import main

    def run(*argv: str) -> Result:
        capture.readouterr()
        code = main(["--uri", uri, "--db", db_name, *argv])
        captured = capture.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def command_env(drop: Iterable[str] = ("MONGODB_URI",)) -> dict[str, str]:
    """This process's environment without ``drop``."""
    leave_out = set(drop)
    return {k: v for k, v in os.environ.items() if k not in leave_out}


def aecs(
    *argv: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    umask: int = -1,
    timeout: float = 180,
    stdin: bytes | None = None,
    keep: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m aecs_mongo argv`` in ``cwd``, output captured; ``env`` defaults to
    ``command_env()`` with the data directory in ``cwd/aecs-data`` (``$AECS_DATA_DIR``: never
    the user's own); ``umask`` -1 keeps this process's; ``stdin``: bytes on standard input.
    ``keep``: the shared server is kept that long after the command (``$AECS_KEEP_SERVER``;
    the suite's default is 0, a server per command): a test that runs several commands on one
    data directory keeps it, and stops it with ``server stop`` at its end."""
    if env is None:
        env = {**command_env(), "AECS_DATA_DIR": str(cwd / "aecs-data")}
    if keep is not None:
        env = {**env, "AECS_KEEP_SERVER": keep}
    return subprocess.run(
        [sys.executable, "-m", "aecs_mongo", *argv],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=timeout,
        umask=umask,
    )
