"""``pybroker.cli.main`` itself: which parsers it builds and how it treats options."""

from __future__ import annotations

import pytest

from pybroker import cli


def _exit_code(*argv: str) -> int:
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    return int(done.value.code or 0)


def test_log_dump_takes_options_after_the_command(capsys, tmp_path):
    assert _exit_code("log", "dump", "--help") == 0
    assert "usage: pybroker log dump" in capsys.readouterr().out
    assert cli.main(["log", "dump", str(tmp_path / "missing.log")]) == 2


def test_unknown_options_are_still_refused(capsys):
    assert _exit_code("serve", "--no-such-flag") == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    assert _exit_code("topic", "--no-such-flag") == 2


def test_help_lists_every_family(capsys):
    assert _exit_code("--help") == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("serve", "log", "topic", "produce", "consume"))
