"""The transaction coordinator with real clients: confluent-kafka's, kafka-python's and
aiokafka's transactional producers commit and abort, read_committed consumers see only
committed records and read_uncommitted ones see everything, a second producer with the
same transactional id fences the first, a transaction past its timeout is aborted, and
a broker killed mid-transaction comes back with the committed records and without the
open ones."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from tests.admin.clients import unique
from tests.broker.wire_client import WireClient

DESCRIBE_TRANSACTIONS = 65
WAIT_S = 30.0


def consume_values(bootstrap: str, topic: str, isolation: str, expected: int,
                   wait_s: float = 15.0) -> list[bytes]:
    """The values of ``topic`` from the start as a consumer of ``isolation`` reads them,
    until ``expected`` arrived or ``wait_s`` passed, then a little longer so that an
    unexpected extra record would show."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= expected:
                deadline = min(deadline, time.monotonic() + 1.0)
    finally:
        consumer.close()
    return values


def transactional_producer(bootstrap: str, transactional_id: str, **settings) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         **settings})
    producer.init_transactions(WAIT_S)
    return producer


def produce_in_transaction(producer: Producer, topic: str, values: list[bytes],
                           commit: bool) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 2)
    producer.flush(WAIT_S)  # the records reach the log before the outcome is decided
    if commit:
        producer.commit_transaction(WAIT_S)
    else:
        producer.abort_transaction(WAIT_S)


def describe(bootstrap: str, transactional_id: str) -> dict:
    with WireClient(bootstrap) as client:
        response = client.request(DESCRIBE_TRANSACTIONS, 0,
                                  {"transactional_ids": [transactional_id]})
    return response["transaction_states"][0]


def wait_for_state(bootstrap: str, transactional_id: str, state: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        described = describe(bootstrap, transactional_id)
        if described["transaction_state"] == state or time.monotonic() > deadline:
            return described
        time.sleep(0.1)


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(WAIT_S)


def test_confluent_commit_and_abort_as_each_isolation_level_reads_them(module_broker):
    topic = unique("txn")
    create_topic(module_broker.bootstrap, topic)
    producer = transactional_producer(module_broker.bootstrap, unique("tid"))
    committed_1 = [b"c1-%d" % i for i in range(5)]
    aborted = [b"a-%d" % i for i in range(5)]
    committed_2 = [b"c2-%d" % i for i in range(5)]
    produce_in_transaction(producer, topic, committed_1, commit=True)
    produce_in_transaction(producer, topic, aborted, commit=False)
    produce_in_transaction(producer, topic, committed_2, commit=True)

    read_committed = consume_values(module_broker.bootstrap, topic, "read_committed", 10)
    assert sorted(read_committed) == sorted(committed_1 + committed_2)
    read_uncommitted = consume_values(module_broker.bootstrap, topic, "read_uncommitted", 15)
    assert sorted(read_uncommitted) == sorted(committed_1 + aborted + committed_2)


def test_kafka_python_and_aiokafka_transactions(module_broker):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    topic = unique("txn")
    create_topic(module_broker.bootstrap, topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=module_broker.bootstrap,
                             transactional_id=unique("kp"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"kafka-python committed", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"kafka-python aborted", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    async def aiokafka_transactions() -> None:
        aio = AIOKafkaProducer(bootstrap_servers=module_broker.bootstrap,
                               transactional_id=unique("aio"))
        await aio.start()
        try:
            async with aio.transaction():
                await aio.send_and_wait(topic, b"aiokafka committed", partition=0)
            await aio.begin_transaction()
            await aio.send_and_wait(topic, b"aiokafka aborted", partition=0)
            await aio.abort_transaction()
        finally:
            await aio.stop()

    asyncio.run(aiokafka_transactions())
    assert sorted(consume_values(module_broker.bootstrap, topic, "read_committed", 2)) == \
        [b"aiokafka committed", b"kafka-python committed"]
    assert len(consume_values(module_broker.bootstrap, topic, "read_uncommitted", 4)) == 4


def test_second_producer_fences_the_first_and_aborts_its_transaction(module_broker):
    topic = unique("txn")
    create_topic(module_broker.bootstrap, topic)
    transactional_id = unique("tid")
    zombie = transactional_producer(module_broker.bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(WAIT_S)

    successor = transactional_producer(module_broker.bootstrap, transactional_id)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(WAIT_S)
    assert raised.value.args[0].fatal() or raised.value.args[0].name() in (
        "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    produce_in_transaction(successor, topic, [b"successor"], commit=True)

    assert consume_values(module_broker.bootstrap, topic, "read_committed", 1) == [b"successor"]
    described = describe(module_broker.bootstrap, transactional_id)
    assert described["transaction_state"] == "CompleteCommit"
    assert described["producer_epoch"] >= 1


def test_transaction_past_its_timeout_is_aborted(broker_factory):
    broker = broker_factory(**{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100})
    topic = unique("txn")
    create_topic(broker.bootstrap, topic)
    transactional_id = unique("tid")
    producer = transactional_producer(broker.bootstrap, transactional_id,
                                      **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(topic, b"timed out", partition=0)
    producer.flush(WAIT_S)
    described = wait_for_state(broker.bootstrap, transactional_id, "CompleteAbort")
    assert described["transaction_state"] == "CompleteAbort"
    with pytest.raises(KafkaException):
        producer.commit_transaction(WAIT_S)

    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after", partition=0)
    plain.flush(WAIT_S)
    # the aborted transaction no longer holds the last stable offset back
    assert consume_values(broker.bootstrap, topic, "read_committed", 1) == [b"after"]


def test_broker_killed_mid_transaction_keeps_committed_and_drops_open(broker):
    topic = unique("txn")
    create_topic(broker.bootstrap, topic)
    transactional_id = unique("tid")
    producer = transactional_producer(broker.bootstrap, transactional_id)
    produce_in_transaction(producer, topic, [b"committed-before"], commit=True)
    producer.begin_transaction()
    producer.produce(topic, b"open-at-kill", partition=1)
    producer.flush(WAIT_S)
    broker.stop(signal.SIGKILL)
    broker.start()

    # the loaded coordinator knows the open transaction: a new instance fences it
    described = wait_for_state(broker.bootstrap, transactional_id, "Ongoing")
    assert described["transaction_state"] == "Ongoing"
    assert [t["topic"] for t in described["topics"]] == [topic]
    successor = transactional_producer(broker.bootstrap, transactional_id)
    produce_in_transaction(successor, topic, [b"committed-after"], commit=True)
    assert sorted(consume_values(broker.bootstrap, topic, "read_committed", 2)) == \
        [b"committed-after", b"committed-before"]


def test_commit_answered_before_a_kill_survives_it(broker):
    """PrepareCommit is written before EndTxn is answered: killed right after, the
    coordinator finds it on load and writes the markers."""
    topic = unique("txn")
    create_topic(broker.bootstrap, topic)
    transactional_id = unique("tid")
    producer = transactional_producer(broker.bootstrap, transactional_id)
    produce_in_transaction(producer, topic, [b"a", b"b", b"c", b"d"], commit=True)
    broker.stop(signal.SIGKILL)
    broker.start()
    assert sorted(consume_values(broker.bootstrap, topic, "read_committed", 4)) == \
        [b"a", b"b", b"c", b"d"]
    assert wait_for_state(broker.bootstrap, transactional_id,
                          "CompleteCommit")["transaction_state"] == "CompleteCommit"
