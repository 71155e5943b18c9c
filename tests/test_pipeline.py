"""The ingest pipeline's stages (``asynchronous/pipeline.py``) and its pure rules (``pure/pipeline.py``):
which blobs a batch puts ahead, and that a batch puts them only once every batch before it
has its blobs named. The end state of the whole pipeline is tested against storing one by one
in ``test_batches.py``, ``test_store.py`` and ``test_parse_workers.py``."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from aecs_mongo.pure.documents import Blob, MessageDocuments
from aecs_mongo.pure.pipeline import NamingOrder, blob_items
from aecs_mongo.synchronous.pipeline import Batch, Blobs


def docs(_id: str, *names: str, data: bytes = b"x") -> MessageDocuments:
    blobs = tuple(Blob(f"aecs/box/{_id}/{name}", data + name.encode(), "application/octet-stream") for name in names)
    return MessageDocuments(_id, _id, "t", "t", blobs, {"_id": _id}, {"_id": _id})


def test_blob_items_are_the_first_copy_of_each_message_with_raw_bytes() -> None:
    first = docs("k1", "raw.eml", "att.0")
    later = docs("k1", "raw.eml", "body.html", data=b"y")  # another copy: other parts
    no_raw = docs("k2", "att.0")
    assert blob_items([first, later, no_raw]) == [(b.key, b.data) for b in first.blobs]


def test_a_batch_may_put_ahead_only_once_every_batch_before_it_is_named() -> None:
    order = NamingOrder()
    order.unnamed(1)
    order.unnamed(2)
    assert not order.may_put(3)
    order.named(1)
    assert not order.may_put(3)
    assert order.may_put(1)  # a batch never waits for itself or a later one
    order.named(2)
    assert order.may_put(3)


class Stager:
    def __init__(self) -> None:
        self.staged: list[list[tuple[str, bytes]]] = []
        self.unstaged: list[list[tuple[str, bytes]]] = []

    def stage(self, items: list[tuple[str, bytes]]) -> None:
        self.staged.append(items)

    def unstage(self, items: list[tuple[str, bytes]]) -> None:
        self.unstaged.append(items)


def blobs_stage(stager: Stager) -> Blobs:
    ctx: Any = SimpleNamespace(blobs=SimpleNamespace(stager=lambda: stager), settings=SimpleNamespace(durable=True))
    return Blobs(ctx)


def test_the_blobs_stage_puts_a_batch_ahead_after_the_batches_before_it_are_written() -> None:
    stager = Stager()
    stage = blobs_stage(stager)
    one, two = (Batch(n, [docs(f"m{n}", "raw.eml")], []) for n in (1, 2))
    assert stage.start(one) is one and one.put is None  # nothing is put before a batch was written
    assert stage.start(two) is two and two.put is None
    stage.written(one)
    three = Batch(3, [docs("m3", "raw.eml")], [])
    stage.start(three)
    assert three.put is not None and three.ahead == blob_items(three.messages)
    waited = threading.Event()
    three.put.add_done_callback(lambda _: waited.set())
    assert not waited.wait(0.2)  # batch 2 is not written yet: its blobs take their names first
    stage.written(two)
    assert waited.wait(5)
    stage.ready(three)
    assert stager.staged == [three.ahead]
    stage.written(three)
    assert stager.unstaged[-1] == three.ahead
    stage.close()


def test_closing_the_blobs_stage_drops_a_waiting_put_and_forgets_what_was_put_ahead() -> None:
    stager = Stager()
    stage = blobs_stage(stager)
    one, two = (Batch(n, [docs(f"m{n}", "raw.eml")], []) for n in (1, 2))
    stage.start(one)
    stage.start(two)
    stage.written(one)
    three = Batch(3, [docs("m3", "raw.eml")], [])
    stage.start(three)  # waits for batch 2, which is never written
    stage.close()
    assert three.put is not None and three.put.done()
    assert stager.staged == []
    assert [items for items in stager.unstaged if items] == [three.ahead]
