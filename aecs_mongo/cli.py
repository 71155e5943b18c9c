"""``aecs-mongo``: store mail in MongoDB and read it back from the command line.

The global options (``--uri``, ``--db``, ``--mailbox``, ``--data-dir``...; their defaults and
help in :data:`aecs_mongo.commands.table.GLOBAL_OPTIONS`, listed once in ``aecs-mongo --help``)
go before or after the command. Without a URI the embedded server of the data
directory (kept between runs) is used: the one already running in the background for that
directory, or a new one that keeps running after the command and stops by itself once unused
for ``--keep-server`` (:mod:`aecs_mongo.embedded.background`; ``server status|stop|start``
manage it). ``--keep-server 0`` starts a server of the command's own, stopped when the command
ends, also on Ctrl-C, SIGTERM or an error. It needs ``pip install 'aecs-mongo[embedded]'``.

Exit codes: 0 success; 1 the command ran but something failed (an input that could not be
stored, a message that is not there, a database error, a full disk, an unreachable server);
2 usage errors (bad options, a malformed URI, an ambiguous short id, no embedded server
installed); 130 interrupted. Every error a person can cause is one line on stderr, never a
traceback.

This module is the parser, built from the command table (:mod:`aecs_mongo.commands.table`: the
global options and the commands, each command's options in :mod:`aecs_mongo.commands.options`;
no option is ever abbreviated), the one place that prints and the run. The handlers are in
:mod:`aecs_mongo.commands`, one module per concern, imported only when their command runs;
each returns an ``Output`` (data, text lines, exit code) that :func:`_print` writes as text or,
with ``--json``, as one JSON document (a single object: ``show``, ``stats``, reports) or as
JSON lines (the commands that list things: one object per result, then a last object with
``next_cursor`` when there is more). The ``ingest`` report (failures, "already present") is
described in :mod:`aecs_mongo.commands.ingest`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .commands import options, table
from .commands.base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    Context,
    Handler,
    JsonLines,
    Output,
    data_dir_of,
    database_error_text,
    disk_full_message,
    json_default,
    note,
    stdout,
)
from .commands.table import Command
from .errors import AecsMongoError, SearchQueryError
from .pure.dialect import EMBEDDED

__all__ = ["build_parser", "command_names", "main"]


# --- the command table ---------------------------------------------------------------------------


def command_names() -> list[str]:
    """Every sub-command (the tests loop over them)."""
    return [c.name for c in table.COMMANDS]


def _handler(command: Command) -> Callable[..., Output]:
    """The command's handler (``"module:function"`` in :mod:`aecs_mongo.commands`), imported now."""
    module, _, function = command.handler.partition(":")
    handler: Callable[..., Output] = getattr(importlib.import_module(f"{__package__}.commands.{module}"), function)
    return handler


# --- the parser -----------------------------------------------------------------------------------


_GLOBAL_HELP = (
    "'aecs-mongo --help' explains the global options ("
    + ", ".join(option.names[-1] for option in table.GLOBAL_OPTIONS)
    + "), which go before or after the command"
)


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes (:data:`aecs_mongo.commands.table.GLOBAL_OPTIONS`),
    explained once, in the main parser's help; sub-parsers take them too, without defaults
    (SUPPRESS) so they can be given before or after the command without one position overriding
    the other, and without repeating their help."""
    group = parser.add_argument_group("global options") if defaults else parser
    for option in table.GLOBAL_OPTIONS:
        if option.flag:
            value: object = False
        else:
            value = (os.environ.get(option.env) if option.env else None) or option.default
        settings: dict[str, Any] = {
            "default": value if defaults else argparse.SUPPRESS,
            "help": option.help if defaults else argparse.SUPPRESS,
        }
        if option.flag:
            settings["action"] = "store_true"
        if option.metavar is not None:
            settings["metavar"] = option.metavar
        if option.dest is not None:
            settings["dest"] = option.dest
        if option.type is not None:
            settings["type"] = getattr(options, option.type)
        group.add_argument(*option.names, **settings)


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
    for command in table.COMMANDS:
        p = sub.add_parser(
            command.name, help=command.help, description=command.help, epilog=_GLOBAL_HELP, allow_abbrev=False
        )
        getattr(options, command.options)(p)
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
                shared_server = background.use(data_dir, args.keep_server, on_start=notice, companion=args.companion)
                uri = stack.enter_context(shared_server)
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
#: open: for the parsed arguments, a context that yields an open ``MailClient`` (the store
#: layer's client: ``aecs_mongo.synchronous.connection``) and the function that opens the
#: command's store (:func:`aecs_mongo.commands.stores.open_store` or a cache of it).
Connector = Callable[[argparse.Namespace], contextlib.AbstractContextManager[tuple[Any, Callable[..., Any]]]]


@contextlib.contextmanager
def _connect(args: argparse.Namespace) -> Iterator[tuple[Any, Callable[..., Any]]]:
    """A new client on the command's server (``--uri`` or the embedded one), closed at the end."""
    from .commands.stores import open_store
    from .errors import DatabaseUriError
    from .synchronous.connection import MailClient

    with _server_uri(args) as uri:
        try:
            client = MailClient(uri, timeout_ms=SERVER_SELECTION_MS)
        except DatabaseUriError as exc:  # a malformed URI; so is an SRV name that does not resolve
            raise CliError(_uri_problem(uri, exc), EXIT_USAGE) from None
        try:
            yield client, open_store
        finally:
            client.close()


def _run(args: argparse.Namespace, connect: Connector | None = None) -> int:
    command: Command = args.entry
    if not command.store:  # 'server': the embedded server itself
        return _print(_handler(command)(args, companion=args.companion), args.json)

    from .errors import DatabaseError, ServerUnavailableError
    from .synchronous.connection import database_errors

    with (connect or _connect)(args) as (client, open_store):
        try:
            with database_errors():
                database = client.database(args.database_name)
                store = open_store(args, database)
                handler: Handler = _handler(command)
                if command.indexes:
                    store.ensure_indexes()

                def emit(item: Output) -> None:
                    _print(item, args.json, line=True)

                return _print(handler(Context(args, store, database, emit)), args.json)
        except ServerUnavailableError as exc:
            raise CliError(_unreachable(exc, SERVER_SELECTION_MS)) from None
        except DatabaseError as exc:
            raise _database_error(args, exc) from None
        except SearchQueryError as exc:
            raise CliError(f"query: {exc}", EXIT_USAGE) from None
        except AecsMongoError as exc:
            raise CliError(str(exc)) from None


def tag_changes(argv: Sequence[str]) -> list[str]:
    """``tag +todo -inbox -- QUERY`` (notmuch's words; ``folder +Archive -INBOX -- QUERY`` alike)
    as the parser takes them: each ``+NAME`` and ``-NAME`` before ``--`` becomes
    ``--add=NAME``/``--remove=NAME`` (``-v`` and ``--...`` stay options). Other commands' words
    are left as they are."""
    words = list(argv)
    at = 0
    while at < len(words) and words[at].startswith("-"):
        at += 2 if words[at] in table.VALUED else 1
    if at >= len(words) or words[at] not in ("tag", "folder"):
        return words
    out = words[: at + 1]
    rest = iter(words[at + 1 :])
    for word in rest:
        if word == "--":
            out += [word, *rest]
            break
        if word in table.VALUED:
            out += [word, next(rest, "")]
        elif len(word) > 1 and word[0] == "+":
            out.append("--add=" + word[1:])
        elif len(word) > 1 and word[0] == "-" and word[1] != "-" and word not in table.FLAGS:
            out.append("--remove=" + word[1:])
        else:
            out.append(word)
    return out


def main(
    argv: Sequence[str] | None = None,
    *,
    parser: argparse.ArgumentParser | None = None,
    connect: Connector | None = None,
    companion: Callable[[Path], None] | None = None,
) -> int:
    """Run ``aecs-mongo`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.
    The warm command host passes the ``parser`` it built once and its ``connect``; the thin
    client passes the ``companion`` started beside a shared embedded server it starts (the warm
    command host, for the reads that follow)."""
    parser = parser or build_parser()
    try:
        args = parser.parse_args(tag_changes(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.companion = companion
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


def run(companion: Callable[[Path], None] | None = None) -> None:
    """The ``aecs-mongo`` console script (and ``python -m aecs_mongo``): :func:`main`, then exit.

    Every client the command opened is closed when ``main`` returns, but the driver's exit hook
    still joins their monitor threads: about half of a warm short command's time. Those threads
    are daemon threads of closed clients, so the hook is left out (``skip_monitor_join_at_exit``);
    the interpreter's other exit work (flushing output, other hooks) runs as usual.
    """
    code = main(companion=companion)
    if "aecs_mongo.synchronous.connection" in sys.modules:  # a client was opened
        from .synchronous.connection import skip_monitor_join_at_exit

        skip_monitor_join_at_exit()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
