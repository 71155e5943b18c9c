"""The options of each command, for the parser in :mod:`aecs_mongo.cli`.

Every ``aecs-mongo`` run builds the whole parser, so this module imports nothing but ``argparse``
at import time (the formats of ``export`` and the duration parser are imported when used).
"""

from __future__ import annotations

import argparse
import datetime as dt

__all__ = [
    "MAX_LIMIT",
    "blobs",
    "count",
    "duration",
    "erase",
    "expire",
    "export",
    "extract",
    "find",
    "folder",
    "imap",
    "inbox",
    "ingest",
    "mcp",
    "message_id",
    "migrate_gdbm",
    "nothing",
    "page",
    "pop3",
    "search",
    "server",
    "show",
    "tag",
    "thread",
    "threads",
    "watch",
    "with_",
]

MAX_LIMIT = 1000
_AGE_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


# --- values ------------------------------------------------------------------------------------


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_LIMIT}")
    return value


def duration(text: str) -> float:
    """``90s``, ``5m``, ``1h``, ``0``: seconds (``--keep-server``)."""
    from ..pure.settings import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _moment(text: str) -> dt.datetime:
    """``2024-01-31`` (midnight UTC) or an ISO 8601 time (UTC when it names no zone)."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD or ISO 8601): {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _tag(text: str) -> str:
    """A tag as stored (lowercased); a bad one is a usage error (the rules: ``pure/tags.py``)."""
    from ..pure.tags import check_tag

    try:
        return check_tag(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _folder(text: str) -> str:
    """A folder name as stored (as given); a bad one is a usage error (``pure/tags.py``)."""
    from ..pure.tags import check_folder

    try:
        return check_folder(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _age(text: str) -> dt.timedelta:
    """``365d``, ``52w``, ``2y`` (365 days), ``12h``."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit not in _AGE_UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"not an age like 365d, 52w, 2y or 12h: {text!r}")
    return dt.timedelta(seconds=int(number) * _AGE_UNITS[unit])


class _NoPasswordOption(argparse.Action):
    """``--password``: refused with the reason (argv is visible to every user of the machine)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parser.error("a password is never taken from the command line: put it in a variable, --password-env VAR")


def _password_options(p: argparse.ArgumentParser, variable: str, *, never_read: str = "") -> None:
    """``--password-env VAR``, and ``--password`` refused (its value never echoed)."""
    p.add_argument("--password", action=_NoPasswordOption, help=argparse.SUPPRESS)
    p.add_argument(
        "--password-env",
        default=variable,
        metavar="VAR",
        help=f"environment variable holding the password (default: {variable}; unset: ask on the terminal)"
        + never_read,
    )


# --- the commands ------------------------------------------------------------------------------


def nothing(p: argparse.ArgumentParser) -> None:
    return None


def page(p: argparse.ArgumentParser, default_limit: int = 20) -> None:
    p.add_argument(
        "--limit", type=_limit, default=default_limit, help=f"page size (default: {default_limit}, at most 1000)"
    )
    p.add_argument("--cursor", default=None, help="continue after a page: the next_cursor it printed")


def extract(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", metavar="ID", help="Message-ID, with or without <>")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--text", type=int, metavar="IDX", help="print the whole text read from attachment IDX")
    what.add_argument("--save", metavar="DIR", help="write the attachments byte-exact into DIR, under safe names")
    what.add_argument(
        "--pending", action="store_true", help="read the attachments left unread (extract_later, or older mail)"
    )
    p.add_argument("--overwrite", action="store_true", help="with --save: replace files that exist")
    p.add_argument("--limit", type=_limit, default=None, help="with --pending: messages at most")


def message_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="Message-ID, with or without <>")


def ingest(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help=".eml files, directories (files recognised by content), Maildir folders, mbox files, or - to read"
        " standard input (one message, or an mbox)",
    )
    p.add_argument(
        "--batch-size", type=_limit, default=100, help="messages per write batch (default: 100, at most 1000)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")
    p.add_argument("--ocr", action="store_true", help="read the text of images too (Tesseract's tesseract command)")
    p.add_argument(
        "--remove-missing",
        action="store_true",
        help="remove from the mailbox the messages whose files are gone, when no copy of them is left in any"
        " source (default: keep them; the run counts them)",
    )
    p.add_argument(
        "--rescan",
        action="store_true",
        help="read every file again, not only what is new or changed since the last run (the record is rewritten)",
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="do not wait for the server's journal after each batch (durable=False): faster, but a crash of"
        " the server soon after can lose what was reported stored; for imports you can run again",
    )
    p.add_argument(
        "--owner",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="the mailbox owner's address (repeatable): bcc is stored only on mail they sent",
    )
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        type=_tag,
        metavar="TAG",
        help="tag every message this stores (repeatable; $seen marks it read); mail already stored keeps its tags",
    )


def _query_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--query", default=None, metavar="QUERY", help="only what matches a search query (see 'search --help')"
    )


def inbox(p: argparse.ArgumentParser) -> None:
    page(p)
    p.add_argument("--sender", default=None, help="only mail from this address")
    _query_option(p)


def threads(p: argparse.ArgumentParser) -> None:
    page(p)
    _query_option(p)


def thread(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="thread id (or the Message-ID of any message in the thread)")
    p.add_argument("--limit", type=_limit, default=20, help="the newest N messages (default: 20)")


def show(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="Message-ID, with or without <>")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--raw", action="store_true", help="write the message exactly as received (raw.eml bytes)")
    p.add_argument(
        "--variant",
        type=int,
        default=0,
        metavar="N",
        help="with --raw: copy N as received (0: the first; 1...: other bytes that came under the same Message-ID)",
    )
    what.add_argument("--html", action="store_true", help="write the HTML body")


def with_(p: argparse.ArgumentParser) -> None:
    p.add_argument("address", metavar="ADDRESS", help="an email address (from, to, cc)")
    page(p)


def find(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "header",
        metavar="HEADER",
        help="Subject, From, To (To and Cc), Date (YYYY-MM-DD), In-Reply-To, References, or List-Id",
    )
    p.add_argument("value", metavar="VALUE", help="the value, normalized like the stored one")


_QUERY_HELP = (
    'words (all must match), "a phrase", OR, NOT or -word, (groups), prefix*, and fields: from:, to:,'
    " subject:, body:, attachment: (file name), thread:ID, date:2024-01-01..2024-03-31 (UTC days; open"
    " ends; 30d.. for the last 30 days), tag:TAG, is:unread|read|flagged|answered|draft, folder:NAME,"
    " id:MESSAGE-ID"
)


def search(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help=_QUERY_HELP)
    p.add_argument("--limit", type=_limit, default=20, help="at most N results (default: 20)")
    p.add_argument(
        "--sort",
        choices=("date", "relevance"),
        default="date",
        help="date: newest first (default); relevance: best first, where the engine ranks",
    )
    p.add_argument("--cursor", default=None, help="continue after a page (newest first): the next_cursor it printed")


def count(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help=_QUERY_HELP)


def tag(p: argparse.ArgumentParser) -> None:
    p.usage = "aecs-mongo tag [+TAG | -TAG ...] [--dry-run] [--] QUERY..."
    p.add_argument(
        "query",
        nargs="+",
        metavar="QUERY",
        help="the messages to change, as in 'search' (id:<Message-ID>, thread:ID, tag:TAG, from:, words...);"
        " put it after -- when it starts with a dash",
    )
    p.add_argument(
        "--add", action="append", default=[], type=_tag, metavar="TAG", help="+TAG: add this tag (repeatable)"
    )
    p.add_argument(
        "--remove", action="append", default=[], type=_tag, metavar="TAG", help="-TAG: remove this tag (repeatable)"
    )
    p.add_argument("--dry-run", action="store_true", help="say how many messages would change; change nothing")


def folder(p: argparse.ArgumentParser) -> None:
    p.usage = "aecs-mongo folder [+FOLDER | -FOLDER ...] [--dry-run] [--] QUERY..."
    p.add_argument(
        "query",
        nargs="+",
        metavar="QUERY",
        help="the messages to change, as in 'search' (folder:INBOX, tag:TAG, id:<Message-ID>, words...);"
        " put it after -- when it starts with a dash",
    )
    p.add_argument(
        "--add",
        action="append",
        default=[],
        type=_folder,
        metavar="FOLDER",
        help="+FOLDER: file the messages in this folder too (repeatable; the name as given, case kept)",
    )
    p.add_argument(
        "--remove",
        action="append",
        default=[],
        type=_folder,
        metavar="FOLDER",
        help="-FOLDER: take the messages out of this folder (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="say how many messages would change; change nothing")


def export(p: argparse.ArgumentParser) -> None:
    from ..mail.sinks import FORMATS

    p.add_argument(
        "out", metavar="OUT", help="the mbox file or the Maildir / .eml directory to write (new or empty, unless --add)"
    )
    p.add_argument("--format", choices=FORMATS, required=True, help="mbox (mboxrd), maildir, or eml (one file each)")
    p.add_argument("--variants", action="store_true", help="also every other copy kept under a stored Message-ID")
    p.add_argument(
        "--status-headers",
        action="store_true",
        help="mbox: write each message's tags as Status:/X-Status: fields (read, answered, flagged, draft, deleted);"
        " the messages are then NOT byte-exact copies of the stored ones (without it they are)",
    )
    p.add_argument(
        "--add",
        action="store_true",
        help="add to an existing OUT: append to the mbox, number on in the .eml directory; a Maildir gets only"
        " the copies it does not have yet",
    )
    p.add_argument("--since", type=_moment, default=None, help="only mail at or after this date (UTC if no zone)")
    p.add_argument("--until", type=_moment, default=None, help="only mail before this date (UTC if no zone)")
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")


def expire(p: argparse.ArgumentParser) -> None:
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", type=_moment, default=None, help="remove mail dated before this (UTC if no zone)")
    when.add_argument("--older-than", type=_age, default=None, help="remove mail older than this: 365d, 52w, 2y, 12h")
    p.add_argument("--dry-run", action="store_true", help="count what would be removed; change nothing")


def erase(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="really erase the mailbox (required)")


def pop3(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", metavar="HOST", help="POP3 server host name")
    p.add_argument("--port", type=int, default=None, help="port (default: 995 with --security ssl, else 110)")
    p.add_argument("--user", required=True, help="POP3 user name")
    _password_options(p, "AECS_POP3_PASSWORD")
    p.add_argument(
        "--security",
        choices=("ssl", "starttls", "plain"),
        default="ssl",
        help="ssl (POP3S), starttls (STLS, never downgraded) or plain (default: ssl)",
    )
    p.add_argument("--delete-on-server", action="store_true", help="delete on the server what the store has confirmed")
    p.add_argument("--timeout", type=float, default=30.0, help="socket timeout in seconds (default: 30)")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be between 1 and 65535")
    return value


def mcp(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Serve the mailbox (--mailbox, chosen now: a client cannot name another) to LLM agents over the Model"
        " Context Protocol: search, count, get_thread, get_message, list_messages, list_threads,"
        " with_participant, replies_to and, where vectors are stored, semantic_search. Read-only unless"
        " --allow-writes; bcc recipients are never shown (a shared view). Over stdio by default (what a"
        " desktop client starts); with --http PORT, streamable HTTP on 127.0.0.1 that needs the token kept in"
        " the data directory (--print-token shows it). Needs: pip install 'aecs-mongo[mcp]'."
    )
    p.add_argument(
        "--http",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve streamable HTTP on http://127.0.0.1:PORT/mcp instead of stdio; every request must carry"
        " 'Authorization: Bearer <token>' (the token file is in --data-dir, 0600)",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="also offer the write tools store_message, delete_message and tag_messages (default: read-only)",
    )
    p.add_argument(
        "--embedder",
        default=None,
        metavar="MODULE:FUNCTION",
        help="a Python function from text to a vector, for semantic_search by text (default: by vector only)",
    )
    p.add_argument(
        "--print-token",
        action="store_true",
        help="print the HTTP transport's token (made on first use) and exit, for a client's configuration",
    )


def migrate_gdbm(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="the old UIDL-keyed GDBM file")


def watch(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        choices=("now", "beginning"),
        default="now",
        help="where a new consumer starts: new mail only, or every stored message first (default: now);"
        " a consumer that ran before continues where it stopped",
    )
    p.add_argument(
        "--consumer",
        default="cli",
        help="the reader's name, whose position is kept between runs (default: cli; one per reader)",
    )


def blobs(p: argparse.ArgumentParser) -> None:
    p.description = (
        "show: where the database's blobs (raw mail, HTML, attachment bytes) are, and a migration under way."
        " migrate --to URL: copy every blob to another store, each copy read back and checked by its SHA-256,"
        " switch the database to it once all are there, then remove them from the old one. Resumable: run it"
        " again with the same --to after an interruption. Stop other writers (ingest, pop3, imap, watch"
        " consumers that store) first: a store opened before the switch keeps writing to the old location."
    )
    p.add_argument("action", choices=("show", "migrate"), help="show the location, or migrate (needs --to)")
    p.add_argument(
        "--to",
        metavar="URL",
        help="the new location: gridfs, gridfs://BUCKET, file:///DIR (for the embedded server, e.g."
        " file://$DATA_DIR/blobs), s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX",
    )


def server(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("status", "stop", "start"),
        help="status: where it runs and until when; stop: stop it cleanly; start: start it if none runs",
    )


def imap(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", metavar="HOST", help="IMAP server host name")
    p.add_argument("--user", required=True, help="IMAP user name")
    _password_options(p, "AECS_IMAP_PASSWORD", never_read="; a password is never read from the command line")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--folder",
        action="append",
        metavar="NAME",
        help="a folder to sync, as the server shows it, non-ASCII names as they read (repeatable; default: INBOX)",
    )
    which.add_argument("--all-folders", action="store_true", help="every folder except those marked \\Noselect")
    p.add_argument(
        "--security",
        choices=("ssl", "starttls"),
        default="ssl",
        help="ssl (IMAPS) or starttls (refused, never downgraded, when the server does not offer it); default: ssl",
    )
    p.add_argument("--port", type=int, default=None, help="port (default: 993 with ssl, 143 with starttls)")
    p.add_argument("--ca-file", default=None, metavar="PEM", help="trust this CA certificate (a self-hosted server)")
    p.add_argument("--account", default=None, help="the account's name in the records (default: USER@HOST)")
    p.add_argument(
        "--batch-size", type=_limit, default=100, help="messages per FETCH and write batch (default: 100, at most 1000)"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout in seconds (default: 60)")
    p.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")
