"""DescribeConfigs (key 32), AlterConfigs (key 33) and IncrementalAlterConfigs (key 44).

Resources, as Kafka numbers them: TOPIC (2), BROKER (4), BROKER_LOGGER (8). Every answer
is per resource; a resource named twice in one alter request gets INVALID_REQUEST.

Topic configs. DescribeConfigs lists every topic config with its effective value and
where it comes from, as Kafka reports it (``config_source``): DYNAMIC_TOPIC_CONFIG (1)
for the topic's override, else the layer of the broker setting that supplies it:
DYNAMIC_BROKER_CONFIG (2) or DYNAMIC_DEFAULT_BROKER_CONFIG (3) set by AlterConfigs,
STATIC_BROKER_CONFIG (4) from server properties, environment or flag, DEFAULT_CONFIG (5)
otherwise; v0 says the same with ``is_default``. ``include_synonyms`` adds the chain Kafka
shows: the override, then each broker key (``log.retention.ms``, ``log.retention.hours``,
...) with every layer that sets it, then the default. ``config_type`` and
``documentation`` from v3. Topic configs are never read-only.

AlterConfigs replaces the topic's whole override set with the given configs (what is not
named goes back to its default); IncrementalAlterConfigs applies SET, DELETE, APPEND and
SUBTRACT (the last two only to list configs, ``cleanup.policy`` and the
``*.replication.throttled.replicas``) to the current
overrides. The result is validated as a whole (INVALID_CONFIG with the reason), then
persisted and handed to the live logs by the control plane
(``metadata.alter_topic_configs``: ``TopicManager.alter_configs``, and in a cluster
ZooKeeper first, whose change notification reaches the other brokers); ``validate_only``
stops after the checks. Any broker answers for any topic, holding a replica of it or not
(``metadata.topic_configs``), as Kafka's do: clients send these to any broker.

Broker configs: the resource named by this broker's id lists every broker key with its
value, source and synonyms (per-broker dynamic, cluster default dynamic, static,
default: ``BrokerConfig.synonyms``), ``read_only`` false for the keys that are dynamic
here (``pybroker.broker.dynamic_config``); the resource named "" lists the cluster-wide
dynamic defaults that are set, as Kafka does. Another broker's id is INVALID_REQUEST
(clients send a broker's resource to that broker). AlterConfigs replaces the whole
dynamic set of the resource, IncrementalAlterConfigs applies SET/DELETE (APPEND/SUBTRACT
to ``log.cleanup.policy``) to it; a key that is not dynamic, or a value Kafka refuses, is
INVALID_REQUEST with Kafka's message. The control plane keeps it
(``metadata.alter_broker_configs``) and ``DynamicBrokerConfig`` applies it at once.

Broker loggers are the broker's Python loggers (``pybroker.*``); their levels can be
read and set at run time, like Kafka's log4j loggers.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from pybroker import config as broker_config
from pybroker.broker import topic_config
from pybroker.broker.dynamic_config import DEFAULT_ENTITY, DYNAMIC_KEYS
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import validate_topic_name
from pybroker.config import ConfigSource
from pybroker.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
)
from pybroker.net.protocol.typed import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsRequestResource,
    AlterConfigsResponse,
    AlterConfigsResponseResourceResponse,
    DescribeConfigsRequest,
    DescribeConfigsRequestResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseResourceResult,
    DescribeConfigsResponseResult,
    DescribeConfigsResponseSynonym,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

# AlterConfigs and IncrementalAlterConfigs differ only in their configs' operation field.
AlterRequest = AlterConfigsRequest | IncrementalAlterConfigsRequest
AlterResource = AlterConfigsRequestResource | IncrementalAlterConfigsRequestAlterConfigsResource
AlterableConfig = AlterConfigsRequestAlterableConfig | IncrementalAlterConfigsRequestAlterableConfig

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8

# DescribeConfigsResponse.ConfigType
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
PASSWORD = 9
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# topic key -> (type, broker keys that set its default, most specific first, documentation)
TOPIC_CONFIG_INFO: dict[str, tuple[int, tuple[str, ...], str]] = {
    "cleanup.policy": (LIST, ("log.cleanup.policy",),
                       "delete (drop old segments by retention) and/or compact"),
    "compression.type": (STRING, ("compression.type",),
                         "producer keeps the producer's codec; pybroker never recompresses"),
    "delete.retention.ms": (LONG, ("log.cleaner.delete.retention.ms",),
                            "how long delete tombstones are kept on compacted topics"),
    "file.delete.delay.ms": (LONG, ("log.segment.delete.delay.ms",),
                             "wait before a deleted segment's files are removed"),
    "flush.messages": (LONG, ("log.flush.interval.messages",),
                       "fsync after this many messages (default: leave it to the OS)"),
    "flush.ms": (LONG, ("log.flush.interval.ms",),
                 "fsync when the oldest unflushed data is this old"),
    "follower.replication.throttled.replicas": (
        LIST, (), "replicas whose follower side the replication throttle bounds"),
    "index.interval.bytes": (INT, ("log.index.interval.bytes",),
                             "bytes of log between two offset index entries"),
    "leader.replication.throttled.replicas": (
        LIST, (), "replicas whose leader side the replication throttle bounds"),
    "max.compaction.lag.ms": (LONG, ("log.cleaner.max.compaction.lag.ms",),
                              "longest a record stays uncompacted"),
    "max.message.bytes": (INT, ("message.max.bytes",),
                          "largest record batch the topic accepts"),
    "message.downconversion.enable": (BOOLEAN, ("log.message.downconversion.enable",),
                                      "down-convert for old fetch versions"),
    "message.timestamp.after.max.ms": (LONG, ("log.message.timestamp.after.max.ms",),
                                       "how far ahead of the broker a CreateTime may be"),
    "message.timestamp.before.max.ms": (LONG, ("log.message.timestamp.before.max.ms",),
                                        "how far behind the broker a CreateTime may be"),
    "message.timestamp.difference.max.ms": (
        LONG, ("log.message.timestamp.difference.max.ms",),
        "deprecated: both bounds of a CreateTime at once"),
    "message.timestamp.type": (STRING, ("log.message.timestamp.type",),
                               "CreateTime (the producer's) or LogAppendTime (the broker's)"),
    "min.cleanable.dirty.ratio": (DOUBLE, ("log.cleaner.min.cleanable.ratio",),
                                  "dirty share of a log that triggers compaction"),
    "min.compaction.lag.ms": (LONG, ("log.cleaner.min.compaction.lag.ms",),
                              "shortest a record stays uncompacted"),
    "min.insync.replicas": (INT, ("min.insync.replicas",),
                            "replicas that must acknowledge an acks=all write"),
    "preallocate": (BOOLEAN, ("log.preallocate",), "preallocate new segment files"),
    "retention.bytes": (LONG, ("log.retention.bytes",),
                        "largest a partition grows before old segments go (-1: no limit)"),
    "retention.ms": (LONG, ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                     "how long segments are kept (-1: forever)"),
    "segment.bytes": (INT, ("log.segment.bytes",), "size at which a segment file rolls"),
    "segment.index.bytes": (INT, ("log.index.size.max.bytes",),
                            "size of each segment's offset and time index files"),
    "segment.jitter.ms": (LONG, ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                          "random jitter subtracted from segment.ms"),
    "segment.ms": (LONG, ("log.roll.ms", "log.roll.hours"),
                   "age at which a segment rolls even if not full"),
    "unclean.leader.election.enable": (BOOLEAN, ("unclean.leader.election.enable",),
                                       "allow an out-of-sync replica to become leader"),
}
LIST_KEYS = frozenset(k for k, (kind, _, _) in TOPIC_CONFIG_INFO.items() if kind == LIST)
BROKER_LIST_KEYS = frozenset(broker_key for k in LIST_KEYS for broker_key in TOPIC_CONFIG_INFO[k][1])
_LOGGER_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL")


# describing ---------------------------------------------------------------------------------


def _default_synonym(key: str, broker_keys: tuple[str, ...]) -> DescribeConfigsResponseSynonym:
    """Kafka names the default after the broker key that carries it (``log.retention.hours``
    168 for ``retention.ms``): the least specific one with a default of its own."""
    for broker_key in reversed(broker_keys):
        default = broker_config.SCHEMA.get(broker_key, (None, None))[1]
        if default is not None:
            return {"name": broker_key, "value": _text(default),
                    "source": ConfigSource.DEFAULT_CONFIG}
    default = topic_config.TOPIC_CONFIGS[key][1] if key in topic_config.TOPIC_CONFIGS else None
    return {"name": broker_keys[0] if broker_keys else key, "value": default,
            "source": ConfigSource.DEFAULT_CONFIG}


def _text(value: object) -> str | None:
    """A config value as Kafka writes it: booleans in lower case, unset as null."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _entry(name: str, value: object, source: int, kind: int, doc: str | None,
           synonyms: list[DescribeConfigsResponseSynonym],
           read_only: bool = False) -> DescribeConfigsResponseResourceResult:
    sensitive = name in broker_config.SENSITIVE_KEYS  # as Kafka: a password is never shown
    if sensitive:
        value = None
        synonyms = [{**synonym, "value": None} for synonym in synonyms]
    return {"name": name, "value": _text(value),
            "read_only": read_only, "is_default": source == ConfigSource.DEFAULT_CONFIG,
            "config_source": source, "is_sensitive": sensitive, "synonyms": synonyms,
            "config_type": PASSWORD if sensitive else kind, "documentation": doc}


def _topic_entries(ctx: RequestContext, overrides: dict[str, str], keys: set[str] | None,
                   with_synonyms: bool,
                   with_docs: bool) -> list[DescribeConfigsResponseResourceResult]:
    values = ctx.broker.topics.effective_config(overrides)
    config = ctx.broker.config
    entries = []
    for key in sorted(values):
        if keys is not None and key not in keys:
            continue
        kind, broker_keys, doc = TOPIC_CONFIG_INFO.get(key, (STRING, (), ""))
        chain: list[DescribeConfigsResponseSynonym] = []
        if key in overrides:
            chain.append({"name": key, "value": overrides[key],
                          "source": ConfigSource.DYNAMIC_TOPIC_CONFIG})
        chain += [{"name": bk, "value": _text(value), "source": source}
                  for bk in broker_keys for value, source in config.layers(bk)]
        chain.append(_default_synonym(key, broker_keys))
        entries.append(_entry(key, values[key],
                              chain[0].get("source", ConfigSource.DEFAULT_CONFIG), kind,
                              doc if with_docs else None, chain if with_synonyms else []))
    return entries


def _broker_entries(ctx: RequestContext, keys: set[str] | None, with_synonyms: bool,
                    with_docs: bool) -> list[DescribeConfigsResponseResourceResult]:
    config = ctx.broker.config
    entries = []
    for key in sorted(broker_config.SCHEMA):
        if keys is not None and key not in keys:
            continue
        chain: list[DescribeConfigsResponseSynonym] = [
            {"name": name, "value": _text(value), "source": source}
            for name, value, source in config.synonyms(key)]
        entries.append(_entry(key, config.get(key), config.source(key), _broker_type(key),
                              None, chain if with_synonyms else [],
                              read_only=key not in DYNAMIC_KEYS))
    return entries


def _broker_type(key: str) -> int:
    parser = broker_config.SCHEMA[key][0]
    if key in BROKER_LIST_KEYS:
        return LIST
    return (BOOLEAN if parser is broker_config.parse_bool else STRING if parser is str else
            DOUBLE if parser is float else
            LONG if key.endswith(".ms") or parser is broker_config.parse_long else INT)


def _default_entries(ctx: RequestContext, keys: set[str] | None,
                     with_synonyms: bool) -> list[DescribeConfigsResponseResourceResult]:
    """The cluster-wide dynamic defaults that are set (the BROKER resource "")."""
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    entries = []
    for key, value in sorted(ctx.broker.dynamic_config.layer(DEFAULT_ENTITY).items()):
        if keys is None or key in keys:
            chain: list[DescribeConfigsResponseSynonym] = [
                {"name": key, "value": value, "source": source}]
            entries.append(_entry(key, value, source, _broker_type(key), None,
                                  chain if with_synonyms else []))
    return entries


def _pybroker_loggers() -> list[logging.Logger]:
    manager = logging.Logger.manager
    names = sorted(n for n in manager.loggerDict if n == "pybroker" or n.startswith("pybroker."))
    return [logging.getLogger(n) for n in names]


def _logger_entries(keys: set[str] | None) -> list[DescribeConfigsResponseResourceResult]:
    return [_entry(lg.name, logging.getLevelName(lg.getEffectiveLevel()),
                   ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, STRING, None, [])
            for lg in _pybroker_loggers() if keys is None or lg.name in keys]


def _check_broker_name(ctx: RequestContext, name: str, allow_default: bool) -> None:
    if name == "" and allow_default:
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != ctx.broker.broker_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {ctx.broker.broker_id} or "
                                  f"empty string, but received {name}")


async def _topic_overrides(ctx: RequestContext, name: str) -> dict[str, str]:
    """The topic's overrides, wherever its replicas are."""
    validate_topic_name(name)
    return await ctx.broker.metadata.topic_configs(name)


def _require_access(ctx: RequestContext, operation: AclOperation, kind: int | None,
                    name: str) -> None:
    """ACLs: a topic's configs are the topic's, the brokers' and loggers' the cluster's."""
    if kind == TOPIC:
        ctx.require(operation, ResourceType.TOPIC, name)
    elif kind in (BROKER, BROKER_LOGGER):
        ctx.require(operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def _describe_one(ctx: RequestContext, resource: DescribeConfigsRequestResource,
                  with_synonyms: bool,
                  with_docs: bool) -> list[DescribeConfigsResponseResourceResult]:
    kind, name = resource.get("resource_type"), resource.get("resource_name") or ""
    _require_access(ctx, AclOperation.DESCRIBE_CONFIGS, kind, name)
    named = resource.get("configuration_keys")
    keys = None if named is None else set(named)
    if kind == TOPIC:
        return _topic_entries(ctx, await _topic_overrides(ctx, name), keys, with_synonyms,
                              with_docs)
    if kind == BROKER:
        _check_broker_name(ctx, name, allow_default=True)
        if name == "":
            return _default_entries(ctx, keys, with_synonyms)
        return _broker_entries(ctx, keys, with_synonyms, with_docs)
    if kind == BROKER_LOGGER:
        _check_broker_name(ctx, name, allow_default=False)
        return _logger_entries(keys)
    raise InvalidRequestError(f"Unsupported resource type: {kind}")


@handler(api_key=32, versions=(0, 4))
async def describe_configs(ctx: RequestContext,
                           request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    with_synonyms = bool(request.get("include_synonyms")) and ctx.api_version >= 1
    with_docs = bool(request.get("include_documentation"))
    results: list[DescribeConfigsResponseResult] = []
    for resource in request.get("resources") or []:
        result: DescribeConfigsResponseResult = {
            "resource_type": resource["resource_type"],
            "resource_name": resource["resource_name"],
            "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
        try:
            result["configs"] = await _describe_one(ctx, resource, with_synonyms, with_docs)
        except KafkaError as exc:
            result["error_code"], result["error_message"] = int(exc.code), str(exc)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


# altering -----------------------------------------------------------------------------------


def _no_duplicate_keys(configs: Iterable[AlterableConfig]) -> None:
    counts = Counter(c.get("name") for c in configs)
    duplicated = sorted(str(k) for k, n in counts.items() if n > 1)
    if duplicated:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicated)}")


def _list_items(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _incremental(values: Mapping[str, str], current: Callable[[str], str | None],
                 configs: Sequence[AlterableConfig], list_keys: Collection[str],
                 known: Collection[str] | None = None) -> dict[str, str]:
    """A resource's settings (a topic's overrides, a broker's dynamic layer) after applying
    SET/DELETE/APPEND/SUBTRACT, not yet validated; ``current(key)``: the effective value
    APPEND and SUBTRACT start from when ``values`` lacks the key; ``known``: the keys an
    unknown one is INVALID_CONFIG against (None: checked later)."""
    overrides = dict(values)
    for item in configs:
        key, value, op = item.get("name") or "", item.get("value"), item.get("config_operation")
        if known is not None and key not in known:
            raise InvalidConfigError(f"Unknown topic config name: {key}")
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for : {key}")
            overrides[key] = value
        elif op == DELETE:
            overrides.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if key not in list_keys:
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(f"Config value {verb} is not allowed for config key: "
                                         f"{key}")
            items = _list_items(overrides.get(key, current(key)))
            change = _list_items(value)
            if op == APPEND:
                items += [v for v in change if v not in items]
            else:
                items = [v for v in items if v not in change]
            overrides[key] = ",".join(items)
        else:
            raise InvalidRequestError(f"Unknown alter config operation {op} for {key}")
    return overrides


def _replaced(configs: Sequence[AlterableConfig]) -> dict[str, str]:
    """AlterConfigs: the new override set is exactly the given configs."""
    out: dict[str, str] = {}
    for item in configs:
        key, value = item["name"], item["value"]
        if value is None:
            raise InvalidRequestError(f"Null value not supported for : {key}")
        out[key] = value
    return out


async def _apply_topic(ctx: RequestContext, name: str, overrides: dict[str, str],
                       validate_only: bool) -> None:
    checked = topic_config.validate(overrides)
    ctx.broker.topics.log_config(checked)  # with the broker defaults (segment sizes etc.)
    if not validate_only:
        await ctx.broker.metadata.alter_topic_configs(name, checked)


def _alter_logger(ctx: RequestContext, name: str, configs: Sequence[AlterableConfig],
                  validate_only: bool, incremental: bool) -> None:
    _check_broker_name(ctx, name, allow_default=False)
    levels: dict[str, int] = {}
    for item in configs:
        key, value = item.get("name") or "", item.get("value")
        op = item.get("config_operation", SET) if incremental else SET
        if key != "pybroker" and not key.startswith("pybroker."):
            raise InvalidConfigError(f"Logger {key} does not exist")
        if op == DELETE:
            levels[key] = logging.NOTSET  # back to inheriting the parent's level
        elif op == SET and value is not None and value.upper() in _LOGGER_LEVELS:
            name_in_python = {"TRACE": "DEBUG", "WARN": "WARNING", "FATAL": "CRITICAL"}.get(
                value.upper(), value.upper())
            levels[key] = logging.getLevelNamesMapping()[name_in_python]
        else:
            raise InvalidConfigError(f"Cannot set logger {key} to {value}: the level must be "
                                     f"one of {', '.join(_LOGGER_LEVELS)}")
    if not validate_only:
        for key, level in levels.items():
            logging.getLogger(key).setLevel(level)


async def _alter_broker(ctx: RequestContext, name: str, configs: Sequence[AlterableConfig],
                        validate_only: bool, incremental: bool) -> None:
    _check_broker_name(ctx, name, allow_default=True)
    entity = DEFAULT_ENTITY if name == "" else str(ctx.broker.broker_id)
    dynamic = ctx.broker.dynamic_config

    def default(key: str) -> str | None:
        """What APPEND/SUBTRACT start from when the resource's layer lacks the key: the
        key's default, as Kafka's ``prepareIncrementalConfigs`` (not the static value)."""
        return _text(broker_config.SCHEMA[key][1]) if key in broker_config.SCHEMA else None
    layer = (_incremental(dynamic.layer(entity), default, configs, BROKER_LIST_KEYS)
             if incremental else _replaced(configs))
    dynamic.checked(entity, layer)
    if not validate_only:
        await ctx.broker.metadata.alter_broker_configs(entity, layer)


async def _alter_one(ctx: RequestContext, resource: AlterResource, validate_only: bool,
                     incremental: bool) -> None:
    kind, name = resource.get("resource_type"), resource.get("resource_name") or ""
    _require_access(ctx, AclOperation.ALTER_CONFIGS, kind, name)
    configs = resource.get("configs") or []
    _no_duplicate_keys(configs)
    if kind == TOPIC:
        current = await _topic_overrides(ctx, name)
        effective = ctx.broker.topics.effective_config(current)
        overrides = (_incremental(current, effective.get, configs, LIST_KEYS,
                                  topic_config.TOPIC_CONFIGS)
                     if incremental else _replaced(configs))
        await _apply_topic(ctx, name, overrides, validate_only)
    elif kind == BROKER:
        await _alter_broker(ctx, name, configs, validate_only, incremental)
    elif kind == BROKER_LOGGER:
        _alter_logger(ctx, name, configs, validate_only, incremental)
    else:
        raise InvalidRequestError(f"Unsupported resource type: {kind}")


async def _alter(ctx: RequestContext, request: AlterRequest,
                 incremental: bool) -> list[AlterConfigsResponseResourceResponse]:
    resources = request.get("resources") or []
    seen = Counter((r.get("resource_type"), r.get("resource_name")) for r in resources)
    validate_only = bool(request.get("validate_only"))
    responses: list[AlterConfigsResponseResourceResponse] = []
    for resource in resources:
        kind, name = resource["resource_type"], resource["resource_name"]
        result: AlterConfigsResponseResourceResponse = {
            "resource_type": kind, "resource_name": name,
            "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if seen[(kind, name)] > 1:
                raise InvalidRequestError("Duplicate resource in request.")
            await _alter_one(ctx, resource, validate_only, incremental)
        except KafkaError as exc:
            result["error_code"], result["error_message"] = int(exc.code), str(exc)
        responses.append(result)
    return responses


@handler(api_key=33, versions=(0, 2))
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    return {"throttle_time_ms": 0,
            "responses": await _alter(ctx, request, incremental=False)}


@handler(api_key=44, versions=(0, 1))
async def incremental_alter_configs(
        ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    # the two responses have the same fields
    return {"throttle_time_ms": 0,
            "responses": list(await _alter(ctx, request, incremental=True))}
