"""Producer id allocation for InitProducerId, never reusing an id across restarts.

Ids are handed out from blocks (``producer.id.block.size``, as Kafka's ProducerIdManager
does): the end of the current block is made durable in ``producer-ids.json`` before any id
of the block is given out, so one fsync serves a whole block and a crash can only skip
ids, never repeat them. Transactional ids keep their producer id and get the next epoch on
each InitProducerId (their map is written on every change; it is small and rare).

Cluster mode: the brokers share one id space, so blocks come from ZooKeeper
(``block_source``, Kafka's ``/latest_producer_id_block``): two brokers never hand out the
same id, which would make one producer's batches look like another's retries.

Not thread-safe: used from the event loop thread only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from pybroker.broker.files import read_json, write_json

FILE_NAME = "producer-ids.json"
MAX_EPOCH = 32767 - 1  # Kafka bumps to a new id rather than reaching Short.MAX_VALUE


class ProducerIdManager:
    def __init__(self, data_dir: str, block_size: int = 1000,
                 block_source: Callable[[int], int] | None = None) -> None:
        """``block_source(size)``: the first id of a new block of ``size`` ids reserved for
        this broker (blocking; cluster mode), instead of the local file's."""
        self._path = os.path.join(data_dir, FILE_NAME)
        self._block_size = max(1, block_size)
        self._block_source = block_source
        self._refill: asyncio.Lock | None = None
        state = read_json(self._path, {}) or {}
        self._next = int(state.get("next_block", 0))
        self._block_end = self._next  # nothing of the stored block may be reused
        self._transactional: dict[str, list[int]] = dict(state.get("transactional", {}))

    async def init_producer_async(self, transactional_id: str | None) -> tuple[int, int]:
        """``init_producer``, first reserving a block from ``block_source`` (off the loop)
        when the current one is used up."""
        if self._block_source is not None and self._next >= self._block_end:
            if self._refill is None:
                self._refill = asyncio.Lock()
            async with self._refill:
                if self._next >= self._block_end:
                    start = await asyncio.to_thread(self._block_source, self._block_size)
                    self._next, self._block_end = start, start + self._block_size
        return self.init_producer(transactional_id)

    def _persist(self) -> None:
        write_json(self._path, {"next_block": self._block_end,
                                "transactional": self._transactional})

    def new_id(self) -> int:
        if self._next >= self._block_end:
            if self._block_source is not None:
                raise RuntimeError("no producer id block: use init_producer_async")
            self._block_end = self._next + self._block_size
            self._persist()
        pid = self._next
        self._next += 1
        return pid

    def init_producer(self, transactional_id: str | None) -> tuple[int, int]:
        """(producer id, epoch) for an InitProducerId request."""
        if not transactional_id:
            return self.new_id(), 0
        current = self._transactional.get(transactional_id)
        if current is None or current[1] >= MAX_EPOCH:
            pid, epoch = self.new_id(), 0
        else:
            pid, epoch = current[0], current[1] + 1
        self._transactional[transactional_id] = [pid, epoch]
        self._persist()
        return pid, epoch
