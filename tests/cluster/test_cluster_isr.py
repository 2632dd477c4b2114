"""ISR and high watermark (issue 7, third check): a follower paused (SIGSTOP) past
replica.lag.time.max.ms leaves the ISR while writes go on, and rejoins it once resumed
and caught up; the high watermark, polled from the leader with ListOffsets all along,
never moves backwards.

The ZooKeeper session timeout here is far longer than the replica lag limit, so the
shrink is the leader's doing (the follower is still registered when it leaves the ISR),
not the controller's reaction to a dead broker.
"""

from __future__ import annotations

import itertools
import threading

from pybroker.client.connection import BrokerConnection
from tests.cluster.harness import LIST_OFFSETS, ContinuousProducer, LocalCluster

TOPIC = "isr"
SETTINGS = {"min.insync.replicas": 2, "replica.lag.time.max.ms": 1500,
            "zookeeper.session.timeout.ms": 15000}


class HighWatermarkPoller(threading.Thread):
    """ListOffsets latest (read uncommitted: the high watermark) from one broker, over
    and over, on a connection of its own; ``seen`` in the order answered."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.conn = BrokerConnection("127.0.0.1", port, "hw-poller", timeout=30)
        self.seen: list[int] = []
        self.errors: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                           "timestamp": -1}]}]}
        while not self._halt.wait(0.01):
            part = self.conn.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
            if part["error_code"]:
                self.errors.append(part["error_code"])
            else:
                self.seen.append(int(part["offset"]))

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        self.conn.close()


def test_isr_shrinks_and_expands_high_watermark_never_backwards(zk_connect, tmp_path,
                                                                cluster_security):
    with LocalCluster(zk_connect, tmp_path, settings=SETTINGS,
                      security=cluster_security) as cluster:
        state = cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})[0]
        leader, controller = state.leader, cluster.controller_id()
        # A follower that is not the controller: pausing it must not move the controller.
        follower = next(b for b in state.replicas if b not in (leader, controller))
        producer = ContinuousProducer(cluster.bootstrap, TOPIC)
        poller = HighWatermarkPoller(cluster.brokers[leader].port)
        producer.start()
        poller.start()
        try:
            cluster.wait_for(lambda: len(producer.acked) >= 200, 60, what="200 acknowledged")
            cluster.pause(follower)
            shrunk = cluster.wait_for(lambda: _without(cluster, leader, follower), 60,
                                      what=f"broker {follower} out of the ISR")
            registered = cluster.registration(follower) is not None
            mark = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) >= mark + 200, 60,
                             what="writes acknowledged by the ISR of two")
            high = max(poller.seen, default=-1)
            cluster.wait_for(lambda: max(poller.seen, default=-1) > high, 60,
                             what="the high watermark moving with the ISR of two")

            cluster.resume(follower)
            cluster.wait_for(lambda: follower in cluster.describe(TOPIC, leader)[0].isr, 60,
                             what=f"broker {follower} back in the ISR")
            mark = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) >= mark + 200, 60,
                             what="writes acknowledged by the whole ISR")
        finally:
            producer.stop()
            poller.stop()
        assert registered, "the follower had left ZooKeeper before the ISR shrank"
        assert sorted(shrunk.isr) == sorted(set(state.replicas) - {follower})
        assert not poller.errors, poller.errors
        backwards = [(a, b) for a, b in itertools.pairwise(poller.seen) if b < a]
        assert not backwards, f"the high watermark went back: {backwards[:5]}"
        last = max(o for _, o, _ in producer.acked)
        assert cluster.high_watermark(TOPIC, 0, leader) == last + 1 >= max(poller.seen)
        assert not producer.fatal and not producer.failed, (producer.fatal, producer.failed)


def _without(cluster: LocalCluster, leader: int, follower: int) -> object:
    state = cluster.describe(TOPIC, leader)[0]
    return state if follower not in state.isr else None
