"""The embedded server's launcher: SecantusDB (``python -m secantus``) in this process, with the
watch that stops it when it is no longer wanted and the patches of :mod:`.secantus_patches`.

``python -m aecs_mongo.embedded.launcher --parent PID -- SERVER_ARGS``: a command's own server
(:class:`~aecs_mongo.embedded.server.EmbeddedServer`), stopped when the process PID is gone.
``... --shared DATA_DIR -- SERVER_ARGS``: the shared server (:mod:`.background`), stopped when
idle or when its record no longer names it. ``... --check``: the patches' check, nothing started.

On every start's path: before the server it imports the standard library and SecantusDB only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

__all__ = [
    "CLIENTS_LOCK",
    "JOURNAL_FILE_MAX",
    "MODULE",
    "RECORD",
    "START_LOCK",
    "USED",
    "child_env",
    "command",
    "main",
    "patch_server",
    "relay_signals",
    "say",
    "storage_environment",
    "wake_listener",
    "watch_idle",
    "watch_parent",
]

MODULE = "aecs_mongo.embedded.launcher"
# the shared server's files in its data directory (:mod:`.background` describes them)
RECORD = "server.json"
START_LOCK = "server.lock"
CLIENTS_LOCK = "server.clients"
USED = "server.used"
#: The size of each of the server's journal files (WiredTiger's ``log.file_max``). WiredTiger
#: gives a journal file its whole size when it creates it, and a stopped server keeps its last
#: one, so this is the floor of every data directory. 1 MB files lowered it to 1 MB, but a
#: server under sustained writes then creates hundreds of files between two checkpoints, and
#: that was not measured: SecantusDB's own 10 MB is kept until it is.
JOURNAL_FILE_MAX = "10MB"
#: A server started less than this ago whose record does not name it yet is left running: its
#: starter writes the record right after starting it.
RECORD_GRACE_SECONDS = 5.0


def command(options: list[str], server_args: list[str]) -> list[str]:
    """The command line that runs SecantusDB with ``server_args`` under this launcher."""
    return [sys.executable, "-m", MODULE, *options, "--", *server_args]


def child_env() -> dict[str, str] | None:
    """The environment for ``command``: this one (None) when a new interpreter finds this package
    where this one did, else with the package's directory added to ``PYTHONPATH`` (a run from a
    source tree's working directory, the server started in another one)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if any(entry and os.path.abspath(entry) == root for entry in sys.path[1:]):
        return None
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": path + os.pathsep + root if path else root}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # the server's log


def _address(server_args: list[str]) -> tuple[str, int] | None:
    try:
        return server_args[server_args.index("--host") + 1], int(server_args[server_args.index("--port") + 1])
    except (ValueError, IndexError):
        return None


def wake_listener(address: tuple[str, int] | None, seconds: float) -> None:
    """Connect to the server's own port until this process is gone (at most ``seconds``).

    SecantusDB's stop closes its listening socket and joins the accept thread for up to 2 s, but
    on Linux closing a socket does not wake a thread blocked in ``accept()``; a connection does.
    Whoever stops the server does this (:func:`aecs_mongo.embedded.server.wake_listener`).
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if address is not None:
            with contextlib.suppress(OSError):
                socket.create_connection(address, timeout=0.2).close()
        time.sleep(0.02)


def relay_signals() -> None:
    """Hand SIGTERM and SIGINT to the main thread when another thread took them.

    CPython runs a Python signal handler in the main thread only, and SecantusDB's main thread
    waits on a lock that only a signal given to that thread interrupts: given to another thread,
    a SIGTERM was never handled. The wakeup fd says a signal came; when the main thread is not
    in the handler 50 ms later, the signal is sent to it (the handler then runs once). Called
    from the main thread, before the server installs its handlers.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    main_id = threading.main_thread().ident
    assert main_id is not None
    told: list[bool] = []

    def in_handler(signum: int) -> bool:
        code = getattr(signal.getsignal(signum), "__code__", None)
        if code is None:
            if not told:
                told.append(True)
                say(f"aecs-mongo: the server's handler of signal {signum} has no Python code: not relayed")
            return True
        frame = sys._current_frames().get(main_id)
        while frame is not None:
            if frame.f_code is code:
                return True
            frame = frame.f_back
        return False

    def watch() -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum in (signal.SIGTERM, signal.SIGINT):
                    time.sleep(0.05)
                    if not in_handler(signum):
                        signal.pthread_kill(main_id, signum)

    threading.Thread(target=watch, name="aecs-signal-relay", daemon=True).start()


def _stop(reason: str | None, address: tuple[str, int] | None, grace: float) -> NoReturn:
    """SecantusDB's clean stop (one SIGTERM: its handler is not reentrant), then a hard exit if
    the server still runs ``grace`` seconds later."""
    if reason is not None:
        say(f"aecs-mongo: stopping the shared server: {reason}")
    os.kill(os.getpid(), signal.SIGTERM)
    wake_listener(address, grace)
    say("aecs-mongo: the server did not stop; exiting")
    os._exit(1)


def watch_parent(parent: int, address: tuple[str, int] | None, grace: float) -> None:
    """Stop the server once ``parent`` is gone (a command killed with SIGKILL must not leave a
    server holding its data directory). Polled, not PR_SET_PDEATHSIG: Linux sends that signal
    again each time an exiting thread of the parent hands the child on to the next one."""
    while os.getppid() == parent:
        time.sleep(0.2)
    _stop(None, address, grace)


def _take(path: str) -> int | None:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


def _record(path: str) -> object:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def watch_idle(data_dir: str, tick: float, address: tuple[str, int] | None, grace: float) -> None:
    """The shared server's watch: every ``tick``, stop when its record no longer names it, or
    when no command holds ``server.clients`` nor ``server.lock`` and the last use is the
    record's ``idleSeconds`` ago (the record removed first; both locks held until the end)."""
    started = time.time()
    record_path = os.path.join(data_dir, RECORD)
    while True:
        time.sleep(tick)
        mine = _record(record_path)
        if not isinstance(mine, dict) or mine.get("pid") != os.getpid():
            if time.time() - started < RECORD_GRACE_SECONDS:
                continue
            _stop(f"its record in {data_dir} is gone or names another server", address, grace)
        lock = _take(os.path.join(data_dir, START_LOCK))
        if lock is None:
            continue
        clients = _take(os.path.join(data_dir, CLIENTS_LOCK))
        if clients is None:
            os.close(lock)
            continue
        try:
            used = os.stat(os.path.join(data_dir, USED)).st_mtime
        except OSError:
            used = started
        if time.time() - max(used, started) >= float(mine.get("idleSeconds", 300)):
            os.unlink(record_path)
            _stop("idle", address, grace)
        os.close(clients)
        os.close(lock)


def storage_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that size the server's storage: ``WIREDTIGER_CONFIG``, which
    WiredTiger reads at every open after the server's own settings (``JOURNAL_FILE_MAX``),
    with whatever it already held after ours (what a user set there wins)."""
    mine = f"log=(file_max={JOURNAL_FILE_MAX})"
    theirs = (os.environ if environ is None else environ).get("WIREDTIGER_CONFIG", "")
    return {"WIREDTIGER_CONFIG": f"{mine},{theirs}" if theirs else mine}


def patch_server(report: Callable[[str], None] = say) -> bool:
    """Apply :mod:`.secantus_patches` to the installed SecantusDB; False when it must not run."""
    from . import secantus_patches

    try:
        import secantus
    except ImportError as exc:
        report(f"aecs-mongo: SecantusDB is not installed ({exc})")
        return False
    try:
        from secantus import storage
    except ImportError:
        storage = None
    version = str(getattr(secantus, "__version__", "unknown"))
    return secantus_patches.apply(storage, version, report)


def main(argv: list[str] | None = None) -> int:
    import argparse

    args = sys.argv[1:] if argv is None else argv
    own, server_args = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="Run the embedded SecantusDB server.")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--parent", type=int, metavar="PID", help="a command's own server: stop when PID is gone")
    who.add_argument("--shared", metavar="DATA_DIR", help="the shared server of DATA_DIR: stop when idle")
    who.add_argument("--check", action="store_true", help="check and apply the patches, start nothing")
    parser.add_argument("--tick", type=float, default=1.0, help="seconds between the shared server's checks")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds a stop may take before a hard exit")
    options = parser.parse_args(own)
    if options.check:
        said: list[str] = []
        whole = patch_server(said.append)
        print("\n".join(said) or "aecs-mongo: every patch applies to the installed SecantusDB")
        return 0 if whole and not said else 1
    address = _address(server_args)
    if options.parent is not None:
        if os.getppid() != options.parent:
            sys.exit("aecs-mongo: the parent of the embedded server is gone")
        watch = threading.Thread(
            target=watch_parent, args=(options.parent, address, options.grace), name="aecs-orphan-watch"
        )
    else:
        watch = threading.Thread(
            target=watch_idle, args=(options.shared, options.tick, address, options.grace), name="aecs-idle-watch"
        )
    watch.daemon = True
    watch.start()
    relay_signals()
    if not patch_server():
        return 1
    import runpy

    os.environ.update(storage_environment())
    sys.argv = [sys.argv[0], *server_args]
    runpy.run_module("secantus", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
