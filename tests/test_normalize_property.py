"""Property tests: arbitrary and mail-shaped bytes never break the normalizer.

Example counts come from a Hypothesis settings profile chosen with ``AECS_NORMALIZE_PROFILE``:
``normalize-ci`` (2000 examples per property; the default with ``CI=true``), ``normalize-quick``
(200; the default otherwise, see tests/helpers/budgets.py) and
``normalize-deep`` (20000; run on demand). Profiles are applied per test, so the rest of the
suite's Hypothesis settings are untouched.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aecs_mongo.errors import InputTooLargeError
from aecs_mongo.normalizer import parse_email

from .helpers.budgets import BIG
from .helpers.normalize import aecs1_schema

# CI runs the same examples every time; elsewhere they vary
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": bool(os.environ.get("CI"))}
settings.register_profile("normalize-quick", max_examples=200, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("normalize-ci", max_examples=2000, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("normalize-deep", max_examples=20000, **_COMMON)  # type: ignore[arg-type]
# without CI=true (tests/helpers/budgets.py) the quick profile: a contributor runs the suite many times a day
PROFILE = settings.get_profile(os.environ.get("AECS_NORMALIZE_PROFILE", "normalize-ci" if BIG else "normalize-quick"))

_validator: Any = None


def validator() -> Any:
    global _validator
    if _validator is None:
        import jsonschema

        schema = aecs1_schema()
        _validator = False if schema is None else jsonschema.Draft202012Validator(schema)
    return _validator


def check(raw: bytes) -> None:
    parsed = parse_email(raw, processed_at="2026-01-02T03:04:05Z", max_body_bytes=None)
    email = parsed.email
    assert email["messageId"] and email["threadId"]
    json.dumps([email, parsed.defects, parsed.list_id], ensure_ascii=False).encode("utf-8")  # BSON-safe text
    assert len(parsed.attachment_data) == len(email["attachments"])
    ids = [a["id"] for a in email["attachments"]]
    assert ids == [f"{email['messageId']}:{i}" for i in range(len(ids))]
    if email["content"]["forAI"] is not None:
        assert len(email["content"]["forAI"]) <= 8000
    v = validator()
    if v:
        errors = [f"{list(e.path)}: {e.message}" for e in v.iter_errors(email)]
        assert errors == []


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings() -> Any:
    logger = logging.getLogger("aecs_mongo.normalizer")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@settings(PROFILE)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(raw: bytes) -> None:
    check(raw)


_HEADER_NAMES = st.sampled_from(
    ["From", "To", "Cc", "Bcc", "Subject", "Date", "Message-ID", "In-Reply-To", "References", "List-Id",
     "Content-Type", "Content-Transfer-Encoding", "Content-Disposition", "Content-ID", "MIME-Version", "X-Junk"]
)  # fmt: skip
_ATOMS = st.sampled_from(
    [b"<a@b.c>", b"a@b.c", b"\"Q, uoted\" <q@x.y>", b"=?utf-8?q?=C3=A9t=C3=A9?=", b"=?bogus?b?////?=",
     b"=?utf-8?b?", b"multipart/mixed; boundary=\"b\"", b"text/html; charset=koi8-r", b"base64",
     b"quoted-printable", b"attachment; filename*=utf-8''%E2%9C%94", b"Mon, 1 Jan 2001 10:00:00 +0100",
     b"2026-01-01T00:00:00Z", b"(comment)", b"<", b">", b"@", b",", b";", b"\r\n ", b"\xff\xfe", b"\x00",
     b"undisclosed-recipients:;", b"--b", b"--b--", b"text/plain; charset=utf-16"]
)  # fmt: skip
_VALUES = st.lists(st.one_of(_ATOMS, st.binary(max_size=12)), max_size=6).map(b"".join)
_HEADERS = st.lists(st.tuples(_HEADER_NAMES, _VALUES), max_size=12)
_BODY_ATOMS = [
    b"--b", b"--b--", b"Content-Type: text/plain", b"Content-Type: text/html", b"Content-Type: message/rfc822",
    b"Content-Type: multipart/alternative; boundary=c", b"--c", b"--c--", b"Content-Transfer-Encoding: base64",
    b"", b"> quoted", b"On Mon, A wrote:", b"-- ", b"Sent from my iPhone", b"-----Original Message-----",
    b"From: x@y", b"Sent: today", b"<p>hi<blockquote>q</blockquote>", b"=C3=A9=", b"SGVsbG8=",
]  # fmt: skip
_BODY_LINES = st.lists(st.one_of(st.sampled_from(_BODY_ATOMS), st.binary(max_size=40)), max_size=30)


@settings(PROFILE)
@given(_HEADERS, _BODY_LINES, st.sampled_from([b"\r\n", b"\n"]))
def test_mail_shaped_bytes(headers: list[tuple[str, bytes]], body: list[bytes], eol: bytes) -> None:
    raw = b"".join(name.encode() + b": " + value + eol for name, value in headers) + eol + eol.join(body)
    check(raw)


@settings(PROFILE)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=63))
def test_only_the_documented_error_for_oversized_input(raw: bytes, limit: int) -> None:
    if len(raw) > limit:
        with pytest.raises(InputTooLargeError):
            parse_email(raw, max_body_bytes=limit)
    else:
        assert parse_email(raw, max_body_bytes=limit).email["messageId"]
