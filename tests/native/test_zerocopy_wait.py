"""The blocking transfers network threads run: send_region_wait and recv_wait.

Real files and real non-blocking sockets (socket pairs and loopback TCP); partial
transfers come from peers that really stop reading or sending.
"""

import errno
import os
import socket
import threading
import time

import pytest

from pybroker._native import zerocopy
from tests.native.test_zerocopy import tcp_pair

KINDS = ["sendfile", "splice"]
MIB = 1 << 20


@pytest.fixture
def region():
    data = os.urandom(6 * MIB)
    fd = os.memfd_create("segment")
    os.write(fd, data)
    yield fd, data
    os.close(fd)


def nonblocking_pair(kind: str):
    a, b = tcp_pair() if kind == "tcp" else socket.socketpair()
    a.setblocking(False)
    return a, b


def pipe_for(kind):
    return zerocopy.SplicePipe() if kind == "splice" else None


def read_exactly(sock, n, into, pause=0.0, most=256 * 1024):
    while len(into) < n:
        chunk = sock.recv(min(n - len(into), most))
        if not chunk:
            return
        into += chunk
        if pause:
            time.sleep(pause)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("transport", ["socketpair", "tcp"])
def test_send_region_wait_moves_the_whole_region_to_a_slow_reader(region, kind, transport):
    fd, data = region
    ours, theirs = nonblocking_pair(transport)
    got = bytearray()
    reader = threading.Thread(target=read_exactly,
                              args=(theirs, 5 * MIB, got, 0.0002))
    reader.start()
    before = zerocopy.zerocopy_counters()["zero_copy_bytes"]
    sent = zerocopy.send_region_wait(ours.fileno(), fd, MIB, 5 * MIB, 5000, 0, pipe_for(kind))
    reader.join()
    assert sent == 5 * MIB
    assert bytes(got) == data[MIB:]
    assert zerocopy.zerocopy_counters()["zero_copy_bytes"] - before >= 5 * MIB
    ours.close()
    theirs.close()


@pytest.mark.parametrize("kind", KINDS)
def test_send_region_wait_gives_up_when_nobody_reads_and_resumes(region, kind):
    fd, data = region
    ours, theirs = nonblocking_pair("socketpair")
    pipe = pipe_for(kind)
    sent = zerocopy.send_region_wait(ours.fileno(), fd, 0, len(data), 20, 0, pipe)
    assert 0 < sent < len(data)  # the socket buffer filled, then patience ran out
    got = bytearray()
    reader = threading.Thread(target=read_exactly, args=(theirs, len(data), got))
    reader.start()
    rest = zerocopy.send_region_wait(ours.fileno(), fd, sent, len(data) - sent, 5000, 0,
                                      pipe)
    reader.join()
    assert sent + rest == len(data)
    assert bytes(got) == data
    ours.close()
    theirs.close()


@pytest.mark.parametrize("kind", KINDS)
def test_send_region_wait_raises_when_the_peer_is_gone(region, kind):
    fd, data = region
    ours, theirs = nonblocking_pair("socketpair")
    pipe = pipe_for(kind)
    threading.Timer(0.05, theirs.close).start()  # after the buffer filled: the poll wakes
    with pytest.raises(OSError) as info:
        zerocopy.send_region_wait(ours.fileno(), fd, 0, len(data), 5000, 0, pipe)
    assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)
    ours.close()


def test_send_region_wait_past_the_end_of_the_file_raises_enodata(region):
    fd, data = region
    ours, theirs = nonblocking_pair("socketpair")
    with pytest.raises(OSError) as info:
        zerocopy.send_region_wait(ours.fileno(), fd, len(data), 100, 100)
    assert info.value.errno == errno.ENODATA
    ours.close()
    theirs.close()


@pytest.mark.parametrize("transport", ["socketpair", "tcp"])
def test_recv_wait_fills_the_buffer_from_a_slow_sender(transport):
    data = os.urandom(5 * MIB)
    theirs, ours = tcp_pair() if transport == "tcp" else socket.socketpair()
    ours.setblocking(False)

    def send():
        for i in range(0, len(data), 100_000):
            theirs.sendall(data[i:i + 100_000])
            time.sleep(0.0002)

    sender = threading.Thread(target=send)
    sender.start()
    buf = bytearray(len(data) + 10)
    got = zerocopy.recv_wait(ours.fileno(), memoryview(buf)[10:], 5000)
    sender.join()
    assert got == len(data)
    assert bytes(buf[10:]) == data
    ours.close()
    theirs.close()


def test_recv_wait_returns_short_at_end_of_stream_and_after_patience():
    theirs, ours = socket.socketpair()
    ours.setblocking(False)
    theirs.sendall(b"x" * 1000)
    buf = bytearray(5000)
    assert zerocopy.recv_wait(ours.fileno(), buf, 30) == 1000  # nothing more came
    theirs.sendall(b"y" * 500)
    theirs.close()
    assert zerocopy.recv_wait(ours.fileno(), memoryview(buf)[1000:], 5000) == 500  # EOF
    assert bytes(buf[:1500]) == b"x" * 1000 + b"y" * 500
    ours.close()


def test_recv_wait_raises_on_reset_and_refuses_read_only_buffers():
    import struct
    theirs, ours = tcp_pair()
    ours.setblocking(False)
    with pytest.raises((TypeError, BufferError)):
        zerocopy.recv_wait(ours.fileno(), b"read-only", 100)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    threading.Timer(0.05, theirs.close).start()
    with pytest.raises(ConnectionResetError):
        zerocopy.recv_wait(ours.fileno(), bytearray(100), 5000)
    ours.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_steady_slow_reader_gets_one_slice_at_a_time(region, kind):
    """The peer always takes a little within the patience, so only the slice ends it."""
    fd, data = region
    ours, theirs = nonblocking_pair("socketpair")
    got = bytearray()
    reader = threading.Thread(target=read_exactly,  # 64 KiB per ms: ~100 ms in all
                              args=(theirs, len(data), got, 0.001, 64 * 1024))
    reader.start()
    pipe = pipe_for(kind)
    sent = zerocopy.send_region_wait(ours.fileno(), fd, 0, len(data), 1000, 20, pipe)
    assert 0 < sent < len(data)
    while sent < len(data):  # the caller carries on where the slice ended
        sent += zerocopy.send_region_wait(ours.fileno(), fd, sent, len(data) - sent, 5000, 0,
                                          pipe)
    reader.join()
    assert bytes(got) == data
    ours.close()
    theirs.close()


def test_a_trickling_sender_gets_one_slice_at_a_time():
    theirs, ours = socket.socketpair()
    ours.setblocking(False)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            theirs.sendall(b"z" * 1000)
            time.sleep(0.001)

    sender = threading.Thread(target=trickle)
    sender.start()
    try:
        got = zerocopy.recv_wait(ours.fileno(), bytearray(10 * MIB), 1000, 50)
    finally:
        stop.set()
        sender.join()
    assert 0 < got < 10 * MIB
    ours.close()
    theirs.close()
