"""The agent tools (aecs_mongo.agents) over a real store, in every flavour and on every backend.

The sample mailbox (samples/mailbox) and a crafted thread whose every text field hides a
payload (tests/helpers/agents.py) are stored by the owner's store (bcc kept on mail alice
sent); the tools read them through a shared view, as the MCP server does. Each tool is called
for real and its result checked: the right messages, within the caps its description states,
nothing that hides text left in it, every refusal a ToolError. The MCP transport over the same
tools is tests/test_mcp.py; the LangChain retriever and loader are at the end here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from aecs_mongo import ToolError
from aecs_mongo.agents import SPECS
from aecs_mongo.agents.langchain import MailRetriever, ThreadLoader
from aecs_mongo.agents.specs import MAX_ITEMS, SNIPPET_MAX_CHARS, STORE_MAX_BYTES, THREAD_MAX_CHARS

from .helpers.agents import (
    HIDDEN_ID,
    PERSIAN,
    REPLY_ID,
    ROOT_ID,
    SECRET_BCC,
    SENT_ID,
    assert_no_hidden,
    assert_within_caps,
    crafted_thread,
    every_read_call,
    hidden_id_message,
    toy_embed,
)
from .helpers.paths import ROOT

SAMPLES = sorted((ROOT / "samples" / "mailbox").glob("*.eml"))


@pytest.fixture
def mailbox(make_store: Callable[..., Any]) -> Any:
    """The sample mailbox and the crafted thread, stored by the owner (alice); returns the
    shared view the tools read through."""
    owner = make_store("alice", owner_addresses=["alice@example.com"])
    owner.store_many([p.read_bytes() for p in SAMPLES] + crafted_thread() + [hidden_id_message()])
    return make_store("alice", shared_view=True)


def checked(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """A result that passed the checks every result must pass (and is plain JSON)."""
    assert_within_caps(name, result)
    assert_no_hidden(result)
    assert json.loads(json.dumps(result)) == result
    return result


def test_message_summaries_of_given_ids_in_one_read(mailbox: Any) -> None:
    """The store method the search tools use: summaries in the order given, absent ones left
    out, brackets accepted, no other mailbox's message."""
    ids = ["<plan-3@example.net>", "absent@example.com", "plan-1@example.com", "plan-3@example.net"]
    found = mailbox.message_summaries(ids)
    assert [m["messageId"] for m in found] == ["plan-3@example.net", "plan-1@example.com", "plan-3@example.net"]
    assert found[1] == mailbox.list_messages(limit=100, sender="alice@example.com").messages[-1]
    assert mailbox.message_summaries([]) == []
    with pytest.raises(TypeError):
        mailbox.message_summaries("plan-1@example.com")
    with pytest.raises(TypeError):
        mailbox.message_summaries([{"$gt": ""}])


def test_search_gives_sender_date_subject_and_a_snippet_never_bodies(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    found = checked("search", tools.search("budget"))
    ids = [m["messageId"] for m in found["mail"]]
    assert "plan-1@example.com" in ids and "budget-1@example.org" in ids
    hit = next(m for m in found["mail"] if m["messageId"] == "plan-1@example.com")
    assert hit["from"] == {"name": "Alice Example", "email": "alice@example.com"}
    assert hit["date"] == "2026-11-02T08:15:00Z" and hit["subject"] == "Quarterly planning"
    assert hit["threadId"] == "plan-1@example.com"
    assert "budget" in hit["snippet"].lower() and len(hit["snippet"]) <= SNIPPET_MAX_CHARS
    assert set(hit) == {"messageId", "threadId", "from", "date", "subject", "attachmentCount", "snippet", "tags"}
    assert found["returned"] == len(ids) and found["engine"] and found["complete"] is True
    assert len(tools.search("the", limit=2)["mail"]) <= 2


def test_get_thread_is_newest_n_oldest_first_within_a_budget_the_caller_lowers(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    whole = checked("get_thread", tools.get_thread("plan-1@example.com"))
    messages = whole["mail"]["messages"]
    assert [m["position"] for m in messages] == [0, 1, 2]
    assert [m["messageId"] for m in messages] == ["plan-1@example.com", "plan-2@example.org", "plan-3@example.net"]
    assert whole["messageCount"] == 3 and whole["olderNotShown"] == 0 and not whole["truncated"]
    assert "storage numbers" in messages[2]["text"]
    # a message id of the thread works too, and limit keeps the newest
    newest = checked("get_thread", tools.get_thread("plan-2@example.org", limit=2))
    assert [m["position"] for m in newest["mail"]["messages"]] == [1, 2] and newest["olderNotShown"] == 1
    # a lower budget: the newest messages are kept whole first, the older ones left out or cut
    full = sum(len(m["text"]) for m in messages)
    tight = checked("get_thread", tools.get_thread("plan-1@example.com", max_chars=200))
    shown = tight["mail"]["messages"]
    assert sum(len(m["text"]) for m in shown) <= 200 < full
    assert shown[-1]["messageId"] == "plan-3@example.net" and shown[-1]["text"] == messages[2]["text"]
    assert tight["truncated"] and tight["omittedForBudget"] + len(shown) == 3
    with pytest.raises(ToolError, match="max_chars"):
        tools.get_thread("plan-1@example.com", max_chars=THREAD_MAX_CHARS + 1)
    with pytest.raises(ToolError, match="no thread"):
        tools.get_thread("nothing-here@example.com")


def test_get_message_caps_text_and_raw_and_names_attachments(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    message = checked("get_message", tools.get_message("budget-1@example.org"))
    mail = message["mail"]
    assert mail["attachments"] and all(
        set(a) == {"index", "filename", "contentType", "size"} for a in mail["attachments"]
    )
    assert mail["attachments"][0]["size"] > 0 and "raw" not in mail and "rawBytes" not in message
    short = checked("get_message", tools.get_message("plan-1@example.com", max_chars=100))
    assert len(short["mail"]["text"]) <= 100 and short["truncated"] and short["textChars"] > 100
    full = tools.get_message("plan-1@example.com", body="full")
    assert "Platform team" in full["mail"]["text"]  # the signature: only in the full text
    assert "Platform team" not in tools.get_message("plan-1@example.com")["mail"]["text"]
    raw = checked("get_message", tools.get_message(ROOT_ID, include_raw=True, raw_max_bytes=1024))
    assert raw["rawBytes"] > 1024 and raw["rawTruncated"] and len(raw["mail"]["raw"].encode()) <= 1024 + 3 * 8
    assert raw["mail"]["raw"].startswith("From:") or "Message-ID" in raw["mail"]["raw"]


def test_a_shared_view_shows_no_bcc_anywhere(mailbox: Any, make_tools: Any, make_store: Callable[..., Any]) -> None:
    shared = make_tools(mailbox)
    seen = json.dumps(
        [
            shared.get_message(SENT_ID, include_raw=True),
            shared.with_participant(SECRET_BCC),
            shared.get_thread(ROOT_ID),
            shared.list_messages(limit=MAX_ITEMS),
        ]
    )
    assert SECRET_BCC not in seen
    assert shared.with_participant(SECRET_BCC)["mail"] == []
    # the owner's own view keeps them (the tools add nothing, hide nothing of their own)
    owner = make_tools(make_store("alice", owner_addresses=["alice@example.com"]))
    mine = owner.get_message(SENT_ID, include_raw=True)["mail"]
    assert mine["bcc"] == [{"name": None, "email": SECRET_BCC}] and SECRET_BCC in mine["raw"]


def test_listings_page_with_cursors(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    every = tools.list_messages(limit=MAX_ITEMS)["mail"]
    seen, cursor = [], None
    while True:
        page = checked("list_messages", tools.list_messages(cursor=cursor, limit=3))
        assert page["returned"] == len(page["mail"]) <= 3
        seen += [m["messageId"] for m in page["mail"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [m["messageId"] for m in every] and len(seen) == len(SAMPLES) + 4
    assert [m["date"] for m in every] == sorted((m["date"] for m in every), reverse=True)
    threads, cursor = [], None
    while True:
        page = checked("list_threads", tools.list_threads(cursor=cursor, limit=2))
        threads += page["mail"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    crafted = next(t for t in threads if t["threadId"] == ROOT_ID)
    assert crafted["messageCount"] == 3 and crafted["firstDate"] < crafted["lastDate"]
    bob = checked("with_participant", tools.with_participant("Bob@Example.org", limit=MAX_ITEMS))
    assert {"plan-1@example.com", "plan-2@example.org", REPLY_ID} <= {m["messageId"] for m in bob["mail"]}
    since = tools.list_messages(since="2026-11-03", until="2026-11-04", limit=MAX_ITEMS)["mail"]
    assert since and all("2026-11-03" <= m["date"] < "2026-11-04" for m in since)
    only = tools.list_messages(sender="bob@example.org", limit=MAX_ITEMS)["mail"]
    assert only and {m["from"]["email"] for m in only} == {"bob@example.org"}
    with pytest.raises(ToolError, match="cursor"):
        tools.list_messages(cursor="bm90IGEgY3Vyc29y")
    with pytest.raises(ToolError, match="since"):
        tools.list_messages(since="last tuesday")


def test_replies_to_are_oldest_first_and_say_when_there_are_more(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    replies = checked("replies_to", tools.replies_to(f"<{ROOT_ID}>"))
    assert [m["messageId"] for m in replies["mail"]] == [REPLY_ID, SENT_ID] and replies["more"] is False
    first = tools.replies_to(ROOT_ID, limit=1)
    assert [m["messageId"] for m in first["mail"]] == [REPLY_ID] and first["more"] is True
    assert tools.replies_to("nobody@example.com")["mail"] == []


def test_hidden_characters_are_removed_from_every_tool_result(mailbox: Any, make_tools: Any) -> None:
    mailbox.set_embeddings({mid: toy_embed(mid) for mid in (ROOT_ID, REPLY_ID, SENT_ID)})
    tools = make_tools(mailbox, embed=toy_embed)
    assert "semantic_search" in [s.name for s in tools.specs()]
    for name, arguments in every_read_call():
        result = checked(name, tools.call(name, arguments))
        text = json.dumps(result, ensure_ascii=False)
        assert result["hiddenCharactersRemoved"] > 0, (name, arguments)
        assert "mallory@evil.example" in text or "Invoice" in text or ROOT_ID in text, name
    # what stays: a lone ZWNJ inside a Persian word, and the visible text around every payload
    body = tools.get_message(ROOT_ID)["mail"]
    assert PERSIAN in body["text"] and "Hidden bits:here and exe.txt there" in body["text"]
    assert body["subject"] == "Invoice overdue" and body["from"]["name"] == "Mallory exe.txt"
    assert body["attachments"][0]["filename"] == "invoicefdp.exe"
    # an identifier shows its hidden character as an escape, and the escape names the message
    listed = tools.list_messages(limit=MAX_ITEMS)["mail"]
    escaped = next(m["messageId"] for m in listed if m["subject"] == "A quiet id")
    assert escaped == HIDDEN_ID.replace("\u200b", "\\u{200B}")
    assert tools.get_message(escaped)["mail"]["text"].startswith("nothing to see")


def test_bad_arguments_are_tool_errors_and_change_nothing(mailbox: Any, make_tools: Any) -> None:
    tools = make_tools(mailbox)
    before = tools.list_messages(limit=MAX_ITEMS)
    bad: list[tuple[str, Any, str]] = [
        ("search", {"query": 5}, "must be a string"),
        ("search", {"query": {"$ne": None}}, "must be a string"),
        ("search", {"query": "x", "limit": "20"}, "must be an integer"),
        ("search", {"query": "x", "limit": 0}, "between"),
        ("search", {"query": "x", "limit": MAX_ITEMS + 1}, "between"),
        ("search", {"query": "x", "limit": True}, "must be an integer"),
        ("search", {}, "needs the argument 'query'"),
        ("search", {"query": "x", "mailbox": "bob"}, "no argument 'mailbox'"),
        ("search", ["budget"], "must be an object"),
        ("search", {"query": "x" * 5000}, "too long"),
        ("get_message", {"message_id": "absent@example.com"}, "no message"),
        ("get_message", {"message_id": ROOT_ID, "body": "html"}, "one of"),
        ("get_thread", {"thread_id": ""}, "must not be empty"),
        ("list_messages", {"cursor": "%%%"}, "cursor"),
        ("semantic_search", {"vector": ["a"]}, "must be a number"),
        ("semantic_search", {"text": "x", "vector": [1.0]}, "one of the two"),
        ("semantic_search", {"text": "needs an embedder"}, "no embedding function"),
        ("delete_message", {"message_id": ROOT_ID}, "read-only"),
        ("store_message", {"raw": "Subject: x\r\n\r\nhi"}, "read-only"),
        ("drop_database", {}, "no tool"),
    ]
    for name, arguments, message in bad:
        with pytest.raises(ToolError, match=message):
            tools.call(name, arguments)
    assert tools.list_messages(limit=MAX_ITEMS) == before
    assert tools.get_message(ROOT_ID)["mail"]["messageId"] == ROOT_ID


def test_write_tools_only_when_writable_and_listed_apart(mailbox: Any, make_tools: Any) -> None:
    reader = make_tools(mailbox)
    names = [s.name for s in reader.specs()]
    assert "store_message" not in names and "delete_message" not in names
    writer = make_tools(mailbox, writable=True)
    specs = writer.specs()
    assert [s.name for s in specs][-3:] == ["store_message", "delete_message", "tag_messages"]
    assert all(s.write and s.description.startswith("WRITE TOOL") for s in specs[-3:])
    assert not any(s.write for s in specs[:-3])
    raw = (
        "From: Agent <agent@example.com>\r\nSubject: Note to self\r\nMessage-ID: <note-1@example.com>\r\n\r\nRemember."
    )
    stored = checked("store_message", writer.store_message(raw))
    assert stored["outcome"] == "stored" and stored["mail"]["messageId"] == "note-1@example.com"
    assert writer.store_message(raw)["outcome"] == "present"
    assert reader.get_message("note-1@example.com")["mail"]["text"].startswith("Remember")
    assert checked("delete_message", writer.delete_message("note-1@example.com"))["deleted"] is True
    assert writer.delete_message("note-1@example.com")["deleted"] is False
    with pytest.raises(ToolError, match="no message"):
        reader.get_message("note-1@example.com")
    with pytest.raises(ToolError, match="too long"):
        writer.store_message("x" * (STORE_MAX_BYTES + 1))


def test_tag_messages_is_a_capped_write_tool_whose_results_carry_tags(mailbox: Any, make_tools: Any) -> None:
    reader = make_tools(mailbox)
    assert "tag_messages" not in [s.name for s in reader.specs()]
    with pytest.raises(ToolError, match="read-only"):
        reader.call("tag_messages", {"message_ids": ["plan-1@example.com"], "add": ["todo"]})
    writer = make_tools(mailbox, writable=True)
    done = checked("tag_messages", writer.tag_messages(message_ids=["plan-1@example.com"], add=["Todo", "$flagged"]))
    assert done["matched"] == 1 and done["changed"] == 1
    assert done["mail"][0]["tags"] == ["$flagged", "todo"]
    by_query = checked("tag_messages", writer.tag_messages(query="tag:todo", add=["$seen"], remove=["$flagged"]))
    assert by_query["changed"] == 1 and by_query["mail"][0]["tags"] == ["$seen", "todo"]
    listed = reader.list_messages(limit=MAX_ITEMS)["mail"]
    assert {m["messageId"]: m["tags"] for m in listed}["plan-1@example.com"] == ["$seen", "todo"]
    assert reader.search("tag:todo")["mail"][0]["tags"] == ["$seen", "todo"]
    total = mailbox.count("is:unread")
    assert total > 3
    with pytest.raises(ToolError, match="more than max_messages"):
        writer.tag_messages(query="is:unread", add=["x"], max_messages=3)
    assert mailbox.count("tag:x") == 0  # refused: nothing changed
    for bad in ({"query": "a", "message_ids": ["b"], "add": ["x"]}, {"query": "a"}, {"query": "a", "add": ["no way"]}):
        with pytest.raises(ToolError):
            writer.call("tag_messages", bad)
    with pytest.raises(ToolError):
        writer.call("tag_messages", {"message_ids": ["m"] * 101, "add": ["x"]})


def test_semantic_search_is_listed_where_vectors_are_stored(mailbox: Any, make_tools: Any) -> None:
    assert "semantic_search" not in [s.name for s in make_tools(mailbox).specs()]
    ids = ["plan-1@example.com", "plan-2@example.org", "budget-1@example.org", ROOT_ID]
    mailbox.set_embeddings({mid: toy_embed(mid.split("@")[0].replace("-", " ")) for mid in ids})
    tools = make_tools(mailbox, embed=toy_embed)
    assert "semantic_search" in [s.name for s in tools.specs()]
    by_text = checked("semantic_search", tools.semantic_search(text="budget"))
    assert by_text["mail"][0]["messageId"] == "budget-1@example.org" and by_text["mail"][0]["score"] is not None
    by_vector = tools.semantic_search(vector=toy_embed("plan"), limit=2)
    assert len(by_vector["mail"]) == 2 and by_vector["mail"][0]["messageId"].startswith("plan-")
    in_thread = tools.semantic_search(vector=toy_embed("plan"), thread_id="plan-1@example.com", limit=MAX_ITEMS)
    assert {m["threadId"] for m in in_thread["mail"]} == {"plan-1@example.com"}
    with pytest.raises(ToolError, match="must be a number"):
        tools.semantic_search(vector=[1.0, float("nan")])


def test_results_keep_their_byte_cap_whatever_the_mail_holds(make_store: Callable[..., Any], make_tools: Any) -> None:
    """Every field within its own cap still adds up past the byte cap here (100 recipients with
    200-character names of 4-byte characters, 32,000 of them in the text, 64 KiB of raw), so
    the result is shortened to fit."""
    store = make_store("bulky", shared_view=True)
    wide = "\U0001f600" * 250
    recipients = ", ".join(f'"{wide}{i}" <r{i}@example.com>' for i in range(100))
    big = (
        f'From: "{wide}" <long@example.com>\r\nTo: {recipients}\r\n'
        f"Subject: {'subject ' * 500}\r\nMessage-ID: <bulky@example.com>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n" + "\U0001f600" * 40_000
    ).encode()
    store.store(big)
    tools = make_tools(store)
    message = checked(
        "get_message", tools.get_message("bulky@example.com", max_chars=32_000, include_raw=True, raw_max_bytes=65_536)
    )
    assert message["truncated"] and len(message["mail"]["to"]) == 100
    assert len(message["mail"]["text"]) < 32_000  # shortened below its own cap to fit the bytes
    assert len(message["mail"]["subject"]) <= 300 and len(message["mail"]["from"]["name"]) <= 200
    thread = checked("get_thread", tools.get_thread("bulky@example.com"))
    assert sum(len(m["text"]) for m in thread["mail"]["messages"]) <= THREAD_MAX_CHARS
    checked("search", tools.search("subject"))


def test_the_mailbox_is_fixed_when_the_tools_are_made(
    mailbox: Any, make_store: Callable[..., Any], make_tools: Any
) -> None:
    other = make_store("bob")
    other.store(
        b"From: x@y.example\r\nSubject: budget elsewhere\r\nMessage-ID: <bob-only@example.com>\r\n\r\nbudget\r\n"
    )
    tools = make_tools(mailbox)
    assert tools.mailbox_id == "alice"
    assert "bob-only@example.com" not in json.dumps([tools.search("budget"), tools.list_messages(limit=MAX_ITEMS)])
    with pytest.raises(ToolError):
        tools.get_message("bob-only@example.com")
    assert all("mailbox" not in spec.input_schema["properties"] for spec in SPECS.values())


# --- LangChain ------------------------------------------------------------------------------------


def test_the_retriever_returns_documents_through_invoke(mailbox: Any) -> None:
    mailbox.tag("id:plan-1@example.com", add=["todo"])
    retriever = MailRetriever(store=mailbox, k=3)
    documents = retriever.invoke("budget")
    assert 1 <= len(documents) <= 3
    hits = mailbox.search("budget", limit=3)
    assert [d.metadata["messageId"] for d in documents] == [h["messageId"] for h in hits]
    first = next(d for d in documents if d.metadata["messageId"] == "plan-1@example.com")
    message = mailbox.get_message("plan-1@example.com")
    assert first.page_content == message["content"]["forAI"]
    assert first.metadata | {"score": None} == {
        "messageId": "plan-1@example.com",
        "threadId": "plan-1@example.com",
        "from": "Alice Example <alice@example.com>",
        "date": "2026-11-02T08:15:00Z",
        "subject": "Quarterly planning",
        "score": None,
        "tags": ["todo"],
        "hiddenCharactersRemoved": 0,
    }
    crafted = MailRetriever(store=mailbox, k=1, page_content="clean").invoke("invoice today")
    assert crafted and crafted[0].metadata["hiddenCharactersRemoved"] > 0
    assert_no_hidden({"text": crafted[0].page_content, **crafted[0].metadata})
    mailbox.set_embeddings({"plan-1@example.com": toy_embed("budget"), "koeln-1@example.de": toy_embed("köln")})
    semantic = {"k": 1, "search_type": "semantic", "embed": toy_embed}
    assert [d.metadata["messageId"] for d in MailRetriever(store=mailbox, **semantic).invoke("budget")] == [
        "plan-1@example.com"
    ]
    # ainvoke: natively awaited over an AsyncMessageStore (the async flavours), else the sync path
    astore = getattr(mailbox, "_astore", None)
    if astore is None:
        found = asyncio.run(MailRetriever(store=mailbox, **semantic).ainvoke("budget"))
    else:
        found = mailbox._loop.run_until_complete(MailRetriever(store=astore, **semantic).ainvoke("budget"))
        with pytest.raises(TypeError, match="ainvoke"):
            MailRetriever(store=astore).invoke("budget")
    assert [d.metadata["messageId"] for d in found] == ["plan-1@example.com"]


def test_the_loader_yields_one_document_per_thread(mailbox: Any) -> None:
    mailbox.tag("thread:plan-1@example.com", add=["project"])
    documents = ThreadLoader(mailbox, page_size=2).load()
    threads = mailbox.list_threads(limit=100).threads
    assert {d.metadata["threadId"]: d.metadata["tags"] for d in documents}["plan-1@example.com"] == ["project"]
    assert [d.metadata["threadId"] for d in documents] == [t["threadId"] for t in threads]
    plan = next(d for d in documents if d.metadata["threadId"] == "plan-1@example.com")
    assert plan.metadata["messageCount"] == 3 and plan.metadata["messageId"] == "plan-3@example.net"
    assert (
        plan.page_content.index("Hi Bob")
        < plan.page_content.index("Thursday works")
        < plan.page_content.index("storage numbers")
    )
    crafted = next(d for d in documents if d.metadata["threadId"] == ROOT_ID)
    assert crafted.metadata["hiddenCharactersRemoved"] > 0
    assert_no_hidden({"text": crafted.page_content, "subject": crafted.metadata["subject"]})


@pytest.mark.server
def test_a_server_that_fails_is_a_tool_error_the_operator_hears_of_once(
    mailbox: Any, make_tools: Any, failpoints: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The store lets a server's failure through as the driver raised it or as the package's
    ``DatabaseError``; either way the model reads a ToolError and the operator one warning."""
    import logging

    from .helpers.failpoints import failpoint

    tools = make_tools(mailbox)
    failpoint(failpoints, mode={"times": 2}, data={"failCommands": ["find", "aggregate"], "errorCode": 2})
    with caplog.at_level(logging.WARNING, logger="aecs_mongo"):
        for _ in range(2):
            with pytest.raises(ToolError, match=r"the database did not answer \(\w+\); try again later"):
                tools.call("list_messages", {})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "database failed" in r.getMessage()]
    assert len(warnings) == 1
    assert tools.list_messages(limit=5)["mail"]
