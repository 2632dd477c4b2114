"""CRC32C: golden vectors, the `crc32c` package as oracle, and all three paths agreeing.

The fast path must not be taken on faith (STYLE 16): the table fallback, forced through
PYBROKER_CRC32C in a fresh interpreter, must agree with the hardware paths on the same data.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import crc32c as oracle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

native = importlib.import_module("pybroker._native.crc32c")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# RFC 3720 B.4 and the usual check value.
GOLDEN = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]
PATHS = ["table", "sse4.2", "sse4.2-3way", "sse4.2-vpclmul"]
CPU_FLAGS = set(open("/proc/cpuinfo").read().split())
HAS_FOLD = {"sse4_2", "avx512f", "avx512vl", "vpclmulqdq", "pclmulqdq"} <= CPU_FLAGS


@pytest.fixture(params=PATHS)
def path(request):
    name = native._select_implementation(request.param)
    if request.param == "sse4.2-vpclmul" and not HAS_FOLD:
        assert name == "table"
    else:
        assert name == request.param, "this machine has SSE4.2: the path must be selectable"
    yield name
    native._select_implementation("")


@pytest.mark.parametrize("data,expected", GOLDEN)
def test_golden(path, data, expected):
    assert native.crc32c(data) == expected


def test_default_path_is_the_fastest_the_cpu_has():
    expected = "sse4.2-vpclmul" if HAS_FOLD else "sse4.2-3way"
    assert native.crc32c_implementation() == expected


def test_sizes_and_alignments_against_oracle(path):
    blob = os.urandom(200_000)
    # Edges of each path: 8-byte words, the 3-way blocks (768, 3 x 8192), the fold
    # threshold (2048) and its 256- and 64-byte steps.
    for size in list(range(0, 70)) + [767, 768, 769, 2047, 2048, 2049, 2048 + 63, 2048 + 64,
                                     2048 + 255, 2048 + 256 + 64 + 7, 3 * 8192 - 1, 3 * 8192,
                                     3 * 8192 + 9, 100_000, 199_990]:
        for misalign in (0, 1, 3, 7):
            view = memoryview(blob)[misalign:misalign + size]
            assert native.crc32c(view) == oracle.crc32c(view), (size, misalign)


def test_continuation(path):
    a, b = os.urandom(5000), os.urandom(30000)
    assert native.crc32c(b, native.crc32c(a)) == native.crc32c(a + b)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=9000), st.integers(0, 2**32 - 1))
def test_random_against_oracle(data, start):
    expected = oracle.crc32c(data, start)
    for name in PATHS:
        native._select_implementation(name)
        assert native.crc32c(data, start) == expected, name
    native._select_implementation("")


def test_any_buffer_object(tmp_path):
    import array
    import mmap

    data = os.urandom(4096)
    p = tmp_path / "f"
    p.write_bytes(data)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert native.crc32c(m) == oracle.crc32c(data)
    assert native.crc32c(bytearray(data)) == oracle.crc32c(data)
    assert native.crc32c(array.array("B", data)) == oracle.crc32c(data)
    with pytest.raises(TypeError):
        native.crc32c("not bytes")
    with pytest.raises(OverflowError):
        native.crc32c(b"x", -1)


def _in_subprocess(env_value: str) -> dict:
    code = (
        "import json, importlib\n"
        "m = importlib.import_module('pybroker._native.crc32c')\n"
        "r = importlib.import_module('pybroker._native.records')\n"
        "data = bytes(range(256)) * 4099\n"
        "b = r.encode_batch([data[:1000]] * 50, timestamps=[1] * 50)\n"
        "print(json.dumps({'impl': m.crc32c_implementation(), 'crc': m.crc32c(data),"
        " 'batch_crc': r.validate_batch(b).crc}))\n"
    )
    env = dict(os.environ, PYBROKER_CRC32C=env_value, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout)


def test_env_forces_each_path_and_all_agree():
    results = {name: _in_subprocess(name) for name in PATHS}
    assert {name: r["impl"] for name, r in results.items()} == {
        p: p if HAS_FOLD or p != "sse4.2-vpclmul" else "table" for p in PATHS}
    assert len({r["crc"] for r in results.values()}) == 1
    assert len({r["batch_crc"] for r in results.values()}) == 1
    assert results["table"]["crc"] == oracle.crc32c(bytes(range(256)) * 4099)


def test_env_rejects_unknown_path():
    env = dict(os.environ, PYBROKER_CRC32C="fastest", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", "import pybroker._native.crc32c"], env=env,
                         capture_output=True, cwd=ROOT)
    assert out.returncode != 0 and b"PYBROKER_CRC32C" in out.stderr
