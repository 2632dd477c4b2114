"""The operator commands for growing and shrinking a cluster (issue 17, point 4):
``pybroker cluster rebalance|drain`` and ``pybroker partition move|reassignments``,
run as processes against a real four-broker cluster.

Shown without ``--execute``, a plan changes nothing: broker 4, holding nothing, is given
its share of replicas and leaders by ``rebalance``; ``drain`` takes every replica off a
broker and touches no other partition. A broker that holds replicas but is down makes
``rebalance`` refuse (it would empty it) and name ``drain``. Bad arguments end with one
line and a non-zero status before anything is sent.
"""

from __future__ import annotations

import pytest

from tests.cluster.harness import LocalCluster
from tests.cluster.test_cluster_cli import pybroker

# Six partitions of three replicas over brokers 1-3, leaders spread: broker 4 holds nothing.
LAYOUT = [[(p + i) % 3 + 1 for i in range(3)] for p in range(6)]


@pytest.fixture(scope="module")
def four_brokers(tmp_path_factory, zookeeper):
    """A cluster of four brokers whose topic ``grow`` lies on brokers 1-3 only, as when
    broker 4 has just joined."""
    # (the cluster makes a chroot of its own in the module's ZooKeeper)
    with LocalCluster(zookeeper.connect, tmp_path_factory.mktemp("rebalance"),
                      size=4) as cluster:
        cluster.create_topic("grow", assignment=LAYOUT)
        yield cluster


def plan_rows(printed: str, topic: str = "grow"
              ) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """The plan's two tables: partition -> [current, target] of ``topic``, and
    broker -> [rack, replicas, leaders]."""
    partitions: dict[int, list[str]] = {}
    brokers: dict[int, list[str]] = {}
    for line in printed.splitlines():
        cells = line.split()
        if len(cells) == 4 and cells[0] == topic:
            partitions[int(cells[1])] = cells[2:]
        elif len(cells) == 8 and cells[0].isdigit():
            brokers[int(cells[0])] = [cells[1], " ".join(cells[2:5]), " ".join(cells[5:])]
    return partitions, brokers


def test_rebalance_plans_a_share_for_the_new_broker(four_brokers):
    done = pybroker("cluster", "rebalance", "--topic", "grow", "-b", four_brokers.bootstrap)
    assert done.returncode == 0, done.stderr
    partitions, brokers = plan_rows(done.stdout)
    assert "Partitions to reassign: 4 of 6; replicas to move: 4" in done.stdout
    assert brokers[4] == ["-", "0 -> 4", "0 -> 1"] or brokers[4] == ["-", "0 -> 4", "0 -> 2"]
    for index, (current, target) in partitions.items():
        assert current == ",".join(map(str, LAYOUT[index]))
        assert "4" in target.split(",") and len(set(target.split(","))) == 3
    assert "(a plan only: --execute starts it)" in done.stdout
    # nothing ran
    assert [info.replicas for _, info in sorted(four_brokers.describe("grow").items())] \
        == LAYOUT


def test_drain_plans_every_replica_off_one_broker(four_brokers):
    done = pybroker("cluster", "drain", "2", "-b", four_brokers.bootstrap)
    assert done.returncode == 0, done.stderr
    partitions, brokers = plan_rows(done.stdout)
    assert sorted(partitions) == list(range(6))  # broker 2 is in every partition
    for current, target in partitions.values():
        assert "2" not in target.split(",")
        assert [b for b in current.split(",") if b != "2"] == \
            [b for b in target.split(",") if b in current.split(",")]
    assert brokers[2][1].endswith("-> 0") and brokers[2][2].endswith("-> 0")
    assert brokers[4][1] == "0 -> 6"


def test_a_move_to_a_broker_that_is_not_live_is_refused(four_brokers):
    done = pybroker("partition", "move", "grow", "0", "--replicas", "1,9",
                    "-b", four_brokers.bootstrap)
    assert done.returncode == 1
    assert done.stderr.strip() == "pybroker: no live broker 9 (live: 1,2,3,4)"
    done = pybroker("partition", "move", "grow", "6", "--replicas", "1,2,3",
                    "-b", four_brokers.bootstrap)
    assert done.returncode == 1
    assert done.stderr.strip() == "pybroker: topic grow has no partition 6"
    done = pybroker("partition", "move", "grow", "0", "--replicas",
                    ",".join(map(str, LAYOUT[0])), "-b", four_brokers.bootstrap)
    assert done.returncode == 0 and "Nothing to move." in done.stdout, done.stderr


def test_a_drain_that_leaves_too_few_brokers_is_refused(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        cluster.create_topic("full", partitions=1, replication_factor=3)
        done = pybroker("cluster", "drain", "3", "--execute", "-b", cluster.bootstrap)
        assert done.returncode == 1
        assert done.stderr.strip() == ("pybroker: cannot drain broker 3: full-0 has 3 "
                                       "replicas, more than the 2 brokers that may hold them")

        cluster.kill(2)
        survivors = ",".join(cluster.address(i) for i in cluster.running())

        def refused() -> str | None:
            done = pybroker("cluster", "rebalance", "-b", survivors)
            return done.stderr.strip() if done.returncode == 1 else None

        text = cluster.wait_for(refused, 60, what="broker 2 to leave the live brokers")
        assert text == ("pybroker: broker 2 holds replicas but is not live: start it, or "
                        "move everything off with pybroker cluster drain 2")


@pytest.mark.parametrize(("args", "message"), [
    (["cluster", "rebalance", "--throttle", "0"],
     "argument --throttle: a positive number of bytes per second, not '0'"),
    (["cluster", "drain", "x"], "argument BROKER: invalid int value: 'x'"),
    (["partition", "move", "t", "0", "--replicas", "1,1"],
     "argument --replicas: a broker appears twice in '1,1'"),
    (["partition", "move", "t", "0", "--replicas", "1,a"],
     "argument --replicas: broker ids separated by commas, not '1,a'"),
    (["partition", "move", "t", "0"], "the following arguments are required: --replicas"),
    (["partition", "reassignments", "--cancel", "--clear-throttles"],
     "argument --clear-throttles: not allowed with argument --cancel"),
])
def test_bad_arguments_are_one_line_and_status_2(args, message):
    done = pybroker(*args, "-b", "127.0.0.1:1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(message), done.stderr
