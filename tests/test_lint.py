"""Lints as tests (STYLE 24), for the whole project in one place.

ruff checks every Python file (rules and exclusions in pyproject's ``[tool.ruff]``); mypy
checks the package with its ``.pyi`` stubs and the typed tools (``[tool.mypy]``, where any
module-level exception is listed with its reason); stubtest checks that the stubs of the
native modules match what is built; the shell scripts parse and every script is
executable. Each runs once over everything: a new file is linted without being listed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUFF = ["pybroker", "pyspark_pybroker", "bench", "bench/compare", "perf", "tests", "tools",
        "setup.py"]
MYPY = ["pybroker", "pyspark_pybroker", "tools/gen_protocol.py", "bench/__main__.py",
        "bench/driver", "perf/perfkit.py"]
# Native modules whose stubs match the build. zerocopy and columns are left out until their
# stubs mark SplicePipe / RecordColumns @disjoint_base (and zerocopy's declares __all__);
# appender is a Python module over cffi whose .pyi mypy reads in its place.
STUBTEST = ["records", "crc32c", "index", "partitioner", "reqheader", "wire", "framebuffer",
            "tlsread"]
# Cython's own additions to every extension, and the stub-only `Column` alias.
STUBTEST_ALLOW = [
    r".*\.__reduce_cython__", r".*\.__setstate_cython__", r".*\.__pyx_capi__",
    r".*\.__test__", r"pybroker\._native\.records\.Column",
    # type aliases of the stubs only (the tuples the wire builders take)
    r"pybroker\._native\.wire\.(CurrentLeader|NodeEndpoint|RecordError|ProducePartition)",
    # the buffer protocol of a Cython class is __getbuffer__, which Python 3.11 does not
    # show as __buffer__; the stub declares it so that typing sees a Buffer
    r"pybroker\._native\.framebuffer\.FrameBuffer\.__(release_)?buffer__",
]
SHELL = ["perf/record.sh", "perf/pyspy.sh", "perf/syscalls.sh", "bench/run-standard.sh",
         "scripts/install-system-deps.sh", ".ci/run"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)


def test_ruff() -> None:
    result = _run("ruff", "check", *RUFF)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run("mypy", "--no-error-summary", *MYPY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubs_match_the_built_modules(tmp_path: pytest.TempPathFactory) -> None:
    allow = os.path.join(str(tmp_path), "allowlist")
    with open(allow, "w", encoding="utf-8") as f:
        f.write("\n".join(STUBTEST_ALLOW) + "\n")
    result = _run("mypy.stubtest", "--allowlist", allow,
                  *[f"pybroker._native.{name}" for name in STUBTEST])
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_parse_and_are_executable() -> None:
    for script in SHELL + ["bench/compare", "perf/perfkit.py"]:
        assert os.access(os.path.join(ROOT, script), os.X_OK), script
    for script in SHELL:
        result = subprocess.run(["bash", "-n", script], cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
