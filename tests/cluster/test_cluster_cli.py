"""The command line of cluster mode (issue 7, fourth check): ``pybroker cluster local``
starts a ZooKeeper of its own and three brokers, records go through it with the
``produce`` and ``consume`` commands, ``topic describe`` shows three replicas all in sync,
and Ctrl-C (SIGINT) stops everything with exit status 0. Given ``--zookeeper``, it starts
none and joins that one; SIGTERM stops it as cleanly.

``cluster info`` and ``cluster health`` (issue 15) against a three-broker cluster: every
broker listed, healthy; one broker killed, health names it down with the partitions it
left under-replicated and exits 1."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

from pybroker import cli
from tests.cluster.harness import FAST_SETTINGS, LocalCluster
from tests.conftest import ROOT

START_TIMEOUT_S = 120.0
# Stopped together, the brokers' controlled shutdowns ask one another to take leaderships
# none of them keeps: the harness's short retries and controller timeout, so the stop
# does not wait them out.
SHUTDOWN_SETTINGS = [arg for key in ("controlled.shutdown.retry.backoff.ms",
                                     "controller.socket.timeout.ms")
                     for arg in ("--set", f"{key}={FAST_SETTINGS[key]}")]


def pybroker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pybroker", *args], input=stdin, env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


class ClusterCommand:
    """``python -m pybroker cluster local ...`` in the background: its stdout read line by
    line (``printed``), its stderr in a file; ``stop(sig)`` returns the exit code."""

    def __init__(self, tmp_path: Any, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.errors = tmp_path / "cluster.err"
        with open(self.errors, "w") as stderr_file:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pybroker", "cluster", "local", "--data-dir",
                 str(tmp_path / "cluster"), "--base-port", "0", *args],
                stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env, cwd=ROOT)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.printed: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def bootstrap(self) -> str:
        """Waits for the ``bootstrap:`` line and returns its list."""
        while True:
            try:
                self.printed.append(self.lines.get(timeout=START_TIMEOUT_S))
            except queue.Empty:
                raise AssertionError(f"no bootstrap line: {self.printed}, "
                                     f"{self.errors.read_text()}") from None
            if self.printed[-1].startswith("bootstrap: "):
                return self.printed[-1].split(": ", 1)[1].strip()

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.reader.join(10)
        while not self.lines.empty():
            self.printed.append(self.lines.get())
        return code


def test_cluster_command_runs_a_three_broker_cluster(tmp_path):
    command = ClusterCommand(tmp_path, "--brokers", "3", "--set",
                             "offsets.topic.num.partitions=3", "--set",
                             "zookeeper.session.timeout.ms=4000", *SHUTDOWN_SETTINGS)
    try:
        bootstrap = command.bootstrap()
        assert len(bootstrap.split(",")) == 3
        assert sum(line.startswith("broker ") for line in command.printed) == 3
        assert command.printed[0].startswith("zookeeper: ")  # its own

        done = pybroker("topic", "create", "demo", "-p", "2", "--replication-factor", "3",
                        "-b", bootstrap)
        assert done.returncode == 0, done.stderr
        done = pybroker("produce", "demo", "-k", ":", "--acks", "all", "-b", bootstrap,
                        stdin="k1:v1\nk2:v2\nk3:v3\n")
        assert done.returncode == 0, done.stderr
        done = pybroker("consume", "demo", "-n", "3", "-F", "%k=%v\n", "-b", bootstrap)
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.split()) == ["k1=v1", "k2=v2", "k3=v3"]

        done = pybroker("topic", "describe", "demo", "-b", bootstrap)
        assert done.returncode == 0, done.stderr
        rows = _partition_rows(done.stdout)
        assert sorted(rows) == ["0", "1"], done.stdout
        for row in rows.values():
            replicas, isr = row["REPLICAS"].split(","), row["ISR"].split(",")
            assert len(replicas) == 3 and sorted(isr) == sorted(replicas), done.stdout
            assert row["LEADER"] in replicas
    finally:
        code = command.stop(signal.SIGINT)
    assert code == 0, command.errors.read_text()
    assert command.printed[-1].strip() == "cluster stopped", command.printed


def test_cluster_command_joins_a_given_zookeeper(zk_connect, tmp_path):
    command = ClusterCommand(tmp_path, "--brokers", "1", "--zookeeper", zk_connect)
    try:
        assert len(command.bootstrap().split(",")) == 1
        assert not any(line.startswith("zookeeper: ") for line in command.printed)
    finally:
        code = command.stop(signal.SIGTERM)
    assert code == 0, command.errors.read_text()
    assert not os.path.exists(tmp_path / "cluster" / "zookeeper")


def _partition_rows(described: str) -> dict[str, dict[str, str]]:
    """The PARTITION table of ``topic describe``, by partition."""
    lines = described.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("PARTITION "))
    header = lines[start].split()
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = dict(zip(header, line.split(), strict=False))
        rows[cells["PARTITION"]] = cells
    return rows


def test_cluster_help_says_it_is_for_development(capsys):
    try:
        cli.main(["cluster", "local", "--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    assert "development" in out and "--zookeeper" in out and "--base-port" in out


def test_cluster_info_and_health_see_a_broker_go_down(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        cluster.create_topic("spread", partitions=3, replication_factor=3)
        bootstrap = cluster.bootstrap

        info = pybroker("cluster", "info", "-b", bootstrap)
        assert info.returncode == 0, info.stderr
        lines = info.stdout.splitlines()
        controller = cluster.controller_id()
        assert f"CONTROLLER  {controller}" in lines
        header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["ID"])
        ports = {row.split()[0].rstrip("*"): row.split()[2] for row in lines[header + 1:]
                 if row[:1].isdigit()}
        assert ports == {str(i): cluster.address(i).rsplit(":", 1)[1] for i in (1, 2, 3)}
        assert f"{controller}*" in info.stdout

        healthy = pybroker("cluster", "health", "-b", bootstrap)
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        assert _health(healthy.stdout)["Healthy"] == "true"
        assert _health(healthy.stdout)["All brokers"] == "[1 2 3]"

        victim = next(i for i in (1, 2, 3) if i != controller)
        cluster.kill(victim)
        survivors = ",".join(cluster.address(i) for i in cluster.running())

        def unhealthy() -> dict[str, str] | None:
            done = pybroker("cluster", "health", "-b", survivors)
            report = _health(done.stdout)
            under = report.get("Under-replicated partitions", "")
            if done.returncode == 1 and all(f"spread/{p}" in under for p in range(3)):
                return report
            return None

        report = cluster.wait_for(unhealthy, 60, what="health to see the dead broker")
        assert report["Healthy"] == "false"
        assert report["Brokers down"] == f"[{victim}]"
        assert report["All brokers"] == "[" + " ".join(map(str, cluster.running())) + "]"
        assert report["Leaderless partitions"] == "[]"
        assert report["Unhealthy reasons"] == "[brokers_down under_replicated_partitions]"

def _health(printed: str) -> dict[str, str]:
    """``cluster health``'s lines as label -> value, a count in the label left out."""
    rows = {}
    for line in printed.splitlines():
        label, sep, value = line.partition(":")
        if sep:
            rows[label.split(" (")[0].strip()] = value.strip()
    return rows
