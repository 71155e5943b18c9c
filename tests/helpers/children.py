"""Worker processes a test kills: started, then released together once they are ready."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_worker(module: str, *argv: str) -> subprocess.Popen[str]:
    """``python -m tests.helpers.<module> argv...``: waits for its ``ready`` line (imports and connection
    done), then says ``go``, so a kill timed after this lands in the work, not in the start-up."""
    child = subprocess.Popen(
        [sys.executable, "-m", f"tests.helpers.{module}", *argv],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    child.stdin.write("go\n")
    child.stdin.flush()
    return child


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serving(argv: list[str], port: int, name: str, timeout: float = 60) -> subprocess.Popen[bytes]:
    """A server process started from ``argv``, returned once it accepts connections on ``port``
    (fails the test if it exits first or is not up within ``timeout`` seconds)."""
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            assert server.poll() is None, f"{name} exited"
            assert time.monotonic() < deadline, f"{name} did not start within {timeout:.0f} s"
            time.sleep(0.1)
