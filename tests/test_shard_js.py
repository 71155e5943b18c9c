"""scripts/shard.js: valid JavaScript, and a clean report where sharding commands are refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import MessageStore

from .helpers.mongosh import find_mongosh

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "shard.js"


def test_shard_js_is_valid_javascript() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    subprocess.run([node, "--check", str(SCRIPT)], check=True)


def run(uri: str, settings: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING": "1"}
    return subprocess.run(
        [find_mongosh(), "--quiet", uri, "--eval", settings, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.server
def test_shard_js_reports_refusals_cleanly(servers: Any, backend: str, db: Any) -> None:
    if backend == "uri" and db.client.admin.command("hello").get("msg") == "isdbgrid":
        pytest.skip("MONGODB_URI is a mongos: sharding would really happen")
    MessageStore(db, mailbox_id="x").ensure_indexes()  # indexes.js first, as the README says
    result = run(servers.uri(backend), f'var dbName="{db.name}"')
    out = result.stdout
    assert result.returncode == 1, (out, result.stderr)
    assert "not a mongos" in out
    assert out.count("refused  shardCollection") == 7  # 4 per-message, vector_blocks, uidls, chunks
    assert "refused  enableSharding" in out
    assert "exists   index" in out  # uidls and GridFS chunks already have their shard-key index
    assert "Uncaught" not in result.stderr and "SyntaxError" not in out + result.stderr
    dry = run(servers.uri(backend), f'var dbName="{db.name}"; var dryRun=true')
    assert dry.returncode == 0 and "plan     shardCollection" in dry.stdout
    bad = run(servers.uri(backend), 'var dbName="a.b"')
    assert bad.returncode == 2
