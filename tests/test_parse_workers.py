"""Parsing in worker processes (``asynchronous/parse_pool.py``): the end state of storing one by one, the
same typed errors with the item's index, and no process left behind after Ctrl-C.

``$AECS_PARSE_WORKERS`` forces the workers on this 2-core machine (by default a machine needs
more than two cores). Every test here runs against a real server.
"""

from __future__ import annotations

import base64
import datetime as _dt
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import MessageStore
from aecs_mongo.errors import DocumentTooLargeError, InvalidTagError
from aecs_mongo.mail.sources import Origin, RawMessage
from aecs_mongo.normalizer.build import RawSpec, build_raw
from aecs_mongo.synchronous.parse_pool import ParsePool, worker_count
from tests.helpers.end_state import COLLECTIONS, canonical, unreferenced_blobs
from tests.helpers.paths import SHARED

ROOT = Path(__file__).resolve().parents[1]
CORPUS = SHARED / "corpus" / "eml"


def mail(i: int, *, dated: bool = True, attachment: bool = False) -> bytes:
    head = f"From: Carol <carol{i % 5}@example.com>\r\nTo: alice@example.com\r\nSubject: Plan {i % 7}\r\n"
    if dated:
        head += f"Date: Mon, {1 + i % 28} Jun 2026 09:{i % 60:02d}:00 +0000\r\n"
    head += f"Message-ID: <m{i}@example.com>\r\n"
    if i % 3 == 1:
        head += f"In-Reply-To: <m{i - 1}@example.com>\r\n"
    if not attachment:
        return (head + f"\r\nThe plan, part {i}.\r\n").encode()
    data = base64.encodebytes(os.urandom(3000) + bytes([i % 256])).decode()
    return (
        head + 'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        '--b\r\nContent-Type: multipart/alternative; boundary="a"\r\n\r\n'
        f"--a\r\nContent-Type: text/plain\r\n\r\nPart {i}.\r\n"
        f"--a\r\nContent-Type: text/html\r\n\r\n<p>Part {i}.</p>\r\n--a--\r\n"
        "--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=p.pdf\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{data}\r\n--b--\r\n"
    ).encode()


def items() -> list[Any]:
    """Raw bytes and mail-source messages: copies of the same bytes ("present"), other bytes
    under a stored Message-ID ("variant"), undated mail with its source's date, tags and
    folders; the corpus's first messages where it is present."""
    out: list[Any] = []
    for i in range(60):
        raw = mail(i, dated=i % 11 != 0, attachment=i % 4 == 0)
        if i % 5 == 0:
            moment = _dt.datetime(2026, 5, 1 + i % 20, tzinfo=_dt.UTC)
            out.append(RawMessage(raw, Origin(f"m{i}"), len(raw), moment, tags=("$seen",), folders=("INBOX",)))
        else:
            out.append(raw)
    out += [mail(3), mail(8, attachment=True), mail(8) + b"again\r\n"]  # present, variant, variant
    if CORPUS.is_dir():
        out += [path.read_bytes() for path in sorted(CORPUS.iterdir())[:40] if path.is_file()]
    return out


@pytest.fixture
def two_dbs(client: Any) -> Iterator[list[Any]]:
    names = [f"aecs_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    yield [client[name] for name in names]
    for name in names:
        client.drop_database(name)


@pytest.mark.server
def test_store_many_in_worker_processes_ends_as_storing_one_by_one(
    backend: str, two_dbs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = items()
    one_by_one = MessageStore(two_dbs[0], mailbox_id="alice")
    one_by_one.ensure_indexes()
    expected = []
    for item in inputs:
        if isinstance(item, RawMessage):
            result = one_by_one.store(item.data, received_at=item.received_at, tags=item.tags, folders=item.folders)
        else:
            result = one_by_one.store(item)
        expected.append(result.outcome)

    monkeypatch.setenv("AECS_PARSE_WORKERS", "2")
    assert worker_count() == 2
    workers_seen: list[int] = []

    def watched() -> Iterator[Any]:
        for item in inputs:
            workers_seen.append(len(multiprocessing.active_children()))
            yield item

    in_workers = MessageStore(two_dbs[1], mailbox_id="alice")
    in_workers.ensure_indexes()
    got = [result.outcome for result in in_workers.store_many(watched(), batch_size=10)]
    assert max(workers_seen[20:]) == 2, "the third batch is read while the two workers run"
    assert multiprocessing.active_children() == []  # stopped with the call
    assert got == expected
    assert {"stored", "present", "variant"} <= set(got)
    assert unreferenced_blobs(two_dbs[1]) == []
    dumps = [canonical(db) for db in two_dbs]
    for name in COLLECTIONS:
        assert dumps[0][name] == dumps[1][name], name
    assert dumps[1]["messages"] and dumps[1]["aecs.chunks"]


@pytest.mark.server
def test_errors_in_workers_are_the_typed_errors_with_the_items_index(
    backend: str, two_dbs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AECS_PARSE_WORKERS", "2")
    inputs: list[Any] = [mail(i) for i in range(25)]
    bad = RawMessage(mail(99), Origin("bad"), 10, None, tags=("not a tag!",))
    inputs[17] = bad
    refused: list[tuple[int, Any, Exception]] = []
    store = MessageStore(two_dbs[0], mailbox_id="alice")
    results = store.store_many(inputs, batch_size=5, on_error=lambda i, item, exc: refused.append((i, item, exc)))
    assert len(results) == 24
    assert [(i, item) for i, item, _exc in refused] == [(17, bad)]
    assert isinstance(refused[0][2], InvalidTagError)
    assert two_dbs[0]["messages"].count_documents({}) == 24
    # without on_error the typed error stops the call; what was written before stays
    with pytest.raises(InvalidTagError):
        MessageStore(two_dbs[1], mailbox_id="alice").store_many(inputs, batch_size=5)
    assert two_dbs[1]["messages"].count_documents({}) == 15  # the batches before the bad one's


def test_a_workers_typed_error_keeps_its_class_and_fields() -> None:
    """DocumentTooLargeError takes keyword-only arguments, which pickling an exception loses:
    the worker sends class, args and fields, and the caller gets the error ``build_raw`` raises."""
    spec = RawSpec("alice", frozenset(), 8000, max_document_bytes=4096)
    crowded = (
        b"From: a@example.com\r\nMessage-ID: <crowd@x>\r\nTo: "
        + b", ".join(b"p%d@example.com" % i for i in range(400))
        + b"\r\n\r\nhi\r\n"
    )
    with pytest.raises(DocumentTooLargeError) as here:
        build_raw(spec, crowded, None, None, None)
    pool = ParsePool(spec, 2)
    try:
        built = pool.build([(0, mail(1), None), (1, crowded, None), (2, mail(2), None)])
    finally:
        pool.close()
    error = built[1]
    assert type(error) is DocumentTooLargeError
    assert str(error) == str(here.value)
    assert (error.field, error.size, error.limit) == (here.value.field, here.value.size, here.value.limit)
    assert not isinstance(built[0], Exception) and built[0].message["messageId"] == "m1@example.com"


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _storing_child(uri: str, db_name: str) -> subprocess.Popen[str]:
    """``tests.helpers.parse_workers_child``: a ``store_iter`` with two parse workers."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.parse_workers_child", uri, db_name],
        cwd=ROOT,
        env=dict(os.environ, AECS_PARSE_WORKERS="2"),
        stdout=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal gives it: a run started in the background (``cmd &`` without job
        # control) has SIGINT ignored, and a child inherits that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _two_workers_of(pid: int) -> set[int]:
    """The worker processes of ``pid`` once two are there (within 60 s)."""
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = _children(pid)
        time.sleep(0.05)
    assert len(workers) >= 2, "the workers started"
    return workers


@pytest.mark.server
@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are Linux's (fork)")
def test_ctrl_c_during_store_iter_leaves_no_worker_process(servers: Any, backend: str, db: Any) -> None:
    child = _storing_child(servers.uri(backend), db.name)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "storing"
        assert child.stdout.readline().strip() == "stored"
        workers = _two_workers_of(child.pid)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=60) != 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    time.sleep(0.5)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    assert alive == [], "no worker left behind, not even a zombie"
    assert db["messages"].count_documents({}) > 0


@pytest.mark.server
@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are Linux's (fork)")
def test_a_killed_caller_leaves_no_worker_process(servers: Any, backend: str, db: Any) -> None:
    """SIGKILL gives the caller no chance to stop its workers, and each holds the write end of
    its own task pipe: they must notice their parent is gone and exit by themselves."""
    child = _storing_child(servers.uri(backend), db.name)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "storing"
        workers = _two_workers_of(child.pid)
        child.kill()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    deadline = time.monotonic() + 10
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    for pid in alive:  # the test's own clean-up of what failed it
        os.kill(pid, signal.SIGKILL)
    assert alive == [], "the workers exited once their parent was killed"
