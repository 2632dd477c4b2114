"""Bootstrap, cluster metadata and one connection per broker.

Any broker is a bootstrap server: the client asks it for Metadata and then talks to each
partition's leader directly. Metadata is refreshed when a response says leadership moved.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from pybroker.client.connection import BrokerConnection
from pybroker.errors import ErrorCode, KafkaError

METADATA, INIT_PRODUCER_ID, LIST_OFFSETS = 3, 22, 2
METADATA_VERSION = 9


@dataclass
class TopicMetadata:
    name: str
    leaders: list[int]                  # leader broker id per partition (-1: none)
    leader_epochs: list[int] = field(default_factory=list)

    @property
    def partitions(self) -> int:
        return len(self.leaders)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    servers = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        servers.append((host.strip("[]") or "127.0.0.1", int(port)))
    return servers


class Cluster:
    """Metadata plus a connection per broker.

    Thread safety: control requests (metadata, producer ids) are serialized by a lock, so
    a bulk producer's caller (topic metadata) and its sender thread (refresh on retry)
    may both make them; each data connection belongs to one thread."""

    def __init__(self, bootstrap: str, client_id: str = "pybroker-client",
                 timeout: float = 30.0) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self._bootstrap = parse_bootstrap(bootstrap)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._any: BrokerConnection | None = None
        self._control_lock = threading.Lock()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        if self._any is not None:
            self._any.close()
        self._connections.clear()
        self._any = None

    def _control_request(self, api_key: int, api_version: int, body: dict,
                         attempts: int = 20) -> dict:
        """A request on the control connection, kept apart from the data connections so
        a metadata answer never queues behind pipelined produce or fetch requests.
        Reconnects (to any known broker or bootstrap server) when the connection broke."""
        with self._control_lock:
            return self._control_request_locked(api_key, api_version, body, attempts)

    def _control_request_locked(self, api_key: int, api_version: int, body: dict,
                                attempts: int) -> dict:
        last: Exception | None = None
        for attempt in range(attempts):
            if self._any is None:
                candidates = list(self.brokers.values()) + self._bootstrap
                for host, port in candidates:
                    try:
                        self._any = BrokerConnection(host, port, self.client_id, self.timeout)
                        break
                    except OSError as exc:
                        last = exc
                else:
                    time.sleep(min(0.05 * 2 ** attempt, 1.0))
                    continue
            try:
                return self._any.request(api_key, api_version, body)
            except OSError as exc:
                last = exc
                self._any.close()
                self._any = None
        raise ConnectionError(f"no broker reachable: {last}")

    def connection(self, broker_id: int) -> BrokerConnection:
        conn = self._connections.get(broker_id)
        if conn is None:
            if broker_id not in self.brokers:
                self.refresh()
            host, port = self.brokers[broker_id]
            conn = BrokerConnection(host, port, self.client_id, self.timeout)
            self._connections[broker_id] = conn
        return conn

    def drop_connection(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def refresh(self, topics: list[str] | None = None, auto_create: bool = True) -> None:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": auto_create,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        response = self._control_request(METADATA, METADATA_VERSION, body)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
        for t in response["topics"]:
            if t["error_code"] != ErrorCode.NONE:
                self.topics.pop(t["name"], None)
                continue
            parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
            self.topics[t["name"]] = TopicMetadata(
                t["name"], [p["leader_id"] for p in parts], [p["leader_epoch"] for p in parts])

    def topic(self, name: str, wait_s: float = 10.0) -> TopicMetadata:
        """Metadata of ``name``, creating it where the broker auto-creates topics."""
        deadline = time.monotonic() + wait_s
        while True:
            meta = self.topics.get(name)
            if meta is not None and meta.partitions and min(meta.leaders) >= 0:
                return meta
            if time.monotonic() > deadline:
                raise KafkaError(f"topic {name!r} has no leaders",
                                 ErrorCode.LEADER_NOT_AVAILABLE)
            self.refresh([name])
            if name not in self.topics or min(self.topics[name].leaders, default=-1) < 0:
                time.sleep(0.05)

    def init_producer_id(self) -> tuple[int, int]:
        response = self._control_request(
            INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaError("InitProducerId refused", response["error_code"])
        return response["producer_id"], response["producer_epoch"]

    def list_offsets(self, topic: str, timestamp: int) -> list[int]:
        """Per partition: the offset for ``timestamp`` (-1 latest, -2 earliest)."""
        meta = self.topic(topic)
        result = [0] * meta.partitions
        by_leader: dict[int, list[int]] = {}
        for p, leader in enumerate(meta.leaders):
            by_leader.setdefault(leader, []).append(p)
        for leader, parts in by_leader.items():
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{
                "name": topic,
                "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                "timestamp": timestamp} for p in parts]}]}
            response = self.connection(leader).request(LIST_OFFSETS, 5, body)
            for t in response["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] != ErrorCode.NONE:
                        raise KafkaError(f"ListOffsets {topic}-{p['partition_index']}",
                                         p["error_code"])
                    result[p["partition_index"]] = p["offset"]
        return result
