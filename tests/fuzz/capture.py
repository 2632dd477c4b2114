"""A TCP proxy that records the request frames real clients send, as fuzzing seeds.

Start the proxy, start the broker advertising the proxy's address (``advertised.listeners``)
so that clients come back through it after bootstrap, then point the proxy at the broker.
Bytes are forwarded as they arrive in both directions; the client-to-broker stream is also
cut into frames (``int32 size`` + body) and kept in ``frames``.

Thread-safety: ``frames`` is appended to by the forwarding threads; read it after the
clients are done.
"""

from __future__ import annotations

import socket
import struct
import threading


class CapturingProxy:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.frames: list[bytes] = []
        self._target: tuple[str, int] | None = None
        self._socks: list[socket.socket] = []

    @property
    def advertised(self) -> str:
        return f"PLAINTEXT://127.0.0.1:{self.port}"

    def start(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._socks:
            sock.close()

    def _accept(self) -> None:
        assert self._target is not None
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self._target)
            except OSError:
                return
            self._socks += [client, upstream]
            threading.Thread(target=self._forward, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._forward, args=(upstream, client, False),
                             daemon=True).start()

    def _forward(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = bytearray()
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                if record:
                    pending += data
                    self._cut(pending)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _cut(self, pending: bytearray) -> None:
        while len(pending) >= 4:
            size = struct.unpack_from(">i", pending)[0]
            if len(pending) < 4 + size:
                return
            self.frames.append(bytes(pending[:4 + size]))
            del pending[:4 + size]
