"""aecs-mongo: store AECS-1 email in MongoDB and keep it findable.

The public API is what this module exports; everything else is an implementation detail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .aio import AsyncMessageStore
from .errors import (
    AecsMongoError,
    DocumentTooLargeError,
    InputTooLargeError,
    InvalidCursorError,
    InvalidEmailError,
    NotFoundError,
    ServerFeatureError,
    UnsafeFieldNameError,
)
from .indexes import IndexReport
from .results import MessagePage, StoreResult, ThreadPage
from .store import MessageStore

if TYPE_CHECKING:
    from .normalize import ParsedEmail

__version__ = "0.1.0"

__all__ = [
    "AecsMongoError",
    "AsyncMessageStore",
    "DocumentTooLargeError",
    "IndexReport",
    "InputTooLargeError",
    "InvalidCursorError",
    "InvalidEmailError",
    "MessagePage",
    "MessageStore",
    "NotFoundError",
    "ParsedEmail",
    "ServerFeatureError",
    "StoreResult",
    "ThreadPage",
    "UnsafeFieldNameError",
    "__version__",
    "normalize",
    "parse_email",
]


def __getattr__(name: str) -> Any:
    # the normalizer is imported on first use: storing NormalizedEmail dicts does not need it
    if name in ("normalize", "parse_email", "ParsedEmail"):
        from . import normalize as _normalize_pkg

        return getattr(_normalize_pkg, name)
    raise AttributeError(f"module 'aecs_mongo' has no attribute {name!r}")
