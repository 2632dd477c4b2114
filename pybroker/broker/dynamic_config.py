"""Dynamic broker configs: Kafka's ``DynamicBrokerConfig``, the settings AlterConfigs and
IncrementalAlterConfigs change on a running broker.

Two layers sit over the static settings (file, environment, flags): the cluster-wide
default (Kafka's entity ``<default>``, the BROKER resource named "") and this broker's own
(the entity and resource named by its id), which wins. ``DynamicBrokerConfig`` owns them
and the merged, typed view, ``current`` (a ``BrokerConfig``, which says where each value
comes from); a change makes a new view and calls the subscribers of the keys whose value
changed, so the new value applies at once:

- the broker-wide defaults of topic configs (``log.retention.ms``, ``message.max.bytes``,
  ...): every open log of a topic without its own override (``TopicManager.reconfigure``);
- the log cleaner's ``log.cleaner.*`` (``LogCleaner.reconfigure``);
- ``max.connections``, ``max.connections.per.ip`` and its overrides (``Server``), and
  ``max.connection.creation.rate`` (``ClientQuotas.set_connection_creation_rate``);
- ``transaction.partition.verification.enable`` (the produce path's ``txn_verifier``);
- ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
  (``ReplicationQuotas.reconfigure``, :mod:`pybroker.repl.throttle`).

Which keys are dynamic is Kafka 4.1's list (``DynamicBrokerConfig.AllDynamicConfigs``)
cut to what pybroker acts on; the rest, Kafka's "read-only" ones and pybroker's own among
them, are refused with Kafka's INVALID_REQUEST "Cannot update these configs dynamically".
Not dynamic here although Kafka allows it: ``num.network.threads`` and ``num.io.threads``
(pybroker's pools are sized once at start), ``listeners`` and
``producer.id.expiration.ms`` (each log's producer state takes it when it opens).

Where the layers are kept is the control plane's (``Metadata.follow_broker_configs`` and
``alter_broker_configs``): a file in the data dir on one node, ``/config/brokers/<id>``
and ``/config/brokers/<default>`` in ZooKeeper in a cluster, where every broker watches
the default. Values are kept as the text the client sent, as Kafka keeps them.

Not thread-safe: the event loop's (the ZooKeeper watch hops to it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from pybroker.broker import topic_config
from pybroker.config import SCHEMA, TOPIC_DEFAULT_KEYS, BrokerConfig
from pybroker.errors import InvalidConfigError, InvalidRequestError
from pybroker.net.server import parse_ip_overrides
from pybroker.repl.throttle import RATE_KEYS

log = logging.getLogger("pybroker.config")

DEFAULT_ENTITY = "<default>"  # Kafka's name of the cluster-wide default

# Kafka's read-only topic-default keys: the hour/minute spellings (the .ms ones are dynamic)
_STATIC_TOPIC_DEFAULTS = frozenset({"log.retention.hours", "log.retention.minutes",
                                    "log.roll.hours"})
TOPIC_DEFAULT_DYNAMIC_KEYS = frozenset(TOPIC_DEFAULT_KEYS) - _STATIC_TOPIC_DEFAULTS
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms"})
CONNECTION_KEYS = frozenset({"max.connections", "max.connections.per.ip",
                             "max.connections.per.ip.overrides"})
CONNECTION_RATE_KEY = "max.connection.creation.rate"
TXN_VERIFICATION_KEY = "transaction.partition.verification.enable"
DYNAMIC_KEYS = TOPIC_DEFAULT_DYNAMIC_KEYS | CLEANER_KEYS | CONNECTION_KEYS | RATE_KEYS | {
    CONNECTION_RATE_KEY,
    TXN_VERIFICATION_KEY}

# key -> least value Kafka accepts, for the dynamic keys whose topic config does not check it
_AT_LEAST: dict[str, float] = {
    "log.cleaner.threads": 1, "log.cleaner.io.buffer.size": 0,
    "log.cleaner.io.max.bytes.per.second": 0, "log.cleaner.backoff.ms": 0,
    "max.connections": 0, "max.connections.per.ip": 0, CONNECTION_RATE_KEY: 0,
    **dict.fromkeys(RATE_KEYS, 0)}
# a cleaner thread's offset map below this would end every round after a few keys
MIN_DEDUPE_BYTES_PER_THREAD = 1024 * 1024

Listener = Callable[[BrokerConfig], None]


def _refuse_static(keys: Collection[str]) -> None:
    static = sorted(k for k in keys if k not in DYNAMIC_KEYS)
    if static:
        raise InvalidRequestError(
            f"Cannot update these configs dynamically: Set({', '.join(static)})")


def _check_values(config: BrokerConfig, before: BrokerConfig | None,
                  keys: frozenset[str]) -> None:
    """What Kafka's validation of the reconfigured components refuses (INVALID_REQUEST);
    ``before``: the config now, whose cleaner thread count a change may at most double or
    halve (Kafka's ``LogCleaner.validateReconfiguration``; None: a stored layer, which
    Kafka loads without that rule)."""
    for key in keys:
        low = _AT_LEAST.get(key)
        if low is not None and config[key] < low:
            raise InvalidRequestError(f"Invalid value {config[key]} for configuration {key}: "
                                      f"Value must be at least {low:g}")
    threads = config["log.cleaner.threads"]
    now = threads if before is None else before["log.cleaner.threads"]
    if threads < now / 2 or threads > now * 2:
        raise InvalidRequestError(f"Log cleaner threads cannot be changed from {now} to "
                                  f"{threads}: at most double or half at a time")
    if config["log.cleaner.dedupe.buffer.size"] < MIN_DEDUPE_BYTES_PER_THREAD * threads:
        raise InvalidRequestError(
            f"log.cleaner.dedupe.buffer.size must be at least {MIN_DEDUPE_BYTES_PER_THREAD} "
            f"per cleaner thread ({threads} threads)")
    if not 0 < config["log.cleaner.io.buffer.load.factor"] <= 1:
        raise InvalidRequestError("log.cleaner.io.buffer.load.factor must be in (0, 1]")
    if "max.connections.per.ip.overrides" in keys:
        try:
            parse_ip_overrides(config["max.connections.per.ip.overrides"])
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from None
    if keys & TOPIC_DEFAULT_DYNAMIC_KEYS:
        try:  # the topic defaults as a whole, as a topic without overrides gets them
            topic_config.log_config(config.topic_defaults(), {})
        except InvalidConfigError as exc:
            raise InvalidRequestError(str(exc)) from None


class DynamicBrokerConfig:
    """See module doc."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self.current = static
        self._entity = str(static.broker_id)
        self._layers: dict[str, dict[str, str]] = {DEFAULT_ENTITY: {}, self._entity: {}}
        self._listeners: list[tuple[frozenset[str], Listener]] = []

    @property
    def entities(self) -> tuple[str, str]:
        """The entities this broker follows: the cluster default and its own."""
        return DEFAULT_ENTITY, self._entity

    def layer(self, entity: str) -> dict[str, str]:
        """The dynamic settings of ``entity`` (a copy), as the clients sent them."""
        return dict(self._layers[entity])

    def subscribe(self, keys: Collection[str], fn: Listener) -> None:
        """``fn(new config)`` after each change of the value (or its source) of one of
        ``keys``."""
        self._listeners.append((frozenset(keys), fn))

    def checked(self, entity: str, configs: Mapping[str, str],
                stored: bool = False) -> BrokerConfig:
        """The config ``entity`` would have with ``configs`` as its whole dynamic layer;
        InvalidRequestError (Kafka's code and text) for a key that is not dynamic or a
        value Kafka refuses (``stored``: a layer read back, not a change asked for)."""
        _refuse_static(configs)
        for key, value in configs.items():
            try:
                SCHEMA[key][0](value)
            except ValueError as exc:
                raise InvalidRequestError(
                    f"Invalid value {value} for configuration {key}: {exc}") from None
        layers = {**self._layers, entity: dict(configs)}
        config = self.static.with_dynamic(layers[DEFAULT_ENTITY], layers[self._entity])
        _check_values(config, None if stored else self.current, frozenset(configs))
        return config

    def update(self, entity: str, configs: Mapping[str, str], stored: bool = False) -> None:
        """Make ``configs`` (as ``checked`` accepts them) the whole dynamic layer of
        ``entity`` and apply it."""
        config = self.checked(entity, configs, stored)
        self._layers[entity] = dict(configs)
        before, self.current = self.current, config
        # (a source that changed counts: CreateTopics answers each topic default's source)
        changed = {k for k in DYNAMIC_KEYS
                   if before[k] != config[k] or before.source(k) != config.source(k)}
        if changed:
            log.info("dynamic broker config %s: %s", entity,
                     ", ".join(f"{k}={config[k]}" for k in sorted(changed)))
        for keys, fn in self._listeners:
            if keys & changed:
                try:
                    fn(config)
                except Exception:  # the others still apply theirs
                    log.exception("applying the dynamic broker config %s", entity)

    def load(self, entity: str, configs: Mapping[str, str]) -> None:
        """Apply ``entity``'s stored layer (at start, or another broker's change): a key
        that is not dynamic here or a value that fails is dropped with a warning, so a
        bad stored value never stops the broker."""
        kept = {k: str(v) for k, v in configs.items()}
        for key in list(kept):
            try:
                self.checked(entity, {key: kept[key]}, stored=True)
            except InvalidRequestError as exc:
                log.warning("ignoring the stored dynamic config %s=%s of %s: %s", key,
                            kept.pop(key), entity, exc)
        try:
            self.update(entity, kept, stored=True)
        except InvalidRequestError as exc:  # each is fine alone, not together
            log.warning("ignoring the stored dynamic configs of %s: %s", entity, exc)
