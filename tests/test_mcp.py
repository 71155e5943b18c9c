"""``aecs-mongo mcp`` driven by the MCP SDK's own client, as an agent's host drives it.

One server for the module: ``python -m aecs_mongo --data-dir D mcp`` over stdio on the embedded
default, after ``aecs-mongo ingest`` of the shared corpus and the crafted thread that hides text
(tests/helpers/agents.py), with vectors set on a few messages and ``--embedder`` pointing at the
toy embedding, so every tool is listed. Then: the tools listed (read-only: no write tool), every
tool called with results within their caps and nothing hidden left in them, a write refused,
malformed arguments answered as tool errors while the server keeps serving; the HTTP transport
once, with its token and without; and the SDK imported by this command only.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from aecs_mongo import MessageStore
from aecs_mongo.agents import READ_TOOLS, SEMANTIC_SEARCH, SPECS, WRITE_TOOLS
from aecs_mongo.agents.mcp_server import load_token
from aecs_mongo.agents.specs import MAX_ITEMS
from aecs_mongo.embedded.server import EmbeddedServer, embedded_available

from .helpers.agents import (
    CAPS,
    REPLY_ID,
    ROOT_ID,
    SECRET_BCC,
    SENT_ID,
    assert_no_hidden,
    assert_within_caps,
    capped,
    crafted_thread,
    every_read_call,
    hidden_id_message,
    toy_embed,
)
from .helpers.cli import aecs, command_env
from .helpers.mcp_client import McpSession
from .helpers.paths import CORPUS, ROOT

pytestmark = pytest.mark.skipif(not embedded_available(), reason="needs the embedded server (aecs-mongo[embedded])")


def server_env() -> dict[str, str]:
    """The MCP server's environment: no MONGODB_URI (the embedded default), and its server
    stopped with the command (as every command the suite runs)."""
    env = command_env()
    env["AECS_KEEP_SERVER"] = "0"
    return env


def ingest(data_dir: Path, *paths: Path, cwd: Path) -> None:
    """``aecs-mongo ingest`` on the embedded default (the corpus holds one file that is not an
    email: exit 1 with it listed as failed, the rest stored)."""
    done = aecs("--data-dir", str(data_dir), "ingest", "--owner", "alice@example.com", *map(str, paths), cwd=cwd)
    summary = next(line for line in done.stdout.decode().splitlines() if " stored, " in line)  # then the files
    assert done.returncode in (0, 1), summary
    assert int(summary.split(": ")[1].split(" stored")[0]) >= 8, summary


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    work = tmp_path_factory.mktemp("mcp")
    crafted = work / "crafted"
    crafted.mkdir()
    for i, raw in enumerate([*crafted_thread(), hidden_id_message()]):
        (crafted / f"{i}.eml").write_bytes(raw)
    data = work / "data"
    ingest(data, CORPUS if CORPUS.is_dir() else ROOT / "samples" / "mailbox", crafted, cwd=work)
    with EmbeddedServer(data) as server:  # vectors for semantic_search (no command sets them)
        client: MongoClient[dict[str, Any]] = MongoClient(server.uri)
        store = MessageStore(client["aecs"], mailbox_id="default")
        sample = store.list_messages(limit=20).messages
        vectors = {m["messageId"]: toy_embed(m["messageId"]) for m in sample}
        vectors |= {
            ROOT_ID: toy_embed("please pay the invoice today"),
            REPLY_ID: toy_embed("do not pay it looks like phishing"),
            SENT_ID: toy_embed("agreed I will not pay"),
        }
        assert store.set_embeddings(vectors) == len(vectors)
        client.close()
    argv = ["--data-dir", str(data), "mcp", "--embedder", "tests.helpers.agents:toy_embed"]
    mcp = McpSession.stdio(argv, cwd=ROOT, env=server_env())
    yield mcp
    mcp.close()


def data(result: Any) -> dict[str, Any]:
    """A successful call's structured result, the same as its JSON text."""
    assert result.is_error is False, result.content[0].text
    value: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == value
    return value


def refused(result: Any) -> str:
    assert result.is_error is True
    text: str = result.content[0].text
    return text


def test_the_read_tools_are_listed_with_their_schemas(session: McpSession) -> None:
    listed = session.list_tools().tools
    assert [t.name for t in listed] == [s.name for s in (*READ_TOOLS, SEMANTIC_SEARCH)]
    for tool in listed:
        assert tool.input_schema["type"] == "object" and tool.description
        assert "untrusted" in tool.description and "at most" in tool.description
        assert tool.annotations.read_only_hint is True
    assert not {s.name for s in WRITE_TOOLS} & {t.name for t in listed}


def published_caps(tools: Any) -> None:
    """The schemas a server lists are the ones derived from the tools' signatures, and they
    state every cap of every listed tool."""
    listed = {t.name: t.input_schema for t in tools}
    for name, schema in listed.items():
        assert schema == json.loads(json.dumps(SPECS[name].input_schema)), name
    checked = {name for name, _, _ in CAPS if name in listed}
    for name, argument, caps in CAPS:
        if name in listed:
            assert capped(schema=listed[name], argument=argument) == caps, (name, argument)
    assert checked == set(listed)


def test_the_published_schemas_carry_the_caps(session: McpSession) -> None:
    published_caps(session.list_tools().tools)
    for name, arguments, said in [
        ("search", {"query": "x" * 1001}, "argument 'query' is too long (at most 1000 characters)"),
        ("get_thread", {"thread_id": ROOT_ID, "max_chars": 199}, "argument 'max_chars' must be between 200 and 24000"),
        ("get_message", {"message_id": ROOT_ID, "raw_max_bytes": 65_537}, "'raw_max_bytes' must be between 1024 and"),
        ("list_messages", {"limit": 51}, "argument 'limit' must be between 1 and 50"),
        ("semantic_search", {"vector": [1.0] * 8193}, "argument 'vector' must have 1 to 8192 items"),
    ]:
        assert said in refused(session.call(name, arguments)), name


def test_every_tool_answers_within_its_caps_and_hides_nothing(session: McpSession) -> None:
    for name, arguments in every_read_call():
        if name == "list_threads":
            continue  # below: undated corpus mail sorts as recent, so the crafted thread is further down
        result = data(session.call(name, arguments))
        assert_within_caps(name, result)
        assert_no_hidden(result)
        assert result["hiddenCharactersRemoved"] > 0, (name, arguments)
    cursor, pages = None, 0
    while True:
        page = data(session.call("list_threads", {"cursor": cursor, "limit": MAX_ITEMS}))
        assert_within_caps("list_threads", page)
        assert_no_hidden(page)
        pages += 1
        if any(t["threadId"] == ROOT_ID for t in page["mail"]):
            assert page["hiddenCharactersRemoved"] > 0
            break
        cursor = page["nextCursor"]
        assert cursor is not None, "the crafted thread was not listed"
    # the corpus: the message with the most attachments, whole, with its raw source
    listed = data(session.call("list_messages", {"limit": MAX_ITEMS}))
    biggest = max((m for m in listed["mail"] if m["from"]), key=lambda m: m["attachmentCount"])
    message = data(session.call("get_message", {"message_id": biggest["messageId"], "include_raw": True}))
    assert_within_caps("get_message", message)
    assert_no_hidden(message)
    assert len(message["mail"]["attachments"]) == min(biggest["attachmentCount"], 100)
    thread = data(session.call("get_thread", {"thread_id": biggest["threadId"], "max_chars": 1000}))
    assert sum(len(m["text"]) for m in thread["mail"]["messages"]) <= 1000
    participant = data(session.call("with_participant", {"address": biggest["from"]["email"]}))
    assert biggest["messageId"] in [m["messageId"] for m in participant["mail"]] or participant["nextCursor"]
    # the shared view: the owner's bcc recipient appears nowhere
    sent = data(session.call("get_message", {"message_id": SENT_ID, "include_raw": True}))
    assert SECRET_BCC not in json.dumps(sent) and "bcc" not in sent["mail"]


def test_a_write_is_refused_when_read_only(session: McpSession) -> None:
    assert "read-only" in refused(session.call("delete_message", {"message_id": ROOT_ID}))
    assert "read-only" in refused(session.call("store_message", {"raw": "Subject: x\r\n\r\ny"}))
    assert data(session.call("get_message", {"message_id": ROOT_ID}))["mail"]["messageId"] == ROOT_ID


def test_malformed_arguments_are_tool_errors_and_the_server_keeps_serving(session: McpSession) -> None:
    for name, arguments in [
        ("search", {"query": 42}),
        ("search", {"query": {"$regex": ".*"}}),
        ("search", {}),
        ("search", {"query": "x", "limit": 10_000}),
        ("get_thread", {"thread_id": ROOT_ID, "max_chars": "all"}),
        ("get_message", {"message_id": ROOT_ID, "raw_max_bytes": -1}),
        ("list_messages", {"cursor": "not-a-cursor"}),
        ("with_participant", {"address": ["a@b.example"]}),
        ("semantic_search", {"vector": [1.0] * 9000}),
        ("no_such_tool", {}),
    ]:
        assert refused(session.call(name, arguments)), (name, arguments)
    assert data(session.call("search", {"query": "invoice"}))["returned"] >= 1


def test_count_counts_every_match(session: McpSession) -> None:
    """Needs ``store.count`` (the search issue, 31): fails on this branch until it lands."""
    counted = data(session.call("count", {"query": "invoice"}))
    found = data(session.call("search", {"query": "invoice", "limit": MAX_ITEMS}))
    assert counted["count"] == found["returned"] >= 1 and counted["mail"] is None


def test_search_answers_from_the_local_index_as_the_search_command_does(session: McpSession) -> None:
    """One place decides the engine for every surface: on the embedded default the MCP server's
    store has the data directory's local index, as ``aecs-mongo search`` has (it searched with
    the scan engine before, 0.8-0.95 s a call)."""
    found = data(session.call("search", {"query": "invoice"}))
    assert found["engine"] == "local" and found["complete"] is True and found["returned"] >= 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_http_transport_needs_its_token(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingest(data_dir, ROOT / "samples" / "mailbox", cwd=tmp_path)
    printed = aecs("--data-dir", str(data_dir), "mcp", "--print-token", cwd=tmp_path, env=server_env())
    token = printed.stdout.decode().strip()
    assert printed.returncode == 0 and token == load_token(data_dir)[0] and len(token) >= 40
    assert (data_dir / "mcp-token.json").stat().st_mode & 0o777 == 0o600
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = [sys.executable, "-m", "aecs_mongo", "--data-dir", str(data_dir), "mcp", "--http", str(port)]
    server = subprocess.Popen([*argv, "--allow-writes"], cwd=tmp_path, env=server_env(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.2)
        request = urllib.request.Request(
            url, data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', headers={"Content-Type": "application/json"}
        )
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
            for key, value in headers.items():
                request.add_header(key, value)
            with pytest.raises(urllib.error.HTTPError) as refusal:
                urllib.request.urlopen(request, timeout=10)
            assert refusal.value.code == 401
        mcp = McpSession.http(url, token)
        try:
            tools = mcp.list_tools().tools
            names = [t.name for t in tools]
            assert names[-3:] == [s.name for s in WRITE_TOOLS]
            published_caps(tools)
            raw = "From: a@example.com\r\nSubject: over http\r\nMessage-ID: <http-1@example.com>\r\n\r\nhello"
            assert data(mcp.call("store_message", {"raw": raw}))["outcome"] == "stored"
            assert data(mcp.call("get_message", {"message_id": "http-1@example.com"}))["mail"]["text"] == "hello"
            assert data(mcp.call("delete_message", {"message_id": "http-1@example.com"}))["deleted"] is True
            assert data(mcp.call("search", {"query": "budget"}))["returned"] >= 1
        finally:
            mcp.close()
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_only_the_mcp_command_imports_the_sdk() -> None:
    code = (
        "import sys, aecs_mongo.cli; aecs_mongo.cli.build_parser(); heavy = ('mcp', 'langchain_core', 'uvicorn');"
        " print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    helped = aecs("mcp", "--help", cwd=ROOT)
    assert helped.returncode == 0 and b"--http PORT" in helped.stdout and b"--allow-writes" in helped.stdout
