"""A raw message kept once: its MIME structure, with each large encoded body taken out. Pure.

The octets of an attachment appear in a raw message only in their transfer encoding (base64,
mostly). Kept as they are, and decoded again beside them, every attachment was stored twice,
and every copy of the same attachment (a thread that forwards a contract back and forth) again.
Here a raw message becomes a *pack*: the message with every encoded body of at least
:data:`PART_MIN_BYTES` cut out, plus the cut bodies, each a *part* named by the SHA-256 of its
encoded octets. The store keeps a part once per mailbox (``parts/<sha256>`` under the
mailbox's blob root) and never shares one between mailboxes. Putting the parts back at their
offsets gives the original octets exactly, so signatures over the message stay verifiable.

A pack is :data:`PACK_MAGIC`, one line of JSON (``{"size": N, "parts": [[at, length, sha256],
...]}``: where each part goes in the whole message), and the remaining octets in order.

An attachment's decoded bytes are derived from its encoded octets (``transfer_encoding.py``),
so each attachment's :class:`Span` says where they are in the whole message and, when taken
out, which part holds them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PACK_CONTENT_TYPE",
    "PACK_MAGIC",
    "PART_MIN_BYTES",
    "PackError",
    "RawLayout",
    "Span",
    "assemble",
    "pack_parts",
    "split_raw",
]

PACK_MAGIC = b"AECS-RAW-PACK/1\n"
PACK_CONTENT_TYPE = "application/x-aecs-raw-pack"
#: encoded bodies at least this long are taken out into parts; shorter ones stay in the pack,
#: where a part's own blob (its key, its record, a file's block) would weigh more than it saves
PART_MIN_BYTES = 16 * 1024


class PackError(ValueError):
    """A pack or a part does not hold what the pack says (truncated, another part's bytes)."""


@dataclass(frozen=True)
class Span:
    """Where one attachment's encoded body is in the whole raw message (``[start, end)``), its
    transfer encoding, and the part that holds it when taken out (None: in the pack)."""

    start: int
    end: int
    encoding: str
    sha256: str | None = None

    def as_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"start": self.start, "end": self.end, "encoding": self.encoding}
        if self.sha256 is not None:
            doc["part"] = self.sha256
        return doc


@dataclass(frozen=True)
class RawLayout:
    """How one raw message is kept: ``pack`` (None: nothing was taken out, keep it whole), its
    ``parts`` by SHA-256, and each attachment's :class:`Span` (None where its encoded body is
    not found in the message as one run of octets, e.g. inside a forwarded message that is
    itself base64-encoded)."""

    pack: bytes | None
    parts: dict[str, bytes] = field(default_factory=dict)
    spans: list[Span | None] = field(default_factory=list)


def split_raw(
    raw: bytes, encoded: Sequence[tuple[bytes, str]], *, take_out: bool = True, min_bytes: int = PART_MIN_BYTES
) -> RawLayout:
    """Find each attachment's encoded body in ``raw`` (in MIME order, each after the last) and,
    with ``take_out``, cut those of at least ``min_bytes`` out into parts."""
    spans: list[Span | None] = []
    cuts: list[tuple[int, int, str]] = []
    parts: dict[str, bytes] = {}
    cursor = 0
    for body, encoding in encoded:
        start = raw.find(body, cursor) if body else -1
        if start < 0:
            spans.append(None)
            continue
        end = start + len(body)
        cursor = end
        sha = None
        if take_out and len(body) >= min_bytes:
            sha = hashlib.sha256(body).hexdigest()
            parts.setdefault(sha, bytes(body))
            cuts.append((start, end, sha))
        spans.append(Span(start, end, encoding, sha))
    if not cuts:
        return RawLayout(None, {}, spans)
    header = {"size": len(raw), "parts": [[start, end - start, sha] for start, end, sha in cuts]}
    pieces = [PACK_MAGIC, json.dumps(header, separators=(",", ":")).encode("ascii"), b"\n"]
    at = 0
    for start, end, _ in cuts:
        pieces.append(raw[at:start])
        at = end
    pieces.append(raw[at:])
    return RawLayout(b"".join(pieces), parts, spans)


def _header(pack: bytes) -> tuple[dict[str, Any], int]:
    if not pack.startswith(PACK_MAGIC):
        raise PackError("not a raw-message pack")
    newline = pack.find(b"\n", len(PACK_MAGIC))
    if newline < 0:
        raise PackError("a raw-message pack without its header line")
    try:
        header = json.loads(pack[len(PACK_MAGIC) : newline])
    except ValueError:
        raise PackError("a raw-message pack with a header that is not JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("parts"), list):
        raise PackError("a raw-message pack with a header that names no parts")
    return header, newline + 1


def pack_parts(pack: bytes) -> list[str]:
    """The SHA-256 of every part a pack needs, in order, each once."""
    header, _ = _header(pack)
    return list(dict.fromkeys(str(entry[2]) for entry in header["parts"]))


def assemble(pack: bytes, parts: Mapping[str, bytes]) -> bytes:
    """The whole raw message of ``pack``, its ``parts`` put back; a :class:`PackError` where a
    part is missing, is not what its name says, or the result is not the recorded size."""
    header, body_at = _header(pack)
    out: list[bytes] = []
    at = 0  # in the whole message
    read = body_at  # in the pack
    checked: set[str] = set()
    for entry in header["parts"]:
        start, length, sha = int(entry[0]), int(entry[1]), str(entry[2])
        data = parts.get(sha)
        if data is None:
            raise PackError(f"part {sha} is missing")
        if sha not in checked:
            if len(data) != length or hashlib.sha256(data).hexdigest() != sha:
                raise PackError(f"part {sha} does not hold the octets it is named by")
            checked.add(sha)
        between = start - at
        if between < 0 or read + between > len(pack):
            raise PackError("a raw-message pack whose parts overlap or run past its end")
        out.append(pack[read : read + between])
        out.append(data)
        read += between
        at = start + length
    out.append(pack[read:])
    whole = b"".join(out)
    if len(whole) != header.get("size"):
        raise PackError(f"a raw-message pack gives {len(whole)} octets, not the {header.get('size')} it recorded")
    return whole
