"""Durable acknowledgements: which writes ask for the journal, and which do not.

The store's default is durable: the write that completes a batch (a transaction's commit, the
thread writes without one, the last delete of a deletion batch, a vector bulk) carries
``{j: true}`` (``{w: "majority", j: true}`` on a replica set), one per batch, not one per
document; a batch that wrote nothing new ends with one barrier write. A write concern the user
set is used as it is; ``durable=False`` adds none. What a kill of the server does with these
acknowledgements is tests/test_server_kill.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern, monitoring

from aecs_mongo import MessageStore
from aecs_mongo.pure.keys import message_key

from .helpers.factories import email

pytestmark = pytest.mark.server

_WRITES = {"insert", "update", "delete", "findAndModify", "commitTransaction"}


class Writes(monitoring.CommandListener):
    """The write concern of every write command, in order."""

    def __init__(self) -> None:
        self.concerns: list[Any] = []
        #: the filter of each update command's first statement (None for other writes)
        self.targets: list[Any] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        # the change mark's two updates around a batch (servers without change streams:
        # aecs_mongo/pure/change_marks.py) are no part of its durability: a begin is made durable
        # by the batch's journaled write after it, and an end lost in a crash leaves the mark
        # unsettled, which only makes the next read of a local index check the store
        if event.command.get(event.command_name) == "change_marks":
            return
        if event.command_name in _WRITES:
            self.concerns.append(event.command.get("writeConcern"))
            updates = event.command.get("updates") or [{}]
            self.targets.append(updates[0].get("q"))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def watched(servers: Any, backend: str, db: Any) -> Iterator[tuple[Writes, MongoClient[dict[str, Any]]]]:
    writes = Writes()
    client: MongoClient[dict[str, Any]] = MongoClient(servers.uri(backend), event_listeners=[writes])
    MessageStore(client[db.name], mailbox_id="alice").ensure_indexes()
    writes.concerns.clear()
    yield writes, client
    client.close()


def journaled(backend: str) -> dict[str, Any]:
    return {"w": "majority", "j": True} if backend == "rs" else {"j": True}


def test_a_batch_asks_for_the_journal_once_on_its_last_write(
    watched: tuple[Writes, Any], backend: str, db: Any
) -> None:
    writes, client = watched
    store = MessageStore(client[db.name], mailbox_id="alice")
    store.store_many([email(n, thread=f"t{n % 7}@x") for n in range(100)], batch_size=50)
    durable = [i for i, c in enumerate(writes.concerns) if c == journaled(backend)]
    assert len(durable) <= 4  # two batches: the commit (or the thread writes) of each
    assert writes.concerns[-1] == journaled(backend)
    assert all(c in (None, journaled(backend)) for c in writes.concerns)
    assert len(writes.concerns) > 2 * len(durable)  # the blobs, bodies and messages do not pay

    writes.concerns.clear()  # a re-delivery writes nothing new: one barrier makes it durable
    assert not any(r.inserted for r in store.store_many([email(n) for n in range(50)], batch_size=50))
    assert writes.concerns == [journaled(backend)]

    writes.concerns.clear()
    assert store.delete("m3@example.com")
    assert writes.concerns[-1] == journaled(backend) and writes.concerns.count(journaled(backend)) == 1

    writes.concerns.clear()
    store.set_embeddings({"m1@example.com": [0.1, 0.2], "m2@example.com": [0.3, 0.4]})
    assert writes.concerns == [journaled(backend)]  # one bulk, journaled


def _raw(n: int, note: str = "") -> bytes:
    return (
        f"From: a@example.com\r\nTo: b@example.com\r\nSubject: s{n}\r\nMessage-ID: <v{n}@example.com>\r\n"
        f"Date: Mon, 29 Jun 2026 09:00:00 +0000\r\n\r\nbody {n}{note}\r\n"
    ).encode()


def test_a_batch_that_keeps_variants_journals_its_last_variant_write(
    watched: tuple[Writes, Any], backend: str, db: Any
) -> None:
    """Copies of stored messages with other bytes are the batch's last writes: the last of them
    asks for the journal (so no barrier follows), and only the last."""
    writes, client = watched
    store = MessageStore(client[db.name], mailbox_id="alice")
    store.store_many([_raw(n) for n in range(3)])
    last_variant = {"_id": f"alice:{message_key('v2@example.com')}"}
    writes.concerns.clear()
    writes.targets.clear()
    results = store.store_many([_raw(n, " (the list's copy)") for n in range(3)] + [_raw(9)])
    assert [r.outcome for r in results] == ["variant", "variant", "variant", "stored"]
    assert writes.concerns[-1] == journaled(backend) and writes.targets[-1] == last_variant  # no barrier
    assert writes.concerns.count(journaled(backend)) <= 2  # the new message's commit, the last variant
    assert len(writes.concerns) >= 5  # blobs, message, three variant records: those do not pay

    writes.concerns.clear()  # only variants: their last record is the batch's one durable write
    writes.targets.clear()
    results = store.store_many([_raw(n, " (a third copy)") for n in range(3)])
    assert [r.outcome for r in results] == ["variant", "variant", "variant"]
    assert writes.concerns.count(journaled(backend)) == 1 and writes.concerns[-1] == journaled(backend)
    assert writes.targets[-1] == last_variant


def test_durable_false_and_the_users_own_write_concern_are_left_alone(
    watched: tuple[Writes, Any], backend: str, db: Any
) -> None:
    writes, client = watched
    fast = MessageStore(client[db.name], mailbox_id="alice", durable=False)
    fast.store_many([email(n) for n in range(30)], batch_size=10)
    fast.store_many([email(n) for n in range(10)], batch_size=10)  # nothing new: no barrier either
    fast.delete("m1@example.com")
    assert writes.concerns and all(c is None for c in writes.concerns)

    writes.concerns.clear()
    own = client[db.name].with_options(write_concern=WriteConcern(w=1, j=False))
    MessageStore(own, mailbox_id="alice").store_many([email(n) for n in range(30, 40)])
    assert writes.concerns and all(c in ({"w": 1, "j": False}, None) for c in writes.concerns)
    assert {"w": 1, "j": False} in writes.concerns


class _Switchable(Writes):
    """A listener registered for the whole process (pymongo has no unregister): it records only
    while ``on``."""

    on = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            super().started(event)


_GLOBAL = _Switchable()
monitoring.register(_GLOBAL)


def test_ingest_fast_waits_for_no_journal(servers: Any, backend: str, db: Any) -> None:
    from aecs_mongo.cli import main

    samples = str(Path(__file__).resolve().parents[1] / "samples" / "mailbox")
    uri = servers.uri(backend)
    _GLOBAL.concerns.clear()
    _GLOBAL.on = True
    try:
        # the durable run first: a database's first store records its blob location in a
        # journaled write, whatever the store's durability (the record outlives the run)
        assert main(["--uri", uri, "--db", db.name, "--mailbox", "durable", "ingest", samples]) == 0
        durable = list(_GLOBAL.concerns)
        _GLOBAL.concerns.clear()
        assert main(["--uri", uri, "--db", db.name, "--mailbox", "fast", "ingest", "--fast", samples]) == 0
        fast = list(_GLOBAL.concerns)
    finally:
        _GLOBAL.on = False
    assert fast and journaled(backend) not in fast
    assert durable[-1] == journaled(backend)  # the run ends on a journaled write (after its records)
    assert (
        db.messages.count_documents({"mailboxId": "fast"}) == db.messages.count_documents({"mailboxId": "durable"}) > 0
    )


def test_the_barrier_counter_is_secantusdb_s_alone(watched: tuple[Writes, Any], backend: str, db: Any) -> None:
    """The journal barrier changes a counter (``journal_barrier``) only where the server needs
    it: SecantusDB (buildInfo's ``secantusVersion``), whose journaled writes that change nothing
    do not flush its log. Elsewhere (mongod, Atlas) the barrier is a journaled update that
    matches nothing: no collection, no document every writer of the deployment increments."""
    writes, client = watched
    store = MessageStore(client[db.name], mailbox_id="alice")
    store.store_many([email(n) for n in range(5)], batch_size=5)
    secantus = "secantusVersion" in client.admin.command("buildInfo")
    writes.concerns.clear()
    writes.targets.clear()
    store.store_many([email(n) for n in range(5)], batch_size=5)  # nothing new: the barrier alone
    assert store.capabilities.barrier_counter is secantus
    assert writes.concerns == [journaled(backend)]
    if secantus:
        assert writes.targets == [{"_id": "journal"}]
        assert client[db.name].journal_barrier.find_one({"_id": "journal"})["writes"] >= 1
    # the other servers' barrier, as a store there sends it (the capability as learned there)
    other = MessageStore(client[db.name + "_other"], mailbox_id="alice")
    try:
        other.capabilities.barrier_counter = False
        other.ensure_indexes()
        other.store_many([email(n) for n in range(5)], batch_size=5)
        writes.concerns.clear()
        writes.targets.clear()
        other.store_many([email(n) for n in range(5)], batch_size=5)
        assert writes.concerns == [journaled(backend)]
        assert writes.targets == [{"_id": ":journal-barrier"}]  # an _id no message has: it matches nothing
        assert "journal_barrier" not in client[db.name + "_other"].list_collection_names()
        assert client[db.name + "_other"].messages.count_documents({}) == 5
    finally:
        client.drop_database(db.name + "_other")
