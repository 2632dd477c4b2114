"""Option parsing for the ``pybroker`` Spark data source.

Names follow Spark's own Kafka connector where one exists, so code ports by changing
``format("kafka")`` to ``format("pybroker")``: ``kafka.bootstrap.servers``, ``topic``,
``subscribe``, ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, and
producer settings prefixed ``kafka.`` (``kafka.acks``, ``kafka.compression.type``,
``kafka.enable.idempotence``, ``kafka.batch.size``,
``kafka.max.in.flight.requests.per.connection``, ``kafka.transaction.timeout.ms``), and
for reads ``kafka.isolation.level`` and ``includeHeaders`` (the ``headers`` column, absent
by default as in Spark's Kafka source). Options of our own, in the style of Spark's
(``maxOffsetsPerTrigger``): ``maxRowsPerPartition``, ``exactlyOnce``,
``transactionalIdPrefix``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EARLIEST, LATEST = -2, -1
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
# An exactly-once write's transactions stay open from each task's end until the job
# commits, so the whole job must fit in the timeout: Kafka's producer default (60 s) would
# abort the early tasks' transactions of any long write. The default is the broker's
# default ceiling (transaction.max.timeout.ms = 15 min); the price of a long timeout is
# that a driver dying before the commit stalls read_committed readers of the written
# partitions (at their last stable offset) until the coordinator aborts.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000


def _get(options: Mapping[str, str], *names: str, default=None):
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return default


def _bool(value: str | bool) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes")


def wants_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders``: whether reads have the ``headers`` column."""
    return _bool(_get(options, "includeHeaders", default=False))


@dataclass
class WriteOptions:
    bootstrap: str
    topic: str | None
    acks: int
    compression: str
    idempotent: bool
    batch_bytes: int
    max_in_flight: int = 5
    exactly_once: bool = False
    transactional_id_prefix: str = "pybroker-spark"
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        acks = str(_get(options, "kafka.acks", "acks", default="all"))
        idempotent = _bool(_get(options, "kafka.enable.idempotence", default="true"))
        exactly_once = _bool(_get(options, "exactlyOnce", default="false"))
        if exactly_once and not (idempotent and acks in ("all", "-1")):
            raise ValueError("exactlyOnce writes need kafka.acks=all and "
                             "kafka.enable.idempotence=true")
        return cls(
            bootstrap=_get(options, "kafka.bootstrap.servers", "bootstrap.servers",
                           default=DEFAULT_BOOTSTRAP),
            topic=_get(options, "topic"),
            acks=-1 if acks in ("all", "-1") else int(acks),
            compression=_get(options, "kafka.compression.type", "compression",
                             default="none"),
            idempotent=idempotent and acks in ("all", "-1"),
            batch_bytes=int(_get(options, "kafka.batch.size", default=1_000_000)),
            max_in_flight=int(_get(options, "kafka.max.in.flight.requests.per.connection",
                                   default=5)),
            exactly_once=exactly_once,
            transactional_id_prefix=_get(options, "transactionalIdPrefix",
                                         default="pybroker-spark"),
            transaction_timeout_ms=int(_get(options, "kafka.transaction.timeout.ms",
                                            default=DEFAULT_TRANSACTION_TIMEOUT_MS)),
        )


@dataclass
class ReadOptions:
    bootstrap: str
    topics: list[str]
    starting: str                     # "earliest" | "latest" | JSON per partition
    ending: str                       # "latest" | JSON per partition
    max_offsets_per_trigger: int | None
    max_rows_per_partition: int       # batch reads split larger ranges across tasks
    isolation_level: int = 0          # ISOLATION_LEVELS: read_committed stops at the LSO
    include_headers: bool = False     # the headers column, as Spark's Kafka source

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        topics = _get(options, "subscribe", "topic")
        if not topics:
            raise ValueError("option 'subscribe' (comma-separated topics) is required")
        max_per_trigger = _get(options, "maxOffsetsPerTrigger", "maxRecordsPerTrigger")
        isolation = _get(options, "kafka.isolation.level", default="read_uncommitted")
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"kafka.isolation.level must be one of "
                             f"{', '.join(ISOLATION_LEVELS)}, not {isolation!r}")
        return cls(
            bootstrap=_get(options, "kafka.bootstrap.servers", "bootstrap.servers",
                           default=DEFAULT_BOOTSTRAP),
            topics=[t.strip() for t in topics.split(",") if t.strip()],
            starting=_get(options, "startingOffsets",
                          default="latest" if streaming else "earliest"),
            ending=_get(options, "endingOffsets", default="latest"),
            max_offsets_per_trigger=None if max_per_trigger is None else int(max_per_trigger),
            max_rows_per_partition=int(_get(options, "maxRowsPerPartition", default=2_000_000)),
            isolation_level=ISOLATION_LEVELS[isolation],
            include_headers=wants_headers(options),
        )


def resolve_offsets(spec: str, topic: str, partitions: int, earliest: list[int],
                    latest: list[int]) -> list[int]:
    """Per partition offsets for ``startingOffsets``/``endingOffsets``.

    ``spec`` is "earliest", "latest" or Spark's JSON form ``{"topic": {"0": 23, "1": -2}}``
    where -2 means earliest and -1 latest; partitions the JSON leaves out take earliest
    for a start (as Spark does for new partitions) — the caller passes that default in.
    """
    if spec == "earliest":
        return list(earliest)
    if spec == "latest":
        return list(latest)
    per_topic = json.loads(spec).get(topic, {})
    out = []
    for p in range(partitions):
        value = int(per_topic.get(str(p), EARLIEST))
        out.append(earliest[p] if value == EARLIEST else latest[p] if value == LATEST
                   else min(max(value, earliest[p]), latest[p]))
    return out
