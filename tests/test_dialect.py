"""The dialects: mongod and Atlas get the plain statements, the embedded SecantusDB its
workarounds, and a store speaks the dialect its server reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from aecs_mongo.pure import dialect, queries, search_compile, variants, windows
from aecs_mongo.pure.dialect import CAUTIOUS, MONGODB, SECANTUSDB, of_server

from .helpers.factories import email


def test_the_dialect_is_chosen_from_build_info() -> None:
    assert of_server({"version": "8.0.4", "gitVersion": "abc"}) is MONGODB
    assert of_server({"version": "7.0.0", "secantusVersion": "0.7.0b3"}) is SECANTUSDB
    # another release of it: the same workarounds, whether it stops at a limit learned
    other = of_server({"version": "8.2.11", "secantusVersion": "0.8.0"})
    assert other.gte_as_gt and other.in_limit == SECANTUSDB.in_limit and other.stops_at_limit is None
    unknown = of_server({})  # a server that refused buildInfo: plain statements, the rest learned
    assert (unknown.gte_as_gt, unknown.in_limit, unknown.barrier_counter) == (False, MONGODB.in_limit, False)
    assert unknown.stops_at_limit is None
    assert of_server(None) == unknown


def test_mongod_gets_the_plain_range_and_secantusdb_its_restatement() -> None:
    since = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    query = queries.inbox_query("alice", since=since, until=since + dt.timedelta(days=1))
    lo = int(since.timestamp())
    assert query.base["ts"] == {"$gte": lo, "$lt": lo + 86400}  # the builder states the plain range
    assert MONGODB.statement(query.base) == query.base
    assert SECANTUSDB.statement(query.base)["ts"] == {"$gt": lo - 1, "$lt": lo + 86400}
    after = queries.keyset_filter(query, (lo + 5, "k" * 64))
    assert MONGODB.statement(after) == after
    restated = SECANTUSDB.statement(after)
    assert restated["$and"][0]["ts"] == {"$gt": lo - 1, "$lt": lo + 86400}
    assert restated["$and"][1] == after["$and"][1]
    # only integer sort times: a key range and other fields stay as they are
    window = windows.Window(second=lo, key_lo="a" * 64)
    merged = windows.merge_filter({"mailboxId": "alice", "size": {"$gte": 3}}, window, "ts", "messageKey")
    assert SECANTUSDB.statement(merged) == merged
    thread_window = windows.Window(lo=lo, hi=lo + 60)
    assert thread_window.conditions("lastTs", "_id") == {"lastTs": {"$gte": lo, "$lt": lo + 60}}
    restated_window = SECANTUSDB.statement(thread_window.conditions("lastTs", "_id"))
    assert restated_window == {"lastTs": {"$gt": lo - 1, "$lt": lo + 60}}


@pytest.mark.parametrize("bounds", [{"$gte": 10}, {"$gte": 10, "$lt": 13}, {"$gte": -3}])
def test_the_restated_range_holds_the_same_integers(bounds: dict[str, int]) -> None:
    def holds(condition: dict[str, int], ts: int) -> bool:
        tests = {"$gt": ts.__gt__, "$gte": ts.__ge__, "$lt": ts.__lt__}
        return all(tests[op](value) for op, value in condition.items())

    restated = SECANTUSDB.statement({"ts": bounds})["ts"]
    assert "$gte" not in restated
    assert [t for t in range(-10, 20) if holds(bounds, t)] == [t for t in range(-10, 20) if holds(restated, t)]


def test_mongod_names_every_value_in_one_in_and_secantusdb_a_hundred() -> None:
    ids = [f"alice:{n:064x}" for n in range(250)]
    selector = {"_id": {"$in": ids}, "mailboxId": "alice"}
    assert MONGODB.split_in(selector) == [selector]
    many = {"_id": {"$in": [f"alice:{n:064x}" for n in range(25_000)]}}  # mongod's own bound: 16 MB a command
    assert [len(p["_id"]["$in"]) for p in MONGODB.split_in(many)] == [10_000, 10_000, 5_000]
    parts = SECANTUSDB.split_in(selector)
    assert [len(p["_id"]["$in"]) for p in parts] == [100, 100, 50]
    assert [i for p in parts for i in p["_id"]["$in"]] == ids and all(p["mailboxId"] == "alice" for p in parts)
    # a read that bounds its own lists (vectors, a search scan) says so on every server
    assert [len(p["_id"]["$in"]) for p in MONGODB.split_in(selector, 120)] == [120, 120, 10]
    assert MONGODB.scan_in is None and SECANTUSDB.scan_in == 50
    assert (MONGODB.export_blobs, SECANTUSDB.export_blobs) == (100, 32)


def test_the_journal_barrier_and_the_limit_behaviour() -> None:
    assert not MONGODB.barrier_counter and SECANTUSDB.barrier_counter
    assert MONGODB.stops_at_limit is True  # one plain query a page
    assert SECANTUSDB.stops_at_limit is False  # the release measured: windows, no explain to learn it


def test_the_array_member_test_is_a_path_on_mongod_and_a_filter_on_secantusdb() -> None:
    record = {"sha256": "ab" * 32, "size": 3}
    plain = variants.variant_record_update(record, MONGODB)
    cond = plain[0]["$set"]["variants"]["$cond"][0]
    assert cond == {"$in": [{"$literal": "ab" * 32}, {"$ifNull": ["$variants.sha256", []]}]}
    worked = variants.variant_record_update(record, SECANTUSDB)
    assert "$filter" in str(worked[0]["$set"]["variants"]["$cond"][0])
    assert variants.variant_record_update(record) == worked  # the default: the form every server runs


def test_a_long_word_s_pattern_is_as_long_as_the_server_takes() -> None:
    word = "x" * 5000
    assert len(search_compile.word_pattern(word, SECANTUSDB.pattern_chars)) <= 900
    assert len(search_compile.word_pattern(word, MONGODB.pattern_chars)) > 900
    assert len(search_compile.word_pattern(word, MONGODB.pattern_chars).encode()) <= 32764


def test_the_cautious_dialect_is_every_workaround() -> None:
    assert dict(vars(CAUTIOUS), name="") == dict(vars(SECANTUSDB), name="")
    assert dialect.EMBEDDED is SECANTUSDB


@pytest.mark.server
def test_a_store_speaks_the_dialect_its_server_reports(make_store: Any, client: Any) -> None:
    store = make_store()
    store.store_many([email(n) for n in range(3)])
    store.list_messages(limit=2)
    assert store.capabilities.dialect == of_server(client.admin.command("buildInfo"))
