"""What a broker start does not do: import the CLI's client families, compile the generated
message table, or call a brand-new data dir an unclean shutdown. (How long a start takes
is measured by bench/single_node.py, never asserted here.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from pybroker.net.protocol import table  # noqa: F401 - writes the table cache if missing
from tests.conftest import BrokerProcess

PROBE = textwrap.dedent("""
    import sys
    from pybroker import cli
    sys.argv = ["pybroker", *sys.argv[1:]]
    try:
        cli.main()
    except SystemExit:
        pass
    import pybroker.broker.broker  # everything serve imports before it listens
    print(" ".join(sorted(m for m in sys.modules
                          if m.startswith("pybroker.cli_") or m.endswith(".messages"))),
          file=sys.stderr)
""")


def _modules_after(*argv: str) -> set[str]:
    err = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                         text=True, check=True).stderr
    return set(err.split())  # the help went to stdout


def test_serve_imports_neither_client_commands_nor_the_table_source():
    assert _modules_after("serve", "--help") == set()


def test_other_commands_still_find_every_family():
    loaded = _modules_after("--help")
    assert {"pybroker.cli_topic", "pybroker.cli_clients", "pybroker.cli_group"} <= loaded


def test_a_new_data_dir_is_not_reported_as_an_unclean_shutdown(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), log_path=str(tmp_path / "broker.log")).start()
    try:
        first = broker.log_text()
    finally:
        broker.stop()
    assert "no partitions yet" in first and "unclean" not in first
    assert "ready: listening on" in first
