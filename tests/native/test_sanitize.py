"""The record batch parsers under AddressSanitizer + UBSan, once.

Builds the `crc32c` and `records` extensions with PYBROKER_SANITIZE=1 into a temporary
copy of the sources (the working tree's build stays untouched) and runs the fuzz and rule
tests there with gcc's libasan preloaded, so an out-of-bounds read or undefined behaviour
in the C code fails the run instead of passing silently. Slow (a full native build).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = [
    "setup.py",
    "csrc/pb_common.h", "csrc/pb_varint.h", "csrc/pb_crc32c.h", "csrc/pb_crc32c.c",
    "csrc/pb_records.h", "csrc/pb_records.c",
    "pybroker/errors.py",
    "pybroker/_native/crc32c.pyx", "pybroker/_native/crc32c.pxd",
    "pybroker/_native/records.pyx", "pybroker/_native/records.pxd",
    "pybroker/_native/compression.py",
    "tests/__init__.py", "tests/native/__init__.py",
    "tests/native/test_records_fuzz.py", "tests/native/test_records.py",
    "tests/native/test_record_walker.py",
]


def _libasan() -> str:
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert os.path.isabs(path) and os.path.exists(path), "gcc's libasan.so is required"
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_parsers_clean_under_asan_and_ubsan(tmp_path):
    for rel in SOURCES:
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
    # Empty package files: the copy must not depend on what the real ones import.
    for package in ("pybroker", "pybroker/_native"):
        (tmp_path / package / "__init__.py").write_text("")
    env = dict(os.environ, PYBROKER_SANITIZE="1", PYBROKER_BUILD_ONLY="crc32c,records",
               PYTHONPATH=str(tmp_path))
    env.pop("PYBROKER_CRC32C", None)
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    so = [f for f in os.listdir(tmp_path / "pybroker" / "_native") if f.endswith(".so")]
    assert len(so) == 2
    ldd = subprocess.run(["ldd", str(tmp_path / "pybroker" / "_native" / so[0])],
                         capture_output=True, text=True, check=True).stdout
    assert "libasan" in ldd and "libubsan" in ldd

    env.update(
        LD_PRELOAD=_libasan(),
        # CPython keeps memory until exit on purpose: leaks are not what this looks for.
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        PB_FUZZ_EXAMPLES="60",
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-c", os.devnull, "--rootdir", str(tmp_path),
         # Not the pyarrow test, nor the 64 MiB bomb: neither exercises the C code.
         "-k", "not arrow and not default_decompression_bound",
         "tests/native/test_records_fuzz.py", "tests/native/test_records.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True)
    out = run.stdout + run.stderr
    assert "AddressSanitizer" not in out and "runtime error" not in out, out[-6000:]
    assert run.returncode == 0 and " passed" in out, out[-6000:]
    # The run really used the sanitized build, not the working tree's.
    assert str(tmp_path) in subprocess.run(
        [sys.executable, "-c", "import pybroker._native.records as r; print(r.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True).stdout
