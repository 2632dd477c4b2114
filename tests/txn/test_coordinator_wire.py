"""The transaction coordinator's answers request by request, as Kafka gives them:
FindCoordinator of a transactional id, InitProducerId bumping the epoch, the checks of
AddPartitionsToTxn / AddOffsetsToTxn / EndTxn (unknown producer id, an old epoch, unknown
partitions, an outcome that does not match the state), the verify-only question of
AddPartitionsToTxn v4+, DescribeTransactions and ListTransactions."""

from __future__ import annotations

import time

from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient
from tests.txn.test_coordinator_clients import create_topic

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def init(client: WireClient, transactional_id: str, timeout_ms: int = 60_000) -> dict:
    return client.request(INIT_PRODUCER_ID, 4, {"transactional_id": transactional_id,
                                                "transaction_timeout_ms": timeout_ms,
                                                "producer_id": -1, "producer_epoch": -1})


def add_partitions(client: WireClient, transactional_id: str, producer_id: int, epoch: int,
                   topics: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], int]:
    response = client.request(ADD_PARTITIONS, version, {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer_id, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in response["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]}


def end(client: WireClient, transactional_id: str, producer_id: int, epoch: int,
        commit: bool, version: int = 3) -> int:
    return client.request(END_TXN, version, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "committed": commit})["error_code"]


def new_producer(client: WireClient, bootstrap: str) -> tuple[str, str, int, int]:
    """A new topic of two partitions and a new transactional producer: (topic,
    transactional id, producer id, epoch)."""
    topic, transactional_id = unique("txn"), unique("tid")
    create_topic(bootstrap, topic)
    producer = init(client, transactional_id)
    return topic, transactional_id, producer["producer_id"], producer["producer_epoch"]


def describe(client: WireClient, transactional_id: str) -> dict:
    return client.request(DESCRIBE_TRANSACTIONS, 0, {
        "transactional_ids": [transactional_id]})["transaction_states"][0]


def until_complete(client: WireClient, transactional_id: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        described = describe(client, transactional_id)
        if described["transaction_state"].startswith("Complete") or time.monotonic() > deadline:
            return described
        time.sleep(0.05)


def test_find_coordinator_of_a_transactional_id(module_broker):
    with WireClient(module_broker.bootstrap) as client:
        response = client.request(FIND_COORDINATOR, 4, {
            "key_type": 1, "coordinator_keys": [unique("tid"), unique("tid")]})
        host, port = module_broker.bootstrap.split(":")
        for coordinator in response["coordinators"]:
            assert coordinator["error_code"] == 0
            assert (coordinator["host"], coordinator["port"]) == (host, int(port))


def test_init_producer_id_bumps_the_epoch_and_keeps_the_id(module_broker):
    transactional_id = unique("tid")
    with WireClient(module_broker.bootstrap) as client:
        first = init(client, transactional_id)
        second = init(client, transactional_id)
        assert first["error_code"] == second["error_code"] == 0
        assert second["producer_id"] == first["producer_id"]
        assert second["producer_epoch"] == first["producer_epoch"] + 1
        # KIP-360: a producer naming an id and epoch it never had is fenced
        stale = client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout_ms": 60_000,
            "producer_id": first["producer_id"] + 1000, "producer_epoch": 0})
        assert stale["error_code"] == ErrorCode.PRODUCER_FENCED
        described = describe(client, transactional_id)
        assert (described["transaction_state"], described["producer_epoch"],
                described["transaction_timeout_ms"]) == ("Empty", 1, 60_000)


def test_add_partitions_checks_producer_epoch_and_partitions(module_broker):
    with WireClient(module_broker.bootstrap) as client:
        topic, transactional_id, pid, epoch = new_producer(client, module_broker.bootstrap)
        assert add_partitions(client, transactional_id, pid + 1, epoch, {topic: [0]}) == \
            {(topic, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert add_partitions(client, transactional_id, pid, epoch - 1, {topic: [0]}) == \
            {(topic, 0): ErrorCode.PRODUCER_FENCED}
        assert add_partitions(client, transactional_id, pid, epoch - 1, {topic: [0]},
                              version=1) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert add_partitions(client, transactional_id, pid, epoch, {topic: [0, 7]}) == {
            (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert end(client, transactional_id, pid, epoch, commit=True) == \
            ErrorCode.INVALID_TXN_STATE  # nothing open
        assert add_partitions(client, transactional_id, pid, epoch, {topic: [0, 1]}) == {
            (topic, 0): 0, (topic, 1): 0}
        described = describe(client, transactional_id)
        assert described["transaction_state"] == "Ongoing"
        assert described["topics"] == [{"topic": topic, "partitions": [0, 1]}]
        assert described["transaction_start_time_ms"] > 0

        # verify-only (v4+, a partition leader's question) changes nothing
        verified = client.request(ADD_PARTITIONS, 4, {"transactions": [{
            "transactional_id": transactional_id, "producer_id": pid,
            "producer_epoch": epoch, "verify_only": True,
            "topics": [{"name": topic, "partitions": [1]},
                       {"name": unique("other"), "partitions": [0]}]}]})
        results = {(t["name"], p["partition_index"]): p["partition_error_code"]
                   for t in verified["results_by_transaction"][0]["topic_results"]
                   for p in t["results_by_partition"]}
        assert results[(topic, 1)] == 0
        assert sorted(results.values()) == [0, ErrorCode.INVALID_TXN_STATE]

        offsets = client.request(ADD_OFFSETS, 3, {
            "transactional_id": transactional_id, "producer_id": pid,
            "producer_epoch": epoch, "group_id": unique("group")})
        assert offsets["error_code"] == 0
        assert {t["topic"] for t in describe(client, transactional_id)["topics"]} == \
            {topic, "__consumer_offsets"}

        assert end(client, transactional_id, pid, epoch, commit=False) == 0
        completed = until_complete(client, transactional_id)
        assert (completed["transaction_state"], completed["topics"]) == ("CompleteAbort", [])
        # a retried EndTxn of the same outcome is answered as done, the other refused
        assert end(client, transactional_id, pid, epoch, commit=False) == 0
        assert end(client, transactional_id, pid, epoch, commit=True) == \
            ErrorCode.INVALID_TXN_STATE


def test_describe_and_list_transactions(module_broker):
    topic = unique("txn")
    create_topic(module_broker.bootstrap, topic)
    ongoing_id, empty_id = unique("ongoing"), unique("empty")
    with WireClient(module_broker.bootstrap) as client:
        ongoing = init(client, ongoing_id)
        assert add_partitions(client, ongoing_id, ongoing["producer_id"],
                              ongoing["producer_epoch"], {topic: [0]}) == {(topic, 0): 0}
        empty = init(client, empty_id)

        missing = describe(client, unique("never"))
        assert missing["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

        def listed(body: dict) -> dict[str, tuple[int, str]]:
            response = client.request(LIST_TRANSACTIONS, 1, body)
            assert response["error_code"] == 0
            return {t["transactional_id"]: (t["producer_id"], t["transaction_state"])
                    for t in response["transaction_states"]}

        everything = listed({"state_filters": [], "producer_id_filters": []})
        assert everything[ongoing_id] == (ongoing["producer_id"], "Ongoing")
        assert everything[empty_id] == (empty["producer_id"], "Empty")
        only_ongoing = listed({"state_filters": ["Ongoing"], "producer_id_filters": []})
        assert ongoing_id in only_ongoing and empty_id not in only_ongoing
        by_producer = listed({"state_filters": [],
                              "producer_id_filters": [empty["producer_id"]]})
        assert list(by_producer) == [empty_id]
        # v1's duration filter: transactions open at least that long
        assert ongoing_id not in listed({"state_filters": [], "producer_id_filters": [],
                                         "duration_filter": 3_600_000})
        response = client.request(LIST_TRANSACTIONS, 0, {"state_filters": ["Sleeping"],
                                                         "producer_id_filters": []})
        assert response["unknown_state_filters"] == ["Sleeping"]
        assert response["transaction_states"] == []


def test_transaction_timeout_is_checked_against_the_maximum(module_broker):
    with WireClient(module_broker.bootstrap) as client:
        for timeout_ms in (0, 900_001):
            answer = init(client, unique("tid"), timeout_ms)
            assert answer["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_transactional_batch_to_a_partition_outside_the_transaction_is_refused(
        module_broker):
    """KIP-890 part 1: the first batch of a transaction on a partition is written only if
    the coordinator has the partition in the producer's open transaction; later ones need
    no question."""
    from pybroker._native.records import encode_batch
    from tests.broker.wire_client import produce_body

    with WireClient(module_broker.bootstrap) as client:
        topic, transactional_id, pid, epoch = new_producer(client, module_broker.bootstrap)

        def produce(partition: int, sequence: int, txn_id: str | None = transactional_id
                    ) -> int:
            batch = encode_batch([b"v"], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=sequence, transactional=True)
            body = produce_body(topic, partition, batch)
            body["transactional_id"] = txn_id
            response = client.request(0, 9, body)
            return response["responses"][0]["partition_responses"][0]["error_code"]

        assert produce(0, 0) == ErrorCode.INVALID_TXN_STATE  # nothing added yet
        assert add_partitions(client, transactional_id, pid, epoch, {topic: [0]}) == \
            {(topic, 0): 0}
        assert produce(1, 0) == ErrorCode.INVALID_TXN_STATE  # not partition 1
        assert produce(0, 0, txn_id=None) == ErrorCode.INVALID_TXN_STATE
        assert produce(0, 0) == 0
        assert produce(0, 1) == 0
        assert end(client, transactional_id, pid, epoch, commit=True) == 0
        until_complete(client, transactional_id)
        # the transaction is over: its producer's next batch opens nothing by itself
        assert produce(0, 2) == ErrorCode.INVALID_TXN_STATE
