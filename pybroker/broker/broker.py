"""The broker process: storage, topics, producer ids, the server, and request dispatch.

Components, built here and nowhere else, reached by handlers as typed attributes
(``ctx.broker.<name>``): ``metadata`` (the control plane, :mod:`pybroker.metadata`: one
interface, a single node's or a ZooKeeper cluster's, chosen from the settings), ``logs``
(the LogManager), ``log_dir_mover`` (replicas moving between log directories),
``topics`` (the TopicManager), ``producer_ids``, ``group_coordinator``
and ``txn_coordinator`` (built by the metadata plane, which wires them to partition
leadership), ``markers`` (the transaction coordinator's ``MarkerWriter``),
``txn_verifier`` (the produce path's question to the coordinator, KIP-890),
``validation_pool`` (threads validating large produce batches; None with
``num.io.threads=0``), ``authorizer`` (ACLs, :mod:`pybroker.security`; None without
``authorizer.class.name``), ``credentials`` (the users' SCRAM credentials), ``quotas``
(the client quotas set and the rates measured against them, :mod:`pybroker.broker.quotas`)
and ``replication_quotas`` (the leader and follower replication throttles,
:mod:`pybroker.repl.throttle`).
Nothing is attached to the broker from elsewhere. ``config`` is the current settings,
static and dynamic (``dynamic_config``,
:mod:`pybroker.broker.dynamic_config`, which tells the topics, the log cleaner, the
server and the transaction verifier when a dynamic key they use changes).

Start-up: open the data dir (``meta.properties`` holds the cluster id and node id; the
control plane may have its own cluster id, ZooKeeper's, which wins), read the dynamic
broker configs the control plane keeps (so the logs load under them), load the ACLs
(with an authorizer, from the control plane's store) and the SCRAM credentials, recover the logs
(``LogManager.load``, logged with its duration; each log restores its producer state from
its own snapshots), open the topics (and once, after an upgrade, adopt the broker-wide
``producer-state.json`` of earlier versions), start the group coordinator and the
validation pool, bind the listener, start the control plane (a cluster member registers
now that its port answers) and log ``ready``. Shutdown
(SIGTERM/SIGINT): hand leadership over to other replicas while still serving (the
control plane's controlled shutdown), stop accepting, answer the coordinator's parked
long polls, wake long-polling fetches (so parked long polls answer now) and tell acks=all
appends still waiting for followers (whose fetches are no longer read), answer the
requests already received (at most ``SHUTDOWN_DRAIN_SECONDS``), stop the control plane
(a follower stops appending), the coordinator and the validation pool, close the
LogManager cleanly (each log snapshots its producer state; the manager writes the
clean-shutdown marker).

Dispatch of one frame: header -> handler by API key -> decode -> handle -> encode. A
request the broker cannot parse (garbage, unknown API key, a version outside what is
served, a malformed body) closes that connection, as Kafka's SocketServer does; ApiVersions
of an unknown version is answered in v0 with UNSUPPORTED_VERSION and the supported list
(KIP-511). These refusals and whole-request error answers are logged at INFO once per
client and API (``RefusalLog``). Handler bugs are logged and answered UNKNOWN_SERVER_ERROR.

Observability of the data plane: the native zero-copy counters (bytes sent with
sendfile/splice vs bytes sent from memory) and request counts are written as JSON to
``stats.file`` (default ``<data_dir>/broker-stats.json``) every ``stats.interval.ms`` when
they changed, on SIGUSR1 at once, and at shutdown; with them the log cleaner's state of
each compacted partition (``LogCleaner.states``: checkpoint, dirty ratio), which
``pybroker topic describe --data-dir`` reads (Kafka's protocol carries no cleaner state).
The same counters (``stats``), with per-topic, per-partition and per-group figures, are
served to Prometheus on ``metrics.listener`` (:mod:`pybroker.broker.metrics`, its own
thread; it asks the loop for each snapshot), which also serves the web console
(:mod:`pybroker.console`, a Kafka client of the cluster).

Not thread-safe: everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pybroker.broker import collector
from pybroker.broker import handlers as handler_registry
from pybroker.broker.dynamic_config import (
    CLEANER_KEYS,
    CONNECTION_KEYS,
    CONNECTION_RATE_KEY,
    TOPIC_DEFAULT_DYNAMIC_KEYS,
    TXN_VERIFICATION_KEY,
    DynamicBrokerConfig,
)
from pybroker.broker.files import STATS_FILE, read_json, write_json
from pybroker.broker.http_listener import HttpListener, metrics_handler
from pybroker.broker.leader_offsets import LeaderHighWatermarks
from pybroker.broker.log_dir_mover import LogDirMover
from pybroker.broker.producer_ids import ProducerIdManager
from pybroker.broker.quotas import REQUEST_PERCENTAGE, ClientQuotas, StepTimer
from pybroker.broker.refusals import RefusalLog
from pybroker.broker.request import Encoded, RequestContext
from pybroker.broker.topic_manager import TopicManager
from pybroker.broker.validation import ValidationPool
from pybroker.config import SENSITIVE_KEYS, BrokerConfig, parse_address
from pybroker.coordinator import CoordinatorConfig, GroupCoordinator
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.checkpoints import fsync_dir, replace_file
from pybroker.log.log_cleaner import CleanerConfig, LogCleaner
from pybroker.log.log_manager import LogManager
from pybroker.log.state_machine import replay
from pybroker.metadata import Metadata, metadata_for
from pybroker.net.connection import CloseConnection, Connection, ConnectionClosed
from pybroker.net.listeners import PLAINTEXT, advertised_endpoints, listeners_from
from pybroker.net.protocol import codec
from pybroker.net.protocol.codec import parse_request_header
from pybroker.net.protocol.table import APIS
from pybroker.net.server import Server
from pybroker.net.tls import ListenerSettings, ServerTls, client_context
from pybroker.repl import peer
from pybroker.repl.throttle import RATE_KEYS as REPLICATION_RATE_KEYS
from pybroker.repl.throttle import ReplicationQuotas
from pybroker.security.authorizer import AclAuthorizer, Authorizer
from pybroker.security.credentials import ScramCredentials
from pybroker.security.sasl import SaslServer, inter_broker_sasl, sasl_settings
from pybroker.txn.config import TxnConfig
from pybroker.txn.coordinator import TxnCoordinator
from pybroker.txn.markers import MarkerWriter
from pybroker.txn.verification import PartitionVerifier, ask_over

log = logging.getLogger("pybroker.broker")

API_VERSIONS = 18
# the API a request whose header does not parse is refused under, in the refusal log
UNREADABLE_HEADER = -1
# Requests at least this large that the generic codec decodes are decoded on a thread:
# the codec takes ~0.4 us a byte for messages of many small structs (a CreateTopics of
# 2,000 topics held the loop 35 ms); on a thread the loop takes the GIL back every
# switch interval and other clients are served meanwhile.
DECODE_OFF_LOOP_BYTES = 16 * 1024
# Earlier versions kept every partition's producer state in this one file; read once on
# upgrade (``_adopt_legacy_producer_state``), then removed.
LEGACY_PRODUCER_STATE_FILE = "producer-state.json"
META_FILE = "meta.properties"  # Kafka's, in every log directory
SHUTDOWN_DRAIN_SECONDS = 10.0
# the APIs whose responses carry throttle_time_ms (in some version: the codec leaves it
# out of the others)
THROTTLED_APIS = frozenset(key for key, api in APIS.items()
                           if any(f.name == "throttle_time_ms" for f in api.response))


class Broker:
    # Slots: a component attached from elsewhere (``setattr(broker, ...)``) fails at once;
    # the broker's parts are these attributes, built here.
    __slots__ = ("dynamic_config", "broker_id", "data_dir", "handlers", "cluster_id", "metadata",
                 "logs", "cleaner", "topics", "producer_ids", "group_coordinator", "txn_coordinator",
                 "markers", "txn_verifier", "validation_pool", "authorizer",
                 "credentials",
                 "server", "advertised", "listener_endpoints", "inter_broker_listener",
                 "shutting_down", "exit_code", "_tasks", "_logs_open",
                 "_coordinator_started", "_stopped", "_stats_path", "_writer", "_stats_seq",
                 "_stats_last", "requests_by_api", "http_listener", "refusals",
                 "leader_offsets", "quotas", "replication_quotas", "log_dir_mover")

    def __init__(self, config: BrokerConfig) -> None:
        self.dynamic_config = DynamicBrokerConfig(config)
        self.broker_id = config.broker_id
        self.data_dir = config.data_dir
        self.handlers = handler_registry.load_all()
        self.cluster_id = ""
        self.metadata: Metadata = metadata_for(self)
        # built by start(), in this order
        self.logs: LogManager
        self.topics: TopicManager
        self.producer_ids: ProducerIdManager
        self.group_coordinator: GroupCoordinator
        self.markers: MarkerWriter
        self.txn_coordinator: TxnCoordinator
        self.txn_verifier: PartitionVerifier
        self.validation_pool: ValidationPool | None = None
        # checks ACLs; None without authorizer.class.name: every request is allowed
        self.authorizer: Authorizer | None = None
        self.credentials = ScramCredentials()
        self.server: Server | None = None
        # what clients are told, per listener name (Kafka answers a client with the
        # endpoints of the listener it connected on), and the inter-broker listener's
        # name and address (what the cluster registration and peers use)
        self.listener_endpoints: dict[str, tuple[str, int]] = {}
        self.inter_broker_listener = PLAINTEXT
        self.advertised: tuple[str, int] = ("127.0.0.1", 0)
        self.shutting_down = False
        self.exit_code = 0  # the process's, once stopped: 1 when storage failed
        self.requests_by_api: collections.Counter[int] = collections.Counter()
        self.http_listener: HttpListener | None = None
        self.leader_offsets = LeaderHighWatermarks(self)
        self.refusals = RefusalLog()
        self.quotas: ClientQuotas
        self.replication_quotas: ReplicationQuotas
        self._tasks: list[asyncio.Task[None]] = []
        self._logs_open = False  # what shutdown has to stop: the parts start() got to
        self.cleaner: LogCleaner | None = None
        self.log_dir_mover: LogDirMover | None = None  # replicas moving between log dirs
        self._coordinator_started = False
        self._stopped = asyncio.Event()
        self._stats_path = config["stats.file"] or os.path.join(self.data_dir, STATS_FILE)
        # the broker's own periodic files (the stats file), written in order off the loop
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="pybroker-files")
        self._stats_seq = 0
        self._stats_last: tuple[int, ...] = ()

    @property
    def config(self) -> BrokerConfig:
        """The settings now: static, under the dynamic ones."""
        return self.dynamic_config.current

    # lifecycle ----------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Recover storage, bind the listeners; returns the first one's bound address."""
        started = time.monotonic()
        # settings errors (listeners, TLS stores) stop the start before recovery
        listeners = listeners_from(self.config)
        log_dirs = self.config.log_dirs
        tls = {listener.name: ServerTls(ListenerSettings(self.config, listener.name))
               for listener in listeners.bind if listener.tls}
        inter_broker = next(listener for listener in listeners.bind
                            if listener.name == listeners.inter_broker)
        peer.use_tls(client_context(ListenerSettings(self.config, inter_broker.name))
                     if inter_broker.tls else None)
        # (a single node has no peer: its only listener may be a SASL one without a user)
        peer.use_sasl(inter_broker_sasl(self.config, inter_broker.name)
                      if inter_broker.sasl and self.config["zookeeper.connect"] else None)
        sasl = {listener.name: SaslServer(listener.name, sasl_settings(self.config, listener.name),
                                          self.credentials, self.dispatch)
                for listener in listeners.bind if listener.sasl}
        changed = self.config.changed()
        if changed:
            log.info("settings: %s", ", ".join(
                f"{k}={'[hidden]' if k in SENSITIVE_KEYS else v}"
                for k, v in sorted(changed.items())))
        os.makedirs(self.data_dir, exist_ok=True)
        self.cluster_id = self._read_meta(await self.metadata.join(self._read_meta()))
        await self.metadata.follow_broker_configs(self.dynamic_config)
        if self.config["authorizer.class.name"]:
            self.authorizer = AclAuthorizer.from_config(
                self.config["authorizer.class.name"], self.metadata.acl_store(),
                self.config["super.users"], self.config["allow.everyone.if.no.acl.found"])
            await self.authorizer.start()
        await self.credentials.start(self.metadata.credential_store())
        self.logs = logs = LogManager(
            log_dirs,
            producer_id_expiration_ms=self.config["producer.id.expiration.ms"])
        logs.on_dir_failure = self._log_dir_failed
        self._logs_open = True
        self.topics = TopicManager(self.config, logs,
                                   leads_every_partition=self.metadata.leads_every_partition())
        self.dynamic_config.subscribe(TOPIC_DEFAULT_DYNAMIC_KEYS, self.topics.reconfigure)
        self.topics.read()
        self.replication_quotas = ReplicationQuotas(self.config, self.topics.overrides_of)
        self.dynamic_config.subscribe(REPLICATION_RATE_KEYS, self.replication_quotas.reconfigure)
        log.info("recovering logs in %s", ",".join(logs.log_dirs))
        logs.load(config_for=self.topics.config_for)
        self.topics.open()
        self.producer_ids = ProducerIdManager(
            self.data_dir, self.config["producer.id.block.size"],
            self.metadata.producer_id_source())
        self._adopt_legacy_producer_state()
        self.log_dir_mover = LogDirMover(logs)
        self.cleaner = LogCleaner(logs, CleanerConfig.from_settings(self.config.__getitem__),
                                  loop=asyncio.get_running_loop(),
                                  producers=self._last_producer_offsets)
        self.cleaner.start()
        cleaner = self.cleaner
        self.dynamic_config.subscribe(CLEANER_KEYS, lambda new: cleaner.reconfigure(
            CleanerConfig.from_settings(new.__getitem__)))
        self.group_coordinator = self.metadata.group_coordinator(
            CoordinatorConfig.from_config(self.config))
        self.markers = MarkerWriter(self)
        self.txn_coordinator = self.metadata.transaction_coordinator(
            TxnConfig.from_config(self.config), self.producer_ids.new_id_async,
            self.markers.write)
        txn_config = self.txn_coordinator.config
        self.txn_verifier = PartitionVerifier(
            self.broker_id, self.txn_coordinator, self.metadata.coordinator_for_transaction,
            ask_over(self.markers.peers), txn_config.partition_verification)
        verifier = self.txn_verifier

        def verify_partitions(new: BrokerConfig) -> None:
            verifier.enabled = new[TXN_VERIFICATION_KEY]
        self.dynamic_config.subscribe({TXN_VERIFICATION_KEY}, verify_partitions)
        self._coordinator_started = True
        await self.group_coordinator.start()
        await self.txn_coordinator.start()
        threads = self.config["num.io.threads"]
        self.validation_pool = ValidationPool(threads) if threads > 0 else None
        log.info("recovery done: %d topics, %d partitions in %.3f s",
                 len(self.topics.topics()), len(self.topics.partitions()),
                 time.monotonic() - started)
        self.quotas = quotas = ClientQuotas(
            self.config["quota.window.num"], self.config["quota.window.size.seconds"],
            self.config["controller.quota.window.num"],
            self.config["controller.quota.window.size.seconds"])
        quotas.set_connection_creation_rate(self.config[CONNECTION_RATE_KEY])
        self.dynamic_config.subscribe({CONNECTION_RATE_KEY}, lambda new: (
            quotas.set_connection_creation_rate(new[CONNECTION_RATE_KEY])))
        await self.metadata.follow_client_quotas(quotas)
        collector.freeze_long_lived()
        config = self.config
        self.server = Server(
            self.dispatch, listeners.bind, tls=tls,
            on_accept={name: sasl_server.accept
                          for name, sasl_server in sasl.items()},
            max_request_bytes=config["socket.request.max.bytes"],
            max_queued_bytes=config["connection.queued.max.bytes"],
            queued_max_request_bytes=config["queued.max.request.bytes"],
            max_connections=config["max.connections"],
            max_connections_per_ip=config["max.connections.per.ip"],
            max_connections_per_ip_overrides=config["max.connections.per.ip.overrides"],
            connections_max_idle_ms=config["connections.max.idle.ms"],
            network_threads=config["num.network.threads"],
            connection_rate=self.quotas.record_connection,
            accept_rate=lambda listener: 0 if listener.name == inter_broker.name
            else quotas.record_accepted())
        bound = self.server.start()
        server = self.server
        self.dynamic_config.subscribe(CONNECTION_KEYS, lambda new: server.set_connection_limits(
            new["max.connections"], new["max.connections.per.ip"],
            new["max.connections.per.ip.overrides"]))
        self.listener_endpoints = advertised_endpoints(config, bound)
        self.inter_broker_listener = listeners.inter_broker
        self.advertised = self.listener_endpoints[listeners.inter_broker]
        await self.metadata.start()
        if config["metrics.listener"]:
            from pybroker.client.security import listener_client_settings
            from pybroker.console import Console  # (only a broker with the listener needs it)

            # the console is a client of a PLAINTEXT listener when there is one (as any
            # client, ANONYMOUS); else of the inter-broker listener, as the broker itself
            # (its certificates, its inter-broker SASL user)
            console_listener = next((listener for listener in listeners.bind
                                     if listener.security_protocol == PLAINTEXT),
                                    inter_broker)
            host, port = self.listener_endpoints[console_listener.name]
            try:
                client_settings = listener_client_settings(config, console_listener)
            except ValueError as exc:  # a single node's SASL listener without its own user
                log.warning("console: cannot authenticate to listener %s (%s): it will "
                            "not reach the cluster", console_listener.name, exc)
                client_settings = {}
            console = Console(f"{host}:{port}", client_settings=client_settings)
            self.http_listener = HttpListener(*parse_address(config["metrics.listener"]),
                                              {"/metrics": metrics_handler(self)}, console.handle)
            self.http_listener.start()
            log.info("metrics: serving http://%s:%d/metrics", *self.http_listener.address)
            log.info("console: serving http://%s:%d/", *self.http_listener.address)
        self._tasks = [asyncio.create_task(t) for t in (
            self._every(self.config["log.retention.check.interval.ms"], self._retention),
            self._every(self.config["log.flush.scheduler.interval.ms"], logs.flush_due),
            self._every(self.config["stats.interval.ms"], self.write_stats),
            self._every(self.config["producer.id.expiration.check.interval.ms"],
                        logs.expire_producers),
            self._every(60_000, collector.thaw_if_due),
            self._every(60_000, self.quotas.expire_idle),
        )]
        return bound[listeners.bind[0].name]

    def _read_meta(self, cluster_id: str | None = None) -> str:
        """Cluster id from ``meta.properties`` (created on first start), Kafka's file name,
        in every log directory; ``cluster_id``: the control plane's (ZooKeeper's), which
        wins. Directories naming different clusters stop the start, as Kafka's
        InconsistentClusterIdException: they hold another cluster's data."""
        from pybroker.config import read_properties

        found = {path: read_properties(path) for path in
                 (os.path.join(d, META_FILE) for d in self.config.log_dirs)
                 if os.path.exists(path)}
        stored = {props["cluster.id"] for props in found.values() if "cluster.id" in props}
        if len(stored) > 1:
            raise ValueError(f"the log directories belong to different clusters: "
                             f"{', '.join(sorted(stored))}")
        cluster_id = (cluster_id or self.config["cluster.id"] or next(iter(stored), None)
                      or _new_cluster_id())
        for log_dir in self.config.log_dirs:
            path = os.path.join(log_dir, META_FILE)
            props = found.get(path, {})
            if props.get("cluster.id") == cluster_id and \
                    props.get("node.id") == str(self.broker_id):
                continue
            try:
                os.makedirs(log_dir, exist_ok=True)
                replace_file(path, f"version=1\ncluster.id={cluster_id}\n"
                                   f"node.id={self.broker_id}\n")
            except OSError:
                if log_dir == self.data_dir:
                    raise
                # (the LogManager takes it offline and says so)
        return cluster_id

    def _log_dir_failed(self, log_dir: str, lost: list[tuple[str, int]]) -> None:
        """A log directory failed (``LogManager.fail_dir``): its partitions go offline and
        the control plane hears of it; the broker goes on with the other directories.
        The first one holds the broker's own files (topics, producer ids, ...), which it
        cannot keep without: then, or with no directory left, the broker stops."""
        partitions = self.topics.take_offline(lost)
        if not self.shutting_down:
            self.metadata.log_dir_failed(partitions)
        if log_dir == self.logs.data_dir or not self.logs.online_dirs():
            log.error("log directory %s failed and %s: stopping the broker", log_dir,
                      "it holds the broker's own files" if log_dir == self.logs.data_dir
                      else "no log directory is left")
            self.exit_code = 1  # (as Kafka halts: a supervisor restarts on failure)
            self.request_stop()

    async def _every(self, interval_ms: int, fn: Any) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    def _retention(self) -> None:
        deleted = self.logs.run_retention()
        if deleted:
            log.info("retention deleted %s segments", deleted)

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig)
        loop.add_signal_handler(signal.SIGUSR1, self.write_stats, True)

    def request_stop(self, sig: int | None = None) -> None:
        if not self._stopped.is_set():
            log.info("received %s, shutting down",
                     signal.Signals(sig).name if sig else "stop request")
            self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _quietly(self, what: str, step: Callable[[], Awaitable[None]]) -> None:
        """A shutdown step whose failure is logged and does not stop the next ones."""
        try:
            await step()
        except Exception:
            log.exception("stopping the %s failed", what)

    async def shutdown(self) -> None:
        """Hand leadership over, stop accepting, answer in-flight requests, flush and
        close storage cleanly."""
        started = time.monotonic()
        # while every listener still serves: clients of the partitions moved are told
        # NOT_LEADER_OR_FOLLOWER and go to the new leaders before this one stops
        await self._quietly("controlled shutdown", self.metadata.controlled_shutdown)
        self.shutting_down = True
        for task in self._tasks:
            task.cancel()
        if self.http_listener is not None:
            # off the loop: it waits for the HTTP thread's poll, and a scrape under way
            # may still ask the loop for its snapshot
            await asyncio.to_thread(self.http_listener.stop)
        await self._quietly("group lag's leader offsets", self.leader_offsets.close)
        if self.server is not None:
            self.server.stop_accepting()
            self.topics.stopping = True  # a topic being created: its other logs come at start
            if self._coordinator_started:
                # its parked joins and syncs answer now, or they would hold the drain up
                self.group_coordinator.begin_shutdown()
            for partition in self.topics.partitions():
                partition.wake()  # long-polling fetches answer now
                partition.stop_waiting_for_replicas()  # and acks=all appends
            await self.server.drain(SHUTDOWN_DRAIN_SECONDS)
        # the fetchers stop appending before the logs close
        if self.authorizer is not None:
            await self._quietly("authorizer", self.authorizer.stop)
        await self._quietly("credentials", self.credentials.stop)
        await self._quietly("control plane", self.metadata.stop)
        if self._coordinator_started:
            await self._quietly("group coordinator", self.group_coordinator.stop)
            await self._quietly("transaction coordinator", self.txn_coordinator.stop)
            await self._quietly("marker writer", self.markers.close)
        if self.validation_pool is not None:
            self.validation_pool.close()
        self._writer.shutdown(wait=True)
        if self.cleaner is not None:
            self.cleaner.stop()
        if self.log_dir_mover is not None:
            await self._quietly("log dir mover", self.log_dir_mover.close)
        if self._logs_open:  # (else a start refused its settings: nothing to write, or where)
            # (while the logs are open: the cleaner's state)
            self.write_stats(force=True, in_thread=False)
            self.logs.close(clean=True)
        stats = self.stats()
        log.info("served %d requests; sent %d bytes zero-copy and %d from memory (%.2f%% "
                 "zero-copy)", stats["requests"], stats["zero_copy_bytes"],
                 stats["copied_bytes"], 100 * stats["zero_copy_fraction"])
        log.info("shutdown complete in %.3f s", time.monotonic() - started)

    # producer state of earlier versions ------------------------------------------------

    def _adopt_legacy_producer_state(self) -> None:
        """Versions before per-partition snapshots wrote every partition's producer state
        to one file (at shutdown and every minute). An operator upgrading expects the
        idempotent producers of a rolling upgrade to keep their duplicate detection, so
        the file is read once: a partition whose log has no snapshot yet takes its entry
        if the log still holds the offset it describes with the same leader epoch there
        (a replica that truncated below it since holds other batches), replays the
        batches after it and snapshots at its end. Then the file is removed."""
        path = os.path.join(self.data_dir, LEGACY_PRODUCER_STATE_FILE)
        try:
            legacy = read_json(path)
        except ValueError as exc:  # torn: the logs' own replay is all there is
            log.warning("%s is unreadable, not used: %s", LEGACY_PRODUCER_STATE_FILE, exc)
            legacy = {}
        if legacy is None:
            return
        adopted = 0
        for p in self.topics.partitions():
            plog = p.log
            entry = legacy.get(f"{p.topic}-{p.index}") if isinstance(legacy, dict) else None
            if entry is None or plog is None or plog.producer_state.snapshot_offsets():
                continue
            try:
                offset = entry["offset"]
                if not plog.log_start_offset <= offset <= plog.log_end_offset or (
                        "epoch" in entry
                        and plog.leader_epoch_cache.epoch_at(offset - 1) != entry["epoch"]):
                    log.warning("%s-%d: the producer state of %s describes offset %d, which "
                                "the log no longer holds as it was; not used", p.topic,
                                p.index, LEGACY_PRODUCER_STATE_FILE, offset)
                    continue
                plog.producer_state.restore_legacy(entry["producers"])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s-%d: malformed entry in %s, not used: %s", p.topic, p.index,
                            LEGACY_PRODUCER_STATE_FILE, exc)
                continue
            replay(plog.producer_state, plog.producer_batches(offset), int(time.time() * 1000))
            plog.snapshot_state()
            adopted += 1
        os.unlink(path)
        fsync_dir(self.data_dir)
        log.info("adopted the producer state of %d partitions from %s (now removed)",
                 adopted, LEGACY_PRODUCER_STATE_FILE)

    def _last_producer_offsets(self, topic: str, index: int) -> dict[int, int]:
        """Producer id -> offset of its last batch in a partition: the log cleaner keeps
        those batches (Kafka's ``lastRecordsOfActiveProducers``)."""
        producers = self.topics.partition(topic, index).producers.producers
        return {pid: entry.batches[-1].last_offset
                for pid, entry in producers.items() if entry.batches}

    # stats ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        from pybroker._native.zerocopy import residency_implementation, zerocopy_counters

        counters = zerocopy_counters()
        zero, copied = counters["zero_copy_bytes"], counters["copied_bytes"]
        return {
            "pid": os.getpid(),
            "broker_id": self.broker_id,
            "time": time.time(),
            "zero_copy_bytes": zero,
            "copied_bytes": copied,
            "zero_copy_fraction": zero / (zero + copied) if zero + copied else 0.0,
            "cold_regions": counters["cold_regions"],
            "residency": residency_implementation(),
            "requests": sum(self.requests_by_api.values()),
            "requests_by_api": dict(self.requests_by_api),
            "connections": len(self.server.connections) if self.server else 0,
            "accepted": self.server.accepted if self.server else 0,
            "refused": self.server.refused if self.server else 0,
            "request_bytes": self.server.memory.used if self.server else 0,
            "request_bytes_peak": self.server.memory.peak if self.server else 0,
        }

    def write_stats(self, force: bool = False, in_thread: bool = True) -> None:
        """Write the stats file if anything changed, or ``force`` (SIGUSR1, shutdown).
        The snapshot is taken here; the file is replaced by the files thread unless
        ``in_thread`` is False (shutdown, after that thread ended): replacing it frees
        the old file's blocks, which on a file system mounted with ``discard`` waits for
        the device, and a busy device held the event loop there once a second."""
        stats = self.stats()
        cleaner = self.cleaner
        key = (stats["zero_copy_bytes"], stats["copied_bytes"], stats["requests"],
               stats["connections"], cleaner.cleanings if cleaner else 0)
        self._stats_seq += 1
        if key == self._stats_last and not force:
            return
        self._stats_last = key
        stats["seq"] = self._stats_seq
        # (only when written: it walks the segments of every compacted log)
        stats["cleaner"] = [dataclasses.asdict(state) for state in cleaner.states()] \
            if cleaner else []
        if in_thread:
            self._writer.submit(_write_stats_file, self._stats_path, stats)
        else:
            _write_stats_file(self._stats_path, stats)

    # dispatch ---------------------------------------------------------------------------

    async def dispatch(self, conn: Connection, frame: bytearray) -> Any:
        """Handle one request frame; returns the response parts, or None for no response."""
        try:
            api_key, version, correlation_id, client_id, header_size = \
                parse_request_header(frame)
        except KafkaError as exc:
            raise self._refuse(conn, None, UNREADABLE_HEADER,
                               f"unreadable request header: {exc}") from None
        self.requests_by_api[api_key] += 1
        entry = self.handlers.get(api_key)
        if entry is None:
            raise self._refuse(conn, client_id, api_key, f"unknown API key {api_key}")
        low, high = entry.versions
        if not low <= version <= high:
            refusal = self._refuse(conn, client_id, api_key,
                                   f"unsupported version {version} (served: {low}-{high})")
            if api_key == API_VERSIONS:
                return self._encode(api_key, 0, correlation_id, self.api_versions_body(
                    ErrorCode.UNSUPPORTED_VERSION))
            raise refusal
        try:
            if entry.decode is not None:
                request = entry.decode(frame, header_size, version)
            elif len(frame) < DECODE_OFF_LOOP_BYTES:
                request = codec.decode_request(api_key, version, frame, header_size)
            else:  # the frame stays the connection's until this request is answered
                request = await asyncio.get_running_loop().run_in_executor(
                    None, codec.decode_request, api_key, version, frame, header_size)
        except KafkaError as exc:
            raise self._refuse(conn, client_id, api_key, f"malformed v{version}: {exc}") \
                from None
        ctx = RequestContext(self, api_key, version, correlation_id, client_id,
                             conn.peer, frame, conn)
        timer = None
        try:
            if self.quotas.requests_active:
                timer = StepTimer(entry.fn(ctx, request))
                body = await timer
            else:
                body = await entry.fn(ctx, request)
        except (CloseConnection, ConnectionClosed):
            raise
        except KafkaError as exc:
            self._refuse(conn, client_id, api_key,
                         f"v{version} answered {ErrorCode(exc.code).name}: {exc}")
            body = self._error_body(ctx, exc.code, str(exc))
        except Exception:
            log.exception("bug handling %s v%d from %s", codec.api_name(api_key), version,
                          conn.peer)
            body = self._error_body(ctx, ErrorCode.UNKNOWN_SERVER_ERROR, "")
        if timer is not None and not ctx.quota_exempt:
            # Kafka's request quota: handler time as a percentage of one thread
            throttle_ms = ctx.record_quota(REQUEST_PERCENTAGE, timer.seconds * 100)
            if throttle_ms and isinstance(body, dict) and api_key in THROTTLED_APIS:
                body["throttle_time_ms"] = max(body.get("throttle_time_ms", 0), throttle_ms)
        if body is None:
            return None
        if isinstance(body, Encoded):
            return body.parts
        return self._encode(api_key, version, correlation_id, body)

    def _refuse(self, conn: Connection, client_id: str | None, api_key: int,
                reason: str) -> CloseConnection:
        """Report a refused request (once per client and API, ``RefusalLog``); returns the
        exception that closes the connection, for the refusals that close it."""
        api = codec.api_name(api_key) or f"API key {api_key}"
        self.refusals.refused(client_id, conn.peer, api_key, api, reason)
        return CloseConnection(f"{api} from client {client_id!r}: {reason}", reported=True)

    @staticmethod
    def _encode(api_key: int, version: int, correlation_id: int, body: dict) -> Any:
        out = codec.encode_response(api_key, version, correlation_id, body)
        return (out,) if isinstance(out, bytes) else out

    @staticmethod
    def _error_body(ctx: RequestContext, code: int, message: str) -> dict:
        """A whole-request error, for APIs whose response has a top-level error_code
        (with the message where the response has an error_message)."""
        body = codec.error_response(ctx.api_key, ctx.api_version, code, message)
        if body is not None:
            return body
        raise CloseConnection(f"{codec.api_name(ctx.api_key)} failed with "
                              f"{ErrorCode(code).name} {message}")

    def api_versions_body(self, error: int = ErrorCode.NONE) -> dict:
        spec = {key: (low, high) for key, low, high in codec.supported_versions()}
        keys = []
        for key, entry in sorted(self.handlers.items()):
            low, high = entry.versions
            if key in spec:
                low, high = max(low, spec[key][0]), min(high, spec[key][1])
            keys.append({"api_key": key, "min_version": low, "max_version": high})
        return {"error_code": int(error), "api_keys": keys, "throttle_time_ms": 0}


def _write_stats_file(path: str, stats: dict[str, Any]) -> None:
    try:
        write_json(path, stats, durable=False)
    except OSError as exc:  # (the first log directory failed: its own error says so)
        log.error("writing the stats file failed: %s", exc)


def _new_cluster_id() -> str:
    """22 characters of URL-safe base64 of a random UUID, like Kafka's cluster ids."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
