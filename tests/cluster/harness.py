"""``LocalCluster``: N broker processes joined through a test ZooKeeper, for the cluster
tests (issue 7's "How it is checked").

Each broker is a real ``python -m pybroker serve --zookeeper ... --broker-id i --listen
127.0.0.1:0`` (``tests.conftest.BrokerProcess``: its bound port is read from the
``ready`` line of its log, and a restart binds the same port again), with timeouts short
enough for tests (``FAST_SETTINGS``). Every cluster lives under a ZooKeeper chroot of
its own, so one ZooKeeper serves every test.

    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        cluster.create_topic("t", partitions=3, replication_factor=3)
        leader = cluster.describe("t")[0].leader
        cluster.kill(leader)                       # SIGKILL
        cluster.wait_for(lambda: cluster.describe("t")[0].leader not in (-1, leader),
                         what="a new leader")

Failure modes are the point of these tests, so the harness asks brokers directly: the
Metadata it reads (``describe``, ``controller_id``, ``broker_ids``) comes from one live
broker over a plain Kafka connection (``pybroker.client.connection``), not from a client
that picks brokers and retries by itself. On leaving the ``with`` block with an error,
every broker's log tail is printed (pytest shows it with the failure); otherwise every
broker must exit 0 on SIGTERM.

Security (``security``, default the ``PYBROKER_TEST_CLUSTER_SECURITY`` environment
variable, else ``"plaintext"``): with ``"sasl_ssl"`` every broker has a PLAINTEXT listener
for the clients (first: ``address``, ``bootstrap`` and the harness's own requests use it)
and a SASL_SSL one that is ``inter.broker.listener.name``: TLS with test certificates
(``tests/tls/certs.py``, made under the cluster's root) and SCRAM-SHA-512 as the user
``broker``, whose credential the harness writes into the cluster's ZooKeeper before any
broker starts (as Kafka's documentation has it done with ``kafka-configs --zookeeper``),
so replication, transaction markers and every other broker-to-broker request run
authenticated and encrypted while the tests' clients stay unchanged. A test that sets
``listeners`` itself keeps its own security; one that sets ``authorizer.class.name``
gets ``User:broker`` added to ``super.users``, as a Kafka cluster with an authorizer
needs its brokers' principal. After the first start each listener's bound port is pinned, so a
restarted broker binds the same ports again.

Not thread-safe: the test's main thread drives it (producer and consumer threads of a
test use their own clients).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from pybroker.client.connection import BrokerConnection
from pybroker.net.protocol import codec
from tests.conftest import BrokerProcess, _require_native

T = TypeVar("T")
# librdkafka logs every refused connection to stderr: its log goes to Python logging
# instead, which pytest shows with a failure.
CLIENT_LOG = logging.getLogger("tests.cluster.client")

METADATA, LIST_OFFSETS, CREATE_TOPICS = 3, 2, 19
SECURITY_ENV = "PYBROKER_TEST_CLUSTER_SECURITY"
SECURITY_MODES = ("plaintext", "sasl_ssl")
INTER_BROKER_USER, INTER_BROKER_PASSWORD = "broker", "broker-secret"
INTER_BROKER_MECHANISM = "SCRAM-SHA-512"
_LISTENER_LINE = re.compile(r"listener (\S+) \(\S+\) on (\S+):(\d+)")


def default_security() -> str:
    """The mode of a cluster whose test does not choose one: ``$PYBROKER_TEST_CLUSTER_SECURITY``
    (``plaintext`` or ``sasl_ssl``), plaintext when unset."""
    mode = os.environ.get(SECURITY_ENV, "").strip().lower() or "plaintext"
    if mode not in SECURITY_MODES:
        raise ValueError(f"{SECURITY_ENV}={mode!r}: one of {', '.join(SECURITY_MODES)}")
    return mode


def sasl_ssl_settings(cert_dir: str) -> dict[str, Any]:
    """Broker settings of the ``sasl_ssl`` mode, with certificates made in ``cert_dir``."""
    from tests.tls.certs import make_stores

    stores = make_stores(cert_dir)
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": INTER_BROKER_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": INTER_BROKER_MECHANISM,
            "sasl.jaas.config": ("org.apache.kafka.common.security.scram.ScramLoginModule "
                                 f'required username="{INTER_BROKER_USER}" '
                                 f'password="{INTER_BROKER_PASSWORD}";'),
            "ssl.keystore.location": stores.keystore,
            "ssl.truststore.location": stores.ca}
# Short timeouts so that failover happens within seconds. ZooKeeper's tickTime in the
# tests is 200 ms, and the test ZooKeeper accepts sessions up to 120 s.
FAST_SETTINGS: dict[str, Any] = {
    "zookeeper.session.timeout.ms": 3000,
    "replica.lag.time.max.ms": 3000,
    "leader.imbalance.check.interval.seconds": 2,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 200,
    "replica.high.watermark.checkpoint.interval.ms": 1000,
    "controller.socket.timeout.ms": 5000,
    # the last broker of a cluster closed leads what nobody else can: its controlled
    # shutdown asks again and again for nothing
    "controlled.shutdown.retry.backoff.ms": 200,
    # __consumer_offsets: few partitions, so that creating it is quick
    "offsets.topic.num.partitions": 3,
}
LOG_TAIL = 6000
CLOSE_TIMEOUT_S = 30.0


class PartitionInfo(NamedTuple):
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: int


class LocalCluster:
    def __init__(self, zk_connect: str, root: str | os.PathLike[str], size: int = 3,
                 settings: dict[str, Any] | None = None, security: str | None = None,
                 broker_settings: dict[int, dict[str, Any]] | None = None) -> None:
        """``settings``: every broker's; ``broker_settings``: one broker's own (by id,
        over ``settings``), as ``broker.rack``."""
        _require_native()
        self.root = os.fspath(root)
        # A chroot per cluster: the tests share one ZooKeeper.
        self.chroot = f"/pybroker-{uuid.uuid4().hex[:12]}"
        self.zookeeper = zk_connect.rstrip("/") + self.chroot
        self.zk_connect = zk_connect
        settings = dict(settings or {})
        self.security = security or default_security()
        if self.security not in SECURITY_MODES:
            raise ValueError(f"security {self.security!r}: one of {', '.join(SECURITY_MODES)}")
        secured: dict[str, Any] = {}
        if self.security == "sasl_ssl" and "listeners" not in settings:
            cert_dir = os.path.join(self.root, "certs")
            os.makedirs(cert_dir, exist_ok=True)
            secured = sasl_ssl_settings(cert_dir)
            if settings.get("authorizer.class.name"):  # the brokers may do anything
                settings["super.users"] = ";".join(
                    filter(None, [settings.get("super.users"), f"User:{INTER_BROKER_USER}"]))
        else:
            self.security = "plaintext" if "listeners" not in settings else "own"
        merged = {**FAST_SETTINGS, "default.replication.factor": min(3, size),
                  "offsets.topic.replication.factor": min(3, size), **secured, **settings}
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, size + 1):
            base = os.path.join(self.root, f"broker-{broker_id}")
            os.makedirs(base, exist_ok=True)
            own = {**merged, **(broker_settings or {}).get(broker_id, {})}
            self.brokers[broker_id] = BrokerProcess(
                os.path.join(base, "data"), own, os.path.join(base, "broker.log"),
                extra_args=["--zookeeper", self.zookeeper, "--broker-id", str(broker_id)])
        self.paused: set[int] = set()
        self._admin: dict[int, BrokerConnection] = {}
        self._zk: Any = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> LocalCluster:
        self._ensure_chroot()
        for broker in self.brokers.values():
            broker.start()
            self._pin_ports(broker)
        everyone = set(self.brokers)
        self.wait_for(lambda: self.broker_ids() == everyone, 60,
                      what=f"brokers {sorted(everyone)} registered")
        return self

    def _ensure_chroot(self) -> None:
        """The cluster's chroot, and in ``sasl_ssl`` mode the brokers' own credential in
        it."""
        from kazoo.client import KazooClient

        from pybroker.sanitizer import sanitize
        from pybroker.security.scram import new_credential
        from pybroker.security.zk_credential_store import USERS

        zk = KazooClient(hosts=self.zk_connect)
        zk.start(timeout=30)
        try:
            zk.ensure_path(self.chroot)
            if self.security == "sasl_ssl":
                credential = new_credential(INTER_BROKER_MECHANISM, INTER_BROKER_PASSWORD)
                config = {INTER_BROKER_MECHANISM: credential.to_text()}
                zk.create(f"{self.chroot}{USERS}/{sanitize(INTER_BROKER_USER)}",
                          json.dumps({"version": 1, "config": config}).encode(),
                          makepath=True)
        finally:
            zk.stop()
            zk.close()

    def _pin_ports(self, broker: BrokerProcess) -> None:
        """Names each listener's bound port in the broker's ``listeners``, so that a
        restart binds the same ports (``--listen`` alone only pins the first)."""
        listeners = broker.settings.get("listeners")
        if not listeners:
            return
        bound = {name: f"{name}://{host}:{port}"
                 for name, host, port in _LISTENER_LINE.findall(broker.log_text())}
        broker.settings["listeners"] = ",".join(
            bound.get(item.split("://", 1)[0].strip().upper(), item)
            for item in str(listeners).split(","))

    def zk_get(self, path: str) -> tuple[bytes, Any] | None:
        """``(data, ZnodeStat)`` of a znode under the cluster's chroot (None: no node),
        read with a session of the harness's own."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        if self._zk is None:
            self._zk = KazooClient(hosts=self.zookeeper)
            self._zk.start(timeout=30)
        try:
            return self._zk.get(path)
        except NoNodeError:
            return None

    def controller_epoch(self) -> int:
        found = self.zk_get("/controller_epoch")
        assert found is not None, "no /controller_epoch"
        return int(found[0])

    def registration(self, broker_id: int) -> tuple[dict, int] | None:
        """A broker's ``/brokers/ids/<id>`` JSON and its broker epoch (the znode's
        czxid), None when it is not registered."""
        found = self.zk_get(f"/brokers/ids/{broker_id}")
        return None if found is None else (json.loads(found[0]), found[1].czxid)

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.print_logs()
            self.close(check=False)
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.print_logs()
        self.close(check=exc_type is None)

    def close(self, check: bool = True) -> None:
        """SIGTERM to every broker; with ``check``, each must exit 0."""
        for conn in self._admin.values():
            conn.close()
        self._admin.clear()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
        for broker_id in list(self.paused):
            self.resume(broker_id)
        failures = []
        for broker_id, broker in self.brokers.items():
            if broker.alive():
                code = broker.stop()
                if code != 0:
                    failures.append(f"broker {broker_id} exited {code} on SIGTERM")
        if check and failures:
            self.print_logs()
            raise AssertionError("; ".join(failures))

    # -- faults --------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no clean shutdown, the ZooKeeper session ends by timeout."""
        self._forget(broker_id)
        self.paused.discard(broker_id)
        self.brokers[broker_id].stop(signal.SIGKILL)

    def stop(self, broker_id: int) -> int | None:
        """SIGTERM, waits for the exit; returns the exit code."""
        self._forget(broker_id)
        if broker_id in self.paused:
            self.resume(broker_id)
        return self.brokers[broker_id].stop(signal.SIGTERM)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process keeps its sockets and its session until ZooKeeper expires
        it; everything sent to it waits in the kernel."""
        self._forget(broker_id)
        os.kill(self.brokers[broker_id].pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    def restart(self, broker_id: int) -> None:
        """Starts a broker again (stopping it first if it runs), same port and data."""
        broker = self.brokers[broker_id]
        if broker.alive():
            code = self.stop(broker_id)
            assert code == 0, f"broker {broker_id} exited {code} on SIGTERM"
        broker.start()

    def _forget(self, broker_id: int) -> None:
        conn = self._admin.pop(broker_id, None)
        if conn is not None:
            conn.close()

    # -- what the cluster says -------------------------------------------------------------

    def running(self) -> list[int]:
        """Brokers alive and not paused, in id order."""
        return [i for i, b in self.brokers.items() if b.alive() and i not in self.paused]

    def address(self, broker_id: int) -> str:
        return self.brokers[broker_id].bootstrap

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.running())

    def connection(self, broker_id: int) -> BrokerConnection:
        """A connection to one broker, kept for the harness's own requests."""
        conn = self._admin.get(broker_id)
        if conn is None:
            broker = self.brokers[broker_id]
            conn = BrokerConnection("127.0.0.1", broker.port, "cluster-harness", timeout=10)
            self._admin[broker_id] = conn
        return conn

    def request(self, broker_id: int | None, api_key: int, version: int, body: dict) -> dict:
        """One request to ``broker_id`` (None: the first running broker); a broken
        connection is dropped and raised (OSError)."""
        target = self.running()[0] if broker_id is None else broker_id
        try:
            return self.connection(target).request(api_key, version, body)
        except OSError:
            self._forget(target)
            raise

    def metadata(self, topics: list[str] | None = None, broker_id: int | None = None) -> dict:
        body = {"topics": None if topics is None else [{"name": t, "topic_id": codec.ZERO_UUID}
                                                       for t in topics],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
        return self.request(broker_id, METADATA, 12, body)

    def broker_ids(self, broker_id: int | None = None) -> set[int]:
        """The live brokers one broker knows of (its metadata cache)."""
        try:
            return {b["node_id"] for b in self.metadata([], broker_id)["brokers"]}
        except OSError:
            return set()

    def controller_id(self, broker_id: int | None = None) -> int:
        return int(self.metadata([], broker_id)["controller_id"])

    def describe(self, topic: str, broker_id: int | None = None) -> dict[int, PartitionInfo]:
        """Leader, leader epoch, replicas and ISR per partition, as one broker answers
        Metadata ({} when it does not know the topic)."""
        found = self.metadata([topic], broker_id)["topics"]
        if not found or found[0]["error_code"] != 0:
            return {}
        return {p["partition_index"]: PartitionInfo(p["leader_id"], p["leader_epoch"],
                                                    list(p["replica_nodes"]),
                                                    list(p["isr_nodes"]), p["error_code"])
                for p in found[0]["partitions"]}

    def high_watermark(self, topic: str, partition: int, broker_id: int) -> int:
        """ListOffsets latest (read uncommitted: the high watermark) from one broker;
        raises AssertionError with the error code when it refuses."""
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": topic, "partitions": [{"partition_index": partition,
                                           "current_leader_epoch": -1, "timestamp": -1}]}]}
        answer = self.request(broker_id, LIST_OFFSETS, 7, body)
        part = answer["topics"][0]["partitions"][0]
        assert part["error_code"] == 0, f"ListOffsets error {part['error_code']}"
        return int(part["offset"])

    def control_request(self, broker_id: int, api_key: int, version: int, body: dict,
                        timeout_s: float = 10.0) -> dict:
        """One request on a broker's control channel (the address its registration
        publishes), as a controller sends it: a zmq DEALER, a Kafka frame without its
        size prefix per message (docs/REPLICATION.md)."""
        import zmq



        found = self.registration(broker_id)
        assert found is not None, f"broker {broker_id} is not registered"
        context = zmq.Context.instance()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(f"tcp://{found[0]['control']}")
            body = codec.with_defaults(api_key, version, body)
            sock.send(codec.encode_request(api_key, version, 1, body, "cluster-harness")[4:])
            assert sock.poll(int(timeout_s * 1000)), f"no answer in {timeout_s} s"
            frame = sock.recv()
        finally:
            sock.close()
        _, header_size = codec.read_response_header(api_key, version, frame)
        return codec.decode_response(api_key, version, frame, header_size)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     configs: dict[str, str] | None = None,
                     assignment: list[list[int]] | None = None) -> dict[int, PartitionInfo]:
        """CreateTopics through a running broker, then waits until every running broker
        describes every partition with a leader and its whole assignment in the ISR;
        returns the partitions. The controller's UpdateMetadata reaches the brokers one by
        one, so one broker's answer says nothing of the others' (as in Kafka)."""
        if assignment is not None:
            partitions, replication_factor = -1, -1
        body = {"topics": [{
            "name": name, "num_partitions": partitions,
            "replication_factor": replication_factor,
            "assignments": [{"partition_index": i, "broker_ids": ids}
                            for i, ids in enumerate(assignment or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 30000, "validate_only": False}
        answer = self.request(None, CREATE_TOPICS, 5, body)
        error = answer["topics"][0]["error_code"]
        assert error == 0, f"CreateTopics {name}: {error} {answer['topics'][0]}"
        return self.wait_for(lambda: self._fully_replicated(name), 60,
                             what=f"{name}: every partition led, its whole assignment in sync")

    def _fully_replicated(self, topic: str) -> dict[int, PartitionInfo] | None:
        answers = [self.describe(topic, broker_id) for broker_id in self.running()]
        partitions = answers[0]
        done = partitions and all(p.leader >= 0 and sorted(p.isr) == sorted(p.replicas)
                                  for p in partitions.values())
        return partitions if done and all(a == partitions for a in answers) else None

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 what: str = "condition", interval: float = 0.1) -> T:
        """Polls ``predicate`` until it returns something true, which is returned. A
        broker that is down while polled (OSError) counts as not yet."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = predicate()
                if last:
                    return last
            except (OSError, IndexError) as exc:  # IndexError: no broker running
                last = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} "
                                     f"(last: {last!r})")
            time.sleep(interval)

    # -- logs ------------------------------------------------------------------------------

    def log_text(self, broker_id: int) -> str:
        return self.brokers[broker_id].log_text()

    def print_logs(self) -> None:
        for broker_id, broker in self.brokers.items():
            try:
                text = broker.log_text()
            except FileNotFoundError:
                continue
            print(f"===== broker {broker_id} ({broker.log_path}), last {LOG_TAIL} chars")
            print(text[-LOG_TAIL:])


# -- clients the tests drive ------------------------------------------------------------

PRODUCE = 0
NOT_ENOUGH_REPLICAS = 19
# What an acks=all produce the cluster cannot replicate may be answered: refused before
# the append, timed out, or fenced when the broker learns it no longer leads.
NOT_ACKNOWLEDGED = {6, 7, 19, 20, 74}


def produce_body(topic: str, partition: int, value: bytes, acks: int = -1,
                 timeout_ms: int = 5000) -> dict:
    from pybroker._native.records import encode_batch

    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": encode_batch([value])}]}]}


def produce_error(answer: dict) -> int:
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


class ContinuousProducer(threading.Thread):
    """confluent-kafka with acks=all and idempotence, writing keyed records without end:
    the value of record n is ``n`` in decimal, its key ``k<n % keys>``. ``acked`` holds
    ``(partition, offset, n)`` of every record the cluster acknowledged, ``failed``
    ``(n, error name)`` of those it gave up on (librdkafka retries retriable errors until
    ``message.timeout.ms``), ``fatal`` the client's fatal errors (an idempotence
    violation)."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 12, pause_s: float = 0.002,
                 **conf: Any) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.topic, self.keys, self.pause_s = topic, keys, pause_s
        self.acked: list[tuple[int, int, int]] = []
        self.failed: list[tuple[int, str]] = []
        self.fatal: list[str] = []
        self._halt = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "error_cb": self._on_error,
            "logger": CLIENT_LOG, **conf})
        self.sent = 0

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(f"{err.name()}: {err.str()}")

    def _on_delivery(self, err: Any, msg: Any) -> None:
        n = int(msg.value())
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), n))
        else:
            self.failed.append((n, err.name()))

    def run(self) -> None:
        while not self._halt.is_set():
            n = self.sent
            try:
                self.producer.produce(self.topic, value=str(n).encode(),
                                      key=f"k{n % self.keys}".encode(),
                                      on_delivery=self._on_delivery)
            except BufferError:  # the queue is full while the cluster refuses writes
                self.producer.poll(0.1)
                continue
            self.sent += 1
            self.producer.poll(0)
            time.sleep(self.pause_s)

    def acked_ends(self) -> dict[int, int]:
        """Per partition written, the offset after the last record acknowledged (what
        ``read_all``'s ``at_least`` wants)."""
        return {p: max(o for q, o, _ in self.acked if q == p) + 1
                for p in {q for q, _, _ in self.acked}}

    def stop(self, flush_timeout: float = 120.0) -> None:
        """Stops producing and waits for every outstanding record's answer."""
        self._halt.set()
        self.join(10)
        left = self.producer.flush(flush_timeout)
        assert left == 0, f"{left} records still unanswered after {flush_timeout} s"


class TailingConsumer(threading.Thread):
    """A consumer reading every partition of a topic from the start while the test runs
    (no group): ``seen`` holds ``(partition, offset, value)`` of every record read."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.seen: list[tuple[int, int, bytes]] = []
        self._halt = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tailing",
                                  "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest",
                                  "topic.metadata.refresh.interval.ms": 1000,
                                  "logger": CLIENT_LOG})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                              for p in range(partitions)])

    def run(self) -> None:
        while not self._halt.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.seen.append((msg.partition(), msg.offset(), msg.value()))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        # librdkafka 2.16 can deadlock in close when one of its broker handles was
        # decommissioned (the broker left Metadata while killed) with an
        # OffsetForLeaderEpoch of this consumer in flight: a lock-order inversion between
        # its handle and partition locks, librdkafka issue #5476 (seen here, gdb). What
        # the consumer read is in ``seen`` already, so a close that hangs is left behind
        # in a daemon thread instead of hanging the test.
        closer = threading.Thread(target=self.consumer.close, daemon=True)
        closer.start()
        closer.join(CLOSE_TIMEOUT_S)
        if closer.is_alive():
            CLIENT_LOG.warning("the tailing consumer's close did not return in %.0f s "
                               "(librdkafka issue #5476); left behind", CLOSE_TIMEOUT_S)


def read_all(bootstrap: str, topic: str, partitions: int,
             at_least: dict[int, int] | None = None,
             timeout: float = 60.0) -> dict[int, dict[int, bytes]]:
    """Every record of every partition, up to each one's high watermark now:
    ``{partition: {offset: value}}``. With ``at_least`` (partition -> offset), first waits
    until each high watermark has reached it: a leader elected a moment ago (a preferred
    leader coming back) answers with its high watermark as a follower knew it, which can
    trail its predecessor's until the followers fetch from it, as in Kafka."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    leader_moved = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-all",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "logger": CLIENT_LOG})
    wanted = at_least or {}
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                          timeout=30)[1]
                        for p in range(partitions)}
            except KafkaException as e:
                # A leader moved since the client's metadata (a preferred leader taking
                # its partitions back): the old one answers NOT_LEADER, and librdkafka
                # hands that to the caller rather than asking the new leader.
                if e.args[0].code() not in leader_moved:
                    raise
                ends = {}
            if ends and all(ends[p] >= wanted.get(p, 0) for p in ends):
                break
            assert time.monotonic() < deadline, (
                f"high watermarks {ends} below {wanted} after {timeout:.0f} s")
            time.sleep(0.1)
        out: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while any(ends[p] and max(out[p], default=-1) < ends[p] - 1 for p in out):
            assert time.monotonic() < deadline, (
                f"read {[len(v) for v in out.values()]} of {ends} in {timeout:.0f} s")
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.offset() < ends[msg.partition()]:
                out[msg.partition()][msg.offset()] = msg.value()
        return out
    finally:
        consumer.close()
