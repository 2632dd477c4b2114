"""An installed pybroker has the console's template and style sheet: every file under
``pybroker/console/templates`` and ``static`` is matched by pyproject's package-data."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "pybroker" / "console"


def test_console_files_are_package_data():
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = settings["package-data"]["pybroker.console"]
    files = [path.relative_to(CONSOLE).as_posix()
             for folder in ("templates", "static") for path in (CONSOLE / folder).iterdir()]
    assert "templates/layout.html" in files and "static/console.css" in files
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
