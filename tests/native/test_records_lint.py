"""Lints as tests (STYLE 24) for the CRC32C / record batch modules, their tests and benches."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = [
    "pybroker/_native/compression.py", "tests/native/test_crc32c.py",
    "tests/native/test_records.py", "tests/native/test_records_fuzz.py",
    "tests/native/test_records_kafka_python.py", "tests/native/test_records_lint.py",
    "tests/native/test_sanitize.py", "bench/micro/test_bench_crc32c.py",
    "bench/micro/test_bench_records.py",
]
STUBS = ["pybroker/_native/crc32c.pyi", "pybroker/_native/records.pyi",
         "pybroker/_native/compression.py"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_ruff():
    result = _run(sys.executable, "-m", "ruff", "check", *PYTHON)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_on_stubs():
    result = _run(sys.executable, "-m", "mypy", "--python-version", "3.11",
                  "--follow-imports=silent", *STUBS)
    assert result.returncode == 0, result.stdout + result.stderr


# Cython's own additions to every extension, and the stub-only `Column` alias.
STUBTEST_ALLOW = [
    r".*\.__reduce_cython__", r".*\.__setstate_cython__", r".*\.__pyx_capi__",
    r".*\.__test__", r"pybroker\._native\.records\.Column",
]


def test_stubs_match_the_built_modules(tmp_path):
    allow = tmp_path / "allowlist"
    allow.write_text("\n".join(STUBTEST_ALLOW) + "\n")
    result = _run(sys.executable, "-m", "mypy.stubtest", "--allowlist", str(allow),
                  "pybroker._native.records", "pybroker._native.crc32c")
    assert result.returncode == 0, result.stdout + result.stderr
