"""The broker's side of replication: applies the controller's requests to its partitions.

The controller speaks to each broker over the control channel (pybroker/cluster/channel.py)
with Kafka's own requests; :meth:`ReplicaManager.handle` serves them:

- LeaderAndIsr: for each partition this broker is a replica of, newer than what it has
  (leader epoch), become its leader (the fetcher lets go of it first) or a follower of
  the named leader (appends in progress finish, then the fetcher takes it, truncating by
  leader epoch before fetching). The partition's log is created if this broker has none.
- UpdateMetadata: the MetadataCache (what Metadata and FindCoordinator answer); the topics
  it deletes go to the deletion listeners (the group coordinator drops their offsets).
- StopReplica: stop fetching; with delete_partition, delete the partition's local log
  (a topic deleted, a replica moved away by a reassignment); the topic itself goes when
  UpdateMetadata says it is deleted.

A failed log directory (``log_dir_failed``): its partitions stop being fetched or led here
and the controller is told with Kafka's log dir event notification; LeaderAndIsr answers
KAFKA_STORAGE_ERROR for each of them from then on (until a restart), which is how the
controller learns which replicas are offline.

A request whose controller epoch is below the highest seen is refused with
STALE_CONTROLLER_EPOCH, and one for another registration of this broker (a broker epoch
that is not ours) with STALE_BROKER_EPOCH: a zombie controller cannot move leaders.

As leader the broker changes the ISR itself (``Partition.isr_listener``): the write to
ZooKeeper is conditional on the partition state's version, so a leader the controller
has replaced fails to write, keeps its old ISR (and so its high watermark cannot pass
what that ISR has), and waits for the controller. Every written change is announced with
an ISR change notification, which the controller turns into UpdateMetadata for all.
Followers lagging more than replica.lag.time.max.ms are checked for every half of it,
until this broker begins to shut down (:meth:`ReplicaManager.begin_shutdown`): then its
followers stop fetching because it stops, which says nothing of them, and an ISR shrunk to
this broker would go offline with it.

Not thread-safe: runs on the event loop; ZooKeeper calls go to a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from pybroker.broker.partition import Partition
from pybroker.cluster.metadata_cache import MetadataCache
from pybroker.errors import ErrorCode, KafkaStorageError
from pybroker.net.protocol import codec
from pybroker.net.protocol.typed import (
    LeaderAndIsrRequest,
    LeaderAndIsrRequestPartitionState,
    LeaderAndIsrResponse,
    LeaderAndIsrResponsePartitionError,
    LeaderAndIsrResponseTopicError,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaResponsePartitionError,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.cluster.zk_store import ClusterStore
    from pybroker.repl.fetcher import ReplicaFetcherManager

log = logging.getLogger("pybroker.replicas")

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
NO_BROKER_EPOCH = -1

LeadershipListener = Callable[[Partition, bool], None]


class ReplicaManager:
    def __init__(self, broker: Broker, store: ClusterStore, fetchers: ReplicaFetcherManager,
                 cache: MetadataCache) -> None:
        self.broker = broker
        self.cache = cache  # the cluster's metadata, which UpdateMetadata replaces
        self.broker_id: int = broker.broker_id
        self.store = store
        self.fetchers = fetchers
        self.config = broker.config
        self.broker_epoch = NO_BROKER_EPOCH  # this registration's (set by the broker)
        self.controller_epoch = 0  # the highest seen
        self._listeners: list[LeadershipListener] = []
        self._deletion_listeners: list[Callable[[list[str]], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_writes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # controller requests apply one at a time, in order
        self._shutting_down = False

    def start(self) -> None:
        lag_ms = self.config["replica.lag.time.max.ms"]
        self._tasks = [
            asyncio.create_task(self._every(lag_ms / 2, self._shrink_isrs)),
            asyncio.create_task(self._every(
                self.config["replica.high.watermark.checkpoint.interval.ms"],
                self.broker.logs.checkpoint_soon)),
        ]

    def begin_shutdown(self) -> None:
        """No ISR shrinks from now on (the module docstring says why)."""
        self._shutting_down = True

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in list(self._isr_writes):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._isr_writes, return_exceptions=True)
        self._tasks = []

    async def _every(self, interval_ms: float, fn: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def add_leadership_listener(self, fn: LeadershipListener) -> None:
        self._listeners.append(fn)

    def add_deletion_listener(self, fn: Callable[[list[str]], None]) -> None:
        """``fn(names)`` with the topics each UpdateMetadata deletes, on every broker
        (Kafka's ``onPartitionsDeleted``: the group coordinator drops their offsets)."""
        self._deletion_listeners.append(fn)

    def _tell(self, partition: Partition, leader: bool) -> None:
        for fn in self._listeners:
            try:
                fn(partition, leader)
            except Exception:
                log.exception("leadership listener failed for %s", partition)

    # the control channel -------------------------------------------------------------

    async def handle(self, api_key: int, api_version: int, body: dict) -> dict:
        """Serve one decoded control request (the channel's handler); the API key says
        which message ``body`` is."""
        async with self._lock:
            stale = self._stale(body)
            if api_key == LEADER_AND_ISR:
                return dict(await self._leader_and_isr(cast(LeaderAndIsrRequest, body), stale))
            if api_key == UPDATE_METADATA:
                if not stale:
                    self._update_metadata(cast(UpdateMetadataRequest, body))
                updated: UpdateMetadataResponse = {"error_code": stale}
                return dict(updated)
            if api_key == STOP_REPLICA:
                return dict(await self._stop_replica(cast(StopReplicaRequest, body), stale))
        log.warning("control request with api key %d ignored", api_key)
        answer = codec.response_defaults(api_key, api_version)
        answer["error_code"] = ErrorCode.INVALID_REQUEST
        return answer

    def _stale(self, body: dict) -> int:
        epoch = body["controller_epoch"]
        if epoch < self.controller_epoch:
            log.warning("refusing a request of controller %d with stale epoch %d (current %d)",
                        body["controller_id"], epoch, self.controller_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        # Older than this registration: meant for a previous life of this broker. Newer:
        # the registration is being written (the controller saw it before we returned).
        broker_epoch = body.get("broker_epoch", NO_BROKER_EPOCH)
        if NO_BROKER_EPOCH < broker_epoch < self.broker_epoch:
            log.warning("refusing a request of controller %d for broker epoch %d (ours %d)",
                        body["controller_id"], broker_epoch, self.broker_epoch)
            return ErrorCode.STALE_BROKER_EPOCH
        self.controller_epoch = epoch
        return ErrorCode.NONE

    def _update_metadata(self, body: UpdateMetadataRequest) -> None:
        deleted = self.cache.update(body)
        for name in deleted:
            if self.broker.topics.get(name) is not None:
                self._delete_local(name)
        for fn in self._deletion_listeners if deleted else ():
            try:
                fn(deleted)
            except Exception:
                log.exception("deletion listener failed for %s", deleted)

    async def _leader_and_isr(self, body: LeaderAndIsrRequest,
                              stale: int) -> LeaderAndIsrResponse:
        topics_out: list[LeaderAndIsrResponseTopicError] = []
        endpoints = {b["broker_id"]: (b["host_name"], b["port"]) for b in body["live_leaders"]}
        for t in body.get("topic_states", []):
            errors: list[LeaderAndIsrResponsePartitionError] = []
            configs: dict[str, str] = {}
            read_configs = False
            for p in t["partition_states"]:
                code = stale
                if not code and self.broker_id in p["replicas"]:
                    try:
                        if not read_configs:
                            read_configs = True
                            configs = dict(await asyncio.to_thread(self.store.topic_configs,
                                                                   t["topic_name"]))
                        code = await self._apply(t["topic_name"], t["topic_id"], p, configs,
                                                 endpoints)
                    except Exception:
                        log.exception("applying LeaderAndIsr to %s-%d", t["topic_name"],
                                      p["partition_index"])
                        code = ErrorCode.UNKNOWN_SERVER_ERROR
                errors.append({"partition_index": p["partition_index"], "error_code": code})
            topics_out.append({"topic_id": t["topic_id"], "partition_errors": errors})
        return {"error_code": stale, "topics": topics_out}

    async def _apply(self, topic: str, topic_id: uuid.UUID, state: LeaderAndIsrRequestPartitionState,
                     configs: dict[str, str],
                     endpoints: dict[int, tuple[str, int]]) -> int:
        index = state["partition_index"]
        try:
            partition = self.broker.topics.ensure_replica(topic, topic_id, index, configs,
                                                          state["is_new"])
        except KafkaStorageError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if partition.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        epoch = state["leader_epoch"]
        known = partition.leader_id >= 0 or partition.is_leader
        if known and epoch < partition.leader_epoch:
            log.info("%s: ignoring leader epoch %d, already at %d", partition, epoch,
                     partition.leader_epoch)
            return ErrorCode.FENCED_LEADER_EPOCH
        if known and epoch == partition.leader_epoch and state["leader"] == partition.leader_id:
            # the same epoch again (a controller's full resync): only the ISR may be newer
            partition.isr = list(state["isr"])
            partition.zk_version = state["partition_epoch"]
            return ErrorCode.NONE
        leader = state["leader"]
        partition.isr_listener = self._write_isr
        if leader == self.broker_id:
            await self.fetchers.remove([partition])
            # A leader given a new epoch (a follower died) may have an append of the old
            # one being written: the new epoch starts after it, in the cache as in the log.
            await partition.appends_done()
            partition.become_leader(epoch, state["replicas"], state["isr"],
                                    state["partition_epoch"])
            log.info("%s: leader at epoch %d, ISR %s", partition, epoch, state["isr"])
            self._tell(partition, True)
        else:
            partition.become_follower(leader, epoch, state["replicas"], state["isr"],
                                      state["partition_epoch"])
            await partition.appends_done()
            endpoint = endpoints.get(leader)
            if endpoint is None:
                await self.fetchers.remove([partition])
                log.info("%s: follower at epoch %d, leader %d not live", partition, epoch,
                         leader)
            else:
                await self.fetchers.add(_LeaderEndpoint(leader, *endpoint), [partition])
                log.info("%s: follower of %d at epoch %d", partition, leader, epoch)
            self._tell(partition, False)
        return ErrorCode.NONE

    async def _stop_replica(self, body: StopReplicaRequest, stale: int) -> StopReplicaResponse:
        out: list[StopReplicaResponsePartitionError] = []
        for t in body.get("topic_states", []):
            name = t["topic_name"]
            for p in t["partition_states"]:
                code = stale
                topic = self.broker.topics.get(name)
                index = p["partition_index"]
                if not code and topic is not None and index < len(topic.partitions):
                    partition = topic.partitions[index]
                    await self.fetchers.remove([partition])
                    self._stop_leading(partition)
                    if p["delete_partition"]:
                        await partition.appends_done()
                        self.broker.topics.drop_replica(name, index)
                out.append({"topic_name": name, "partition_index": index, "error_code": code})
        return {"error_code": stale, "partition_errors": out}

    async def log_dir_failed(self, partitions: list[Partition]) -> None:
        """``partitions`` went offline with their log directory: no more fetching or
        leading them here, and the controller hears of it."""
        await self.fetchers.remove(partitions)
        for partition in partitions:
            self._stop_leading(partition)
        await asyncio.to_thread(self.store.notify_log_dir_failure, self.broker_id)

    def _stop_leading(self, partition: Partition) -> None:
        """A partition neither led nor followed here any more: if this broker led it, it
        leads no more (no leader known) and the partition's listeners hear of it."""
        if partition.is_leader:
            partition.become_follower(-1, partition.leader_epoch, [], [], 0)
            self._tell(partition, False)

    def _delete_local(self, name: str) -> None:
        try:
            self.broker.topics.delete(name)
        except Exception as exc:  # already gone
            log.info("deleting local topic %s: %s", name, exc)

    # ISR changes by the leader -------------------------------------------------------

    def _write_isr(self, partition: Partition, isr: list[int]) -> None:
        task = asyncio.create_task(self._isr_write(partition, isr))
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _isr_write(self, partition: Partition, isr: list[int]) -> None:
        epoch = partition.leader_epoch
        try:
            written = await asyncio.to_thread(
                self.store.set_partition_state, partition.topic, partition.index,
                self.broker_id, epoch, isr, self.controller_epoch, partition.zk_version,
                None)
        except Exception as exc:
            log.warning("%s: ISR change %s -> %s not written (%s: %s); waiting for the "
                        "controller", partition, partition.isr, isr, type(exc).__name__, exc)
            partition.isr_changed(None, partition.zk_version)
            return
        if partition.leader_epoch != epoch or not partition.is_leader:
            return  # the controller moved on while we wrote
        log.info("%s: ISR %s -> %s", partition, partition.isr, isr)
        partition.isr_changed(isr, written.zk_version)
        try:
            await asyncio.to_thread(self.store.notify_isr_change,
                                    [(partition.topic, partition.index)])
        except Exception as exc:
            log.warning("ISR change notification for %s failed: %s", partition, exc)

    def _shrink_isrs(self) -> None:
        if self._shutting_down:
            return
        lag_ms = self.config["replica.lag.time.max.ms"]
        for partition in self.broker.topics.partitions():
            if partition.is_leader and len(partition.isr) > 1 and not partition.offline:
                partition.shrink_isr(lag_ms)

    # queries -------------------------------------------------------------------------

    def leaders(self) -> list[Partition]:
        return [p for p in self.broker.topics.partitions() if p.is_leader]


class _LeaderEndpoint:
    """The fields of ``BrokerInfo`` the fetcher uses (LeaderAndIsr gives host and port)."""

    __slots__ = ("broker_id", "host", "port")

    def __init__(self, broker_id: int, host: str, port: int) -> None:
        self.broker_id, self.host, self.port = broker_id, host, port

    def __repr__(self) -> str:
        return f"broker {self.broker_id} at {self.host}:{self.port}"
