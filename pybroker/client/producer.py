"""A bulk producer that sends Arrow columns as Kafka record batches.

Built for ingest (the Spark writer, the benchmark load generator), not for one message
at a time: ``send_arrow`` takes whole columns, places keyed rows where the Java client's
default partitioner would (native murmur2, one call per Arrow batch) and appends each
partition's rows natively to that partition's open batch (``records.BatchBuilder``),
never touching a row in Python. An open batch is sent when it reaches ``batch_bytes``,
at ``flush()``, or when the open batches together pass ``max_open_bytes``; so batches are
~``batch_bytes`` however small the Arrow batches are (Spark's 10,000-row batches gave
~350 KB batches per partition before: 3x the batches and Produce requests, and a fresh
350 KB allocation, page faults included, per batch). The batches are written into
pooled buffers, reused once acknowledged. Requests are pipelined, ``max_in_flight`` per
broker connection, and written with ``sendmsg`` from those buffers without another copy.

Threads: the caller's thread partitions and encodes (and owns the open batches); a sender
thread owns the broker connections, sends the queued batches and reads the
acknowledgements, so reading the next Arrow batch (from Spark's JVM) and encoding it
overlap with the network instead of waiting for socket space and acks (26% of the Spark
writer's profile before). The two share only the hand-off deque (``_incoming``) and
counters under ``_cond``, and the buffer pool (a deque: the sender returns buffers, the
caller takes them); the caller waits there when ``max_in_flight * batch_bytes`` bytes are
encoded and not yet sent, and in ``flush()`` until every batch is acknowledged. An error on
the sender thread (retries exhausted, a non-retriable error code) is raised in the caller
by its next ``send_arrow`` or ``flush``. Sequence numbers are assigned by the caller in
encoding order, and the sender keeps the single-threaded rules below.

Delivery: with ``idempotent=True`` (the default) the producer holds a producer id and a
sequence number per partition, so a retried batch is answered by the broker with its
original offsets instead of being written twice; retriable errors (leader moved, broker
restarted, timeouts) are retried up to ``retries`` times each, preserving order within
a partition. Thread safety: one calling thread per producer (plus its sender thread).

Transactions: with a ``transactional_id`` the producer gets that id's producer id and a
bumped epoch from its transaction coordinator (fencing the id's earlier producers), and
writes between ``begin_transaction()`` and ``commit_transaction()`` /
``abort_transaction()``. ``send_arrow`` adds the partitions it is about to write to that
were not yet in the transaction (one AddPartitionsToTxn per call that has new ones, before
any of their batches can be sent), batches carry the transactional bit, and commit and
abort flush and then send EndTxn. The bookkeeping is per partition and per call, never
per row. A transaction may also be left open on ``close()`` and ended by whoever holds
``transaction_state()`` (the Spark writer's driver does). Fencing (PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED from the coordinator or a leader)
raises ``ProducerFencedError`` and leaves the producer unusable, as Kafka's producer does.
"""

from __future__ import annotations

import collections
import itertools
import logging
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pybroker._native.partitioner import partition_rows
from pybroker._native.records import BatchBuilder
from pybroker.client.cluster import DEFAULT_TRANSACTION_TIMEOUT_MS, Cluster
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

PRODUCE, PRODUCE_VERSION = 0, 8
ADD_PARTITIONS_TO_TXN = 24
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                     ErrorCode.TRANSACTION_COORDINATOR_FENCED})
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_NO_SEQUENCE_ERRORS = {ErrorCode.DUPLICATE_SEQUENCE_NUMBER}
# Kafka's default max.message.bytes is 1048588; stay clear of it with headers included.
DEFAULT_BATCH_BYTES = 1_000_000
# Open batches (one per partition written to) are all sent once they hold this much
# together: bounds the memory of a producer writing to many partitions.
DEFAULT_MAX_OPEN_BYTES = 16 << 20
# Free batch buffers kept for reuse, per buffer size, for the whole process: a Spark
# Python worker runs one producer per task, and a pool per producer faulted its ~25
# buffers' pages in again every task (8,000 page faults per 1M rows; the first touch of a
# page costs a host fault on this VM, see BENCHMARKS.md). Deques: the sender threads put
# buffers back while callers take them, and append/pop are atomic.
_POOL_SIZE = 32
_POOLS: dict[int, collections.deque[bytearray]] = collections.defaultdict(collections.deque)


class ProducerFencedError(KafkaError):
    """A newer producer of the same transactional id took over (or the coordinator
    aborted this producer's transaction past its timeout): this producer can no longer
    write, and its open transaction is (or will be) aborted."""


@dataclass
class PendingBatch:
    topic: str
    partition: int
    data: Any  # bytes or a memoryview of a pooled buffer (buffer)
    records: int
    base_sequence: int
    attempts: int = 0
    buffer: bytearray | None = None


@dataclass
class ProduceStats:
    records: int = 0
    bytes: int = 0
    batches: int = 0
    requests: int = 0
    retries: int = 0
    last_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


def _add_partitions_error(response: dict) -> int:
    """The error of an AddPartitionsToTxn v3 answer: Kafka answers every partition, those
    it did not get to with OPERATION_NOT_ATTEMPTED."""
    codes = {p["partition_error_code"] for t in response["results_by_topic_v3_and_below"]
             for p in t["results_by_partition"]}
    codes -= {ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED}
    return min(codes, default=ErrorCode.NONE)


def _binary_column(array) -> tuple:
    """(offsets, data, validity, validity_offset) of an Arrow binary/string array."""
    import pyarrow as pa
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()
    n, off = len(array), array.offset
    offsets_view = memoryview(offsets)[4 * off: 4 * (off + n + 1)]
    data = data if data is not None else b""
    if validity is None or array.null_count == 0:
        return (offsets_view, data)
    return (offsets_view, data, validity, off)


def _timestamps_buffer(array) -> memoryview:
    """The int64 values buffer of an Arrow int64 array, as the encoder reads it (a null
    timestamp is sent as whatever its slot holds)."""
    off = array.offset
    return memoryview(array.buffers()[1])[8 * off: 8 * (off + len(array))]


def _headers_column(array) -> tuple | None:
    """(list_offsets, key_column, value_column) of an Arrow list<struct<key, value>>."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if array is None:
        return None
    if array.values.offset or array.values.field(0).offset or array.values.field(1).offset:
        # Children sliced independently of the list: rebuild a compact copy (rare).
        array = pc.take(array, pa.array(range(len(array)), pa.int32()))
    n, off = len(array), array.offset
    list_offsets = memoryview(array.buffers()[1])[4 * off: 4 * (off + n + 1)]
    return (list_offsets, _binary_column(array.values.field(0)),
            _binary_column(array.values.field(1)))


class BulkProducer:
    def __init__(self, bootstrap: str, *, acks: int = -1, compression: str = "none",
                 idempotent: bool = True, max_in_flight: int = 5,
                 batch_bytes: int = DEFAULT_BATCH_BYTES,
                 max_open_bytes: int = DEFAULT_MAX_OPEN_BYTES, retries: int = 10,
                 request_timeout_ms: int = 30000,
                 client_id: str = "pybroker-bulk-producer",
                 transactional_id: str | None = None,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> None:
        if compression not in CODECS:
            raise ValueError(f"compression must be one of {sorted(CODECS)}")
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=-1 (all)")
        self.acks = acks
        self.codec = CODECS[compression]
        self.max_in_flight = max_in_flight
        self.batch_bytes = batch_bytes
        self.max_open_bytes = max_open_bytes
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.cluster = Cluster(bootstrap, client_id)
        self.stats = ProduceStats()
        self.transactional_id = transactional_id
        # Partitions of the open transaction (None: none open), and the fencing error
        # that made this producer unusable.
        self._transaction: set[tuple[str, int]] | None = None
        self._fenced: KafkaError | None = None
        self._produce_txn_id = b"\xff\xff" if transactional_id is None else (
            struct.pack(">h", len(transactional_id.encode())) + transactional_id.encode())
        try:
            self.producer_id, self.producer_epoch = (
                self.cluster.init_producer_id(transactional_id, transaction_timeout_ms)
                if idempotent else (-1, -1))
        except BaseException:
            self.cluster.close()
            raise
        self._sequences: dict[tuple[str, int], int] = collections.defaultdict(int)
        # The caller's open batches, and the free buffers (batch_bytes each) for new ones.
        self._open: dict[tuple[str, int], BatchBuilder] = {}
        self._pool = _POOLS[batch_bytes]
        self._queue: collections.deque[PendingBatch] = collections.deque()
        # Per broker: requests in flight, each the batches it carries.
        self._in_flight: dict[int, collections.deque[list[PendingBatch]]] = \
            collections.defaultdict(collections.deque)
        self._sticky = itertools.count()
        # Partitions with a batch re-queued: their later in-flight batches come back
        # OUT_OF_ORDER_SEQUENCE_NUMBER and are resent after it, not failed.
        self._retrying: set[tuple[str, int]] = set()
        # Shared with the sender thread, under _cond: batches handed over, bytes encoded
        # and not yet sent, batches not yet acknowledged, the sender's error, stop flag.
        self._cond = threading.Condition()
        self._incoming: collections.deque[PendingBatch] = collections.deque()
        self._unsent_bytes = 0
        self._unacked = 0
        self._error: BaseException | None = None
        self._closing = False
        # Set by the sender when it polls with room to send: only then does a new batch
        # need to wake it (a write on the wake-up socket per batch, and the GIL hand-over
        # it caused, was 7% of the Spark writer's samples).
        self._wake_wanted = False
        self._max_unsent = max_in_flight * batch_bytes
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sender = threading.Thread(target=self._run_sender, daemon=True,
                                        name="pybroker-bulk-sender")
        self._sender.start()

    def close(self) -> None:
        """Stop the sender (batches not yet flushed are dropped) and close connections."""
        with self._cond:
            self._closing = True
        self._wake()
        self._sender.join()
        self._wake_r.close()
        self._wake_w.close()
        self.cluster.close()

    def __enter__(self) -> BulkProducer:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()

    # -- transactions ---------------------------------------------------------------------

    def begin_transaction(self) -> None:
        self._check_transactional()
        if self._transaction is not None:
            raise KafkaError("a transaction is already open", ErrorCode.INVALID_TXN_STATE)
        self._transaction = set()

    def commit_transaction(self) -> None:
        """Flush every batch of the open transaction, then commit it (EndTxn)."""
        self._end_transaction(commit=True)

    def abort_transaction(self) -> None:
        """Drop the rows not yet sent, wait for the batches in flight, abort (EndTxn)."""
        self._end_transaction(commit=False)

    def transaction_state(self) -> tuple[str, int, int] | None:
        """(transactional id, producer id, epoch): what ends this producer's open
        transaction from another client (``Cluster.end_transaction``); None when the
        open transaction wrote nothing, so the coordinator holds none."""
        self._check_transactional()
        if not self._transaction:
            return None
        assert self.transactional_id is not None  # checked above
        return self.transactional_id, self.producer_id, self.producer_epoch

    def _check_transactional(self) -> None:
        if self._fenced is not None:
            raise self._fenced
        if self.transactional_id is None:
            raise KafkaError("not a transactional producer", ErrorCode.INVALID_TXN_STATE)

    def _end_transaction(self, commit: bool) -> None:
        self._check_transactional()
        if self._transaction is None:
            raise KafkaError("no transaction is open", ErrorCode.INVALID_TXN_STATE)
        try:
            if commit:
                self.flush()
            else:  # the open batches were never sent: nothing of them to abort
                for tp in list(self._open):
                    self._recycle(self._open.pop(tp).buffer)
                with self._cond:
                    while self._unacked and self._error is None:
                        self._cond.wait()
            if self._transaction:  # partitions added: the coordinator holds a transaction
                assert self.transactional_id is not None  # checked above
                self.cluster.end_transaction(self.transactional_id, self.producer_id,
                                             self.producer_epoch, commit)
        except KafkaError as exc:
            raise self._as_fencing(exc) from None
        self._transaction = None

    def _add_to_transaction(self, partitions: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for the partitions of the open transaction not yet in it."""
        if self._transaction is None:
            raise KafkaError("a transactional producer writes inside a transaction "
                             "(begin_transaction)", ErrorCode.INVALID_TXN_STATE)
        new = [tp for tp in partitions if tp not in self._transaction]
        if not new:
            return
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for topic, p in new:
            by_topic[topic].append(p)
        assert self.transactional_id is not None  # a transaction is open
        response = self.cluster.transaction_request(
            self.transactional_id, ADD_PARTITIONS_TO_TXN, 3,
            {"v3_and_below_transactional_id": self.transactional_id,
             "v3_and_below_producer_id": self.producer_id,
             "v3_and_below_producer_epoch": self.producer_epoch,
             "v3_and_below_topics": [{"name": t, "partitions": ps}
                                     for t, ps in by_topic.items()]},
            error_of=_add_partitions_error)
        code = _add_partitions_error(response)
        if code != ErrorCode.NONE:
            raise self._as_fencing(KafkaError(
                f"AddPartitionsToTxn refused: {ErrorCode(code).name}", ErrorCode(code)))
        self._transaction.update(new)

    def _as_fencing(self, error: KafkaError) -> KafkaError:
        """``error``; when it says this producer was fenced, as the ProducerFencedError
        that every later call raises."""
        if error.code in _FENCED:
            if not isinstance(error, ProducerFencedError):
                error = ProducerFencedError(str(error), error.code)
            self._fenced = error
        return error

    # -- encoding -------------------------------------------------------------------------

    def send_arrow(self, topic: str, values, keys=None, timestamps=None, headers=None,
                   partition: int | None = None) -> None:
        """Queue Arrow columns (values, optional keys/timestamps/headers) for ``topic``:
        appended to the open batches, sent as they fill and at ``flush()``.

        ``timestamps``: an int64 array of epoch milliseconds, or None for now. Rows with
        a null key, or all rows when ``keys`` is None, go to one partition chosen per call
        (sticky, rotating), as the Java client's default partitioner does per batch.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        if self._fenced is not None:
            raise self._fenced
        n = len(values)
        if n == 0:
            return
        meta = self.cluster.topic(topic)
        sticky = next(self._sticky) % meta.partitions
        key_column = None if keys is None else _binary_column(keys)
        if partition is not None or keys is None or keys.null_count == n:
            target = sticky if partition is None else partition
            row_order: memoryview | bytearray = np.arange(n, dtype=np.int32).data
            groups = [(target, 0, n)]
        else:
            assert key_column is not None  # keys is not None here
            validity = key_column[2] if len(key_column) > 2 else None
            if validity is not None and keys.offset % 8:
                keys = pc.take(keys, pa.array(range(n), pa.int32()))
                key_column = _binary_column(keys)
                validity = key_column[2] if len(key_column) > 2 else None
            row_order, starts = partition_rows(
                key_column[0], key_column[1],
                None if validity is None else memoryview(validity)[keys.offset // 8:],
                n, meta.partitions, sticky)
            groups = [(p, starts[p], starts[p + 1]) for p in range(meta.partitions)
                      if starts[p + 1] > starts[p]]
        if self.transactional_id is not None:
            self._add_to_transaction([(topic, p) for p, _, _ in groups])
        # Each partition's rows are appended straight from the whole Arrow columns,
        # reading the rows in row_order (the encoder's ``rows``): no pyarrow ``take`` to
        # gather them first (14% of the Spark writer's profile).
        columns = (_binary_column(values), key_column,
                   None if timestamps is None else _timestamps_buffer(timestamps),
                   None if headers is None else _headers_column(headers))
        rows = memoryview(row_order).cast("B")
        for p, start, end in groups:
            tp = (topic, p)
            while start < end:  # one iteration per batch filled, not per row
                builder = self._open.get(tp)
                if builder is None:
                    try:
                        buffer = self._pool.pop()
                    except IndexError:  # the builder starts small and grows
                        buffer = bytearray()
                    builder = self._open[tp] = BatchBuilder(buffer, self.batch_bytes)
                try:
                    start += builder.append(end - start, *columns,
                                            rows=rows[4 * start: 4 * end])
                except ValueError:  # a bad row: nothing of it was appended
                    if builder.count == 0:  # no open batch left behind that flush would fail on
                        del self._open[tp]
                        self._recycle(builder.buffer)
                    raise
                if start < end:  # full
                    self._finish(tp)
        if sum(b.size for b in self._open.values()) > self.max_open_bytes:
            self._finish_all()

    def _finish_all(self) -> None:
        for tp in list(self._open):
            self._finish(tp)

    def _finish(self, tp: tuple[str, int]) -> None:
        """Close the open batch of ``tp`` and hand it to the sender."""
        builder = self._open.pop(tp)
        count = builder.count
        sequence = self._sequences[tp] if self.producer_id >= 0 else -1
        data = builder.finish(producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                              base_sequence=sequence, compression=self.codec,
                              transactional=self.transactional_id is not None)
        if self.producer_id >= 0:
            self._sequences[tp] = (sequence + count) & 0x7FFFFFFF
        buffer: bytearray | None = builder.buffer
        if self.codec:  # compressed into new bytes: the buffer is free already
            self._recycle(buffer)
            buffer = None
        with self._cond:
            while self._unsent_bytes > self._max_unsent and self._error is None:
                self._cond.wait()
            self._raise_sender_error()
            self._incoming.append(PendingBatch(tp[0], tp[1], data, count, sequence,
                                               buffer=buffer))
            self._unsent_bytes += len(data)
            self._unacked += 1
            wake, self._wake_wanted = self._wake_wanted, False
        if wake:
            self._wake()
        self.stats.records += count
        self.stats.bytes += len(data)
        self.stats.batches += 1

    def _recycle(self, buffer: bytearray | None) -> None:
        """A batch buffer back to the pool (from either thread: deque appends are atomic)."""
        if buffer is not None and len(buffer) == self.batch_bytes and \
                len(self._pool) < _POOL_SIZE:
            self._pool.append(buffer)

    # -- sending --------------------------------------------------------------------------

    def flush(self) -> ProduceStats:
        """Send the open batches and wait until every batch is acknowledged."""
        self._finish_all()
        with self._cond:
            while self._unacked and self._error is None:
                self._cond.wait()
            self._raise_sender_error()
        return self.stats

    def _raise_sender_error(self) -> None:
        """Under _cond: raise what stopped the sender thread, in the caller's thread."""
        if isinstance(self._error, KafkaError):
            self._error = self._as_fencing(self._error)
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a full wake-up pipe wakes the sender as well; closed: it stopped

    # -- the sender thread ----------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._closing:
                        return
                    self._queue.extend(self._incoming)
                    self._incoming.clear()
                self._send_ready()
                self._wait_and_receive()
        except BaseException as exc:  # handed to the caller's thread
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _wait_and_receive(self) -> None:
        """Block until a response or a new batch arrives; read the responses ready.

        A broker silent for the connection's timeout with requests in flight is treated
        as a lost connection (its batches are resent), as a blocking receive timing out
        was before the sender had its own thread."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        fds = {}
        for broker_id, requests in list(self._in_flight.items()):
            if requests:
                fd = self.cluster.connection(broker_id).fileno()
                fds[fd] = broker_id
                poller.register(fd, select.POLLIN)
        timeout: float | None
        if fds:
            timeout = self.cluster.timeout * 1000
        else:  # batches left unsent with nothing in flight (a send failed): go again
            timeout = 0 if self._queue else None
        # With every broker at max_in_flight a response wakes us anyway.
        full = bool(fds) and all(len(self._in_flight.get(b, ())) >= self.max_in_flight
                                 for b in self.cluster.brokers)
        with self._cond:
            self._wake_wanted = not full
            if self._incoming and not full:
                timeout = 0  # handed over after this round's pick-up, before the flag
        ready = poller.poll(timeout)
        if not ready and fds and timeout:
            for broker_id in fds.values():
                self._connection_lost(broker_id, TimeoutError("no response in time"), [])
        for fd, _ in ready:
            if fd in fds:
                self._receive_one(fds[fd])
                continue
            try:
                while self._wake_r.recv(4096):
                    pass
            except BlockingIOError:
                pass

    def _send_ready(self) -> None:
        """Build one request per leader from the queue, one batch per partition each."""
        while self._queue:
            per_leader: dict[int, dict[tuple[str, int], PendingBatch]] = {}
            deferred: collections.deque[PendingBatch] = collections.deque()
            while self._queue:
                batch = self._queue.popleft()
                leader = self.cluster.topic(batch.topic).leaders[batch.partition]
                request = per_leader.setdefault(leader, {})
                tp = (batch.topic, batch.partition)
                if tp in request or len(self._in_flight[leader]) >= self.max_in_flight:
                    deferred.append(batch)  # Kafka takes one batch per partition a request
                else:
                    request[tp] = batch
            self._queue = deferred
            if not per_leader or not any(per_leader.values()):
                return
            for leader, batches in per_leader.items():
                if batches:
                    self._send_request(leader, list(batches.values()))
            if all(len(self._in_flight[b]) >= self.max_in_flight for b in per_leader):
                return

    def _send_request(self, broker_id: int, batches: list[PendingBatch]) -> None:
        by_topic: dict[str, list[PendingBatch]] = collections.defaultdict(list)
        for b in batches:
            by_topic[b.topic].append(b)
        with self._cond:  # a batch's first send attempt frees room for the caller
            self._unsent_bytes -= sum(len(b.data) for b in batches if not b.attempts)
            self._cond.notify_all()
        parts: list = [self._produce_txn_id, struct.pack(">hii", self.acks,
                                                         self.request_timeout_ms,
                                                         len(by_topic))]
        for topic, items in by_topic.items():
            name = topic.encode()
            parts.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(items)))
            for b in items:
                parts.append(struct.pack(">ii", b.partition, len(b.data)))
                parts.append(b.data)
        try:
            conn = self.cluster.connection(broker_id)
            conn.send_parts(PRODUCE, PRODUCE_VERSION, parts, expect_response=self.acks != 0)
        except OSError as exc:
            self._connection_lost(broker_id, exc, batches)
            return
        self.stats.requests += 1
        if self.acks == 0:
            with self._cond:
                self._unacked -= len(batches)
                self._cond.notify_all()
        else:
            self._in_flight[broker_id].append(batches)

    def _receive_one(self, broker_id: int) -> None:
        requests = self._in_flight[broker_id]
        batches = requests[0]
        try:
            _, response = self.cluster.connection(broker_id).receive()
        except OSError as exc:
            self._connection_lost(broker_id, exc, [])
            return
        requests.popleft()
        by_tp = {(b.topic, b.partition): b for b in batches}
        retry: list[PendingBatch] = []
        for topic in response["responses"]:
            for p in topic["partition_responses"]:
                tp = (topic["name"], p["index"])
                batch = by_tp.pop(tp)
                code = p["error_code"]
                if code == ErrorCode.NONE or code in _NO_SEQUENCE_ERRORS:
                    self.stats.last_offsets[tp] = p["base_offset"] + batch.records - 1
                    self._recycle(batch.buffer)
                    if batch.attempts and not any(b.topic == batch.topic and
                                                  b.partition == batch.partition
                                                  for b in self._queue):
                        self._retrying.discard(tp)
                elif ErrorCode(code).retriable or (
                        code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and tp in self._retrying):
                    retry.append(batch)
                else:
                    raise KafkaError(f"produce to {batch.topic}-{batch.partition} failed: "
                                     f"{ErrorCode(code).name} {p.get('error_message') or ''}",
                                     ErrorCode(code))
        if by_tp:
            raise KafkaError(f"no answer for {sorted(by_tp)}", ErrorCode.UNKNOWN_SERVER_ERROR)
        with self._cond:
            self._unacked -= len(batches) - len(retry)
            if not self._unacked:
                self._cond.notify_all()  # flush() waits for this
        if retry:
            self._retry(retry)

    def _connection_lost(self, broker_id: int, exc: OSError,
                         batches: list[PendingBatch]) -> None:
        """Re-queue every batch that was on the broken connection, in sequence order."""
        log.warning("connection to broker %d lost (%s); resending", broker_id, exc)
        self.cluster.drop_connection(broker_id)
        lost = list(batches)
        for request in self._in_flight.pop(broker_id, ()):
            lost.extend(request)
        # _retry puts the lost batches at the head of the queue, ahead of anything queued
        # later for the same partitions: sequences reach the broker in order.
        self._retry(lost)

    def _retry(self, batches: list[PendingBatch]) -> None:
        for b in batches:
            b.attempts += 1
            if b.attempts > self.retries:
                raise KafkaError(f"produce to {b.topic}-{b.partition} failed after "
                                 f"{self.retries} retries", ErrorCode.REQUEST_TIMED_OUT)
        self.stats.retries += len(batches)
        self._retrying.update((b.topic, b.partition) for b in batches)
        time.sleep(0.05)
        try:
            self.cluster.refresh(sorted({b.topic for b in batches}))
        except OSError:
            pass
        # Older sequences first so the broker sees each partition's batches in order.
        self._queue.extendleft(sorted(batches, key=lambda b: b.base_sequence, reverse=True))
