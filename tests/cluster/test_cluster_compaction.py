"""Log compaction in a cluster: each replica cleans its own copy of a compacted partition
(as Kafka's brokers do; ``pybroker topic describe`` given every data directory shows each
one's checkpoint), and a follower that becomes leader serves the same compacted changelog
its old leader did: the last value of each key at its original offset, headers included,
and every record above the cleaned offset."""

from __future__ import annotations

from tests.admin.clients import unique
from tests.broker.test_compaction import (
    TOPIC_CONFIG,
    cleaned_up_to,
    consume,
    model,
    produce_changelog,
)
from tests.cli.test_cli_cleaner import wait_rows
from tests.cluster.harness import LocalCluster


def test_every_replica_cleans_and_a_new_leader_serves_the_compacted_log(zk_connect, tmp_path):
    settings = {"log.cleaner.backoff.ms": 100, "stats.interval.ms": 100}
    with LocalCluster(zk_connect, tmp_path, settings=settings) as cluster:
        topic = unique("compacted")
        cluster.create_topic(topic, 1, 3, TOPIC_CONFIG)
        written = produce_changelog(cluster.bootstrap, topic, 1200)
        roll = written[-1][0]

        def every_replica_cleaned() -> dict[int, int] | None:
            ends = {b: cleaned_up_to(cluster.brokers[b].data_dir, topic)
                    for b in cluster.running()}
            return ends if all(end >= roll for end in ends.values()) else None

        ends = cluster.wait_for(every_replica_cleaned, 60,
                                what=f"{topic} cleaned up to {roll} on every replica")
        expected = sorted(["0", str(b), str(end)] for b, end in ends.items())
        wait_rows(cluster, topic, [cluster.brokers[b].data_dir for b in ends],
                  lambda rows: sorted(row[:3] for row in rows) == expected)
        leader = cluster.describe(topic)[0].leader
        assert consume(cluster.bootstrap, topic, roll + 1) == model(written, ends[leader])

        cluster.kill(leader)

        def new_leader() -> int | None:
            found = cluster.describe(topic, cluster.running()[0])[0].leader
            return found if found not in (-1, leader) else None

        successor = cluster.wait_for(new_leader, 60, what="a new leader")
        assert consume(cluster.bootstrap, topic, roll + 1) == model(written, ends[successor])
