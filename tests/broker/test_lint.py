"""Lints as tests (STYLE 24): ruff and mypy on the broker, server, config and CLI code."""

from __future__ import annotations

from tests.protocol.test_lint import _run

TYPED = ["pybroker/config.py", "pybroker/cli.py", "pybroker/__main__.py",
         "pybroker/net/server.py", "pybroker/net/connection.py",
         *[f"pybroker/broker/{name}.py" for name in (
             "__init__", "broker", "files", "partition", "producer_ids", "producer_state",
             "request", "topic_config", "topic_manager")],
         *[f"pybroker/broker/handlers/{name}.py" for name in (
             "__init__", "api_versions", "create_topics", "describe_cluster", "fetch",
             "init_producer_id", "list_offsets", "metadata", "produce")]]
PATHS = TYPED + ["tests/broker", "tests/conftest.py"]


def test_ruff():
    result = _run("ruff", "check", *PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    result = _run("mypy", "--follow-imports=silent", "--ignore-missing-imports",
                  "--no-error-summary", *TYPED)
    assert result.returncode == 0, result.stdout + result.stderr
