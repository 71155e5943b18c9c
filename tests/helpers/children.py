"""Worker processes a test kills: started, then released together once they are ready."""

from __future__ import annotations

import subprocess
import sys
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
