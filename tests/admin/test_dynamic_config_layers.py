"""The dynamic layers in process: precedence and sources (``BrokerConfig.with_dynamic``),
Kafka's refusals (``DynamicBrokerConfig.checked``), subscribers told of the keys whose
value changed, and stored layers loaded leniently."""

from __future__ import annotations

import pytest

from pybroker.broker.dynamic_config import DEFAULT_ENTITY, DynamicBrokerConfig
from pybroker.config import BrokerConfig, ConfigSource
from pybroker.errors import InvalidRequestError


def test_per_broker_beats_cluster_default_beats_static_beats_default() -> None:
    static = BrokerConfig({"message.max.bytes": "2000000", "log.retention.hours": "2"})
    config = static.with_dynamic({"message.max.bytes": "3000000", "log.retention.ms": "60000"},
                                 {"message.max.bytes": "4000000"})
    assert config["message.max.bytes"] == 4_000_000
    assert config.source("message.max.bytes") == ConfigSource.DYNAMIC_BROKER_CONFIG
    key = "message.max.bytes"
    assert config.synonyms(key) == [
        (key, 4_000_000, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (key, 3_000_000, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (key, 2_000_000, ConfigSource.STATIC_BROKER_CONFIG),
        (key, 1_048_588, ConfigSource.DEFAULT_CONFIG)]
    # Kafka 4.1's chains of the retention spellings (asked with its DescribeConfigs)
    assert config.synonyms("log.retention.ms") == [
        ("log.retention.ms", 60_000, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", 2, ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", 168, ConfigSource.DEFAULT_CONFIG)]
    assert static.synonyms("log.retention.ms") == []  # unset itself: Kafka lists none
    assert static.synonyms("log.retention.minutes") == []
    assert static.synonyms("log.retention.hours") == [
        ("log.retention.hours", 2, ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", 168, ConfigSource.DEFAULT_CONFIG)]
    # the most specific retention key set wins, in whichever layer it is
    assert config.topic_defaults()["retention.ms"] == 60_000
    assert config.topic_default_sources()["retention.ms"] == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert static.topic_default_sources()["retention.ms"] == ConfigSource.STATIC_BROKER_CONFIG
    assert "segment.bytes" not in config.topic_default_sources()
    assert config.source("num.partitions") == ConfigSource.DEFAULT_CONFIG


def test_checked_refuses_as_kafka_does() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig({"broker.id": "3"}))
    assert dynamic.entities == (DEFAULT_ENTITY, "3")
    with pytest.raises(InvalidRequestError,
                       match=r"^Cannot update these configs dynamically: "
                             r"Set\(log.dirs, no.such.key\)$"):
        dynamic.checked("3", {"log.dirs": "/x", "no.such.key": "1", "message.max.bytes": "9"})
    with pytest.raises(InvalidRequestError, match="Invalid value abc for configuration"):
        dynamic.checked(DEFAULT_ENTITY, {"log.cleaner.threads": "abc"})
    with pytest.raises(InvalidRequestError, match="at least 1"):
        dynamic.checked(DEFAULT_ENTITY, {"log.cleaner.threads": "0"})
    with pytest.raises(InvalidRequestError):
        dynamic.checked("3", {"log.message.timestamp.type": "Tomorrow"})
    assert dynamic.checked("3", {"message.max.bytes": "9"})["message.max.bytes"] == 9
    assert dynamic.current["message.max.bytes"] == 1_048_588  # checking applies nothing
    # cleaner threads: at most double or half at a time, with 1 MiB of map each
    with pytest.raises(InvalidRequestError, match="at most double or half"):
        dynamic.checked("3", {"log.cleaner.threads": "3"})
    dynamic.update("3", {"log.cleaner.threads": "2"})
    with pytest.raises(InvalidRequestError, match="per cleaner thread"):
        dynamic.checked("3", {"log.cleaner.threads": "2",
                              "log.cleaner.dedupe.buffer.size": str(1 << 20)})


def test_subscribers_hear_of_changed_values_only() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig({"message.max.bytes": "5000"}))
    heard: list[tuple[str, object]] = []
    dynamic.subscribe({"message.max.bytes"}, lambda c: heard.append(("max", c["message.max.bytes"])))
    dynamic.subscribe({"max.connections"}, lambda c: heard.append(("conn", c["max.connections"])))
    dynamic.update(DEFAULT_ENTITY, {"message.max.bytes": "6000"})
    dynamic.update(DEFAULT_ENTITY, {"message.max.bytes": "6000"})  # no change: nobody is told
    dynamic.update("0", {"message.max.bytes": "6000"})  # same value from another layer
    dynamic.update(DEFAULT_ENTITY, {})  # the broker's own still says 6000, from its layer
    dynamic.update("0", {"max.connections": "10"})  # back to the static 5000
    assert heard == [("max", 6000), ("max", 6000), ("max", 5000), ("conn", 10)]
    assert dynamic.layer("0") == {"max.connections": "10"}
    assert dynamic.current.source("message.max.bytes") == ConfigSource.STATIC_BROKER_CONFIG


def test_load_drops_what_is_no_longer_acceptable() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig())
    dynamic.load("0", {"num.partitions": "4", "message.max.bytes": "x",
                       "log.segment.bytes": 2_000_000, "log.cleaner.threads": "4"})
    # (a stored thread count is taken whole: the double-or-half rule is for changes)
    assert dynamic.layer("0") == {"log.segment.bytes": "2000000", "log.cleaner.threads": "4"}
    assert dynamic.current["log.segment.bytes"] == 2_000_000
