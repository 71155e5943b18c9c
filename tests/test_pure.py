"""The pure modules on their own: public API, keys, documents, cursors, blob ranges."""

from __future__ import annotations

import inspect
import random
from typing import Any

import pytest

import aecs_mongo
from aecs_mongo import errors
from aecs_mongo.pure.blobs import assemble, chunk_documents, file_document, join_chunks, prefix_filter
from aecs_mongo.pure.documents import (
    build_documents,
    fold_thread_summary,
    thread_summary_from_messages,
    to_normalized_email,
)
from aecs_mongo.pure.explain import plan_stages, sort_provided
from aecs_mongo.pure.keys import blob_prefix, list_id_key, message_key, strip_message_id, subject_key
from aecs_mongo.pure.lifecycle import byte_pages, recorded_size
from aecs_mongo.pure.queries import decode_cursor, encode_cursor, inbox_query, participant_query, threads_query

from .helpers.factories import BASE_TS, email


def test_public_api_is_sorted_and_importable() -> None:
    assert aecs_mongo.__all__ == sorted(aecs_mongo.__all__)
    for name in aecs_mongo.__all__:
        assert getattr(aecs_mongo, name) is not None


def test_every_exception_has_one_root_and_is_drawn_in_the_docstring() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)]
    assert errors.AecsMongoError in classes
    doc = errors.__doc__ or ""
    for cls in classes:
        assert issubclass(cls, errors.AecsMongoError)
        assert cls.__name__ in doc, cls.__name__
        assert cls.__name__ in aecs_mongo.__all__


@pytest.mark.parametrize(
    ("subject", "key"),
    [
        ("Live Wire", "live wire"),
        ("Re: Live Wire", "live wire"),
        ("Fwd: Re: Live  Wire", "live wire"),
        ("RE: FW: AW:  live\twire ", "live wire"),
        ("Re[2]: SV: Live Wire", "live wire"),
        ("Re:Re:Re: x", "x"),
        ("Regarding: reply", "regarding: reply"),
        ("Fwd:", ""),
        (None, ""),
    ],
)
def test_subject_key(subject: str | None, key: str) -> None:
    assert subject_key(subject) == key


def test_message_ids_in_either_form_have_one_key() -> None:
    assert strip_message_id(" <a@b> ") == "a@b"
    assert message_key("<a@b>") == message_key("a@b") == message_key(" a@b ")
    assert message_key("a@b") != message_key("A@b")  # Message-IDs are case-sensitive
    with pytest.raises(TypeError):
        message_key({"$ne": 1})  # type: ignore[arg-type]


def test_list_id_key() -> None:
    assert list_id_key("Debian <debian-announce.lists.debian.org>") == "debian-announce.lists.debian.org"
    assert list_id_key("<X.Example.COM>") == "x.example.com"
    assert list_id_key("  ") is None and list_id_key(None) is None


def test_build_documents_shapes() -> None:
    e = email(1, sender="Bob@Example.com", to=("Alice@Example.com", "bob@example.com"))
    e["metadata"]["bcc"] = [{"name": None, "email": "hidden@x"}]
    e["metadata"]["date"] = "2026-06-29T14:33:00+00:00"
    e["x_tag"] = {"nested": [1, 2]}
    docs = build_documents(e, mailbox_id="alice", attachment_data=[])
    m, b = docs.message, docs.body
    assert m["_id"] == f"alice:{message_key('m1@example.com')}"
    assert m["messageId"] == "m1@example.com"
    assert m["from"] == {"email": "bob@example.com", "name": "Bob"}
    assert m["participants"] == ["bob@example.com", "alice@example.com"]  # lowercased, deduplicated, no bcc
    assert b["bcc"] == []
    assert m["dateText"] == "2026-06-29T14:33:00+00:00"
    assert m["x"] == {"x_tag": {"nested": [1, 2]}}
    assert m["blobs"] == [] and docs.blobs == ()
    assert "rawFull" not in m and "text" not in m and "html" not in m
    back = to_normalized_email(m, b)
    assert back["metadata"]["date"] == "2026-06-29T14:33:00+00:00"
    assert back["x_tag"] == {"nested": [1, 2]}
    kept = build_documents(e, mailbox_id="alice", owner_addresses=frozenset({"bob@example.com"}))
    assert kept.body["bcc"] == [{"name": None, "email": "hidden@x"}]
    assert "hidden@x" in kept.message["participants"]


def test_thread_summary_order_is_total() -> None:
    rows = [
        {"mailboxId": "a", "threadKey": "t", "threadId": "T", "ts": 5, "messageKey": k, "subject": s}
        for k, s in (("b", "second"), ("a", "first"), ("c", "third"))
    ]
    summary = thread_summary_from_messages(rows)
    assert summary is not None
    assert (summary["firstMessageKey"], summary["lastMessageKey"], summary["subject"]) == ("a", "c", "first")
    assert summary["messageCount"] == 3
    assert thread_summary_from_messages([]) is None


def test_folding_in_any_order_equals_the_recomputation() -> None:
    rows = [
        {"mailboxId": "a", "threadKey": "t", "threadId": "T", "ts": n % 4, "messageKey": f"k{n:02}", "subject": f"s{n}"}
        for n in range(12)
    ]
    for seed in range(20):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        summary = None
        for row in shuffled:
            summary = fold_thread_summary(summary, row)
        assert summary == thread_summary_from_messages(rows)


def test_cursors_round_trip_and_bind_to_their_query() -> None:
    q = inbox_query("alice")
    last = {"ts": BASE_TS, "messageKey": "f" * 64}
    cursor = encode_cursor(q, last)
    assert decode_cursor(q, cursor, "alice") == (BASE_TS, "f" * 64)
    with pytest.raises(errors.InvalidCursorError):
        decode_cursor(inbox_query("bob"), cursor, "bob")
    with pytest.raises(errors.InvalidCursorError):
        decode_cursor(participant_query("alice", "x@y"), cursor, "alice")
    forged = encode_cursor(q, {"ts": BASE_TS, "messageKey": "not-hex"})
    with pytest.raises(errors.InvalidCursorError):
        decode_cursor(q, forged, "alice")


def test_cursors_are_short_enough_for_an_80_column_line_and_old_ones_still_page() -> None:
    """``next_cursor: <cursor>`` fits 80 columns (it took 147-156 before); a cursor of the older
    JSON form is still accepted; a short one tampered with, cut or lengthened is refused."""
    import base64
    import json

    q, threads = inbox_query("alice"), threads_query("a:b")
    for ts in (0, -1, BASE_TS, 2**40, -(2**63), 2**63 - 1):
        cursor = encode_cursor(q, {"ts": ts, "messageKey": "e" * 64})
        assert decode_cursor(q, cursor, "alice") == (ts, "e" * 64)
        thread_cursor = encode_cursor(threads, {"lastTs": ts, "_id": "a:b:" + "d" * 64})
        assert decode_cursor(threads, thread_cursor, "a:b") == (ts, "a:b:" + "d" * 64)
        if 0 <= ts < 2**34:  # today's epoch seconds and centuries around them
            assert len(f"next_cursor: {cursor}") <= 80 and len(f"next_cursor: {thread_cursor}") <= 80
    old = json.dumps([1, q.fingerprint, BASE_TS, "e" * 64], separators=(",", ":")).encode()
    assert decode_cursor(q, base64.urlsafe_b64encode(old).decode().rstrip("="), "alice") == (BASE_TS, "e" * 64)
    cursor = encode_cursor(q, {"ts": BASE_TS, "messageKey": "e" * 64})
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    for bad in (raw[:-1], raw + b"\0", raw[:1] + bytes([raw[1] ^ 1]) + raw[2:], b"\3" + raw[1:]):
        with pytest.raises(errors.InvalidCursorError):
            decode_cursor(q, base64.urlsafe_b64encode(bad).decode().rstrip("="), "alice")


def test_blob_prefix_range_is_exact() -> None:
    prefix = blob_prefix("alice", message_key("a@b"))
    selector = prefix_filter("_id", prefix)["_id"]

    def inside(key: str) -> bool:
        return bool(selector["$gte"] <= key < selector["$lt"])

    assert inside(prefix + "raw.eml") and inside(prefix + "att/12") and inside(prefix + "~")
    other = blob_prefix("alice", message_key("a@c"))
    assert not inside(other + "raw.eml")
    assert not inside(prefix[:-1] + "0") and not inside(prefix[:-1])


def test_chunks_reassemble_and_detect_gaps() -> None:
    data = bytes(range(256)) * 5
    chunks = chunk_documents("k", data, chunk_size=300)
    assert [c["_id"] for c in chunks] == [f"k#{n}" for n in range(5)]
    meta: dict[str, Any] = {}
    file_doc = file_document("k", len(data), "application/octet-stream", meta, chunk_size=300)
    assert assemble(file_doc, chunks) == data
    with pytest.raises(errors.AecsMongoError):
        assemble(file_doc, chunks[:2] + chunks[3:])
    assert chunk_documents("k", b"") == []
    assert assemble(file_document("k", 0, "x", meta), []) == b""


def test_chunks_join_when_they_add_up_to_the_recorded_length() -> None:
    data = bytes(range(256)) * 5
    chunks = chunk_documents("k", data, chunk_size=300)
    assert join_chunks(chunks, len(data)) == data
    assert join_chunks(chunks[:1], 300) == data[:300]
    assert join_chunks(chunks[:4], len(data)) is None  # the last one missing
    assert join_chunks(chunks[1:], len(data) - 300) is None  # the first one missing
    assert join_chunks(chunks[:2] + chunks[3:], len(data) - 300) is None  # a gap
    assert join_chunks(chunks, len(data) + 1) is None and join_chunks([], 0) == b""


def test_a_message_records_its_first_copy_size_only_with_raw_bytes() -> None:
    assert recorded_size({"blobs": ["raw.eml", "att/0"], "sizeBytes": 2216}) == 2216
    # nothing to check chunks against: no raw copy, no record, an empty copy, not a count
    unsized: list[dict[str, Any]] = [
        {"blobs": ["att/0"], "sizeBytes": 10},
        {"blobs": ["raw.eml"]},
        {"blobs": ["raw.eml"], "sizeBytes": 0},
        {"blobs": ["raw.eml"], "sizeBytes": True},
    ]
    assert [recorded_size(m) for m in unsized] == [None] * 4


def test_byte_pages_bound_bytes_and_count() -> None:
    sizes = [5, 5, 20, 1, 1, 1, 1]
    assert byte_pages(sizes, int, limit=10) == [[5, 5], [20], [1, 1, 1, 1]]
    assert byte_pages(sizes, int, limit=10, most=3) == [[5, 5], [20], [1, 1, 1], [1]]
    assert byte_pages([], int, limit=10, most=3) == []


def test_sort_provided_reads_the_keys_after_the_equality_prefix() -> None:
    inbox = {"mailboxId": 1, "ts": -1, "messageKey": -1}
    assert sort_provided(inbox, {"mailboxId": "a"}, [("ts", -1), ("messageKey", -1)])
    assert sort_provided(inbox, {"mailboxId": "a"}, [("ts", 1), ("messageKey", 1)])  # reversed walk
    assert not sort_provided(inbox, {"mailboxId": "a"}, [("ts", -1), ("messageKey", 1)])  # mixed
    assert not sort_provided(inbox, {}, [("ts", -1)])  # mailboxId unbound: ts is not next
    assert not sort_provided(inbox, {"mailboxId": "a"}, [])
    ranged = {"$and": [{"mailboxId": "a"}, {"ts": {"$lt": 5}}]}  # a range is not an equality
    assert sort_provided(inbox, ranged, [("ts", -1), ("messageKey", -1)])


def test_plan_stages_walks_nested_and_sharded_plans() -> None:
    plan = {"stage": "SHARD_MERGE", "shards": [{"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN"}}}]}
    assert [s["stage"] for s in plan_stages(plan)] == ["SHARD_MERGE", "FETCH", "IXSCAN"]


def test_a_batchs_copies_go_last_and_in_the_batchs_order() -> None:
    from aecs_mongo.pure.variants import variants_in_batch_order

    def rec(sha: str) -> dict[str, str]:
        return {"sha256": sha, "blobKey": f"k/{sha}"}

    # an earlier batch's copy (x), then this batch's b recorded before its a (a restart took a)
    variants, hashes = [rec("x"), rec("b"), rec("a")], ["x", "b", "a"]
    assert variants_in_batch_order(variants, hashes, ["a", "b"]) == ([rec("x"), rec("a"), rec("b")], ["x", "a", "b"])
    assert variants_in_batch_order([rec("x"), rec("a"), rec("b")], ["x", "a", "b"], ["a", "b", "a"]) is None
    # a hash claimed without its record (a write cut short before) keeps its place among the hashes
    assert variants_in_batch_order([rec("b")], ["c", "b"], ["b"]) is None


def test_a_directory_mtime_is_trusted_past_a_tick_of_its_clock() -> None:
    from aecs_mongo.pure.file_records import mtime_trusted

    now = 1_800_000_000_123_456_789
    assert mtime_trusted(now - 60_000_000, now)
    assert not mtime_trusted(now - 10_000_000, now)  # within a tick: a change now could keep it
    whole = 1_800_000_000_000_000_000  # a file system of whole seconds
    assert not mtime_trusted(whole, whole + 1_500_000_000)
    assert mtime_trusted(whole, whole + 2_500_000_000)
