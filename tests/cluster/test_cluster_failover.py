"""Failover with acks=all (issue 7, first check): three brokers, replication factor 3,
min.insync.replicas 2, an idempotent acks=all producer writing keyed records without
pause while the leader of a partition is SIGKILLed, then a second broker. With one broker
left the ISR is below the minimum and writes must be refused; both come back. Then:
every acknowledged record is in the final log exactly once, at the offset it was
acknowledged with, in the order it was produced; and every record a consumer read while
this went on is in the final log at its offset (nobody read a record that was lost).
"""

from __future__ import annotations

import collections

from tests.cluster.harness import (
    NOT_ACKNOWLEDGED,
    NOT_ENOUGH_REPLICAS,
    PRODUCE,
    ContinuousProducer,
    LocalCluster,
    TailingConsumer,
    produce_body,
    produce_error,
    read_all,
)

TOPIC = "failover"
PARTITIONS = 3


def test_acknowledged_records_survive_two_leader_kills(zk_connect, tmp_path, cluster_security):
    with LocalCluster(zk_connect, tmp_path, settings={"min.insync.replicas": 2},
                      security=cluster_security) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        producer = ContinuousProducer(cluster.bootstrap, TOPIC)
        reader = TailingConsumer(cluster.bootstrap, TOPIC, PARTITIONS)
        producer.start()
        reader.start()
        try:
            refused = _kill_two_and_recover(cluster, producer)
        finally:
            producer.stop()
            reader.stop()
        assert not producer.fatal, producer.fatal
        final = read_all(cluster.bootstrap, TOPIC, PARTITIONS, at_least=producer.acked_ends())
        _check(final, producer, reader, refused)


def _kill_two_and_recover(cluster: LocalCluster, producer: ContinuousProducer) -> set[bytes]:
    """Returns the values of the writes refused before their append."""
    def acked_beyond(count: int) -> bool:
        return len(producer.acked) >= count

    cluster.wait_for(lambda: acked_beyond(300), 60, what="300 records acknowledged")

    first = cluster.describe(TOPIC)[0].leader
    cluster.kill(first)
    cluster.wait_for(lambda: cluster.describe(TOPIC)[0].leader not in (-1, first), 60,
                     what=f"partition 0 led by another broker than {first}")
    mark = len(producer.acked)
    cluster.wait_for(lambda: acked_beyond(mark + 300), 60,
                     what="writes acknowledged again with two brokers")

    second = cluster.describe(TOPIC)[0].leader
    cluster.kill(second)
    (last,) = cluster.running()
    cluster.wait_for(
        lambda: all(p.isr == [last] for p in cluster.describe(TOPIC, last).values()), 60,
        what=f"every ISR shrunk to broker {last}")
    # One broker left, min.insync.replicas 2: acks=all is refused before the append.
    refused: set[bytes] = set()
    for partition in range(PARTITIONS):
        cluster.wait_for(lambda p=partition: _refused(cluster, last, p, refused), 30,
                         what=f"partition {partition} refusing acks=all")

    cluster.restart(first)
    cluster.restart(second)
    cluster.wait_for(lambda: all(len(p.isr) == 3 for p in cluster.describe(TOPIC).values()),
                     90, what="every partition's ISR whole again")
    mark = len(producer.acked)
    cluster.wait_for(lambda: acked_beyond(mark + 300), 60,
                     what="writes acknowledged after recovery")
    return refused


def _refused(cluster: LocalCluster, broker_id: int, partition: int,
             refused: set[bytes]) -> bool:
    """True once an acks=all produce is refused with NOT_ENOUGH_REPLICAS (its value goes
    to ``refused``); any success fails the test at once (a write acknowledged by one
    replica while two are required)."""
    value = b"refused-%d-%d" % (partition, len(refused))
    error = produce_error(cluster.request(broker_id, PRODUCE, 8,
                                          produce_body(TOPIC, partition, value)))
    assert error in NOT_ACKNOWLEDGED, f"acks=all produce with one replica answered {error}"
    if error == NOT_ENOUGH_REPLICAS:
        refused.add(value)
    return error == NOT_ENOUGH_REPLICAS


def _check(final: dict[int, dict[int, bytes]], producer: ContinuousProducer,
           reader: TailingConsumer, refused: set[bytes]) -> None:
    assert producer.acked, "nothing was acknowledged"
    # At its offset, the value acknowledged.
    lost = [(p, o, n) for p, o, n in producer.acked if final[p].get(o) != str(n).encode()]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    # Exactly once: no acknowledged value twice (a retry written again).
    counts = collections.Counter(v for part in final.values() for v in part.values())
    doubled = [n for _, _, n in producer.acked if counts[str(n).encode()] != 1]
    assert not doubled, f"acknowledged records stored more than once: {doubled[:10]}"
    # In order: a partition's acknowledged records by offset are in production order.
    for partition in final:
        ns = [n for _, n in sorted((o, n) for p, o, n in producer.acked if p == partition)]
        assert ns == sorted(ns), f"partition {partition} out of order"
    # The writes refused before their append never reached a log.
    assert refused and not refused & set(counts)
    # Nothing consumed during the test was lost afterwards.
    assert reader.seen, "the consumer read nothing while the test ran"
    ghosts = [(p, o, v) for p, o, v in reader.seen if final[p].get(o) != v]
    assert not ghosts, f"consumed records not in the final log: {ghosts[:5]}"
