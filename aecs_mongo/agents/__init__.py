"""Mail for LLM agents: tools over one store, and the glue for agent frameworks.

- ``MailTools`` / ``AsyncMailTools``: search, count, get_thread, get_message, list_messages,
  list_threads, with_participant, replies_to, semantic_search (and, made ``writable``,
  store_message, delete_message and tag_messages) as plain calls returning JSON-ready dicts
  within stated caps; ``ToolError`` for every refusal. Written once over the async store
  (``asynchronous/tools.py``); the sync class is its generated twin.
- ``SPECS``: each tool's name, description (written for a model), JSON schema and caps, derived
  from the tools' typed signatures and docstrings (``specs``).
- ``mcp_server``: the Model Context Protocol server over the same tools (``aecs-mongo mcp``;
  ``pip install 'aecs-mongo[mcp]'``), imported only where it is used.
- ``langchain``: ``MailRetriever`` and ``ThreadLoader`` for LangChain
  (``pip install 'aecs-mongo[langchain]'``), imported only where it is used.

The tools check their arguments with pydantic (``pip install 'aecs-mongo[agents]'``; the
``mcp`` and ``langchain`` extras bring it too). Mail is untrusted input written by strangers:
message-derived text appears only under a result's ``mail`` field, with the characters that
hide text from a person removed and counted (``aecs_mongo.pure.invisible``).
"""

from __future__ import annotations

try:
    import pydantic  # noqa: F401  (the tools' argument checks: said here, where it is missed)
except ImportError as exc:
    raise ImportError("aecs_mongo.agents needs pydantic: pip install 'aecs-mongo[agents]'", name=exc.name) from exc

from ..errors import ToolError
from .asynchronous.tools import AsyncMailTools
from .specs import ToolSpec
from .synchronous.tools import MailTools
from .tools import grouped

__all__ = [
    "READ_TOOLS",
    "SEMANTIC_SEARCH",
    "SPECS",
    "WRITE_TOOLS",
    "AsyncMailTools",
    "MailTools",
    "ToolError",
    "ToolSpec",
]

#: every tool by name
SPECS: dict[str, ToolSpec] = dict(AsyncMailTools.table)
READ_TOOLS, SEMANTIC_SEARCH, WRITE_TOOLS = grouped(SPECS)
