"""The ``pybroker`` PySpark data source (pyspark 4.x Python Data Source API).

Writes go through Arrow: Spark hands each task ``pyarrow.RecordBatch``es, and the
task's :class:`~pybroker.client.BulkProducer` partitions, encodes and sends them as
record batches natively — no Python per row. Reads fetch offset ranges per partition
and decode record batches natively into Arrow columns, returned to Spark as
``pyarrow.RecordBatch``es. The read schema is the one Spark's own Kafka source uses.

Delivery is at-least-once by default, as with Spark's Kafka sink: a task that is retried
writes its rows again. Within one task the producer is idempotent, so its own retries
never duplicate.

With ``exactlyOnce=true`` each write task writes its rows in a Kafka transaction of its
own, under a transactional id made of ``transactionalIdPrefix``, an id of this write (of
this query run, for streaming) and the Spark partition id, never the attempt: a retried or
speculative attempt of the partition gets that id's producer with a bumped epoch, which
fences the earlier attempt and aborts what it wrote. The task flushes and returns its
transaction (id, producer id, epoch) in its commit message without ending it; the driver's
``commit`` ends every task's transaction with EndTxn(commit), and returns once their
markers are written, and ``abort`` with EndTxn(abort). ``read_committed`` readers see the
rows of a write once it committed (every read started after the write returned), and
only then. Limits: the job must commit within ``kafka.transaction.timeout.ms`` of its
first task's end (else the coordinator aborts and the commit fails); the commit is one
EndTxn per task, so a driver dying in the middle of it leaves the write partly visible;
a streaming micro-batch that Spark replays after a crash between the sink's commit and
its checkpoint is written again.
"""

from __future__ import annotations

import gc
import logging
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pybroker.spark.options import (
    EARLIEST,
    LATEST,
    ReadOptions,
    WriteOptions,
    resolve_offsets,
    wants_headers,
)

log = logging.getLogger("pybroker.spark")

# Spark's Kafka source schema; the headers column only with includeHeaders=true, as there:
# an array of structs per row is much of what Spark's JVM spends turning each Arrow batch
# into rows, even when every array is empty.
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


class PybrokerDataSource(DataSource):
    """``format("pybroker")``: see :mod:`pybroker.spark.options` for the options."""

    @classmethod
    def name(cls) -> str:
        return "pybroker"

    def schema(self) -> str:
        """What reads return (a write's schema is its DataFrame's)."""
        return f"{KAFKA_SCHEMA}, {HEADERS_FIELD}" if wants_headers(self.options) \
            else KAFKA_SCHEMA

    def writer(self, schema: StructType, overwrite: bool) -> PybrokerWriter:
        return PybrokerWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> PybrokerStreamWriter:
        return PybrokerStreamWriter(WriteOptions.parse(self.options), schema)

    def reader(self, schema: StructType) -> PybrokerReader:
        return PybrokerReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> PybrokerStreamReader:
        return PybrokerStreamReader(ReadOptions.parse(self.options, streaming=True))


def _freeze_worker_heap() -> None:
    """Exclude what a Spark Python worker holds so far (pyspark, pyarrow and pybroker's
    modules: ~50,000 objects) from the garbage collector, once per worker process.

    Spark's worker runs a full ``gc.collect()`` after every task, which walks every
    tracked object: ~29 ms a task with pybroker's client loaded, ~10% of a writer task's
    samples; frozen objects are skipped. What a task allocates afterwards is collected as
    before; the frozen objects are the long-lived imports (and the few objects of the
    task that called this first, kept for the life of the worker)."""
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True


_heap_frozen = False


# -- writing ------------------------------------------------------------------------------

@dataclass
class PybrokerCommitMessage(WriterCommitMessage):
    rows: int
    bytes: int
    batches: int
    requests: int
    retries: int
    # exactlyOnce: (transactional id, producer id, epoch) of the task's open transaction
    transaction: tuple[str, int, int] | None = None


def _write_batches(options: WriteOptions, iterator, write_id: str | None
                   ) -> PybrokerCommitMessage:
    """One task's rows; with ``write_id`` (exactlyOnce) in a transaction left open."""
    from pyspark import TaskContext

    from pybroker.client import BulkProducer

    _freeze_worker_heap()
    transactional_id = None
    if write_id is not None:
        task = TaskContext.get()
        assert task is not None  # write() runs in a Spark task
        transactional_id = (f"{options.transactional_id_prefix}-{write_id}-"
                            f"{task.partitionId()}")
    with BulkProducer(options.bootstrap, acks=options.acks, compression=options.compression,
                      idempotent=options.idempotent, batch_bytes=options.batch_bytes,
                      max_in_flight=options.max_in_flight,
                      client_id="pybroker-spark-writer", transactional_id=transactional_id,
                      transaction_timeout_ms=options.transaction_timeout_ms) as producer:
        if transactional_id is None:
            stats = _send_batches(producer, options, iterator)
            transaction = None
        else:
            producer.begin_transaction()
            try:
                stats = _send_batches(producer, options, iterator)
            except BaseException:
                _abort_quietly(producer)
                raise
            transaction = producer.transaction_state()
    return PybrokerCommitMessage(stats.records, stats.bytes, stats.batches, stats.requests,
                                 stats.retries, transaction)


def _abort_quietly(producer) -> None:
    """Abort a failing task's transaction now rather than at its timeout (a retry would
    abort it too), keeping the task's own error the one raised."""
    try:
        producer.abort_transaction()
    except Exception as exc:
        log.warning("aborting the failed task's transaction: %s", exc)


def _send_batches(producer, options: WriteOptions, iterator):
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in iterator:
        names = batch.schema.names
        if "value" not in names:
            raise ValueError("the DataFrame to write needs a 'value' column")

        def column(name, arrow_type=None, batch=batch, names=names):
            if name not in names:
                return None
            array = batch.column(name)
            # Binary columns (the usual key/value) are used as they come: a cast to
            # the same type still costs a kernel call per column per Arrow batch.
            if arrow_type is None or array.type == arrow_type:
                return array
            return array.cast(arrow_type)

        values = column("value", pa.binary())
        keys = column("key", pa.binary())
        headers = column("headers")
        timestamps = None
        if "timestamp" in names:
            timestamps = pc.cast(batch.column("timestamp").cast(pa.timestamp("ms")),
                                 pa.int64())
        if options.topic is not None:
            topic_groups = [(options.topic, None)]
        elif "topic" in names:
            topics = batch.column("topic")
            topic_groups = [(t, pc.equal(topics, t)) for t in pc.unique(topics).to_pylist()]
        else:
            raise ValueError("set the 'topic' option or give the DataFrame a 'topic' column")
        for topic, mask in topic_groups:
            cols = [values, keys, timestamps, headers]
            partitions = batch.column("partition") if "partition" in names else None
            if mask is not None:
                cols = [None if c is None else c.filter(mask) for c in cols]
                partitions = None if partitions is None else partitions.filter(mask)
            if partitions is None or partitions.null_count == len(partitions):
                producer.send_arrow(topic, *cols)
                continue
            for p in pc.unique(partitions).to_pylist():
                rows = pc.equal(partitions, p) if p is not None else pc.is_null(partitions)
                values_p, keys_p, timestamps_p, headers_p = (
                    None if c is None else c.filter(rows) for c in cols)
                producer.send_arrow(topic, values_p, keys_p, timestamps_p, headers_p,
                                    partition=p)
    return producer.flush()


def _end_transactions(options: WriteOptions, messages, commit: bool) -> None:
    """EndTxn for the transaction of every task that wrote one (the driver's side of an
    exactlyOnce write). Aborting goes on past an error, to end as many as it can."""
    from pybroker.client import Cluster
    transactions = [m.transaction for m in messages
                    if m is not None and m.transaction is not None]
    if not transactions:
        return
    cluster = Cluster(options.bootstrap, "pybroker-spark-driver")
    try:
        for transactional_id, producer_id, epoch in transactions:
            try:
                cluster.end_transaction(transactional_id, producer_id, epoch, commit)
            except Exception as exc:
                if commit:
                    raise
                log.warning("aborting %s: %s", transactional_id, exc)
        if commit:  # the write returns when every read_committed reader sees it all
            for transactional_id, _, _ in transactions:
                cluster.wait_for_markers(transactional_id)
    finally:
        cluster.close()


def _log_commit(messages, what: str) -> None:
    done = [m for m in messages if m is not None]
    log.info("%s: %d tasks wrote %d rows, %d bytes in %d batches (%d requests, %d retries)",
             what, len(done), sum(m.rows for m in done), sum(m.bytes for m in done),
             sum(m.batches for m in done), sum(m.requests for m in done),
             sum(m.retries for m in done))


def _write_id(options: WriteOptions) -> str | None:
    """Made on the driver, once per write (per query run for streaming), and shipped to
    every task with the writer: what makes the transactional ids of this write's tasks."""
    return uuid.uuid4().hex if options.exactly_once else None


class PybrokerWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.write_id = _write_id(options)

    def write(self, iterator) -> PybrokerCommitMessage:
        return _write_batches(self.options, iterator, self.write_id)

    def commit(self, messages) -> None:
        _end_transactions(self.options, messages, commit=True)
        _log_commit(messages, "pybroker write committed")

    def abort(self, messages) -> None:
        _end_transactions(self.options, messages, commit=False)
        _log_commit(messages, "pybroker write aborted" if self.options.exactly_once else
                    "pybroker write aborted (rows already written stay: at-least-once)")


class PybrokerStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.write_id = _write_id(options)

    def write(self, iterator) -> PybrokerCommitMessage:
        return _write_batches(self.options, iterator, self.write_id)

    def commit(self, messages, batchId: int) -> None:
        _end_transactions(self.options, messages, commit=True)
        _log_commit(messages, f"pybroker micro-batch {batchId} committed")

    def abort(self, messages, batchId: int) -> None:
        _end_transactions(self.options, messages, commit=False)
        _log_commit(messages, f"pybroker micro-batch {batchId} aborted")


# -- reading ------------------------------------------------------------------------------

@dataclass
class OffsetRange(InputPartition):
    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    isolation_level: int = 0
    include_headers: bool = False


def _offsets_of(options: ReadOptions) -> dict[str, tuple[list[int], list[int]]]:
    """Per topic: (earliest, latest) offsets of every partition."""
    from pybroker.client import Cluster
    cluster = Cluster(options.bootstrap, "pybroker-spark-reader")
    try:
        return {t: (cluster.list_offsets(t, EARLIEST),
                    cluster.list_offsets(t, LATEST, options.isolation_level))
                for t in options.topics}
    finally:
        cluster.close()


def _read_range(part: OffsetRange):
    import pyarrow as pa
    import pyarrow.compute as pc

    from pybroker.client import Cluster, Fetcher
    _freeze_worker_heap()
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
             "headers"]
    cluster = Cluster(part.bootstrap, "pybroker-spark-reader")
    try:
        fetcher = Fetcher(cluster, isolation_level=part.isolation_level)
        # One Arrow batch per fetch (<= 8 MB, ~65K rows of 116 B): Spark's JVM and Python
        # worker took ~20% less CPU per row than with 256K-row batches (~30 MB each).
        for cols in fetcher.read_range(part.topic, part.partition, part.start, part.end,
                                       rows_per_chunk=1):
            n = len(cols["offset"])
            arrays = [
                cols["key"], cols["value"],
                pa.repeat(pa.scalar(part.topic, pa.string()), n),
                pa.repeat(pa.scalar(part.partition, pa.int32()), n),
                cols["offset"],
                pc.multiply(cols["timestamp"], 1000).cast(pa.timestamp("us", tz="UTC")),
                cols["timestamp_type"],
            ]
            if part.include_headers:
                arrays.append(cols["headers"])
            yield pa.RecordBatch.from_arrays(arrays, names=names[:len(arrays)])
    finally:
        cluster.close()


class PybrokerReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        parts = []
        for topic, (earliest, latest) in _offsets_of(self.options).items():
            starts = resolve_offsets(self.options.starting, topic, len(earliest), earliest,
                                     latest)
            ends = resolve_offsets(self.options.ending, topic, len(earliest), earliest, latest)
            step = self.options.max_rows_per_partition
            for p, (start, end) in enumerate(zip(starts, ends, strict=True)):
                # Large ranges are split so several tasks read one partition in parallel.
                for s in range(start, end, step):
                    parts.append(OffsetRange(self.options.bootstrap, topic, p, s,
                                             min(s + step, end),
                                             self.options.isolation_level,
                                             self.options.include_headers))
        return parts

    def read(self, partition: InputPartition):
        assert isinstance(partition, OffsetRange)  # ours: made by partitions() above
        return _read_range(partition)


class PybrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"partition": next offset}}``, as Spark's Kafka source."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: dict | None = None  # Trigger.AvailableNow: the end to stop at

    def _latest(self) -> dict:
        out = {}
        for topic, (_, latest) in _offsets_of(self.options).items():
            out[topic] = {str(p): latest[p] for p in range(len(latest))}
        return out

    def initialOffset(self) -> dict:
        out = {}
        for topic, (earliest, latest) in _offsets_of(self.options).items():
            starts = resolve_offsets(self.options.starting, topic, len(earliest), earliest,
                                     latest)
            out[topic] = {str(p): o for p, o in enumerate(starts)}
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._target if self._target is not None else self._latest()
        if not isinstance(limit, ReadMaxRows):
            return latest
        # Spread max_rows over the partitions in proportion to their backlog, as Spark's
        # Kafka source does, so no partition starves.
        backlog = {(t, p): max(0, end - start.get(t, {}).get(p, 0))
                   for t, parts in latest.items() for p, end in parts.items()}
        total = sum(backlog.values())
        if total <= limit.max_rows:
            return latest
        out = {t: dict(parts) for t, parts in latest.items()}
        for (t, p), lag in backlog.items():
            share = int(limit.max_rows * lag / total)
            out[t][p] = start.get(t, {}).get(p, 0) + share
        return out

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        parts = []
        for topic, ends in end.items():
            for p, stop in ends.items():
                begin = start.get(topic, {}).get(p, 0)
                if stop > begin:
                    parts.append(OffsetRange(self.options.bootstrap, topic, int(p), begin,
                                             stop, self.options.isolation_level,
                                             self.options.include_headers))
        return parts

    def read(self, partition: InputPartition):
        assert isinstance(partition, OffsetRange)  # ours: made by partitions() above
        return _read_range(partition)

    def commit(self, end: dict) -> None:
        pass
