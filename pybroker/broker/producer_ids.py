"""Producer id allocation for InitProducerId, never reusing an id across restarts.

Ids are handed out from blocks (``producer.id.block.size``, as Kafka's ProducerIdManager
does): the end of the current block is made durable in ``producer-ids.json`` before any id
of the block is given out, so one fsync serves a whole block and a crash can only skip
ids, never repeat them. A transactional id's producer id and epoch are the transaction
coordinator's (``__transaction_state``): it takes a fresh id from here when it needs one.

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

    async def new_id_async(self) -> int:
        """``new_id``, first reserving a block from ``block_source`` (off the loop) when
        the current one is used up."""
        if self._block_source is not None and self._next >= self._block_end:
            if self._refill is None:
                self._refill = asyncio.Lock()
            async with self._refill:
                if self._next >= self._block_end:
                    start = await asyncio.to_thread(self._block_source, self._block_size)
                    self._next, self._block_end = start, start + self._block_size
        return self.new_id()

    def _persist(self) -> None:
        write_json(self._path, {"next_block": self._block_end})

    def new_id(self) -> int:
        if self._next >= self._block_end:
            if self._block_source is not None:
                raise RuntimeError("no producer id block: use new_id_async")
            self._block_end = self._next + self._block_size
            self._persist()
        pid = self._next
        self._next += 1
        return pid
