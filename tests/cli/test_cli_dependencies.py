"""The CLI runs from a plain ``pip install pybroker``: every third-party module it imports,
directly or through the pybroker modules it imports, belongs to a distribution in
pyproject's main ``dependencies``, not only to an extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    """Absolute module names imported anywhere in the file (also inside functions), but
    not those only a type checker reads."""
    tree = ast.parse(path.read_text())
    type_checking_only = {
        id(node) for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for statement in block.body for node in ast.walk(statement)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_checking_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None  # a native module or a name imported from a package's namespace


def _third_party_imports_of_cli() -> set[str]:
    pending = sorted((ROOT / "pybroker").glob("cli*.py"))
    seen: set[Path] = set()
    third_party: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_modules(path):
            top = name.split(".")[0]
            if top == "pybroker":
                found = _module_file(name)
                if found is not None:
                    pending.append(found)
            elif top not in sys.stdlib_module_names:
                third_party.add(top)
    return third_party


def _canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def test_the_cli_imports_only_main_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_canonical(re.match(r"[A-Za-z0-9._-]+", requirement).group())
                for requirement in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    imported = _third_party_imports_of_cli()
    assert "confluent_kafka" in imported  # the walk reaches the client commands
    undeclared = {module: distributions.get(module) for module in imported
                  if not {_canonical(d) for d in distributions.get(module, [module])} & declared}
    assert undeclared == {}
