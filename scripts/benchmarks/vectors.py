"""The ``vectors`` section: at 10k and 100k vectors of 768 dimensions (``--vector-sizes``,
``--vector-dims``) in one mailbox of generated mail, clustered and random vectors: bytes per
stored vector (BSON array of doubles, as earlier releases stored it, vs the binData float32
document plus its share of the block that holds its int8 copy), the documents a first pass
reads, ``set_embeddings`` vectors/s, ``semantic_search`` median latency (limit 10) with numpy and
in pure Python, vs the one-pass exact search written by hand (PyMongo reads every float32
vector, numpy ranks them), and recall@10 of our two-pass search against exact float search.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from aecs_mongo import MessageStore
from aecs_mongo.pure import vectors
from aecs_mongo.pure.keys import doc_id, message_key
from benchmarks.common import Context, Doc, populate, table_of, timed


def vector_rows(kind: str, count: int, dims: int, seed: int) -> Any:
    """``count`` float32 vectors: ``random`` (Gaussian) or ``clustered`` (200 centres, noise 0.5)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((count, dims), dtype=np.float32)
    centres = rng.standard_normal((200, dims), dtype=np.float32)
    return centres[rng.integers(0, 200, count)] + 0.5 * rng.standard_normal((count, dims), dtype=np.float32)


def bench_vectors(client: MongoClient[Doc], size: int, dims: int, rounds: int, pure_rounds: int) -> list[Doc]:
    """Storage, write speed, latency and recall@10 of the exact vector search at one mailbox size."""
    import bson
    import numpy as np

    db = client[f"bench_vectors_{size}"]
    client.drop_database(db.name)
    populate(db, "owner", size)
    store = MessageStore(db, mailbox_id="owner")
    store.ensure_indexes()
    ids = [f"m{n}@bench.example" for n in range(size)]
    rows: list[Doc] = []
    for kind in ("clustered", "random"):
        data = vector_rows(kind, size, dims, seed=size + len(kind))
        db.vectors.delete_many({})  # each kind is written into an empty vector store
        db.vector_blocks.delete_many({})
        written = 0.0
        for start in range(0, size, 10_000):
            chunk = {ids[n]: data[n].tolist() for n in range(start, min(start + 10_000, size))}
            written += timed(lambda chunk=chunk: store.set_embeddings(chunk))
        sample = db.vectors.find_one({"_id": doc_id(store.mailbox_id, message_key(ids[0]))})
        assert sample is not None
        legacy = {k: sample[k] for k in ("_id", "mailboxId", "messageKey", "threadKey")}
        legacy["embedding"] = [float(v) for v in data[0]]
        float32_only = {k: v for k, v in sample.items() if not k.startswith("int8")}
        blocks = [b for b in db.vector_blocks.find({"mailboxId": "owner"}) if "ids" in b]  # not the counter
        in_blocks = sum(b["count"] for b in blocks)
        block_share = sum(len(bson.encode(b)) for b in blocks) / in_blocks if in_blocks else 0.0
        unsealed = db.vectors.count_documents(vectors.unsealed_selector("owner"))
        stored_bytes = len(bson.encode(float32_only)) + block_share if "block" in sample else len(bson.encode(sample))
        rng = np.random.default_rng(size)
        near = [data[i] + 0.1 * rng.standard_normal(dims, dtype=np.float32) for i in rng.integers(0, size, rounds)]
        queries = near if kind == "clustered" else list(rng.standard_normal((rounds, dims), dtype=np.float32))
        unit = data.astype(np.float64)
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        ours_ms, hand_ms, recall = [], [], []
        for q in queries:
            query = q.tolist()
            start = time.perf_counter()
            hits = store.semantic_search(query, limit=10)
            ours_ms.append((time.perf_counter() - start) * 1000)
            assert hits.complete and hits.examined == size
            start = time.perf_counter()
            hand = hand_exact_search(db, "owner", q, 10)
            hand_ms.append((time.perf_counter() - start) * 1000)
            truth = np.argsort(-(unit @ (q.astype(np.float64) / np.linalg.norm(q))), kind="stable")[:10]
            expected = {ids[i] for i in truth}
            recall.append(len(expected & {h["messageId"] for h in hits}) / 10)
            assert len(hand) == 10
        pure_ms = []
        os.environ[vectors.NUMPY_SWITCH] = "0"
        try:
            for q in queries[:pure_rounds]:
                pure_ms.append(timed(lambda q=q: store.semantic_search(q.tolist(), limit=10)) * 1000)
        finally:
            del os.environ[vectors.NUMPY_SWITCH]
        rows.append(
            {
                "vectors": size,
                "dims": dims,
                "kind": kind,
                "arrayBytes": len(bson.encode(legacy)),
                "float32Bytes": len(bson.encode(float32_only)),
                "storedBytes": round(stored_bytes),
                "arrayOverStored": len(bson.encode(legacy)) / stored_bytes,
                "firstPassDocs": len(blocks) + unsealed,
                "writes_per_s": size / written,
                "ours_ms": statistics.median(ours_ms),
                "pure_python_ms": statistics.median(pure_ms) if pure_ms else None,
                "hand_one_pass_ms": statistics.median(hand_ms),
                "ratio": statistics.median(ours_ms) / statistics.median(hand_ms),
                "recall_at_10": statistics.fmean(recall),
                "queries": len(queries),
            }
        )
    client.drop_database(db.name)
    return rows


def hand_exact_search(db: Database[Doc], mailbox: str, query: Any, k: int) -> list[str]:
    """The one-pass exact search by hand: PyMongo reads every float32 vector, numpy ranks them."""
    import numpy as np

    ids, blobs = [], []
    for doc in db.vectors.find({"_id": {"$gte": mailbox + ":", "$lt": mailbox + ";"}}, {"embedding": 1}):
        ids.append(doc["_id"])
        blobs.append(bytes(doc["embedding"])[2:])
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    scores = (matrix @ query.astype(np.float64)) / np.linalg.norm(matrix, axis=1)
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


NAME = "vectors"
DEFAULT = False


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--vector-sizes",
        default="10000,100000",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="vectors in the mailbox",
    )
    parser.add_argument("--vector-dims", type=int, default=768)
    parser.add_argument("--vector-rounds", type=int, default=5, help="queries per kind and size")
    parser.add_argument("--pure-rounds", type=int, default=1, help="of those, run in pure Python too")


def run(ctx: Context) -> Doc:
    args = ctx.args
    rows: list[Doc] = []
    for size in args.vector_sizes:
        rows += bench_vectors(ctx.client, size, args.vector_dims, args.vector_rounds, args.pure_rounds)
    table_of(
        "vectors (bytes per stored vector; median ms of semantic_search limit 10; ratio = ours / hand)",
        rows,
        [
            "vectors",
            "dims",
            "kind",
            "arrayBytes",
            "float32Bytes",
            "storedBytes",
            "arrayOverStored",
            "firstPassDocs",
            "writes_per_s",
            "ours_ms",
            "pure_python_ms",
            "hand_one_pass_ms",
            "ratio",
            "recall_at_10",
        ],
    )
    return {"vectors": rows}
