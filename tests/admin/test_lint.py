"""Lints as tests (STYLE 24): ruff and mypy on the admin handlers, the client CLI and the
admin, CLI and fuzz tests (the runner is the protocol lint test's)."""

from __future__ import annotations

from tests.protocol.test_lint import _run

TYPED = ["pybroker/broker/handlers/admin_topics.py", "pybroker/broker/handlers/admin_configs.py",
         "pybroker/broker/handlers/delete_records.py", "pybroker/cli_topic.py",
         "pybroker/cli_clients.py"]
PATHS = TYPED + ["tests/admin", "tests/cli", "tests/fuzz"]


def test_ruff():
    result = _run("ruff", "check", *PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    result = _run("mypy", "--follow-imports=silent", "--ignore-missing-imports",
                  "--no-error-summary", *TYPED)
    assert result.returncode == 0, result.stdout + result.stderr
