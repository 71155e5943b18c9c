"""The server's ``failCommand`` failpoint (MongoDB's fault injection, which SecantusDB implements)."""

from __future__ import annotations

from typing import Any


def failpoint(client: Any, **data: Any) -> None:
    """``configureFailPoint failCommand`` with ``data`` (``mode="off"`` clears it)."""
    client.admin.command("configureFailPoint", "failCommand", **data)
