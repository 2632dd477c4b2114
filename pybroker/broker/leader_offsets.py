"""The high watermarks of partitions this broker holds no replica of, as their leaders
last answered: what the consumer lag of a group coordinated here needs for a partition
led by another broker (the metrics, ``metrics.py``).

Asking never waits for the network: :meth:`LeaderHighWatermarks.known` answers from the
cache, and when the cache is older than ``REFRESH_S`` it starts one refresh in the
background for the partitions asked about. A refresh sends one ListOffsets (latest,
read uncommitted: the high watermark, as a consumer sees it) to each leader of those
partitions, all leaders at once, over connections of its own (``Peers``: one per leader,
kept open; not the transaction marker writer's, so a commit's markers never wait behind
a metrics question). Only scrapes ask, so a broker nobody scrapes sends nothing and
opens nothing; one that is scraped sends at most one ListOffsets per leader every
``REFRESH_S``, each naming the groups' partitions that leader leads. An
answer is at most ``REFRESH_S`` plus a scrape interval old; a partition whose leader did
not answer (down, moved, error) is left out until one does.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pybroker.errors import ErrorCode, KafkaError
from pybroker.metadata import Endpoint
from pybroker.repl.peer import Peers
from pybroker.txn.state import TopicPartition, partitions_by_topic

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker

log = logging.getLogger("pybroker.metrics")

REFRESH_S = 5.0
REQUEST_TIMEOUT_S = 5.0
LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 1  # v1: one offset per partition, no epochs
LATEST = -1


class LeaderHighWatermarks:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._peers = Peers(f"pybroker-broker-{broker.broker_id}-lag")
        self._known: dict[TopicPartition, int] = {}
        self._refreshed = -REFRESH_S  # monotonic time of the last refresh's start
        self._refresh: asyncio.Task[None] | None = None

    def known(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The last high watermark each leader answered for these partitions (those not
        known yet are left out); refreshes them in the background when it is time."""
        wanted = set(partitions)
        now = time.monotonic()
        if wanted and self._refresh is None and now - self._refreshed >= REFRESH_S:
            self._refreshed = now
            self._refresh = asyncio.get_running_loop().create_task(self._ask(wanted))
            self._refresh.add_done_callback(self._refresh_done)
        return {tp: self._known[tp] for tp in wanted if tp in self._known}

    def _refresh_done(self, task: asyncio.Task[None]) -> None:
        self._refresh = None
        if not task.cancelled() and task.exception() is not None:
            log.error("refreshing leaders' high watermarks failed",
                      exc_info=task.exception())

    async def _ask(self, wanted: set[TopicPartition]) -> None:
        metadata = self._broker.metadata
        by_leader: dict[Endpoint, list[TopicPartition]] = {}
        for tp in wanted:
            leader = metadata.leader_of(*tp)
            if leader is not None and leader.broker_id != self._broker.broker_id:
                by_leader.setdefault(leader, []).append(tp)
        known: dict[TopicPartition, int] = {}
        for answered in await asyncio.gather(*(self._ask_leader(leader, tps)
                                               for leader, tps in by_leader.items())):
            known.update(answered)
        self._known = known

    async def _ask_leader(self, leader: Endpoint, partitions: list[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        body = {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": index, "timestamp": LATEST}
                                           for index in indexes]}
            for topic, indexes in partitions_by_topic(partitions).items()]}
        try:
            response, _ = await self._peers.client(*leader).request(
                LIST_OFFSETS, LIST_OFFSETS_VERSION, body, REQUEST_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, KafkaError) as exc:
            log.info("ListOffsets to broker %d for the group lag failed: %s",
                     leader.broker_id, exc)
            return {}
        return {(t["name"], p["partition_index"]): p["offset"]
                for t in response["topics"] for p in t["partitions"]
                if p["error_code"] == ErrorCode.NONE}

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)
        self._peers.close()
