"""What this broker knows of the cluster, for Metadata and FindCoordinator
(``pybroker.metadata.zk_cluster`` answers from it).

The controller's UpdateMetadata requests (v7) are the only writer; each replaces what it
names (live brokers as a whole, partition states one by one; a topic whose partitions all
come with leader -2 is deleted, Kafka's marker).

Not thread-safe: used from the event loop thread only.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from pybroker.metadata.interface import Endpoint
from pybroker.net.protocol.typed import UpdateMetadataRequest

DELETED_LEADER = -2  # UpdateMetadata's mark of a partition of a deleted topic (Kafka's)


class PartitionInfo(NamedTuple):
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


class TopicInfo(NamedTuple):
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]


class MetadataCache:
    def __init__(self, broker_id: int, inter_broker_listener: str = "PLAINTEXT") -> None:
        self.broker_id = broker_id
        self.inter_broker_listener = inter_broker_listener
        self.controller_id = -1
        # live brokers on the inter-broker listener, and every listener's address
        self.brokers: dict[int, Endpoint] = {}
        self.listeners: dict[int, dict[str, tuple[str, int]]] = {}
        self.racks: dict[int, str | None] = {}  # live broker -> its broker.rack
        self.topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self.updates = 0  # UpdateMetadata requests applied

    def update(self, body: UpdateMetadataRequest) -> list[str]:
        """Apply an UpdateMetadata (v7) body; returns the topics deleted by it."""
        self.controller_id = body["controller_id"]
        brokers = {}
        listeners = {}
        for b in body["live_brokers"]:
            if b["endpoints"]:
                addresses = {e["listener"]: (e["host"], e["port"]) for e in b["endpoints"]}
                inter_broker = addresses.get(self.inter_broker_listener)
                first = b["endpoints"][0]
                brokers[b["id"]] = Endpoint(b["id"], *(inter_broker or (first["host"],
                                                                        first["port"])))
                listeners[b["id"]] = addresses
        self.brokers = brokers
        self.listeners = listeners
        self.racks = {b["id"]: b["rack"] for b in body["live_brokers"] if b["endpoints"]}
        deleted = []
        for t in body["topic_states"]:
            name = t["topic_name"]
            states = t["partition_states"]
            if states and all(p["leader"] == DELETED_LEADER for p in states):
                self._drop(name)
                deleted.append(name)
                continue
            known = self.topics.get(name)
            if known is None or known.topic_id != t["topic_id"]:
                if known is not None:
                    self._drop(name)
                known = TopicInfo(name, t["topic_id"], {})
                self.topics[name] = known
                self._by_id[known.topic_id] = name
            for p in states:
                known.partitions[p["partition_index"]] = PartitionInfo(
                    p["leader"], p["leader_epoch"], list(p["replicas"]), list(p["isr"]),
                    list(p["offline_replicas"]))
        self.updates += 1
        return deleted

    def _drop(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)

    # questions -------------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._by_id.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        known = self.topics.get(topic)
        return known.partitions.get(partition) if known is not None else None

    def leader_of(self, topic: str, partition: int) -> Endpoint | None:
        info = self.partition(topic, partition)
        if info is None:
            return None
        return self.brokers.get(info.leader)

    def broker(self, broker_id: int) -> Endpoint | None:
        """The live broker ``broker_id``, None if it is not one."""
        return self.brokers.get(broker_id)

    def live_brokers(self) -> list[Endpoint]:
        return sorted(self.brokers.values())

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        address = self.listeners.get(broker_id, {}).get(listener)
        return None if address is None else Endpoint(broker_id, *address)

    def rack(self, broker_id: int) -> str | None:
        return self.racks.get(broker_id)

    def has_leaders(self, topic: str, partitions: int) -> bool:
        """Whether every one of the topic's first ``partitions`` partitions has a live leader."""
        known = self.topics.get(topic)
        if known is None:
            return False
        for index in range(partitions):
            info = known.partitions.get(index)
            if info is None or info.leader not in self.brokers:
                return False
        return True
