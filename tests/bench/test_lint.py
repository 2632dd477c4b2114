"""Lints as tests (STYLE 24) for the benchmark driver and the profiling kit."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The driver and the profiling kit only (bench/micro and the Spark bench have owners).
PYTHON = ["bench/__init__.py", "bench/__main__.py", "bench/compare", "bench/driver",
          "perf/perfkit.py", "tests/bench/test_units.py", "tests/bench/test_runs.py",
          "tests/bench/test_perf_scripts.py", "tests/bench/test_lint.py"]
SHELL = ["perf/record.sh", "perf/pyspy.sh", "perf/syscalls.sh"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff():
    result = _run(sys.executable, "-m", "ruff", "check", *PYTHON)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    result = _run(sys.executable, "-m", "mypy", "--ignore-missing-imports",
                  "--follow-imports=silent", "bench/driver", "bench/__main__.py",
                  "perf/perfkit.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_parse_and_are_executable():
    for script in SHELL + ["bench/compare", "perf/perfkit.py"]:
        assert os.access(os.path.join(ROOT, script), os.X_OK), script
    for script in SHELL:
        result = _run("bash", "-n", script)
        assert result.returncode == 0, result.stderr
