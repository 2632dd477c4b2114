"""Workload files: what one benchmark run does.

A workload is a small YAML mapping; every key has a default, and an unknown key is an
error (a typo must not silently fall back to a default and measure something else)::

    name: max-produce-100b
    topics: 1                 # topics created for this run (fresh names per run)
    partitions: 4
    replication_factor: 1
    message_size: 100         # value bytes, including the 8-byte send timestamp
    payload: random           # random | text (compressible, JSON-like)
    keys: none                # none | uniform | zipf | round-robin
    key_space: 10000          # distinct keys for uniform/zipf/round-robin
    zipf_s: 1.2               # zipf exponent (> 1)
    producer: librdkafka      # librdkafka | pybroker-native
    producers: 1              # producer processes
    rate: max                 # total messages/s over all producers, or max
    acks: 1                   # 0, 1 or all
    linger_ms: 5
    batch_size: 1048576       # bytes per partition batch
    compression: none         # none | gzip | snappy | lz4 | zstd
    consumers: {groups: 1, per_group: 1}   # groups: 0 for produce-only
    mode: live                # live: consume while producing; backlog: produce, then consume;
                              # fanout, cold-read: read a preloaded topic (below)
    warmup: 5                 # seconds excluded from the figures
    duration: 20              # measured seconds of producing
    drain_timeout: 30         # seconds consumers get to catch up after producing stops
    producer_config: {}       # extra librdkafka properties, passed through
    consumer_config: {}
    consumer_backend: librdkafka   # librdkafka | raw | rdkafka_performance

Read workloads (``mode: fanout`` and ``mode: cold-read``, bench/driver/reads.py) fill one
topic with ``preload_bytes`` of values (``message_size`` each, in ``batch_size`` batches,
spread evenly over ``partitions``) and then only read it, with consumers that cost the
client little per byte: ``raw`` (bench/driver/rawclient.py: Fetch over a plain socket,
record-batch headers walked, records never decoded) or ``rdkafka_performance`` (the
reference's C consumer; its path from --rdkafka-performance or RDKAFKA_PERFORMANCE).
Producer keys, ``rate``, ``warmup`` and ``duration`` do not apply to them::

    preload_bytes: 1073741824       # value bytes written before reading
    fetch_max_bytes: 52428800       # Fetch max_bytes (raw), Kafka's fetch.max.bytes
    partition_max_bytes: 1048576    # per partition (raw), max.partition.fetch.bytes
    # fanout: consumers.groups readers (per_group 1), each reading every partition from
    # offset 0 at once, from the page cache.
    # cold-read: one reader after the topic's pages were dropped from the page cache
    # (needs the broker's --data-dir), while a tailing consumer on a second topic
    # measures end-to-end latency:
    tail_rate: 1000                 # messages/s produced to the tail topic
    tail_message_size: 100
    idle_seconds: 10                # tail latency measured before the cold read
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

TIMESTAMP_BYTES = 8  # every value starts with the producer's send time (CLOCK_MONOTONIC ns)

KEY_DISTRIBUTIONS = ("none", "uniform", "zipf", "round-robin")
PAYLOADS = ("random", "text")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
PRODUCER_BACKENDS = ("librdkafka", "pybroker-native")
MODES = ("live", "backlog", "fanout", "cold-read")
READ_MODES = ("fanout", "cold-read")
CONSUMER_BACKENDS = ("librdkafka", "raw", "rdkafka_performance")


class WorkloadError(ValueError):
    """The workload file asks for something the driver cannot do."""


@dataclass
class Consumers:
    groups: int = 1
    per_group: int = 1

    @property
    def total(self) -> int:
        return self.groups * self.per_group


@dataclass
class Workload:
    name: str
    description: str = ""
    topics: int = 1
    partitions: int = 4
    replication_factor: int = 1
    message_size: int = 100
    payload: str = "random"
    keys: str = "none"
    key_space: int = 10000
    zipf_s: float = 1.2
    producer: str = "librdkafka"
    producers: int = 1
    rate: int | None = None  # None: as fast as the broker takes it
    acks: str = "1"
    linger_ms: float = 5
    batch_size: int = 1048576
    compression: str = "none"
    consumers: Consumers = field(default_factory=Consumers)
    mode: str = "live"
    warmup: float = 5
    duration: float = 20
    drain_timeout: float = 30
    producer_config: dict[str, Any] = field(default_factory=dict)
    consumer_config: dict[str, Any] = field(default_factory=dict)
    consumer_backend: str = "librdkafka"
    preload_bytes: int = 0
    fetch_max_bytes: int = 52428800
    partition_max_bytes: int = 1048576
    tail_rate: int = 1000
    tail_message_size: int = 100
    idle_seconds: float = 10

    @classmethod
    def load(cls, path: str) -> Workload:
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
        if not isinstance(raw, dict):
            raise WorkloadError(f"{path}: a workload is a mapping, got {type(raw).__name__}")
        raw.setdefault("name", os.path.splitext(os.path.basename(path))[0])
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Workload:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise WorkloadError(f"unknown workload keys {unknown}; known: {sorted(known)}")
        values = dict(raw)
        consumers = values.pop("consumers", None)
        if consumers is None or consumers == 0:
            values["consumers"] = Consumers(groups=0, per_group=0)
        elif isinstance(consumers, dict):
            values["consumers"] = Consumers(**consumers)
        else:
            raise WorkloadError("consumers: give {groups: N, per_group: M} or 0")
        rate = values.get("rate")
        if rate in (None, "max", 0):
            values["rate"] = None
        values["acks"] = str(values.get("acks", "1"))
        workload = cls(**values)
        workload.validate()
        return workload

    def validate(self) -> None:
        def choose(key: str, allowed: tuple[str, ...]) -> None:
            if getattr(self, key) not in allowed:
                raise WorkloadError(f"{key}: {getattr(self, key)!r} is not one of {allowed}")

        choose("keys", KEY_DISTRIBUTIONS)
        choose("payload", PAYLOADS)
        choose("compression", COMPRESSIONS)
        choose("producer", PRODUCER_BACKENDS)
        choose("mode", MODES)
        choose("consumer_backend", CONSUMER_BACKENDS)
        choose("acks", ("0", "1", "all", "-1"))
        if self.message_size < TIMESTAMP_BYTES:
            raise WorkloadError(f"message_size must be >= {TIMESTAMP_BYTES} (send timestamp)")
        for key in ("topics", "partitions", "replication_factor", "producers", "key_space"):
            if getattr(self, key) < 1:
                raise WorkloadError(f"{key} must be >= 1")
        if self.rate is not None and self.rate < 1:
            raise WorkloadError("rate must be a positive number of messages/s or max")
        if self.keys == "zipf" and self.zipf_s <= 1:
            raise WorkloadError("zipf_s must be > 1")
        if self.duration <= 0 or self.warmup < 0:
            raise WorkloadError("duration must be > 0 and warmup >= 0")
        if self.mode == "backlog" and self.consumers.total == 0:
            raise WorkloadError("mode backlog consumes the backlog: give consumers")
        if self.consumers.groups < 0 or self.consumers.per_group < 0:
            raise WorkloadError("consumers must be >= 0")
        if (self.mode in READ_MODES) != (self.consumer_backend != "librdkafka"):
            raise WorkloadError(f"modes {READ_MODES} read with consumer_backend raw or "
                                "rdkafka_performance, and only they do")
        if self.mode in READ_MODES:
            if self.preload_bytes < self.message_size:
                raise WorkloadError("preload_bytes: a read workload needs data to read")
            if self.consumers.per_group != 1 or self.consumers.groups < 1:
                raise WorkloadError("a read workload's readers are consumers: "
                                    "{groups: N, per_group: 1}")
            if self.tail_rate < 1 or self.tail_message_size < TIMESTAMP_BYTES \
                    or self.idle_seconds <= 0:
                raise WorkloadError("tail_rate, tail_message_size and idle_seconds must be "
                                    "positive (tail_message_size >= 8)")

    def with_overrides(self, duration: float | None = None, warmup: float | None = None,
                       rate: int | None = None, preload_bytes: int | None = None,
                       idle_seconds: float | None = None) -> Workload:
        changes: dict[str, Any] = {}
        if preload_bytes is not None:
            changes["preload_bytes"] = preload_bytes
        if idle_seconds is not None:
            changes["idle_seconds"] = idle_seconds
        if duration is not None:
            changes["duration"] = duration
        if warmup is not None:
            changes["warmup"] = warmup
        if rate is not None:
            changes["rate"] = rate
        workload = dataclasses.replace(self, **changes)
        workload.validate()
        return workload

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["rate"] = "max" if self.rate is None else self.rate
        return out
