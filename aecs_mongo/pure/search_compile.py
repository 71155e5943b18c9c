"""What each search engine is given: a message's text columns, and the tree compiled for the
MongoDB engines (``$text``, Atlas Search). Pure: no I/O.

The local index (``aecs_mongo/search_index``) and the scan both match the same columns
(:func:`search_columns`), so they agree; the MongoDB engines search what their indexes hold
(``subject``, ``clean`` and ``attachmentTexts.text`` of ``bodies``) and say what they cannot express
(:func:`text_search`, :func:`atlas_search`): the store then answers with the next engine, or,
where that engine was asked for by name, refuses with ``SearchQueryError``.

Where the spec is silent:

- ``rest`` holds the lines of ``content.text`` that ``clean`` drops (quoted history, signatures,
  disclaimers), so they are found but rank below what the sender wrote; the ``[N quoted lines
  omitted]`` lines clean inserts are not indexed (they are not mail text).
- ``html`` holds the lines of the HTML part's text (``html_to_text``) that ``text`` lacks: the
  whole text of an HTML-only message is already ``text``, so this is only what a
  ``multipart/alternative`` put in its HTML and not in its plain part.
- ``sender`` / ``recipients`` / ``bcc`` are names and addresses (``Anna Müller
  anna@example.org``); bcc is kept apart so a shared view never matches it.
"""

from __future__ import annotations

import collections
import datetime as _dt
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .dialect import CAUTIOUS
from .documents import HOT_TEXT_CHARS
from .fts_tables import FOLD_EXCEPTIONS
from .indexes import ATLAS_SEARCH_INDEX
from .keys import message_key
from .queries import KeysetQuery
from .search_query import (
    ATTACHMENT_TEXT_SEPARATOR,
    COLUMNS,
    And,
    Date,
    Label,
    Node,
    Not,
    Or,
    Phrase,
    Thread,
    Word,
    ascii_folded,
    date_range,
    fold,
    has_text,
    leaves,
    to_text,
)

__all__ = [
    "ATLAS_PATHS",
    "SEARCH_SORTS",
    "MongoSearch",
    "atlas_search",
    "body_prefilter",
    "check_sort",
    "has_labels",
    "index_stream_pipeline",
    "label_hint",
    "message_filter",
    "mongo_pipeline",
    "post_match",
    "prefiltered_haystacks",
    "search_columns",
    "search_haystacks",
    "search_keyset",
    "split_message_terms",
    "stream_key",
    "text_search",
]

#: ``search(sort=...)``: newest first (every engine), or best first where the engine ranks.
SEARCH_SORTS = ("date", "relevance")
#: The ``bodies`` fields the Atlas Search index maps, per field of the language.
ATLAS_PATHS: dict[str | None, list[str]] = {
    None: ["subject", "clean", "attachmentTexts.text"],
    "subject": ["subject"],
    "body": ["clean"],
    "attachmenttext": ["attachmentTexts.text"],
}

_OMITTED = re.compile(r"^> \[\d+ quoted lines? omitted\]$")
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def check_sort(sort: object) -> str:
    if not isinstance(sort, str):
        raise TypeError(f"sort must be a str, not {type(sort).__name__}")
    if sort not in SEARCH_SORTS:
        raise ValueError(f"sort must be one of {', '.join(SEARCH_SORTS)}")
    return sort


def search_keyset(mailbox_id: str, node: Node, engine: str) -> KeysetQuery:
    """The keyset of a search's cursor: newest first on ``(ts, messageKey)``, fingerprinted by
    the mailbox, the query (as ``to_text`` prints it) and the engine, so a cursor of another
    mailbox, query or engine is an ``InvalidCursorError``."""
    payload = json.dumps([mailbox_id, "search", to_text(node), engine]).encode("utf-8", "surrogatepass")
    fingerprint = hashlib.sha256(payload).hexdigest()[:16]
    return KeysetQuery("messages", {}, "ts", "messageKey", True, None, fingerprint)


# --- a message's text columns --------------------------------------------------------------------


def _line_key(line: str) -> str:
    return " ".join(line.split())


def _lines_not_in(text: str | None, kept: Iterable[str]) -> str:
    """The lines of ``text`` that ``kept`` does not hold (each kept line used once), in order."""
    if not text:
        return ""
    left = collections.Counter(_line_key(line) for line in kept)
    out = []
    for line in text.split("\n"):
        key = _line_key(line)
        if not key:
            continue
        if left[key] > 0:
            left[key] -= 1
        else:
            out.append(line)
    return "\n".join(out)


def _people(addresses: Iterable[Any]) -> str:
    parts = []
    for address in addresses:
        if isinstance(address, Mapping):
            parts += [str(v) for v in (address.get("name"), address.get("email")) if v]
    return "\n".join(parts)


def search_columns(
    message: Mapping[str, Any], body: Mapping[str, Any] | None, html: str | None, html_to_text: Callable[[str], str]
) -> dict[str, str]:
    """The text columns (``search_query.COLUMNS``) of one stored message: its ``messages``
    document, its ``bodies`` document with any spilled fields merged back, and the HTML body
    (None when it has none). ``html_to_text`` is the normalizer's."""
    body = body or {}
    subject = body["subject"] if "subject" in body else message.get("subject")
    text = body.get("text")
    clean = body.get("clean")
    clean_lines = [line for line in (clean or "").split("\n") if not _OMITTED.match(line.strip())]
    html_text = ""
    if html:
        html_text = _lines_not_in(html_to_text(html), (text or "").split("\n"))
    sender = body.get("from") if body.get("from") is not None else message.get("from")
    names = dict(body.get("fullFilenames") or {})
    files = []
    for attachment in message.get("attachments") or ():
        name = names.get(str(attachment.get("idx"))) or attachment.get("filename")
        if name:
            files.append(str(name))
    texts = body.get("attachmentTexts") or ()
    columns = {
        "subject": subject or "",
        "clean": "\n".join(clean_lines),
        "rest": _lines_not_in(text, clean_lines),
        "html": html_text,
        "sender": _people([sender] if sender else []),
        "recipients": _people(list(body.get("to") or ()) + list(body.get("cc") or ())),
        "bcc": _people(body.get("bcc") or ()),
        "attachments": "\n".join(files),
        "attachmenttext": ATTACHMENT_TEXT_SEPARATOR.join(str(t.get("text") or "") for t in texts),
    }
    assert tuple(columns) == COLUMNS
    return columns


def search_haystacks(message: Mapping[str, Any], body: Mapping[str, Any], html: str | None) -> dict[str, str | None]:
    """What ``search_query.may_match`` takes for one stored message: for each column of
    ``search_columns``, the text of every field the column can be made from (the body's and the
    message's subject and sender both, every attachment name), so each word of the column is a
    substring of it; ``html``: such a text of the HTML part ("" where there is none, None where
    it is not read yet). A body whose fields are spilled has no haystacks (``search_columns``
    after the spill is read)."""
    sender = [a for a in (body.get("from"), message.get("from")) if a is not None]
    files = [str(v) for v in dict(body.get("fullFilenames") or {}).values() if v]
    files += [str(a["filename"]) for a in message.get("attachments") or () if a.get("filename")]
    subjects = [s for s in (body.get("subject"), message.get("subject")) if isinstance(s, str)]
    return {
        "subject": "\n".join(subjects),
        "clean": body.get("clean") or "",
        "rest": body.get("text") or "",
        "html": html,
        "sender": _people(sender),
        "recipients": _people(list(body.get("to") or ()) + list(body.get("cc") or ())),
        "bcc": _people(body.get("bcc") or ()),
        "attachments": "\n".join(files),
        "attachmenttext": "\n".join(str(t.get("text") or "") for t in body.get("attachmentTexts") or ()),
    }


#: The ``bodies`` fields ``body_prefilter`` matches: the texts (attachments' too) and the recipients' names. The
#: subject, the sender and every address the scan tests on the message's own copies instead
#: (``prefiltered_haystacks``); ``fullFilenames``, a document of names, cannot be matched by a
#: pattern: a body that has one always passes. Each field is a clause a server may test one
#: body at a time, so the list is kept short: the embedded server's cost grows with it.
_BODY_TEXT_FIELDS = ("clean", "text", "to.name", "cc.name", "bcc.name", "attachmentTexts.text")
#: More distinct words than this: no prefilter (the scan reads every body, as it did).
_PREFILTER_WORDS = 8


@functools.cache
def _folding_into() -> dict[str, tuple[int, ...]]:
    """For each ASCII character (and "" for nothing) the codes ``ascii_folded`` turns into it,
    the character itself and its capital included (so patterns need no case-folding flag)."""
    found: dict[str, list[int]] = collections.defaultdict(list)
    for code in (*range(0x80), *range(0x80, 0x10000), *(c for c in FOLD_EXCEPTIONS if c >= 0x10000)):
        folded = ascii_folded(chr(code))
        if folded.isascii() and len(folded) <= 1:
            found[folded].append(code)
    return {k: tuple(v) for k, v in found.items()}


def _char_class(codes: Sequence[int]) -> str:
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "[" + "".join(_literal(lo) if lo == hi else f"{_literal(lo)}-{_literal(hi)}" for lo, hi in runs) + "]"


def _literal(code: int) -> str:
    char = chr(code)
    return char if char.isalnum() or code >= 0x80 else "\\" + char


def word_pattern(word: str, most: int = CAUTIOUS.pattern_chars) -> str:
    """A regular expression (PCRE and Python alike) that finds every text whose
    ``ascii_folded`` holds the folded ASCII ``word``: each letter as any character that folds
    to it, with what folds to nothing (combining marks) allowed between letters. A sound
    superset: a word too long for one pattern (``most`` characters, the server's dialect's
    ``pattern_chars``) is found by its longest start that fits."""
    table = _folding_into()
    gap = _char_class(table[""]) + "*" if table.get("") else ""
    pattern = ""
    for i, char in enumerate(word):
        piece = (gap if i else "") + _char_class(table.get(char, (ord(char),)))
        if i and len(pattern) + len(piece) > most:
            break
        pattern += piece
    return pattern


def body_prefilter(tree: Node, pattern_chars: int = CAUTIOUS.pattern_chars) -> dict[str, Any] | None:
    """A filter on ``bodies`` that every body passes whose texts or recipients' names hold one
    of the tree's ASCII words as ``search_query.may_match`` looks for them (a substring of the
    ``ascii_folded`` text): spilled bodies and bodies with full attachment names always pass.
    A body that fails holds none of the words there, so the scan tests its message on
    ``prefiltered_haystacks``. None: nothing to filter on (no ASCII word, or too many words).
    ``pattern_chars``: the longest pattern the server takes (its dialect's)."""
    words: set[str] = set()
    for leaf in leaves(tree):
        if isinstance(leaf, (Word, Phrase)):
            words.update(fold(w) for w in ((leaf.text,) if isinstance(leaf, Word) else leaf.words))
    wanted = sorted(w for w in words if w and w.isascii())
    if not wanted or len(wanted) > _PREFILTER_WORDS:
        return None
    clauses: list[dict[str, Any]] = [{"spill": {"$exists": True}}, {"fullFilenames": {"$exists": True}}]
    clauses += [{field: {"$regex": word_pattern(w, pattern_chars)}} for w in wanted for field in _BODY_TEXT_FIELDS]
    return {"$or": clauses}


def prefiltered_haystacks(message: Mapping[str, Any], html: str | None) -> dict[str, str | None] | None:
    """``search_haystacks`` of a message whose body failed ``body_prefilter`` (its texts and
    recipients' names hold none of the words), from the ``messages`` document alone: its
    subject and sender, which are the body's unless cut to ``HOT_TEXT_CHARS`` (None then: read
    the body), and its ``participants`` (every address of the body, trimmed and lowercased) as
    the recipients and the bcc (more than they hold: a superset, as ``may_match`` needs). None
    where the message has no ``participants``."""
    subject, sender = message.get("subject"), message.get("from") or {}
    if len(subject or "") >= HOT_TEXT_CHARS["subject"] or len(sender.get("name") or "") >= HOT_TEXT_CHARS["name"]:
        return None
    if "participants" not in message:  # a document of another writer: its body decides
        return None
    addresses = [{"email": a} for a in message.get("participants") or ()]
    return search_haystacks(message, {"to": addresses, "bcc": addresses}, html)


# --- the MongoDB engines ---------------------------------------------------------------------------


def split_message_terms(node: Node) -> tuple[list[Node], list[Node]]:
    """The top-level conjuncts of the tree: those about text, and those about the message
    (``date:``, ``thread:``, ``tag:``, ``folder:``, ``id:`` and their negations), which the
    MongoDB engines check on the ``messages`` document after the text search."""
    items = list(node.items) if isinstance(node, And) else [node]
    text: list[Node] = []
    message: list[Node] = []
    for item in items:
        leaf = item.item if isinstance(item, Not) else item
        (message if isinstance(leaf, (Date, Thread, Label)) else text).append(item)
    return text, message


def post_match(
    items: Sequence[Node], now: _dt.datetime, thread_key_of: Callable[[str], str], prefix: str = "m."
) -> dict[str, Any]:
    """The ``$match`` of the message-level conjuncts, on the looked-up message (``m``)."""
    clauses: list[dict[str, Any]] = []
    for item in items:
        negated = isinstance(item, Not)
        leaf = item.item if isinstance(item, Not) else item
        if isinstance(leaf, Thread):
            key = thread_key_of(leaf.thread_id)
            clauses.append({prefix + "threadKey": {"$ne": key} if negated else key})
            continue
        if isinstance(leaf, Label):
            path, value = _label_path(leaf)
            clauses.append({prefix + path: {"$ne": value} if negated else value})
            continue
        assert isinstance(leaf, Date)
        start, end = date_range(leaf, now)
        inside: dict[str, int] = {}
        if start is not None:
            inside["$gte"] = start
        if end is not None:
            inside["$lt"] = end
        if not negated:
            clauses.append({prefix + "ts": inside} if inside else {})
        elif not inside:
            clauses.append({"_id": {"$exists": False}})  # NOT date:.. : nothing
        else:
            outside = [{prefix + "ts": {"$lt": start}}] if start is not None else []
            outside += [{prefix + "ts": {"$gte": end}}] if end is not None else []
            clauses.append(outside[0] if len(outside) == 1 else {"$or": outside})
    clauses = [c for c in clauses if c]
    if not clauses:
        return {}
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class MongoSearch:
    """The tree as a MongoDB engine runs it: the text part (a ``$text`` string or an Atlas
    ``compound``) and the message-level part (``post``); ``reason`` says why the engine cannot
    express the query (then ``text`` is None)."""

    def __init__(self, text: Any, post: list[Node], reason: str | None = None) -> None:
        self.text = text
        self.post = post
        self.reason = reason


def _why_not(leaf: Node, engine: str) -> str:
    if isinstance(leaf, (Word, Phrase)) and leaf.prefix:
        return f"{engine} has no prefix search ({leaf.text if isinstance(leaf, Word) else leaf.words[-1]}*)"
    if isinstance(leaf, (Word, Phrase)) and leaf.field == "attachmenttext" and engine == "$text":
        return "$text searches its fields together: attachmenttext: (one field of its index) needs another engine"
    if isinstance(leaf, (Word, Phrase)) and leaf.field is not None:
        return (
            f"{engine} does not search {leaf.field}: (its index holds the subject, the clean text"
            " and the attachments' text)"
        )
    if isinstance(leaf, (Date, Thread, Label)):
        return (
            f"{engine} takes date:, thread:, tag:, is:, folder: and id: only beside the words,"
            " not inside OR or parentheses"
        )
    return f"{engine} cannot express this query"


def text_search(node: Node) -> MongoSearch:
    """``$text`` on ``aecs_bodies_search`` (subject, clean and the attachments' text, weighted
    so the first two rank first): words (all must match, as one-word phrases), phrases and
    ``-word``/``NOT "phrase"`` beside at least one of them, and ``date:``/``thread:`` beside
    those. Not: ``OR``, parentheses, prefixes, fields (``$text`` searches every field of its
    index at once, so not ``attachmenttext:`` either), a query of negations only."""
    text_items, post = split_message_terms(node)
    parts, positive = [], False
    for item in text_items:
        negated = isinstance(item, Not)
        leaf = item.item if isinstance(item, Not) else item
        if isinstance(leaf, (And, Or, Not)):
            return MongoSearch(None, post, "$text has no OR, NOT of a group, or parentheses")
        if not isinstance(leaf, (Word, Phrase)) or leaf.prefix or leaf.field is not None:
            return MongoSearch(None, post, _why_not(leaf, "$text"))
        phrase = leaf.text if isinstance(leaf, Word) else " ".join(leaf.words)
        parts.append(("-" if negated else "") + f'"{phrase}"')
        positive = positive or not negated
    if not positive:
        return MongoSearch(None, post, "$text needs a word or a phrase to look for, not only exclusions or dates")
    return MongoSearch(" ".join(parts), post)


def _atlas(node: Node, mailbox_id: str) -> dict[str, Any] | str:
    """One node as an Atlas Search operator, or why it cannot be one."""
    if isinstance(node, (Word, Phrase)):
        paths = ATLAS_PATHS.get(node.field)
        if paths is None:
            return _why_not(node, "Atlas Search")
        if isinstance(node, Word):
            if node.prefix:
                return {"wildcard": {"query": node.text.lower() + "*", "path": paths, "allowAnalyzedField": True}}
            return {"text": {"query": node.text, "path": paths}}
        if node.prefix:
            return _why_not(node, "Atlas Search")
        return {"phrase": {"query": " ".join(node.words), "path": paths}}
    if isinstance(node, (Date, Thread, Label)):
        return _why_not(node, "Atlas Search")
    if isinstance(node, Not):
        inner = _atlas(node.item, mailbox_id)
        if isinstance(inner, str):
            return inner
        return {"compound": {"filter": [_mailbox(mailbox_id)], "mustNot": [inner]}}
    compiled = [_atlas(item, mailbox_id) for item in node.items]
    for item in compiled:
        if isinstance(item, str):
            return item
    operators = [c for c in compiled if isinstance(c, dict)]
    if isinstance(node, Or):
        return {"compound": {"should": operators, "minimumShouldMatch": 1}}
    return {"compound": {"must": operators}}


def _mailbox(mailbox_id: str) -> dict[str, Any]:
    return {"equals": {"path": "mailboxId", "value": mailbox_id}}


def atlas_search(node: Node, mailbox_id: str) -> MongoSearch:
    """``$search`` on ``aecs_bodies_atlas`` (subject, clean and the attachments' text; a word
    of no field searches all three, ``attachmenttext:`` the last): everything but the fields its
    index does not map (``from:``, ``to:``, ``attachment:``), phrase prefixes, and ``date:`` /
    ``thread:`` anywhere but beside the words. ``text`` is the ``$search`` stage's body."""
    text_items, post = split_message_terms(node)
    must: list[dict[str, Any]] = []
    for item in text_items:
        compiled = _atlas(item, mailbox_id)
        if isinstance(compiled, str):
            return MongoSearch(None, post, compiled)
        must.append(compiled)
    compound: dict[str, Any] = {"filter": [_mailbox(mailbox_id)]}
    if must:
        compound["must"] = must
    return MongoSearch({"index": ATLAS_SEARCH_INDEX.name, "compound": compound}, post)


#: what a ``$text``/Atlas pipeline reads of each hit's message (``m``): its keys and labels
_LOOKUP_FIELDS = {"_id": 0, "ts": 1, "messageKey": 1, "threadKey": 1, "tags": 1, "folders": 1}


def _label_path(leaf: Label) -> tuple[str, str]:
    """The ``messages`` field and value of a label term (``id:`` by the message key)."""
    if leaf.field == "id":
        return "messageKey", message_key(leaf.value)
    return ("tags" if leaf.field == "tag" else "folders"), leaf.value


def message_filter(
    node: Node, now: _dt.datetime, thread_key_of: Callable[[str], str], *, top: bool = True
) -> dict[str, Any] | None:
    """A tree of message terms only (tags, flags, folders, ids, threads, dates; no words) as a
    filter of ``messages`` (without the mailbox: the caller adds it), or None where the tree
    holds text. ``tag:x`` is an equality on the multikey ``tags``, which ``aecs_messages_tags``
    answers newest first; a negation is ``$nor``. Only label trees are given here: a tree of
    dates and threads alone stays with the engines (``has_labels``)."""
    if top and (has_text(node) or not has_labels(node)):
        return None
    if isinstance(node, Label):
        path, value = _label_path(node)
        return {path: value}
    if isinstance(node, Thread):
        return {"threadKey": thread_key_of(node.thread_id)}
    if isinstance(node, Date):
        start, end = date_range(node, now)
        inside: dict[str, int] = {}
        if start is not None:
            inside["$gte"] = start
        if end is not None:
            inside["$lt"] = end
        return {"ts": inside} if inside else {}
    if isinstance(node, Not):
        inner = message_filter(node.item, now, thread_key_of, top=False)
        assert inner is not None
        return {"$nor": [inner]} if inner else {"_id": {"$exists": False}}
    assert isinstance(node, (And, Or))
    parts = [message_filter(item, now, thread_key_of, top=False) for item in node.items]
    clauses = [p for p in parts if p is not None]
    if isinstance(node, And):
        clauses = [c for c in clauses if c]
        return {} if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
    if any(not c for c in clauses):
        return {}  # an open date range in an OR: everything
    return {"$or": clauses}


#: the index of a label read by the field its filter names by equality
LABEL_INDEXES = (("tags", "aecs_messages_tags"), ("folders", "aecs_messages_folders"))


def label_hint(flt: Mapping[str, Any]) -> str | None:
    """The index a ``message_filter`` is read on (its ``hint``), where the conjunction names a
    tag or a folder by equality (``tag:x``, ``folder:INBOX``): a planner that plans from flat
    filters scans the collection for any other shape beside the mailbox (an ``$and``, a second
    field, the cursor's ``$or``), and a planner that does not gets the newest-first order from
    the index anyway: the hint is right on every server. None: let the planner choose."""
    clauses = flt["$and"] if set(flt) == {"$and"} else [flt]
    for field, index in LABEL_INDEXES:
        if any(isinstance(clause.get(field), str) for clause in clauses):
            return index
    return None


def has_labels(node: Node) -> bool:
    """Whether the tree names a tag, flag, folder or Message-ID."""
    if isinstance(node, (And, Or)):
        return any(has_labels(item) for item in node.items)
    if isinstance(node, Not):
        return has_labels(node.item)
    return isinstance(node, Label)


def mongo_pipeline(
    first: list[dict[str, Any]],
    post: Mapping[str, Any],
    *,
    sort: str,
    limit: int | None,
    after: tuple[int, str] | None,
    score: dict[str, Any],
) -> list[dict[str, Any]]:
    """The rest of a ``$text`` or ``$search`` pipeline: the body fields and score, the message
    looked up (``m``: ts, key, thread), the message-level match, the keyset position, the order
    (newest first, or by ``score``) and the limit (None: every hit, for a count)."""
    stages = [
        *first,
        {"$project": {"_id": 1, "subject": 1, "clean": 1, "score": score}},
        {
            "$lookup": {
                "from": "messages",
                "localField": "_id",
                "foreignField": "_id",
                "as": "m",
                "pipeline": [{"$project": _LOOKUP_FIELDS}],
            }
        },
        {"$unwind": "$m"},  # a body whose message insert never happened is no hit
    ]
    if post:
        stages.append({"$match": dict(post)})
    if after is not None:
        ts, key = after
        stages.append({"$match": {"$or": [{"m.ts": {"$lt": ts}}, {"m.ts": ts, "m.messageKey": {"$lt": key}}]}})
    if limit is not None:
        order = {"score": -1} if sort == "relevance" else {}
        stages.append({"$sort": {**order, "m.ts": -1, "m.messageKey": -1}})
        stages.append({"$limit": limit})
    return stages


# --- the local index's change stream ---------------------------------------------------------------


def index_stream_pipeline(mailbox_id: str) -> list[dict[str, Any]]:
    """The change stream the local index follows: inserts and replaces of the mailbox's
    ``messages`` (by ``fullDocument.mailboxId``), updates and deletes of them (by the ``_id``
    range ``<mailboxId>:`` .. ``<mailboxId>;``: a delete event has no document), and what ends
    the stream (drop, rename, dropDatabase, invalidate); trimmed to the operation and the key."""
    return [
        {
            "$match": {
                "$or": [
                    {"operationType": {"$in": ["insert", "replace"]}, "fullDocument.mailboxId": mailbox_id},
                    {
                        "operationType": {"$in": ["update", "delete"]},
                        "documentKey._id": {"$gte": mailbox_id + ":", "$lt": mailbox_id + ";"},
                    },
                    {"operationType": {"$in": ["drop", "rename", "dropDatabase", "invalidate"]}},
                ]
            }
        },
        # an update's changed field names tell a tag change (re-read its labels) from others
        {
            "$project": {
                "operationType": 1,
                "documentKey": 1,
                "updateDescription.updatedFields": 1,
                "updateDescription.removedFields": 1,
                "updateDescription.truncatedArrays": 1,
                "fullDocument.tags": 1,
                "fullDocument.folders": 1,
            }
        },
    ]


def stream_key(mailbox_id: str, _id: object) -> str | None:
    """The message key of a ``messages`` ``_id`` of this mailbox (None: another mailbox's,
    such as ``<mailboxId>:x:<key>``, which the range also holds)."""
    if not isinstance(_id, str) or not _id.startswith(mailbox_id + ":"):
        return None
    rest = _id[len(mailbox_id) + 1 :]
    return rest if _HEX64.fullmatch(rest) else None
