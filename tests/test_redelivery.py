"""A worker that re-delivers a batch whenever ``store_many`` raises, through a network that cuts
connections (tests/helpers/cutting_proxy.py: on average once every 4 MB of traffic), stores
every message once and completes: each re-delivery makes progress, because what a failed
attempt stored is reused rather than sent again and no statement carries more than it must.

On a standalone server the driver retries nothing (no retryable writes), so every cut fails
the call; on a replica set the driver retries a write once. The corpus's largest messages go
in one batch: several megabytes of blobs, most of which a cut interrupts.
"""

from __future__ import annotations

import base64
import hashlib
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from pymongo.errors import PyMongoError

from aecs_mongo import BlobStore, MessageStore
from aecs_mongo.errors import AecsMongoError
from aecs_mongo.pure import blobs as gridfs_docs
from aecs_mongo.pure.keys import blob_prefix, message_key

from .conftest import Servers
from .helpers.cutting_proxy import CuttingProxy
from .helpers.failpoints import failpoint
from .helpers.paths import require_corpus

#: a worker's batch, as in the POP3 pipeline and the command line's ingest
BATCH = 50
#: re-deliveries of one batch before the worker gives up (a batch that needs more made no progress)
MAX_REDELIVERIES = 60
#: messages of several megabytes (forwards of real mail) in the first batch
FORWARDS = 3
#: the mean traffic between two cut connections
MEAN_CUT = 4 << 20


def forward(n: int, messages: list[bytes]) -> bytes:
    """A message forwarding ``messages`` as attachments (``message/rfc822``, each byte-exact), as
    a mail client's "forward as attachment" writes it."""
    boundary = f"=_forward_{n}_{hashlib.sha256(b''.join(messages)).hexdigest()[:24]}".encode()
    parts = [
        b"From: Ann <ann@example.com>\r\nTo: archive@example.com\r\nSubject: Fwd: mail %d\r\n" % n,
        b"Date: Mon, 2 Mar 2026 10:%02d:00 +0000\r\nMessage-ID: <forward-%d@example.com>\r\n" % (n, n),
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="' + boundary + b'"\r\n\r\n',
        b"--" + boundary + b"\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\nThe mail, forwarded.\r\n",
    ]
    for k, raw in enumerate(messages):
        parts.append(b"--" + boundary + b"\r\nContent-Type: message/rfc822\r\n")
        parts.append(b'Content-Disposition: attachment; filename="mail-%d.eml"\r\n\r\n' % k + raw + b"\r\n")
    parts.append(b"--" + boundary + b"--\r\n")
    return b"".join(parts)


def corpus_batches() -> list[list[bytes]]:
    """The corpus in batches of 50, and three messages of several megabytes each forwarding its
    six largest: these and the corpus's largest together in the first batch, then the rest
    in name order."""
    files = sorted(require_corpus().glob("*.eml"))
    mail = [(p.stat().st_size, p.name, p.read_bytes()) for p in files]
    by_size = sorted(mail, key=lambda m: (-m[0], m[1]))
    forwards = [forward(n, [m[2] for m in by_size[n : n + 6]]) for n in range(FORWARDS)]
    largest = by_size[: BATCH - FORWARDS]
    names = {m[1] for m in largest}
    ordered = forwards + [m[2] for m in largest] + [m[2] for m in mail if m[1] not in names]
    return [ordered[i : i + BATCH] for i in range(0, len(ordered), BATCH)]


def deliver(store: MessageStore, batches: list[list[bytes]], proxy: CuttingProxy) -> tuple[list[Any], list[int]]:
    """Store every batch, re-delivering one whenever ``store_many`` raises; the results of each
    batch's delivery that completed, and how many re-deliveries each batch took."""
    results: list[Any] = []
    redeliveries: list[int] = []
    for n, batch in enumerate(batches):
        for attempt in range(MAX_REDELIVERIES + 1):
            try:
                results.extend(store.store_many(batch, batch_size=BATCH))
            except (PyMongoError, AecsMongoError) as exc:
                if attempt == MAX_REDELIVERIES:
                    pytest.fail(
                        f"batch {n} ({sum(map(len, batch)) >> 10} KiB) failed {attempt + 1} deliveries in a row"
                        f" ({proxy.cuts} connections cut in {proxy.forwarded >> 20} MiB); the last:"
                        f" {type(exc).__name__}: {exc}"[:600]
                    )
                continue
            redeliveries.append(attempt)
            break
    return results, redeliveries


def check_blobs(db: Any, blobs_url: str) -> None:
    """Every blob each stored row names is present and complete."""
    files = None if blobs_url == "gridfs" else BlobStore.from_url(blobs_url)
    for row in db.messages.find({"mailboxId": "alice"}, {"blobPrefix": 1, "blobs": 1, "messageId": 1}):
        for name in row.get("blobs") or ():
            key = row["blobPrefix"] + name
            if files is not None:  # a file is visible under its key only once complete
                assert files.get(key) is not None, (row["messageId"], name)
                continue
            file_doc = db["aecs.files"].find_one({"_id": key})
            assert file_doc is not None, (row["messageId"], name)
            chunks = list(db["aecs.chunks"].find({"files_id": key}).sort("n", 1))
            gridfs_docs.assemble(file_doc, chunks)  # every chunk there, the length right


@pytest.mark.server
@pytest.mark.parametrize("blob_store", ["gridfs", "file"])
def test_redelivery_through_cut_connections_completes_and_stores_each_message_once(
    servers: Servers, backend: str, db: Any, tmp_path: Path, blob_store: str
) -> None:
    if backend not in servers.embedded and backend != "uri":
        servers.client(backend)
    if backend == "uri":
        pytest.skip("the proxy stands in front of the embedded test servers (one host and port)")
    batches = corpus_batches()
    blob_dir = tmp_path / "blobs" if blob_store == "file" else None
    blobs_url = "gridfs" if blob_dir is None else blob_dir.as_uri()
    direct = MessageStore(db, mailbox_id="alice", blobs=blobs_url)
    direct.ensure_indexes()
    server = servers.embedded[backend]
    with CuttingProxy(server.port or 0, target_host=server.host, mean_bytes=MEAN_CUT, seed=51) as proxy:
        client: MongoClient[dict[str, Any]] = MongoClient(proxy.uri(server.uri), serverSelectionTimeoutMS=20_000)
        try:
            results, redeliveries = deliver(
                MessageStore(client[db.name], mailbox_id="alice", blobs=blobs_url), batches, proxy
            )
        finally:
            client.close()
    print(f"{backend} {blob_store}: {proxy.cuts} cuts in {proxy.forwarded >> 20} MiB; re-deliveries {redeliveries}")

    # through a direct connection: every message stored once, each copy kept byte-exact
    mail = [raw for batch in batches for raw in batch]
    assert len(results) == len(mail)
    ids = [r.message_id for r in results]
    first: dict[str, bytes] = {}
    copies: dict[str, set[str]] = {}
    for message_id, raw in zip(ids, mail, strict=True):
        first.setdefault(message_id, raw)
        copies.setdefault(message_id, set()).add(hashlib.sha256(raw).hexdigest())
    assert db.messages.count_documents({"mailboxId": "alice"}) == len(first)
    for message_id, raw in first.items():
        assert direct.get_raw(message_id) == raw, message_id
        kept = [hashlib.sha256(c).hexdigest() for c in direct.get_raw_variants(message_id)]
        assert Counter(kept) == Counter(copies[message_id]), message_id  # each copy once
    check_blobs(db, blobs_url)


class ChunkWrites(monitoring.CommandListener):
    """What a store sends to ``aecs.chunks``: chunks inserted and replaced, and the most chunk
    data one statement carried."""

    def __init__(self) -> None:
        self.inserted = 0
        self.replaced = 0
        self.largest = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command.get(event.command_name) != "aecs.chunks":
            return
        if event.command_name == "insert":
            self.inserted += len(event.command["documents"])
            self.largest = max(self.largest, sum(len(d["data"]) for d in event.command["documents"]))
        elif event.command_name == "update":
            self.replaced += len(event.command["updates"])
            self.largest = max(self.largest, sum(len(u["u"]["data"]) for u in event.command["updates"]))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def big_mail(seed: int, size: int = 2_500_000) -> tuple[bytes, bytes]:
    """(a message of a few megabytes with one attachment of ``size`` random bytes, the attachment)."""
    data = random.Random(seed).randbytes(size)
    raw = (
        b"Message-ID: <big@example.com>\r\nFrom: bob@example.com\r\nTo: alice@example.com\r\n"
        b"Subject: the figures\r\nDate: Mon, 2 Mar 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n'
        b"Attached.\r\n--b\r\nContent-Type: application/octet-stream\r\n"
        b'Content-Disposition: attachment; filename="figures.bin"\r\nContent-Transfer-Encoding: base64\r\n\r\n'
        + base64.encodebytes(data).replace(b"\n", b"\r\n")
        + b"--b--\r\n"
    )
    return raw, data


def interrupted_store(store: MessageStore, raw: bytes, failpoints: Any) -> None:
    """``store.store(raw)`` failing on its third insert: some of its chunks are stored, no files
    document and no message."""
    failpoint(failpoints, mode={"skip": 2, "times": 1}, data={"failCommands": ["insert"], "errorCode": 2})
    with pytest.raises(PyMongoError):
        store.store(raw)
    failpoint(failpoints, mode="off")


@pytest.mark.server
def test_a_redelivery_sends_again_at_most_one_statement_of_what_an_upload_stored(
    monitored: Callable[[Any], MessageStore], db: Any, failpoints: Any
) -> None:
    writes = ChunkWrites()
    store = monitored(writes)
    raw, data = big_mail(1)
    interrupted_store(store, raw, failpoints)
    assert db.messages.count_documents({}) == 0 and db["aecs.files"].count_documents({}) == 0
    left = db["aecs.chunks"].count_documents({})
    writes.inserted = writes.replaced = 0
    assert store.store(raw).inserted
    total = db["aecs.chunks"].count_documents({})
    assert 0 < left < total  # the statements before the failed one stored their chunks
    # those are not sent again, but for the one statement whose refusal tells they are there
    again = writes.inserted - (total - left)
    assert 0 <= again <= gridfs_docs.STATEMENT_BYTES // gridfs_docs.CHUNK_SIZE and writes.replaced == 0
    assert 0 < writes.largest <= gridfs_docs.STATEMENT_BYTES
    assert store.get_raw("big@example.com") == raw
    assert store.get_attachment("big@example.com", 0) == data


@pytest.mark.server
def test_chunks_an_upload_left_with_other_bytes_are_replaced_not_reused(
    monitored: Callable[[Any], MessageStore], db: Any, failpoints: Any
) -> None:
    store = monitored(ChunkWrites())
    first, _ = big_mail(1)
    interrupted_store(store, first, failpoints)  # leftovers of another copy of the Message-ID
    raw, data = big_mail(2)
    key = blob_prefix("alice", message_key("big@example.com")) + "raw.eml"
    # and a chunk as an upload wrote it before chunks carried their digest, with other bytes
    db["aecs.chunks"].replace_one(
        {"_id": f"{key}#1"}, {"_id": f"{key}#1", "files_id": key, "n": 1, "data": b"x" * 100}, upsert=True
    )
    assert store.store(raw).inserted
    assert store.get_raw("big@example.com") == raw
    assert store.get_attachment("big@example.com", 0) == data
