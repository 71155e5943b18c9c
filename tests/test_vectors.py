"""Vectors: the binData form, old array vectors, and the complete two-pass exact search.

Pure rules first (encoding, the quantization bound, ``ExactSearch`` against brute force on both
the numpy and the pure-Python path), then every backend: the stored form, old vectors found and
rewritten by ``reindex``, an explicit cap reported, and one mailbox of 6,000 vectors under
``CI=true`` (2,000 by default) searched exactly and written by one ``set_embeddings`` call.
The pure-Python path is forced with the documented switch ``AECS_MONGO_NUMPY=0``, not a mock.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from bson.binary import Binary, BinaryVectorDtype

from aecs_mongo import MessageStore
from aecs_mongo.pure import vectors
from aecs_mongo.pure.documents import build_documents
from aecs_mongo.pure.keys import doc_id, message_key, thread_key
from aecs_mongo.pure.vectors_np import quantize_rows
from aecs_mongo.results import SearchResults

from .helpers.budgets import budget
from .helpers.factories import email

BACKENDS_NUMPY = pytest.mark.parametrize("path", ["numpy", "python"], indirect=True)


@pytest.fixture
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``numpy`` or ``python``: the second sets the documented switch that forces pure Python."""
    chosen: str = request.param
    if chosen == "python":
        monkeypatch.setenv(vectors.NUMPY_SWITCH, "0")
    else:
        monkeypatch.delenv(vectors.NUMPY_SWITCH, raising=False)
    assert (vectors.numpy_backend() is None) == (chosen == "python")
    yield chosen


def f32(values: Sequence[float]) -> list[float]:
    """``values`` as the stored float32 vector holds them."""
    return [float(v) for v in Binary.from_vector(list(values), BinaryVectorDtype.FLOAT32).as_vector().data]


def brute_force(query: Sequence[float], stored: dict[str, list[float]], k: int) -> list[tuple[str, float]]:
    """The exact top k by cosine (ties: smaller key), written out plainly."""
    qn = math.sqrt(sum(a * a for a in query))
    scored = []
    for key, vector in stored.items():
        vn = math.sqrt(sum(b * b for b in vector))
        if vn and len(vector) == len(query):
            scored.append((key, sum(a * b for a, b in zip(query, vector, strict=True)) / (qn * vn)))
    return sorted(scored, key=lambda kv: (-kv[1], kv[0]))[:k]


def clustered(rng: random.Random, count: int, dims: int, clusters: int = 20) -> list[list[float]]:
    centres = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(clusters)]
    return [[c + 0.4 * rng.gauss(0, 1) for c in rng.choice(centres)] for _ in range(count)]


def blocks_of(db: Any, mailbox_id: str = "alice") -> list[dict[str, Any]]:
    """The mailbox's blocks (``vector_blocks`` also holds its block counter, which has no ``ids``)."""
    return [b for b in db.vector_blocks.find({"mailboxId": mailbox_id}) if "ids" in b]


# --- pure: the stored form ----------------------------------------------------------------------------


def test_float32_vectors_are_what_pymongo_writes_and_read_back() -> None:
    values = [0.5, -1.25, 3.0e-3, 1e20]
    encoded = vectors.encode_float32(values)
    assert encoded == Binary.from_vector(values, BinaryVectorDtype.FLOAT32)
    assert encoded.subtype == 9
    assert vectors.decode_vector(encoded) == f32(values)
    assert vectors.decode_vector([1, 2.5]) == [1.0, 2.5]  # an old array vector
    assert vectors.decode_vector(Binary.from_vector([1, 2], BinaryVectorDtype.INT8)) is None
    assert vectors.decode_vector(Binary(b"\x27\x00\x01", 9)) is None  # truncated
    assert vectors.decode_vector("nope") is None


def test_values_float32_cannot_hold_are_refused() -> None:
    for bad in ([math.nan], [math.inf], [1e39]):
        with pytest.raises(ValueError, match="float32"):
            vectors.check_vector(bad)
    with pytest.raises(TypeError):
        vectors.check_vector([True])
    assert vectors.check_vector([3, 1e38]) == [3.0, 1e38]


@pytest.mark.parametrize("dims", [1, 7, 768])
def test_the_int8_bound_holds_and_both_paths_agree(dims: int) -> None:
    rng = random.Random(dims)
    rows = [f32([rng.gauss(0, 1) * rng.choice([1e-3, 1, 50]) for _ in range(dims)]) for _ in range(40)]
    rows.append([0.0] * dims)
    import numpy

    by_numpy = quantize_rows(numpy, rows)
    for row, (q, scale, error), (nq, nscale, nerror) in zip(rows, map(vectors.quantize, rows), by_numpy, strict=True):
        assert q == nq and scale == pytest.approx(nscale, rel=1e-12) and error == pytest.approx(nerror, abs=1e-15)
        assert len(q) == dims
        if not any(row):
            assert scale == 0.0
            continue
        norm = math.sqrt(sum(v * v for v in row))
        ints = memoryview(q).cast("b").tolist()
        assert max(abs(v) for v in ints) == 127
        for _ in range(20):
            u = [rng.gauss(0, 1) for _ in range(dims)]
            un = math.sqrt(sum(v * v for v in u))
            u = [v / un for v in u]
            cos = sum(a * b for a, b in zip(u, row, strict=True)) / norm
            approx = scale * sum(a * b for a, b in zip(u, ints, strict=True))
            assert abs(cos - approx) <= error + 1e-12


# --- pure: the two-pass search -----------------------------------------------------------------------


def run_search(query: list[float], stored: dict[str, list[float]], limit: int, numpy: Any) -> tuple[Any, int]:
    """``ExactSearch`` over documents built as the store builds them; (search, vectors rescored)."""
    docs = {
        d["_id"]: d
        for d in vectors.vector_documents(
            "a", [({"_id": k, "messageKey": k, "threadKey": "t"}, v) for k, v in stored.items()]
        )
    }
    search = vectors.ExactSearch(query, limit, numpy=numpy)
    for _id, d in docs.items():
        search.offer({"_id": _id, **{f: d[f] for f in vectors.first_pass_projection()}})
    rescored = 0
    while wanted := search.wanted():
        assert len(wanted) <= vectors.RESCORE_BATCH
        for _id in wanted:
            search.rescore(_id, docs[_id]["embedding"])
        rescored += len(wanted)
        search.asked(wanted)
    return search, rescored


@BACKENDS_NUMPY
@pytest.mark.parametrize("kind", ["random", "clustered"])
def test_two_passes_give_the_exact_top_k(path: str, kind: str) -> None:
    rng = random.Random(kind)
    count, dims = 3000, 96
    rows = (
        clustered(rng, count, dims)
        if kind == "clustered"
        else [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(count)]
    )
    stored = {f"k{i:05d}": f32(v) for i, v in enumerate(rows)}
    numpy = vectors.numpy_backend()
    for limit in (1, 10, 250):
        query = [rng.gauss(0, 1) for _ in range(dims)] if limit != 1 else stored["k00007"]
        search, rescored = run_search(query, stored, limit, numpy)
        expected = brute_force(query, stored, limit)
        got = search.results()
        assert [h["_id"] for h in got] == [k for k, _ in expected]
        assert [h["score"] for h in got] == pytest.approx([(1 + c) / 2 for _, c in expected], abs=1e-12)
        assert search.examined == count
        if limit == 10:
            assert rescored < count / 5  # the first pass did prune: most float32 vectors were never read


@BACKENDS_NUMPY
def test_old_array_vectors_zero_vectors_and_other_lengths(path: str) -> None:
    rng = random.Random(5)
    new = {f"n{i}": f32([rng.gauss(0, 1) for _ in range(8)]) for i in range(30)}
    docs = vectors.vector_documents("a", [({"_id": k, "messageKey": k, "threadKey": "t"}, v) for k, v in new.items()])
    old = {f"o{i}": [rng.gauss(0, 1) for _ in range(8)] for i in range(5)}
    zero = vectors.vector_document("a", {"_id": "z", "messageKey": "z", "threadKey": "t"}, [0.0] * 8)
    other = vectors.vector_document("a", {"_id": "w", "messageKey": "w", "threadKey": "t"}, [1.0] * 9)
    query = old["o3"]
    search = vectors.ExactSearch(query, 6, numpy=vectors.numpy_backend())
    embeddings: dict[str, Any] = {d["_id"]: d["embedding"] for d in [*docs, zero, other]}
    embeddings.update(old)
    for d in [*docs, zero, other]:
        search.offer({"_id": d["_id"], **{f: d[f] for f in vectors.first_pass_projection()}})
    for _id in old:
        search.offer({"_id": _id})  # an old document has no quantized copy
    while wanted := search.wanted():
        for _id in wanted:
            search.rescore(_id, embeddings[_id])
        search.asked(wanted)
    assert [h["_id"] for h in search.results()] == [k for k, _ in brute_force(query, {**new, **old}, 6)]
    assert search.results()[0]["_id"] == "o3"
    assert search.examined == 37 and search.skipped == 2  # the zero vector and the 9-dimensional one


def as_docs(stored: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """The ``vectors`` documents of ``stored`` (``_id`` -> vector), as the store writes them."""
    pairs = [({"_id": k, "messageKey": k, "threadKey": "t"}, v) for k, v in stored.items()]
    return {d["_id"]: d for d in vectors.vector_documents("a", pairs)}


def sealed(seq: int, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The block a sealing of ``docs`` writes."""
    (entries,) = vectors.plan_blocks(docs, partial=True)
    return vectors.block_document("a", seq, entries)


@BACKENDS_NUMPY
def test_blocks_the_newest_copy_wins_and_a_malformed_block_is_read_one_by_one(path: str) -> None:
    rng = random.Random(31)
    dims = 12
    current = {f"k{i:03d}": f32([rng.gauss(0, 1) for _ in range(dims)]) for i in range(400)}
    stale = {k: f32([rng.gauss(0, 1) for _ in range(dims)]) for k in list(current)[:40]}
    docs, old_docs = as_docs(current), as_docs(stale)
    rewritten = [f"k{i:03d}" for i in range(280, 300)]  # sealed in block 2, then written again
    at_seal = {**current, **{k: f32([rng.gauss(0, 1) for _ in range(dims)]) for k in rewritten}}
    blocks = [
        sealed(1, list(old_docs.values())),  # the first copies of k000..k039, replaced since
        sealed(2, [as_docs(at_seal)[f"k{i:03d}"] for i in range(300)]),
        {**sealed(3, [docs[f"k{i:03d}"] for i in range(250, 260)]), "scales": Binary(b"bad")},
    ]
    unsealed = [docs[k] for k in [*rewritten, *(f"k{i:03d}" for i in range(300, 400))]]
    for limit, query in ((10, current["k005"]), (25, [rng.gauss(0, 1) for _ in range(dims)])):
        search = vectors.ExactSearch(query, limit, numpy=vectors.numpy_backend())
        for d in unsealed:  # the order of the store's first pass: unsealed, then blocks newest first
            search.offer({"_id": d["_id"], **{f: d[f] for f in vectors.first_pass_projection()}})
        for block in reversed(blocks):
            search.offer_block(block)
        while wanted := search.wanted():
            for _id in wanted:
                search.rescore(_id, docs[_id]["embedding"])
            search.asked(wanted)
        assert [h["_id"] for h in search.results()] == [k for k, _ in brute_force(query, current, limit)]
        assert search.examined == 400 and search.skipped == 0
    assert vectors.block_rows(blocks[2]) is None  # the malformed block's ten were read one by one


def test_blocks_hold_one_length_and_respect_the_size_limit() -> None:
    docs = [*as_docs({f"a{i}": [1.0, float(i)] for i in range(5)}).values()]
    docs += [*as_docs({f"b{i}": [1.0, 2.0, float(i)] for i in range(3)}).values()]
    docs.append({"_id": "old", "embedding": [1.0, 2.0]})  # no quantized copy: not sealable
    assert [[e[0] for e in b] for b in vectors.plan_blocks(docs, partial=True)] == [
        ["a0", "a1", "a2", "a3", "a4"],
        ["b0", "b1", "b2"],
    ]
    assert vectors.plan_blocks(docs) == []  # neither is a full block yet
    assert vectors.per_block(768) == vectors.BLOCK_VECTORS
    assert vectors.per_block(8192) * 8192 <= vectors.BLOCK_BYTES < (vectors.per_block(8192) + 1) * 8192
    assert vectors.block_id("a:b", 7) != vectors.block_id("a", 7) and vectors.block_id("a", 7).endswith(":000000000007")


# --- every backend ---------------------------------------------------------------------------------


@pytest.mark.server
def test_vectors_are_stored_as_binData_and_replace_old_arrays(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store()
    store.store_many([email(1), email(2)])
    _id = doc_id("alice", message_key("m1@example.com"))
    db.vectors.insert_one(
        {
            "_id": _id,
            "mailboxId": "alice",
            "messageKey": message_key("m1@example.com"),
            "threadKey": "x",
            "embedding": [1.0, 2.0],
        }
    )
    store.set_embedding("m1@example.com", [0.1, -2, 3.5])  # the next set_embedding rewrites an old one
    stored = db.vectors.find_one({"_id": _id})
    assert isinstance(stored["embedding"], Binary) and stored["embedding"].subtype == 9
    vector = stored["embedding"].as_vector()
    assert vector.dtype == BinaryVectorDtype.FLOAT32 and vector.data == f32([0.1, -2, 3.5])
    assert stored["int8"].as_vector().dtype == BinaryVectorDtype.INT8
    assert stored["int8"].as_vector().data == [4, -73, 127]  # round(x / 3.5 * 127)
    assert stored["threadKey"] == thread_key("root@example.com")
    with pytest.raises(ValueError, match="float32"):
        store.set_embedding("m2@example.com", [1e40])
    assert db.vectors.count_documents({}) == 1  # nothing half-written


@pytest.mark.server
def test_old_array_vectors_are_found_and_rewritten_by_reindex(make_store: Callable[..., Any], db: Any) -> None:
    store = make_store()
    store.store_many([email(i) for i in range(12)])
    rng = random.Random(9)
    stored = {f"m{i}@example.com": [rng.gauss(0, 1) for _ in range(16)] for i in range(12)}
    store.set_embeddings({mid: v for mid, v in stored.items() if int(mid[1:].split("@")[0]) >= 6})
    for i in range(6):  # as the previous release wrote them: a BSON array of doubles
        mkey = message_key(f"m{i}@example.com")
        db.vectors.insert_one(
            {
                "_id": doc_id("alice", mkey),
                "mailboxId": "alice",
                "messageKey": mkey,
                "threadKey": thread_key("root@example.com"),
                "embedding": stored[f"m{i}@example.com"],
            }
        )
    expected = [mid for mid, _ in brute_force(stored["m2@example.com"], stored, 5)]
    before = store.semantic_search(stored["m2@example.com"], limit=5)
    assert [h["messageId"] for h in before] == expected and before.complete and before.examined == 12
    report = store.reindex()
    assert report["vectorsRewritten"] == 6
    assert db.vectors.count_documents({"embedding": {"$type": "array"}}) == 0
    # reindex seals every vector: one block holds the twelve int8 copies, the documents keep float32
    assert report["vectorsSealed"] == 12
    assert all(d["block"] == 1 and "int8" not in d for d in db.vectors.find())
    (block,) = blocks_of(db)
    assert sorted(block["ids"]) == sorted(d["_id"] for d in db.vectors.find()) and block["dims"] == 16
    after = store.semantic_search(stored["m2@example.com"], limit=5)
    assert [h["messageId"] for h in after] == expected
    assert store.reindex()["vectorsRewritten"] == 0


@pytest.mark.server
def test_an_explicit_cap_is_reported(make_store: Callable[..., Any]) -> None:
    uncapped = make_store("capped")  # the default: no cap
    uncapped.store_many([email(i) for i in range(30)])
    uncapped.set_embeddings({f"m{i}@example.com": [1.0, float(i)] for i in range(30)})
    every = uncapped.semantic_search([0.0, 1.0], limit=30)
    assert isinstance(every, SearchResults) and every.engine == "exact"
    assert len(every) == 30 and every.complete and every.examined == 30
    store = make_store("capped", scan_limit=3)  # the store's cap is semantic_search's default too
    by_store = store.semantic_search([0.0, 1.0], limit=30)
    assert len(by_store) == 3 and not by_store.complete and by_store.examined == 3
    capped = store.semantic_search([0.0, 1.0], limit=30, scan_limit=10)
    assert len(capped) == 10 and not capped.complete and capped.examined == 10
    exact_fit = store.semantic_search([0.0, 1.0], limit=5, scan_limit=30)
    assert exact_fit.complete and exact_fit.examined == 30  # nothing was left out
    in_thread = store.semantic_search([0.0, 1.0], limit=5, thread_id="root@example.com", scan_limit=4)
    assert not in_thread.complete and in_thread.examined == 4
    with pytest.raises(ValueError):
        store.semantic_search([0.0, 1.0], scan_limit=0)


@BACKENDS_NUMPY
@pytest.mark.server
def test_both_paths_answer_alike_and_pure_python_says_so_once(
    path: str, make_store: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store()
    store.store_many([email(i, thread=f"t{i % 3}@example.com") for i in range(60)])
    rng = random.Random(11)
    stored = {f"m{i}@example.com": [rng.gauss(0, 1) for _ in range(24)] for i in range(60)}
    store.set_embeddings(stored)
    query = [rng.gauss(0, 1) for _ in range(24)]
    with caplog.at_level(logging.DEBUG, logger="aecs_mongo"):
        hits = store.semantic_search(query, limit=7)
        in_thread = store.semantic_search(query, limit=4, thread_id="t1@example.com")
    assert [h["messageId"] for h in hits] == [
        m for m, _ in brute_force(query, {k: f32(v) for k, v in stored.items()}, 7)
    ]
    members = {k: f32(v) for k, v in stored.items() if int(k[1:].split("@")[0]) % 3 == 1}
    assert [h["messageId"] for h in in_thread] == [m for m, _ in brute_force(query, members, 4)]
    assert in_thread.examined == 20
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "pure Python" in r.getMessage()]
    assert len(warned) == (1 if path == "python" else 0)


def search_ids(store: Any, query: list[float], limit: int) -> tuple[list[str], int]:
    hits = store.semantic_search(query, limit=limit)
    assert hits.complete and hits.engine == "exact"
    return [h["messageId"] for h in hits], hits.examined


@pytest.mark.server
def test_blocks_are_sealed_kept_exact_and_compacted(
    make_store: Callable[..., Any], db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "BLOCK_VECTORS", 50)  # blocks of 50: the same code as 1,000, at this test's size
    store = make_store()
    store.store_many([email(i) for i in range(130)])
    neighbour = make_store("alice:x")  # a mailbox whose ids start with this one's: never mixed in
    neighbour.store_many([email(i) for i in range(3)])
    rng = random.Random(41)
    stored = {f"m{i}@example.com": f32([rng.gauss(0, 1) for _ in range(8)]) for i in range(130)}
    assert store.set_embeddings(stored) == 130
    neighbour.set_embeddings({f"m{i}@example.com": stored["m7@example.com"] for i in range(3)})
    assert len(blocks_of(db, "alice")) == 2  # two full blocks sealed
    assert db.vectors.count_documents({"mailboxId": "alice", "block": None}) == 30
    assert db.vectors.count_documents({"mailboxId": "alice", "int8": {"$exists": True}}) == 30
    expected = [m for m, _ in brute_force(stored["m7@example.com"], stored, 10)]
    assert search_ids(store, stored["m7@example.com"], 10) == (expected, 130)
    for cap, complete in ((100, False), (30, False), (130, True)):  # a cap inside a block, at its edge, all
        capped = store.semantic_search(stored["m7@example.com"], limit=10, scan_limit=cap)
        assert (capped.examined, capped.complete) == (cap, complete)

    for i in range(10):  # sealed vectors written again, and sealed messages deleted
        stored[f"m{i}@example.com"] = f32([rng.gauss(0, 1) for _ in range(8)])
        store.set_embedding(f"m{i}@example.com", stored[f"m{i}@example.com"])
    for i in range(10, 15):
        assert store.delete(f"m{i}@example.com")
        del stored[f"m{i}@example.com"]
    for query in (stored["m3@example.com"], [rng.gauss(0, 1) for _ in range(8)]):
        assert search_ids(store, query, 10) == ([m for m, _ in brute_force(query, stored, 10)], 125)

    report = store.reindex()
    assert report["vectorEntriesDropped"] == 15 and report["vectorsSealed"] == 40
    assert db.vectors.count_documents({"mailboxId": "alice", "block": None}) == 0
    entries = sum(b["count"] for b in blocks_of(db, "alice"))
    assert entries == 125 == db.vectors.count_documents({"mailboxId": "alice"})
    query = stored["m3@example.com"]
    assert search_ids(store, query, 10) == ([m for m, _ in brute_force(query, stored, 10)], 125)
    assert store.reindex()["vectorEntriesDropped"] == 0

    store.erase_mailbox()
    assert db.vector_blocks.count_documents({"mailboxId": "alice"}) == 0
    assert db.vector_blocks.count_documents({}) == 0  # the neighbour never had a full block (nor a counter)
    assert search_ids(neighbour, stored["m3@example.com"], 5)[1] == 3


@pytest.mark.server
def test_a_vector_written_while_a_block_is_sealed_stays_unsealed(make_store: Callable[..., Any], db: Any) -> None:
    from aecs_mongo.pure.settings import Capabilities, StoreSettings
    from aecs_mongo.synchronous import embeddings as vectors_sync
    from aecs_mongo.synchronous.context import StoreContext

    store = make_store()
    store.store_many([email(i) for i in range(20)])
    rng = random.Random(43)
    stored = {f"m{i}@example.com": f32([rng.gauss(0, 1) for _ in range(6)]) for i in range(20)}
    store.set_embeddings(stored)
    # a sealer reads the unsealed vectors ...
    rows = list(db.vectors.find(vectors.unsealed_selector("alice"), vectors.seal_projection()))
    # ... a writer replaces one of them ...
    stored["m4@example.com"] = f32([rng.gauss(0, 1) for _ in range(6)])
    store.set_embedding("m4@example.com", stored["m4@example.com"])
    # ... and the sealer goes on with what it read: the replaced vector is left out, and unsealed
    (entries,) = vectors.plan_blocks(rows, partial=True)
    sealer = StoreContext(db, StoreSettings.checked("alice"), Capabilities())
    assert vectors_sync._seal_block(sealer, entries) == 19
    rewritten = db.vectors.find_one({"_id": doc_id("alice", message_key("m4@example.com"))})
    assert "block" not in rewritten and "int8" in rewritten
    (block,) = blocks_of(db)
    assert len(block["ids"]) == 19 and rewritten["_id"] not in block["ids"]
    query = stored["m4@example.com"]
    assert search_ids(store, query, 5) == ([m for m, _ in brute_force(query, stored, 5)], 20)


@pytest.mark.server
def test_expire_drops_the_block_entries_of_expired_vectors(
    make_store: Callable[..., Any], db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    from .helpers.factories import BASE_TS

    monkeypatch.setattr(vectors, "BLOCK_VECTORS", 20)
    store = make_store()
    store.store_many([email(i) for i in range(50)])  # m<i> is BASE_TS + 60 i
    rng = random.Random(53)
    stored = {f"m{i}@example.com": f32([rng.gauss(0, 1) for _ in range(6)]) for i in range(50)}
    store.set_embeddings(stored)
    expired = {doc_id("alice", message_key(f"m{i}@example.com")) for i in range(25)}
    blocks = blocks_of(db)
    assert len(blocks) == 2  # 40 sealed, 10 not
    emptied = sum(set(b["ids"]) <= expired for b in blocks)
    report = store.expire(dt.datetime.fromtimestamp(BASE_TS + 25 * 60, dt.UTC))  # m0..m24 go
    assert report.removed["vectors"] == 25 and report.removed.get("vector_blocks", 0) == emptied
    left = blocks_of(db)
    assert len(left) == 2 - emptied
    for block in left:  # every entry left is a live vector sealed in that block
        assert sorted(block["ids"]) == sorted(d["_id"] for d in db.vectors.find({"block": block["seq"]}))
        assert not expired & set(block["ids"])
    assert sum(len(b["ids"]) for b in left) == 40 - len(expired & {i for b in blocks for i in b["ids"]})
    kept = {k: v for k, v in stored.items() if int(k[1:].split("@")[0]) >= 25}
    query = stored["m30@example.com"]
    assert search_ids(store, query, 5) == ([m for m, _ in brute_force(query, kept, 5)], 25)


@pytest.mark.server
def test_a_seal_cut_short_loses_nothing(db: Any, failpoints: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pymongo.errors import PyMongoError

    from .helpers.failpoints import failpoint

    monkeypatch.setattr(vectors, "BLOCK_VECTORS", 20)
    store = MessageStore(db, mailbox_id="alice")
    store.ensure_indexes()
    store.store_many([email(i) for i in range(45)])
    rng = random.Random(47)
    stored = {f"m{i}@example.com": f32([rng.gauss(0, 1) for _ in range(6)]) for i in range(45)}
    # update commands: the vectors' bulk write, the new block counter, the block's fill, then the
    # marks of its vectors: that one fails
    failpoint(failpoints, mode={"skip": 3, "times": 1}, data={"failCommands": ["update"], "errorCode": 2})
    with pytest.raises(PyMongoError):
        store.set_embeddings(stored)
    (block,) = blocks_of(db)
    assert len(block["ids"]) == 20  # filled, but none of its vectors marked: they are still unsealed
    assert db.vectors.count_documents({"block": None}) == 45
    query = stored["m9@example.com"]
    assert search_ids(store, query, 10) == ([m for m, _ in brute_force(query, stored, 10)], 45)
    report = store.reindex()  # seals them again (newer blocks win), then drops the first block
    assert report["vectorsSealed"] == 45 and report["vectorEntriesDropped"] == 20
    assert search_ids(store, query, 10) == ([m for m, _ in brute_force(query, stored, 10)], 45)
    assert db.vector_blocks.count_documents({"_id": block["_id"]}) == 0
    # block numbers only grow, whatever was removed: the newest block is still the highest seq
    assert min(b["seq"] for b in blocks_of(db)) > block["seq"]
    assert db.vector_blocks.find_one({"_id": vectors.counter_id("alice")})["next"] == max(
        b["seq"] for b in blocks_of(db)
    )


# --- 6,000 vectors in one mailbox (2,000 by default; 6,000 under CI=true) ------------------------------

BIG = budget("AECS_VECTOR_MESSAGES", big=6_000, small=2_000)


@pytest.mark.server  # mongomock's updates scan the collection: minutes at this size, and nothing more to learn
@pytest.mark.ci_every_server
def test_exact_search_over_a_big_mailbox(db: Any, backend: str) -> None:
    store = MessageStore(db, mailbox_id="big")
    store.ensure_indexes()
    # the messages are built by the store's own builder and inserted by the driver: storing them
    # through store_many is not under test here and costs minutes on the test server
    built = [build_documents(email(i, thread=f"t{i % 100}@example.com"), mailbox_id="big") for i in range(BIG)]
    for start in range(0, BIG, 1000):
        db.messages.insert_many([d.message for d in built[start : start + 1000]])
    db.messages.insert_one(build_documents(email(0), mailbox_id="other").message)  # another mailbox, same ids
    rng = random.Random(24)
    rows = clustered(rng, BIG, 48, clusters=50)
    stored = {f"m{i}@example.com": row for i, row in enumerate(rows)}
    assert store.set_embeddings(stored) == BIG  # one call, written in bounded batches
    assert db.vectors.count_documents({"mailboxId": "big"}) == BIG
    # sealed as they were written: a full block per thousand, fewer than a thousand left unsealed
    assert len(blocks_of(db, "big")) == BIG // vectors.BLOCK_VECTORS
    assert db.vectors.count_documents(vectors.unsealed_selector("big")) == BIG % vectors.BLOCK_VECTORS
    exact = {k: f32(v) for k, v in stored.items()}
    oldest = store.semantic_search(stored["m0@example.com"], limit=10)
    assert oldest[0]["messageId"] == "m0@example.com" and oldest[0]["score"] == pytest.approx(1.0)
    assert [h["messageId"] for h in oldest] == [m for m, _ in brute_force(exact["m0@example.com"], exact, 10)]
    assert oldest.complete and oldest.examined == BIG and oldest.engine == "exact"
    query = [rng.gauss(0, 1) for _ in range(48)]
    hits = store.semantic_search(query, limit=10)
    assert [h["messageId"] for h in hits] == [m for m, _ in brute_force(query, exact, 10)]
    members = {k: v for k, v in exact.items() if int(k[1:].split("@")[0]) % 100 == 37}
    in_thread = store.semantic_search(query, limit=5, thread_id="t37@example.com")
    assert [h["messageId"] for h in in_thread] == [m for m, _ in brute_force(query, members, 5)]
    assert in_thread.examined == len(members)


def test_a_vector_deleted_between_the_passes_is_no_result() -> None:
    rng = random.Random(7)
    stored = {f"k{i:03d}": f32([rng.gauss(0, 1) for _ in range(12)]) for i in range(300)}
    docs = {
        d["_id"]: d
        for d in vectors.vector_documents(
            "a", [({"_id": k, "messageKey": k, "threadKey": "t"}, v) for k, v in stored.items()]
        )
    }
    query = stored["k042"]
    search = vectors.ExactSearch(query, 5, numpy=vectors.numpy_backend())
    for _id, d in docs.items():
        search.offer({"_id": _id, **{f: d[f] for f in vectors.first_pass_projection()}})
    deleted = "k042"  # the best match, gone (a concurrent delete) before its float32 vector is read
    while wanted := search.wanted():
        for _id in wanted:
            if _id != deleted:
                search.rescore(_id, docs[_id]["embedding"])
        search.asked(wanted)
    remaining = {k: v for k, v in stored.items() if k != deleted}
    assert [h["_id"] for h in search.results()] == [k for k, _ in brute_force(query, remaining, 5)]
