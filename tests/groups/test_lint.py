"""Lints as tests (STYLE 24): ruff and mypy on the group coordinator, its handlers and CLI,
and ruff on these tests (the runner is the protocol lint test's)."""

from __future__ import annotations

from tests.protocol.test_lint import _run

TYPED = ["pybroker/coordinator", "pybroker/broker/handlers/groups.py", "pybroker/cli_group.py"]
PATHS = TYPED + ["tests/groups"]


def test_ruff() -> None:
    result = _run("ruff", "check", *PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run("mypy", "--follow-imports=silent", "--ignore-missing-imports",
                  "--no-error-summary", *TYPED)
    assert result.returncode == 0, result.stdout + result.stderr
