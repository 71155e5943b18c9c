"""How much the long tests do: small by default, big where ``CI=true``.

A contributor runs ``bash scripts/test.sh`` many times a day, so by default the property tests
and the crash and concurrency schedules run a budget that finds most regressions in seconds;
CI (``.ci/run`` sets ``CI=true``), or anyone with ``CI=true bash scripts/test.sh``, runs the big
budgets. Each budget's own environment variable overrides both.
"""

from __future__ import annotations

import os

BIG = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def budget(variable: str, *, big: int, small: int) -> int:
    """``$variable`` if set, else ``big`` under ``CI=true`` and ``small`` otherwise."""
    value = os.environ.get(variable, "").strip()
    return int(value) if value else big if BIG else small
