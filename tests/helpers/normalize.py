"""What the normalizer tests (tests/test_normalize*.py) share: the fixed processing time, ``parse``
at that time, and the AECS-1 schema they validate against (its ``validator`` fixture is in conftest)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aecs_mongo.normalizer import ParsedEmail, parse_email

from .paths import SHARED

#: the shared AECS-1 specification: its schema and conformance fixtures
SPEC = SHARED / "aecs-spec"
SCHEMA = SPEC / "normalized-email.schema.json"
#: the ``processing.processedAt`` the tests parse at, so two parses compare equal
PROCESSED = "2026-01-02T03:04:05Z"


def parse(raw: bytes, **kwargs: Any) -> ParsedEmail:
    """``parse_email`` at ``PROCESSED``."""
    return parse_email(raw, processed_at=PROCESSED, **kwargs)


def aecs1_schema() -> dict[str, Any] | None:
    """The shared AECS-1 schema plus ``processing.cleanFallback``; None where the shared copy is absent.

    The shared copy is the 1.0 schema; AECS-1 1.1 (§4.6, rule 6 of §4.3.1) adds the optional
    boolean ``processing.cleanFallback``, which this normalizer always emits.
    """
    if not SCHEMA.is_file():
        return None
    schema: dict[str, Any] = json.loads(SCHEMA.read_text())
    schema["$defs"]["processing"]["properties"].setdefault("cleanFallback", {"type": "boolean"})
    return schema


def load_validator() -> Any:
    """A validator for ``aecs1_schema()``; skips the test where jsonschema or the schema is missing."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = aecs1_schema()
    if schema is None:
        pytest.skip(f"AECS-1 schema not found at {SCHEMA}")
    return jsonschema.Draft202012Validator(schema)
