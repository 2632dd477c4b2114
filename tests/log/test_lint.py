"""Lints as tests (STYLE 24): ruff and mypy on the storage code and its tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = {
    "ruff": ["ruff", "check", "pybroker/log", "tests/log", "bench/micro/test_bench_log.py"],
    "mypy": ["mypy", "--follow-imports=silent", "--ignore-missing-imports",
             "--no-error-summary", "pybroker/log"],
}


@pytest.mark.parametrize("tool", sorted(COMMANDS))
def test_lint(tool):
    result = subprocess.run([sys.executable, "-m", *COMMANDS[tool]], cwd=REPO, text=True,
                            capture_output=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
