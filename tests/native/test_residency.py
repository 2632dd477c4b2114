"""Telling file regions in the page cache from cold ones (``zerocopy.region_resident``).

Real files on the test's file system (not tmpfs: its pages cannot be dropped), made cold
with ``fsync`` + ``POSIX_FADV_DONTNEED`` as an operator's ``echo 1 > drop_caches`` would.
Each residency test (cachestat, the preadv2 RWF_NOWAIT fallback, none) runs in a child
process forced with ``PYBROKER_RESIDENCY``, since a process keeps the one it chose; the
step down at run time runs in children whose kernel refuses cachestat (and preadv2) through
a seccomp filter, as a container runtime that does not know the call would.
"""

import ctypes.util
import json
import os
import socket
import subprocess
import sys

import pytest

from bench.driver import pagecache
from pybroker._native import zerocopy

MIB = 1 << 20

CHILD = r"""
import json, os, sys, time
from pybroker._native import zerocopy

path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
before = zerocopy.zerocopy_counters()["cold_regions"]
out = {"implementation": zerocopy.residency_implementation(),
       "cold": zerocopy.region_resident(fd, MIB, MIB)}
os.pread(fd, size, 0)  # everything read: resident now
out["warm"] = zerocopy.region_resident(fd, MIB, MIB)
out["empty"] = zerocopy.region_resident(fd, 0, 0)
out["counted"] = zerocopy.zerocopy_counters()["cold_regions"] - before
print(json.dumps(out))
""".replace("MIB", str(MIB))


@pytest.fixture
def segment_path(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(4 * MIB))
    return str(path)


def residency_in_child(path, how):
    result = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "PYBROKER_RESIDENCY": how})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("how", ["cachestat", "nowait"])
def test_a_dropped_region_is_cold_until_read(segment_path, how):
    found = residency_in_child(segment_path, how)
    assert found == {"implementation": how, "cold": False, "warm": True, "empty": True,
                     "counted": 1}


def test_without_a_test_everything_counts_as_resident(segment_path):
    found = residency_in_child(segment_path, "none")
    assert found == {"implementation": "none", "cold": True, "warm": True, "empty": True,
                     "counted": 0}


def test_an_unknown_residency_choice_is_refused():
    result = subprocess.run(
        [sys.executable, "-c",
         "from pybroker._native import zerocopy; zerocopy.residency_implementation()"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYBROKER_RESIDENCY": "mincore"})
    assert result.returncode != 0
    assert "PYBROKER_RESIDENCY='mincore'" in result.stderr


def test_a_cold_region_is_read_ahead(segment_path):
    """The first question starts the reading: once it is done the answer changes,
    without anyone reading the region itself."""
    fd = os.open(segment_path, os.O_RDONLY)
    try:
        pagecache.drop([segment_path])
        assert not zerocopy.region_resident(fd, 0, MIB, ahead=MIB)
        for _ in range(3000):
            if zerocopy.region_resident(fd, 0, 2 * MIB):
                break
            os.sched_yield()
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_NORMAL)  # a syscall's worth of pause
        else:
            raise AssertionError("the region and the next were never read in")
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["sendfile", "splice"])
def test_warm_only_send_leaves_a_cold_region_alone(segment_path, kind):
    data = open(segment_path, "rb").read()
    fd = os.open(segment_path, os.O_RDONLY)
    a, b = socket.socketpair()
    pipe = zerocopy.SplicePipe() if kind == "splice" else None
    try:
        a.setblocking(False)
        pagecache.drop([segment_path])
        assert zerocopy.send_region_wait(a.fileno(), fd, 0, 100_000, 1000, 0, pipe,
                                         warm_only=True) == zerocopy.COLD
        # nothing went out: the first bytes the peer gets are those of the cold send
        sent = zerocopy.send_region_wait(a.fileno(), fd, 0, 100_000, 1000, 0, pipe)
        assert sent == 100_000
        got = b""
        while len(got) < sent:
            got += b.recv(sent - len(got))
        assert got == data[:100_000]
        assert zerocopy.send_region_wait(a.fileno(), fd, 0, 1000, 1000, 0, pipe,
                                         warm_only=True) == 1000
        assert b.recv(1000) == data[:1000]
    finally:
        if pipe is not None:
            pipe.close()
        os.close(fd)
        a.close()
        b.close()


def test_a_bad_fd_raises():
    with pytest.raises(OSError):
        zerocopy.region_resident(-1, 0, 100)


# A child whose kernel refuses system calls (a seccomp filter, as a container runtime
# installs: libseccomp through ctypes), so the step down at run time is the real one.
SECCOMP_CHILD = r"""
import ctypes, ctypes.util, errno, json, os, sys
from pybroker._native import zerocopy

lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                 ctypes.c_uint]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
ctx = lib.seccomp_init(ALLOW)
for number in map(int, sys.argv[2:]):
    assert lib.seccomp_rule_add(ctx, ERRNO | errno.ENOSYS, number, 0) == 0
assert lib.seccomp_load(ctx) == 0

fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
chosen = zerocopy.residency_implementation()
cold = zerocopy.region_resident(fd, 0, 4096)
print(json.dumps({"chosen": chosen, "cold": cold,
                  "after": zerocopy.residency_implementation()}))
"""
CACHESTAT_NR, PREADV2_NR = 451, 327  # x86_64


def refused_in_child(path, *numbers):
    # Not a skip: Debian's apt itself depends on libseccomp2, so every machine this
    # project installs on has it, and a skip here would hide the fallbacks untested.
    assert ctypes.util.find_library("seccomp"), "libseccomp is missing (Debian libseccomp2)"
    result = subprocess.run([sys.executable, "-c", SECCOMP_CHILD, path,
                             *map(str, numbers)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86_64")
def test_a_kernel_without_cachestat_moves_the_process_to_nowait(segment_path):
    found = refused_in_child(segment_path, CACHESTAT_NR)
    assert found == {"chosen": "cachestat", "cold": False, "after": "nowait"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86_64")
def test_a_kernel_without_either_test_counts_everything_resident(segment_path):
    found = refused_in_child(segment_path, CACHESTAT_NR, PREADV2_NR)
    assert found == {"chosen": "cachestat", "cold": True, "after": "none"}
