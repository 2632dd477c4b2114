"""Broker configuration: a properties file, then the environment, then command-line flags.

Keys are Kafka's broker key names where Kafka has one (``log.dirs``, ``num.partitions``,
``socket.request.max.bytes``, ...). Later sources win: a value from a flag beats the same
key from ``PYBROKER_<KEY>`` (dots written as underscores, e.g. ``PYBROKER_LOG_DIRS``), which
beats the properties file, which beats the default below. Only known keys are read from the
environment, so unrelated ``PYBROKER_*`` variables (build switches) are never mistaken for
settings; unknown keys in a file are kept and logged, as Kafka does.

``BrokerConfig.explicit`` remembers the keys some source set (even to their default value),
so DescribeConfigs and CreateTopics can tell STATIC_BROKER_CONFIG from DEFAULT_CONFIG.

Over those static settings sit Kafka's two dynamic layers, set at run time through
AlterConfigs (``pybroker.broker.dynamic_config`` owns them): the cluster-wide default
and, above it, this broker's own. A ``BrokerConfig`` built with them
(:meth:`BrokerConfig.with_dynamic`) is the merged, typed view, and says where each value
comes from (:meth:`BrokerConfig.source`, :meth:`BrokerConfig.synonyms`): per-broker
dynamic > cluster default dynamic > static > default.

Broker defaults that are also topic configs (``log.retention.ms`` -> ``retention.ms``) are
mapped by :meth:`BrokerConfig.topic_defaults`; a topic's own overrides sit on top of them.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("pybroker.config")

_MIB = 1024 * 1024


class ConfigSource(enum.IntEnum):
    """Where a config value comes from: DescribeConfigs' ``config_source`` (Kafka's
    ``DescribeConfigsResponse.ConfigSource``). A lower number takes precedence."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


LONG_MIN, LONG_MAX = -2**63, 2**63 - 1


def parse_long(value: Any) -> int:
    """A Java long, refused with Kafka's message ("1.5", "abc" and 2**63 are not)."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError("Not a number of type LONG") from None
    if not LONG_MIN <= number <= LONG_MAX:
        raise ValueError("Not a number of type LONG")
    return number


# key -> (parser, default). None as a default means "not set".
SCHEMA: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "listeners": (str, None),
    "listen": (str, "127.0.0.1:9092"),
    "advertised.listeners": (str, None),
    # listeners and TLS (pybroker.net.listeners, pybroker.net.tls): Kafka's keys
    "listener.security.protocol.map": (
        str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    "inter.broker.listener.name": (str, None),
    "security.inter.broker.protocol": (str, "PLAINTEXT"),
    # Kafka: JKS. pybroker reads PEM only (a file holding the key and the chain).
    "ssl.keystore.type": (str, "PEM"),
    "ssl.keystore.location": (str, None),
    "ssl.keystore.password": (str, None),
    "ssl.key.password": (str, None),
    "ssl.truststore.type": (str, "PEM"),
    "ssl.truststore.location": (str, None),
    "ssl.truststore.password": (str, None),
    "ssl.protocol": (str, "TLSv1.3"),
    "ssl.enabled.protocols": (str, "TLSv1.2,TLSv1.3"),
    "ssl.cipher.suites": (str, ""),
    "ssl.client.auth": (str, "none"),
    "ssl.principal.mapping.rules": (str, "DEFAULT"),
    "ssl.endpoint.identification.algorithm": (str, "https"),
    # pybroker only: a TLS handshake not done by then is closed
    "ssl.handshake.timeout.ms": (int, 10_000),
    "log.dirs": (str, None),
    "log.dir": (str, "./data"),
    "broker.id": (int, 0),
    "node.id": (int, None),
    "broker.rack": (str, None),
    "cluster.id": (str, None),
    "num.partitions": (int, 1),
    "default.replication.factor": (int, 1),
    "auto.create.topics.enable": (parse_bool, True),
    "delete.topic.enable": (parse_bool, True),
    "max.request.partition.size.limit": (int, 2000),
    "log.retention.hours": (int, 168),
    "log.retention.minutes": (int, None),
    "log.retention.ms": (int, None),
    "log.retention.bytes": (int, -1),
    "log.retention.check.interval.ms": (int, 300_000),
    "log.segment.bytes": (int, 1024 * _MIB),
    "log.segment.delete.delay.ms": (int, 60_000),
    "log.roll.hours": (int, 168),
    "log.roll.ms": (int, None),
    "log.index.interval.bytes": (int, 4096),
    "log.flush.interval.messages": (int, None),
    "log.flush.interval.ms": (int, None),
    "log.flush.scheduler.interval.ms": (int, 1000),
    "log.cleanup.policy": (str, "delete"),
    # the log cleaner (pybroker.log.log_cleaner): Kafka's keys and defaults
    "log.cleaner.enable": (parse_bool, True),
    "log.cleaner.threads": (int, 1),
    "log.cleaner.dedupe.buffer.size": (int, 128 * _MIB),
    "log.cleaner.io.buffer.load.factor": (float, 0.9),
    "log.cleaner.io.buffer.size": (int, 512 * 1024),
    "log.cleaner.io.max.bytes.per.second": (float, 1.7976931348623157e308),
    "log.cleaner.backoff.ms": (int, 15_000),
    "log.cleaner.delete.retention.ms": (int, 86_400_000),
    "log.cleaner.min.compaction.lag.ms": (int, 0),
    "log.cleaner.max.compaction.lag.ms": (int, 2**63 - 1),
    "log.cleaner.min.cleanable.ratio": (float, 0.5),
    "log.message.timestamp.type": (str, "CreateTime"),
    "compression.type": (str, "producer"),
    "message.max.bytes": (int, 1_048_588),
    "min.insync.replicas": (int, 1),
    "socket.request.max.bytes": (int, 100 * _MIB),
    "socket.receive.buffer.bytes": (int, 64 * 1024),
    "fetch.max.bytes": (int, 55 * _MIB),
    # per connection (pybroker only): whole requests read ahead of the one being answered
    # (their bytes plus a per-request overhead); one large request is always read ahead
    "connection.queued.max.bytes": (int, 64 * 1024),
    # Kafka: -1 (no bound). pybroker bounds the bytes of all connections' requests
    # received and not yet answered; reading pauses past it (pybroker.net.request_memory).
    "queued.max.request.bytes": (int, 256 * _MIB),
    "connections.max.idle.ms": (int, 600_000),
    "max.connections": (int, 2**31 - 1),
    "max.connections.per.ip": (int, 2**31 - 1),
    "max.connections.per.ip.overrides": (str, ""),
    "max.connection.creation.rate": (int, 2**31 - 1),
    # client quotas' rate measure (pybroker.broker.quotas): samples kept, seconds each
    "quota.window.num": (int, 11),
    "quota.window.size.seconds": (int, 1),
    # controller_mutation_rate's token bucket holds rate x num x size seconds (KIP-599)
    "controller.quota.window.num": (int, 11),
    "controller.quota.window.size.seconds": (int, 1),
    # Kafka: threads that do all socket I/O (each a selector over many connections).
    # pybroker: threads that only send file regions and receive frames of 256 KiB and
    # more; everything else stays on the event loop. 0: all of it on the loop.
    "num.network.threads": (int, 3),
    # Kafka: threads that process requests. pybroker: threads that validate produced
    # batches too expensive for the event loop (compressed, or large); 0: all on the loop.
    "num.io.threads": (int, 1),
    "producer.id.block.size": (int, 1000),
    "producer.id.expiration.ms": (int, 86_400_000),
    "producer.id.expiration.check.interval.ms": (int, 600_000),
    # consumer groups (pybroker.coordinator.CoordinatorConfig reads these)
    "offsets.topic.num.partitions": (int, 50),
    "offsets.retention.minutes": (int, 7 * 24 * 60),
    "offsets.retention.check.interval.ms": (int, 600_000),
    "offsets.topic.segment.bytes": (int, 100 * _MIB),
    "group.initial.rebalance.delay.ms": (int, 3000),
    "group.min.session.timeout.ms": (int, 6000),
    "group.max.session.timeout.ms": (int, 1_800_000),
    "group.max.size": (int, 2**31 - 1),
    "offset.metadata.max.bytes": (int, 4096),
    # transactions (pybroker.txn): the topic __transaction_state and its coordinator
    "transaction.state.log.num.partitions": (int, 50),
    "transaction.state.log.segment.bytes": (int, 100 * _MIB),
    "transaction.state.log.replication.factor": (int, 3),
    "transaction.state.log.min.isr": (int, 2),
    "transaction.max.timeout.ms": (int, 900_000),
    "transactional.id.expiration.ms": (int, 604_800_000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (int, 10_000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (int, 3_600_000),
    "transaction.state.log.load.buffer.size": (int, 5 * _MIB),
    "transaction.partition.verification.enable": (parse_bool, True),
    # cluster mode (issue 7): unset zookeeper.connect keeps the single-node embedded mode
    "zookeeper.connect": (str, None),
    "zookeeper.session.timeout.ms": (int, 18_000),
    "zookeeper.connection.timeout.ms": (int, None),  # None: the session timeout
    # the controller's channel to this broker (pyzmq); port 0: any free port, published in
    # this broker's registration in ZooKeeper
    "control.listener": (str, None),
    "controller.socket.timeout.ms": (int, 30_000),
    # a stopping broker hands its leaderships to other in-sync replicas first, as Kafka's
    # KafkaServer.controlledShutdown (pybroker.cluster.controlled_shutdown)
    "controlled.shutdown.enable": (parse_bool, True),
    "controlled.shutdown.max.retries": (int, 3),
    "controlled.shutdown.retry.backoff.ms": (int, 5000),
    "replica.lag.time.max.ms": (int, 30_000),
    "replica.fetch.max.bytes": (int, 1 * _MIB),
    "replica.fetch.response.max.bytes": (int, 10 * _MIB),
    "replica.fetch.wait.max.ms": (int, 500),
    "replica.fetch.min.bytes": (int, 1),
    "replica.fetch.backoff.ms": (int, 1000),
    "replica.high.watermark.checkpoint.interval.ms": (int, 5000),
    # replication quotas (KIP-73, pybroker.repl.throttle): bytes a second of the replicas
    # the topics' *.replication.throttled.replicas name; the largest long is none
    "leader.replication.throttled.rate": (parse_long, LONG_MAX),
    "follower.replication.throttled.rate": (parse_long, LONG_MAX),
    "replication.quota.window.num": (int, 11),
    "replication.quota.window.size.seconds": (int, 1),
    "unclean.leader.election.enable": (parse_bool, False),
    "auto.leader.rebalance.enable": (parse_bool, True),
    "leader.imbalance.check.interval.seconds": (int, 300),
    "offsets.topic.replication.factor": (int, 3),
    "offsets.commit.timeout.ms": (int, 5000),
    "stats.file": (str, None),
    "stats.interval.ms": (int, 1000),
    "metrics.listener": (str, None),
    # ACLs (pybroker/security): checked when an authorizer is named
    "authorizer.class.name": (str, ""),
    "super.users": (str, ""),
    "allow.everyone.if.no.acl.found": (parse_bool, False),
    # SASL (pybroker/security/sasl.py): Kafka's keys and defaults
    "sasl.enabled.mechanisms": (str, "GSSAPI"),
    "sasl.mechanism.inter.broker.protocol": (str, "GSSAPI"),
    "sasl.jaas.config": (str, None),
    "connections.max.reauth.ms": (int, 0),
    "sasl.server.max.receive.size": (int, 524288),
    "connection.failed.authentication.delay.ms": (int, 100),
    "log.level": (str, "INFO"),
}

# broker key -> topic key, for the broker-wide defaults of topic configs
_TOPIC_DEFAULT_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.message.timestamp.type": "message.timestamp.type",
    "compression.type": "compression.type",
    "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
}

# most precise first: the first one set gives retention.ms
_RETENTION_KEYS = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_ROLL_KEYS = ("log.roll.ms", "log.roll.hours")
# a key's less specific spellings, for its synonyms
_SYNONYM_CHAINS = {key: chain[i:] for chain in (_RETENTION_KEYS, _ROLL_KEYS)
                   for i, key in enumerate(chain)}
# broker keys that set a topic config's default, each with its topic key
TOPIC_DEFAULT_KEYS: dict[str, str] = {
    **_TOPIC_DEFAULT_KEYS, **{key: "retention.ms" for key in _RETENTION_KEYS},
    **{key: "segment.ms" for key in _ROLL_KEYS}}

ENV_PREFIX = "PYBROKER_"
# Kafka's PASSWORD-type keys: never logged, described as sensitive with a null value
SENSITIVE_KEYS = frozenset({"ssl.key.password", "ssl.keystore.password",
                            "ssl.truststore.password", "sasl.jaas.config"})
# Kafka's per-listener settings: listener.name.<listener, lower case>.<key>
LISTENER_PREFIX = "listener.name."


def read_properties(path: str) -> dict[str, str]:
    """Java-style ``key=value`` (or ``key: value``) lines; ``#``/``!`` comments."""
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
            if sep < 0:
                props[line] = ""
                continue
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):].lower().replace("_", ".")
        if key in SCHEMA:
            out[key] = value
    return out


class BrokerConfig:
    """The merged, typed settings of one broker process. Read-only after construction: a
    dynamic change makes a new one (:meth:`with_dynamic`)."""

    def __init__(self, values: Mapping[str, Any] | None = None,
                 dynamic_default: Mapping[str, Any] | None = None,
                 dynamic_broker: Mapping[str, Any] | None = None) -> None:
        """``values``: the settings given explicitly (by a file, the environment or flags);
        ``dynamic_default`` and ``dynamic_broker``: the cluster-wide and this broker's
        dynamic settings, which win over them in that order; every other known key takes
        its default. A value that does not parse raises ValueError naming the key."""
        self._given = dict(values or {})
        self._values: dict[str, Any] = {k: default for k, (_, default) in SCHEMA.items()}
        self.extra: dict[str, str] = {}
        self.explicit: frozenset[str] = frozenset(k for k in self._given if k in SCHEMA)
        for key, value in self._given.items():
            self._set(key, value)
        self._static = {key: self._values[key] for key in self.explicit}
        self.dynamic_default = self._layer(dynamic_default)
        self.dynamic_broker = self._layer(dynamic_broker)

    def _layer(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """Apply a dynamic layer (known keys only); its values, parsed."""
        for key, value in (values or {}).items():
            if key not in SCHEMA:
                raise ValueError(f"config {key}: not a broker config")
            self._set(key, value)
        return {key: self._values[key] for key in values or ()}

    def _set(self, key: str, value: Any) -> None:
        if key not in SCHEMA:
            self.extra[key] = value
            return
        parser = SCHEMA[key][0]
        try:
            self._values[key] = None if value is None else parser(value)
        except ValueError as exc:
            raise ValueError(f"config {key}: {exc}") from None

    def with_dynamic(self, dynamic_default: Mapping[str, Any],
                     dynamic_broker: Mapping[str, Any]) -> BrokerConfig:
        """These static settings under new dynamic layers (ValueError for a bad value)."""
        return BrokerConfig(self._given, dynamic_default, dynamic_broker)

    @classmethod
    def load(cls, path: str | None = None, environ: Mapping[str, str] | None = None,
             overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
        merged: dict[str, Any] = {}
        if path:
            merged.update(read_properties(path))
        merged.update(env_overrides(os.environ if environ is None else environ))
        merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
        config = cls(merged)
        for key in config.extra:
            if not key.startswith(LISTENER_PREFIX):  # read by pybroker.net.tls and .sasl
                log.info("ignoring unknown config %s", key)
        return config

    def get(self, key: str) -> Any:
        return self._values[key]

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def is_set(self, key: str) -> bool:
        """Whether a static source set ``key`` (its value may equal the default)."""
        return key in self.explicit

    def source(self, key: str) -> ConfigSource:
        """The layer ``key``'s value comes from."""
        if key in self.dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if key in self.dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.explicit:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def layers(self, key: str) -> list[tuple[Any, ConfigSource]]:
        """(value, source) of each layer that sets ``key``, the one that wins first."""
        out = []
        for layer, source in ((self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self._static, ConfigSource.STATIC_BROKER_CONFIG)):
            if key in layer:
                out.append((layer[key], source))
        return out

    def synonyms(self, key: str) -> list[tuple[str, Any, ConfigSource]]:
        """Kafka's synonyms of a broker key, (name, value, source) with the one in force
        first: every layer that sets it, then those of its less specific spellings
        (``log.retention.ms`` -> ``.minutes`` -> ``.hours``), then the default of the
        least specific one that has one; none at all when neither a layer nor a default
        gives the key itself a value (as Kafka, even if a less specific spelling is set)."""
        if not self.layers(key) and SCHEMA[key][1] is None:
            return []
        chain = _SYNONYM_CHAINS.get(key, (key,))
        out = [(name, value, source) for name in chain for value, source in self.layers(name)]
        default_key = next((k for k in reversed(chain) if SCHEMA[k][1] is not None), None)
        if default_key is not None:
            out.append((default_key, SCHEMA[default_key][1], ConfigSource.DEFAULT_CONFIG))
        return out

    # derived settings ------------------------------------------------------------------

    @property
    def log_dirs(self) -> list[str]:
        """The log directories, in the order given (``log.dirs``, else ``log.dir``). A
        directory named twice raises ValueError, as Kafka refuses it."""
        dirs = [d.strip() for d in (self._values["log.dirs"] or self._values["log.dir"])
                .split(",") if d.strip()]
        if not dirs:
            raise ValueError("config log.dirs: no directory given")
        real = [os.path.realpath(d) for d in dirs]
        if len(set(real)) != len(real):
            raise ValueError(f"config log.dirs: a directory is named twice: {','.join(dirs)}")
        return dirs

    @property
    def data_dir(self) -> str:
        """The first log directory: the broker's own files live there beside its logs
        (topics.json, meta.properties, dynamic configs, ACLs, credentials, ...)."""
        return self.log_dirs[0]

    @property
    def broker_id(self) -> int:
        node = self._values["node.id"]
        return self._values["broker.id"] if node is None else node

    @property
    def retention_ms(self) -> int:
        for key, scale in zip(_RETENTION_KEYS, (1, 60_000, 3_600_000), strict=True):
            value = self._values[key]
            if value is not None:
                return value * scale if value >= 0 else -1
        return -1

    @property
    def segment_ms(self) -> int:
        roll_ms = self._values["log.roll.ms"]
        return roll_ms if roll_ms is not None else self._values["log.roll.hours"] * 3_600_000

    def topic_defaults(self) -> dict[str, Any]:
        """Broker-wide defaults of the topic configs, under the topic key names."""
        out = {topic_key: self._values[key] for key, topic_key in _TOPIC_DEFAULT_KEYS.items()
               if self._values[key] is not None}
        out["retention.ms"] = self.retention_ms
        out["segment.ms"] = self.segment_ms
        return out

    def topic_default_sources(self) -> dict[str, ConfigSource]:
        """Topic key -> where its broker-wide default comes from, for the topic keys whose
        default some layer set (the rest are Kafka's, DEFAULT_CONFIG): the best layer of
        the most specific broker key set, as Kafka's first synonym."""
        chains: list[tuple[tuple[str, ...], str]] = [
            ((key,), topic_key) for key, topic_key in _TOPIC_DEFAULT_KEYS.items()]
        chains += [(_RETENTION_KEYS, "retention.ms"), (_ROLL_KEYS, "segment.ms")]
        out = {}
        for broker_keys, topic_key in chains:
            for key in broker_keys:
                layers = self.layers(key)
                if layers:
                    out[topic_key] = layers[0][1]
                    break
        return out

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def changed(self) -> dict[str, Any]:
        """The settings that differ from their defaults (logged at start)."""
        return {k: v for k, v in self._values.items() if v != SCHEMA[k][1]}


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PLAINTEXT://HOST:PORT`` (``[v6]:PORT`` allowed) -> (host, port)."""
    address = text.strip()
    if "://" in address:
        address = address.split("://", 1)[1]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a HOST:PORT address: {text!r}")
    return host.strip("[]"), int(port)
