"""``mcp``: the mailbox served to LLM agents over the Model Context Protocol, until stopped.

A long-running server, so the handler serves in place and returns an empty ``Output`` when the
client goes away (stdio) or on Ctrl-C (HTTP, exit 130 as for every command). The MCP SDK is
imported here only, when the command runs: other commands start no slower for it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .base import EXIT_USAGE, CliError, Context, Output, note

__all__ = ["mcp"]

INSTALL_HINT = "pip install 'aecs-mongo[mcp]'"


def _embedder(spec: str | None) -> Callable[[str], Sequence[float]] | None:
    """``MODULE:FUNCTION`` imported (the module as ``python -m`` would find it)."""
    if spec is None:
        return None
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--embedder must be MODULE:FUNCTION, not {spec!r}", EXIT_USAGE)
    here = os.getcwd()
    added = here not in sys.path
    if added:  # the console script's path lacks the working directory that python -m has
        sys.path.insert(0, here)
    try:
        function: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"--embedder {spec}: {exc}", EXIT_USAGE) from None
    finally:
        if added:
            sys.path.remove(here)
    if not callable(function):
        raise CliError(f"--embedder {spec} is not a function", EXIT_USAGE)
    embed: Callable[[str], Sequence[float]] = function
    return embed


def mcp(ctx: Context) -> Output:
    args = ctx.args
    try:
        import anyio

        from ..agents import mcp_server
    except ImportError as exc:
        missing = f"the MCP server needs the mcp extra ({exc.name} is missing): {INSTALL_HINT}"
        raise CliError(missing, EXIT_USAGE) from None
    from ..agents import MailTools
    from .stores import open_store

    if args.print_token:
        token, _ = mcp_server.load_token(Path(args.data_dir).resolve())
        return Output({"token": token}, [token])
    # a shared view: whoever reads the agent's answers is not assumed to be the owner (no bcc);
    # the same engine and local index as the other commands (commands/stores.py decides them)
    store = open_store(args, ctx.database, shared_view=True, long_lived=True)
    if args.allow_writes:
        store.ensure_indexes()
    tools = MailTools(store, writable=args.allow_writes, embed=_embedder(args.embedder))
    server = mcp_server.build_server(tools)
    mode = "read and write (--allow-writes)" if args.allow_writes else "read-only"
    if args.http is None:
        note(f"MCP server on stdio: mailbox {args.mailbox!r}, {mode}")
        anyio.run(mcp_server.serve_stdio, server)
        return Output()
    token, path = mcp_server.load_token(Path(args.data_dir).resolve())
    note(
        f"MCP server on http://127.0.0.1:{args.http}/mcp: mailbox {args.mailbox!r}, {mode}; clients send"
        f" 'Authorization: Bearer <token>', the token in {path} (aecs-mongo mcp --print-token)"
    )

    async def serve() -> None:
        await mcp_server.serve_http(server, port=args.http, token=token)

    anyio.run(serve)
    return Output()
