"""Real clients against what of transactions the broker does so far."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from tests.admin.clients import unique


def test_confluent_transaction_timeout_above_the_max_is_refused(module_broker):
    """librdkafka's InitProducerId with ``transaction.timeout.ms`` above the broker's
    ``transaction.max.timeout.ms`` (900000) gets INVALID_TRANSACTION_TIMEOUT, as from
    Kafka, instead of a producer id."""
    producer = Producer({"bootstrap.servers": module_broker.bootstrap,
                         "transactional.id": unique("txn"),
                         "transaction.timeout.ms": 2147483647})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(10)
    assert raised.value.args[0].name() == "INVALID_TRANSACTION_TIMEOUT"
