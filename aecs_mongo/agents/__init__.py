"""Mail for LLM agents: tools over one store, and the glue for agent frameworks.

- ``MailTools`` / ``AsyncMailTools`` (``tools``): search, count, get_thread, get_message,
  list_messages, list_threads, with_participant, replies_to, semantic_search (and, made
  ``writable``, store_message and delete_message) as plain calls returning JSON-ready dicts
  within stated caps; ``ToolError`` for every refusal.
- ``specs``: each tool's name, description (written for a model), JSON schema and caps.
- ``mcp_server``: the Model Context Protocol server over the same tools (``aecs-mongo mcp``;
  ``pip install 'aecs-mongo[mcp]'``), imported only where it is used.
- ``langchain``: ``MailRetriever`` and ``ThreadLoader`` for LangChain
  (``pip install 'aecs-mongo[langchain]'``), imported only where it is used.

Mail is untrusted input written by strangers: message-derived text appears only under a
result's ``mail`` field, with the characters that hide text from a person removed and counted
(``aecs_mongo.pure.invisible``).
"""

from __future__ import annotations

from ..errors import ToolError
from .specs import READ_TOOLS, SEMANTIC_SEARCH, SPECS, WRITE_TOOLS, ToolSpec
from .tools import AsyncMailTools, MailTools

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
