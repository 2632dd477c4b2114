"""The handler registry fails closed: a handler module that does not import stops the
broker's start with that module's error, rather than a broker serving without its APIs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pybroker.broker import handlers
from pybroker.broker.handlers import HandlerImportError, load_all
from tests.conftest import ROOT

BROKEN = "raise ImportError('the broken_family module is broken on purpose')\n"

# Runs ``pybroker serve`` with one more handler module, a broken one, on the package's path.
SERVE_WITH_BROKEN_MODULE = textwrap.dedent("""
    import sys
    import pybroker.broker.handlers as handlers
    handlers.__path__.append(sys.argv[1])
    from pybroker import cli
    sys.argv = ["pybroker", "serve", *sys.argv[2:]]
    sys.exit(cli.main())
""")


def _broken_module_dir(tmp_path) -> str:
    path = tmp_path / "extra_handlers"
    path.mkdir()
    (path / "broken_family.py").write_text(BROKEN)
    return str(path)


def test_load_all_raises_the_error_of_a_module_that_fails_to_import(tmp_path, monkeypatch):
    monkeypatch.setattr(handlers, "__path__", [*handlers.__path__, _broken_module_dir(tmp_path)])
    with pytest.raises(HandlerImportError, match="broken_family") as raised:
        load_all()
    assert isinstance(raised.value.__cause__, ImportError)
    assert "broken on purpose" in str(raised.value.__cause__)
    assert "pybroker.broker.handlers.broken_family" not in sys.modules


def test_load_all_registers_every_module_of_the_package():
    served = load_all()
    # one API of each family module: Produce, Fetch, Metadata, JoinGroup, CreateTopics
    assert {0, 1, 3, 11, 19} <= set(served)


def test_a_broker_with_a_broken_handler_module_does_not_start(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", SERVE_WITH_BROKEN_MODULE, _broken_module_dir(tmp_path),
         "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT))
    assert run.returncode != 0
    assert "handler module broken_family failed to import" in run.stderr
    assert "broken on purpose" in run.stderr
    assert "ready: listening" not in run.stderr + run.stdout
