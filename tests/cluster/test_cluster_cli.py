"""The command line of cluster mode (issue 7, fourth check): ``pybroker cluster`` starts
a ZooKeeper of its own and three brokers, records go through it with the ``produce`` and
``consume`` commands, ``topic describe`` shows three replicas all in sync, and Ctrl-C
(SIGINT) stops everything with exit status 0."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading

from pybroker import cli
from tests.conftest import ROOT

START_TIMEOUT_S = 120.0


def pybroker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pybroker", *args], input=stdin, env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _lines(stream: object, out: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line)


def test_cluster_command_runs_a_three_broker_cluster(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    errors = tmp_path / "cluster.err"
    with open(errors, "w") as stderr_file:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "cluster", "--brokers", "3", "--data-dir",
             str(tmp_path / "cluster"), "--base-port", "0", "--set",
             "offsets.topic.num.partitions=3", "--set", "zookeeper.session.timeout.ms=4000"],
            stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env, cwd=ROOT)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    printed: list[str] = []
    try:
        bootstrap = ""
        while not bootstrap:
            try:
                printed.append(lines.get(timeout=START_TIMEOUT_S))
            except queue.Empty:
                raise AssertionError(f"no bootstrap line: {printed}") from None
            if printed[-1].startswith("bootstrap: "):
                bootstrap = printed[-1].split(": ", 1)[1].strip()
        assert len(bootstrap.split(",")) == 3
        assert sum(line.startswith("broker ") for line in printed) == 3

        done = pybroker("topic", "create", "demo", "-p", "2", "-b", bootstrap)
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
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        reader.join(10)
    stderr = errors.read_text()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert code == 0, stderr
    assert "cluster stopped" in "".join(rest), (printed, rest, stderr)


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
        cli.main(["cluster", "--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    assert "development" in out and "--zookeeper" in out and "--base-port" in out
