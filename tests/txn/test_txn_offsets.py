"""Offsets committed in a transaction (TxnOffsetCommit, api key 28) over real sockets:
pending until the producer's marker reaches the group's ``__consumer_offsets``
partition (WriteTxnMarkers), the group's offsets if it commits, dropped if it aborts;
OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile (KIP-447). A
broker killed with SIGKILL rebuilds the same from its log: committed, aborted and still
pending transactions, and a plain commit that overtook a pending one. confluent-kafka's
consume-transform-produce loop commits its offsets with its transaction only."""

from __future__ import annotations

import os
import signal
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.coordinator.internal_topic import partition_for
from pybroker.coordinator.offset_store import OFFSETS_TOPIC
from pybroker.coordinator.txn_offsets import PendingOffsets
from pybroker.errors import ErrorCode
from pybroker.log.checkpoints import read_offsets
from pybroker.log.log_cleaner import CHECKPOINT_FILE
from pybroker.net.protocol import codec
from tests.broker.wire_client import WireClient
from tests.txn.test_coordinator_clients import WAIT_S, consume_values
from tests.txn.test_markers import new_topic, producer_id, write_markers

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP, TXN_OFFSET_COMMIT = 8, 9, 11, 14, 28
OFFSETS_PARTITIONS = 3


def txn_commit(client: WireClient, group: str, pid: int, topic: str,
               offsets: dict[int, int], epoch: int = 0, version: int = 3,
               **member: object) -> dict[int, int]:
    """TxnOffsetCommit of ``{partition: offset}``: each partition's error code."""
    body = codec.with_defaults(TXN_OFFSET_COMMIT, version, {
        "transactional_id": "t-" + group, "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, **member, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": "m"}
            for p, o in offsets.items()]}]})
    response = client.request(TXN_OFFSET_COMMIT, version, body)
    return {p["partition_index"]: p["error_code"]
            for t in response["topics"] for p in t["partitions"]}


def fetch(client: WireClient, group: str, topic: str, partitions: list[int],
          require_stable: bool = False) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7: ``{partition: (committed offset, error code)}``, once the group's
    offsets partition has loaded (after a restart)."""
    deadline = time.monotonic() + 30
    while True:
        response = client.request(OFFSET_FETCH, 7, {
            "group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}],
            "require_stable": require_stable})
        if response["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or \
                time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert response["error_code"] == 0
    return {p["partition_index"]: (p["committed_offset"], p["error_code"])
            for t in response["topics"] for p in t["partitions"]}


def end_txn(client: WireClient, group: str, pid: int, commit: bool, epoch: int = 0) -> None:
    """The transaction coordinator's marker to the group's offsets partition."""
    index = partition_for(group, OFFSETS_PARTITIONS)
    assert write_markers(client, (pid, epoch, commit, 0, OFFSETS_TOPIC, [index])) == [
        {(OFFSETS_TOPIC, index): ErrorCode.NONE}]


def test_transactional_offsets_are_the_groups_once_committed_and_after_a_crash(
        broker_factory):
    broker = broker_factory(offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    unstable = ErrorCode.UNSTABLE_OFFSET_COMMIT
    with WireClient(broker.bootstrap) as client:
        topic = new_topic(client, partitions=3)
        pid = producer_id(client)
        assert txn_commit(client, group, pid, topic, {0: 42}) == {0: 0}
        assert fetch(client, group, topic, [0], require_stable=True) == {0: (-1, unstable)}
        assert fetch(client, group, topic, [0]) == {0: (-1, 0)}  # nothing committed yet
        end_txn(client, group, pid, commit=True)
        assert fetch(client, group, topic, [0], require_stable=True) == {0: (42, 0)}

        assert txn_commit(client, group, pid, topic, {0: 50}) == {0: 0}
        end_txn(client, group, pid, commit=False)
        assert fetch(client, group, topic, [0], require_stable=True) == {0: (42, 0)}

        # Still open at the crash: 77 for partition 0, and 5 for partition 1, which a plain
        # commit written after it overtakes (the later record wins when both commit).
        assert txn_commit(client, group, pid, topic, {0: 77, 1: 5}) == {0: 0, 1: 0}
        response = client.request(OFFSET_COMMIT, 8, codec.with_defaults(OFFSET_COMMIT, 8, {
            "group_id": group, "topics": [{"name": topic, "partitions": [
                {"partition_index": 1, "committed_offset": 9}]}]}))
        assert response["topics"][0]["partitions"][0]["error_code"] == 0
        before = fetch(client, group, topic, [0, 1], require_stable=True)
        assert before == {0: (-1, unstable), 1: (-1, unstable)}
        assert fetch(client, group, topic, [0, 1]) == {0: (42, 0), 1: (9, 0)}
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as client:
        assert fetch(client, group, topic, [0, 1], require_stable=True) == before
        assert fetch(client, group, topic, [0, 1]) == {0: (42, 0), 1: (9, 0)}
        end_txn(client, group, pid, commit=True)
        assert fetch(client, group, topic, [0, 1], require_stable=True) == \
            {0: (77, 0), 1: (9, 0)}
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as client:
        assert fetch(client, group, topic, [0, 1, 2], require_stable=True) == \
            {0: (77, 0), 1: (9, 0), 2: (-1, 0)}


def test_a_fenced_producer_cannot_commit_offsets(module_broker):
    """Once the coordinator's marker moved the producer to a newer epoch on the offsets
    partition, a commit of the old epoch is INVALID_PRODUCER_EPOCH (Kafka's append check
    on ``__consumer_offsets``)."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(module_broker.bootstrap) as client:
        topic = new_topic(client)
        pid = producer_id(client)
        assert txn_commit(client, group, pid, topic, {0: 3}) == {0: 0}
        index = partition_for(group, 50)
        assert write_markers(client, (pid, 1, False, 0, OFFSETS_TOPIC, [index])) == [
            {(OFFSETS_TOPIC, index): ErrorCode.NONE}]
        assert txn_commit(client, group, pid, topic, {0: 4}, epoch=0) == \
            {0: ErrorCode.INVALID_PRODUCER_EPOCH}
        assert txn_commit(client, group, pid, topic, {0: 4}, epoch=1) == {0: 0}
        assert txn_commit(client, group, pid, "no-such-topic", {0: 4}, epoch=1) == \
            {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert txn_commit(client, "", pid, topic, {0: 4}, epoch=1) == \
            {0: ErrorCode.INVALID_GROUP_ID}


def test_member_checks_of_version_3(module_broker):
    """Kafka's checks where a group has members: a commit naming a member must name one
    of the group (UNKNOWN_MEMBER_ID), in its generation (ILLEGAL_GENERATION); a static
    member's instance id must be its own (FENCED_INSTANCE_ID). A commit naming no member
    (versions 0-2 cannot) is accepted, unlike a plain OffsetCommit."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(module_broker.bootstrap) as client:
        topic = new_topic(client)
        pid = producer_id(client)
        join = codec.with_defaults(JOIN_GROUP, 5, {
            "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "group_instance_id": "instance-1", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        joined = client.request(JOIN_GROUP, 5, join)
        assert joined["error_code"] == 0
        member, generation = joined["member_id"], joined["generation_id"]
        synced = client.request(SYNC_GROUP, 3, {
            "group_id": group, "generation_id": generation, "member_id": member,
            "group_instance_id": "instance-1", "assignments": [
                {"member_id": member, "assignment": b""}]})
        assert synced["error_code"] == 0
        assert txn_commit(client, group, pid, topic, {0: 1}, member_id="someone",
                          generation_id=generation) == {0: ErrorCode.UNKNOWN_MEMBER_ID}
        assert txn_commit(client, group, pid, topic, {0: 1}, member_id=member,
                          generation_id=generation + 1) == {0: ErrorCode.ILLEGAL_GENERATION}
        assert txn_commit(client, group, pid, topic, {0: 1}, member_id="other",
                          group_instance_id="instance-1", generation_id=generation) == \
            {0: ErrorCode.FENCED_INSTANCE_ID}
        assert txn_commit(client, group, pid, topic, {0: 1}, member_id=member,
                          group_instance_id="instance-1", generation_id=generation) == {0: 0}
        assert txn_commit(client, group, pid, topic, {0: 2}, version=2) == {0: 0}
        plain = client.request(OFFSET_COMMIT, 2, codec.with_defaults(OFFSET_COMMIT, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 2}]}]}))
        assert plain["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_latest_committed_write_of_a_key_wins_in_log_order():
    """Kafka's rule when transactional and plain commits of a key mix: a pending write
    is applied at its commit marker only if no write of the key committed later in the
    log overtook it; it counts as pending until its marker all the same."""
    pending: PendingOffsets[str, str] = PendingOffsets()
    pending.write(1, "k", "a@5", 5)
    pending.write(2, "k", "b@7", 7)
    assert pending.end(2, commit=True) == [("k", "b@7")]
    assert pending.end(1, commit=True) == []  # b@7 is later in the log
    pending.write(3, "k", "c@8", 8)
    pending.committed("k", 10)  # a plain commit after it
    assert pending.is_pending("k")
    assert pending.end(3, commit=True) == [] and not pending.is_pending("k")
    pending.committed("k", 11)  # nothing pending: nothing to remember
    pending.write(4, "k", "d@12", 12)
    pending.write(4, "j", "d@13", 13)
    assert pending.end(4, commit=False) == [] and not pending
    pending.write(5, "k", "e@14", 14)
    assert pending.end(5, commit=True) == [("k", "e@14")]


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(broker_factory):
    """confluent-kafka's exactly-once loop: a group member reads, a transactional producer
    writes the results and ``send_offsets_to_transaction`` (AddOffsetsToTxn, then
    TxnOffsetCommit with the member's id and generation, KIP-447). An aborted round leaves
    the group's committed offset where the last committed round put it, for the consumer
    and after a SIGKILL."""
    broker = broker_factory(offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        source, sink = new_topic(client), new_topic(client)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        plain.produce(source, b"in-%d" % i, partition=0)
    assert plain.flush(WAIT_S) == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"t-{group}"})
    producer.init_transactions(WAIT_S)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])

    def transform(count: int, commit: bool) -> None:
        producer.begin_transaction()
        got = 0
        while got < count:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                producer.produce(sink, message.value().replace(b"in", b"out"), partition=0)
                got += 1
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), WAIT_S)
        if commit:
            producer.commit_transaction(WAIT_S)
        else:
            producer.abort_transaction(WAIT_S)

    def committed() -> int:
        return consumer.committed([TopicPartition(source, 0)], WAIT_S)[0].offset

    try:
        transform(3, commit=True)
        assert committed() == 3
        transform(3, commit=False)
        assert committed() == 3
    finally:
        consumer.close()
    assert consume_values(broker.bootstrap, sink, "read_committed", 3) == \
        [b"out-0", b"out-1", b"out-2"]
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as client:
        assert fetch(client, group, source, [0], require_stable=True) == {0: (3, 0)}


def test_an_aborted_commit_does_not_cost_the_committed_offset_once_compacted(broker_factory):
    """The log cleaner compacts ``__consumer_offsets``: an aborted transactional commit
    of a key written after its committed one must not make the cleaner drop the latter,
    or the next load would find no offset for the group."""
    broker = broker_factory(offsets_topic_num_partitions=1, offsets_topic_segment_bytes=4096,
                            log_cleaner_backoff_ms=100)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        topic = new_topic(client, partitions=4)
        pid = producer_id(client)
        assert txn_commit(client, group, pid, topic, {0: 42}) == {0: 0}
        assert write_markers(client, (pid, 0, True, 0, OFFSETS_TOPIC, [0])) == [
            {(OFFSETS_TOPIC, 0): ErrorCode.NONE}]
        assert txn_commit(client, group, pid, topic, {0: 50}) == {0: 0}
        assert write_markers(client, (pid, 0, False, 0, OFFSETS_TOPIC, [0])) == [
            {(OFFSETS_TOPIC, 0): ErrorCode.NONE}]
        listed = client.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": OFFSETS_TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1,
                                                   "current_leader_epoch": -1}]}]})
        past_abort = listed["topics"][0]["partitions"][0]["offset"]
        for i in range(300):  # another group's commits: segments for the cleaner
            body = codec.with_defaults(OFFSET_COMMIT, 8, {"group_id": "filler", "topics": [{
                "name": topic, "partitions": [{"partition_index": p, "committed_offset": i}
                                              for p in range(4)]}]})
            assert client.request(OFFSET_COMMIT, 8, body)["topics"][0]["partitions"][0][
                "error_code"] == 0
    checkpoint = os.path.join(broker.data_dir, CHECKPOINT_FILE)
    deadline = time.monotonic() + 30
    while read_offsets(checkpoint).get((OFFSETS_TOPIC, 0), -1) <= past_abort:
        assert time.monotonic() < deadline, "the cleaner did not clean past the abort"
        time.sleep(0.1)
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as client:
        assert fetch(client, group, topic, [0], require_stable=True) == {0: (42, 0)}


def test_pending_offsets_of_a_deleted_topic_do_not_come_back_with_the_commit(
        broker_factory):
    """Kafka drops a deleted topic's pending transactional offsets with its committed
    ones: the transaction committing later must not bring them back."""
    from confluent_kafka.admin import AdminClient

    broker = broker_factory(offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        topic = new_topic(client, partitions=1)
        pid = producer_id(client)
        assert txn_commit(client, group, pid, topic, {0: 42}) == {0: 0}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(WAIT_S)
        end_txn(client, group, pid, commit=True)
        assert fetch(client, group, topic, [0], require_stable=True) == {0: (-1, 0)}
