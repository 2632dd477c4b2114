"""The group coordinator's settings: Kafka's broker keys for groups and their offsets
topic (``offsets.*``, ``group.*``), read from the broker's config by ``from_config``."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's broker settings for groups, under Kafka's key names (``from_config``)."""

    offsets_topic_num_partitions: int = 50
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # how long a new group waits to gather its first members into one rebalance; 0
    # answers the first member at once and later joiners trigger ordinary rebalances
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    # the offsets topic's segments: the log cleaner compacts every segment but the
    # active one, so this bounds what a partition keeps beyond its live keys
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    # how long a write waits for the ISR, and the offsets topic's replication factor
    # (at most the live brokers when it is created)
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_replication_factor: int = 3

    KEYS = {
        "offsets.topic.num.partitions": "offsets_topic_num_partitions",
        "offsets.commit.timeout.ms": "offsets_commit_timeout_ms",
        "offsets.topic.replication.factor": "offsets_topic_replication_factor",
        "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
        "group.min.session.timeout.ms": "min_session_timeout_ms",
        "group.max.session.timeout.ms": "max_session_timeout_ms",
        "group.max.size": "max_group_size",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }

    @classmethod
    def from_config(cls, config: BrokerConfig | Mapping[str, int | str]) -> CoordinatorConfig:
        """From a ``BrokerConfig`` (known keys or its ``extra``) or a plain mapping."""
        def lookup(key: str) -> int | str | None:
            if isinstance(config, dict):
                return config.get(key)
            with contextlib.suppress(KeyError):
                return config.get(key)
            return getattr(config, "extra", {}).get(key)

        values: dict[str, int] = {}
        for key, attr in cls.KEYS.items():
            value = lookup(key)
            if value is not None:
                values[attr] = int(value)
        minutes = lookup("offsets.retention.minutes")
        if minutes is not None:
            values["offsets_retention_ms"] = int(minutes) * 60_000
        return cls(**values)
