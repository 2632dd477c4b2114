"""Per-topic log settings under Kafka's topic config names.

``LogConfig.from_properties`` takes Kafka's keys (``segment.bytes``, ``retention.ms``, ...)
with string or int values, as they arrive from CreateTopics, AlterConfigs or the broker's
``topic_defaults()``; a key Kafka does not define, or a value out of range, raises
``InvalidConfigError`` (INVALID_CONFIG), as Kafka answers CreateTopics. Defaults are
Kafka's (``TopicConfig`` / ``ServerLogConfigs``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Protocol, cast

from pybroker.errors import InvalidConfigError

_NEVER = 2**63 - 1  # Long.MAX_VALUE: Kafka's "never" for flush.messages and flush.ms
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")

# a property as it arrives: text from the wire or a file, a number from code or a test
PropertyValue = str | int | float


def _int(low: int, high: int = _NEVER) -> Callable[[PropertyValue], int]:
    def parse(value: PropertyValue) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"{number} not in [{low}, {high}]")
        return number
    return parse


def _ratio(value: PropertyValue) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{number} not in [0, 1]")
    return number


def _choice(choices: tuple[str, ...]) -> Callable[[PropertyValue], str]:
    def parse(value: PropertyValue) -> str:
        if str(value) not in choices:
            raise ValueError(f"{value!r} not one of {', '.join(choices)}")
        return str(value)
    return parse


def _policy(value: PropertyValue) -> str:
    parts = sorted(p.strip() for p in str(value).split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"{value!r} is not delete and/or compact")
    return ",".join(parts)


# Kafka key -> (attribute, parser); the defaults are the LogConfig field defaults
_SCHEMA: dict[str, tuple[str, Callable[[PropertyValue], int | str | float]]] = {
    "segment.bytes": ("segment_bytes", _int(14, 2**31 - 1)),
    "segment.ms": ("segment_ms", _int(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _int(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(4, 2**31 - 1)),
    "index.interval.bytes": ("index_interval_bytes", _int(0, 2**31 - 1)),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int(-1)),
    "flush.messages": ("flush_messages", _int(1)),
    "flush.ms": ("flush_ms", _int(0)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int(0)),
    "max.message.bytes": ("max_message_bytes", _int(0, 2**31 - 1)),
    "message.timestamp.type": ("message_timestamp_type", _choice(_TIMESTAMP_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _int(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _int(0)),
    "cleanup.policy": ("cleanup_policy", _policy),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "compression.type": ("compression_type", _choice(_COMPRESSION_TYPES)),
    "min.insync.replicas": ("min_insync_replicas", _int(1, 2**31 - 1)),
}


class _FromValues(Protocol):
    def __call__(self, **values: int | str | float) -> LogConfig: ...


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Immutable settings of one partition log; a config change builds a new one."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int = _NEVER
    flush_ms: int = _NEVER
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = _NEVER
    message_timestamp_after_max_ms: int = 3_600_000
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _NEVER
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    min_insync_replicas: int = 1

    @classmethod
    def from_properties(cls, props: Mapping[str, PropertyValue | None] | None = None
                        ) -> LogConfig:
        values: dict[str, int | str | float] = {}
        for key, value in (props or {}).items():
            if value is None:
                continue  # "not set": the default stays
            entry = _SCHEMA.get(key)
            if entry is None:
                raise InvalidConfigError(f"Unknown topic config name: {key}")
            attribute, parse = entry
            try:
                values[attribute] = parse(value)
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(f"Invalid value {value!r} for {key}: {exc}") from None
        # each attribute gets its own parser's type, which mypy cannot follow through a
        # name-keyed dict (it would check every value against every field)
        return cast(_FromValues, cls)(**values)

    def to_properties(self) -> dict[str, int | str | float]:
        return {key: getattr(self, attribute) for key, (attribute, _) in _SCHEMA.items()}

    @functools.cached_property
    def log_append_time(self) -> bool:  # read by every produce: computed once
        return self.message_timestamp_type == "LogAppendTime"

    @functools.cached_property
    def compacts(self) -> bool:  # read by every produce: computed once
        """``cleanup.policy`` includes ``compact``: records must have keys, and the log
        cleaner compacts the log."""
        return "compact" in self.cleanup_policy.split(",")

    @functools.cached_property
    def roll_ms(self) -> int:  # read by every produce: computed once
        """Age of a segment's first batch that rolls it: ``segment.ms`` less the jitter,
        for a compacted log at most ``max.compaction.lag.ms`` (Kafka's ``maxSegmentMs``:
        records become cleanable within that lag, the active segment never is)."""
        segment_ms = min(self.segment_ms, self.max_compaction_lag_ms) if self.compacts \
            else self.segment_ms
        return segment_ms - self.segment_jitter_ms

    @property
    def deletes(self) -> bool:
        """Retention deletes old segments (``cleanup.policy`` includes ``delete``)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def flushes_by_time(self) -> bool:
        return self.flush_ms != _NEVER


KNOWN_KEYS = frozenset(_SCHEMA)
