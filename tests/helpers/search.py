"""The shared corpus as the search tests use it: raw messages, and each one's text columns."""

from __future__ import annotations

import functools

from aecs_mongo import parse_email
from aecs_mongo.normalizer.html_text import html_text_pieces, html_to_text
from aecs_mongo.pure.documents import build_documents
from aecs_mongo.pure.search_compile import search_columns, search_haystacks

from .budgets import budget
from .paths import CORPUS, require_corpus

#: property-test examples of the query language (AECS_SEARCH_EXAMPLES; 2,000 with CI=true)
SEARCH_EXAMPLES = budget("AECS_SEARCH_EXAMPLES", big=2_000, small=300)


@functools.cache
def corpus_raw() -> tuple[bytes, ...]:
    """Every message of ../shared/corpus/eml, in file-name order (the test skips where it is absent)."""
    require_corpus()
    return tuple(path.read_bytes() for path in sorted(CORPUS.glob("*.eml")))


@functools.cache
def corpus_columns() -> tuple[dict[str, str], ...]:
    """The search columns of each corpus message, as the store would index them."""
    out = []
    for raw in corpus_raw():
        parsed = parse_email(raw)
        docs = build_documents(
            parsed.email, mailbox_id="m", raw_bytes=raw, attachment_data=parsed.attachment_data, raw_from_full=True
        )
        html = next((b.data.decode("utf-8") for b in docs.blobs if b.key.endswith("/body.html")), None)
        out.append(search_columns(docs.message, docs.body, html, html_to_text))
    return tuple(out)


@functools.cache
def corpus_haystacks() -> tuple[dict[str, str | None], ...]:
    """What the scan's ``may_match`` takes for each corpus message (``corpus_columns``' order)."""
    out = []
    for raw in corpus_raw():
        parsed = parse_email(raw)
        docs = build_documents(
            parsed.email, mailbox_id="m", raw_bytes=raw, attachment_data=parsed.attachment_data, raw_from_full=True
        )
        html = next((b.data.decode("utf-8") for b in docs.blobs if b.key.endswith("/body.html")), None)
        out.append(search_haystacks(docs.message, docs.body, "" if html is None else html_text_pieces(html)))
    return tuple(out)
