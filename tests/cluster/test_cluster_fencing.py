"""A leader cut off (issue 7, second check): the broker that is both the controller and
the leader of a partition is paused (SIGSTOP) past its ZooKeeper session timeout.

- Meanwhile another broker becomes the controller with a higher controller epoch, and
  another replica the leader with a higher leader epoch; writes are acknowledged there.
- An acks=all produce sent to the old leader over a connection opened before the pause
  is not acknowledged successfully, and its record is in no log at the end.
- Epoch fences: a Fetch carrying the old leader epoch is answered FENCED_LEADER_EPOCH by
  the new leader, and a controller request carrying the old controller epoch (what the
  zombie controller would send) is answered STALE_CONTROLLER_EPOCH by every broker.
- Resumed, the old leader becomes a follower, truncates what only it had, rejoins the
  ISR and, being the preferred replica, leads again; its log then holds every
  acknowledged record at its offset and not the stale one.
"""

from __future__ import annotations

from pybroker.client.connection import BrokerConnection, ConnectionClosed
from tests.cluster.harness import (
    NOT_ACKNOWLEDGED,
    PRODUCE,
    LocalCluster,
    produce_body,
    produce_error,
    read_all,
)

TOPIC = "fenced"
FETCH, UPDATE_METADATA = 1, 6
STALE_CONTROLLER_EPOCH, FENCED_LEADER_EPOCH = 11, 74


def test_paused_leader_and_controller_is_fenced(zk_connect, tmp_path, cluster_security):
    with LocalCluster(zk_connect, tmp_path, settings={"min.insync.replicas": 2},
                      security=cluster_security) as cluster:
        old = cluster.controller_id()
        others = [i for i in cluster.brokers if i != old]
        # The controller is the preferred leader: pausing it tests both fences at once.
        cluster.create_topic(TOPIC, configs={"min.insync.replicas": "2"},
                             assignment=[[old, *others]])
        before = cluster.describe(TOPIC)[0]
        assert before.leader == old
        acked = {}
        for i in range(20):
            answer = cluster.request(old, PRODUCE, 8, produce_body(TOPIC, 0, b"before-%d" % i))
            assert produce_error(answer) == 0, answer
            acked[b"before-%d" % i] = _base_offset(answer)
        old_epoch = cluster.controller_epoch()
        old_registration = cluster.registration(old)
        assert old_registration is not None

        stale = BrokerConnection("127.0.0.1", cluster.brokers[old].port, "stale", timeout=60)
        cluster.pause(old)
        stale.send(PRODUCE, 8, produce_body(TOPIC, 0, b"stale", timeout_ms=5000))

        after = cluster.wait_for(lambda: _led_by(cluster, others), 60,
                                 what=f"partition 0 led by one of {others}")
        assert after.leader_epoch > before.leader_epoch and old not in after.isr
        cluster.wait_for(lambda: all(cluster.controller_id(b) in others for b in others), 60,
                         what=f"a controller among {others}, known to both")
        assert cluster.controller_epoch() > old_epoch

        # The two others take acks=all writes (ISR of two, min.insync.replicas 2).
        for i in range(20):
            answer = cluster.request(after.leader, PRODUCE, 8,
                                     produce_body(TOPIC, 0, b"after-%d" % i))
            assert produce_error(answer) == 0, answer
            acked[b"after-%d" % i] = _base_offset(answer)

        assert _fetch_error(cluster, after.leader, before.leader_epoch) == FENCED_LEADER_EPOCH
        for broker_id in others:
            answer = _zombie_update_metadata(cluster, broker_id, old, old_epoch)
            assert answer["error_code"] == STALE_CONTROLLER_EPOCH, (broker_id, answer)

        cluster.resume(old)
        try:
            answer = stale.receive()[1]
            error = produce_error(answer)
            assert error in NOT_ACKNOWLEDGED, f"the stale leader answered {answer}"
        except ConnectionClosed:
            pass  # closed unanswered: not acknowledged either
        finally:
            stale.close()

        # Follower again, truncated, caught up; then the preferred leader once more. (Asked
        # of another broker: the old one's own cache says what it knew before the pause.)
        cluster.wait_for(lambda: old in cluster.describe(TOPIC, others[0])[0].isr, 60,
                         what=f"broker {old} back in the ISR")
        cluster.wait_for(lambda: cluster.describe(TOPIC, others[0])[0].leader == old, 60,
                         what=f"broker {old} the preferred leader again")
        assert cluster.controller_id(old) != old  # it did not take the controller back
        final = read_all(cluster.address(old), TOPIC, 1,
                         at_least={0: max(acked.values()) + 1})[0]
        assert b"stale" not in final.values()
        missing = {v: o for v, o in acked.items() if final.get(o) != v}
        assert not missing, f"acknowledged records not at their offsets: {missing}"


def _led_by(cluster: LocalCluster, candidates: list[int]) -> object:
    """Partition 0's state once one of ``candidates`` leads it and knows it: another
    broker's Metadata can name the new leader before that leader's LeaderAndIsr arrived
    (the controller's queues to each broker are independent)."""
    state = cluster.describe(TOPIC, candidates[0])[0]
    if state.leader not in candidates:
        return None
    own = cluster.describe(TOPIC, state.leader).get(0)
    knows = own is not None and (own.leader, own.leader_epoch) == (state.leader,
                                                                  state.leader_epoch)
    return state if knows else None


def _base_offset(answer: dict) -> int:
    return int(answer["responses"][0]["partition_responses"][0]["base_offset"])


def _fetch_error(cluster: LocalCluster, broker_id: int, leader_epoch: int) -> int:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": 0,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    answer = cluster.request(broker_id, FETCH, 11, body)
    return int(answer["responses"][0]["partitions"][0]["error_code"])


def _zombie_update_metadata(cluster: LocalCluster, broker_id: int, controller_id: int,
                            controller_epoch: int) -> dict:
    """What the old controller would send after its pause: its epoch, the broker's
    current registration (so only the controller epoch is stale)."""
    registration = cluster.registration(broker_id)
    assert registration is not None
    body = {"controller_id": controller_id, "controller_epoch": controller_epoch,
            "broker_epoch": registration[1], "topic_states": [], "live_brokers": []}
    return cluster.control_request(broker_id, UPDATE_METADATA, 7, body)
