"""Command monitoring for the tests that count what a store sends (the ``recorded`` fixture)."""

from __future__ import annotations

from typing import Any

from pymongo import monitoring

READ_COMMANDS = {"find", "aggregate", "count", "distinct"}
#: what the driver adds to every command: left out where commands are compared or explained
DRIVER_FIELDS = {"$db", "lsid", "$clusterTime", "$readPreference", "txnNumber", "$readConcern", "readConcern"}


class Recorder(monitoring.CommandListener):
    """The reads sent: every read command as sent (``commands``), the find commands less the
    driver's fields (``finds``), and how many documents the server returned in cursor replies
    (``returned``)."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []
        self.finds: list[dict[str, Any]] = []
        self.returned = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in READ_COMMANDS:
            self.commands.append(dict(event.command))
        if event.command_name == "find":
            self.finds.append({k: v for k, v in event.command.items() if k not in DRIVER_FIELDS})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") or {}
        self.returned += len(cursor.get("firstBatch") or cursor.get("nextBatch") or [])

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
