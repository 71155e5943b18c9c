"""An MCP client session (the SDK's own ``mcp.Client``) that sync tests can share.

``McpSession(argv, cwd=..., env=...)`` starts ``python -m aecs_mongo <argv>`` as an MCP server
over stdio, the way a desktop client does, and keeps one session open on an event loop of its
own (anyio's blocking portal) until ``close()``: ``list_tools()`` and ``call(name, arguments)``
block until the server answers. ``http_session(url, token)`` does the same over streamable HTTP.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import httpx2
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


class McpSession:
    """One client session with an MCP server, used from sync code."""

    def __init__(self, target: Any) -> None:
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            self._client = self._stack.enter_context(self._portal.wrap_async_context_manager(Client(target)))
        except BaseException:
            self._stack.close()
            raise

    @classmethod
    def stdio(cls, argv: list[str], *, cwd: Path, env: dict[str, str]) -> McpSession:
        return cls(StdioServerParameters(command=sys.executable, args=["-m", "aecs_mongo", *argv], cwd=cwd, env=env))

    @classmethod
    def http(cls, url: str, token: str | None) -> McpSession:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return cls(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)))

    def list_tools(self) -> Any:
        return self._portal.call(self._client.list_tools)

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return self._portal.call(self._client.call_tool, name, arguments)

    def close(self) -> None:
        self._stack.close()
