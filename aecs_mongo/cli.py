"""``aecs-mongo``: store mail in MongoDB and read it back from the command line.

Global options (before or after the command, listed once in ``aecs-mongo --help``): ``--uri``
(default ``$MONGODB_URI``), ``--db`` (default ``aecs``), ``--mailbox`` (default ``default``),
``--data-dir`` (default ``$AECS_DATA_DIR``, else ``$XDG_DATA_HOME/aecs-mongo``, i.e.
``~/.local/share/aecs-mongo``: one per user, wherever the command runs), ``--keep-server``
(default ``$AECS_KEEP_SERVER`` or ``5m``), ``--json`` and ``--verbose``. Without a URI the
embedded server (:mod:`aecs_mongo.embedded`) of the data directory (kept between runs) is used: the one already
running in the background for that directory, or a new one that keeps running after the command
and stops by itself once unused for ``--keep-server`` (:mod:`aecs_mongo.embedded.background`;
``server status|stop|start`` manage it). ``--keep-server 0`` starts a server of the command's
own, stopped when the command ends, also on Ctrl-C, SIGTERM or an error. It needs ``pip install
'aecs-mongo[embedded]'``.

Exit codes: 0 success; 1 the command ran but something failed (an input that could not be
stored, a message that is not there, a database error, a full disk, an unreachable server);
2 usage errors (bad options, a malformed URI, an ambiguous short id, no embedded server
installed); 130 interrupted. Every error a person can cause is one line on stderr, never a
traceback.

This module is the parser (global options here, each command's in
:mod:`aecs_mongo.commands.options`; no option is ever abbreviated), the command table, the one
place that prints and the run. The handlers are in :mod:`aecs_mongo.commands`, one module per
concern, imported only when their command runs; each returns an ``Output`` (data, text lines,
exit code) that :func:`_print` writes as text or, with ``--json``, as one JSON document (a
single object: ``show``, ``stats``, reports) or as JSON lines (the commands that list things:
one object per result, then a last object with ``next_cursor`` when there is more). The
``ingest`` report (failures, "already present") is described in :mod:`aecs_mongo.commands.ingest`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .commands import options
from .commands.base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    Context,
    Handler,
    Handlers,
    JsonLines,
    Output,
    data_dir_of,
    database_error_text,
    disk_full_message,
    json_default,
    note,
    stdout,
)
from .errors import AecsMongoError, SearchQueryError
from .pure.dialect import EMBEDDED

__all__ = ["build_parser", "command_names", "main"]


# --- the command table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command: its name and help, its options, and where its handler is.

    ``handlers``: imports the handlers' module (only when the command runs) and returns its
    table, where the handler is found by the command's name; None for ``server``, which manages
    the embedded server itself and runs without a store. ``indexes``: the command writes to the
    store, so its indexes are ensured (quietly, idempotent) before the handler runs.
    """

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    handlers: Callable[[], Handlers] | None
    indexes: bool = False


def _reading() -> Handlers:
    from .commands import reading

    return reading.HANDLERS


def _ingest() -> Handlers:
    from .commands import ingest

    return ingest.HANDLERS


def _lifecycle() -> Handlers:
    from .commands import lifecycle

    return lifecycle.HANDLERS


def _maintenance() -> Handlers:
    from .commands import maintenance

    return maintenance.HANDLERS


def _mail() -> Handlers:
    from .commands import mail

    return mail.HANDLERS


def _watch() -> Handlers:
    from .commands import watch

    return watch.HANDLERS


def _tagging() -> Handlers:
    from .commands import tagging

    return tagging.HANDLERS


def _agents() -> Handlers:
    from .commands import agents

    return agents.HANDLERS


_COMMANDS = (
    Command(
        "ingest",
        "store .eml files, directories, Maildir folders, mbox files and standard input",
        options.ingest,
        _ingest,
        indexes=True,
    ),
    Command("mailboxes", "the mailboxes of the database, with their message counts", options.nothing, _reading),
    Command("inbox", "a page of messages, newest first", options.inbox, _reading),
    Command("threads", "a page of conversations, most recent activity first", options.threads, _reading),
    Command("thread", "a thread as LLM context: newest N, oldest first, with positions", options.thread, _reading),
    Command("show", "one message (--raw: exact bytes, --html: the HTML body)", options.show, _reading),
    Command("with", "mail to or from one address, newest first", options.with_, _reading),
    Command("replies", "messages that reply to (or reference) a Message-ID", options.message_id, _reading),
    Command("find", "message ids by header value (seed 003 lookups), oldest first", options.find, _reading),
    Command(
        "search",
        'messages matching a query (words, "phrases", OR, NOT, from:, date:...), newest first',
        options.search,
        _reading,
    ),
    Command("count", "how many messages match a query", options.count, _reading),
    Command(
        "tag",
        "add and remove tags on the messages of a query: tag +todo -inbox -- from:boss ($seen marks read)",
        options.tag,
        _tagging,
        indexes=True,
    ),
    Command("tags", "each tag of the mailbox with its count, and how many are unread", options.nothing, _tagging),
    Command(
        "folder",
        "add and remove folders on the messages of a query: folder +Archive -INBOX -- tag:done",
        options.folder,
        _tagging,
        indexes=True,
    ),
    Command("delete", "delete a message from every tier", options.message_id, _lifecycle),
    Command(
        "export",
        "write the mailbox's raw mail, oldest first, as an mbox, a Maildir or .eml files",
        options.export,
        _lifecycle,
    ),
    Command("expire", "retention: remove mail older than a date from every tier", options.expire, _lifecycle),
    Command("erase", "remove every trace of the mailbox (offboarding, erasure requests)", options.erase, _lifecycle),
    Command(
        "reindex",
        "rebuild thread summaries and lookup fields from the messages; re-date undated mail by its Received header",
        options.nothing,
        _maintenance,
        indexes=True,
    ),
    Command("indexes", "create the store's indexes (idempotent) and report them", options.nothing, _maintenance),
    Command(
        "stats",
        "mailbox size, storage sizes, specVersion mix, and the engines serving search and vector search",
        options.nothing,
        _maintenance,
    ),
    Command("pop3", "download new mail from a POP3 server into the mailbox", options.pop3, _mail, indexes=True),
    Command(
        "migrate-gdbm",
        "copy an old UIDL-keyed GDBM message store into the mailbox",
        options.migrate_gdbm,
        _mail,
        indexes=True,
    ),
    Command("watch", "follow the mailbox: one line per newly stored message, until interrupted", options.watch, _watch),
    Command("mcp", "serve the mailbox to LLM agents over the Model Context Protocol", options.mcp, _agents),
    Command("server", "the embedded server kept running between commands: status, stop, start", options.server, None),
    Command(
        "blobs",
        "where the database's blobs are (show), and moving them to another store (migrate --to URL)",
        options.blobs,
        _maintenance,
    ),
    Command(
        "imap",
        "bring new mail of an IMAP account in (incremental: only what is new)",
        options.imap,
        _mail,
        indexes=True,
    ),
)


def command_names() -> list[str]:
    """Every sub-command (the tests loop over them)."""
    return [c.name for c in _COMMANDS]


# --- the parser -----------------------------------------------------------------------------------


_GLOBAL_HELP = (
    "'aecs-mongo --help' explains the global options (--uri, --db, --mailbox, --data-dir, --keep-server, --blobs,"
    " --search-index, --json, --verbose), which go before or after the command"
)


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes, explained once, in the main parser's help; sub-parsers
    take them too, without defaults (SUPPRESS) so they can be given before or after the command
    without one position overriding the other, and without repeating their help."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    def explain(text: str) -> str:
        return text if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("global options") if defaults else parser
    group.add_argument(
        "--uri",
        default=default(os.environ.get("MONGODB_URI")),
        help=explain("MongoDB URI (default: $MONGODB_URI; none: the embedded server of the data directory)"),
    )
    group.add_argument("--db", default=default("aecs"), help=explain("database name (default: aecs)"))
    group.add_argument(
        "--mailbox",
        default=default("default"),
        help=explain("mailbox id (default: default; 'aecs-mongo mailboxes' lists them)"),
    )
    group.add_argument(
        "--data-dir",
        default=default(None),
        help=explain(
            "data directory of the embedded server, kept between runs, one per user (default: $AECS_DATA_DIR,"
            " else $XDG_DATA_HOME/aecs-mongo, i.e. ~/.local/share/aecs-mongo)"
        ),
    )
    group.add_argument(
        "--keep-server",
        type=options.duration,
        default=default(os.environ.get("AECS_KEEP_SERVER") or "5m"),
        metavar="DURATION",
        help=explain(
            "keep the embedded server (with --uri: the URI's warm command host) running in the background"
            " this long after the last command (90s, 5m, 1h; 0: stop it with the command; default:"
            " $AECS_KEEP_SERVER or 5m)"
        ),
    )
    group.add_argument(
        "--blobs",
        default=default(os.environ.get("AECS_BLOBS")),
        metavar="URL",
        help=explain(
            "where raw mail, HTML and attachment bytes go: gridfs, gridfs://BUCKET, file:///DIR,"
            " s3://BUCKET/PREFIX (credentials and endpoint from the AWS environment), gs://..., az://..."
            " (default: $AECS_BLOBS, else where the database records them, else a directory in --data-dir"
            " for the embedded server and gridfs for --uri; 'aecs-mongo blobs migrate' moves them)"
        ),
    )
    group.add_argument(
        "--search-index",
        default=default(None),
        metavar="PATH",
        help=explain(
            "the local search index file, or 'none' (default: in --data-dir for the embedded server; in"
            " ~/.cache/aecs-mongo for --uri when the server has no text index)"
        ),
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help=explain(
            "JSON instead of text: one object (show, stats, reports) or, for commands that list things,"
            " one object per line and a last line with next_cursor when there is more"
        ),
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help=explain("show the normalizer's warnings about odd mail, and the embedded server in use"),
    )


def _version() -> str:
    from . import __version__

    return f"aecs-mongo {__version__}"


def build_parser() -> argparse.ArgumentParser:
    """The whole parser. ``allow_abbrev=False`` everywhere: an abbreviation would take an option
    for another (``--password`` for ``--password-env``, which then printed the password)."""
    parser = argparse.ArgumentParser(
        prog="aecs-mongo",
        description="Store email in MongoDB and read it back: ingest mail, list the inbox and threads, "
        "show a thread as LLM context. Without --uri or $MONGODB_URI the embedded server is used.",
        epilog="exit codes: 0 ok, 1 something failed (an error on stderr), 2 usage error, 130 interrupted",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=_version())
    _add_global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        p = sub.add_parser(
            command.name, help=command.help, description=command.help, epilog=_GLOBAL_HELP, allow_abbrev=False
        )
        command.options(p)
        _add_global_options(p, defaults=False)
        p.set_defaults(entry=command)
    return parser


# --- printing: the one place that writes a command's output on stdout ------------------------------


def _print(output: Output, as_json: bool, *, line: bool = False) -> int:
    """Write ``output`` on stdout: its ``content`` as it is, else its data as one JSON document
    (``line``: on one line, for a streamed item) or its text lines; then its notes on stderr.
    Returns its exit code."""
    out = stdout()
    if isinstance(output.content, bytes):
        out.flush()
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            raise CliError("stdout takes no bytes here; use a terminal or a pipe", EXIT_USAGE)
        buffer.write(output.content)
        buffer.flush()
    elif output.content is not None:
        out.write(output.content)
    elif as_json:
        if isinstance(output.data, JsonLines):
            for item in output.data.items:
                out.write(json.dumps(item, default=json_default, ensure_ascii=False) + "\n")
            if output.data.trailer is not None:
                out.write(json.dumps(output.data.trailer, default=json_default, ensure_ascii=False) + "\n")
        elif output.data is not None:
            json.dump(output.data, out, default=json_default, ensure_ascii=False, indent=None if line else 2)
            out.write("\n")
    else:
        for text in output.text:
            print(text, file=out)
    if line:
        out.flush()
    for text in output.notes:
        note(text)
    return output.code


# --- running --------------------------------------------------------------------------------------


def embedded_notice(data_dir: Path) -> str:
    """What a command says on stderr when it starts the embedded server (or with ``-v``)."""
    return f"no --uri or $MONGODB_URI: using the embedded {EMBEDDED.server} server, data in {data_dir}"


@contextlib.contextmanager
def _server_uri(args: argparse.Namespace) -> Iterator[str]:
    """``--uri``, or the embedded server of the data directory: the shared one in the background
    (``aecs_mongo.embedded.background``), started if none runs; with ``--keep-server 0``, and for
    ``pop3 --delete-on-server`` (which wants ``--sync-on-commit``), one of the command's own
    unless a shared one is running already. Sets ``args.embedded_dir`` (None with ``--uri``):
    a database error there that is a full disk is named as such. The embedded server is named
    on stderr once, by the command that starts it (and by every command with ``-v``)."""
    args.embedded_dir = None
    if args.uri:
        yield args.uri
        return
    from .commands.interrupts import signals_as_interrupt
    from .embedded import background
    from .embedded.server import INSTALL_HINT, EmbeddedServer, embedded_available

    if not embedded_available():
        raise CliError(
            f"no --uri or $MONGODB_URI, and the embedded server is not installed; install it with: {INSTALL_HINT}",
            EXIT_USAGE,
        )
    data_dir = data_dir_of(args)
    args.embedded_dir = data_dir
    # pop3 --delete-on-server deletes the only other copy: every commit is synced to disk
    durable = bool(getattr(args, "delete_on_server", False))
    said = False

    def notice() -> None:  # once, when this command starts the server, or with -v
        nonlocal said
        if not said:
            said = True
            note(embedded_notice(data_dir))

    if args.verbose:
        notice()
    with signals_as_interrupt(), contextlib.ExitStack() as stack:
        try:
            if args.keep_server > 0 and not durable:
                uri = stack.enter_context(background.use(data_dir, args.keep_server, on_start=notice))
            else:
                shared = stack.enter_context(background.attach(data_dir))
                if shared is None:
                    notice()
                    server = EmbeddedServer(data_dir=data_dir, sync_on_commit=durable)
                    stack.callback(server.stop)
                    server.start()
                    shared = server.uri
                uri = shared
        except AecsMongoError as exc:
            raise CliError(_start_failure(data_dir, str(exc))) from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise CliError(f"the embedded server did not start: {disk_full_message(data_dir)}") from None
            raise
        yield uri


def _start_failure(data_dir: Path, reason: str) -> str:
    """Why the embedded server did not start, on one line: its own last words, and the disk
    when that is full (a server that cannot write its log says nothing)."""
    from .embedded.server import low_on_disk

    reason = " | ".join(line.strip() for line in reason.splitlines() if line.strip())
    if low_on_disk(data_dir):
        reason = disk_full_message(data_dir) + (f"; the server said: {reason}" if reason else "")
    return f"the embedded server did not start: {reason}"


_PASSWORD = re.compile(r"(//[^/@:]*:)[^/@]*@")


def _uri_problem(uri: str, exc: Exception) -> str:
    """A malformed ``--uri`` in one line, the password in it (if any) never shown."""
    shown = _PASSWORD.sub(r"\1***@", uri)
    text = " ".join(str(exc).replace(uri, shown).split())
    return f"bad --uri ({shown}): {text}"


def _unreachable(exc: Exception, timeout_ms: int) -> str:
    """The driver's server-selection error without its topology dump: ``host: reason``."""
    text = str(exc).split(", Timeout:", 1)[0]
    text = re.sub(r" \(configured timeouts:[^)]*\)", "", text)
    return f"cannot reach the MongoDB server within {timeout_ms / 1000:g} s: {text}"


#: How long a command waits for an unreachable server before it says so.
SERVER_SELECTION_MS = 3000


def _database_error(args: argparse.Namespace, exc: Exception) -> CliError:
    """One line for a database error; a full disk under the embedded server named as such."""
    return CliError(database_error_text(exc, getattr(args, "embedded_dir", None)))


#: How the warm command host (:mod:`aecs_mongo.warm.host`) runs a command on what it keeps
#: open: for the parsed arguments, a context that yields an open ``MongoClient`` and the function
#: that opens the command's store (:func:`aecs_mongo.commands.stores.open_store` or a cache of it).
Connector = Callable[[argparse.Namespace], contextlib.AbstractContextManager[tuple[Any, Callable[..., Any]]]]


@contextlib.contextmanager
def _connect(args: argparse.Namespace) -> Iterator[tuple[Any, Callable[..., Any]]]:
    """A new client on the command's server (``--uri`` or the embedded one), closed at the end."""
    from pymongo import MongoClient
    from pymongo.errors import ConfigurationError

    from .commands.stores import open_store

    with _server_uri(args) as uri:
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(
                uri, serverSelectionTimeoutMS=SERVER_SELECTION_MS, connectTimeoutMS=SERVER_SELECTION_MS
            )
        except ConfigurationError as exc:  # InvalidURI is one; so is an SRV name that does not resolve
            raise CliError(_uri_problem(uri, exc), EXIT_USAGE) from None
        try:
            yield client, open_store
        finally:
            client.close()


def _run(args: argparse.Namespace, connect: Connector | None = None) -> int:
    command: Command = args.entry
    if command.handlers is None:  # 'server': the embedded server itself, no store
        from .commands.server import server

        return _print(server(args), args.json)

    from pymongo.errors import PyMongoError, ServerSelectionTimeoutError

    with (connect or _connect)(args) as (client, open_store):
        try:
            db = client[args.db]
            store = open_store(args, db)
            handler: Handler = command.handlers()[command.name]
            if command.indexes:
                store.ensure_indexes()

            def emit(item: Output) -> None:
                _print(item, args.json, line=True)

            return _print(handler(Context(args, store, db, emit)), args.json)
        except ServerSelectionTimeoutError as exc:
            raise CliError(_unreachable(exc, SERVER_SELECTION_MS)) from None
        except PyMongoError as exc:
            raise _database_error(args, exc) from None
        except SearchQueryError as exc:
            raise CliError(f"query: {exc}", EXIT_USAGE) from None
        except AecsMongoError as exc:
            raise CliError(str(exc)) from None


#: global options that take a value (the command is the first word that is not one of these)
_VALUED = ("--uri", "--db", "--mailbox", "--data-dir", "--keep-server", "--search-index")


def tag_changes(argv: Sequence[str]) -> list[str]:
    """``tag +todo -inbox -- QUERY`` (notmuch's words; ``folder +Archive -INBOX -- QUERY`` alike)
    as the parser takes them: each ``+NAME`` and ``-NAME`` before ``--`` becomes
    ``--add=NAME``/``--remove=NAME`` (``-v`` and ``--...`` stay options). Other commands' words
    are left as they are."""
    words = list(argv)
    at = 0
    while at < len(words) and words[at].startswith("-"):
        at += 2 if words[at] in _VALUED else 1
    if at >= len(words) or words[at] not in ("tag", "folder"):
        return words
    out = words[: at + 1]
    rest = iter(words[at + 1 :])
    for word in rest:
        if word == "--":
            out += [word, *rest]
            break
        if word in _VALUED:
            out += [word, next(rest, "")]
        elif len(word) > 1 and word[0] == "+":
            out.append("--add=" + word[1:])
        elif len(word) > 1 and word[0] == "-" and word[1] != "-" and word != "-v":
            out.append("--remove=" + word[1:])
        else:
            out.append(word)
    return out


def main(
    argv: Sequence[str] | None = None,
    *,
    parser: argparse.ArgumentParser | None = None,
    connect: Connector | None = None,
) -> int:
    """Run ``aecs-mongo`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.
    The warm command host passes the ``parser`` it built once and its ``connect``."""
    parser = parser or build_parser()
    try:
        args = parser.parse_args(tag_changes(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    normalizer_log = logging.getLogger("aecs_mongo.normalizer")
    previous_level = normalizer_log.level
    if not args.verbose:
        normalizer_log.setLevel(logging.ERROR)
    try:
        code = _run(args, connect)
        stdout().flush()  # a reader gone (| head) is seen here, not at exit
        return code
    except CliError as exc:
        note(f"error: {exc}")
        return exc.code
    except (TypeError, ValueError) as exc:  # bad input values the store rejects
        note(f"error: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:
        # the reader went away (| head): silence the flush at exit
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:  # a file the command reads or writes; a full disk is named as such
        where = exc.filename or ""
        if exc.errno == errno.ENOSPC:
            note(f"error: {disk_full_message(where or os.getcwd())}")
        else:
            note(f"error: {where + ': ' if where else ''}{exc.strerror or exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        note("interrupted")
        return EXIT_INTERRUPTED
    finally:
        normalizer_log.setLevel(previous_level)


def run() -> None:
    """The ``aecs-mongo`` console script (and ``python -m aecs_mongo``): :func:`main`, then exit.

    Every client the command opened is closed when ``main`` returns, but PyMongo's exit hook
    still joins their monitor threads, which sleep in steps of 0.5 s (PyMongo's minimum
    heartbeat interval): about half of a warm short command's time (0.45 of 0.9 s measured).
    Those threads are daemon threads of closed clients, so the hook is left out here; the
    interpreter's other exit work (flushing output, other hooks) runs as usual.
    """
    code = main()
    import atexit

    monitor = sys.modules.get("pymongo.synchronous.monitor")
    shutdown = getattr(monitor, "_shutdown_resources", None)
    allowed = getattr(sys.modules.get("pymongo.periodic_executor"), "_daemon_threads_allowed", None)
    if shutdown is not None and allowed is not None and allowed():
        atexit.unregister(shutdown)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
