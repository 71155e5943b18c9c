"""Where the tests find the repository and the shared material beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the repository (its scripts/, samples/, node_modules/)
ROOT = Path(__file__).resolve().parents[2]
#: ``../shared`` beside the repository: DESIGN.md, the AECS-1 spec, the seeds and the corpus
#: (``$AECS_SHARED`` names it elsewhere, for a worktree that has none beside it)
SHARED = Path(os.environ.get("AECS_SHARED") or ROOT.parent / "shared")
#: the real-mail corpus: ``../shared/corpus/eml``, or ``$AECS_CORPUS`` (a checkout elsewhere)
CORPUS = Path(os.environ.get("AECS_CORPUS") or SHARED / "corpus" / "eml")


def require_corpus() -> Path:
    """The corpus directory; skips the calling test, saying why, where it is absent (a fresh
    clone with no ``../shared`` beside it): a test on an empty corpus proves nothing."""
    if not CORPUS.is_dir() or not any(CORPUS.glob("*.eml")):
        pytest.skip(
            f"the real-mail corpus is absent: {CORPUS} (../shared/corpus/eml beside the repository, or $AECS_CORPUS)"
        )
    return CORPUS
