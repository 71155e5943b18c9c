"""The warm command host: reads run in a process that keeps the client, the stores and the local
search index open (``python -m aecs_mongo.warm.host DATA_DIR``).

Started in the background by the command that finds the data directory's shared embedded server
without one (:func:`aecs_mongo.warm.spawn.start`, the companion the command line gives
``embedded.background.use``), it serves
``<data directory>/warm.sock`` (the directory is 0700; each connection's peer must be this
user: ``SO_PEERCRED``) one command at a time, and stops when the server stops (its record
gone or naming another process: the server idles out after ``--keep-server`` without
commands, and the commands the host runs count as uses), or when its socket is removed.

A command is the client's argv, run by ``aecs_mongo.cli.main`` as in-process, in the client's
working directory and environment, its stdout and stderr (same encodings, same buffering: line
by line on a terminal, in 8 KiB blocks into a pipe) sent back as they are flushed, the exit code
last. The host declines (the client then runs the command in-process) what it does not run
exactly as in-process would: arguments that do not parse, ``--uri``, another data directory,
another ``--keep-server`` than the running server's, a command that is not a read. Ctrl-C in
the client interrupts the command here (``KeyboardInterrupt`` in the command's thread: it
prints ``interrupted``, exit 130); a client that goes away interrupts it too. After an
interrupt or an unexpected error the host drops its client and stores and opens new ones.

What differs from in-process: what the library logs once per store (``first_time``) is logged
once per host, as the host keeps its stores between commands.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import io
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .client import socket_path
from .protocol import (
    ACCEPT,
    DECLINE,
    EXIT,
    INTERRUPT,
    REQUEST,
    STDERR,
    STDOUT,
    Request,
    decode_request,
    peer_uid,
    read_frame,
    send_frame,
    uri_name,
)
from .spawn import LOCK_NAME, private_dir, uri_key

__all__ = ["Host", "main"]

_TICK = 1.0  # seconds between looks at the server's record and the socket


class _Sink(io.RawIOBase):
    """A stream of the client (stdout or stderr): each write is one frame on the socket."""

    def __init__(self, conn: Any, kind: bytes, tty: bool) -> None:
        super().__init__()
        self._conn, self._kind, self._tty = conn, kind, tty

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._tty

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        send_frame(self._conn, self._kind, chunk)
        return len(chunk)


def _streams(conn: Any, request: Request) -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    """The client's stdout and stderr as the command writes them: buffered as Python buffers
    them (stdout line by line on a terminal, else in blocks; stderr line by line)."""
    made = []
    for kind, tty, (encoding, errors), lines in (
        (STDOUT, request.ttys[0], request.streams[0], request.ttys[0]),
        (STDERR, request.ttys[1], request.streams[1], True),
    ):
        buffered = io.BufferedWriter(_Sink(conn, kind, tty), io.DEFAULT_BUFFER_SIZE)
        made.append(io.TextIOWrapper(buffered, encoding=encoding, errors=errors, line_buffering=lines))
    out, err = made
    out.terminal_size = request.size  # type: ignore[attr-defined]  # read by commands.base.terminal_width
    return out, err


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()


class Host:
    """One data directory's host (its shared server's client), or one ``--uri``'s (``data_dir``
    None), and the stores opened so far."""

    def __init__(
        self, data_dir: Path | None, uri: str | None = None, home: Path | None = None, idle: float = 300.0
    ) -> None:
        from .. import cli
        from ..commands import reading, stores  # noqa: F401  (imported now, not by the first command)
        from ..embedded import background
        from ..synchronous.connection import MailClient

        self.data_dir = data_dir
        self.home = data_dir or home or Path.cwd()  # the host's working directory between commands
        self._cli = cli
        self._background = background
        self._parsers: dict[tuple[str | None, ...], argparse.ArgumentParser] = {}
        self._stores: dict[tuple[Any, ...], Any] = {}
        self.used = time.monotonic()
        self.idle = idle  # a --uri host's: seconds without a command before it stops
        if data_dir is None:
            assert uri
            self.record: dict[str, Any] = {}
            self.uri = uri
        else:
            found = background.running(data_dir)
            if found is None:
                raise SystemExit(f"aecs-mongo: warm host: no shared server runs for {data_dir}")
            self.record, self.uri = found
        self._client_class = MailClient
        self._client: Any = self._new_client()
        self._client.ping()  # connected before the first command
        self._command: tuple[int, Any] | None = None  # the running command's thread and client
        self.broken = False
        self._lock = threading.Lock()

    def _new_client(self) -> Any:
        ms = self._cli.SERVER_SELECTION_MS
        return self._client_class(self.uri, timeout_ms=ms)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._new_client()  # connects on its first use, as in-process
        return self._client

    def reset(self) -> None:
        """No client, no stores: new ones for the next command (after an interrupt or an
        unexpected error, what they were doing is not trusted). The old client is closed aside:
        closing talks to the server, which may be what hung."""
        self.broken = False
        self._stores.clear()
        client, self._client = self._client, None
        if client is not None:
            threading.Thread(target=_close_quietly, args=(client,), daemon=True).start()

    # --- is the server still the one we serve? ------------------------------------------------

    def alive(self) -> bool:
        """The server this host serves still runs (its record names it, it is no zombie); for a
        ``--uri``, a command came within its idle time (the last command's ``--keep-server``)."""
        if self.data_dir is None:
            return time.monotonic() - self.used < self.idle
        record = self._background.still_running(self.data_dir, int(self.record.get("pid", 0)))
        if record is None:
            return False
        self.record = record
        return True

    # --- one command -----------------------------------------------------------------------------

    def _parser(self) -> argparse.ArgumentParser:
        key = tuple(os.environ.get(name) for name in ("MONGODB_URI", "AECS_KEEP_SERVER", "AECS_BLOBS"))
        parser = self._parsers.get(key)
        if parser is None:
            parser = self._parsers[key] = self._cli.build_parser()
        return parser

    def accepts(self, argv: list[str]) -> bool:
        """Whether the command (in the client's directory and environment, set already) runs here
        exactly as in-process: parsed quietly, a read, on this data directory's shared server."""
        from ..commands.base import user_data_dir

        quiet = io.StringIO()
        try:
            with contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet):
                args = self._parser().parse_args(self._cli.tag_changes(argv))
        except SystemExit:
            return False
        if self.data_dir is None:  # a --uri: that one exactly; its --keep-server is the host's idle time
            if not args.entry.warm or args.uri != self.uri or args.keep_server <= 0:
                return False
            self.idle = args.keep_server
            return True
        given = getattr(args, "data_dir", None)
        data_dir = Path(given).expanduser().resolve() if given else user_data_dir().resolve()
        return (
            args.entry.warm
            and not args.uri
            and data_dir == self.data_dir
            and args.keep_server > 0
            and args.keep_server == self.record.get("idleSeconds")
        )

    def open_store(self, args: argparse.Namespace, database: Any, **options: Any) -> Any:
        """``stores.open_store``, kept: the same arguments get the same (open) store."""
        from ..commands.stores import open_store

        key = (
            args.database_name,
            args.mailbox,
            getattr(args, "blobs", None),
            os.environ.get("XDG_CACHE_HOME"),  # where a --uri's local index is
            os.environ.get("HOME"),
            getattr(args, "search_index", None),
            tuple(getattr(args, "owner", None) or ()),
            bool(getattr(args, "fast", False)),
            tuple(sorted(options.items())),
        )
        store = self._stores.get(key)
        if store is None:
            store = self._stores[key] = open_store(args, database, long_lived=True, **options)
        return store

    @contextlib.contextmanager
    def connect(self, args: argparse.Namespace) -> Iterator[tuple[Any, Callable[..., Any]]]:
        """What ``cli.main`` runs the command on: the kept client and stores, the server held as
        a command holds it."""
        from ..commands.base import data_dir_of, note

        if self.data_dir is None:
            args.embedded_dir = None
            yield self.client, self.open_store
            return
        args.embedded_dir = data_dir_of(args)  # the old ./aecs-data pointed out, as in-process
        if args.verbose:
            note(self._cli.embedded_notice(args.embedded_dir))
        with self._background.hold(self.data_dir):
            yield self.client, self.open_store

    def run(self, conn: Any, request: Request) -> int:
        """Run the accepted command; returns its exit code."""
        out, err = _streams(conn, request)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        with self._lock:
            self._command = (threading.get_ident(), conn)
        broken = False
        try:
            try:
                code = self._cli.main(request.argv, parser=self._parser(), connect=self.connect)
            except KeyboardInterrupt:  # an interrupt that came in as main returned
                code, broken = 130, True
            except Exception:  # what in-process prints as a traceback, with exit 1
                traceback.print_exc()
                code, broken = 1, True
            with self._lock:
                self._command = None
            with contextlib.suppress(OSError, ValueError):
                out.flush()
            with contextlib.suppress(OSError, ValueError):
                err.flush()
        except KeyboardInterrupt:
            code, broken = 130, True
        finally:
            with self._lock:
                self._command = None
            sys.stdout, sys.stderr = saved
        if broken or code == 130:
            self.broken = True  # reset once the client has its exit code
        return code

    def interrupt(self, conn: Any) -> None:
        """Interrupt the command of the client on ``conn`` if it still runs (from the thread that
        watches that client)."""
        with self._lock:
            if self._command is not None and self._command[1] is conn:
                signal.pthread_kill(self._command[0], signal.SIGINT)

    def handle(self, conn: Any) -> None:
        if peer_uid(conn) != os.geteuid():
            return
        conn.settimeout(5.0)
        frame = read_frame(conn)
        conn.settimeout(None)
        request = decode_request(frame[1]) if frame is not None and frame[0] == REQUEST else None
        if request is None:
            return
        saved_env = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(request.env)
            if os.environ.get("TZ") != saved_env.get("TZ"):
                time.tzset()
            try:
                os.chdir(request.cwd)
            except OSError:
                send_frame(conn, DECLINE)
                return
            if not self.alive() or not self.accepts(request.argv):
                send_frame(conn, DECLINE)
                return
            send_frame(conn, ACCEPT)
            watcher = threading.Thread(target=self._watch, args=(conn,), daemon=True)
            watcher.start()
            code = self.run(conn, request)
            self.used = time.monotonic()
            with contextlib.suppress(OSError):
                send_frame(conn, EXIT, code.to_bytes(4, "big", signed=True))
            if self.broken:
                self.reset()
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            if os.environ.get("TZ") != request.env.get("TZ"):
                time.tzset()
            os.chdir(self.home)

    def _watch(self, conn: Any) -> None:
        """Interrupt the command on the client's INTERRUPT frame, or when the client is gone."""
        while True:
            try:
                frame = read_frame(conn)
            except OSError:
                frame = None
            if frame is None or frame[0] == INTERRUPT:
                self.interrupt(conn)
                return


def _collect() -> None:
    """The garbage collector's work, done between commands (the client has its exit code): it
    runs only here (``gc.disable``), and what survives it (the client, the stores, their
    caches) is frozen out of the next collections, which then look at one command's objects."""
    gc.disable()
    gc.collect()
    gc.freeze()


def _serve(where: Path, name: str, uri: str | None = None, idle: float = 300.0) -> None:
    """Serve ``where/NAME.sock`` (``warm.sock`` in a data directory; a URI's in the runtime
    directory) until the server stops or, for a URI, ``idle`` seconds (the last command's
    ``--keep-server``) pass without a command; or until the socket is removed."""
    import socket

    os.umask(0o077)
    os.chdir(where)
    lock = os.open(where / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another host serves this directory or URI
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a command's interrupt
    try:
        host = Host(where, home=where) if uri is None else Host(None, uri, home=where, idle=idle)
    except Exception as exc:  # the server is not there (the URI's own words are never printed)
        raise SystemExit(f"aecs-mongo: warm host: cannot start: {type(exc).__name__}") from None
    _collect()
    sock_name = f"{name}.sock"
    path, fd = socket_path(str(where), sock_name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    if fd is not None:
        os.close(fd)
    listener.listen(16)
    listener.settimeout(_TICK)
    mine = os.stat(where / sock_name).st_ino
    what = where if uri is None else f"a --uri ({name})"  # never the URI: it may hold a password
    print(f"aecs-mongo: warm host {os.getpid()} serving {what}", file=sys.stderr, flush=True)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                conn = None
            if conn is not None:
                with conn:
                    try:
                        host.handle(conn)
                    except (Exception, KeyboardInterrupt):  # one bad request never ends the host
                        traceback.print_exc()
                        with contextlib.suppress(Exception):
                            host.reset()
                _collect()  # between commands, not during one
            try:
                still_ours = os.stat(where / sock_name).st_ino == mine
            except OSError:
                still_ours = False
            if not still_ours or not host.alive():
                break
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if os.stat(where / sock_name).st_ino == mine:
                os.unlink(where / sock_name)
        print(f"aecs-mongo: warm host {os.getpid()} stopped", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m aecs_mongo.warm.host DATA_DIR``, or ``... --uri RUNTIME_DIR NAME IDLE_SECONDS``
    with the URI on standard input (:func:`aecs_mongo.warm.spawn.start_uri`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 4 and args[0] == "--uri":
        where = Path(args[1]).resolve()
        uri = sys.stdin.readline().rstrip("\n")
        key = uri_key(where, create=False) if private_dir(where, create=False) else None
        if not uri or not key or uri_name(key, uri) != args[2]:
            raise SystemExit("aecs-mongo: warm host: not a private runtime directory, or not its URI")
        _serve(where, args[2], uri, float(args[3]))
        return
    if len(args) != 1:
        raise SystemExit("usage: python -m aecs_mongo.warm.host DATA_DIR | --uri RUNTIME_DIR NAME IDLE_SECONDS")
    _serve(Path(args[0]).resolve(), LOCK_NAME.removesuffix(".lock"))


if __name__ == "__main__":  # pragma: no cover
    main()
