"""The transaction coordinator's settings: Kafka's broker keys for transactions and
their topic (``transaction.*``, ``transactional.id.*``), read by ``from_config``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig


@dataclass(frozen=True)
class TxnConfig:
    """Kafka's broker settings for transactions, under Kafka's key names."""

    state_log_num_partitions: int = 50
    state_log_segment_bytes: int = 100 * 1024 * 1024
    # at most the live brokers when the topic is created, and min.isr at most that
    state_log_replication_factor: int = 3
    state_log_min_isr: int = 2
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    # how long a write to __transaction_state waits for the ISR (Kafka's
    # transaction.state.log... has no such key: it uses request.timeout.ms, 30 s)
    write_timeout_ms: int = 30_000
    partition_verification: bool = True

    KEYS = {
        "transaction.state.log.num.partitions": "state_log_num_partitions",
        "transaction.state.log.segment.bytes": "state_log_segment_bytes",
        "transaction.state.log.replication.factor": "state_log_replication_factor",
        "transaction.state.log.min.isr": "state_log_min_isr",
        "transaction.max.timeout.ms": "max_timeout_ms",
        "transactional.id.expiration.ms": "id_expiration_ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms":
            "abort_timed_out_interval_ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms":
            "remove_expired_interval_ms",
        "transaction.partition.verification.enable": "partition_verification",
    }

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TxnConfig:
        return cls(**{attr: config.get(key) for key, attr in cls.KEYS.items()})
