"""Topic configs: the keys a topic may override, their checks, and Kafka's defaults.

The keys the log acts on are checked by ``LogConfig.from_properties``; Kafka also accepts
a few topic keys that matter only to features this broker does not have (preallocation,
down-conversion). They are accepted, validated and kept so clients
and admin tools that set them work, and listed by DescribeConfigs. A topic stores only its
overrides; its effective config is Kafka's default < broker default
(``BrokerConfig.topic_defaults``: static or dynamic) < topic override. Values travel as strings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from pybroker.config import ConfigSource
from pybroker.errors import InvalidConfigError
from pybroker.log.log_config import KNOWN_KEYS, LogConfig
from pybroker.repl.throttle import FOLLOWER_REPLICAS, LEADER_REPLICAS, check_throttled_replicas


def _non_negative(text: str) -> int:
    if int(text) < 0:
        raise ValueError("must be >= 0")
    return int(text)


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.lower() == "true"


# keys outside LogConfig: key -> (check, Kafka's default)
_EXTRA: dict[str, tuple[Callable[[str], Any], str]] = {
    "message.timestamp.difference.max.ms": (_non_negative, "9223372036854775807"),
    "preallocate": (_bool, "false"),
    "unclean.leader.election.enable": (_bool, "false"),
    "message.downconversion.enable": (_bool, "true"),
    # replication quotas' replicas (pybroker.repl.throttle): "*" or partition:broker,...
    **{key: (functools.partial(check_throttled_replicas, key), "")
       for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS)},
}


def _as_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _log_check(key: str) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        return LogConfig.from_properties({key: text})
    return check


# Every topic key: key -> (check raising ValueError/InvalidConfigError, Kafka's default)
TOPIC_CONFIGS: dict[str, tuple[Callable[[str], Any], str]] = {
    **{key: (_log_check(key), _as_text(value))
       for key, value in LogConfig().to_properties().items()},
    **_EXTRA,
}
DEFAULTS: dict[str, str] = {key: default for key, (_, default) in TOPIC_CONFIGS.items()}


def validate(configs: Mapping[str, Any]) -> dict[str, str]:
    """Check topic overrides; returns them as strings. Raises InvalidConfigError."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {key}")
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic config {key}")
        out[key] = _as_text(value)
        try:
            TOPIC_CONFIGS[key][0](out[key])
        except ValueError as exc:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {key}: {exc}") from None
    return out


def effective(broker_defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, str]:
    """Every topic config as a string: Kafka default < broker default < topic override."""
    merged = dict(DEFAULTS)
    merged.update({k: _as_text(v) for k, v in broker_defaults.items() if k in DEFAULTS})
    merged.update(overrides)
    return merged


def log_config(broker_defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> LogConfig:
    merged = effective(broker_defaults, overrides)
    return LogConfig.from_properties({k: v for k, v in merged.items() if k in KNOWN_KEYS})


def describe(broker_defaults: Mapping[str, Any], overrides: Mapping[str, str],
             broker_sources: Mapping[str, ConfigSource]) -> list[tuple[str, str, int]]:
    """(key, effective value, config_source) of every topic config, sorted by key.
    ``broker_sources``: where each topic key's broker default comes from, for those some
    layer set (``BrokerConfig.topic_default_sources``); the others are DEFAULT_CONFIG, as
    DescribeConfigs reports them."""
    merged = effective(broker_defaults, overrides)
    return [(key, merged[key], ConfigSource.DYNAMIC_TOPIC_CONFIG if key in overrides else
             broker_sources.get(key, ConfigSource.DEFAULT_CONFIG))
            for key in sorted(merged)]
