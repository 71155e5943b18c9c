"""Blob stores chosen by a URL: GridFS, a local directory, S3-compatible object storage.

The file store runs the whole life of a mailbox (store, read, variants, export, expire, delete,
erase, the sweep) on every backend and store flavor. The S3 path runs against moto's server
mode (PyPI ``moto[server]``), started here as a subprocess on a free port: store, read, export,
erase, migrate, and a refusing or unreachable endpoint. The server-kill test runs on the file
store too (tests/test_server_kill.py).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import BlobLocationError, BlobMissingError, BlobStore, BlobStoreError, MessageStore
from aecs_mongo.pure.blob_location import location_verdict, parse_blob_url, sweep_candidates
from aecs_mongo.pure.documents import Blob
from aecs_mongo.pure.keys import blob_prefix, message_key
from aecs_mongo.pure.lifecycle import mailbox_blob_root
from aecs_mongo.synchronous.migration import migrate_blobs

from .helpers.children import free_port
from .helpers.factories import recomputed_threads, stored_threads
from .helpers.lifecycle import START, exported, fill, mailbox_mail, object_store_life
from .helpers.s3 import SECRET


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- the URL and the settings document (pure) -----------------------------------------------------


def test_blob_urls_parse_to_one_canonical_form() -> None:
    assert parse_blob_url("gridfs").url == "gridfs://aecs"
    assert parse_blob_url("gridfs", "mail").url == "gridfs://mail"
    assert parse_blob_url("gridfs://other").gridfs
    assert parse_blob_url("file:///var/mail//blobs/").url == "file:///var/mail/blobs"
    assert parse_blob_url("file://localhost/x").path == "/x"
    s3 = parse_blob_url("s3://bucket/a/b/")
    assert (s3.bucket, s3.prefix, s3.url) == ("bucket", "a/b/", "s3://bucket/a/b")
    assert parse_blob_url("S3://bucket").url == "s3://bucket"
    assert parse_blob_url("gs://b/p").url == "gs://b/p" and parse_blob_url("az://c").url == "az://c"
    for bad in (
        "",
        "ftp://x",
        "bucket",
        "file://relative/dir",
        "file:///a/../b",
        "s3://",
        "s3://b/../x",
        "gridfs://a/b",
    ):
        with pytest.raises(BlobLocationError):
            parse_blob_url(bad)
    with pytest.raises(BlobLocationError) as refused:
        parse_blob_url(f"s3://AKIA:{SECRET}@bucket/p")
    assert SECRET not in str(refused.value) and SECRET not in refused.value.url
    with pytest.raises(BlobLocationError, match="environment"):
        parse_blob_url("s3://bucket/p?endpoint=http://x")
    with pytest.raises(TypeError):
        parse_blob_url(b"gridfs")


def test_the_settings_document_decides_which_store_may_open_a_database() -> None:
    file, gridfs = parse_blob_url("file:///d"), parse_blob_url("gridfs")
    assert location_verdict(None, False, file) == "record"
    assert location_verdict(None, True, gridfs) == "record"  # mail from before: GridFS
    assert location_verdict({"url": "file:///d"}, True, file) == "ok"
    with pytest.raises(BlobLocationError, match="stored before") as legacy:
        location_verdict(None, True, file)
    assert legacy.value.recorded == "gridfs"
    with pytest.raises(BlobLocationError, match="blobs migrate") as other:
        location_verdict({"url": "s3://b/p"}, False, file)
    assert other.value.recorded == "s3://b/p" and other.value.url == "file:///d"


def test_the_sweep_takes_only_messages_whose_every_blob_is_old() -> None:
    root = "aecs/m/"
    listed = [(root + "k1/raw.eml", 10.0), (root + "k1/att/0", 50.0), (root + "k2/raw.eml", 5.0)]
    assert sweep_candidates(listed, root, 20.0) == {"k2": root + "k2/"}
    assert sweep_candidates(listed, root, 60.0) == {"k1": root + "k1/", "k2": root + "k2/"}


# --- the file store ---------------------------------------------------------------------------------


@pytest.mark.server
def test_file_store_keeps_a_mailbox_whole_life(make_store: Callable[..., Any], db: Any, tmp_path: Path) -> None:
    """Store (raw, HTML, attachments, a variant, a UIDL, a vector), read, export, expire, delete,
    erase on the file store: the same answers as GridFS, nothing of the blobs in the database,
    and nothing left under the mailbox's prefix at the end; another mailbox untouched."""
    root = tmp_path / "blobs"
    url = f"file://{root}"
    store, other = make_store("alice", blobs=url), make_store("bob", blobs=url)
    assert store.blobs.url == url and not store.blobs.gridfs
    fill(store, db, 9)
    fill(other, db, 4)
    assert db["aecs.files"].count_documents({}) == 0 and db["aecs.chunks"].count_documents({}) == 0
    assert db.aecs_settings.find_one({"_id": "blobs"})["url"] == url
    alice_root = root / mailbox_blob_root("alice")

    def files_of(n: int) -> list[Path]:
        key = message_key(f"n{n}@example.com")
        return sorted((alice_root / key[:2]).glob(f"{key}.*"))

    key0 = message_key("n0@example.com")
    # n0's attachment is large: the message is a pack, the attachment's body a part of the mailbox
    assert [p.name for p in files_of(0)] == [f"{key0}.body.html", f"{key0}.raw.pack"]
    (part,) = [p for p in (alice_root / "parts").rglob("*") if p.is_file()]
    assert part.name == db.messages.find_one({"messageId": "n0@example.com"})["rawParts"][0]
    raw0 = alice_root / key0[:2] / f"{key0}.raw.pack"
    assert raw0.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    assert raw0.stat().st_size < len(mailbox_mail(1)[0]) // 10
    assert len(BlobStore.from_url(url).list_keys(blob_prefix("alice", key0))) == 2
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    assert store.get_raw("n0@example.com") == mailbox_mail(1)[0]
    assert store.get_html("n0@example.com") == "<p>html 0</p>"
    assert store.get_attachment("n0@example.com", 0) == bytes(range(256)) * 1100
    assert store.get_attachment("n1@example.com", 0) is None  # n1 has none
    assert store.get_message("n3@example.com", include_raw=True)["content"]["rawFull"]
    assert len(store.get_raw_variants("n1@example.com")) == 2
    assert [c.data for c in exported(store)] == mailbox_mail(9)
    with_variants = exported(store, variants=True)
    assert [(c.message_id, c.copy) for c in with_variants][1:3] == [("n1@example.com", 0), ("n1@example.com", 1)]
    assert with_variants[2].data == store.get_raw_variants("n1@example.com")[1]
    assert store.search("html")  # the local pieces read the blobs too (get_many)
    # expire: the blobs of the expired messages go with them
    report = store.expire(START + dt.timedelta(days=4), batch_size=2)
    assert report.messages == 4 and report.blobs >= 4 * 2
    for n in range(4):
        assert files_of(n) == []
    assert stored_threads(db, "alice") == recomputed_threads(db, "alice")
    assert files_of(5) and store.delete("n5@example.com") and files_of(5) == []
    erased = store.erase_mailbox()
    assert erased.messages == 4 and erased.blobs > 0 and erased.remaining == 0
    assert not alice_root.exists() or files_under(alice_root) == []
    assert other.get_raw("n3@example.com") == mailbox_mail(4)[3]
    assert len(files_under(root / mailbox_blob_root("bob"))) >= 4
    assert store.erase_mailbox().total == 0


@pytest.mark.server
def test_a_store_opened_elsewhere_is_refused(make_store: Callable[..., Any], db: Any, tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'blobs'}"
    make_store("alice", blobs=url).store(mailbox_mail(1)[0])
    with pytest.raises(BlobLocationError, match=f"blobs are in {url}") as refused:
        make_store("alice").get_raw("n0@example.com")  # GridFS: the default
    assert refused.value.recorded == url
    with pytest.raises(BlobLocationError):
        make_store("bob", blobs=f"file://{tmp_path / 'elsewhere'}").store(mailbox_mail(2)[1])
    assert db.messages.count_documents({}) == 1  # the refused store wrote nothing


@pytest.mark.server
def test_mail_stored_before_locations_were_recorded_is_gridfs(
    make_store: Callable[..., Any], db: Any, tmp_path: Path
) -> None:
    make_store("alice").store(mailbox_mail(1)[0])
    db.aecs_settings.delete_many({})  # as a database written by an earlier release
    with pytest.raises(BlobLocationError, match="stored before"):
        make_store("alice", blobs=f"file://{tmp_path}").get_raw("n0@example.com")
    assert make_store("alice").get_raw("n0@example.com") == mailbox_mail(1)[0]
    assert db.aecs_settings.find_one({"_id": "blobs"})["url"] == "gridfs://aecs"


@pytest.mark.server
def test_a_blob_gone_from_under_its_row_is_a_typed_error(make_store: Callable[..., Any], tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = make_store("alice", blobs=f"file://{root}")
    store.store(mailbox_mail(1)[0])
    key = message_key("n0@example.com")
    directory = root / mailbox_blob_root("alice") / key[:2]
    (part,) = [p for p in (root / mailbox_blob_root("alice") / "parts").rglob("*") if p.is_file()]
    part.unlink()  # the part of its attachment: the pack cannot be made whole
    with pytest.raises(BlobMissingError) as missing:
        store.get_raw("n0@example.com")
    assert missing.value.key.endswith(f"/parts/{part.name}")
    with pytest.raises(BlobMissingError):
        store.get_attachment("n0@example.com", 0)
    (directory / f"{key}.raw.pack").unlink()
    (directory / f"{key}.body.html").unlink()
    with pytest.raises(BlobMissingError) as missing:
        store.get_raw("n0@example.com")
    assert missing.value.message_id == "n0@example.com" and missing.value.key.endswith("/raw.pack")
    with pytest.raises(BlobMissingError):
        store.get_html("n0@example.com")
    with pytest.raises(BlobMissingError):
        store.get_message("n0@example.com", include_raw=True)
    assert store.get_message("n0@example.com")["messageId"] == "n0@example.com"  # the rows still read
    assert store.get_raw("absent@example.com") is None  # None means "no such message"
    reported: list[str] = []
    assert exported(store, on_missing=reported.append) == [] and reported == ["n0@example.com"]


@pytest.mark.server
def test_what_a_crash_left_is_reused_or_swept(make_store: Callable[..., Any], db: Any, tmp_path: Path) -> None:
    """An interrupted store leaves blobs without a row, and temporary files: a re-delivery
    completes it over them, ``delete`` of the absent message clears them, and the sweep removes
    those whose every blob is older than its grace, never a younger one."""
    root = tmp_path / "blobs"
    store = make_store("alice", blobs=f"file://{root}")
    store.store(mailbox_mail(1)[0])  # records the location
    mail = mailbox_mail(3)
    keys = {n: message_key(f"n{n}@example.com") for n in (1, 2)}
    blobs = BlobStore.from_url(f"file://{root}")

    def files_of(n: int) -> list[Path]:
        return sorted((root / mailbox_blob_root("alice") / keys[n][:2]).glob(f"*{keys[n]}.*"))

    for n, mkey in keys.items():  # what a worker killed after its raw.eml left
        blobs.put([(Blob(blob_prefix("alice", mkey) + "raw.eml", mail[n], "message/rfc822"), mkey)])
        (root / mailbox_blob_root("alice") / mkey[:2] / f".{mkey}.body.html.0123.tmp").write_bytes(b"half")
    assert store.get_message("n1@example.com") is None  # no row: no message
    assert store.store(mail[1]).inserted  # a re-delivery completes it
    assert store.get_raw("n1@example.com") == mail[1] and store.get_html("n1@example.com") == "<p>html 1</p>"
    assert store.sweep_blobs() == 0  # n2's blob is young: it may be a row about to commit
    old = time.time() - 7200
    for path in files_of(1) + files_of(2):
        os.utime(path, (old, old))
    assert store.sweep_blobs() == 1  # n2's, never n1's (its row is there)
    assert files_of(2) == [] and store.get_raw("n1@example.com") == mail[1]
    assert store.sweep_blobs(older_than=dt.timedelta(0)) == 0
    with pytest.raises(TypeError):
        store.sweep_blobs(older_than=3600)
    assert db.messages.count_documents({}) == 2


@pytest.mark.server
def test_blobs_put_ahead_keep_each_message_its_own_bytes(
    make_store: Callable[..., Any], db: Any, tmp_path: Path
) -> None:
    """``store_many`` on the file store puts a batch's blobs while the batch before it is
    written (filestore.py, "Staged ahead"): a later batch's other copy of a message (same
    Message-ID, other bytes) never takes the name of the message's own raw bytes, whether the
    message's batch put its blobs itself (the first two) or ahead; the copy is kept as a
    variant, and nothing temporary is left."""
    root = tmp_path / "blobs"
    store = make_store("alice", blobs=f"file://{root}")

    def raw(n: int, copy: int = 0) -> bytes:
        head = (
            f"Message-ID: <p{n}@example.com>\r\nFrom: a@example.com\r\nTo: b@example.com\r\n"
            f"Subject: s{n}\r\nDate: Mon, 1 Jan 2024 10:{n:02d}:00 +0000\r\n"
        )
        if not copy:
            return f"{head}\r\nbody {n}\r\n".encode()
        # the other copy has an HTML part its first copy lacks: no body.html for the message
        return (
            f'{head}MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b"\r\n\r\n'
            f"--b\r\nContent-Type: text/plain\r\n\r\nbody {n}\r\n"
            f"--b\r\nContent-Type: text/html\r\n\r\n<p>body {n}</p>\r\n--b--\r\n"
        ).encode()

    # batches of two: each message's other copy opens the next batch (2|3 straddles the batch
    # written by its own put while the next one is put ahead; later ones are all put ahead)
    items = [raw(0), raw(1), raw(2), raw(3), raw(3, 1), raw(4), raw(5), raw(6), raw(6, 1), raw(7), raw(7, 1)]
    results = store.store_many(items, batch_size=2)
    assert [r.inserted for r in results] == [True] * 4 + [False, True, True, True, False, True, False]
    assert [r.variant for r in results] == [False] * 4 + [True, False, False, False, True, False, True]
    for n in range(8):
        assert store.get_raw(f"p{n}@example.com") == raw(n)
    for n in (3, 6, 7):
        assert store.get_raw_variants(f"p{n}@example.com") == [raw(n), raw(n, 1)]
        assert store.get_html(f"p{n}@example.com") is None
    names = {p.name.split(".", 1)[1].split(".")[0] for p in root.rglob("*") if p.is_file()}
    assert names == {"raw", "variants"}  # no blob that no row names
    assert not list(root.rglob("*.tmp"))
    assert db.messages.count_documents({"mailboxId": "alice"}) == 8


def test_create_if_absent_keeps_the_first_complete_copy(tmp_path: Path) -> None:
    blobs = BlobStore.from_url(f"file://{tmp_path}")
    key = "aecs/m/k/raw.eml"
    blobs.put([(Blob(key, b"first", "x"), "k")], absent=True)
    blobs.put([(Blob(key, b"second", "x"), "k")], absent=True)
    blobs.put([(Blob(key, b"third", "x"), "k")])
    assert blobs.get(key) == b"first"
    assert [k for k, _ in blobs.list_keys("aecs/")] == [key]
    assert not [p for p in tmp_path.rglob("*.tmp")]
    with pytest.raises(ValueError):
        blobs.get("aecs/../../etc/passwd")
    with pytest.raises(ValueError):
        blobs.put([(Blob("/abs/key", b"x", "x"), "k")])
    assert blobs.delete([key, "aecs/m/k/none"]) == 1 and blobs.get(key) is None


@pytest.mark.server
def test_an_unwritable_directory_is_a_typed_error_and_stores_nothing(
    make_store: Callable[..., Any], db: Any, tmp_path: Path
) -> None:
    """Bob's mailbox directory cannot be made (a file is in its place: this works as root too):
    his message is refused with a ``BlobStoreError`` naming the store, nothing of it is written
    and Alice's mail is untouched; once the directory can be made, storing it again completes it."""
    root = tmp_path / "blobs"
    url = f"file://{root}"
    alice, bob = make_store("alice", blobs=url), make_store("bob", blobs=url)
    alice.store(mailbox_mail(1)[0])
    blocker = root / mailbox_blob_root("bob").rstrip("/")
    blocker.write_bytes(b"not a directory")
    with pytest.raises(BlobStoreError, match=f"blob store {url}: cannot write blobs") as failed:
        bob.store(mailbox_mail(2)[1])
    assert failed.value.url == url
    assert db.messages.count_documents({}) == 1 and db.bodies.count_documents({}) == 1
    assert alice.get_raw("n0@example.com") == mailbox_mail(1)[0]
    blocker.unlink()
    assert bob.store(mailbox_mail(2)[1]).inserted and bob.get_raw("n1@example.com") == mailbox_mail(2)[1]


# --- S3 (moto's server mode) ------------------------------------------------------------------------


def _objects(s3_server: str, bucket: str, prefix: str = "") -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    found = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in found)


@pytest.mark.one_server
def test_s3_store_read_export_erase(make_store: Callable[..., Any], db: Any, s3_server: str, bucket: str) -> None:
    store = make_store("alice", blobs=f"s3://{bucket}/mail/archive")
    object_store_life(store, db, lambda: _objects(s3_server, bucket), "mail/archive/")


@pytest.mark.one_server
def test_s3_that_refuses_or_is_unreachable_is_a_typed_error(
    db: Any, s3_server: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bucket that is not there, then an endpoint nobody listens on: a ``BlobStoreError``
    naming the URL and never the secret; the message is not stored, what was stored stays, and
    storing it again once the store answers completes it."""
    good = MessageStore(db, mailbox_id="alice", blobs=f"s3://{bucket}/p")
    good.store(mailbox_mail(1)[0])
    db.aecs_settings.update_one({"_id": "blobs"}, {"$set": {"url": "s3://no-such-bucket/p"}})
    missing = MessageStore(db, mailbox_id="bob", blobs="s3://no-such-bucket/p")
    with pytest.raises(BlobStoreError) as refused:
        missing.store(mailbox_mail(2)[1])
    assert "s3://no-such-bucket/p" in str(refused.value) and SECRET not in str(refused.value)
    db.aecs_settings.update_one({"_id": "blobs"}, {"$set": {"url": f"s3://{bucket}/p"}})
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    down = MessageStore(db, mailbox_id="alice", blobs=f"s3://{bucket}/p")
    with pytest.raises(BlobStoreError) as unreachable:
        down.store(mailbox_mail(2)[1])
    assert unreachable.value.url == f"s3://{bucket}/p" and SECRET not in str(unreachable.value)
    with pytest.raises(BlobStoreError):
        down.get_raw("n0@example.com")
    assert db.messages.count_documents({}) == 1
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    back = MessageStore(db, mailbox_id="alice", blobs=f"s3://{bucket}/p")
    assert back.store(mailbox_mail(2)[1]).inserted and back.get_raw("n0@example.com") == mailbox_mail(1)[0]


@pytest.mark.one_server
def test_migrate_gridfs_to_s3_to_a_directory(db: Any, s3_server: str, bucket: str, tmp_path: Path) -> None:
    """GridFS -> S3 -> a directory: each copy verified, the location switched only at the end,
    the source emptied; a run interrupted after its copies resumes; another store then refused."""
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    fill(store, db, 6)
    MessageStore(db, mailbox_id="bob").store(mailbox_mail(2)[1])
    before = {c.message_id: c.data for c in exported(store, variants=True)}
    blobs = db["aecs.files"].count_documents({})
    url = f"s3://{bucket}/moved"
    # an interrupted run: the copies are there, the switch is not
    db.aecs_settings.update_one({"_id": "blobs"}, {"$set": {"migratingTo": url}})
    with pytest.raises(BlobLocationError, match="under way"):
        migrate_blobs(db, f"file://{tmp_path}/x")
    report = migrate_blobs(db, url)
    assert report.switched and report.copied == blobs and report.missing == [] and report.removed == blobs
    assert db["aecs.files"].count_documents({}) == 0 and db["aecs.chunks"].count_documents({}) == 0
    assert len(_objects(s3_server, bucket)) == blobs
    with pytest.raises(BlobLocationError):
        MessageStore(db, mailbox_id="alice").get_raw("n0@example.com")
    moved = MessageStore(db, mailbox_id="alice", blobs=url)
    assert {c.message_id: c.data for c in exported(moved, variants=True)} == before
    assert migrate_blobs(db, url).copied == 0  # done: nothing to do
    # S3 -> a directory, resumed: a first run's copies are found, not written again
    target = f"file://{tmp_path / 'blobs'}"
    partial = MessageStore(db, mailbox_id="alice", blobs=url)
    first = partial.blobs.list_keys("aecs/")[0][0]
    BlobStore.from_url(target).put([(Blob(first, partial.blobs.get(first), "x"), "k")])
    again = migrate_blobs(db, target)
    assert (again.already, again.copied) == (1, blobs - 1) and _objects(s3_server, bucket) == []
    final = MessageStore(db, mailbox_id="alice", blobs=target)
    assert {c.message_id: c.data for c in exported(final, variants=True)} == before
    assert MessageStore(db, mailbox_id="bob", blobs=target).get_raw("n1@example.com") == mailbox_mail(2)[1]


# --- the command line -------------------------------------------------------------------------------


@pytest.mark.one_server
def test_cli_blobs_show_migrate_and_the_blobs_option(
    cli: Any, db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--uri`` keeps GridFS by default; ``blobs migrate --to file://...`` moves the blobs and
    later commands find them where the database records them (no option needed); ``--blobs``
    naming another location is refused with the way out; ``$AECS_BLOBS`` is ``--blobs``."""
    from .helpers.paths import ROOT

    samples = ROOT / "samples" / "mailbox"
    assert cli("ingest", str(samples)).code == 0
    shown = cli("--json", "blobs", "show").json()
    assert shown["url"] == "gridfs://aecs" and shown["recorded"]
    first = db.messages.find_one({}, sort=[("_id", 1)])
    raw = cli("show", "--raw", first["messageId"]).stdout
    target = f"file://{tmp_path / 'blobs'}"
    moved = cli("--json", "blobs", "migrate", "--to", target).json()
    assert moved["switched"] and moved["copied"] > 0 and moved["removed"] == moved["copied"]
    assert db["aecs.files"].count_documents({}) == 0
    assert cli("show", "--raw", first["messageId"]).stdout == raw  # found where the database says
    assert cli("blobs", "show").out.startswith(f"blobs: {target}")
    refused = cli("--blobs", "gridfs", "show", "--raw", first["messageId"])
    assert refused.code == 1 and "blobs migrate --to gridfs://aecs" in refused.err
    monkeypatch.setenv("AECS_BLOBS", "gridfs")
    from aecs_mongo.cli import build_parser

    assert build_parser().parse_args(["inbox"]).blobs == "gridfs"
    assert cli("blobs", "migrate").code == 2  # no --to
