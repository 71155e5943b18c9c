"""Variants: other bytes under a Message-ID already stored.

A message delivered again with different bytes (a list footer, a relay's header) keeps its first
copy; the store keeps the others beside it, once each, under the message's blob prefix. These
are the I/O-free pieces: where a copy's bytes go, the one atomic update that records a copy, and
the order a batch's copies take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .dialect import CAUTIOUS, Dialect

__all__ = ["variant_blob_key", "variant_record_update", "variants_in_batch_order"]


def variant_blob_key(blob_prefix: str, sha256: str) -> str:
    """Where another copy's bytes are kept: under the message's prefix, so ``delete`` takes it."""
    return f"{blob_prefix}variants/{sha256}.eml"


def variant_record_update(record: Mapping[str, Any], dialect: Dialect = CAUTIOUS) -> list[dict[str, Any]]:
    """The pipeline that records one copy (``record``, whose ``sha256`` names its bytes) on the
    stored message, unless a record of those bytes is there: the record is appended to
    ``variants`` and its hash to ``variantHashes`` (unless a claim that a crash left without its
    record holds it already). One atomic statement, so of concurrent writers of the same bytes
    exactly one records them: the one whose update modified the document. Its filter is the
    ``_id`` alone (``AsyncStoreContext.by_id``), which every server answers by index.
    ``dialect``: how the server tests an array's members (by default the form every server runs).
    """
    sha = {"$literal": record["sha256"]}
    recorded = dialect.member_test("variants", "sha256", sha)  # as the server tests an array's members
    hashes = {"$ifNull": ["$variantHashes", []]}
    claimed = {"$in": [sha, hashes]}
    with_hash = {"$cond": [claimed, "$variantHashes", {"$concatArrays": [hashes, {"$literal": [record["sha256"]]}]}]}
    with_record = {"$concatArrays": [{"$ifNull": ["$variants", []]}, {"$literal": [dict(record)]}]}
    return [
        {
            "$set": {
                "variantHashes": {"$cond": [recorded, "$variantHashes", with_hash]},
                "variants": {"$cond": [recorded, "$variants", with_record]},
            }
        }
    ]


def variants_in_batch_order(
    variants: Sequence[Mapping[str, Any]], hashes: Sequence[str], batch: Sequence[str]
) -> tuple[list[Mapping[str, Any]], list[str]] | None:
    """A message's ``variants`` and ``variantHashes`` with the copies of one batch (``batch``:
    their hashes, in the batch's order) last and in that order, as a clean delivery of the batch
    leaves them; None when they are so already. For the pass after a server restart, which
    records a copy the restart took after copies the batch had recorded behind it."""
    mine = set(batch)
    records = {v.get("sha256"): v for v in variants}
    ordered = [v for v in variants if v.get("sha256") not in mine]
    ordered += [records[sha] for sha in dict.fromkeys(batch) if sha in records]
    ordered_hashes = [h for h in hashes if h not in mine] + [sha for sha in dict.fromkeys(batch) if sha in hashes]
    if [v.get("sha256") for v in ordered] == [v.get("sha256") for v in variants] and ordered_hashes == list(hashes):
        return None
    return ordered, ordered_hashes
