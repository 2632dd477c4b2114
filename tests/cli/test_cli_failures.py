"""Client commands that cannot reach a broker, or are refused by one (issue 15): one line
on stderr, exit status 1, never a traceback nor librdkafka's own log lines (unless
``-v``). Real processes against a port nothing listens on, a listener that accepts and
never answers, and a real broker; ``cluster info`` and ``health`` against a single node.
(Against three brokers, one killed: tests/cluster/test_cluster_cli.py.)"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.admin.clients import unique
from tests.cli.test_cli import ROOT, pybroker

# A hang guard, not a measure: the commands give up after their --timeout.
HANG_GUARD_S = 60

CLIENT_COMMANDS = [
    ("topic", "list"), ("topic", "describe", "t"), ("topic", "create", "t"),
    ("group", "list"), ("group", "describe", "g"), ("txn", "list"),
    ("produce", "t"), ("consume", "t"), ("cluster", "info"), ("cluster", "health"),
    ("quota", "describe"), ("partition", "elect", "--type", "preferred", "--all"),
    ("cluster", "rebalance"), ("cluster", "drain", "1"),
    ("partition", "move", "t", "0", "--replicas", "1"), ("partition", "reassignments")]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], input="x\n",
                          capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose listener accepts every connection and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def assert_one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [expected], done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=" ".join)
def test_a_refused_connection_is_one_line(command, closed_port):
    address = f"127.0.0.1:{closed_port}"
    done = run(*command, "--bootstrap", address)
    assert_one_line(done, f"pybroker: cannot reach broker {address}: connection refused")


@pytest.mark.parametrize("command", [("topic", "list"), ("group", "describe", "g"),
                                     ("txn", "list"), ("produce", "t"), ("consume", "t"),
                                     ("cluster", "health")], ids=" ".join)
def test_a_broker_that_never_answers_is_one_line_after_the_timeout(command, silent_port):
    address = f"127.0.0.1:{silent_port}"
    done = run(*command, "--bootstrap", address, "--timeout", "2")
    assert_one_line(done, f"pybroker: cannot reach broker {address}: no answer within 2 s")


def test_ctrl_c_while_waiting_for_a_broker_is_status_130_without_a_traceback():
    with socket.create_server(("127.0.0.1", 0)) as server:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "topic", "list", "--timeout", "50", "-b",
             f"127.0.0.1:{server.getsockname()[1]}"],
            stderr=subprocess.PIPE, text=True, cwd=ROOT)
        server.settimeout(HANG_GUARD_S)
        conn, _ = server.accept()  # the command is waiting for its answer
        with conn:
            waiting.send_signal(signal.SIGINT)
            _, err = waiting.communicate(timeout=HANG_GUARD_S)
    assert waiting.returncode == 130 and err == ""


def test_an_unknown_host_and_a_list_of_brokers_are_named(closed_port):
    done = run("topic", "list", "-b", "no-such-host.invalid:9092")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("pybroker: cannot reach broker no-such-host.invalid:9092: "
                                  "failed to resolve")
    both = f"127.0.0.1:{closed_port},localhost:{closed_port}"
    assert_one_line(run("group", "list", "-b", both),
                    f"pybroker: cannot reach brokers {both}: connection refused")


def test_verbose_shows_the_client_library_log(closed_port):
    done = run("topic", "list", "-b", f"127.0.0.1:{closed_port}", "-v")
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert sum(line.startswith("pybroker: cannot reach broker") for line in lines) == 1
    assert any("FAIL" in line and "Connection refused" in line for line in lines), lines


def test_localhost_reaches_a_broker_on_ipv4_loopback(module_broker):
    port = module_broker.bootstrap.rsplit(":", 1)[1]
    done = run("topic", "list", "-b", f"localhost:{port}")
    assert done.returncode == 0, done.stderr


def test_errors_the_broker_answers_are_one_line(module_broker):
    missing = unique("missing")
    for command in (("topic", "describe", missing), ("consume", missing),
                    ("topic", "add-partitions", missing, "-n", "1")):
        done = pybroker(module_broker, *command, check=False)
        assert done.returncode == 1, (command, done.stderr)
        assert done.stderr.decode().splitlines() == [f"{missing}: UNKNOWN_TOPIC_OR_PARTITION"]
    # asking about a topic never creates it (an admin client may by default)
    done = pybroker(module_broker, "group", "reset-offsets", unique("g"), "--topic", missing,
                    "--to-earliest", check=False)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"{missing}: UNKNOWN_TOPIC_OR_PART: Broker: Unknown topic or partition"]
    assert missing not in pybroker(module_broker, "topic", "list").stdout.decode().split()


def test_cluster_info_and_health_of_a_single_node(module_broker):
    info = pybroker(module_broker, "cluster", "info").stdout.decode().splitlines()
    host, port = module_broker.bootstrap.rsplit(":", 1)
    assert "CONTROLLER  0" in info
    assert ["0*", host, port, "-"] in [line.split() for line in info]
    health = pybroker(module_broker, "cluster", "health").stdout.decode().splitlines()
    assert health[2].split() == ["Healthy:", "true"]
    assert health[3:6] == ["Unhealthy reasons:                []",
                           "Controller ID:                    0",
                           "All brokers:                      [0]"]
