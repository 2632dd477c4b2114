"""Bootstrap, cluster metadata and one connection per broker.

Any broker is a bootstrap server: the client asks it for Metadata and then talks to each
partition's leader directly. Metadata is refreshed when a response says leadership moved.

Transactions go to the transaction coordinator of their transactional id (FindCoordinator
key type 1), on a connection of their own per coordinator: the data connections belong to
a producer's sender thread. A coordinator that moved (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE) is looked up again, and a busy one (COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS: the markers of the previous transaction are still being written)
asked again after a backoff, as Kafka's producer does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.client.connection import BrokerConnection
from pybroker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from pybroker.client.security import ClientSecurity

METADATA, INIT_PRODUCER_ID, LIST_OFFSETS = 3, 22, 2
METADATA_VERSION = 9
FIND_COORDINATOR, END_TXN, DESCRIBE_TRANSACTIONS = 10, 26, 65
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # isolation levels
# Kafka's producer default (transaction.timeout.ms).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60000
# A coordinator moved or not ready: look it up again; still writing the previous
# transaction's markers: ask again. Both after a backoff.
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_COORDINATOR_BUSY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.CONCURRENT_TRANSACTIONS})
# A transaction whose outcome is decided but whose markers are still being written.
_MARKERS_PENDING = frozenset({"PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


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
    may both make them, and so are transaction coordinator requests; each data
    connection belongs to one thread."""

    def __init__(self, bootstrap: str, client_id: str = "pybroker-client",
                 timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # of every connection (None: PLAINTEXT listeners)
        self._bootstrap = parse_bootstrap(bootstrap)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._any: BrokerConnection | None = None
        self._control_lock = threading.Lock()
        # Transaction coordinators: broker id per transactional id, a connection each,
        # under their own lock (taken before the control lock, never after).
        self._coordinator_lock = threading.Lock()
        self._coordinator_of: dict[str, int] = {}
        self._coordinator_connections: dict[int, BrokerConnection] = {}

    def _open(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, self.client_id, self.timeout, self.security)

    def close(self) -> None:
        for conn in [*self._connections.values(), *self._coordinator_connections.values()]:
            conn.close()
        if self._any is not None:
            self._any.close()
        self._connections.clear()
        self._coordinator_connections.clear()
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
                        self._any = self._open(host, port)
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
        raise ConnectionError(f"no broker reachable: {last}") from last

    def request(self, api_key: int, api_version: int, body: dict) -> dict:
        """A request any broker may answer (Metadata, topic configs), on the control
        connection."""
        return self._control_request(api_key, api_version, body)

    def connection(self, broker_id: int) -> BrokerConnection:
        conn = self._connections.get(broker_id)
        if conn is None:
            if broker_id not in self.brokers:
                self.refresh()
            host, port = self.brokers[broker_id]
            conn = self._open(host, port)
            self._connections[broker_id] = conn
        return conn

    def drop_connection(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def refresh(self, topics: list[str] | None = None, auto_create: bool = True,
                attempts: int = 20) -> None:
        """Metadata of ``topics`` (None: every topic); each of ``attempts`` tries every
        known broker and bootstrap server."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": auto_create,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        response = self._control_request(METADATA, METADATA_VERSION, body, attempts)
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

    def init_producer_id(self, transactional_id: str | None = None,
                         transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
                         ) -> tuple[int, int]:
        """(producer id, epoch): a fresh one for an idempotent producer; for a
        transactional id, its id with the epoch bumped, which fences the id's earlier
        producers and aborts a transaction of theirs left open."""
        body = {"transactional_id": transactional_id,
                "transaction_timeout_ms": transaction_timeout_ms}
        if transactional_id is None:
            response = self._control_request(INIT_PRODUCER_ID, 1, body)
        else:
            response = self.transaction_request(transactional_id, INIT_PRODUCER_ID, 1, body)
        code = response["error_code"]
        if code != ErrorCode.NONE:
            raise KafkaError(f"InitProducerId refused: {ErrorCode(code).name}", code)
        return response["producer_id"], response["producer_epoch"]

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool) -> None:
        """EndTxn: commit or abort the open transaction of ``transactional_id``. Any
        client holding the id, producer id and epoch may end it (Spark's driver ends the
        transactions its tasks wrote in)."""
        response = self.transaction_request(
            transactional_id, END_TXN, 3,
            {"transactional_id": transactional_id, "producer_id": producer_id,
             "producer_epoch": producer_epoch, "committed": commit})
        code = response["error_code"]
        if code != ErrorCode.NONE:
            raise KafkaError(f"EndTxn({'commit' if commit else 'abort'}) of "
                             f"{transactional_id!r} refused: {ErrorCode(code).name}", code)

    def describe_transaction(self, transactional_id: str) -> dict:
        """The coordinator's DescribeTransactions entry for the id (its ``error_code``,
        ``transaction_state``, ``producer_id``, ``producer_epoch``, ``topics``, ...)."""
        response = self.transaction_request(
            transactional_id, DESCRIBE_TRANSACTIONS, 0,
            {"transactional_ids": [transactional_id]},
            error_of=lambda r: r["transaction_states"][0]["error_code"])
        return response["transaction_states"][0]

    def wait_for_markers(self, transactional_id: str, timeout_s: float = 60.0) -> None:
        """Wait until the coordinator wrote the markers of the id's ended transaction.

        EndTxn is answered once the outcome is decided; the markers follow, so a
        read_committed reader may not see a committed transaction yet. Once the state
        leaves PrepareCommit/PrepareAbort every partition has its marker, and every
        read_committed read started after sees the outcome."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.describe_transaction(transactional_id)
            if state["error_code"] != ErrorCode.NONE:
                raise KafkaError(f"DescribeTransactions({transactional_id!r}): "
                                 f"{ErrorCode(state['error_code']).name}", state["error_code"])
            if state["transaction_state"] not in _MARKERS_PENDING:
                return
            if time.monotonic() > deadline:
                raise KafkaError(f"the markers of {transactional_id!r} are not written",
                                 ErrorCode.REQUEST_TIMED_OUT)
            time.sleep(0.02)

    def find_coordinator(self, key: str, key_type: int) -> int:
        """The broker id of the coordinator of ``key`` (a group id or a transactional id)."""
        for attempt in range(20):
            response = self._control_request(FIND_COORDINATOR, 3,
                                             {"key": key, "key_type": key_type})
            code = response["error_code"]
            if code == ErrorCode.NONE:
                node = response["node_id"]
                self.brokers.setdefault(node, (response["host"], response["port"]))
                return node
            if not ErrorCode(code).retriable:
                raise KafkaError(f"FindCoordinator({key!r}) refused", code)
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise KafkaError(f"no coordinator for {key!r}", ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def transaction_request(self, transactional_id: str, api_key: int, api_version: int,
                            body: dict, error_of: Callable[[dict], int] | None = None,
                            attempts: int = 50) -> dict:
        """A request to the transaction coordinator of ``transactional_id``, asked again
        (after a backoff, the coordinator looked up again where it moved) while it
        answers a coordinator or concurrency error; ``error_of`` reads that error from the
        response (default: its top-level ``error_code``). The last response is returned,
        whatever its error, for the caller to map."""
        error_of = error_of or (lambda r: r["error_code"])
        response: dict | None = None
        with self._coordinator_lock:
            for attempt in range(attempts):
                if attempt:
                    time.sleep(min(0.02 * 2 ** attempt, 0.5))
                node = self._coordinator_of.get(transactional_id)
                if node is None:
                    node = self._coordinator_of[transactional_id] = \
                        self.find_coordinator(transactional_id, TRANSACTION_KEY)
                try:
                    conn = self._coordinator_connections.get(node)
                    if conn is None:
                        host, port = self.brokers[node]
                        conn = self._open(host, port)
                        self._coordinator_connections[node] = conn
                    response = conn.request(api_key, api_version, body)
                except OSError:
                    self._forget_coordinator(transactional_id, node)
                    continue
                code = error_of(response)
                if code in _COORDINATOR_MOVED:
                    self._forget_coordinator(transactional_id, node)
                elif code not in _COORDINATOR_BUSY:
                    return response
        if response is None:
            raise ConnectionError(f"transaction coordinator of {transactional_id!r} "
                                  "unreachable")
        return response

    def _forget_coordinator(self, transactional_id: str, node: int) -> None:
        self._coordinator_of.pop(transactional_id, None)
        conn = self._coordinator_connections.pop(node, None)
        if conn is not None:
            conn.close()

    def list_offsets(self, topic: str, timestamp: int,
                     isolation_level: int = READ_UNCOMMITTED) -> list[int]:
        """Per partition: the offset for ``timestamp`` (-1 latest, -2 earliest); latest
        is the last stable offset for READ_COMMITTED."""
        meta = self.topic(topic)
        result = [0] * meta.partitions
        by_leader: dict[int, list[int]] = {}
        for p, leader in enumerate(meta.leaders):
            by_leader.setdefault(leader, []).append(p)
        for leader, parts in by_leader.items():
            body = {"replica_id": -1, "isolation_level": isolation_level, "topics": [{
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
