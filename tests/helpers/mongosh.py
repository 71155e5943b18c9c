"""mongosh for the tests that run the repository's JavaScript (indexes.js, scripts/shard.js)."""

from __future__ import annotations

import os
import shutil

import pytest

from .paths import ROOT


def find_mongosh() -> str:
    local = ROOT / "node_modules" / ".bin" / "mongosh"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    on_path = shutil.which("mongosh")
    if on_path:
        return on_path
    reason = "mongosh not found (neither node_modules/.bin/mongosh nor on PATH): run `npm install` at the repo root"
    if os.environ.get("AECS_REQUIRE_MONGOSH") == "1":
        pytest.fail(reason + " (AECS_REQUIRE_MONGOSH=1)")
    pytest.skip(reason)
