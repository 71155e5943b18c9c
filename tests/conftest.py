"""One suite, several backends.

- ``mongomock``: the fast tier, running the product's one program as far as mongomock can: a test
  whose path it cannot run (a hinted ``find_one``, a bulk of PyMongo 4's ``UpdateOne`` or
  ``ReplaceOne``, a write concern on a database, ``$text``, change streams) is marked ``server``.
  What it lacks as a server (``hello``, ``buildInfo``, ``explain``, sessions) the store learns as
  it does of any server that refuses a command.
- ``rs`` / ``standalone``: SecantusDB started as a subprocess on a free loopback port, once as a
  single-node replica set (transactions) and once with ``--standalone``; failpoints enabled
  (``--enable-test-commands``). They run as the CLI's embedded server does: with ``--auth``, the
  URI carrying the credentials of the server's ``root`` user (which may run ``configureFailPoint``),
  so the whole suite runs against an authenticating server.
- ``uri``: any real deployment named by ``MONGODB_URI`` (mongod, Atlas).

Choose with ``--backends=mongomock,rs,standalone,uri`` or ``AECS_BACKENDS``; the default is
``mongomock,rs,standalone`` plus ``uri`` when ``MONGODB_URI`` is set. A requested backend that
cannot start fails the run: nothing is skipped silently. Each test gets its own database and
drops it afterwards. Tests marked ``server`` run only on real servers; ``one_server`` ones (what
they check does not depend on the deployment) on the first server backend requested.

Commands run by the tests (``aecs-mongo`` subprocesses and ``main()``) get ``AECS_KEEP_SERVER=0``
(set for the session below): the embedded server stops with each command, as before the shared
background server existed, so no test leaves a server running (nor a ``--uri`` read a warm
command host: tests/test_warm.py asks for them); and ``XDG_CACHE_HOME`` names a
temporary directory, where the command line keeps the local search index of a ``--uri`` server.
Tests of the shared server (tests/test_background.py) ask for one explicitly and stop it themselves. The ``cli`` fixture
runs the command line in this process on the test's database (tests/helpers/cli.py).

Store tests (those using ``make_store``/``store``) also run once per store flavor: the sync
``MessageStore``, and ``AsyncMessageStore`` over PyMongo's ``AsyncMongoClient`` and over Motor
(real servers only), each driven through ``SyncOverAsync`` so one test body serves all three.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo.embedded.server import EmbeddedServer

from .helpers.budgets import BIG
from .helpers.cli import Cli, in_process
from .helpers.monitoring import Recorder
from .helpers.normalize import load_validator

#: fixtures kept in helpers: moto's S3-compatible server and a bucket on it
pytest_plugins = ["tests.helpers.s3"]

ALL_BACKENDS = ("mongomock", "rs", "standalone", "uri")
FLAVORS = ("sync", "pymongo_async", "motor")
#: Motor runs the same async source as PyMongo's async client through ``resolve()``: CI
#: (``CI=true``) runs it on every store test; a contributor's default run leaves it to CI
#: (a sixth of the suite's time; ``--flavors`` or ``AECS_FLAVORS`` choose)
DEFAULT_FLAVORS = ("sync", "pymongo_async")
SERVER_BACKENDS = ("rs", "standalone", "uri")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_server: needs a server, but checks nothing that depends on which: the first one only"
    )
    config.addinivalue_line(
        "markers",
        "ci_every_server: long, and what it checks does not depend on the deployment: every backend"
        " with CI=true, else the first server backend only",
    )


#: The test files that take longest (seconds of one run on 2 cores, default budgets): they are
#: collected first, because pytest-xdist's ``--dist loadfile`` (scripts/test.sh) hands files to
#: its workers in collection order; a long file handed out last kept one worker busy for a
#: minute after the others had finished. Others keep their order after these.
SLOWEST_FILES = (
    "test_cli_ux.py",
    "test_cli.py",
    "test_background.py",
    "test_search_engines.py",
    "test_vectors.py",
    "test_lifecycle_server.py",
    "test_server_kill_deletions.py",
    "test_windowed_reads.py",
    "test_server_kill.py",
    "test_indexes_js.py",
    "test_store.py",
    "test_bad_input.py",
    "test_mcp.py",
    "test_agents.py",
    "test_imap.py",
    "test_mailbox.py",
    "test_feed.py",
    "test_reliability.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the order within a file stays


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backends", default=None, help="comma-separated: " + ",".join(ALL_BACKENDS))
    parser.addoption(
        "--flavors",
        default=os.environ.get("AECS_FLAVORS") or ",".join(FLAVORS if BIG else DEFAULT_FLAVORS),
        help="store flavors: " + ",".join(FLAVORS) + " (default: all three with CI=true, else sync and pymongo_async)",
    )


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
    if metafunc.definition.get_closest_marker("one_server") or (
        metafunc.definition.get_closest_marker("ci_every_server") and not BIG
    ):
        names = [n for n in names if n in SERVER_BACKENDS][:1]
    if "store_flavor" not in metafunc.fixturenames:
        metafunc.parametrize("backend", names, scope="session")
        return
    flavors = [f.strip() for f in metafunc.config.getoption("--flavors").split(",") if f.strip()]
    pairs = [(b, f) for b in names for f in flavors if f == "sync" or b != "mongomock"]
    metafunc.parametrize(("backend", "store_flavor"), pairs, ids=[f"{b}-{f}" for b, f in pairs], scope="session")


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


@pytest.fixture(scope="session", autouse=True)
def _commands_stop_their_server() -> Iterator[None]:
    previous = os.environ.get("AECS_KEEP_SERVER")
    os.environ["AECS_KEEP_SERVER"] = "0"
    yield
    if previous is None:
        os.environ.pop("AECS_KEEP_SERVER", None)
    else:
        os.environ["AECS_KEEP_SERVER"] = previous


@pytest.fixture(scope="session", autouse=True)
def _search_indexes_in_a_temporary_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The command line keeps the local search index of a ``--uri`` deployment in the user's
    cache directory: for the tests, a temporary one (``XDG_CACHE_HOME``), never ``~/.cache``."""
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    registry = Servers()
    yield registry
    registry.close()


@pytest.fixture
def client(servers: Servers, backend: str) -> Any:
    return servers.client(backend)


@pytest.fixture
def failpoints(client: Any, backend: str) -> Iterator[Any]:
    """The client that sets failpoints; every failpoint is cleared after the test."""
    from .helpers.failpoints import failpoint

    if backend == "uri" and not os.environ.get("AECS_URI_HAS_FAILPOINTS"):
        pytest.skip("MONGODB_URI deployments need --setParameter enableTestCommands=1 (set AECS_URI_HAS_FAILPOINTS=1)")
    yield client
    failpoint(client, mode="off")


@pytest.fixture
def monitored(servers: Servers, backend: str, db: Any) -> Iterator[Callable[[Any], Any]]:
    """``monitored(listener)``: a ``MessageStore`` of mailbox ``alice`` on the test database
    (indexes ensured) whose own client reports every command to ``listener``."""
    from aecs_mongo import MessageStore

    clients: list[MongoClient[dict[str, Any]]] = []

    def make(listener: Any) -> Any:
        clients.append(MongoClient(servers.uri(backend), event_listeners=[listener]))
        store = MessageStore(clients[-1][db.name], mailbox_id="alice")
        store.ensure_indexes()
        return store

    yield make
    for opened in clients:
        opened.close()


@pytest.fixture
def recorded(monitored: Callable[[Any], Any]) -> tuple[Any, Recorder]:
    """(a monitored store, its ``Recorder`` of the reads sent: tests/helpers/monitoring.py)."""
    recorder = Recorder()
    return monitored(recorder), recorder


@pytest.fixture
def db(client: Any) -> Iterator[Any]:
    name = f"aecs_test_{uuid.uuid4().hex[:12]}"
    yield client[name]
    client.drop_database(name)


@pytest.fixture
def cli(servers: Servers, backend: str, db: Any, capsysbinary: pytest.CaptureFixture[bytes]) -> Cli:
    """``cli(*argv) -> Result``: ``aecs_mongo.cli.main`` in this process against the backend's URI
    and the test's database (``db``: dropped afterwards), output captured (tests/helpers/cli.py)."""
    return in_process(servers.uri(backend), db.name, capsysbinary)


class SyncOverAsync:
    """Drive an AsyncMessageStore from a sync test: each coroutine method runs on ``loop``."""

    def __init__(self, astore: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._astore = astore
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._astore, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attr(*args, **kwargs))

        return call


@pytest.fixture
def store_db(servers: Servers, backend: str, store_flavor: str, db: Any) -> Iterator[tuple[Any, Any]]:
    """(database handle of the flavor's driver, a wrapper factory) on the test database."""
    if store_flavor == "sync":
        yield db, lambda s: s
        return
    loop = asyncio.new_event_loop()
    uri = servers.uri(backend)

    async def connect() -> Any:
        if store_flavor == "motor":
            from motor.motor_asyncio import AsyncIOMotorClient

            return AsyncIOMotorClient(uri)
        from pymongo import AsyncMongoClient

        return AsyncMongoClient(uri)

    aclient = loop.run_until_complete(connect())
    try:
        yield aclient[db.name], lambda s: SyncOverAsync(s, loop)
    finally:
        closing = aclient.close()
        if inspect.isawaitable(closing):
            loop.run_until_complete(closing)
        loop.close()


@pytest.fixture
def make_store(store_db: tuple[Any, Any], store_flavor: str) -> Callable[..., Any]:
    """A factory for the flavor's store on the test database (indexes ensured once per bucket)."""
    from aecs_mongo import AsyncMessageStore, MessageStore

    handle, wrap = store_db
    cls = MessageStore if store_flavor == "sync" else AsyncMessageStore
    ensured: set[str] = set()

    def factory(mailbox_id: str = "alice", **kwargs: Any) -> Any:
        store = wrap(cls(handle, mailbox_id=mailbox_id, **kwargs))
        bucket = kwargs.get("bucket_name", "aecs")
        if bucket not in ensured:
            store.ensure_indexes()
            ensured.add(bucket)
        return store

    return factory


@pytest.fixture
def store(make_store: Callable[..., Any]) -> Any:
    return make_store()


@pytest.fixture
def make_tools() -> Callable[..., Any]:
    """Agent tools over a store of ``make_store``, in its flavour: ``MailTools`` over the sync
    store, ``AsyncMailTools`` over the async ones (driven like the store, on its loop)."""
    from aecs_mongo.agents import AsyncMailTools, MailTools

    def factory(store: Any, **kwargs: Any) -> Any:
        if isinstance(store, SyncOverAsync):
            return SyncOverAsync(AsyncMailTools(store._astore, **kwargs), store._loop)
        return MailTools(store, **kwargs)

    return factory


@pytest.fixture(scope="module")
def validator() -> Any:
    """The AECS-1 schema validator of the normalizer tests (tests/helpers/normalize.py)."""
    return load_validator()


@pytest.fixture(params=["rs", "standalone"])
def killable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of the test's own (each embedded mode that is requested), on a fixed port, that
    the test may kill (``kill()``: SIGKILL) and start again on the same data directory."""
    from aecs_mongo.embedded.server import _free_port

    mode = str(request.param)
    if mode not in enabled_backends(request.config):
        pytest.skip(f"the {mode} backend is not requested")
    server = EmbeddedServer(tmp_path / "data", standalone=mode == "standalone", port=_free_port("127.0.0.1"))
    server.start()
    yield server
    server.stop()
