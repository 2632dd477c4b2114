"""``pybroker group ...`` against a real broker: lag, members, resets, deletion."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.groups.helpers import ROOT, WAIT, create_topic, produce, wait_until


def cli(broker: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "group", *args,
                           "--bootstrap", broker.bootstrap], capture_output=True, text=True,
                          timeout=WAIT, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))


def rows(output: str, topic: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.startswith(topic + " ")]


def test_describe_shows_lag_then_reset_and_delete(module_broker: Any) -> None:
    broker = module_broker
    create_topic(broker.bootstrap, "lagging", 2)
    produce(broker.bootstrap, "lagging", [f"a-{i}" for i in range(10)], partition=0)
    produce(broker.bootstrap, "lagging", [f"b-{i}" for i in range(6)], partition=1)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "g-cli",
            "enable.auto.commit": False}
    committer = Consumer(conf)
    committer.commit(offsets=[TopicPartition("lagging", 0, 4), TopicPartition("lagging", 1, 6)],
                     asynchronous=False)
    committer.close()

    listed = cli(broker, "list")
    assert listed.returncode == 0, listed.stderr
    assert ["g-cli", "Empty"] in [line.split() for line in listed.stdout.splitlines()]
    described = cli(broker, "describe", "g-cli")
    assert described.returncode == 0, described.stderr
    # TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert [r[:5] for r in rows(described.stdout, "lagging")] == \
        [["lagging", "0", "4", "10", "6"], ["lagging", "1", "6", "6", "0"]]

    member = Consumer({**conf, "session.timeout.ms": 6000})
    member.subscribe(["lagging"])
    try:
        wait_until(lambda: member.poll(0.2) is not None or member.assignment(),
                   what="an assignment")
        described = cli(broker, "describe", "g-cli")
        assert all(r[5] != "-" for r in rows(described.stdout, "lagging")), described.stdout
        refused = cli(broker, "reset-offsets", "g-cli", "--topic", "lagging",
                      "--to-earliest", "--execute")
        assert refused.returncode == 1 and "empty" in refused.stderr
    finally:
        member.close()

    dry = cli(broker, "reset-offsets", "g-cli", "--topic", "lagging", "--to-earliest")
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert [r[:5] for r in rows(cli(broker, "describe", "g-cli").stdout, "lagging")][0] == \
        ["lagging", "0", "4", "10", "6"]
    done = cli(broker, "reset-offsets", "g-cli", "--topic", "lagging", "--to-earliest",
               "--execute")
    assert done.returncode == 0, done.stderr
    assert [r[:5] for r in rows(cli(broker, "describe", "g-cli").stdout, "lagging")] == \
        [["lagging", "0", "0", "10", "10"], ["lagging", "1", "0", "6", "6"]]
    clamped = cli(broker, "reset-offsets", "g-cli", "--topic", "lagging:1", "--to-offset",
                  "100", "--execute")
    assert clamped.returncode == 0, clamped.stderr
    assert rows(cli(broker, "describe", "g-cli").stdout, "lagging")[1][:5] == \
        ["lagging", "1", "6", "6", "0"]
    latest = cli(broker, "reset-offsets", "g-cli", "--all-topics", "--to-latest", "--execute")
    assert latest.returncode == 0, latest.stderr
    assert rows(cli(broker, "describe", "g-cli").stdout, "lagging")[0][:5] == \
        ["lagging", "0", "10", "10", "0"]

    deleted = cli(broker, "delete", "g-cli", "no-such-group")
    assert deleted.returncode == 1
    assert "g-cli: deleted" in deleted.stdout and "GROUP_ID_NOT_FOUND" in deleted.stderr
    assert "g-cli" not in cli(broker, "list").stdout
    gone = cli(broker, "describe", "g-cli")
    assert gone.returncode == 1 and "no such group" in gone.stderr
