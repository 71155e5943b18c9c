"""Raw RFC 5322 bytes -> AECS-1 NormalizedEmail: headers, threading, dates, content levels.

Pure functions, no I/O. :func:`parse_email` returns a :class:`ParsedEmail` (the
NormalizedEmail dict, attachment bytes, parse defects, the List-Id); :func:`normalize`
returns just the dict. The threading (AECS-1 §5), date (§6) and content (§4.3.1) rules are
exposed as functions too.
"""

from __future__ import annotations

from .content import clean_text, make_for_ai, normalize_text, strip_quoted_chains, strip_signature
from .dates import NormalizedDate, format_utc, parse_date
from .headers import decode_header_value, normalize_list_id, parse_addresses, subject_key
from .html_text import html_to_text
from .message_ids import (
    compute_thread_id,
    fallback_thread_id,
    generated_message_id,
    is_valid_message_id,
    normalize_message_id,
    parse_references,
)
from .parse import (
    DEFAULT_MAX_BODY_BYTES,
    SPEC_VERSION,
    ParsedEmail,
    normalize,
    parse_email,
    raw_full_from_bytes,
    raw_full_to_bytes,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "SPEC_VERSION",
    "NormalizedDate",
    "ParsedEmail",
    "clean_text",
    "compute_thread_id",
    "decode_header_value",
    "fallback_thread_id",
    "format_utc",
    "generated_message_id",
    "html_to_text",
    "is_valid_message_id",
    "make_for_ai",
    "normalize",
    "normalize_list_id",
    "normalize_message_id",
    "normalize_text",
    "parse_addresses",
    "parse_date",
    "parse_email",
    "parse_references",
    "raw_full_from_bytes",
    "raw_full_to_bytes",
    "strip_quoted_chains",
    "strip_signature",
    "subject_key",
]
