"""Mail stored once: a raw message kept as a pack, its large encoded bodies in parts kept once
per mailbox (``pure/raw_parts.py``), who holds each part on record (``pure/part_records.py``).

The pure split and rebuild run on every corpus message; the rest on the real servers, on
GridFS, a directory and S3 (moto's server): twenty messages carrying one attachment keep it
once, each message comes back byte-exact, a part outlives every message but the last that
holds it, and a writer never relies on a part a remover is taking away.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import threading
import time
from collections.abc import Callable
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo.normalizer.parse import parse_email
from aecs_mongo.pure.blob_location import decompress
from aecs_mongo.pure.keys import part_key
from aecs_mongo.pure.part_records import PARTS_COLLECTION, part_id
from aecs_mongo.pure.raw_parts import PackError, assemble, pack_parts, split_raw
from aecs_mongo.pure.transfer_encoding import decode_body

from .helpers.lifecycle import exported
from .helpers.paths import CORPUS

ATTACHMENT = random.Random(51).randbytes(300 * 1024)  # incompressible, as a PDF or a photo is


def carrying(n: int, attachment: bytes = ATTACHMENT, name: str = "contract.pdf") -> bytes:
    """Message ``n`` of a thread that forwards the same attachment back and forth."""
    message = MIMEMultipart()
    message["From"] = f"sender{n % 3}@example.com"
    message["To"] = "alice@example.com"
    message["Subject"] = f"Re: the contract ({n})"
    message["Message-ID"] = f"<deal-{n}@example.com>"
    message["Date"] = f"Mon, {1 + n % 28:02d} Jun 2025 10:00:00 +0000"
    message.attach(MIMEText(f"Version {n}, see attached.\n"))
    message.attach(MIMEApplication(attachment, Name=name))
    return message.as_bytes()


# --- the pack (pure) ---------------------------------------------------------------------------


def test_every_corpus_message_splits_and_comes_back_byte_exact() -> None:
    files = sorted(CORPUS.glob("*.eml"))
    if not files:
        pytest.skip(f"corpus not found at {CORPUS} (it lives in ../shared/corpus beside the repository)")
    taken = 0
    for raw in (path.read_bytes() for path in files):
        parsed = parse_email(raw)
        layout = split_raw(raw, parsed.attachment_encoded, min_bytes=1024)
        for data, span in zip(parsed.attachment_data, layout.spans, strict=True):
            if span is not None:  # each attachment's bytes, derived from the raw message
                assert decode_body(raw[span.start : span.end], span.encoding)[0] == data
        if layout.pack is not None:
            taken += len(layout.parts)
            assert pack_parts(layout.pack) == list(dict.fromkeys(layout.parts))
            assert assemble(layout.pack, layout.parts) == raw
            assert len(layout.pack) + sum(map(len, layout.parts.values())) > len(raw) - 1
    assert taken > 20


def test_a_pack_refuses_a_missing_or_wrong_part() -> None:
    raw = carrying(1)
    parsed = parse_email(raw)
    layout = split_raw(raw, parsed.attachment_encoded)
    assert layout.pack is not None and len(layout.parts) == 1
    ((sha, part),) = layout.parts.items()
    assert hashlib.sha256(part).hexdigest() == sha and part in raw
    with pytest.raises(PackError, match="missing"):
        assemble(layout.pack, {})
    with pytest.raises(PackError, match="does not hold"):
        assemble(layout.pack, {sha: part[:-1] + b"A"})
    with pytest.raises(PackError):
        assemble(layout.pack[:-10], layout.parts)
    with pytest.raises(PackError, match="not a raw-message pack"):
        assemble(raw, layout.parts)
    # kept whole (the store's whole_raw): nothing taken out, the spans still found
    whole = split_raw(raw, parsed.attachment_encoded, take_out=False)
    assert whole.pack is None and whole.spans[0] is not None and whole.spans[0].sha256 is None


# --- on the servers ------------------------------------------------------------------------------


def _gridfs_bytes(db: Any) -> int:
    return sum(int(f["length"]) for f in db["aecs.files"].find({}, {"length": 1}))


def _dir_bytes(root: Path) -> int:
    """What the file store's files hold (each a zstd frame)."""
    return sum(len(decompress(p.read_bytes())) for p in root.rglob("*") if p.is_file())


@pytest.mark.server
@pytest.mark.parametrize("where", ["gridfs", "file"])
def test_twenty_copies_of_one_attachment_take_its_room_once(
    make_store: Callable[..., Any], db: Any, tmp_path: Path, where: str
) -> None:
    blobs = None if where == "gridfs" else f"file://{tmp_path}/blobs"
    store = make_store("alice", **({} if blobs is None else {"blobs": blobs}))
    raws = [carrying(n) for n in range(20)]
    store.store_many(raws)
    held = (_gridfs_bytes(db) if where == "gridfs" else _dir_bytes(tmp_path / "blobs")) / len(ATTACHMENT)
    # one base64 copy (4/3 of the attachment) and twenty packs of a few hundred bytes each
    assert 1.3 < held < 1.5, held
    sha = db.messages.find_one({"messageId": "deal-0@example.com"})["rawParts"][0]
    record = db[PARTS_COLLECTION].find_one({"_id": part_id("alice", sha)})
    assert sorted(record["refs"]) == sorted(m["messageKey"] for m in db.messages.find({"mailboxId": "alice"}))
    for n, raw in enumerate(raws):
        assert store.get_raw(f"deal-{n}@example.com") == raw
        assert store.get_attachment(f"deal-{n}@example.com", 0) == ATTACHMENT
    assert [c.data for c in exported(store)] == raws  # dated in that order
    # another mailbox keeps its own copy: nothing is shared across mailboxes
    bob = make_store("bob", **({} if blobs is None else {"blobs": blobs}))
    bob.store(raws[0])
    assert db[PARTS_COLLECTION].count_documents({"mailboxId": "bob"}) == 1
    alice_record = db[PARTS_COLLECTION].find_one({"_id": part_id("alice", sha)})
    assert len(alice_record["refs"]) == 20
    bob.erase_mailbox()
    assert store.get_raw("deal-0@example.com") == raws[0]


@pytest.mark.one_server
def test_twenty_copies_on_s3_take_the_attachments_room_once(
    make_store: Callable[..., Any],
    db: Any,
    s3_server: str,
    bucket: str,
) -> None:
    import boto3

    store = make_store("alice", blobs=f"s3://{bucket}/mail")
    raws = [carrying(n) for n in range(20)]
    store.store_many(raws)
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    objects = client.list_objects_v2(Bucket=bucket, Prefix="mail/").get("Contents", [])
    held = sum(int(o["Size"]) for o in objects) / len(ATTACHMENT)
    assert 1.3 < held < 1.5, held
    assert sum("/parts/" in o["Key"] for o in objects) == 1
    assert [store.get_raw(f"deal-{n}@example.com") for n in range(20)] == raws
    store.erase_mailbox()
    assert client.list_objects_v2(Bucket=bucket, Prefix="mail/").get("KeyCount") == 0


@pytest.mark.server
def test_a_part_outlives_every_holder_but_the_last(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store("alice")
    raws = [carrying(n) for n in range(3)]
    store.store_many(raws)
    sha = db.messages.find_one({"messageId": "deal-0@example.com"})["rawParts"][0]
    key = part_key("alice", sha)
    assert store.delete("deal-0@example.com") and store.delete("deal-1@example.com")
    assert db["aecs.files"].count_documents({"_id": key}) == 1
    assert store.get_raw("deal-2@example.com") == raws[2]
    report = store.expire(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    assert report.removed.get(PARTS_COLLECTION) == 1
    assert db["aecs.files"].count_documents({"_id": key}) == 0
    assert db["aecs.chunks"].count_documents({"files_id": key}) == 0
    assert db[PARTS_COLLECTION].count_documents({}) == 0
    # stored again: the part comes back with its message
    store.store(raws[0])
    assert store.get_raw("deal-0@example.com") == raws[0]


@pytest.mark.server
def test_a_writer_waits_for_a_remover_then_puts_the_part_again(make_store: Callable[..., Any], db: Any) -> None:
    """A remover claimed the part and deleted its blob; a writer storing a message that holds it
    must not rely on the blob it saw before: it waits for the claim to go, then puts it again."""
    store = make_store("alice")
    store.store(carrying(0))
    sha = db.messages.find_one({"messageId": "deal-0@example.com"})["rawParts"][0]
    key, _id = part_key("alice", sha), part_id("alice", sha)
    # the remover's first two steps, as a delete of deal-0 makes them: claimed, blob deleted
    db[PARTS_COLLECTION].update_one(
        {"_id": _id}, {"$set": {"refs": [], "dying": "t", "dyingAt": dt.datetime.now(dt.UTC)}}
    )
    db.messages.delete_one({"messageId": "deal-0@example.com"})
    db["aecs.files"].delete_many({"_id": key})
    db["aecs.chunks"].delete_many({"files_id": key})

    def remover_finishes() -> None:  # its last step: the record stays (now held), the claim goes
        time.sleep(0.5)
        db[PARTS_COLLECTION].delete_many({"_id": _id, "dying": "t", "refs": {"$size": 0}})
        db[PARTS_COLLECTION].update_many({"_id": _id, "dying": "t"}, {"$unset": {"dying": "", "dyingAt": ""}})

    finishing = threading.Thread(target=remover_finishes)
    finishing.start()
    raw = carrying(1)
    store.store(raw)
    finishing.join()
    assert store.get_raw("deal-1@example.com") == raw
    assert store.get_attachment("deal-1@example.com", 0) == ATTACHMENT


@pytest.mark.server
def test_a_stale_claim_and_a_dead_writers_hold_are_taken_away(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store("alice")
    store.store(carrying(0))
    sha = db.messages.find_one({"messageId": "deal-0@example.com"})["rawParts"][0]
    _id = part_id("alice", sha)
    # a remover that died after its claim: a writer takes the claim away and stores
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    db[PARTS_COLLECTION].update_one({"_id": _id}, {"$set": {"dying": "dead", "dyingAt": old}})
    raw = carrying(1)
    store.store(raw)
    assert store.get_raw("deal-1@example.com") == raw
    assert "dying" not in db[PARTS_COLLECTION].find_one({"_id": _id})
    # a writer that died between its hold and its row: its key stays in refs until the sweep
    db[PARTS_COLLECTION].update_one({"_id": _id}, {"$push": {"refs": "f" * 64}})
    assert store.delete("deal-0@example.com") and store.delete("deal-1@example.com")
    assert db[PARTS_COLLECTION].find_one({"_id": _id})["refs"] == ["f" * 64]
    assert store.sweep_blobs(dt.timedelta(hours=1)) == 0  # the hold is recent: it may still commit
    db[PARTS_COLLECTION].update_one({"_id": _id}, {"$set": {"touched": old}})
    assert store.sweep_blobs(dt.timedelta(minutes=1)) >= 1
    assert db[PARTS_COLLECTION].count_documents({}) == 0
    assert db["aecs.files"].count_documents({"_id": part_key("alice", sha)}) == 0


@pytest.mark.server
def test_whole_raw_keeps_raw_eml_and_reindex_packs_mail_stored_twice(make_store: Callable[..., Any], db: Any) -> None:
    whole = make_store("alice", whole_raw=True)
    raws = [carrying(n) for n in range(2)]
    whole.store_many(raws)
    row = db.messages.find_one({"messageId": "deal-0@example.com"})
    assert row["blobs"] == ["raw.eml"] and "rawParts" not in row
    assert whole.get_attachment("deal-0@example.com", 0) == ATTACHMENT  # from its span of raw.eml
    # mail stored before packs: raw.eml whole and the attachment's decoded bytes beside it
    legacy = make_store("bob")
    legacy.store(raws[0], attachments=[ATTACHMENT])
    row = db.messages.find_one({"mailboxId": "bob"})
    assert sorted(row["blobs"]) == ["att/0", "raw.eml"]
    assert legacy.reindex()["rawRepacked"] == 1
    row = db.messages.find_one({"mailboxId": "bob"})
    assert row["blobs"] == ["raw.pack"] and len(row["rawParts"]) == 1
    assert db["aecs.files"].count_documents({"filename": {"$regex": "/att/0$"}, "metadata.mailboxId": "bob"}) == 0
    assert legacy.get_raw("deal-0@example.com") == raws[0]
    assert legacy.get_attachment("deal-0@example.com", 0) == ATTACHMENT
    assert legacy.reindex()["rawRepacked"] == 0


@pytest.mark.server
def test_reparse_keeps_a_pack_and_the_parts_it_names(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store("alice")
    raws = [carrying(n) for n in range(2)]
    store.store_many(raws)
    db.messages.update_many({"mailboxId": "alice"}, {"$set": {"specVersion": "0.9"}})
    assert store.reparse_stale()["reparsed"] == 2
    for n, raw in enumerate(raws):
        assert store.get_raw(f"deal-{n}@example.com") == raw
        assert store.get_attachment(f"deal-{n}@example.com", 0) == ATTACHMENT
    (record,) = db[PARTS_COLLECTION].find({"mailboxId": "alice"})
    assert len(record["refs"]) == 2
    assert store.delete("deal-0@example.com") and store.delete("deal-1@example.com")
    assert db[PARTS_COLLECTION].count_documents({}) == 0 and db["aecs.files"].count_documents({}) == 0
