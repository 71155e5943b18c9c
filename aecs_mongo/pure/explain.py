"""Reading ``explain`` output: which index a read used and whether that index gives its order.

Pure functions over the server's reply, shared by ``scripts/bench.py`` (which reports the facts)
and the tests (which assert them). An index provides a sort when its keys after the equality
prefix are the sort keys, in the same or the exactly reversed directions: then mongod stops
after ``limit`` index entries instead of sorting every match in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["plan_facts", "plan_stages", "sort_provided"]


def plan_stages(plan: Any) -> Iterator[Mapping[str, Any]]:
    """Every stage of a plan (any nesting: ``inputStage``, ``inputStages``, shards), depth first."""
    if isinstance(plan, Mapping):
        if "stage" in plan:
            yield plan
        for value in plan.values():
            yield from plan_stages(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from plan_stages(value)


def sort_provided(key_pattern: Mapping[str, Any], selector: Mapping[str, Any], sort: Sequence[tuple[str, int]]) -> bool:
    """Whether an index with ``key_pattern`` returns ``selector``'s matches already in ``sort`` order."""
    clauses = selector.get("$and", [selector])
    equal = {k for c in clauses for k, v in c.items() if not k.startswith("$") and not isinstance(v, dict)}
    rest = [(k, d) for k, d in key_pattern.items() if k not in equal]
    wanted = list(sort)
    forward = rest[: len(wanted)] == wanted
    backward = rest[: len(wanted)] == [(k, -d) for k, d in wanted]
    return bool(wanted) and (forward or backward)


def plan_facts(
    explained: Mapping[str, Any], selector: Mapping[str, Any], sort: Sequence[tuple[str, int]]
) -> dict[str, Any]:
    """The facts the benchmark prints for one explained ``find``."""
    plan = explained["queryPlanner"]["winningPlan"]
    kinds = {s["stage"] for s in plan_stages(plan)}
    ixscans = [s for s in plan_stages(plan) if s["stage"] == "IXSCAN"]
    stats = explained.get("executionStats", {})
    return {
        "index": ixscans[0]["indexName"] if ixscans else None,
        "collscan": "COLLSCAN" in kinds,
        "sortProvidedByIndex": bool(ixscans) and sort_provided(ixscans[0]["keyPattern"], selector, sort),
        "inMemorySortStage": "SORT" in kinds,
        "docsExamined": stats.get("totalDocsExamined"),
        "returned": stats.get("nReturned"),
    }
