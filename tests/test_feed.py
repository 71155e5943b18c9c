"""Workers: the feed of newly stored mail, ``embed_new``, exact ``semantic_search``.

The feed needs change streams, so its tests run on the replica-set backend (and ``uri`` when it
names a replica set) and skip with that reason elsewhere; the error a server without change
streams gives is tested on exactly those. Crashes are real: child processes killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore, ServerFeatureError
from aecs_mongo.asynchronous.workers import embed_new as async_embed_new
from aecs_mongo.pure import feed as feed_rules
from aecs_mongo.pure.keys import doc_id, message_key
from aecs_mongo.pure.vectors import NearestVectors, check_query_vector, cosine
from aecs_mongo.synchronous.workers import embed_new

from .helpers.factories import BASE_TS, email
from .helpers.feed_workers import text_vector

ROOT = Path(__file__).resolve().parents[1]


# --- pure rules ------------------------------------------------------------------------------------


def test_consumer_names_are_checked() -> None:
    assert feed_rules.check_consumer("embedder-1.v2@host_x") == "embedder-1.v2@host_x"
    for bad in ("", "a:b", "a b", "x" * 129, "$where"):
        with pytest.raises(ValueError):
            feed_rules.check_consumer(bad)
    with pytest.raises(TypeError):
        feed_rules.check_consumer(7)
    with pytest.raises(ValueError):
        feed_rules.check_since("yesterday")


def test_the_stream_pipeline_keeps_one_mailbox_and_inserts() -> None:
    pipeline = feed_rules.stream_pipeline("alice")
    assert pipeline[0] == {"$match": {"operationType": "insert", "fullDocument.mailboxId": "alice"}}
    kept = set(pipeline[1]["$project"])
    assert "fullDocument.forAI" in kept and "fullDocument.messageId" in kept
    assert "_id" not in kept  # the resume token must survive the projection


def test_backfill_filter_continues_strictly_after_the_position() -> None:
    assert feed_rules.backfill_filter("a", None) == {"mailboxId": "a"}
    after = feed_rules.backfill_filter("a", [10, "k"])
    assert after == {"mailboxId": "a", "ts": {"$gte": 10}, "$or": [{"ts": {"$gt": 10}}, {"messageKey": {"$gt": "k"}}]}


def test_a_record_from_a_message_document() -> None:
    item = feed_rules.feed_item(
        {"messageId": "m@x", "threadId": "t@x", "ts": 5, "subject": "Hi", "from": {"email": "b@x"}, "forAI": "hi"}
    )
    assert item.as_dict() == {
        "messageId": "m@x",
        "threadId": "t@x",
        "ts": 5,
        "subject": "Hi",
        "sender": "b@x",
        "forAI": "hi",
        "kind": "stored",
        "tags": [],
        "folders": [],
    }
    tagged = feed_rules.feed_item({"messageId": "m", "threadId": "t", "ts": 1, "tags": ["b", "a"]}, "tags")
    assert tagged.kind == "tags" and tagged.tags == ("a", "b")
    assert feed_rules.feed_item({"messageId": "m", "threadId": "t", "ts": 1, "from": None}).sender is None


def test_what_an_embedding_function_returns_is_checked() -> None:
    assert feed_rules.check_vectors([[1, 2.5]], 1) == [[1.0, 2.5]]
    with pytest.raises(ValueError, match="2 vectors for 1 texts"):
        feed_rules.check_vectors([[1.0], [2.0]], 1)
    with pytest.raises(TypeError):
        feed_rules.check_vectors("nope", 1)
    with pytest.raises(TypeError):
        feed_rules.check_vectors([["1"]], 1)


def brute_force(query: list[float], vectors: dict[str, list[float]], k: int) -> list[tuple[str, float]]:
    """The test's own cosine top k: plain loops, sorted by similarity, then by key."""
    scored = []
    for key, vector in vectors.items():
        dot = sum(a * b for a, b in zip(query, vector, strict=True))
        norm = math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector))
        scored.append((key, dot / norm))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored[:k]


def test_nearest_vectors_keeps_the_brute_force_top_k() -> None:
    rng = random.Random(16)
    vectors = {f"k{i:03d}": [rng.uniform(-1, 1) for _ in range(8)] for i in range(300)}
    query = [rng.uniform(-1, 1) for _ in range(8)]
    nearest = NearestVectors(query, 7)
    for key, vector in reversed(vectors.items()):
        nearest.offer(key, vector)
    nearest.offer("wrong-length", [1.0, 2.0])
    nearest.offer("zero", [0.0] * 8)
    expected = brute_force(query, vectors, 7)
    assert [r["_id"] for r in nearest.results()] == [key for key, _ in expected]
    assert [r["score"] for r in nearest.results()] == pytest.approx([(1 + c) / 2 for _, c in expected])
    assert nearest.skipped == 2 and nearest.examined == 302


def test_equal_similarities_rank_by_id() -> None:
    nearest = NearestVectors([1.0, 0.0], 2)
    for key in ("c", "a", "b"):
        nearest.offer(key, [2.0, 0.0])
    assert [r["_id"] for r in nearest.results()] == ["a", "b"]
    assert cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    with pytest.raises(ValueError):
        check_query_vector([0.0, 0.0])
    with pytest.raises(TypeError):
        check_query_vector(["x"])


# --- semantic_search without Atlas: every backend, every store flavor ------------------------------


@pytest.mark.server
def test_exact_semantic_search_matches_brute_force(make_store: Callable[..., Any]) -> None:
    store = make_store()
    rng = random.Random(1)
    messages = [email(i, thread=f"t{i % 4}@example.com") for i in range(40)]
    store.store_many(messages)
    vectors: dict[str, list[float]] = {}
    for i in range(40):
        vector = [rng.uniform(-1, 1) for _ in range(6)]
        vectors[f"m{i}@example.com"] = vector
        store.set_embedding(f"m{i}@example.com", vector)
    query = [rng.uniform(-1, 1) for _ in range(6)]
    hits = store.semantic_search(query, limit=5)
    in_thread = store.semantic_search(query, limit=3, thread_id="t2@example.com")
    expected = brute_force(query, vectors, 5)
    assert [h["messageId"] for h in hits] == [mid for mid, _ in expected]
    assert [h["score"] for h in hits] == pytest.approx([(1 + c) / 2 for _, c in expected])
    assert set(hits[0]) == {"messageId", "subject", "ts", "score"}  # the Atlas path's shape
    assert hits.complete and hits.examined == 40 and hits.engine == "exact"  # every vector considered
    thread_vectors = {mid: v for mid, v in vectors.items() if int(mid[1:].split("@")[0]) % 4 == 2}
    assert [h["messageId"] for h in in_thread] == [mid for mid, _ in brute_force(query, thread_vectors, 3)]
    assert in_thread.examined == 10


@pytest.mark.server
def test_exact_semantic_search_is_bounded_only_by_an_explicit_cap(make_store: Callable[..., Any]) -> None:
    store = make_store("bounded")  # no cap by default
    store.store_many([email(i) for i in range(30)])
    for i in range(30):
        store.set_embedding(f"m{i}@example.com", [1.0, float(i)])
    assert len(store.semantic_search([0.0, 1.0], limit=30)) == 30
    capped = store.semantic_search([0.0, 1.0], limit=30, scan_limit=10)
    assert len(capped) == 10 and not capped.complete  # only scan_limit vectors were compared, and it says so
    by_store = make_store("bounded", scan_limit=10).semantic_search([0.0, 1.0], limit=30)
    assert len(by_store) == 10 and not by_store.complete  # the store's explicit cap, reported the same way


@pytest.mark.server
def test_set_embeddings_writes_what_set_embedding_writes(db: Any) -> None:
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many([email(1), email(2)])
    store.set_embedding("m1@example.com", [1, 2.5])
    one = db.vectors.find_one({"_id": doc_id("alice", message_key("m1@example.com"))})
    db.vectors.delete_many({})
    kept = store.set_embeddings({"m1@example.com": [1, 2.5], "<m2@example.com>": [3.0, 4.0], "gone@x": [1.0, 1.0]})
    assert kept == 2  # the message that is not stored is skipped
    again = db.vectors.find_one({"_id": one["_id"]})
    assert again.pop("rev") != one.pop("rev")  # every write has a new rev (what sealing checks)
    assert again == one
    second = db.vectors.find_one({"_id": doc_id("alice", message_key("m2@example.com"))})
    assert second["embedding"].as_vector().data == [3.0, 4.0]
    with pytest.raises(TypeError):
        store.set_embeddings({"m1@example.com": ["x"]})


@pytest.mark.server
def test_vector_engines(db: Any) -> None:
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store(email(1))
    store.set_embedding("m1@example.com", [1.0, 0.0])
    store.vector_engine = "exact"
    assert [h["messageId"] for h in store.semantic_search([1.0, 0.5])] == ["m1@example.com"]
    with pytest.raises(ValueError, match="not all zeros"):
        store.semantic_search([0.0, 0.0])
    store.vector_engine = "nearest"
    with pytest.raises(ValueError, match="vector_engine"):
        store.semantic_search([0.0, 1.0])


# --- the feed: a server without change streams ---------------------------------------------------


@pytest.mark.server
def test_watch_without_change_streams_is_a_clear_error(backend: str, db: Any) -> None:
    if backend != "standalone":
        pytest.skip(f"the {backend} backend has change streams; this checks servers without them")
    store = MessageStore(db, mailbox_id="alice")
    with pytest.raises(ServerFeatureError, match="replica set"), store.watch("w") as feed:
        next(iter(feed))


# --- the feed on a replica set ----------------------------------------------------------------------


@pytest.fixture
def rs(backend: str, client: Any, db: Any, servers: Any) -> tuple[str, Any]:
    """(URI, database) of a server with change streams; a skip with the reason elsewhere."""
    if backend in ("mongomock", "standalone"):
        pytest.skip(f"store.watch needs change streams (a replica set); the {backend} backend has none")
    hello = client.admin.command("hello")
    if not (hello.get("setName") or hello.get("msg") == "isdbgrid"):
        pytest.skip("MONGODB_URI names a standalone server: no change streams")
    return servers.uri(backend), db


def ids(items: Any) -> list[str]:
    return [i.message_id for i in items]


def drain(feed: Any, want: set[str], timeout: float = 30.0) -> list[str]:
    """Batches from ``feed`` until every id in ``want`` was seen (or the timeout)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not want <= set(seen) and time.monotonic() < deadline:
        seen.extend(ids(feed.next_batch(100)))
    return seen


def test_since_now_and_since_beginning(rs: tuple[str, Any]) -> None:
    _, db = rs
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(3)])
    MessageStore(db, mailbox_id="bob").store(email(99))
    with store.watch("new-only", max_await_ms=100) as feed:
        assert feed.next_batch(10) == []  # now: the stored mail is not new
    with store.watch("everything", since="beginning", max_await_ms=100) as feed:
        assert ids(feed.next_batch(10)) == ["m0@example.com", "m1@example.com", "m2@example.com"]
    # no consumer is running: what is stored now is still seen next time (the start was checkpointed)
    store.store_many([email(3), email(4)])
    MessageStore(db, mailbox_id="bob").store(email(98))
    with store.watch("new-only", max_await_ms=100) as feed:
        assert drain(feed, {"m3@example.com", "m4@example.com"}) == ["m3@example.com", "m4@example.com"]
    with store.watch("everything", since="beginning", max_await_ms=100) as feed:
        assert drain(feed, {"m3@example.com", "m4@example.com"}) == ["m3@example.com", "m4@example.com"]
        record = store.get_message("m4@example.com")
    assert record is not None
    checkpoint = db.feed_checkpoints.find_one({"_id": "alice:everything"})
    assert checkpoint["mailboxId"] == "alice" and "stream" in checkpoint["position"]


def test_acknowledgement_rules(rs: tuple[str, Any]) -> None:
    _, db = rs
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(4)])
    # manual: nothing acknowledged, everything again
    with store.watch("manual", since="beginning", auto_ack=False, max_await_ms=100) as feed:
        assert len(feed.next_batch(3)) == 3
    with store.watch("manual", since="beginning", auto_ack=False, max_await_ms=100) as feed:
        assert ids(feed.next_batch(2)) == ["m0@example.com", "m1@example.com"]
        feed.ack()
    with store.watch("manual", auto_ack=False, max_await_ms=100) as feed:
        assert ids(feed.next_batch(10)) == ["m2@example.com", "m3@example.com"]
    # auto: an item counts as handled when the next is asked for, or the block is left normally
    seen = []
    with pytest.raises(RuntimeError), store.watch("auto", since="beginning", max_await_ms=100) as feed:
        for item in feed:
            seen.append(item.message_id)
            if len(seen) == 2:
                raise RuntimeError("the handler failed on m1")
    with store.watch("auto", max_await_ms=100) as feed:
        assert next(iter(feed)).message_id == "m1@example.com"  # the failed one comes again
    with store.watch("auto", max_await_ms=100) as feed:
        assert next(iter(feed)).message_id == "m2@example.com"  # left normally: m1 acknowledged


def test_two_consumers_see_the_same_set(rs: tuple[str, Any]) -> None:
    _, db = rs
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    other = MessageStore(db, mailbox_id="bob")
    store.store_many([email(i) for i in range(10)])
    first = store.watch("first", since="beginning", max_await_ms=100)
    second = store.watch("second", since="beginning", max_await_ms=100)
    seen_first = ids(first.next_batch(6))
    store.store_many([email(i) for i in range(10, 25)])
    other.store_many([email(i) for i in range(100, 105)])
    everything = {f"m{i}@example.com" for i in range(25)}
    seen_first += drain(first, everything - set(seen_first))
    first.close()  # one consumer stopping does not move the other
    seen_second = drain(second, everything)
    second.close()
    assert set(seen_first) == set(seen_second) == everything
    # the first was still reading the stored mail when 15 more came: those may come twice (in
    # the backfill and in the stream), nothing else does; the second started after the writes
    repeated = {m for m in seen_first if seen_first.count(m) > 1}
    assert repeated <= {f"m{i}@example.com" for i in range(10, 25)}
    assert len(seen_second) == 25


def test_backfill_racing_with_writers_sees_every_message(rs: tuple[str, Any]) -> None:
    uri, db = rs
    store = MessageStore(db, mailbox_id="race")
    store.ensure_indexes()
    # 300 messages a minute apart; the writers add 150 with timestamps in between, so many land
    # behind the backfill's position while it reads
    store.store_many([email(i, ts=BASE_TS + i * 60) for i in range(300)], batch_size=100)
    late = [email(1000 + i, ts=BASE_TS + (i * 2) * 60 + 30) for i in range(150)]
    errors: list[BaseException] = []

    def writer(part: list[dict[str, Any]]) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        try:
            writing = MessageStore(client[db.name], mailbox_id="race")
            for start in range(0, len(part), 5):
                writing.store_many(part[start : start + 5])
                time.sleep(0.005)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(late[k::2],)) for k in range(2)]
    for t in threads:
        t.start()
    everything = {f"m{i}@example.com" for i in [*range(300), *range(1000, 1150)]}
    with store.watch("racer", since="beginning", max_await_ms=200) as feed:
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while not everything <= set(seen) and time.monotonic() < deadline:
            seen.extend(ids(feed.next_batch(25)))
            time.sleep(0.01)  # a consumer that takes its time: the backfill overlaps the writes
    for t in threads:
        t.join()
    assert not errors
    assert everything - set(seen) == set()


def _wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path.name}: fewer than {count} lines after {timeout} s")


def _child(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.feed_workers", *argv],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=30)
    assert child.stderr is not None
    child.stderr.close()


def test_a_killed_consumer_restarts_without_losing_anything(rs: tuple[str, Any], tmp_path: Path) -> None:
    uri, db = rs
    store = MessageStore(db, mailbox_id="crash")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(20)])
    out = tmp_path / "seen.txt"
    child = _child("consume", uri, db.name, "crash", "reader", str(out))
    try:
        _wait_for_lines(out, 20)  # the backfill is done; now the stream
        new = [f"m{i}@example.com" for i in range(100, 160)]
        for start in range(0, 30, 3):
            store.store_many([email(i) for i in range(100 + start, 103 + start)])
            time.sleep(0.02)
        _wait_for_lines(out, 35)
        child.send_signal(signal.SIGKILL)  # mid-stream, between any two steps
        child.wait(timeout=30)
        first_run = out.read_text().split()
        for start in range(30, 60, 3):  # stored while no consumer runs
            store.store_many([email(i) for i in range(100 + start, 103 + start)])
        out_again = tmp_path / "seen-again.txt"
        child = _child("consume", uri, db.name, "crash", "reader", str(out_again))
        second_run = _wait_for_lines(out_again, len(set(new) - set(first_run)))
        deadline = time.monotonic() + 30
        while not set(new) <= set(first_run) | set(second_run) and time.monotonic() < deadline:
            time.sleep(0.1)
            second_run = out_again.read_text().split()
    finally:
        _stop(child)
    assert set(new) - set(first_run) - set(second_run) == set()  # nothing lost
    assert len(set(first_run) & set(second_run)) <= 1  # resumed at the checkpoint: at most the unacknowledged one again
    stream_order = [m for m in dict.fromkeys(first_run[20:] + second_run)]
    assert stream_order == new  # commit order


def test_a_killed_embedding_worker_redoes_at_most_its_last_batch(rs: tuple[str, Any], tmp_path: Path) -> None:
    uri, db = rs
    store = MessageStore(db, mailbox_id="embed")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(60)])
    log = tmp_path / "embedded.txt"
    child = _child("embed", uri, db.name, "embed", "embedder", str(log), "8", "0.3")
    try:
        _wait_for_lines(log, 24)  # three batches handed to the function
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        _stop(child)
    before = log.read_text().splitlines()
    assert len(before) < 60
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.feed_workers",
            "embed",
            uri,
            db.name,
            "embed",
            "embedder",
            str(log),
            "8",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    texts = log.read_text().splitlines()
    assert set(texts) == {f"body {i}" for i in range(60)}
    assert len(texts) - 60 <= 8  # at most the batch in hand when it was killed
    for i in (0, 31, 59):
        vector = db.vectors.find_one({"_id": doc_id("embed", message_key(f"m{i}@example.com"))})
        assert vector is not None and vector["embedding"].as_vector().data == text_vector(f"body {i}")
    again = embed_new(store, "embedder", lambda texts: pytest.fail("nothing is new"), max_await_ms=100)
    assert again == 0


def test_embed_new_in_process(rs: tuple[str, Any]) -> None:
    _, db = rs
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    empty = email(7)
    empty["content"]["forAI"] = ""
    store.store_many([*(email(i) for i in range(7)), empty])
    calls: list[int] = []

    def fn(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [text_vector(t) for t in texts]

    assert embed_new(store, "vectors", fn, batch_size=3, max_await_ms=100) == 7
    assert sum(calls) == 7 and max(calls) <= 3
    assert db.vectors.count_documents({"mailboxId": "alice"}) == 7
    store.store(email(8))
    with pytest.raises(ValueError, match="vectors for"):
        embed_new(store, "vectors", lambda texts: [], max_await_ms=100)
    assert embed_new(store, "vectors", fn, max_await_ms=100) == 1  # the failed batch was not acknowledged
    hit = store.semantic_search(text_vector("body 8"), limit=1)
    assert hit[0]["messageId"] == "m8@example.com" and hit[0]["score"] == pytest.approx(1.0)


@pytest.mark.parametrize("driver", ["pymongo_async", "motor"])
def test_the_async_feed_and_embed_new(rs: tuple[str, Any], driver: str) -> None:
    uri, db = rs
    from aecs_mongo import AsyncMessageStore

    MessageStore(db, mailbox_id="alice").store_many([email(i) for i in range(5)])

    async def run() -> tuple[list[str], list[str], int]:
        if driver == "motor":
            from motor.motor_asyncio import AsyncIOMotorClient

            client: Any = AsyncIOMotorClient(uri)
        else:
            from pymongo import AsyncMongoClient

            client = AsyncMongoClient(uri)
        try:
            store = AsyncMessageStore(client[db.name], mailbox_id="alice")
            await store.ensure_indexes()
            first: list[str] = []
            async with store.watch("async", since="beginning", max_await_ms=100) as feed:
                async for item in feed:
                    first.append(item.message_id)
                    if len(first) == 3:
                        break
            await store.store(email(5))
            rest: list[str] = []
            async with store.watch("async", max_await_ms=100) as feed:
                while not {"m3@example.com", "m4@example.com", "m5@example.com"} <= set(rest):
                    rest.extend(i.message_id for i in await feed.next_batch(10))

            async def fn(texts: list[str]) -> list[list[float]]:
                return [text_vector(t) for t in texts]

            embedded = await async_embed_new(store, "async-embed", fn, batch_size=2, max_await_ms=100)
            return first, rest, embedded
        finally:
            closing = client.close()
            if inspect.isawaitable(closing):
                await closing

    first, rest, embedded = asyncio.run(run())
    assert first == ["m0@example.com", "m1@example.com", "m2@example.com"]
    # m5 was stored while the consumer was still reading the stored mail: it may come twice
    assert list(dict.fromkeys(rest)) == ["m3@example.com", "m4@example.com", "m5@example.com"]
    assert len(rest) - len(set(rest)) <= 1
    assert embedded == 6


# --- the command ---------------------------------------------------------------------------------------


class Lines:
    """The lines a child prints, read on a thread so a test can wait for them with a timeout."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.queue.put(line.decode()) for line in stdout], daemon=True).start()

    def take(self, count: int, timeout: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout
        return [self.queue.get(timeout=max(deadline - time.monotonic(), 0.01)) for _ in range(count)]


@pytest.fixture
def watch_cli(rs: tuple[str, Any]) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    uri, db = rs
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "aecs_mongo", "--uri", uri, "--db", db.name, "--mailbox", "cli", "watch", *argv],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Ctrl-C as at a terminal: a suite started in the background (nohup, `&` without job
            # control) passes SIGINT on ignored, and Python then rightly leaves it ignored
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_the_watch_command_lines_up_on_wide_characters(
    rs: tuple[str, Any], watch_cli: Callable[..., subprocess.Popen[bytes]]
) -> None:
    import unicodedata

    _, db = rs
    store = MessageStore(db, mailbox_id="cli")
    store.ensure_indexes()
    senders = ("山田太郎", "Rene\u0301e Dupont", "Bob")
    subjects = ("会議の議題について確認をお願いします", "Cafe\u0301 re\u0301sume\u0301", "Plain")
    for n, (name, subject) in enumerate(zip(senders, subjects, strict=True)):
        message = email(n, subject=subject)
        message["metadata"]["from"]["name"] = name
        store.store(message)
    proc = watch_cli("--since", "beginning", "--consumer", "wide")
    lines = Lines(proc).take(3)
    proc.send_signal(signal.SIGTERM)

    def cells(text: str) -> int:
        return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

    # the Message-ID column starts at the same terminal cell whatever the script of the columns before
    assert len({cells(line[: line.rindex("<")]) for line in lines}) == 1, lines


def test_the_watch_command(rs: tuple[str, Any], watch_cli: Callable[..., subprocess.Popen[bytes]]) -> None:
    import json

    _, db = rs
    store = MessageStore(db, mailbox_id="cli")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(3)])
    proc = watch_cli("--json", "--since", "beginning", "--consumer", "tail")
    lines = Lines(proc)
    first = [json.loads(line) for line in lines.take(3)]
    assert [r["messageId"] for r in first] == ["m0@example.com", "m1@example.com", "m2@example.com"]
    assert set(first[0]) == {"messageId", "threadId", "ts", "subject", "sender", "forAI", "kind", "tags", "folders"}
    store.store(email(3))
    assert json.loads(lines.take(1)[0])["messageId"] == "m3@example.com"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert b"interrupted" in err and b"Traceback" not in err
    # stored while nobody watches; the next run continues where the first stopped
    store.store_many([email(4), email(5)])
    proc = watch_cli("--consumer", "tail")
    lines = Lines(proc)
    text = lines.take(2)
    if "<m3@example.com>" in text[0]:
        # the interrupt can come between printing m3 and checkpointing it: then m3 comes again
        text = [*text[1:], *lines.take(1)]
    assert [re.search(r"<(.+)>", line).group(1) for line in text] == ["m4@example.com", "m5@example.com"]  # type: ignore[union-attr]
    assert "bob@example.com" in text[0]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert lines.queue.empty(), list(lines.queue.queue)  # what more was printed, if anything


# --- the README example -----------------------------------------------------------------------------


def test_the_readme_worker_example_runs_as_written(tmp_path: Path) -> None:
    from aecs_mongo.embedded.server import embedded_available

    if not embedded_available():
        pytest.skip("the embedded server is not installed")
    example = (ROOT / "samples" / "embedding_worker.py").read_text()
    readme = (ROOT / "README.md").read_text()
    if "## Workers" in readme:  # once the section is in the README, it must show this very file
        assert example.strip() in readme
    script = tmp_path / "worker.py"
    script.write_text(example)
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode().splitlines()
    assert out[0] == "embedded 3 messages"
    assert "lunch" in out[1].lower()  # the nearest message to the question is the lunch one
