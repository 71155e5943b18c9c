"""One suite, several backends.

- ``mongomock``: the fast unit tier (no sessions, no explain, no text index).
- ``rs`` / ``standalone``: SecantusDB started as a subprocess on a free loopback port, once as a
  single-node replica set (transactions) and once with ``--standalone``; failpoints enabled.
- ``uri``: any real deployment named by ``MONGODB_URI`` (mongod, Atlas).

Choose with ``--backends=mongomock,rs,standalone,uri`` or ``AECS_BACKENDS``; the default is
``mongomock,rs,standalone`` plus ``uri`` when ``MONGODB_URI`` is set. A requested backend that
cannot start fails the run: nothing is skipped silently. Each test gets its own database and
drops it afterwards. Tests marked ``server`` run only on real servers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo.embedded import EmbeddedServer

ALL_BACKENDS = ("mongomock", "rs", "standalone", "uri")
SERVER_BACKENDS = ("rs", "standalone", "uri")
SHARED = Path(__file__).resolve().parents[2] / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backends", default=None, help="comma-separated: " + ",".join(ALL_BACKENDS))


def enabled_backends(config: pytest.Config) -> list[str]:
    raw = config.getoption("--backends") or os.environ.get("AECS_BACKENDS")
    if raw:
        names = [b.strip() for b in raw.split(",") if b.strip()]
    else:
        names = ["mongomock", "rs", "standalone"] + (["uri"] if os.environ.get("MONGODB_URI") else [])
    unknown = set(names) - set(ALL_BACKENDS)
    if unknown:
        raise pytest.UsageError(f"unknown backends: {sorted(unknown)}")
    if "uri" in names and not os.environ.get("MONGODB_URI"):
        raise pytest.UsageError("backend 'uri' needs MONGODB_URI")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    names = enabled_backends(metafunc.config)
    if metafunc.definition.get_closest_marker("server"):
        names = [n for n in names if n in SERVER_BACKENDS]
    metafunc.parametrize("backend", names, scope="session")


class Servers:
    """Starts each server backend once per session, on first use."""

    def __init__(self) -> None:
        self.embedded: dict[str, EmbeddedServer] = {}
        self.clients: dict[str, Any] = {}

    def client(self, backend: str) -> Any:
        if backend not in self.clients:
            if backend == "mongomock":
                import mongomock

                self.clients[backend] = mongomock.MongoClient()
            elif backend == "uri":
                self.clients[backend] = MongoClient(os.environ["MONGODB_URI"])
            else:
                server = EmbeddedServer(standalone=backend == "standalone", test_commands=True)
                server.start()
                self.embedded[backend] = server
                self.clients[backend] = MongoClient(server.uri)
        return self.clients[backend]

    def uri(self, backend: str) -> str:
        if backend == "uri":
            return os.environ["MONGODB_URI"]
        self.client(backend)
        return self.embedded[backend].uri

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        for server in self.embedded.values():
            server.stop()


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    registry = Servers()
    yield registry
    registry.close()


@pytest.fixture
def client(servers: Servers, backend: str) -> Any:
    return servers.client(backend)


@pytest.fixture
def db(client: Any) -> Iterator[Any]:
    name = f"aecs_test_{uuid.uuid4().hex[:12]}"
    yield client[name]
    client.drop_database(name)


@pytest.fixture
def make_store(db: Any) -> Callable[..., Any]:
    """A factory for MessageStore on the test database (indexes ensured once per database)."""
    from aecs_mongo import MessageStore

    ensured: set[str] = set()

    def factory(mailbox_id: str = "alice", **kwargs: Any) -> MessageStore:
        store = MessageStore(db, mailbox_id=mailbox_id, **kwargs)
        bucket = kwargs.get("bucket_name", "aecs")
        if bucket not in ensured:
            store.ensure_indexes()
            ensured.add(bucket)
        return store

    return factory


@pytest.fixture
def store(make_store: Callable[..., Any]) -> Any:
    return make_store()
