"""ClusterStore: every ZooKeeper read and write of cluster mode, in Kafka's znode layout.

The contract is docs/REPLICATION.md's ``ClusterStore``, with one addition,
``watch_topic(name, fn(TopicAssignment | None))`` (the controller's watch for new
partitions and reassignments), and one refinement of meaning (not of signature): ``try_become_controller`` increments ``/controller_epoch`` in the same
ZooKeeper transaction that creates ``/controller`` (Kafka's
``registerControllerAndIncrementControllerEpoch``), and the ``increment_controller_epoch``
that follows a won election returns that increment instead of making another. A separate
increment would let a broker that won and then lost ``/controller`` (session expired
between the two calls) bump the epoch past its successor's and fence the real
controller. Called again without a new election, it increments (compare-and-set).

Layout and JSON (Kafka's ``ZkData``; compact JSON, topic ids as Kafka's ``Uuid.toString()``,
URL-safe base64 of the 16 bytes without padding)::

    /cluster/id                                 {"version":"1","id":"<cluster id>"}
    /brokers/ids/<id>               ephemeral   {"version":5,"host":h,"port":p,
                                                 "endpoints":["PLAINTEXT://h:p","SSL://h:q"],
                                                 "listener_security_protocol_map":
                                                   {"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},
                                                 "jmx_port":-1,"timestamp":"<ms>",
                                                 "control":"h:p","rack":"r"}
                                                (host, port: the inter-broker listener's;
                                                Kafka's are the PLAINTEXT listener's;
                                                rack: broker.rack, absent when unset)
    /controller                     ephemeral   {"version":1,"brokerid":id,"timestamp":"<ms>"}
    /controller_epoch                           "<epoch>" (decimal text; the first is 1)
    /brokers/topics/<t>                         {"version":3,"topic_id":"...","partitions":
                                                 {"0":[1,2,3]},"adding_replicas":{},
                                                 "removing_replicas":{}}
                                                (a partition being moved: its whole
                                                 replica set, and entries in
                                                 adding_replicas/removing_replicas)
    /brokers/topics/<t>/partitions/<p>/state    {"controller_epoch":e,"leader":id,"version":1,
                                                 "leader_epoch":n,"isr":[...]}
    /config/topics/<t>                          {"version":1,"config":{key: value}}
    /config/brokers/<id> and /config/brokers/<default>
                                                {"version":1,"config":{key: value}}
    /config/users/<u>, /config/users/<u>/clients/<c>, /config/clients/<c>, /config/ips/<ip>
                                                {"version":1,"config":{key: value}}
                                                (client quotas; names URL-encoded,
                                                 the default "<default>")
    /config/changes/config_change_<seq>         {"version":2,"entity_path":"topics/<t>"}
                                                (or "brokers/<id>", "brokers/<default>",
                                                 a client quota's path under /config)
    /isr_change_notification/isr_change_<seq>   {"version":1,"partitions":[{"topic":t,
                                                 "partition":p}]}
    /log_dir_event_notification/log_dir_event_<seq>
                                                {"version":1,"broker":id,"event":1}
                                                (a log directory of the broker failed)
    /admin/delete_topics/<t>                    (empty)
    /admin/reassign_partitions                  {"version":1,"partitions":[{"topic":t,
                                                 "partition":p,"replicas":[...]}]}
                                                (the pre-KIP-455 request; the controller
                                                 drops each entry once it is done)

A broker's epoch is the czxid of its registration. Partition states are written only
conditionally: on their znode version, and for the controller also on
``/controller_epoch``'s version in the same transaction (a check op), so a controller
that lost its election cannot write.

Thread-safety: all methods are blocking and may be called from any thread (kazoo
serialises the requests of its one session). Watch callbacks and state listeners run on
kazoo's callback thread, one at a time: they must not block (hop to the event loop with
``loop.call_soon_threadsafe``). A callback that raises is logged and the watch goes on.
Reads retry through connection losses (up to the session timeout); conditional writes
are not blindly retried: a conditional write whose answer was lost is recognised by
reading back what it wrote.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import kazoo.exceptions as kex
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from pybroker.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from pybroker.security.scram import MECHANISM_CODES
from pybroker.security.zk_writes import write_if_unchanged

log = logging.getLogger("pybroker.cluster.zk")

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG = "/config"
QUOTA_KINDS = ("users", "clients", "ips")  # the /config children that hold client quotas
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGES = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PERSISTENT_PARENTS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, CONFIG_CHANGES,
                      DELETE_TOPICS, ISR_CHANGES, LOG_DIR_EVENTS)
# Kafka's ZkNodeChangeNotificationListener deletes config change notifications this old.
CONFIG_CHANGE_EXPIRY_MS = 15 * 60 * 1000


class BrokerInfo(NamedTuple):
    broker_id: int
    host: str  # host and port: the broker's inter-broker listener
    port: int
    control: str
    epoch: int  # czxid of the registration
    # every listener: (name, security protocol, host, port)
    endpoints: tuple[tuple[str, str, str, int], ...] = ()
    rack: str | None = None  # broker.rack


class TopicAssignment(NamedTuple):
    """A topic's replica assignment. During a reassignment (KIP-455) a partition's
    ``partitions`` entry is the whole replica set RS = ORS + TRS, and ``adding`` (TRS -
    ORS) and ``removing`` (ORS - TRS) name it; partitions not being moved are absent
    from both (never changed in place: an update is a new tuple)."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    adding: Mapping[int, list[int]] = MappingProxyType({})
    removing: Mapping[int, list[int]] = MappingProxyType({})


class PartitionState(NamedTuple):
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int


class ControllerMovedError(Exception):
    """The ``/controller_epoch`` check of a transaction failed: another controller rules."""


class BadVersionError(Exception):
    """The partition state changed under us (or exists already, or is gone)."""


class BrokerIdInUseError(Exception):
    """``/brokers/ids/<id>`` belongs to another live session."""


# JSON and topic ids --------------------------------------------------------------------

def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(data: bytes | None) -> Any:
    if not data:
        return None
    return json.loads(data)


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _broker_json(host: str, port: int, control: str,
                 endpoints: Sequence[tuple[str, str, str, int]], rack: str | None) -> bytes:
    """Kafka's registration (v5: ``endpoints`` and ``listener_security_protocol_map``),
    with ``host``/``port`` the inter-broker listener's (Kafka's are the PLAINTEXT
    listener's) and pybroker's ``control`` channel; ``rack`` only when the broker has
    one, as Kafka writes it."""
    value = {"version": 5, "host": host, "port": port,
             "endpoints": [f"{name}://{h}:{p}" for name, _, h, p in endpoints],
             "listener_security_protocol_map": {name: protocol
                                                for name, protocol, _, _ in endpoints},
             "jmx_port": -1, "timestamp": _now_ms(), "control": control}
    if rack is not None:
        value["rack"] = rack
    return _dumps(value)


def _broker_info(broker_id: int, data: bytes, stat: ZnodeStat) -> BrokerInfo:
    value = _loads(data)
    protocols = value.get("listener_security_protocol_map") or {}
    endpoints = []
    for endpoint in value.get("endpoints") or ():
        name, _, address = endpoint.partition("://")
        host, _, port = address.rpartition(":")
        endpoints.append((name, protocols.get(name, name), host.strip("[]"), int(port)))
    return BrokerInfo(broker_id, value["host"], int(value["port"]), value.get("control", ""),
                      stat.czxid, tuple(endpoints), value.get("rack"))


def _topic_json(topic: TopicAssignment) -> bytes:
    def replica_map(assignment: Mapping[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(assignment.items()) if r}
    return _dumps({"version": 3, "topic_id": encode_topic_id(topic.topic_id),
                   "partitions": replica_map(topic.partitions),
                   "adding_replicas": replica_map(topic.adding),
                   "removing_replicas": replica_map(topic.removing)})


def _topic_assignment(name: str, data: bytes) -> TopicAssignment | None:
    value = _loads(data)
    if value is None:
        return None
    topic_id = (decode_topic_id(value["topic_id"]) if value.get("topic_id")
                else uuid.UUID(int=0))
    def replica_map(key: str) -> dict[int, list[int]]:
        found = {int(p): [int(b) for b in r] for p, r in (value.get(key) or {}).items() if r}
        return dict(sorted(found.items()))
    return TopicAssignment(name, topic_id, replica_map("partitions"),
                           replica_map("adding_replicas"), replica_map("removing_replicas"))


def _legacy_targets(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    """Kafka's ``{"version":1,"partitions":[{"topic","partition","replicas"}]}``; entries
    that do not parse are left out (with a log line: an operator wrote them)."""
    value = _loads(data) or {}
    targets: dict[tuple[str, int], list[int]] = {}
    for item in value.get("partitions") or ():
        try:
            targets[(str(item["topic"]), int(item["partition"]))] = [
                int(b) for b in item["replicas"]]
        except (KeyError, TypeError, ValueError):
            log.warning("%s: ignoring the entry %r", REASSIGN_PARTITIONS, item)
    return targets


def _state_json(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int) -> bytes:
    return _dumps({"controller_epoch": controller_epoch, "leader": leader, "version": 1,
                   "leader_epoch": leader_epoch, "isr": list(isr)})


def _partition_state(data: bytes, stat: ZnodeStat) -> PartitionState:
    value = _loads(data)
    return PartitionState(int(value["leader"]), int(value["leader_epoch"]),
                          [int(b) for b in value["isr"]], int(value["controller_epoch"]),
                          stat.version)


def _state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _quota_configs(value: dict) -> dict[str, str]:
    """A quota entity's configs from its znode: a user's SCRAM credentials, which share
    the znode, are not quotas."""
    return {k: str(v) for k, v in value.get("config", {}).items() if k not in MECHANISM_CODES}


def _seq(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


class ClusterStore:
    """Kafka's ZooKeeper data, through one kazoo session. Thread-safe (see the module)."""

    def __init__(self, hosts: str, session_timeout_ms: int,
                 connection_timeout_ms: int | None = None) -> None:
        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        deadline_s = max(self.connection_timeout_ms, session_timeout_ms) / 1000
        self._zk = KazooClient(
            hosts=hosts, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0,
                                     deadline=deadline_s))
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._election: tuple[int, int] | None = None  # (epoch, version) of a won election
        self._stopping = False
        self._zk.add_listener(self._on_state)

    # session ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (ConnectionError after connection_timeout_ms), create the chroot and the
        persistent parents."""
        hosts, _, chroot = self.hosts.partition("/")
        if chroot.strip("/"):
            self._ensure_chroot(hosts, "/" + chroot.strip("/"))
        self._connect(self._zk, self.hosts)
        for path in PERSISTENT_PARENTS:
            self._zk.retry(self._zk.ensure_path, path)

    def _connect(self, client: KazooClient, hosts: str) -> None:
        try:
            client.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ConnectionError(f"could not connect to ZooKeeper at {hosts} within "
                                  f"{self.connection_timeout_ms} ms") from None

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        # kazoo neither creates a missing chroot nor its parents: a session without it does.
        bare = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
        self._connect(bare, hosts)
        try:
            bare.retry(bare.ensure_path, chroot)
        finally:
            bare.stop()
            bare.close()

    @property
    def client(self) -> KazooClient:
        """The kazoo client, for the few paths kept outside this store (producer id
        blocks: pybroker/cluster/producer_id_blocks.py)."""
        return self._zk

    def stop(self) -> None:
        """Close the session: its ephemeral nodes (registration, /controller) go at once."""
        if self._stopping:
            return
        self._stopping = True
        self._zk.stop()
        self._zk.close()

    def add_state_listener(self, fn: Callable[[str], None]) -> None:
        """``fn("CONNECTED" | "SUSPENDED" | "LOST")`` on kazoo's thread. LOST: the session
        expired (ephemerals and the controller role are gone); kazoo then reconnects with a
        new session and reports CONNECTED."""
        self._listeners.append(fn)

    def _on_state(self, state: str) -> None:
        if state != "CONNECTED" and not self._stopping:
            log.warning("ZooKeeper session %s", state)
        for fn in list(self._listeners):
            try:
                fn(str(state))
            except Exception:
                log.exception("ZooKeeper state listener %r failed on %s", fn, state)

    def _session_id(self) -> int:
        return int(self._zk.client_id[0]) if self._zk.client_id else 0

    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self._zk.retry(self._zk.get, path)  # type: ignore[no-any-return]
        except kex.NoNodeError:
            return None

    def _get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, ZnodeStat]]:
        """Pipelined reads (one round trip for all); missing nodes are left out."""
        pending = [(path, self._zk.get_async(path)) for path in paths]
        found = {}
        for path, result in pending:
            try:
                found[path] = result.get()
            except kex.NoNodeError:
                continue
            except (kex.ConnectionLoss, kex.OperationTimeoutError):
                got = self._get(path)
                if got is not None:
                    found[path] = got
        return found

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._zk.retry(self._zk.get_children, path))
        except kex.NoNodeError:
            return []

    def _watch_children(self, path: str, what: str,
                        handle: Callable[[list[str]], None]) -> None:
        def on_children(children: list[str]) -> None:
            try:
                handle(sorted(children))
            except Exception:
                log.exception("ZooKeeper watch of %s (%s) failed; still watching", path, what)
        ChildrenWatch(self._zk, path, on_children)

    # cluster id, brokers ---------------------------------------------------------------

    def cluster_id(self, proposed: str) -> str:
        """The stored cluster id; ``proposed`` becomes it when there is none."""
        try:
            self._zk.retry(self._zk.create, CLUSTER_ID,
                           _dumps({"version": "1", "id": proposed}), makepath=True)
        except kex.NodeExistsError:
            pass
        got = self._get(CLUSTER_ID)
        if got is None:
            raise RuntimeError(f"{CLUSTER_ID} vanished after its creation")
        return str(_loads(got[0])["id"])

    def register_broker(self, broker_id: int, host: str, port: int, control: str,
                        endpoints: Sequence[tuple[str, str, str, int]] | None = None,
                        rack: str | None = None) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; returns its czxid (the broker epoch).
        ``host:port``: the inter-broker listener; ``endpoints``: every listener as (name,
        security protocol, host, port), by default one PLAINTEXT listener at host:port;
        ``rack``: ``broker.rack``.

        A registration left by an earlier session of this broker (a restart within the
        session timeout) is waited for, up to the session timeout, as Kafka does; one that
        does not go is another live broker's: BrokerIdInUseError.
        """
        path = f"{BROKER_IDS}/{broker_id}"
        data = _broker_json(host, port, control,
                            endpoints or [("PLAINTEXT", "PLAINTEXT", host, port)], rack)
        deadline = time.monotonic() + self.session_timeout_ms / 1000
        while True:
            try:
                _, stat = self._zk.create(path, data, ephemeral=True, include_data=True)
                return int(stat.czxid)
            except (kex.ConnectionLoss, kex.OperationTimeoutError):
                # Did the create land before the answer was lost? Then it is ours.
                stat = self._zk.retry(self._zk.exists, path)
                if stat is not None and stat.ephemeralOwner == self._session_id():
                    return int(stat.czxid)
                continue
            except kex.NodeExistsError:
                pass
            gone = threading.Event()
            stat = self._zk.retry(self._zk.exists, path,
                                  watch=lambda _event, gone=gone: gone.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self._session_id():
                return int(stat.czxid)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not gone.wait(remaining):
                raise BrokerIdInUseError(
                    f"broker id {broker_id} is registered by another session "
                    f"(0x{stat.ephemeralOwner:x}) and its registration did not go within "
                    f"{self.session_timeout_ms} ms")
            log.info("the previous registration of broker %d is gone", broker_id)

    def brokers(self) -> dict[int, BrokerInfo]:
        return self._brokers(self._children(BROKER_IDS))

    def _brokers(self, children: list[str]) -> dict[int, BrokerInfo]:
        ids = [c for c in children if c.isdigit()]
        got = self._get_many(f"{BROKER_IDS}/{c}" for c in ids)
        brokers = {}
        for c in ids:
            entry = got.get(f"{BROKER_IDS}/{c}")
            if entry is not None:
                brokers[int(c)] = _broker_info(int(c), *entry)
        return dict(sorted(brokers.items()))

    def watch_brokers(self, fn: Callable[[dict[int, BrokerInfo]], None]) -> None:
        """``fn(live brokers)`` now and at every registration change."""
        self._watch_children(BROKER_IDS, "brokers", lambda c: fn(self._brokers(c)))

    # controller ------------------------------------------------------------------------

    def try_become_controller(self, broker_id: int) -> bool:
        """Create ``/controller`` and increment ``/controller_epoch`` in one transaction.
        False when another session holds ``/controller``; True with a fresh epoch when this
        session holds it already (a controller that resigned while ``/controller`` stayed
        its own can take it up again)."""
        data = _dumps({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})
        while True:
            got = self._get(CONTROLLER_EPOCH)
            tx = self._zk.transaction()
            tx.create(CONTROLLER, data, ephemeral=True)
            if got is None:
                epoch = 1
                tx.create(CONTROLLER_EPOCH, b"1")
            else:
                epoch = int(got[0]) + 1
                tx.set_data(CONTROLLER_EPOCH, str(epoch).encode(), version=got[1].version)
            try:
                results = tx.commit()
            except (kex.ConnectionLoss, kex.OperationTimeoutError):
                results = None  # the answer was lost: look whether we won
            if results is not None and not any(isinstance(r, Exception) for r in results):
                stat = results[1]
                version = 0 if got is None else int(stat.version)
                break
            owner = self._zk.retry(self._zk.exists, CONTROLLER)
            if owner is not None and owner.ephemeralOwner == self._session_id():
                # Ours already: this attempt's lost answer, or an earlier win of this
                # session. A fresh epoch either way (one more increment is harmless).
                try:
                    epoch, version = self._bump_epoch(owner.version)
                    break
                except ControllerMovedError:
                    continue
            if owner is not None:
                return False
            # The epoch moved under us (another contender's failed attempt?): again.
        with self._lock:
            self._election = (epoch, version)
        log.info("broker %d is the controller, epoch %d", broker_id, epoch)
        return True

    def controller_id(self) -> int | None:
        got = self._get(CONTROLLER)
        return None if got is None else int(_loads(got[0])["brokerid"])

    def watch_controller(self, fn: Callable[[int | None], None]) -> None:
        """``fn(controller broker id or None)`` now and whenever ``/controller`` changes."""
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            try:
                fn(int(_loads(data)["brokerid"]) if data else None)
            except Exception:
                log.exception("ZooKeeper watch of %s failed; still watching", CONTROLLER)
        DataWatch(self._zk, CONTROLLER, on_data)

    def increment_controller_epoch(self) -> tuple[int, int]:
        """(epoch, its znode version): the increment of the election this store just won
        (see the module docstring), else a compare-and-set increment."""
        with self._lock:
            won, self._election = self._election, None
        if won is not None:
            return won
        return self._bump_epoch(None)

    def _bump_epoch(self, controller_version: int | None) -> tuple[int, int]:
        """Compare-and-set ``/controller_epoch`` + 1 (created as 1), with ``/controller``
        checked at ``controller_version`` in the same transaction when given
        (ControllerMovedError when that check fails)."""
        while True:
            got = self._get(CONTROLLER_EPOCH)
            epoch = 1 if got is None else int(got[0]) + 1
            tx = self._zk.transaction()
            if controller_version is not None:
                tx.check(CONTROLLER, controller_version)
            if got is None:
                tx.create(CONTROLLER_EPOCH, b"1")
            else:
                tx.set_data(CONTROLLER_EPOCH, str(epoch).encode(), version=got[1].version)
            try:
                results = tx.commit()
            except (kex.ConnectionLoss, kex.OperationTimeoutError):
                continue  # landed or not, read again: an extra increment is harmless
            if controller_version is not None and isinstance(results[0], Exception) \
                    and not isinstance(results[0], kex.RolledBackError):
                raise ControllerMovedError(f"{CONTROLLER} is no longer this session's")
            if not isinstance(results[-1], Exception):
                return epoch, 0 if got is None else int(results[-1].version)
            # Another increment came first: read again.

    # topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, topic_id: uuid.UUID, assignment: dict[int, list[int]],
                     configs: dict[str, str]) -> None:
        """Configs first, then the assignment (Kafka's order: a broker that sees the topic
        finds its configs). TopicAlreadyExistsError if it exists."""
        if self._zk.retry(self._zk.exists, f"{TOPICS}/{name}") is not None:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        self._set_or_create(f"{CONFIG_TOPICS}/{name}",
                            _dumps({"version": 1, "config": dict(configs)}))
        try:
            self._zk.create(f"{TOPICS}/{name}",
                            _topic_json(TopicAssignment(name, topic_id, assignment)))
        except kex.NodeExistsError:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.") from None

    def _set_or_create(self, path: str, data: bytes) -> None:
        while True:
            try:
                self._zk.retry(self._zk.set, path, data)
                return
            except kex.NoNodeError:
                pass
            try:
                self._zk.retry(self._zk.create, path, data, makepath=True)
                return
            except kex.NodeExistsError:
                continue

    def topic_names(self) -> list[str]:
        return self._children(TOPICS)

    def watch_topics(self, fn: Callable[[list[str]], None]) -> None:
        """``fn(all topic names)`` now and whenever a topic is created or deleted."""
        self._watch_children(TOPICS, "topics", fn)

    def watch_topic(self, name: str, fn: Callable[[TopicAssignment | None], None]) -> None:
        """``fn(assignment, or None while there is no such topic)`` now and at every change
        of ``/brokers/topics/<name>`` (new partitions; deletion; re-creation). An addition
        to the contract, for the controller (Kafka's PartitionModificationsHandler). Each
        call adds a watch: call it once per topic."""
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            try:
                fn(None if data is None else _topic_assignment(name, data))
            except Exception:
                log.exception("ZooKeeper watch of topic %s failed; still watching", name)
        DataWatch(self._zk, f"{TOPICS}/{name}", on_data)

    def topic(self, name: str) -> TopicAssignment | None:
        got = self._get(f"{TOPICS}/{name}")
        return None if got is None else _topic_assignment(name, got[0])

    def topics(self, names: Iterable[str]) -> dict[str, TopicAssignment]:
        names = list(names)
        got = self._get_many(f"{TOPICS}/{n}" for n in names)
        found = {}
        for name in names:
            entry = got.get(f"{TOPICS}/{name}")
            assignment = None if entry is None else _topic_assignment(name, entry[0])
            if assignment is not None:
                found[name] = assignment
        return found

    def set_assignment(self, name: str, topic_id: uuid.UUID,
                       assignment: dict[int, list[int]]) -> None:
        """Replace the assignment (CreatePartitions), keeping the reassignments in
        progress; UnknownTopicOrPartitionError if gone."""
        while True:
            found = self.versioned_topic(name)
            if found is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            current, version = found
            try:
                self.write_topic(current._replace(topic_id=topic_id, partitions=assignment),
                                 version)
                return
            except BadVersionError:
                continue  # a reassignment moved on meanwhile: again on what it wrote

    def versioned_topic(self, name: str) -> tuple[TopicAssignment, int] | None:
        """The topic's assignment and its znode version, for :meth:`write_topic`."""
        got = self._get(f"{TOPICS}/{name}")
        if got is None:
            return None
        topic = _topic_assignment(name, got[0])
        return None if topic is None else (topic, got[1].version)

    def write_topic(self, topic: TopicAssignment, expected_version: int,
                    epoch_zk_version: int | None = None) -> int:
        """Replace ``/brokers/topics/<t>`` (assignment and reassignments) if its znode is
        at ``expected_version`` (BadVersionError, also when the topic is gone), and when
        ``epoch_zk_version`` is given (the controller) if ``/controller_epoch`` is at it
        (ControllerMovedError), atomically; returns the znode's new version."""
        return self._conditional("set", f"{TOPICS}/{topic.name}", _topic_json(topic),
                                 expected_version, epoch_zk_version)

    # the legacy reassignment request ---------------------------------------------------

    def legacy_reassignment(self) -> tuple[dict[tuple[str, int], list[int]], int] | None:
        """``/admin/reassign_partitions`` (what kafka-reassign-partitions.sh wrote before
        KIP-455) as {(topic, partition): target replicas}, and its znode version; None
        when there is none."""
        got = self._get(REASSIGN_PARTITIONS)
        if got is None:
            return None
        return _legacy_targets(got[0]), got[1].version

    def set_legacy_reassignment(self, targets: dict[tuple[str, int], list[int]],
                                expected_version: int) -> None:
        """Replace the legacy request with ``targets`` (deleted when empty), if it is at
        ``expected_version`` (BadVersionError)."""
        try:
            if targets:
                self._zk.retry(self._zk.set, REASSIGN_PARTITIONS, _dumps({
                    "version": 1, "partitions": [
                        {"topic": t, "partition": p, "replicas": list(r)}
                        for (t, p), r in sorted(targets.items())]}),
                    version=expected_version)
            else:
                self._zk.retry(self._zk.delete, REASSIGN_PARTITIONS, version=expected_version)
        except (kex.BadVersionError, kex.NoNodeError):
            raise BadVersionError(f"{REASSIGN_PARTITIONS} is not at version "
                                  f"{expected_version}") from None

    def watch_legacy_reassignment(self, fn: Callable[[dict[tuple[str, int], list[int]]],
                                                     None]) -> None:
        """``fn(targets)`` now and whenever ``/admin/reassign_partitions`` is written
        (empty while there is none)."""
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            try:
                fn(_legacy_targets(data))
            except Exception:
                log.exception("ZooKeeper watch of %s failed; still watching",
                              REASSIGN_PARTITIONS)
        DataWatch(self._zk, REASSIGN_PARTITIONS, on_data)

    def _entity_configs(self, entity_path: str) -> dict[str, str]:
        """The ``config`` map of ``/config/<entity_path>`` (empty without the znode)."""
        got = self._get(f"{CONFIG}/{entity_path}")
        value = None if got is None else _loads(got[0])
        return {} if value is None else {k: str(v) for k, v in value["config"].items()}

    def _set_entity_configs(self, entity_path: str, configs: dict[str, str]) -> None:
        """Replace the ``config`` map of ``/config/<entity_path>`` and announce it."""
        self._set_or_create(f"{CONFIG}/{entity_path}",
                            _dumps({"version": 1, "config": dict(configs)}))
        self.announce_config_change(entity_path)

    def announce_config_change(self, entity_path: str) -> None:
        """A ``/config/changes`` notification naming the entity, as Kafka writes it."""
        self._zk.retry(self._zk.create, f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                       _dumps({"version": 2, "entity_path": entity_path}), sequence=True)

    def topic_configs(self, name: str) -> dict[str, str]:
        return self._entity_configs(f"topics/{name}")

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's configs and announce it in ``/config/changes``."""
        self._set_entity_configs(f"topics/{name}", configs)

    def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of a broker id or ``<default>`` (the cluster's default)."""
        return self._entity_configs(f"brokers/{entity}")

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Replace the dynamic configs of ``entity`` and announce it in ``/config/changes``
        (as Kafka's ZooKeeper mode did; pybroker's brokers watch the znodes themselves)."""
        self._set_entity_configs(f"brokers/{entity}", configs)

    def watch_broker_configs(self, entity: str, fn: Callable[[dict[str, str]], None]) -> None:
        """``fn(configs)`` with the dynamic configs of ``entity`` now and after each change
        (empty while the znode does not exist)."""
        path = f"{CONFIG_BROKERS}/{entity}"

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            try:
                value = _loads(data)
                fn({} if value is None else {k: str(v) for k, v in value["config"].items()})
            except Exception:
                log.exception("ZooKeeper watch of %s failed; still watching", path)
        DataWatch(self._zk, path, on_data)

    def client_quotas(self) -> dict[str, dict[str, str]]:
        """Every client quota znode's configs by its entity path (``users/alice``, ...)."""
        paths = [f"{kind}/{name}" for kind in QUOTA_KINDS
                 for name in self._children(f"{CONFIG}/{kind}")]
        paths += [f"{path}/clients/{client}" for path in paths if path.startswith("users/")
                  for client in self._children(f"{CONFIG}/{path}/clients")]
        got = self._get_many(f"{CONFIG}/{path}" for path in paths)
        found = {}
        for path in paths:
            entry = got.get(f"{CONFIG}/{path}")
            value = None if entry is None else _loads(entry[0])
            if value is not None:
                found[path] = _quota_configs(value)
        return found

    def client_quota(self, path: str) -> dict[str, str]:
        got = self._get(f"{CONFIG}/{path}")
        value = None if got is None else _loads(got[0])
        return {} if value is None else _quota_configs(value)

    def set_client_quota(self, path: str, configs: dict[str, str]) -> None:
        """Replace the quotas of the entity at ``path`` (under /config) and announce it. A
        user's znode also holds its SCRAM credentials (Kafka's layout): they are kept, the
        znode written on the version it was read at (again if another writer came
        first)."""
        znode = f"{CONFIG}/{path}"
        while True:
            got = self._get(znode)
            value = None if got is None else _loads(got[0])
            kept = {} if value is None else {k: v for k, v in value.get("config", {}).items()
                                             if k in MECHANISM_CODES}
            if write_if_unchanged(self._zk, znode,
                                  _dumps({"version": 1, "config": {**configs, **kept}}),
                                  None if got is None else got[1].version):
                break
        self.announce_config_change(path)

    def watch_config_changes(self, fn: Callable[[list[str]], None],
                             kinds: tuple[str, ...] = ("topics",)) -> None:
        """``fn(entity names)`` for the notifications of ``kinds`` not seen yet (at
        first: all present, as Kafka's listener does): a topic's name for "topics", the
        whole entity path for the others. The topics' watch deletes notifications older
        than 15 min."""
        seen = [-1]  # the highest sequence number this watch has reported
        self._watch_children(CONFIG_CHANGES, "config changes",
                             lambda c: self._config_changes(c, seen, fn, kinds))

    def _config_changes(self, children: list[str], seen: list[int],
                        fn: Callable[[list[str]], None], kinds: tuple[str, ...]) -> None:
        fresh = sorted((c for c in children if c.startswith(CONFIG_CHANGE_PREFIX)
                        and _seq(c) > seen[0]), key=_seq)
        if not fresh:
            return
        got = self._get_many(f"{CONFIG_CHANGES}/{c}" for c in fresh)
        names: list[str] = []
        expired_before = time.time() * 1000 - CONFIG_CHANGE_EXPIRY_MS
        for child in fresh:
            entry = got.get(f"{CONFIG_CHANGES}/{child}")
            seen[0] = max(seen[0], _seq(child))
            if entry is None:
                continue
            entity = (_loads(entry[0]) or {}).get("entity_path", "")
            kind, _, name = entity.partition("/")
            name = name if kind == "topics" else entity
            if kind in kinds and name and name not in names:
                names.append(name)
            if "topics" in kinds and entry[1].ctime < expired_before:
                self._zk.delete_async(f"{CONFIG_CHANGES}/{child}")
        if names:
            fn(names)

    # partition states ------------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        got = self._get(_state_path(topic, partition))
        return None if got is None else _partition_state(*got)

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        partitions = [int(c) for c in self._children(f"{TOPICS}/{topic}/partitions")
                      if c.isdigit()]
        got = self._get_many(_state_path(topic, p) for p in partitions)
        states = {}
        for p in sorted(partitions):
            entry = got.get(_state_path(topic, p))
            if entry is not None:
                states[p] = _partition_state(*entry)
        return states

    def create_partition_state(self, topic: str, partition: int, leader: int,
                               leader_epoch: int, isr: list[int], controller_epoch: int,
                               epoch_zk_version: int | None) -> PartitionState:
        """Create the state (version 0), checking ``/controller_epoch`` at
        ``epoch_zk_version`` in the same transaction. ControllerMovedError when that check
        fails, BadVersionError when the state exists already,
        UnknownTopicOrPartitionError when the topic is gone."""
        path = _state_path(topic, partition)
        for parent in (f"{TOPICS}/{topic}/partitions", f"{TOPICS}/{topic}/partitions/{partition}"):
            try:
                self._zk.retry(self._zk.create, parent)
            except kex.NodeExistsError:
                pass
            except kex.NoNodeError:
                raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.") from None
        data = _state_json(leader, leader_epoch, isr, controller_epoch)
        self._conditional("create", path, data, -1, epoch_zk_version)
        return PartitionState(leader, leader_epoch, list(isr), controller_epoch, 0)

    def set_partition_state(self, topic: str, partition: int, leader: int, leader_epoch: int,
                            isr: list[int], controller_epoch: int, expected_version: int,
                            epoch_zk_version: int | None) -> PartitionState:
        """Write the state if its znode is at ``expected_version`` (BadVersionError), and
        when ``epoch_zk_version`` is given, if ``/controller_epoch`` is at it
        (ControllerMovedError), atomically."""
        path = _state_path(topic, partition)
        data = _state_json(leader, leader_epoch, isr, controller_epoch)
        version = self._conditional("set", path, data, expected_version, epoch_zk_version)
        return PartitionState(leader, leader_epoch, list(isr), controller_epoch, version)

    def _conditional(self, kind: str, path: str, data: bytes, expected_version: int,
                     epoch_zk_version: int | None) -> int:
        """Create (``kind`` "create") or set ``path`` at ``expected_version``, behind the
        optional ``/controller_epoch`` check; returns the znode's new version. A write whose
        answer was lost is recognised by reading it back (Kafka's ReplicationUtils
        checker), else tried again until the command retry deadline."""
        deadline = time.monotonic() + max(self.connection_timeout_ms,
                                          self.session_timeout_ms) / 1000
        while True:
            try:
                return self._write_once(kind, path, data, expected_version, epoch_zk_version)
            except (kex.ConnectionLoss, kex.OperationTimeoutError):
                got = self._get(path)
                if got is not None and got[0] == data and got[1].version == expected_version + 1:
                    return int(got[1].version)
                if time.monotonic() > deadline:
                    raise

    def _write_once(self, kind: str, path: str, data: bytes, expected_version: int,
                    epoch_zk_version: int | None) -> int:
        try:
            if epoch_zk_version is None:
                if kind == "create":
                    self._zk.create(path, data)
                    return 0
                return int(self._zk.set(path, data, version=expected_version).version)
            tx = self._zk.transaction()
            tx.check(CONTROLLER_EPOCH, epoch_zk_version)
            if kind == "create":
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=expected_version)
            results = tx.commit()
        except kex.NodeExistsError:
            raise BadVersionError(f"{path} exists already") from None
        except (kex.BadVersionError, kex.NoNodeError):
            raise BadVersionError(f"{path} is not at version {expected_version}") from None
        # A failed transaction answers the failing op's error, RolledBackError for the rest.
        if isinstance(results[0], Exception) and not isinstance(results[0], kex.RolledBackError):
            raise ControllerMovedError(
                f"{CONTROLLER_EPOCH} is not at version {epoch_zk_version}: the controller "
                "moved")
        if isinstance(results[1], Exception):
            raise BadVersionError(f"{path} is not at version {expected_version} "
                                  f"({type(results[1]).__name__})")
        return 0 if kind == "create" else int(results[1].version)

    # notifications ---------------------------------------------------------------------

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        self._zk.retry(self._zk.create, f"{ISR_CHANGES}/{ISR_CHANGE_PREFIX}",
                       _dumps({"version": 1, "partitions": [
                           {"topic": t, "partition": p} for t, p in partitions]}),
                       sequence=True)

    def watch_isr_changes(self, fn: Callable[[list[tuple[str, int]]], None]) -> None:
        """``fn(changed partitions)`` for every batch of notifications; each notification is
        deleted as it is consumed, and only the deleter reports it (exactly once)."""
        self._watch_children(ISR_CHANGES, "ISR changes", lambda c: self._isr_changes(c, fn))

    def _isr_changes(self, children: list[str],
                     fn: Callable[[list[tuple[str, int]]], None]) -> None:
        changed: list[tuple[str, int]] = []
        for notification in self._consume(ISR_CHANGES, ISR_CHANGE_PREFIX, children):
            for item in notification.get("partitions", []):
                key = (str(item["topic"]), int(item["partition"]))
                if key not in changed:
                    changed.append(key)
        if changed:
            fn(changed)

    def _consume(self, parent: str, prefix: str, children: list[str]) -> list[dict]:
        """The notifications ``parent/<prefix><seq>`` among ``children``, in sequence
        order, each deleted here: one a concurrent reader deleted first is left to it."""
        names = sorted((c for c in children if c.startswith(prefix)), key=_seq)
        if not names:
            return []
        got = self._get_many(f"{parent}/{c}" for c in names)
        consumed: list[dict] = []
        for child in names:
            entry = got.get(f"{parent}/{child}")
            if entry is None:
                continue
            try:
                self._zk.retry(self._zk.delete, f"{parent}/{child}")
            except kex.NoNodeError:
                continue  # consumed by another reader
            consumed.append(_loads(entry[0]) or {})
        return consumed

    def notify_log_dir_failure(self, broker_id: int) -> None:
        self._zk.retry(self._zk.create, f"{LOG_DIR_EVENTS}/{LOG_DIR_EVENT_PREFIX}",
                       _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE}),
                       sequence=True)

    def watch_log_dir_failures(self, fn: Callable[[list[int]], None]) -> None:
        """``fn(brokers with a failed log directory)`` for every batch of notifications;
        consumed as ISR change notifications are (exactly once, by the deleter)."""
        self._watch_children(LOG_DIR_EVENTS, "log dir events",
                             lambda c: self._log_dir_failures(c, fn))

    def _log_dir_failures(self, children: list[str], fn: Callable[[list[int]], None]) -> None:
        brokers: list[int] = []
        for event in self._consume(LOG_DIR_EVENTS, LOG_DIR_EVENT_PREFIX, children):
            if event.get("event") == LOG_DIR_FAILURE and event.get("broker") not in brokers:
                brokers.append(int(event["broker"]))
        if brokers:
            fn(brokers)

    def request_topic_deletion(self, name: str) -> None:
        try:
            self._zk.retry(self._zk.create, f"{DELETE_TOPICS}/{name}", b"")
        except kex.NodeExistsError:
            pass

    def topic_deletion_requested(self, name: str) -> bool:
        return self._zk.retry(self._zk.exists, f"{DELETE_TOPICS}/{name}") is not None

    def watch_topic_deletions(self, fn: Callable[[list[str]], None]) -> None:
        """``fn(topic names pending deletion)`` now and whenever the set changes."""
        self._watch_children(DELETE_TOPICS, "topic deletions", fn)

    def delete_topic(self, name: str) -> None:
        """Remove the topic's znodes (assignment, partition states, configs) and its
        deletion request: the controller's last step of a deletion."""
        for path in (f"{TOPICS}/{name}", f"{CONFIG_TOPICS}/{name}", f"{DELETE_TOPICS}/{name}"):
            try:
                self._zk.retry(self._zk.delete, path, recursive=True)
            except kex.NoNodeError:
                pass
