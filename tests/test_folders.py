"""Folders: ``folder:`` reads on their own index, and ``aecs-mongo folder +F -F --
QUERY`` (``store.set_folders`` on the command line, as ``tag`` is ``store.tag``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aecs_mongo.pure.explain import plan_stages

from .helpers.factories import email
from .helpers.monitoring import DRIVER_FIELDS, Recorder

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "mailbox"


@pytest.mark.server
def test_a_folder_read_is_on_the_folders_index(recorded: tuple[Any, Recorder], db: Any) -> None:
    store, recorder = recorded
    store.store_many([email(n, thread=f"t{n % 7}@x") for n in range(60)], tags=["x"])
    store.set_folders([f"m{n}@example.com" for n in range(0, 60, 3)], add=["Archive"])
    recorder.finds.clear()
    hits = store.search("folder:Archive", limit=5)
    assert [h["messageId"] for h in hits] == [f"m{n}@example.com" for n in (57, 54, 51, 48, 45)]
    assert store.count("folder:Archive") == 20
    more = store.search("folder:Archive", limit=5, cursor=hits.next_cursor)  # the next page: the cursor beside
    assert [h["messageId"] for h in more] == [f"m{n}@example.com" for n in (42, 39, 36, 33, 30)]
    finds = [f for f in recorder.finds if f["find"] == "messages"]
    assert len(finds) == 2
    for find in finds:
        statement = {k: v for k, v in find.items() if k not in DRIVER_FIELDS}
        explained = db.command({"explain": statement, "verbosity": "queryPlanner"})
        scans = [s for s in plan_stages(explained["queryPlanner"]["winningPlan"]) if s["stage"] == "IXSCAN"]
        assert [s["indexName"] for s in scans] == ["aecs_messages_folders"], explained["queryPlanner"]["winningPlan"]
        assert "COLLSCAN" not in {s["stage"] for s in plan_stages(explained)}


@pytest.mark.server
@pytest.mark.one_server
def test_the_folder_command(cli: Any) -> None:
    assert cli("ingest", str(SAMPLES)).code == 0
    n = int(cli("count", "plan").out)
    assert n > 1 and cli("count", "folder:INBOX").out.strip() == "0"  # .eml files: no folder
    filed = cli("folder", "+INBOX", "--", "plan")
    assert filed.code == 0 and filed.out == f"{n} messages matched, {n} changed\n"
    dry = cli("folder", "+Archive", "-INBOX", "--dry-run", "--", "folder:INBOX")
    assert dry.code == 0 and dry.out == f"{n} messages match; {n} would change (dry run: nothing written)\n"
    assert cli("count", "folder:Archive").out.strip() == "0"
    report = cli("folder", "+Archive", "-INBOX", "--json", "--", "folder:INBOX").json()
    assert report == {
        "query": "folder:INBOX",
        "add": ["Archive"],
        "remove": ["INBOX"],
        "matched": n,
        "changed": n,
        "dryRun": False,
    }
    assert cli("count", "folder:Archive").out.strip() == str(n) and cli("count", "folder:INBOX").out.strip() == "0"
    assert ", 0 changed" in cli("folder", "+Archive", "-INBOX", "--", "plan").out  # re-running changes nothing
    # a name keeps its case and may hold spaces (one shell word)
    assert cli("folder", "+Sent Items", "--", "folder:Archive").out.endswith(f"{n} changed\n")
    assert cli("count", 'folder:"Sent Items"').out.strip() == str(n)
    assert cli("count", "folder:archive").out.strip() == "0"  # folders are not lowercased
    assert cli("folder", "+x").code == 2  # no query
    assert cli("folder", "+bad\x01name", "--", "plan").code == 2  # a control character
    assert cli("folder", "--", "plan").out.endswith("0 would change (dry run: nothing written)\n")
    helped = cli("folder", "--help")
    assert helped.code == 0 and "+FOLDER" in helped.out and "--dry-run" in helped.out
