"""The database server dies during an ``expire``, an ``erase_mailbox`` and a run of ``delete``s:
nothing the store acknowledged is lost (issue 33; the method and the comparison are
tests/test_server_kill.py's, in a file of its own so that pytest-xdist runs it beside that one)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.embedded.server import EmbeddedServer

from .helpers.server_kill import (
    DELETED,
    KILLS,
    assert_same,
    corpus_files,
    prepared,
    run_clean,
    run_with_kills,
    snapshot,
)
from .helpers.server_kill_workers import MAILBOX

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("job", ["expire", "erase", "delete"])
def test_deletions_acknowledged_are_kept_when_the_server_dies(
    killable: EmbeddedServer, tmp_path: Path, job: str
) -> None:
    files = corpus_files(tmp_path)[:DELETED]
    listing = tmp_path / "inputs.txt"
    listing.write_text("\n".join(map(str, files)))
    prepared(killable, "killed", "clean").close()
    for name in ("killed", "clean"):
        run_clean(killable, "store", name, tmp_path, str(listing))
    with MongoClient(killable.uri) as client:
        stamps = sorted(m["ts"] for m in client["clean"].messages.find({}, {"ts": 1}))
        ids = sorted(m["messageId"] for m in client["clean"].messages.find({}, {"messageId": 1}))
    extra: list[str] = []
    if job == "expire":
        extra = [str(stamps[len(stamps) // 2])]
    elif job == "delete":
        doomed = tmp_path / "doomed.txt"
        doomed.write_text("\n".join(ids[::3]))
        extra = [str(doomed)]
    acks, _ = run_with_kills(killable, job, "killed", tmp_path, *extra, kills=max(1, KILLS // 2), seed=34)
    assert acks, "the worker acknowledged nothing"
    run_clean(killable, job, "clean", tmp_path, *extra)
    with MongoClient(killable.uri) as client:
        killed, clean = client["killed"], client["clean"]
        if job == "erase":
            assert killed.messages.count_documents({"mailboxId": MAILBOX}) == 0
        if killable.standalone:
            MessageStore(killed, mailbox_id=MAILBOX).reindex()
            MessageStore(clean, mailbox_id=MAILBOX).reindex()
        assert_same(snapshot(killed), snapshot(clean))
        if job == "expire":
            cutoff = dt.datetime.fromtimestamp(int(extra[0]), dt.UTC)
            assert killed.messages.count_documents({"ts": {"$lt": int(cutoff.timestamp())}}) == 0
