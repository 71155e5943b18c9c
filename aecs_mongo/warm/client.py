"""The ``aecs-mongo`` entry point: a thin client for reads, else the command line in-process.

It imports only what a warm read needs (``_socket``, ``_signal``, ``struct`` and the command
table, :mod:`aecs_mongo.commands.table`: which commands are reads the host runs, which global
options take a value; no ``argparse``, no PyMongo; ``python -X importtime -m aecs_mongo inbox``
shows it). A read on the embedded default (no ``--uri``, no ``$MONGODB_URI``) whose data
directory has a warm command host is handed to it over the private socket
``<data directory>/warm.sock``; a read with ``--uri`` (or ``$MONGODB_URI``) to the URI's host,
whose socket is in the user's runtime directory (``$XDG_RUNTIME_DIR/aecs-mongo``), named by a
keyed hash of the URI. Anything else, and a read the host declines or cannot take (none
running, another user's, a broken one), runs in-process (:func:`aecs_mongo.cli.run`).
``AECS_WARM=0`` turns the warm path off; ``AECS_WARM=require`` makes a read that no host takes
fail instead (to check a setup; the tests use it).

Ctrl-C, SIGTERM and SIGHUP are passed to the host, which interrupts the command there (it then
prints ``interrupted`` and exits 130, as in-process); a second one, or a host that does not
answer within :data:`INTERRUPT_GRACE` seconds, ends the client at once with 130. A reader that
goes away (``| head``) ends the client with exit 1 and nothing on stderr, as in-process.
"""

from __future__ import annotations

import _socket
import os
import sys

from ..commands.table import FLAGS, VALUED, WARM
from .protocol import (
    ACCEPT,
    EXIT,
    INTERRUPT,
    KEY_NAME,
    OFF,
    REQUEST,
    SOCKET_NAME,
    STDERR,
    STDOUT,
    WARM_ENV,
    Request,
    encode_request,
    peer_uid,
    read_frame,
    runtime_dir,
    send_frame,
    uri_name,
)

TYPE_CHECKING = False  # typing's own costs an import: mypy knows the name
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # signal without its enums

__all__ = [
    "ACCEPT_TIMEOUT",
    "INTERRUPT_GRACE",
    "WARM_ENV",
    "Route",
    "run",
    "socket_path",
    "uri_route",
    "warm",
]

#: Seconds to wait for the host to take the command (it runs one at a time) before running it here.
ACCEPT_TIMEOUT = 5.0
#: Seconds the host has to end an interrupted command before the client exits by itself.
INTERRUPT_GRACE = 3.0

_EXIT_INTERRUPTED = 130
_MAX_UNIX_PATH = 100


#: Where a read's host listens: its directory, its socket's name (None: no host can be there
#: yet), and the URI it serves (None: the embedded default of that data directory).
Route = tuple[str, str | None, str | None]


def _route(argv: list[str], env: dict[str, str]) -> Route | None:
    """Where a host that may run ``argv`` listens, or None (run in-process): a command the table
    marks ``warm`` (a short read), no help or version asked for; on the embedded default the
    data directory's ``warm.sock``, with ``--uri``/``$MONGODB_URI`` the URI's socket in the
    user's runtime directory (:func:`uri_route`). The host parses the arguments itself and declines what it does not run
    exactly as in-process would."""
    if env.get(WARM_ENV, "").lower() in OFF:
        return None
    command, data_dir, uri, i = None, None, None, 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if arg == "--" or arg in ("-h", "--help", "--version"):
            return None
        if name in VALUED:
            if not eq:
                i += 1
                if i == len(argv):
                    return None
                value = argv[i]
            if name == "--uri":
                uri = value
            if name == "--data-dir":
                data_dir = value
        elif command is None:
            if arg.startswith("-") and arg not in FLAGS:
                return None
            if not arg.startswith("-"):
                command = arg
        i += 1
    if command not in WARM:
        return None
    if uri is None:
        uri = env.get("MONGODB_URI")
    if uri:
        return uri_route(uri, env)
    if data_dir:
        where = os.path.expanduser(data_dir)
    elif env.get("AECS_DATA_DIR"):
        where = os.path.expanduser(env["AECS_DATA_DIR"])
    else:
        xdg = env.get("XDG_DATA_HOME", "")
        base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".local", "share")
        where = os.path.join(base, "aecs-mongo")
    return os.path.realpath(where), SOCKET_NAME, None


def uri_route(uri: str, env: dict[str, str]) -> Route:
    """The runtime directory and the socket name of the host of ``uri`` (no name while the
    directory has no key: no host was ever started there)."""
    where = runtime_dir(env)
    try:
        fd = os.open(os.path.join(where, KEY_NAME), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return where, None, uri
    try:
        key = os.read(fd, 64)
    finally:
        os.close(fd)
    return where, uri_name(key, uri) + ".sock", uri


def socket_path(directory: str, name: str = SOCKET_NAME) -> tuple[str, int | None]:
    """The socket's path as ``connect``/``bind`` take it, and a directory descriptor to close
    after: a directory too deep for a Unix socket's 108 bytes is reached through
    ``/proc/self/fd``."""
    path = os.path.join(directory, name)
    if len(os.fsencode(path)) <= _MAX_UNIX_PATH:
        return path, None
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_PATH", 0))
    return f"/proc/self/fd/{fd}/{name}", fd


def _connect(route: Route) -> _socket.socket | None:
    """A connection to the host at ``route``, or None: no socket, no host, or not ours."""
    if route[1] is None:
        return None
    try:
        path, fd = socket_path(route[0], route[1])
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if peer_uid(sock) != os.geteuid():  # the directory is 0700: only a misconfiguration
            sock.close()
            return None
        return sock
    except OSError:
        sock.close()
        return None
    finally:
        if fd is not None:
            os.close(fd)


def _request(argv: list[str], env: dict[str, str]) -> Request:
    out, err = sys.stdout, sys.stderr
    ttys = (os.isatty(1), os.isatty(2))
    size = None
    if ttys[0]:
        try:
            size = os.get_terminal_size(1)
        except OSError:
            size = None
    return Request(
        argv,
        os.getcwd(),
        env,
        ttys,
        (size.columns, size.lines) if size else None,
        (
            (getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"),
            (getattr(err, "encoding", None) or "utf-8", getattr(err, "errors", None) or "backslashreplace"),
        ),
    )


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_stderr(data: bytes) -> None:
    """On stderr; a closed one is not a reason to stop relaying stdout."""
    try:
        _write(2, data)
    except OSError:
        return


class _Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP while the host runs the command: the first is passed on, a
    second one interrupts here. A signal ignored when we started stays ignored (``nohup``)."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.sent = False
        self.previous: dict[int, object] = {}
        for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
            if _signal.getsignal(sig) is not _signal.SIG_IGN:
                self.previous[sig] = _signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.sent:
            raise KeyboardInterrupt
        self.sent = True
        try:
            self.sock.settimeout(INTERRUPT_GRACE)
            send_frame(self.sock, INTERRUPT)
        except OSError:
            raise KeyboardInterrupt from None

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            _signal.signal(sig, handler)  # type: ignore[arg-type]


def _relay(sock: _socket.socket) -> int | None:
    """Write what the host sends until its exit code; None when it gave up before any output
    (the command then runs in-process)."""
    wrote = False
    interrupts = _Interrupts(sock)
    try:
        while True:
            try:
                frame = read_frame(sock)
            except TimeoutError:  # interrupted, and the host did not end the command in time
                raise KeyboardInterrupt from None
            except OSError:
                frame = None
            if frame is None:
                if interrupts.sent:
                    raise KeyboardInterrupt
                if not wrote:
                    return None
                _write_stderr(b"aecs-mongo: error: the warm command host stopped during the command\n")
                return 1
            kind, payload = frame
            if kind == EXIT:
                return int.from_bytes(payload, "big", signed=True)
            if kind == STDOUT:
                wrote = True
                try:
                    _write(1, payload)
                except BrokenPipeError:
                    # the reader went away (| head): as in-process, exit 1, nothing more said
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, 1)
                    return 1
            elif kind == STDERR:
                wrote = True
                _write_stderr(payload)
    except KeyboardInterrupt:
        _write_stderr(b"aecs-mongo: interrupted\n")
        return _EXIT_INTERRUPTED
    finally:
        interrupts.restore()
        sock.close()


def warm(argv: list[str]) -> int | None:
    """Run ``argv`` in the warm command host: its exit code, or None (run it in-process).
    ``AECS_WARM=require`` makes a read that no host takes an error (exit 1) instead: it shows
    whether the warm path serves a setup."""
    return _served(argv, dict(os.environ), _route(argv, dict(os.environ)))


def _served(argv: list[str], env: dict[str, str], route: Route | None) -> int | None:
    if route is None:
        return None
    sock = _connect(route)
    if sock is not None:
        try:
            sock.settimeout(ACCEPT_TIMEOUT)
            send_frame(sock, REQUEST, encode_request(_request(argv, env)))
            answer = read_frame(sock)
            if answer is not None and answer[0] == ACCEPT:
                sock.settimeout(None)
                return _relay(sock)
        except OSError:  # a timeout too: a busy or hung host
            pass
        sock.close()
    if env.get(WARM_ENV, "").lower() == "require":
        _write_stderr(f"aecs-mongo: error: no warm command host took the command in {route[0]}\n".encode())
        return 1
    return None


def run() -> None:
    """The ``aecs-mongo`` console script (and ``python -m aecs_mongo``). A ``--uri`` read that
    no host took starts the URI's host in the background (:func:`aecs_mongo.warm.spawn.start_uri`)
    for the reads that follow, then runs here (the embedded server's command starts its own)."""
    argv, env = sys.argv[1:], dict(os.environ)
    route = _route(argv, env)
    code = _served(argv, env, route)
    if code is None:
        if route is not None and route[2] is not None:
            from .spawn import start_uri

            start_uri(route[2], argv, env)
        from ..cli import run as in_process
        from .spawn import start

        in_process(companion=start)
        return
    sys.exit(code)
