"""Where the tests find the repository and the shared material beside it."""

from __future__ import annotations

import os
from pathlib import Path

#: the repository (its scripts/, samples/, node_modules/)
ROOT = Path(__file__).resolve().parents[2]
#: ``../shared`` beside the repository: DESIGN.md, the AECS-1 spec, the seeds and the corpus
#: (``$AECS_SHARED`` names it elsewhere, for a worktree that has none beside it)
SHARED = Path(os.environ.get("AECS_SHARED") or ROOT.parent / "shared")
