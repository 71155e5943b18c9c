"""search(): the scan and $text on real servers; Atlas and vector pipelines by shape (tests/test_search_engines.py:
every engine on the corpus, the local index)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from aecs_mongo import MessageStore, NotFoundError, SearchQueryError
from aecs_mongo.pure.queries import vector_search_pipeline
from aecs_mongo.pure.search_compile import atlas_search
from aecs_mongo.pure.search_query import Date, parse
from aecs_mongo.synchronous import capabilities, search
from aecs_mongo.synchronous.search_engine import SearchEngine

from .helpers.factories import email


def mail(n: int, subject: str, body: str, mailbox_thread: str = "t@x") -> dict[str, Any]:
    e = email(n, thread=mailbox_thread, subject=subject)
    e["content"].update(text=body, clean=body, forAI=body)
    return e


def test_the_scan_matches_words_case_and_accent_folded(make_store: Any, caplog: Any) -> None:
    s = make_store("alice", search_engine="scan")
    s.store(mail(1, "Quarterly Planning", "meet on Thursday in Köln about the budget"))
    s.store(mail(2, "Lunch", "the BUDGET (draft) is attached: a+b=c"))
    s.store(mail(3, "Other", "nothing to see, storages only"))
    make_store("bob", search_engine="scan").store(mail(4, "budget", "budget in another mailbox"))
    with caplog.at_level(logging.INFO, logger="aecs_mongo"):
        hits = s.search("Budget")
    assert "reads every message" not in caplog.text  # the scan was asked for: nothing to act on
    assert hits.complete and hits.engine == "scan" and hits.examined == 3
    assert [h["messageId"] for h in hits] == ["m2@example.com", "m1@example.com"]  # newest first
    assert all(set(h) >= {"messageId", "threadId", "subject", "ts", "snippet"} for h in hits)
    assert "budget" in hits[0]["snippet"].lower()
    assert [h["messageId"] for h in s.search("planning")] == ["m1@example.com"]  # subject counts
    assert [h["messageId"] for h in s.search("koln")] == ["m1@example.com"]  # accents folded
    assert [h["messageId"] for h in s.search("a+b=c")] == ["m2@example.com"]  # a phrase of words a b c
    assert s.search("storage") == []  # words, not substrings
    assert [h["messageId"] for h in s.search("storage*")] == ["m3@example.com"]
    assert [h["messageId"] for h in s.search("budget NOT draft")] == ["m1@example.com"]
    assert s.count("budget OR nothing") == 3
    assert s.search("   ") == [] and s.count("") == 0
    with pytest.raises(SearchQueryError, match="at position 0"):
        s.search("(draft")
    with pytest.raises(TypeError):
        s.search({"$regex": ".*"})


def test_a_capped_scan_search_says_so(make_store: Any) -> None:
    s = make_store("alice", search_engine="scan", scan_limit=5)
    for n in range(12):
        s.store(mail(n, f"needle {n}", "hay"))
    capped = s.search("needle", limit=50)
    assert [h["messageId"] for h in capped] == [f"m{n}@example.com" for n in range(11, 6, -1)]  # newest five
    assert not capped.complete and capped.examined == 5
    enough = s.search("needle", limit=3)
    assert len(enough) == 3 and enough.complete  # the newest three hits: nothing better was left
    uncapped = make_store("alice", search_engine="scan").search("needle", limit=50)
    assert len(uncapped) == 12 and uncapped.complete and uncapped.examined == 12
    with pytest.raises(ValueError):
        make_store("alice", scan_limit=0)


@pytest.mark.server
def test_auto_engine_picks_what_the_server_has(make_store: Any, db: Any, backend: str, caplog: Any) -> None:
    s = make_store("alice")
    s.store(mail(1, "Storage", "indexes that sort"))
    has_text = "aecs_bodies_search" in {ix["name"] for ix in db.bodies.list_indexes()}
    with caplog.at_level(logging.INFO, logger="aecs_mongo"):
        assert [h["messageId"] for h in s.search("indexes")] == ["m1@example.com"]
        assert s.count("indexes") == 1 and len(s.search("sort")) == 1
    said = [r for r in caplog.records if "reads every message" in r.getMessage()]
    if s.search("indexes").engine == "scan":  # no text index: the store falls back to the scan
        # what to do about it, as a warning, once per store
        assert len(said) == 1 and said[0].levelno == logging.WARNING, caplog.text
        assert "search_index=" in said[0].getMessage()
    else:
        assert said == []
    if backend in ("rs", "standalone"):
        assert not has_text  # SecantusDB refuses text indexes: the bounded scan answered


@pytest.mark.server
def test_text_engine_where_the_server_has_text_indexes(make_store: Any, db: Any, backend: str) -> None:
    s = make_store("alice", search_engine="text")
    if "aecs_bodies_search" not in {ix["name"] for ix in db.bodies.list_indexes()}:
        pytest.skip(f"the {backend} server refuses text indexes ($text runs where MONGODB_URI names one that has them)")
    s.store(mail(1, "Quarterly planning", "meet about the storage budget"))
    s.store(mail(2, "Budget", "budget budget budget"))
    s.store(mail(3, "Other", "nothing"))
    make_store("bob", search_engine="text").store(mail(4, "budget", "budget"))
    hits = s.search("budget", sort="relevance")
    assert [h["messageId"] for h in hits] == ["m2@example.com", "m1@example.com"]  # by relevance
    assert hits[0]["score"] > hits[1]["score"] and hits.engine == "text"
    assert [h["messageId"] for h in s.search("budget")] == ["m2@example.com", "m1@example.com"]  # newest first
    assert s.count("budget") == 2 and s.count("budget -storage") == 1
    # what $text cannot express is refused when $text was asked for by name...
    with pytest.raises(SearchQueryError, match="prefix"):
        s.search("budg*")
    # ... and answered by the scan under auto
    auto = make_store("alice")
    assert [h["messageId"] for h in auto.search("budg*")] == ["m2@example.com", "m1@example.com"]
    assert auto.search("budg*").engine == "scan" and auto.search("budget").engine == "text"


@pytest.mark.server  # runs $text where the server took the text index (mongomock takes it, runs none)
def test_one_place_chooses_the_engine_and_every_engine_has_the_interface(db: Any, tmp_path: Path) -> None:
    """``choose_engine`` for every setting and kind of query: the engine's name is what
    ``engine_for`` and the results say, each engine implements ``SearchEngine``, and an engine
    named by the setting that cannot express the query (or lacks its index) is refused."""
    index = str(tmp_path / "search.db")
    plain = MessageStore(db, mailbox_id="alice")
    plain.ensure_indexes()
    plain.store(mail(1, "Budget", "the budget"))
    auto = "text" if capabilities.text_index(plain._context) else "scan"
    cases: list[tuple[dict[str, Any], str, str | type[Exception]]] = [
        ({}, "budget", auto),
        ({}, "", auto),
        ({}, "tag:todo", "messages"),
        ({}, "is:unread date:2024..", "messages"),
        ({"search_index": index}, "budget", "local"),
        ({"search_index": index}, "tag:todo", "local"),
        ({"search_engine": "text"}, "budget", "text"),
        ({"search_engine": "text"}, "tag:todo", "messages"),
        ({"search_engine": "text"}, "budg*", SearchQueryError),
        ({"search_engine": "atlas"}, "budget", "atlas"),
        ({"search_engine": "atlas"}, "folder:INBOX", "messages"),
        ({"search_engine": "local", "search_index": index}, "tag:todo", "local"),
        ({"search_engine": "local"}, "budget", ValueError),
        ({"search_engine": "scan"}, "tag:todo", "scan"),
        ({"search_engine": "scan"}, "", "scan"),
    ]
    for options, query, expected in cases:
        store = MessageStore(db, mailbox_id="alice", **options)
        ctx, tree = store._context, parse(query)
        if isinstance(expected, type):
            with pytest.raises(expected):
                search.choose_engine(ctx, tree)
            continue
        engine = search.choose_engine(ctx, tree)
        assert engine.name == expected == search.engine_for(ctx, tree), (options, query)
        assert isinstance(engine, SearchEngine), (options, query)
        if expected in ("messages", "local", "scan") or expected == auto:  # the engines this server runs
            assert store.search(query).engine == expected, (options, query)


def test_atlas_and_vector_pipelines_have_the_documented_shape() -> None:
    refused = atlas_search(parse("budget from:bob"), "alice")  # type: ignore[arg-type]
    assert refused.text is None and refused.reason is not None and "from:" in refused.reason  # not in the Atlas index
    compiled = atlas_search(parse('budget "draft plan" -köln budg* date:2024..'), "alice")  # type: ignore[arg-type]
    stage = compiled.text
    assert stage["index"] == "aecs_bodies_atlas"
    assert stage["compound"]["filter"] == [{"equals": {"path": "mailboxId", "value": "alice"}}]
    must = stage["compound"]["must"]
    assert must[0] == {"text": {"query": "budget", "path": ["subject", "clean", "attachmentTexts.text"]}}
    assert must[1] == {"phrase": {"query": "draft plan", "path": ["subject", "clean", "attachmentTexts.text"]}}
    assert must[2]["compound"]["mustNot"] == [
        {"text": {"query": "köln", "path": ["subject", "clean", "attachmentTexts.text"]}}
    ]
    assert must[3] == {
        "wildcard": {"query": "budg*", "path": ["subject", "clean", "attachmentTexts.text"], "allowAnalyzedField": True}
    }
    assert compiled.post == [Date("2024", None)]  # checked on the message after the $lookup
    vector = vector_search_pipeline("alice", [0.1, 0.2], 3, thread_key="k")[0]["$vectorSearch"]
    assert vector["filter"] == {"mailboxId": {"$eq": "alice"}, "threadKey": {"$eq": "k"}}
    assert vector["limit"] == 3 and vector["numCandidates"] >= 30 and vector["path"] == "embedding"


@pytest.mark.server
def test_embeddings_are_kept_per_message_and_deleted_with_it(store: MessageStore, db: Any) -> None:
    store.store(email(1))
    store.set_embedding("m1@example.com", [0.5, 0.25, 1])
    store.set_embedding("<m1@example.com>", [0.5, 0.25, 2])
    (vector,) = db.vectors.find()
    assert vector["embedding"].as_vector().data == [0.5, 0.25, 2.0] and vector["mailboxId"] == "alice"
    assert vector["threadKey"] == db.messages.find_one()["threadKey"]
    with pytest.raises(NotFoundError):
        store.set_embedding("missing@x", [1.0])
    with pytest.raises(TypeError):
        store.set_embedding("m1@example.com", ["a"])
    store.delete("m1@example.com")
    assert db.vectors.count_documents({}) == 0


@pytest.mark.server
def test_semantic_search_without_atlas(store: MessageStore, backend: str) -> None:
    if backend == "uri" and os.environ.get("AECS_URI_IS_ATLAS"):
        pytest.skip("covered by the Atlas run")
    store.store(email(1))
    store.set_embedding("m1@example.com", [1.0, 0.0])
    # auto: no Atlas vector index here, so the exact engine answers
    assert [h["messageId"] for h in store.semantic_search([1.0, 0.0], limit=3)] == ["m1@example.com"]
    getattr(store, "_astore", store).vector_engine = "atlas"  # the store behind the async flavors' wrapper
    with pytest.raises(OperationFailure):  # $vectorSearch exists only on Atlas: a clear server error
        store.semantic_search([1.0, 0.0], limit=3)
