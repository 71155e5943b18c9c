"""The IMAP sync's pure part: its records, folder names and fetch plan. No I/O here.

Two small collections beside the store's (their indexes are in ``indexes``), read and written by
``asynchronous/imap_records.py`` (``store.imap_records``):

- ``imap_sources``: where a stored message was seen, one document per (message, account,
  folder, UIDVALIDITY, UID): ``mailboxId``, ``messageKey`` and ``messageId`` of the stored
  message, ``account``, ``folder`` (decoded from modified UTF-7), ``uidvalidity``, ``uid``,
  and ``flags``: the message's tags as the server last gave them in that folder (its FLAGS,
  mapped by ``pure/flags.py``), against which the next flag change is measured. A message in
  two folders (Gmail labels) is stored once and has two records. The ``_id`` hashes the server
  position (account, folder, UIDVALIDITY, UID), so recording it again writes nothing.
- ``imap_folders``: one document per (mailbox, account, folder): ``mailboxId``, ``account``,
  ``folder``, ``uidvalidity`` and ``uid``, the highest UID whose message is committed (or was
  refused, or vanished). The next sync fetches only above it; a changed UIDVALIDITY starts the
  folder again from 0. ``modseq``: the folder's HIGHESTMODSEQ (CONDSTORE, RFC 7162) when its
  flag changes were last read into the store; absent on a server without CONDSTORE.

A deleter removes a message's records with ``{"mailboxId": m, "messageKey": k}`` on
``imap_sources`` (index ``aecs_imap_sources_message``), and a whole mailbox's with
``{"mailboxId": m}`` on both collections. A folder position outlives its messages on purpose:
mail deleted from the store is not fetched again.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .keys import check_str, doc_id

__all__ = [
    "FOLDERS",
    "SOURCES",
    "account_name",
    "decode_folder",
    "encode_folder",
    "flag_change",
    "folder_document",
    "folder_id",
    "plan_batches",
    "plan_uid_lookups",
    "same_length_runs",
    "source_document",
    "source_id",
    "uid_ranges",
]

SOURCES = "imap_sources"
FOLDERS = "imap_folders"


def account_name(user: str, host: str) -> str:
    """The account a sync records by default: ``user@host``, the host lowercased."""
    return f"{check_str(user, 'user')}@{check_str(host, 'host').strip().lower()}"


def _key(*parts: object) -> str:
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def folder_id(mailbox_id: str, account: str, folder: str) -> str:
    """``_id`` of a folder's position: ``<mailboxId>:<sha256 of [account, folder]>``."""
    return doc_id(mailbox_id, _key(account, folder))


def source_id(mailbox_id: str, account: str, folder: str, uidvalidity: int, uid: int) -> str:
    """``_id`` of one source record: the mailbox and the hash of the server position."""
    return doc_id(mailbox_id, _key(account, folder, uidvalidity, uid))


def source_document(
    mailbox_id: str,
    account: str,
    folder: str,
    uidvalidity: int,
    uid: int,
    message_id: str,
    message_key: str,
    flags: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "_id": source_id(mailbox_id, account, folder, uidvalidity, uid),
        "mailboxId": mailbox_id,
        "messageKey": message_key,
        "messageId": message_id,
        "account": account,
        "folder": folder,
        "uidvalidity": uidvalidity,
        "uid": uid,
        "flags": list(flags),
    }


def flag_change(recorded: Sequence[str] | None, server: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(add, remove)``: the tags to change in the store when a message's flags in a folder
    went from ``recorded`` (its source record's; None: a record written before flags were kept)
    to ``server``. Only what changed on the server moves: a tag set in the store alone (a user
    tag, or ``$seen`` from another folder) is left as it is; an old record without flags adds
    what the server says and removes nothing."""
    new = set(server)
    if recorded is None:
        return tuple(sorted(new)), ()
    old = set(recorded)
    return tuple(sorted(new - old)), tuple(sorted(old - new))


def folder_document(mailbox_id: str, account: str, folder: str, uidvalidity: int, uid: int = 0) -> dict[str, Any]:
    return {
        "_id": folder_id(mailbox_id, account, folder),
        "mailboxId": mailbox_id,
        "account": account,
        "folder": folder,
        "uidvalidity": uidvalidity,
        "uid": uid,
        "updatedAt": dt.datetime.now(dt.UTC).replace(microsecond=0),
    }


_SHIFTED = re.compile(rb"&([^-]*)-")


def _decode_utf7(data: bytes) -> str:
    """Modified UTF-7 (RFC 3501 5.1.3): printable ASCII as itself, ``&-`` for ``&``, other
    characters as ``&<modified base64 of UTF-16BE>-``. Raises ``ValueError`` on anything else."""
    if any(not 0x20 <= b <= 0x7E for b in data):
        raise ValueError("modified UTF-7 is printable ASCII")
    out: list[str] = []
    pos = 0
    for match in _SHIFTED.finditer(data):
        out.append(data[pos : match.start()].decode("ascii"))
        pos = match.end()
        chunk = match.group(1)
        if not chunk:
            out.append("&")
            continue
        padded = chunk.replace(b",", b"/") + b"=" * (-len(chunk) % 4)
        try:
            utf16 = base64.b64decode(padded, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"bad modified base64: {exc}") from None
        if len(utf16) % 2:
            raise ValueError("odd UTF-16 length")
        text = utf16.decode("utf-16-be")  # UnicodeDecodeError (a ValueError) on a lone surrogate
        if any(0x20 <= ord(c) <= 0x7E for c in text):
            raise ValueError("printable ASCII must not be encoded")
        out.append(text)
    rest = data[pos:]
    if b"&" in rest:
        raise ValueError("unterminated shift")
    out.append(rest.decode("ascii"))
    return "".join(out)


def decode_folder(raw: bytes | str) -> str:
    """A folder name as the server sent it -> its display name.

    Modified UTF-7 is decoded; a name that is not valid modified UTF-7 is shown as sent (as
    UTF-8, which servers with UTF8=ACCEPT send, else with replacement characters) rather than
    refused, so a folder with an odd name can still be named and synced.
    """
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    try:
        return _decode_utf7(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def encode_folder(name: str) -> bytes:
    """A display name -> modified UTF-7, as a ``--folder`` name is sent to the server."""
    out = bytearray()
    pending: list[str] = []

    def flush() -> None:
        if pending:
            encoded = base64.b64encode("".join(pending).encode("utf-16-be")).rstrip(b"=").replace(b"/", b",")
            out.extend(b"&" + encoded + b"-")
            pending.clear()

    for char in check_str(name, "folder"):
        if 0x20 <= ord(char) <= 0x7E:
            flush()
            out.extend(b"&-" if char == "&" else char.encode("ascii"))
        else:
            pending.append(char)
    flush()
    return bytes(out)


def plan_batches(sizes: Iterable[tuple[int, int]], max_count: int, max_bytes: int) -> list[list[int]]:
    """Group ``(uid, size)`` pairs, in UID order, into FETCH batches of at most ``max_count``
    messages and ``max_bytes`` bytes; a message larger than ``max_bytes`` is a batch of its own.

    The bytes bound is what keeps a sync's memory flat: a batch of big messages is fetched a few
    at a time, never a hundred 20 MB messages at once.
    """
    if max_count < 1 or max_bytes < 1:
        raise ValueError("max_count and max_bytes must be at least 1")
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for uid, size in sorted(sizes):
        if current and (len(current) >= max_count or current_bytes + size > max_bytes):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(uid)
        current_bytes += max(size, 0)
    if current:
        batches.append(current)
    return batches


def plan_uid_lookups(uids: Iterable[int], chunk: int = 1000, points: int = 100) -> list[tuple[int, int] | list[int]]:
    """How to read the source records of ``uids`` (of one folder) on the folder index: a range
    ``(first, last)`` where they are dense (a FLAGS listing of every known UID, a change to a
    run of messages: one index range, ``chunk`` UIDs at a time), else lists of at most
    ``points`` UIDs for ``$in`` (a few scattered changes). Dense: the range is at most four
    times as long as the UIDs in it. An index range read is the cheaper plan for dense sets on
    any server; a test server answers a long ``$in`` in quadratic time."""
    ordered = sorted(set(uids))
    plan: list[tuple[int, int] | list[int]] = []
    for start in range(0, len(ordered), chunk):
        part = ordered[start : start + chunk]
        if part[-1] - part[0] + 1 <= 4 * len(part):
            plan.append((part[0], part[-1]))
        else:
            plan.extend(part[i : i + points] for i in range(0, len(part), points))
    return plan


def uid_ranges(uids: Sequence[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` -> ``"1:3,7,9:10"``: a UID set as short as the server reads it."""
    parts: list[str] = []
    ordered = sorted(set(uids))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}:{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def same_length_runs(batches: list[list[int]]) -> list[list[list[int]]]:
    """Consecutive batches of the same length, grouped: ``[[1, 2], [3, 4], [5]]`` -> two runs.

    The sync gives the store one stream per run with that length as its batch size, so the
    store's write batches are the byte-bounded FETCH batches (``plan_batches``)."""
    runs: list[list[list[int]]] = []
    for batch in batches:
        if runs and len(runs[-1][0]) == len(batch):
            runs[-1].append(batch)
        else:
            runs.append([batch])
    return runs
