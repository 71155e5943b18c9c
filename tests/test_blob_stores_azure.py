"""The ``az://`` blob store against Azurite, Microsoft's Azure Storage emulator (npm ``azurite``,
MIT), started here as a subprocess on a free port (object storage beside GridFS).

obstore talks to it as to Azure: ``AZURE_STORAGE_USE_EMULATOR`` with the emulator's well-known
account, the endpoint in ``AZURITE_BLOB_STORAGE_URL``. The container is made here with one
SharedKey-signed request (Azure has no anonymous writes). Store, read, a re-delivery, export,
create-if-absent, delete, erase and a migration from GridFS run on it; an unreachable endpoint is
a typed error that loses nothing. ``gs://`` has no emulator here that speaks the XML API obstore
uses (PyPI's gcp-storage-emulator answers without ETag and Last-Modified): it stays untested.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import http.client
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aecs_mongo import BlobStore, BlobStoreError, MessageStore
from aecs_mongo.pure.documents import Blob
from aecs_mongo.synchronous.migration import migrate_blobs

from .helpers.children import free_port, serving
from .helpers.lifecycle import exported, fill, mailbox_mail, object_store_life
from .helpers.paths import ROOT

#: the emulator's well-known account and key (public: Azurite's documentation)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE = ROOT / "node_modules" / ".bin" / "azurite-blob"


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Azurite's blob service as a subprocess: its endpoint."""
    pytest.importorskip("obstore", reason="obstore is in the objects extra (scripts/test.sh installs it)")
    if not AZURITE.exists():
        pytest.skip("Azurite is not installed: npm ci (scripts/test.sh) puts it in node_modules")
    port = free_port()
    where = str(tmp_path_factory.mktemp("azurite"))
    argv = [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", where, "--silent"]
    server = serving(argv, port, "Azurite")
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=30)


def _create_container(endpoint: str, name: str) -> int:
    """``PUT ?restype=container`` signed with the account key (Shared Key, version 2021-08-06)."""
    date = email.utils.formatdate(usegmt=True)
    version = "2021-08-06"
    headers = f"x-ms-date:{date}\nx-ms-version:{version}\n"
    to_sign = "PUT\n" + "\n" * 11 + headers + f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
    signature = base64.b64encode(hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    host, _, port = endpoint.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"x-ms-date": date, "x-ms-version": version, "Authorization": f"SharedKey {ACCOUNT}:{signature}"}
    conn.request("PUT", f"/{ACCOUNT}/{name}?restype=container", body=b"", headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.fixture
def container(azurite: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh container; the Azure environment points obstore at the emulator."""
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    name = f"c{uuid.uuid4().hex[:12]}"
    assert _create_container(azurite, name) == 201
    return name


def _objects(url: str) -> list[str]:
    """Every object's key under the container (read with obstore, not through our store)."""
    import obstore
    from obstore.store import from_url

    container = url.removeprefix("az://").split("/", 1)[0]
    return sorted(o["path"] for batch in obstore.list(from_url(f"az://{container}")) for o in batch)


@pytest.mark.one_server
def test_azure_store_read_export_erase(make_store: Callable[..., Any], db: Any, container: str) -> None:
    url = f"az://{container}/mail"
    object_store_life(make_store("alice", blobs=url), db, lambda: _objects(url), "mail/")


@pytest.mark.one_server
def test_azure_create_if_absent_keeps_the_first_copy(container: str) -> None:
    blobs = BlobStore.from_url(f"az://{container}/p")
    blobs.put([(Blob("aecs/x/k/raw.eml", b"first", "message/rfc822"), "k")])
    blobs.put([(Blob("aecs/x/k/raw.eml", b"second", "message/rfc822"), "k")])  # a retry: no error
    assert blobs.get("aecs/x/k/raw.eml") == b"first"


@pytest.mark.one_server
def test_azure_unreachable_is_a_typed_error_and_migration_lands_there(
    db: Any, container: str, azurite: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GridFS -> Azure by ``migrate_blobs``, every blob read back the same; then an endpoint that
    nobody listens on: a ``BlobStoreError`` naming the URL, nothing lost, and the store works
    again once the endpoint answers."""
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    fill(store, db, 4)
    before = {c.message_id: c.data for c in exported(store, variants=True)}
    url = f"az://{container}/moved"
    report = migrate_blobs(db, url)
    assert report.switched and report.copied > 0 and report.missing == []
    assert len(_objects(url)) == report.copied and db["aecs.files"].count_documents({}) == 0
    moved = MessageStore(db, mailbox_id="alice", blobs=url)
    assert {c.message_id: c.data for c in exported(moved, variants=True)} == before
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{free_port()}")
    down = MessageStore(db, mailbox_id="alice", blobs=url)
    with pytest.raises(BlobStoreError) as unreachable:
        down.store(mailbox_mail(6)[5])
    assert unreachable.value.url == url and KEY not in str(unreachable.value)
    assert db.messages.count_documents({"messageId": "n5@example.com"}) == 0
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    back = MessageStore(db, mailbox_id="alice", blobs=url)
    assert back.store(mailbox_mail(6)[5]).inserted and back.get_raw("n0@example.com") == mailbox_mail(1)[0]
