"""Tags, flags and folders of a message, as data: the rules of a name and the updates. No I/O.

A message's ``tags`` (on its ``messages`` document) follow JMAP's keywords (RFC 8621 §4.1.1):
lowercase (a tag is case-insensitive: ``Todo`` is stored ``todo``), 1-255 characters of printable
ASCII without whitespace, parentheses, brackets, braces, quotes, backslash, ``%`` or ``*`` (the
characters a query, an IMAP keyword or a command line would read otherwise). The system flags
are JMAP's: ``$seen $flagged $answered $draft $forwarded $junk $notjunk`` (``$phishing`` is a
keyword like any other); every other tag is the user's. Unread means "no ``$seen``", so new mail
is unread without a write, and a message stored before tags existed reads as untagged and unread.

``folders`` are apart from tags: the names of the folders a message was found in (a Maildir
folder, an IMAP mailbox), as the source names them (case kept; ``INBOX`` for a Maildir's root).
A re-delivery adds the folder it was found in, and never touches the tags.

A change is one single-document update per message (``tag_update``): ``$addToSet`` of what is
added and ``$pull`` of what is removed run as one pipeline ``$set`` of the new list, so two
writers tagging the same message at once both land (no read-modify-write), and the filter
(``needs_change``) selects only messages the change would modify, so ``modified_count`` is what
changed and re-running a change that was interrupted converges.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidTagError

__all__ = [
    "IS_FLAGS",
    "MAX_FOLDER_CHARS",
    "MAX_TAGS_PER_CHANGE",
    "SYSTEM_FLAGS",
    "TAGGED_PROBE_HINT",
    "THREAD_TAGS_PROJECTION",
    "changes_row",
    "check_folder",
    "check_folders",
    "check_tag",
    "check_tags",
    "needs_change",
    "row_tags",
    "tag_update",
    "tagged_probe",
    "thread_pull_groups",
    "thread_tags_added",
    "thread_tags_filter",
    "thread_tags_to_pull",
    "thread_tags_union",
]

#: JMAP's system keywords (RFC 8621): unread is the absence of ``$seen``.
SYSTEM_FLAGS = ("$seen", "$flagged", "$answered", "$draft", "$forwarded", "$junk", "$notjunk")
#: ``is:NAME`` in the query language: the tag it means, and whether it means its absence.
IS_FLAGS: dict[str, tuple[str, bool]] = {
    "unread": ("$seen", True),
    "read": ("$seen", False),
    "seen": ("$seen", False),
    "flagged": ("$flagged", False),
    "answered": ("$answered", False),
    "replied": ("$answered", False),
    "draft": ("$draft", False),
    "forwarded": ("$forwarded", False),
    "junk": ("$junk", False),
}
#: A folder name's length cap (an IMAP mailbox name is rarely over a few dozen).
MAX_FOLDER_CHARS = 1024
#: Tags (or folders) one change adds and removes at most.
MAX_TAGS_PER_CHANGE = 100

_TAG = re.compile(r"[!#$&+,\-./0-9:;<=>?@^_`a-z|~]{1,255}", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_tag(value: object) -> str:
    """A tag as stored: lowercased; ``InvalidTagError`` (a ``ValueError``) for one outside the
    safe set, ``TypeError`` for a non-string (never an operator)."""
    if not isinstance(value, str):
        raise TypeError(f"a tag must be a str, not {type(value).__name__}")
    tag = value.lower() if value.isascii() else value
    if not _TAG.fullmatch(tag):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise InvalidTagError(
            f"invalid tag {shown!r}: 1-255 ASCII characters without whitespace, parentheses, brackets,"
            " braces, quotes, \\, % or * (JMAP keywords)"
        )
    return tag


def _listed(values: object, what: str) -> list[object]:
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a list of strings, not one string")
    if not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of strings, not {type(values).__name__}")
    items = list(values)
    if len(items) > MAX_TAGS_PER_CHANGE:
        raise InvalidTagError(f"{len(items)} {what} in one change, more than {MAX_TAGS_PER_CHANGE}")
    return items


def check_tags(values: object, what: str = "tags") -> tuple[str, ...]:
    """Tags as stored, each once, in the order given."""
    return tuple(dict.fromkeys(check_tag(v) for v in _listed(values, what)))


def check_folder(value: object) -> str:
    """A folder name as stored (as the source names it): 1-1024 characters, no control."""
    if not isinstance(value, str):
        raise TypeError(f"a folder must be a str, not {type(value).__name__}")
    if not value or len(value) > MAX_FOLDER_CHARS or _CONTROL.search(value):
        raise InvalidTagError(f"invalid folder name {value[:40]!r}: 1-{MAX_FOLDER_CHARS} characters, no control")
    return value


def check_folders(values: object, what: str = "folders") -> tuple[str, ...]:
    return tuple(dict.fromkeys(check_folder(v) for v in _listed(values, what)))


def needs_change(field: str, add: Iterable[str], remove: Iterable[str]) -> dict[str, Any]:
    """The filter of the messages a change would modify: one lacks an added value or holds a
    removed one (values are literals: ``$in``/``$all`` of strings, never operators)."""
    clauses: list[dict[str, Any]] = []
    added = list(add)
    removed = list(remove)
    if added:
        clauses.append({field: {"$not": {"$all": added}}})
    if removed:
        clauses.append({field: {"$in": removed}})
    if not clauses:
        return {"_id": {"$exists": False}}
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def changes_row(row: Mapping[str, Any], field: str, add: Iterable[str], remove: Iterable[str]) -> bool:
    """Whether a change modifies a message read as ``row`` (``needs_change`` on this side)."""
    held = set(row_tags(row, field))
    return not set(add) <= held or bool(held & set(remove))


def tag_update(field: str, add: Iterable[str], remove: Iterable[str]) -> dict[str, Any] | list[dict[str, Any]]:
    """The update of one change: ``$addToSet`` or ``$pull`` alone, or both as one pipeline
    ``$set`` (an update may not name a field twice): the new list computed on the server from
    the stored one, in one atomic write."""
    added = list(add)
    removed = list(remove)
    if not removed:
        return {"$addToSet": {field: {"$each": added}}}
    if not added:
        return {"$pull": {field: {"$in": removed}}}
    kept = {
        "$filter": {
            "input": {"$ifNull": [f"${field}", []]},
            "cond": {"$not": [{"$in": ["$$this", {"$literal": removed}]}]},
        }
    }
    fresh = {"$filter": {"input": {"$literal": added}, "cond": {"$not": [{"$in": ["$$this", kept]}]}}}
    return [{"$set": {field: {"$concatArrays": [kept, fresh]}}}]


def row_tags(message: Mapping[str, Any], field: str = "tags") -> list[str]:
    """The tags (or folders) of a stored message as reads return them: sorted, [] where none
    (a message stored before tags existed has no field)."""
    values = message.get(field)
    return sorted(str(v) for v in values) if isinstance(values, list) else []


TAGGED_PROBE_HINT = "aecs_messages_tags"
THREAD_TAGS_PROJECTION: dict[str, Any] = {"_id": 0, "threadKey": 1, "tags": 1}


def tagged_probe(mailbox_id: str) -> dict[str, Any]:
    """The filter of "does this mailbox hold a tagged message at all" (read with ``limit 1`` on
    ``aecs_messages_tags``, hint ``TAGGED_PROBE_HINT``): one index key when it does, an empty
    index range when it does not; a thread listing skips its tag read then."""
    return {"mailboxId": mailbox_id, "tags": {"$type": "string"}}


def thread_tags_filter(mailbox_id: str, thread_keys: Iterable[str]) -> dict[str, Any]:
    """The messages of these threads (projection ``THREAD_TAGS_PROJECTION``), on
    ``aecs_messages_thread`` as the planner picks it; ``thread_tags_union`` folds the rows. Not
    hinted, and no condition on ``tags`` beside: the embedded server reads the threads' keys
    fastest so, and ten times slower or more with either (the hint, or ``tags`` beside the
    ``$in``); an aggregation with ``$unwind`` and ``$group`` is planned as a collection scan."""
    return {"mailboxId": mailbox_id, "threadKey": {"$in": list(thread_keys)}}


def thread_tags_union(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The union of the tags of each thread's messages (thread key -> sorted tags) from the rows
    of ``thread_tags_filter``."""
    union: dict[str, set[str]] = {}
    for row in rows:
        values = row.get("tags")
        if isinstance(values, list) and values:
            union.setdefault(str(row["threadKey"]), set()).update(str(v) for v in values)
    return {key: sorted(values) for key, values in union.items()}


# --- a thread's tags, kept on its summary ---------------------------------------------------------
#
# ``threads.tags`` is the union of the thread's messages' tags (what ``list_threads`` returns), and
# ``threads.tagsRev`` a token every write that adds tags to the summary sets anew. A store merges
# its new messages' tags into the summary in the write that counts them; a tag change adds what it
# added to the threads of its batch (``thread_tags_added``), and removes a removed tag only from a
# thread where no message still carries it: the thread's token is read first, then the messages
# that still carry the tag (``thread_tags_filter``), and the ``$pull`` is filtered on the token
# read (``thread_tags_to_pull``), so a tag that a concurrent writer added meanwhile (message
# first, then summary: the token changes) is never pulled; a pull that finds another token is
# tried again. A summary written before tags existed has no ``tags``: its writes leave it without
# (a partial union would read as whole), and the read computes and stores it once.


def thread_tags_added(added: Iterable[str], rev: str) -> list[dict[str, Any]]:
    """The update of the summaries of threads whose messages got ``added``: the union, and a new
    ``tagsRev`` (a summary without ``tags``, from before tags existed, gets the token only)."""
    union = {"$setUnion": ["$tags", {"$literal": list(added)}]}
    return [{"$set": {"tags": {"$cond": [{"$isArray": "$tags"}, union, "$$REMOVE"]}, "tagsRev": {"$literal": rev}}}]


def thread_tags_to_pull(
    threads: Iterable[Mapping[str, Any]], still: Iterable[Mapping[str, Any]], removed: Iterable[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(filter, update)`` per thread summary (``threads``: ``_id``, ``threadKey``, ``tags``,
    ``tagsRev`` as read before ``still``) that holds a removed tag no message of it still carries
    (``still``: the rows of ``thread_tags_filter`` of those threads): a ``$pull`` of those,
    filtered on the token read."""
    carried = thread_tags_union(still)
    gone = set(removed)
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for thread in threads:
        held = set(row_tags(thread)) & gone
        pulled = sorted(held - set(carried.get(str(thread["threadKey"]), ())))
        if pulled:
            selector = {"_id": thread["_id"], "tagsRev": thread.get("tagsRev")}
            out.append((selector, {"$pull": {"tags": {"$in": pulled}}}))
    return out


def thread_pull_groups(
    pulls: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``thread_tags_to_pull``'s ``(filter, update)`` pairs as few statements: one ``update_many``
    per token read and tags pulled, ``(filter, update)`` with the filter ``_id $in``
    those summaries and ``tagsRev`` the token (each summary still matched only where its token is
    the one read: a token changed meanwhile leaves it unmatched, as its own ``update_one`` would).
    A tag change's summaries mostly share a token (one add writes one to all of its batch's
    threads), and on the embedded server a statement per summary costs about a third more than
    one ``update_many`` for them all. ``Dialect.split_in`` bounds the ``$in`` of each."""
    groups: dict[tuple[Any, tuple[str, ...]], list[Any]] = {}
    for selector, update in pulls:
        pulled = tuple(update["$pull"]["tags"]["$in"])
        groups.setdefault((selector.get("tagsRev"), pulled), []).append(selector["_id"])
    return [
        ({"_id": {"$in": ids}, "tagsRev": rev}, {"$pull": {"tags": {"$in": list(pulled)}}})
        for (rev, pulled), ids in groups.items()
    ]
