"""sendfile and splice over real files and real sockets (socket pairs, loopback TCP).

Every test checks the exact bytes that arrive; partial sends come from real full socket
buffers (small SO_SNDBUF, nobody reading), never from a simulated socket.
"""

import errno
import os
import select
import socket
import subprocess
import sys
import threading

import pytest

from pybroker._native import zerocopy

KINDS = ["sendfile", "splice"]


@pytest.fixture
def segment(tmp_path):
    """A 3 MiB file of random bytes, opened read-only like a log segment."""
    data = os.urandom(3 << 20)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


def socket_pairs():
    return {"socketpair": socket.socketpair, "tcp": tcp_pair}


class Sender:
    """One path (sendfile, or splice through the connection's pipe) behind one call."""

    def __init__(self, kind):
        self.pipe = zerocopy.SplicePipe() if kind == "splice" else None

    def send(self, out_fd, in_fd, offset, count):
        if self.pipe is None:
            return zerocopy.sendfile(out_fd, in_fd, offset, count)
        return self.pipe.splice(out_fd, in_fd, offset, count)


def drain(sock, size, into):
    """Read exactly `size` bytes on a thread, as the peer of a fetch would."""

    def run():
        while len(into) < size:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return
            into.extend(chunk)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def send_region(sender, sock, fd, offset, count):
    """The server's loop: send, wait for writability when the socket is full, resume."""
    sent = 0
    while sent < count:
        n = sender.send(sock.fileno(), fd, offset + sent, count - sent)
        if n == 0:
            select.select([], [sock], [], 10)
        sent += n
    return sent


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pair", ["socketpair", "tcp"])
def test_moves_the_exact_bytes(segment, kind, pair):
    fd, data = segment
    out, peer = socket_pairs()[pair]()
    out.setblocking(False)
    received = bytearray()
    regions = [(0, 1), (1, 4095), (4096, 1 << 20), (12345, (2 << 20) + 7), (len(data) - 5, 5)]
    total = sum(count for _, count in regions)
    reader = drain(peer, total, received)
    sender = Sender(kind)
    before = zerocopy.zerocopy_counters()["zero_copy_bytes"]
    for offset, count in regions:
        assert send_region(sender, out, fd, offset, count) == count
    reader.join(timeout=30)
    assert bytes(received) == b"".join(data[o : o + c] for o, c in regions)
    assert zerocopy.zerocopy_counters()["zero_copy_bytes"] - before >= total
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # the file's own position is never used
    out.close()
    peer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_partial_send_on_a_full_socket_resumes(segment, kind):
    fd, data = segment
    out, peer = tcp_pair()
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    out.setblocking(False)
    sender = Sender(kind)
    count = 2 << 20
    first = sender.send(out.fileno(), fd, 100, count)
    assert 0 < first < count  # nobody reads: the socket buffer filled, the call returned
    sent = first
    while (n := sender.send(out.fileno(), fd, 100 + sent, count - sent)) > 0:
        sent += n
    assert n == 0 and sent < count  # full: 0, never blocks
    received = bytearray()
    reader = drain(peer, count, received)
    sent += send_region(sender, out, fd, 100 + sent, count - sent)
    reader.join(timeout=30)
    assert sent == count
    assert bytes(received) == data[100 : 100 + count]
    out.close()
    peer.close()


def test_splice_keeps_unsent_bytes_and_drops_them_when_the_caller_moves_on(segment):
    fd, data = segment
    out, peer = tcp_pair()
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    out.setblocking(False)
    pipe = zerocopy.SplicePipe()
    first = 0
    while (n := pipe.splice(out.fileno(), fd, first, 1 << 20)) > 0:
        first += n
    assert pipe.pending > 0  # read from the file, not taken by the socket
    # the caller abandons the region and sends another one: stale bytes must not leak
    received = bytearray()
    reader = drain(peer, first + 1000, received)
    pipe_sent = 0
    while pipe_sent < 1000:
        n = pipe.splice(out.fileno(), fd, 2 << 20, 1000 - pipe_sent)
        if n == 0:
            select.select([], [out], [], 10)
        pipe_sent += n
    reader.join(timeout=30)
    assert bytes(received) == data[:first] + data[2 << 20 : (2 << 20) + 1000]
    out.close()
    peer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_errors(segment, kind):
    fd, data = segment
    out, peer = socket.socketpair()
    sender = Sender(kind)
    with pytest.raises(OSError) as info:  # the region runs past the end of the file
        sender.send(out.fileno(), fd, len(data), 10)
    assert info.value.errno == errno.ENODATA
    assert sender.send(out.fileno(), fd, len(data) - 3, 10) == 3  # what exists goes
    peer.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(100):
            sender.send(out.fileno(), fd, 0, 1 << 20)
    closed = out.detach()
    os.close(closed)
    with pytest.raises(OSError) as info:
        sender.send(closed, fd, 0, 10)
    assert info.value.errno == errno.EBADF
    with pytest.raises(ValueError):
        sender.send(1, fd, -1, 10)


def test_counters():
    before = zerocopy.zerocopy_counters()
    zerocopy.count_copied(1234)
    after = zerocopy.zerocopy_counters()
    assert after["copied_bytes"] - before["copied_bytes"] == 1234
    assert after["zero_copy_bytes"] == before["zero_copy_bytes"]
    with pytest.raises(ValueError):
        zerocopy.count_copied(-1)


def test_implementation_choice():
    assert zerocopy.zerocopy_implementation() == "sendfile"
    for forced in KINDS:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from pybroker._native import zerocopy; print(zerocopy.zerocopy_implementation())",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYBROKER_ZEROCOPY": forced},
        )
        assert out.stdout.strip() == forced, out.stderr
