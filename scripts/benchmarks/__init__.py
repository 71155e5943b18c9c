"""The sections of ``scripts/bench.py``, one module each.

A section module has ``NAME`` (what ``--sections`` names), ``DEFAULT`` (in the default list or
not), ``add_arguments(parser)`` (its own options, each prefixed with its name) and
``run(ctx) -> dict`` (prints its tables; returns what goes into the JSON report, by key). It
imports :mod:`benchmarks.common` and nothing else of the bench: never ``bench`` nor another
section. Add one: write the module, then add it to ``SECTIONS`` in ``scripts/bench.py``.
"""

import sys
from pathlib import Path

_SCRIPTS = Path(__file__).resolve().parents[1]
for _path in (str(_SCRIPTS.parent), str(_SCRIPTS)):  # the repository (aecs_mongo, tests) and gen_mbox
    if _path not in sys.path:
        sys.path.insert(0, _path)
