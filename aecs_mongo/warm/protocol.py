"""The framing of the warm path's socket: standard library only, and its C parts (``_socket``,
not ``socket``, which imports ``enum`` and more): the thin client imports it.

Every message is a frame: one type byte, the payload's length (4 bytes, big-endian), the
payload. The client sends ``REQUEST`` (the command, see :func:`encode_request`), then
``INTERRUPT`` frames (Ctrl-C, SIGTERM, SIGHUP); the host answers ``ACCEPT`` or ``DECLINE`` (the
client then runs the command in-process), then ``STDOUT``/``STDERR`` bytes in the order the
command wrote them, then ``EXIT`` (the exit code, 4 bytes, big-endian, signed).
"""

from __future__ import annotations

import _socket
import os
import struct

__all__ = [
    "ACCEPT",
    "DECLINE",
    "EXIT",
    "INTERRUPT",
    "KEY_NAME",
    "OFF",
    "REQUEST",
    "SOCKET_NAME",
    "STDERR",
    "STDOUT",
    "VERSION",
    "WARM_ENV",
    "Request",
    "decode_request",
    "encode_request",
    "peer_uid",
    "read_frame",
    "runtime_dir",
    "send_frame",
    "uri_name",
]

#: ``AECS_WARM=0`` (or ``no``, ``off``, ``false``): every command runs in-process, no host starts.
WARM_ENV = "AECS_WARM"
#: The values of ``AECS_WARM`` that turn the warm path off.
OFF = ("0", "no", "off", "false")

#: The socket's name in the data directory.
SOCKET_NAME = "warm.sock"
#: In the runtime directory (``--uri``): 32 random bytes, the key of the hash that names a URI's
#: socket, so that no file name tells a URI (nor a guess at its password) to anyone
KEY_NAME = "key"

#: The request layout's version: a host that does not know it declines.
VERSION = "1"

REQUEST, INTERRUPT = b"R", b"I"
ACCEPT, DECLINE, STDOUT, STDERR, EXIT = b"A", b"D", b"O", b"E", b"X"

_HEAD = struct.Struct(">cI")
_MAX_FRAME = 64 << 20


def send_frame(sock: _socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(_HEAD.pack(kind, len(payload)) + payload)


def _exactly(sock: _socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: _socket.socket) -> tuple[bytes, bytes] | None:
    """The next frame's ``(type, payload)``; None when the other side closed (or sent garbage)."""
    head = _exactly(sock, _HEAD.size)
    if head is None:
        return None
    kind, size = _HEAD.unpack(head)
    if size > _MAX_FRAME:
        return None
    payload = _exactly(sock, size) if size else b""
    return None if payload is None else (kind, payload)


def peer_uid(sock: _socket.socket) -> int:
    """The user id of the process at the other end (``SO_PEERCRED``: the kernel's word)."""
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def runtime_dir(env: dict[str, str]) -> str:
    """The user's directory of ``--uri`` hosts: ``$XDG_RUNTIME_DIR/aecs-mongo``, else
    ``aecs-mongo-UID`` in ``$TMPDIR`` (``/tmp``); 0700, made by the host's starter."""
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "aecs-mongo")
    tmp = env.get("TMPDIR", "")
    return os.path.join(tmp if tmp and os.path.isabs(tmp) else "/tmp", f"aecs-mongo-{os.geteuid()}")


def uri_name(key: bytes, uri: str) -> str:
    """The name of a URI's host files (``NAME.sock``, ``NAME.lock``, ``NAME.log``): a keyed
    SHA-256 of the URI, never the URI."""
    try:
        sha256 = __import__("_sha2").sha256  # the C hash alone (hashlib loads OpenSSL): 3.12+
    except ImportError:
        try:
            sha256 = __import__("_sha256").sha256  # 3.11
        except ImportError:  # pragma: no cover (a build without them)
            sha256 = __import__("hashlib").sha256
    return "warm-" + str(sha256(key + b"\0" + os.fsencode(uri)).hexdigest()[:32])


class Request:
    """A command as the client hands it over (every text as the OS gives it: ``os.fsencode``)."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        ttys: tuple[bool, bool],
        size: tuple[int, int] | None,
        streams: tuple[tuple[str, str], tuple[str, str]],
    ) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
        #: whether stdout, stderr are terminals
        self.ttys = ttys
        #: the terminal's (columns, lines) when stdout is one
        self.size = size
        #: (encoding, errors) of stdout and of stderr
        self.streams = streams


def encode_request(request: Request) -> bytes:
    """NUL-separated fields (no argument, path or environment entry holds a NUL)."""
    (out_enc, out_err), (err_enc, err_err) = request.streams
    columns, lines = request.size or (0, 0)
    fields = [
        VERSION,
        request.cwd,
        "1" if request.ttys[0] else "0",
        "1" if request.ttys[1] else "0",
        str(columns),
        str(lines),
        out_enc,
        out_err,
        err_enc,
        err_err,
        str(len(request.argv)),
        *request.argv,
        *(f"{k}={v}" for k, v in request.env.items()),
    ]
    return b"\0".join(os.fsencode(f) for f in fields)


def decode_request(payload: bytes) -> Request | None:
    """The request, or None when it is not one this host understands."""
    fields = [os.fsdecode(f) for f in payload.split(b"\0")]
    if len(fields) < 11 or fields[0] != VERSION or not fields[10].isdigit():
        return None
    count = int(fields[10])
    argv, rest = fields[11 : 11 + count], fields[11 + count :]
    if len(argv) != count or not all(fields[i].isdigit() for i in (4, 5)):
        return None
    env = dict(entry.split("=", 1) for entry in rest if "=" in entry)
    columns, lines = int(fields[4]), int(fields[5])
    return Request(
        argv,
        fields[1],
        env,
        (fields[2] == "1", fields[3] == "1"),
        (columns, lines) if columns and lines else None,
        ((fields[6], fields[7]), (fields[8], fields[9])),
    )
