"""This machine's physical limits, measured now, to set benchmark figures against.

    python3 -m bench.limits [--seconds 2] [--out FILE.json]

- memcpy: 64 MiB buffer copies (numpy, one call per copy);
- loopback TCP: one stream between two processes, 1 MiB sends, receiver discards;
- sendfile to a socket: a page-cached 256 MiB file sent with the native sendfile to a
  receiver that discards (the fetch path's ceiling);
- sequential write: 1 MiB write() calls growing a file in the data directory's
  filesystem (page cache, no fsync, data kept as a log keeps it), the append path's
  ceiling;
- ingest: 4 connections of 1 MiB sends into a process with a thread per connection that
  either discards what it receives or appends it to a growing file per connection. The
  second is what any broker must at least do (receive, then write to the page cache) with
  nothing else; its ratio to the first bounds a produce-ingest ratio on this machine;
- sendfile over 4 connections: a page-cached file sent by 4 threads to receivers that
  copy it out, the bound of a zero-copy fetch path with as many sending threads.

Figures are GB/s (1e9 bytes per second). The box is shared and noisy: a benchmark report
quotes the limits measured in the same run as its own figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 20


def memcpy_gbps(seconds: float) -> float:
    import numpy as np
    src = np.frombuffer(os.urandom(64 << 20), dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the destination's pages in before timing
    moved, stop = 0, time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < stop:
        np.copyto(dst, src)
        moved += src.nbytes
    return moved / (time.monotonic() - started) / 1e9


def _discard(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    scratch = memoryview(bytearray(CHUNK))
    while conn.recv_into(scratch):
        pass


def start_process_server(target) -> tuple[mp.Process, int]:
    """A forked process serving ``target(listener)`` on a free loopback port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    proc = mp.get_context("fork").Process(target=target, args=(listener,), daemon=True)
    proc.start()
    port = listener.getsockname()[1]
    listener.close()
    return proc, port


def loopback_gbps(seconds: float) -> float:
    proc, port = start_process_server(_discard)
    payload = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        moved, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            sock.sendall(payload)
            moved += CHUNK
        elapsed = time.monotonic() - started
    proc.join(5)
    return moved / elapsed / 1e9


def sendfile_gbps(seconds: float, directory: str) -> float:
    from pybroker._native.zerocopy import sendfile
    size = 256 << 20
    with tempfile.NamedTemporaryFile(dir=directory) as f:
        block = os.urandom(CHUNK)
        for _ in range(size // CHUNK):
            f.write(block)
        f.flush()
        proc, port = start_process_server(_discard)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            moved, offset, started = 0, 0, time.monotonic()
            while time.monotonic() - started < seconds:
                sent = sendfile(sock.fileno(), f.fileno(), offset, min(4 * CHUNK, size - offset))
                moved += sent
                offset = (offset + sent) % size
            elapsed = time.monotonic() - started
        proc.join(5)
    return moved / elapsed / 1e9


def write_gbps(seconds: float, directory: str) -> float:
    """A growing file, as a log grows: every write lands on fresh page-cache pages and
    the dirty data stays until writeback. (Truncating and rewriting reuses pages and
    drops dirty data unwritten: several times faster, and not what an append does.)"""
    block = os.urandom(CHUNK)
    with tempfile.NamedTemporaryFile(dir=directory) as f:
        fd = f.fileno()
        moved, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            os.write(fd, block)
            moved += CHUNK
        elapsed = time.monotonic() - started
    return moved / elapsed / 1e9


def _receive_into_files(listener: socket.socket, directory: str | None) -> None:
    """Each connection's thread receives into one buffer and, when ``directory`` is set,
    appends what it received to a growing file of its own (recv_into and write release
    the GIL, so the threads copy in parallel as native code would)."""
    def receive(conn: socket.socket) -> None:
        scratch = memoryview(bytearray(CHUNK))
        file = tempfile.TemporaryFile(dir=directory) if directory else None
        with conn:
            while n := conn.recv_into(scratch):
                if file is not None:
                    os.write(file.fileno(), scratch[:n])
        if file is not None:
            file.close()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=receive, args=(conn,), daemon=True).start()


def ingest_gbps(seconds: float, directory: str | None, connections: int = 4) -> float:
    """4 senders of 1 MiB blocks into a receiver that discards (``directory`` None) or
    appends to a growing file per connection in ``directory``."""
    payload = os.urandom(CHUNK)

    def send(sock: socket.socket, until: float) -> int:
        moved = 0
        while time.monotonic() < until:
            sock.sendall(payload)
            moved += CHUNK
        return moved

    return _to_receivers(seconds, directory, connections, send)


def _to_receivers(seconds: float, directory: str | None, connections: int, send) -> float:
    """GB/s of ``send(sock, until) -> bytes`` run for ``seconds`` in a thread per
    connection into a receiver process (``_receive_into_files``)."""
    proc, port = start_process_server(lambda listener: _receive_into_files(listener, directory))
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    started = time.monotonic()

    def run(sock: socket.socket) -> int:
        with sock:
            return send(sock, started + seconds)

    with ThreadPoolExecutor(connections) as pool:
        total = sum(pool.map(run, socks))
    elapsed = time.monotonic() - started
    proc.kill()
    proc.join(5)
    return total / elapsed / 1e9


def sendfile_connections_gbps(seconds: float, directory: str, connections: int = 4) -> float:
    """4 threads each sending a page-cached 64 MiB file round and round with the native
    sendfile, 4 MiB a call, to a receiver thread per connection that copies what it gets
    out (as a consumer does): what any zero-copy fetch path can reach here."""
    from pybroker._native.zerocopy import sendfile
    size, call = 64 << 20, 4 * CHUNK
    with tempfile.NamedTemporaryFile(dir=directory) as f:
        block = os.urandom(CHUNK)
        for _ in range(size // CHUNK):
            f.write(block)
        f.flush()

        def send(sock: socket.socket, until: float) -> int:
            moved = offset = 0
            while time.monotonic() < until:
                sent = sendfile(sock.fileno(), f.fileno(), offset, min(call, size - offset))
                moved += sent
                offset = (offset + sent) % size
            return moved

        return _to_receivers(seconds, None, connections, send)


def measure(seconds: float = 2.0, directory: str | None = None) -> dict[str, float]:
    directory = directory or tempfile.gettempdir()
    return {
        "memcpy_gbps": memcpy_gbps(seconds),
        "loopback_tcp_gbps": loopback_gbps(seconds),
        "sendfile_to_socket_gbps": sendfile_gbps(seconds, directory),
        "sequential_write_gbps": write_gbps(seconds, directory),
        "ingest_4_connections_discard_gbps": ingest_gbps(seconds, None),
        "ingest_4_connections_to_files_gbps": ingest_gbps(seconds, directory),
        "sendfile_4_connections_gbps": sendfile_connections_gbps(seconds, directory),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--dir", default=None, help="filesystem for the file limits")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = measure(args.seconds, args.dir)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
