"""Lints as tests (STYLE 24): ruff on the protocol code, mypy on it and the wire stub."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATHS = ["tools/gen_protocol.py", "pybroker/net/protocol", "tests/protocol"]
TYPED = ["pybroker/net/protocol/codec.py", "pybroker/net/protocol/schema.py",
         "pybroker/net/protocol/table.py", "pybroker/net/protocol/__init__.py",
         "pybroker/_native/wire.pyi", "pybroker/_native/reqheader.pyi",
         "tools/gen_protocol.py"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=240)


def test_ruff():
    result = _run("ruff", "check", *PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    result = _run("mypy", "--follow-imports=silent", "--no-error-summary", *TYPED)
    assert result.returncode == 0, result.stdout + result.stderr
