"""Validation of produced batches, the expensive ones off the event loop.

Every batch a producer sends is checked in full before it is appended (``validated``:
``records.validate_batch`` plus the produce-specific wording of its faults; to a
compacted topic, every record must have a key, checked in the same native walk, streaming
for compressed batches). What that
costs varies without bound: a small uncompressed batch is a few microseconds of CRC and
record walk, but a compressed one is whatever it inflates to (2 KB of zstd can inflate to
the 64 MiB cap) and a request may carry many large batches. So the produce handler asks
``cheap`` per batch:

- an uncompressed batch under ``INLINE_BATCH_BYTES`` (its check costs about what a thread
  hand-off does), or while the request's inline bytes stay within
  ``INLINE_REQUEST_BYTES`` (at most ~0.6 ms of CRC and walk), is validated inline: the
  one-record produce pays nothing, nor does a producer's usual request;
- anything else, compressed batches whatever their size among them, goes to the
  ``ValidationPool``: ``num.io.threads`` worker threads running the same ``validated``.
  The heavy parts (CRC, record walk, each codec step) release the GIL, so the loop serves
  other connections meanwhile and the work spreads over the cores.

The threads share the GIL with the event loop, so there are few of them (``num.io.threads``,
default 1): on 2 cores a second thread doubled the loop's lag under a bomb attack, and
more than the cores only add contention. They run at the loop's priority: a lower one
kept the loop's lag down under bombs, but when clients share the machine's CPUs (the
benchmarks) it starved validation and cut zstd produce throughput by half or more.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import queue
import threading
from collections.abc import Callable
from typing import Any

from pybroker._native.records import (
    HEADER_SIZE,
    MAX_DECOMPRESSED_SIZE,
    BatchInfo,
    read_batch_header,
    validate_batch,
)
from pybroker.errors import CorruptRecordError, KafkaError

# An uncompressed batch this small is checked inline whatever the request holds: ~10 us
# of CRC and record walk, about the cost of handing it to a thread and back.
INLINE_BATCH_BYTES = 64 * 1024
# Uncompressed bytes of one request checked inline: 0.2-0.6 ms of loop time (validation
# runs at 7-20 GB/s, 100-byte to 1 KiB records), so the usual request of a producer, a
# few ~1 MB batches, is checked as it was before the pool, without a hand-off each.
INLINE_REQUEST_BYTES = 4 * 1024 * 1024

_COMPRESSION_BYTE = 22  # low byte of the batch's attributes (i16 at 21)
_COMPRESSION_MASK = 0x07


def validated(records: Any, keyless_error: str | None = None) -> BatchInfo:
    """The ``BatchInfo`` of the one batch ``records`` must be, or the KafkaError to answer;
    ``keyless_error``: see ``validate_batch``. Thread-safe (no state)."""
    try:
        # checks batchLength == len(records) too
        return validate_batch(records, MAX_DECOMPRESSED_SIZE, keyless_error)
    except CorruptRecordError:
        # say which of the produce-specific faults it is (one header peek, failures only)
        if len(records) < HEADER_SIZE:
            raise CorruptRecordError(f"{len(records)} bytes are not a record batch") from None
        if read_batch_header(records).size != len(records):
            raise CorruptRecordError("Produce requests must have exactly one record batch "
                                     "per partition") from None
        raise


def keyless_error(topic: str, index: int) -> str:
    """What a record without a key is refused with, in Kafka's words, where the topic's
    ``cleanup.policy`` includes ``compact`` (``LogConfig.compacts``): a key is what
    compaction keeps the latest value of."""
    return f"Compacted topic cannot accept message without key in topic partition {topic}-{index}"


def cheap(records: Any, inline_bytes: int) -> bool:
    """Whether to validate ``records`` inline, ``inline_bytes`` having been validated
    inline for the same request already."""
    size = len(records)
    if size < HEADER_SIZE:
        return True  # refused at the first check
    if records[_COMPRESSION_BYTE] & _COMPRESSION_MASK:
        return False
    return size < INLINE_BATCH_BYTES or inline_bytes + size <= INLINE_REQUEST_BYTES


class ValidationPool:
    """``num.io.threads`` threads running ``validated`` for the event loop.

    ``submit`` takes one request's batches (``(records, keyless_error)`` pairs, the
    arguments of ``validated``) and returns an asyncio future per batch, of
    its ``BatchInfo`` or of the KafkaError to answer, returned rather than raised: a
    raised one would keep its traceback in the future, and through it the frames of the
    decompression (a piece of output each) and of the handler that awaits it, a cycle only
    the garbage collector frees (100 refused bombs in a request held ~100 MiB until then).
    The caller keeps the request frame alive until the futures are done: a thread reads
    the batches in place, and lets go of each before the loop hears back.

    A thread takes a request's batches one after the other, telling the loop of each as
    it is done, and moves the rest to the back of the queue when another request waits:
    a request of a hundred bombs is validated in turn with the next client's one batch,
    not ahead of it, and an uncontended request costs one hand-off, not one per batch
    (a hand-off is ~27 us of CPU; through ``concurrent.futures`` it was ~80 us, a quarter
    of the broker's CPU on zstd batches). Thread-safe.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        _one_malloc_arena()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for i in range(threads):
            threading.Thread(target=self._work, name=f"pybroker-validate-{i}",
                             daemon=True).start()

    def submit(self, batches: list[tuple[Any, str | None]]
               ) -> list[asyncio.Future[BatchInfo | KafkaError]]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in batches]
        if batches:
            self._jobs.put((loop, collections.deque(zip(futures, batches, strict=True))))
        return futures

    def close(self) -> None:
        """No new work; the threads end once what was submitted is done."""
        for _ in range(self.threads):
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, batches = job
            del job
            while batches:
                future, (records, keyless_error) = batches.popleft()
                if future.cancelled():  # its request is gone (read racily: at worst,
                    del records         # one batch validated for nobody)
                    continue
                settle: Callable[[asyncio.Future[Any], Any], None] = _set_result
                try:
                    outcome: Any = _validated_or_error(records, keyless_error)
                except BaseException as exc:  # a bug: raised where the handler awaits
                    outcome, settle = exc, _set_exception
                del records
                try:
                    loop.call_soon_threadsafe(settle, future, outcome)
                except RuntimeError:  # the loop is closed: the process is exiting
                    return
                del future, outcome
                if batches and not self._jobs.empty():
                    self._jobs.put((loop, batches))  # the others' turn
                    break
            del loop, batches


# glibc's mallopt parameter for the number of malloc arenas
_M_ARENA_MAX = -8


def _one_malloc_arena() -> None:
    """glibc gives a thread that allocates an arena of its own (up to 8 per core): the
    validation thread's pieces of output then live in a heap that glibc trims late and
    faults in afresh, which cost +70 MiB of peak memory and +25% CPU per GB on lz4 produce
    (MALLOC_ARENA_MAX=1 gave back both). One arena for the whole process: the loop and
    the threads seldom allocate at the same moment. Must run before the threads start."""
    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # not glibc: its malloc has no per-thread arenas
        pass


def _set_result(future: asyncio.Future[Any], outcome: Any) -> None:
    if not future.cancelled():
        future.set_result(outcome)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.cancelled():
        future.set_exception(exc)


def _validated_or_error(records: Any, keyless_error: str | None) -> BatchInfo | KafkaError:
    try:
        return validated(records, keyless_error)
    except KafkaError as exc:
        exc.__traceback__ = exc.__context__ = None
        return exc
