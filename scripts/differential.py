"""Differential test of the normalizer against independent parsers, field by field.

Two kinds of reference:

* postal-mime (npm devDependency, the parser of the TypeScript AECS-1 reference), run under node
  over every corpus file by ``scripts/postal_mime_json.mjs``. Always available where node is.
* The expected outputs other parsers publish with their own tests, for the corpus files that
  came from them: stalwart mail-parser (``resources/eml/**/*.json``), Apache mime4j
  (``testmsgs/*_decoded.xml`` and the decoded body files) and MimeKit (``mbox/*-summary.txt``).
  They are committed, unmodified and with their licenses, in ``tests/published_expected``
  (``--expected DIR`` reads another copy), laid out as ``DIR/<source>/<path in that
  repository>``. ``--extract-from-git stalwart=GITDIR`` fills that layout from a clone, at the
  commits ``manifest.tsv`` names.

Each reference is projected onto the AECS-1 fields it actually publishes (a field it does not
publish for a file is not compared), and so is our output; values are compared after light
canonicalization: whitespace runs collapsed, addresses lowercased, dates as UTC instants,
Message-IDs without angle brackets (our synthetic id counts as none). Disagreements already judged
(``JUDGED``: the reference is wrong, or the spec tells us to differ) are reported apart.

    python scripts/differential.py                  # table + every disagreement
    python scripts/differential.py --json           # the same as JSON
    python scripts/differential.py --print-pins     # the floor dict for tests/test_differential.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
# The published expected outputs: $AECS_DIFFERENTIAL_EXPECTED, else the committed copies.
EXPECTED = Path(os.environ.get("AECS_DIFFERENTIAL_EXPECTED") or ROOT / "tests" / "published_expected")
NODE_HELPER = ROOT / "scripts" / "postal_mime_json.mjs"

# Compared pairs: field -> (ours, theirs); a field missing from the dict is not published.
Pairs = dict[str, tuple[Any, Any]]

# Fields in report order (a source reports only those it publishes).
FIELDS = [
    "subject",
    "from.address",
    "from.name",
    "to.addresses",
    "cc.addresses",
    "date",
    "messageId",
    "attachments.count",
    "attachments.filenames",
    "attachments.contentTypes",
    "attachments.sizes",
    "attachments.named.filenames",
    "attachments.named.contentTypes",
    "attachments.named.sizes",
    "attachments.nonTextTypes",
    "text",
    "html",
]

# Disagreements judged by a person: (source, corpus file, field) -> why ours is right or why the
# difference is expected. They are reported apart and do not count as disagreements.
JUDGED: dict[tuple[str, str, str], str] = {
    ("mimekit", "mimekit__content-length.mbox.txt.0022.eml", "date"): (
        "zone 'cst': RFC 5322 §4.3 obs-zone CST is -0600 and ABNF literals are case-insensitive; "
        "MimeKit reads the lowercase name as +0000"
    ),
    ("stalwart", "stalwart__eml_thirdparty_000.eml", "text"): (
        "ours removes NUL and other C0 controls from text on purpose (normalizer/parse.py); stalwart keeps U+0000"
    ),
    ("postal-mime", "flanker__from-encoding.eml", "from.name"): (
        "raw 8-bit 0xFC in a header is not UTF-8: ours falls back to windows-1252 (ü) as mail clients do; "
        "postal-mime substitutes U+FFFD"
    ),
    ("postal-mime", "flanker__spam_broken-headers.eml", "subject"): (
        "raw 8-bit 0x85 in a header is not UTF-8: ours falls back to windows-1252 (…); postal-mime gives U+FFFD"
    ),
    ("postal-mime", "spamassassin__nice_cjk_gb2312.1.eml", "subject"): (
        "raw 8-bit GB2312 header: ours decodes it to readable Chinese, postal-mime to mojibake"
    ),
    ("postal-mime", "spamassassin__nice_cjk_gb2312.1.eml", "from.name"): (
        "raw 8-bit GB2312 header: ours decodes it to readable Chinese, postal-mime to mojibake"
    ),
    ("postal-mime", "spamassassin__nice_unicode1.eml", "subject"): (
        "encoded-word with an RFC 2231 §5 language tag (iso-8859-2*sl): ours decodes it, postal-mime garbles it"
    ),
}


def _invalid_message_id(value: object) -> bool:
    """AECS-1 §5.1: valid means exactly one '@' with something on each side."""
    if not isinstance(value, str):
        return False
    local, at, domain = value.partition("@")
    return not (at and local and domain and "@" not in domain)


_ATTACHMENT_FIELDS = frozenset(
    {"attachments.count", "attachments.filenames", "attachments.contentTypes", "attachments.sizes"}
)


def _parsed_in_place(context: dict[str, Any]) -> bool:
    """The reference has more message/rfc822 parts that our normalizer parses in place than we kept."""
    ours_kept: int = context["_ours"]["attachments.contentTypes"].count("message/rfc822")
    return int(context.get("_rfc822_inline", 0)) > ours_kept


def _adds_to(ours: Any, theirs: Any) -> bool:
    """Our text holds theirs and more (a forwarded message's text joined to the body)."""
    return isinstance(ours, str) and (theirs is None or (isinstance(theirs, str) and theirs in ours))


@dataclass(frozen=True)
class Rule:
    """A judgment by rule: for these sources and fields, when ``test(ours, theirs, context)``
    holds. ``context`` holds what a loader saw beyond the compared fields (keys starting "_")
    and our projected fields (``context["_ours"]``)."""

    sources: frozenset[str]
    fields: frozenset[str]
    test: Callable[[Any, Any, dict[str, Any]], bool]
    reason: str


JUDGED_RULES: list[Rule] = [
    Rule(
        frozenset({"postal-mime", "stalwart", "mime4j", "mimekit"}),
        frozenset({"messageId"}),
        lambda ours, theirs, context: ours is None and _invalid_message_id(theirs),
        "not a valid Message-ID by AECS-1 §5.1, so ours is synthetic; the reference keeps it",
    ),
    Rule(
        frozenset({"stalwart"}),
        _ATTACHMENT_FIELDS,
        lambda ours, theirs, context: _parsed_in_place(context),
        "a message/rfc822 part without attachment disposition, outside a report, is a forwarded "
        "message parsed in place; stalwart keeps every message/rfc822 part as one attachment",
    ),
    Rule(
        frozenset({"stalwart"}),
        frozenset({"text", "html"}),
        lambda ours, theirs, context: _parsed_in_place(context) and _adds_to(ours, theirs),
        "a forwarded message parsed in place joins its text to the body; stalwart's body leaves it out",
    ),
    Rule(
        frozenset({"mime4j"}),
        frozenset({"text"}),
        lambda ours, theirs, context: bool(context.get("_rfc822_inline")) and _adds_to(ours, theirs),
        "a forwarded message parsed in place: our text adds its header summary to the parts' text",
    ),
]

# Source name -> the repository its corpus files came from (manifest.tsv, column repo).
REPOS = {
    "stalwart": "stalwartlabs/mail-parser",
    "mime4j": "apache/james-mime4j",
    "mimekit": "jstedfast/MimeKit",
}
PUBLISHED_SOURCES = list(REPOS)
ALL_SOURCES = ["postal-mime", *PUBLISHED_SOURCES]


@dataclass(frozen=True)
class CorpusFile:
    name: str
    repo: str
    commit: str
    path: str
    mbox_part: int | None


# ---------------------------------------------------------------- canonical forms


def text_form(value: object) -> str | None:
    """Whitespace runs collapsed: line endings, wrapping and indentation are not what we test."""
    if not isinstance(value, str):
        return None
    collapsed = " ".join(value.split())
    return collapsed or None


def address_form(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().lower()


def message_id_form(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1].strip()
    return value or None


def instant(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- our side


@dataclass
class Ours:
    """Our normalized output, projected once onto the canonical fields."""

    email: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        meta = self.email.get("metadata") or {}
        sender = meta.get("from") or {}
        attachments = self.email.get("attachments") or []
        message_id = self.email.get("messageId")
        if isinstance(message_id, str) and message_id.startswith("generated-") and message_id.endswith("@aecs.local"):
            message_id = None
        content = self.email.get("content") or {}
        self.facts = {
            "subject": text_form(meta.get("subject")),
            "from.address": address_form(sender.get("email")),
            "from.name": text_form(sender.get("name")),
            "to.addresses": [address_form(a.get("email")) for a in meta.get("to") or []],
            "cc.addresses": [address_form(a.get("email")) for a in meta.get("cc") or []],
            "date": meta.get("date"),
            "messageId": message_id_form(message_id),
            "attachments.count": len(attachments),
            "attachments.filenames": [a["filename"] for a in attachments],
            "attachments.contentTypes": [a["contentType"].lower() for a in attachments],
            "attachments.sizes": [a["size"] for a in attachments],
            "text": text_form(content.get("text")),
            "html": text_form(content.get("html")),
        }
        named = [a for a in attachments if a["filename"]]
        self.facts["attachments.named.filenames"] = [a["filename"] for a in named]
        self.facts["attachments.named.contentTypes"] = [a["contentType"].lower() for a in named]
        self.facts["attachments.named.sizes"] = [a["size"] for a in named]
        self.facts["attachments.nonTextTypes"] = [
            t for t in self.facts["attachments.contentTypes"] if t not in ("text/plain", "text/html")
        ]


def pairs_for(ours: Ours, theirs: dict[str, Any]) -> Pairs:
    """Pair each field the reference publishes with ours; a list with None entries (a size the
    reference does not publish for that one part) leaves those positions out of the comparison."""
    result: Pairs = {}
    for name, value in theirs.items():
        if name.startswith("_"):  # context, not a field
            continue
        mine = ours.facts[name]
        if isinstance(value, list) and isinstance(mine, list) and len(value) == len(mine) and None in value:
            mine = [None if t is None else m for m, t in zip(mine, value, strict=True)]
        result[name] = (mine, value)
    return result


# ---------------------------------------------------------------- postal-mime


def postal_mime_available() -> str | None:
    """None when postal-mime can run, else why not."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not (ROOT / "node_modules" / "postal-mime").is_dir():
        return f"postal-mime is not installed in {ROOT / 'node_modules'} (npm ci)"
    return None


def run_postal_mime(eml_dir: Path) -> dict[str, dict[str, Any]]:
    env = dict(os.environ, TZ="UTC")  # postal-mime reads zone-less dates in local time
    result = subprocess.run(
        ["node", str(NODE_HELPER), str(eml_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        encoding="utf-8",
        timeout=300,
        check=True,
    )
    # split on LF only: JSON.stringify leaves U+2028/U+2029 unescaped, str.splitlines() splits there
    parsed = (json.loads(line) for line in result.stdout.split("\n") if line.strip())
    return {entry["file"]: entry for entry in parsed}


def _postal_mailboxes(addresses: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for address in addresses:
        flat.extend(address["group"] if address.get("group") is not None else [address])
    # an entry with neither name nor address is an artifact of a stray comma, not a recipient
    return [a for a in flat if a.get("address") or a.get("name")]


def postal_mime_facts(entry: dict[str, Any]) -> dict[str, Any]:
    """postal-mime's parse as canonical fields. Text (or HTML) it rendered from the other type is
    its own converter's output, not a part's content, so it is not compared."""
    if "error" in entry:
        return {}
    sender = _postal_mailboxes([entry["from"]]) if entry.get("from") else []
    date = entry.get("date")
    try:
        date_value = instant(datetime.fromisoformat(date.replace("Z", "+00:00"))) if date else None
    except ValueError:  # postal-mime passes an unparseable Date through as it is
        date_value = None
    attachments = entry["attachments"]
    facts: dict[str, Any] = {
        "subject": text_form(entry.get("subject")),
        "from.address": address_form(sender[0].get("address")) if sender else None,
        "from.name": text_form(sender[0].get("name")) if sender else None,
        "to.addresses": [address_form(a.get("address")) for a in _postal_mailboxes(entry["to"])],
        "cc.addresses": [address_form(a.get("address")) for a in _postal_mailboxes(entry["cc"])],
        "date": date_value,
        "messageId": message_id_form(entry.get("messageId")),
        "attachments.count": len(attachments),
        "attachments.filenames": [a["filename"] or "" for a in attachments],
        "attachments.contentTypes": [a["mimeType"].lower() for a in attachments],
        "attachments.sizes": [a["size"] for a in attachments],
    }
    if not entry.get("textRendered"):
        facts["text"] = text_form(entry.get("text"))
    if not entry.get("htmlRendered"):
        facts["html"] = text_form(entry.get("html"))
    return facts


# ---------------------------------------------------------------- stalwart mail-parser


def stalwart_paths(row: CorpusFile, listing: set[str]) -> list[str]:
    stem = row.path.removesuffix(".eml")
    return [p for p in (stem + ".json", stem + ".crlf.json") if p in listing]


def _stalwart_header(part: dict[str, Any], name: str) -> list[Any]:
    return [h["value"] for h in part["headers"] if h["name"] == name]


def _stalwart_mailboxes(values: list[Any]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for value in values:
        address = value.get("Address") if isinstance(value, dict) else None
        if not address:
            continue
        if "List" in address:
            flat.extend(address["List"])
        for group in address.get("Group") or []:
            flat.extend(group.get("addresses") or [])
    return flat


def _stalwart_date(value: Any) -> str | None:
    if not isinstance(value, dict) or "DateTime" not in value:
        return None
    d = value["DateTime"]
    try:
        local = datetime(d["year"], d["month"], d["day"], d["hour"], d["minute"], d["second"])
    except ValueError:
        return None
    offset = timedelta(hours=d["tz_hour"], minutes=d["tz_minute"])
    zone = timezone(-offset if d["tz_before_gmt"] else offset)
    return instant(local.replace(tzinfo=zone))


def _stalwart_param(value: Any, name: str) -> str | None:
    if not isinstance(value, dict) or "ContentType" not in value:
        return None
    for attribute in value["ContentType"].get("attributes") or []:
        if attribute["name"].lower() == name:
            return str(attribute["value"])
    return None


def _stalwart_attachment(part: dict[str, Any]) -> tuple[str, str, int | None]:
    content_type = (_stalwart_header(part, "content_type") or [None])[0]
    disposition = (_stalwart_header(part, "content_disposition") or [None])[0]
    kind, body = next(iter(part["body"].items()))
    if isinstance(content_type, dict) and "ContentType" in content_type:
        ct = content_type["ContentType"]
        mime = f"{ct['c_type']}/{ct.get('c_subtype') or ''}".lower()
    else:
        mime = "message/rfc822" if kind == "Message" else "text/plain"
    filename = _stalwart_param(disposition, "filename") or _stalwart_param(content_type, "name") or ""
    size: int | None = None
    if kind in ("Binary", "InlineBinary"):
        size = len(body)
    elif kind in ("Text", "Html"):
        # stalwart publishes the decoded text, not the bytes: sizes agree only for UTF-8 and ASCII
        charset = (_stalwart_param(content_type, "charset") or "us-ascii").lower()
        if charset in ("us-ascii", "ascii", "utf-8", "utf8") and not part.get("is_encoding_problem"):
            size = len(body.encode("utf-8"))
    elif kind == "Message":
        encoding = (_stalwart_header(part, "content_transfer_encoding") or [None])[0]
        if not (
            isinstance(encoding, dict) and encoding.get("Text", "").strip().lower() in ("base64", "quoted-printable")
        ):
            size = part["offset_end"] - part["offset_body"]
    return filename, mime, size


def _stalwart_is_attachment(part: dict[str, Any]) -> bool:
    disposition = (_stalwart_header(part, "content_disposition") or [None])[0]
    return (
        isinstance(disposition, dict) and disposition.get("ContentType", {}).get("c_type", "").lower() == "attachment"
    )


def _stalwart_in_report(parts: list[dict[str, Any]], parent: dict[int, int], index: int) -> bool:
    while index in parent:
        index = parent[index]
        content_type = (_stalwart_header(parts[index], "content_type") or [None])[0]
        if (
            isinstance(content_type, dict)
            and content_type.get("ContentType", {}).get("c_subtype", "").lower() == "report"
        ):
            return True
    return False


def stalwart_facts(expected: Path, row: CorpusFile, raw: bytes) -> dict[str, Any] | None:
    """stalwart's test compares its full parse (serde JSON) of the file with CRs stripped
    (``.json``) and with every LF made CRLF (``.crlf.json``): take the one that matches our bytes."""
    crlf = raw.count(b"\r\n") * 2 > raw.count(b"\n")
    stem = row.path.removesuffix(".eml")
    path = expected / "stalwart" / (stem + (".crlf.json" if crlf else ".json"))
    if not path.is_file():
        return None
    message = json.loads(path.read_text(encoding="utf-8"))
    parts = message["parts"]
    root = parts[0]
    subject = _stalwart_header(root, "subject")
    message_id = _stalwart_header(root, "message_id")
    dates = _stalwart_header(root, "date")
    sender = _stalwart_mailboxes(_stalwart_header(root, "from"))
    attachments = [_stalwart_attachment(parts[i]) for i in message["attachments"]]
    parent = {child: i for i, p in enumerate(parts) for child in (p["body"].get("Multipart") or [])}
    facts: dict[str, Any] = {
        "subject": text_form(subject[0].get("Text")) if subject and isinstance(subject[0], dict) else None,
        "from.address": address_form(sender[0].get("address")) if sender else None,
        "from.name": text_form(sender[0].get("name")) if sender else None,
        "to.addresses": [address_form(a.get("address")) for a in _stalwart_mailboxes(_stalwart_header(root, "to"))],
        "cc.addresses": [address_form(a.get("address")) for a in _stalwart_mailboxes(_stalwart_header(root, "cc"))],
        "date": _stalwart_date(dates[0]) if dates else None,
        "messageId": message_id_form(message_id[0].get("Text"))
        if message_id and isinstance(message_id[0], dict)
        else None,
        "attachments.count": len(attachments),
        "attachments.filenames": [a[0] for a in attachments],
        "attachments.contentTypes": [a[1] for a in attachments],
        "attachments.sizes": [a[2] for a in attachments],
        "_rfc822_inline": sum(
            mime == "message/rfc822"
            and not _stalwart_is_attachment(parts[i])
            and not _stalwart_in_report(parts, parent, i)
            for i, (_, mime, _) in zip(message["attachments"], attachments, strict=True)
        ),
    }
    for name, indexes, kind in (("text", message["text_body"], "Text"), ("html", message["html_body"], "Html")):
        bodies = [parts[i]["body"] for i in indexes]
        if all(kind in body for body in bodies):  # a body of the other type is a rendering
            facts[name] = text_form("\n".join(body[kind] for body in bodies))
    return facts


# ---------------------------------------------------------------- Apache mime4j


def mime4j_paths(row: CorpusFile, listing: set[str]) -> list[str]:
    if not row.path.endswith(".msg"):
        return []
    prefix = row.path.removesuffix(".msg") + "_decoded"
    return sorted(p for p in listing if p.startswith(prefix) and (p[len(prefix)] in "._"))


_SIMPLE_ANGLE = re.compile(r"<([^<>\s@]+@[^<>\s@]+)>\s*$")
_BARE_ADDRESS = re.compile(r"^([^<>\s@,;:\"()]+@[^<>\s@,;:\"()]+)$")


def _mime4j_fields(element: ET.Element) -> dict[str, str]:
    """First value of each header field, lowercase name; mime4j keeps the raw folded text."""
    fields: dict[str, str] = {}
    header = element.find("header")
    for field_element in header.findall("field") if header is not None else []:
        text = (field_element.text or "").lstrip("\r\n")
        name, colon, value = text.partition(":")
        if colon:
            fields.setdefault(name.strip().lower(), value)
    return fields


def _param(value: str | None, name: str) -> str | None:
    """A plain parameter (quoted or token); None when absent or RFC 2231/2047 encoded."""
    if value is None:
        return None
    match = re.search(rf'(?:^|;)\s*{name}\s*=\s*(?:"([^"]*)"|([^;\s]*))', value, re.IGNORECASE)
    return None if match is None else (match.group(1) if match.group(1) is not None else match.group(2))


@dataclass
class _Leaf:
    content_type: str
    charset: str | None
    filename: str | None
    encoded_name: bool
    attachment: bool
    body_file: str | None


def _mime4j_leaves(element: ET.Element, fields: dict[str, str], in_report: bool, out: list[_Leaf]) -> None:
    """Walk mime4j's tree in MIME order. A nested message is walked (its parts are ours in place)
    unless it is an attachment or sits in a multipart/report: our normalizer's rule."""
    content_type_value = fields.get("content-type")
    content_type = (content_type_value or "text/plain").split(";")[0].strip().lower() or "text/plain"
    disposition = fields.get("content-disposition")
    is_attachment = disposition is not None and disposition.strip().lower().startswith("attachment")
    for child in element:
        if child.tag == "multipart":
            report = in_report or content_type == "multipart/report"
            for body_part in child.findall("body-part"):
                _mime4j_leaves(body_part, _mime4j_fields(body_part), report, out)
        elif child.tag == "message":
            if is_attachment or in_report:
                out.append(_Leaf("message/rfc822", None, _param(disposition, "filename"), False, True, None))
            else:  # a marker: a forwarded message parsed in place
                out.append(_Leaf("message/rfc822", None, None, False, False, None))
                _mime4j_leaves(child, _mime4j_fields(child), False, out)
        elif child.tag in ("text-body", "binary-body"):
            raw_names = [disposition or "", content_type_value or ""]
            encoded = any(re.search(r"name\*|=\?", v, re.IGNORECASE) for v in raw_names)
            filename = _param(disposition, "filename") or _param(content_type_value, "name")
            out.append(
                _Leaf(
                    content_type,
                    _param(content_type_value, "charset"),
                    filename,
                    encoded,
                    is_attachment,
                    child.get("name"),
                )
            )


def mime4j_facts(expected: Path, row: CorpusFile, raw: bytes) -> dict[str, Any] | None:
    """mime4j's tests compare its parse with ``<name>_decoded.xml`` (every header field as
    written, the MIME tree) and the decoded bodies beside it. Published here: the header fields
    that need no decoding of ours to read, the named parts, and the plain text."""
    if not row.path.endswith(".msg"):
        return None
    base = expected / "mime4j" / row.path.removesuffix(".msg")
    xml_path = base.parent / (base.name + "_decoded.xml")
    if not xml_path.is_file():
        return None
    root = ET.parse(xml_path).getroot()
    fields = _mime4j_fields(root)
    leaves: list[_Leaf] = []
    _mime4j_leaves(root, fields, False, leaves)
    facts: dict[str, Any] = {
        "_rfc822_inline": any(leaf.content_type == "message/rfc822" and not leaf.attachment for leaf in leaves)
    }
    subject = fields.get("subject")
    if subject is None or "=?" not in subject:
        facts["subject"] = text_form(subject)
    message_id = fields.get("message-id")
    if message_id is None or re.fullmatch(r"\s*<[^<>\s]+>\s*", message_id):
        facts["messageId"] = message_id_form(message_id)
    sender = fields.get("from")
    if sender is None:
        facts["from.address"] = None
    else:
        match = _SIMPLE_ANGLE.search(sender) or _BARE_ADDRESS.match(sender.strip())
        if match:
            facts["from.address"] = address_form(match.group(1))
    named = [leaf for leaf in leaves if leaf.filename]
    if not any(leaf.encoded_name for leaf in leaves) and all(leaf.body_file for leaf in named):
        facts["attachments.named.filenames"] = [leaf.filename for leaf in named]
        facts["attachments.named.contentTypes"] = [leaf.content_type for leaf in named]
        facts["attachments.named.sizes"] = [(base.parent / str(leaf.body_file)).stat().st_size for leaf in named]
    plain = [leaf for leaf in leaves if leaf.content_type == "text/plain" and not leaf.attachment and not leaf.filename]
    texts: list[str] = []
    for leaf in plain:
        try:
            texts.append((base.parent / str(leaf.body_file)).read_bytes().decode(leaf.charset or "us-ascii"))
        except (LookupError, UnicodeDecodeError):
            break
    else:
        if texts:
            facts["text"] = text_form("\n".join(texts))
    return facts


# ---------------------------------------------------------------- MimeKit


def _mimekit_summary_path(row: CorpusFile) -> str | None:
    if row.mbox_part is None or not row.path.endswith(".mbox.txt"):
        return None
    return row.path.removesuffix(".mbox.txt") + "-summary.txt"


def mimekit_paths(row: CorpusFile, listing: set[str]) -> list[str]:
    path = _mimekit_summary_path(row)
    return [path] if path and path in listing else []


def _split_addresses(value: str) -> list[str]:
    """MimeKit's InternetAddressList.ToString(): mailboxes joined by ", ", names quoted as needed."""
    items, current, quoted, escaped = [], "", False, False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append(current)
            current = ""
            continue
        current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def _mimekit_mailbox(item: str) -> tuple[str | None, str | None]:
    match = re.fullmatch(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^<]*?))\s*<([^<>]*)>\s*', item)
    if match is None:
        return None, address_form(item)
    name = match.group(1)
    name = re.sub(r"\\(.)", r"\1", name) if name is not None else match.group(2)
    return text_form(name), address_form(match.group(3))


def mimekit_facts(expected: Path, row: CorpusFile, raw: bytes) -> dict[str, Any] | None:
    """MimeKit's mbox tests compare, per message, From, To, Subject, Date and the MIME tree with
    ``<mbox>-summary.txt``. The tree does not say which parts are attachments; the non-text leaf
    types are compared when no message/* node is in it (whether such a node is one attachment
    or parsed in place depends on its disposition, which the summary does not show)."""
    relative = _mimekit_summary_path(row)
    if relative is None or row.mbox_part is None or not (expected / "mimekit" / relative).is_file():
        return None
    text = (expected / "mimekit" / relative).read_text(encoding="utf-8").replace("\r\n", "\n")
    blocks = [b for b in text.split("\n\n") if b.strip()]
    if row.mbox_part >= len(blocks):
        return None
    lines = blocks[row.mbox_part].split("\n")[1:]  # the first line is the mbox marker
    header: dict[str, str] = {}
    tree: list[str] = []
    for line in lines:
        if "Date" in header and line.lstrip().startswith("Content-Type: "):
            tree.append(line.strip().removeprefix("Content-Type: ").lower())
        elif not tree:
            name, _, value = line.partition(": ")
            header[name] = value
    facts: dict[str, Any] = {"subject": text_form(header.get("Subject"))}
    senders = [_mimekit_mailbox(item) for item in _split_addresses(header.get("From", ""))]
    facts["from.address"] = senders[0][1] if senders else None
    facts["from.name"] = senders[0][0] if senders else None
    facts["to.addresses"] = [_mimekit_mailbox(item)[1] for item in _split_addresses(header.get("To", ""))]
    date = header.get("Date", "")
    if date.startswith("Mon, 01 Jan 0001"):  # DateTimeOffset.MinValue: no date
        facts["date"] = None
    else:
        with contextlib.suppress(ValueError):  # not a date MimeKit wrote: not published
            facts["date"] = instant(datetime.strptime(date, "%a, %d %b %Y %H:%M:%S %z"))
    if not any(t.startswith("message/") for t in tree):
        facts["attachments.nonTextTypes"] = [
            t for t in tree if not t.startswith("multipart/") and t not in ("text/plain", "text/html")
        ]
    return facts


# ---------------------------------------------------------------- the run

Loader = Callable[[Path, CorpusFile, bytes], "dict[str, Any] | None"]
LOADERS: dict[str, Loader] = {"stalwart": stalwart_facts, "mime4j": mime4j_facts, "mimekit": mimekit_facts}
PATHS: dict[str, Callable[[CorpusFile, set[str]], list[str]]] = {
    "stalwart": stalwart_paths,
    "mime4j": mime4j_paths,
    "mimekit": mimekit_paths,
}


def read_manifest(corpus: Path) -> list[CorpusFile]:
    rows = []
    lines = (corpus / "manifest.tsv").read_text(encoding="utf-8").splitlines()
    columns = lines[0].split("\t")
    for line in lines[1:]:
        if not line.strip():
            continue
        row = dict(zip(columns, line.split("\t"), strict=False))
        part = row.get("mbox_part") or ""
        rows.append(CorpusFile(row["name"], row["repo"], row["commit"], row["path"], int(part) if part else None))
    return rows


@dataclass
class Disagreement:
    source: str
    file: str
    field: str
    ours: Any
    theirs: Any
    reason: str | None = None  # set when judged


@dataclass
class Report:
    # source -> field -> {"agree": n, "disagree": n, "judged": n}
    counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    judged: list[Disagreement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    normalizer: str = ""  # which aecs_mongo was measured (PYTHONPATH can point at another checkout)

    def add(self, source: str, file: str, pairs: Pairs, context: dict[str, Any] | None = None) -> None:
        self.files[source] = self.files.get(source, 0) + 1
        per_field = self.counts.setdefault(source, {})
        for name in FIELDS:
            if name not in pairs:
                continue
            ours, theirs = pairs[name]
            tally = per_field.setdefault(name, {"agree": 0, "disagree": 0, "judged": 0})
            if ours == theirs:
                tally["agree"] += 1
                continue
            reason = JUDGED.get((source, file, name)) or next(
                (
                    rule.reason
                    for rule in JUDGED_RULES
                    if source in rule.sources and name in rule.fields and rule.test(ours, theirs, context or {})
                ),
                None,
            )
            entry = Disagreement(source, file, name, ours, theirs, reason)
            if reason is None:
                tally["disagree"] += 1
                self.disagreements.append(entry)
            else:
                tally["judged"] += 1
                self.judged.append(entry)

    def pins(self) -> dict[str, dict[str, int]]:
        return {s: {f: c["agree"] for f, c in fields.items()} for s, fields in self.counts.items()}

    def as_json(self) -> dict[str, Any]:
        return {
            "normalizer": self.normalizer,
            "files": self.files,
            "counts": self.counts,
            "skipped": self.skipped,
            "disagreements": [vars(d) for d in self.disagreements],
            "judged": [vars(d) for d in self.judged],
        }


def normalize_corpus(eml_dir: Path, names: Iterable[str]) -> dict[str, Ours]:
    from aecs_mongo import normalize

    logging.disable(logging.WARNING)  # normal conditions of real mail, not this report's subject
    try:
        return {name: Ours(normalize((eml_dir / name).read_bytes())) for name in names}
    finally:
        logging.disable(logging.NOTSET)


def run(
    sources: Iterable[str] = ALL_SOURCES,
    corpus: Path = CORPUS,
    expected: Path = EXPECTED,
) -> Report:
    import aecs_mongo

    report = Report(normalizer=str(Path(aecs_mongo.__file__).parent))
    eml_dir = corpus / "eml"
    rows = read_manifest(corpus)
    ours = normalize_corpus(eml_dir, [row.name for row in rows])
    for source in sources:
        if source == "postal-mime":
            why = postal_mime_available()
            if why:
                report.skipped[source] = why
                continue
            theirs = run_postal_mime(eml_dir)
            for row in rows:
                if row.name in theirs:
                    report.add(source, row.name, pairs_for(ours[row.name], postal_mime_facts(theirs[row.name])))
            continue
        if not (expected / source).is_dir():
            report.skipped[source] = f"no expected outputs at {expected / source}"
            continue
        for row in rows:
            if row.repo != REPOS[source]:
                continue
            facts = LOADERS[source](expected, row, (eml_dir / row.name).read_bytes())
            if facts is not None:
                context = {k: v for k, v in facts.items() if k.startswith("_")} | {"_ours": ours[row.name].facts}
                report.add(source, row.name, pairs_for(ours[row.name], facts), context)
    return report


# ---------------------------------------------------------------- output


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where_they_differ(ours: Any, theirs: Any) -> tuple[str, str]:
    """For long strings, show both from a little before the first difference."""
    if isinstance(ours, str) and isinstance(theirs, str) and max(len(ours), len(theirs)) > 160:
        at = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
        )
        start = max(0, at - 40)
        prefix = f"@{at}: …" if start else ""
        return prefix + _short(ours[start:], 120), prefix + _short(theirs[start:], 120)
    return _short(ours), _short(theirs)


def format_report(report: Report, show_judged: bool = True) -> str:
    out: list[str] = [f"normalizer: {report.normalizer}"]
    for source, reason in report.skipped.items():
        out.append(f"{source}: skipped ({reason})")
    for source, fields in report.counts.items():
        out.append(f"\n{source}: {report.files[source]} files")
        out.append(f"  {'field':32} {'agree':>6} {'differ':>6} {'judged':>6} {'of':>5}  rate")
        for name, c in fields.items():
            total = c["agree"] + c["disagree"] + c["judged"]
            out.append(
                f"  {name:32} {c['agree']:>6} {c['disagree']:>6} {c['judged']:>6} {total:>5}  {c['agree'] / total:6.1%}"
            )
    if report.disagreements:
        out.append(f"\nDisagreements ({len(report.disagreements)}): file, field, ours / theirs")
        for d in report.disagreements:
            ours, theirs = _where_they_differ(d.ours, d.theirs)
            out.append(f"  [{d.source}] {d.file}  {d.field}\n      ours:   {ours}\n      theirs: {theirs}")
    if show_judged and report.judged:
        out.append(f"\nJudged disagreements ({len(report.judged)}):")
        for d in report.judged:
            out.append(f"  [{d.source}] {d.file}  {d.field}: {d.reason}")
    return "\n".join(out)


def format_pins(report: Report) -> str:
    lines = ["PINS = {"]
    for source, fields in report.pins().items():
        lines.append(f"    {source!r}: {{")
        lines.extend(f"        {name!r}: {agree}," for name, agree in fields.items())
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------- filling --expected from clones


def extract_from_git(expected: Path, corpus: Path, source: str, git_dir: Path) -> int:
    """Copy the expected outputs one source publishes for our corpus files out of a clone (any
    git directory holding the manifest's commit) into ``expected/source/<path>``."""
    rows = [row for row in read_manifest(corpus) if row.repo == REPOS[source]]
    copied = 0
    for commit in sorted({row.commit for row in rows}):
        listing = set(
            subprocess.run(
                ["git", "-C", str(git_dir), "ls-tree", "-r", "--name-only", commit],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
        )
        wanted = sorted({p for row in rows if row.commit == commit for p in PATHS[source](row, listing)})
        for path in wanted:
            data = subprocess.run(
                ["git", "-C", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, check=True
            )
            target = expected / source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.stdout)
            copied += 1
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="corpus directory (manifest.tsv, eml/)")
    parser.add_argument(
        "--expected", type=Path, default=EXPECTED, help="published expected outputs, DIR/<source>/<path>"
    )
    parser.add_argument("--source", action="append", choices=ALL_SOURCES, help="only these references (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--print-pins", action="store_true", help="print the agreement floor dict for the test")
    parser.add_argument(
        "--extract-from-git",
        action="append",
        metavar="SOURCE=GITDIR",
        help="copy SOURCE's expected outputs for the corpus files out of a clone into --expected, then exit",
    )
    args = parser.parse_args(argv)
    if args.extract_from_git:
        for spec in args.extract_from_git:
            source, _, git_dir = spec.partition("=")
            if source not in REPOS:
                parser.error(f"unknown source {source!r}; one of {', '.join(REPOS)}")
            print(f"{source}: {extract_from_git(args.expected, args.corpus, source, Path(git_dir))} files")
        return 0
    if not (args.corpus / "manifest.tsv").is_file():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    report = run(args.source or ALL_SOURCES, args.corpus, args.expected)
    if args.print_pins:
        print(format_pins(report))
    elif args.json:
        print(json.dumps(report.as_json(), ensure_ascii=False, indent=1))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
