"""A loopback TCP proxy that cuts connections at random points of the traffic.

``CuttingProxy(port, mean_bytes=4 << 20, seed=1)`` listens on a free loopback port and forwards
every connection it accepts to ``target_host:port``. It counts the bytes it forwards in both
directions over all connections together; each time the count passes the next cut point it
forwards the bytes up to that point, then closes both sides of the connection that carried
them (an abrupt close: the peer gets a reset, as from a network that dropped the path). The
distance between cut points is drawn from an exponential distribution of mean ``mean_bytes``
with a seeded RNG, so a run's cut points in the traffic are the same each time.

``uri(server_uri)``: the server's URI with its ``host:port`` replaced by the proxy's (the
embedded server's URIs connect directly, so the driver never bypasses the proxy for a host
that ``hello`` names). ``cuts`` and ``forwarded`` say what happened; ``close()`` stops it.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading

__all__ = ["CuttingProxy"]

_CHUNK = 64 * 1024


class CuttingProxy:
    """Forwards loopback connections to ``target_port`` and cuts one, on average, every
    ``mean_bytes`` of traffic (both directions, every connection counted together)."""

    def __init__(
        self, target_port: int, *, target_host: str = "127.0.0.1", mean_bytes: int = 4 << 20, seed: int = 1
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.mean_bytes = mean_bytes
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.forwarded = 0
        self.cuts = 0
        self.connections = 0
        self.next_cut = self._draw()
        self.closed = threading.Event()
        self.pairs: set[tuple[socket.socket, socket.socket]] = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, name="cutting-proxy", daemon=True).start()

    def uri(self, server_uri: str) -> str:
        """``server_uri`` with its ``host:port`` replaced by the proxy's."""
        target = f"{self.target_host}:{self.target_port}"
        if server_uri.count(target) != 1:
            raise ValueError(f"the URI does not name {target} once")
        return server_uri.replace(target, f"127.0.0.1:{self.port}")

    def _draw(self) -> int:
        return max(1, round(self.rng.expovariate(1 / self.mean_bytes)))

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.target_host, self.target_port))
            except OSError:
                _abort(client)
                continue
            pair = (client, upstream)
            with self.lock:
                self.pairs.add(pair)
                self.connections += 1
            for source, sink in (pair, pair[::-1]):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket], source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                with self.lock:
                    room = self.next_cut - self.forwarded
                    cut = len(data) >= room
                    if cut:
                        data = data[:room]
                        self.next_cut += self._draw()
                        self.cuts += 1
                    self.forwarded += len(data)
                sink.sendall(data)
                if cut:
                    break
        except OSError:
            pass
        self._drop(pair)

    def _drop(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self.lock:
            self.pairs.discard(pair)
        for s in pair:
            _abort(s)

    def close(self) -> None:
        self.closed.set()
        _abort(self.listener)
        with self.lock:
            pairs = list(self.pairs)
        for pair in pairs:
            self._drop(pair)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _abort(s: socket.socket) -> None:
    """Close ``s`` at once with a reset (no lingering, no orderly shutdown of the stream)."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
