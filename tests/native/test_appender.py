"""Appender: exact bytes at exact positions on both paths, short writes, errors, fallback.

Real files throughout; short writes and the io_uring setup failure are produced for real
in child processes (RLIMIT_FSIZE, RLIMIT_NOFILE), never simulated.
"""

import errno
import gc
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native.appender import Appender, append_implementation

KINDS = ["io_uring", "pwritev"]


@pytest.fixture
def fd(tmp_path):
    fd = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR | os.O_CREAT)
    yield fd
    os.close(fd)


def run_child(code, **env):
    """Run `code` in a fresh interpreter; returns its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def file_bytes(fd):
    return os.pread(fd, os.fstat(fd).st_size + 1, 0)


# A buffer of any bytes-like kind: the appender must not care which.
BUFFERS = st.binary(max_size=300).flatmap(
    lambda b: st.sampled_from([b, bytearray(b), memoryview(b"xx" + b + b"yy")[2:-2]])
)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.lists(BUFFERS, max_size=5), st.integers(0, 5000)), max_size=8))
def test_matches_a_reference_model(kind, ops):
    """Random appends (overwrites, gaps, empty lists) against a bytearray model."""
    model = bytearray()
    with tempfile.TemporaryFile() as f, Appender(f.fileno(), kind=kind) as a:
        for buffers, position in ops:
            data = b"".join(bytes(b) for b in buffers)
            assert a.append(buffers, position) == len(data)
            if data:
                model.extend(bytes(max(0, position - len(model))))
                model[position : position + len(data)] = data
        assert file_bytes(f.fileno()) == bytes(model)


@pytest.mark.parametrize("kind", KINDS)
def test_more_buffers_than_iov_max(fd, kind):
    """2500 buffers need three writev calls (IOV_MAX is 1024); order must hold."""
    buffers = [bytes([i % 251]) * (i % 7) for i in range(2500)]
    expected = b"".join(buffers)
    assert Appender(fd, kind=kind).append(buffers, 10) == len(expected)
    assert file_bytes(fd) == bytes(10) + expected


@pytest.mark.parametrize("kind", KINDS)
def test_large_append(fd, kind):
    data = [os.urandom(1 << 20), os.urandom(3 << 20)]
    a = Appender(fd, kind=kind)
    assert a.append(data, 0) == 4 << 20
    assert a.append([b"tail"], 4 << 20) == 4
    assert file_bytes(fd) == data[0] + data[1] + b"tail"


@pytest.mark.parametrize("kind", KINDS)
def test_errors_raise_oserror(tmp_path, kind):
    path = tmp_path / "ro"
    path.write_bytes(b"x")
    ro = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as info:
            Appender(ro, kind=kind).append([b"data"], 0)
        assert info.value.errno == errno.EBADF
    finally:
        os.close(ro)
    with pytest.raises(OSError) as info:
        Appender(ro, kind=kind)  # closed descriptor
    assert info.value.errno == errno.EBADF
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as info:
            Appender(w, kind=kind)  # no positions on a pipe
        assert info.value.errno == errno.ESPIPE
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("kind", KINDS)
def test_short_write_then_error(tmp_path, kind):
    """With RLIMIT_FSIZE the kernel writes up to the limit (a short write), then the
    continued write fails with EFBIG: everything before the limit is in the file."""
    path = tmp_path / "limited"
    out = run_child(f"""
        import os, resource, signal
        from pybroker._native.appender import Appender
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (10000, 10000))
        fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)
        a = Appender(fd, kind={kind!r})
        assert a.append([b"a" * 6000, b"b" * 3000], 0) == 9000
        try:
            a.append([b"c" * 500, b"d" * 4000], 9000)
        except OSError as e:
            print(e.errno)
    """)
    assert out == str(errno.EFBIG)
    assert path.read_bytes() == b"a" * 6000 + b"b" * 3000 + b"c" * 500 + b"d" * 500


def io_uring_fds():
    """How many io_uring instances this process has open (each ring is an fd)."""
    targets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            pass  # the fd of the listing itself
    return sum("io_uring" in t for t in targets)


@pytest.mark.parametrize("kind", KINDS)
def test_threads_and_fork(fd, kind):
    """Each thread has its own ring; a forked child drops the parent's and makes its own."""
    a = Appender(fd, kind=kind)
    a.append([b"P" * 100], 0)
    chunks = {i: bytes([65 + i]) * 4096 for i in range(8)}
    threads = [
        threading.Thread(
            target=lambda i=i: [a.append([chunks[i]], 100 + i * 4096) for _ in range(20)]
        )
        for i in chunks
    ]
    rings_before = io_uring_fds()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # An exiting thread's ring goes with it. The thread-local that owns it is released
    # when the thread state is torn down, which can trail join() on a loaded machine.
    deadline = time.monotonic() + 10
    while io_uring_fds() != rings_before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert io_uring_fds() == rings_before
    pid = os.fork()
    if pid == 0:  # child: exit code says whether its append landed
        try:
            ok = a.append([b"C" * 50], 100 + 8 * 4096) == 50
        finally:
            os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
    a.append([b"Z"], 150 + 8 * 4096)
    expected = b"P" * 100 + b"".join(chunks.values()) + b"C" * 50 + b"Z"
    assert file_bytes(fd) == expected


def test_implementation_choice():
    assert append_implementation() == "io_uring"  # this machine has io_uring
    assert (
        run_child(
            """
        from pybroker._native.appender import Appender, append_implementation
        print(append_implementation())
    """,
            PYBROKER_APPEND="pwritev",
        )
        == "pwritev"
    )
    with pytest.raises(ValueError):
        Appender(0, kind="aio")


EXHAUST_FDS = """
    import os, resource
    from pybroker._native.appender import Appender, append_implementation
    fd = os.open(PATH, os.O_RDWR | os.O_CREAT)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
"""


def test_falls_back_when_io_uring_cannot_be_set_up(tmp_path):
    """A ring needs a file descriptor; with none left, io_uring_setup fails (EMFILE),
    the process picks pwritev, and appends still work."""
    path = tmp_path / "fallback"
    out = run_child(
        f"PATH = {str(path)!r}"
        + textwrap.dedent(EXHAUST_FDS)
        + """
print(append_implementation(), Appender(fd).append([b"still ", b"works"], 0))
"""
    )
    assert out == "pwritev 11"
    assert path.read_bytes() == b"still works"


def test_forced_io_uring_fails_loudly(tmp_path):
    out = run_child(
        f"PATH = {str(tmp_path / 'x')!r}"
        + textwrap.dedent(EXHAUST_FDS)
        + """
try:
    append_implementation()
except OSError as e:
    print(e.errno)
""",
        PYBROKER_APPEND="io_uring",
    )
    assert out == str(errno.EMFILE)


def test_closed_appender(fd):
    a = Appender(fd)
    a.close()
    with pytest.raises(ValueError):
        a.append([b"x"], 0)
    with pytest.raises(ValueError):
        Appender(-1)
