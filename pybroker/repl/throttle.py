"""Replication quotas (KIP-73): Kafka's ``ReplicationQuotaManager``, one for the leader
side of this broker and one for its follower side, so that moving a replica does not
take the bandwidth producers and consumers need.

What is throttled is chosen per topic and replica, the rate per broker:

- topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas``: ``*`` (every replica of the topic) or a
  list ``partition:brokerId,...``. As in Kafka, a broker reads from each list the
  partitions listed with its own id: the leader list names the leaders' replicas whose
  serving is throttled, the follower list the followers' replicas whose fetching is.
- broker configs ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` (bytes a second, dynamic: per broker or the
  cluster default; the largest long, the default, is no throttle).

Measure (Kafka's sensors ``LeaderReplication``/``FollowerReplication`` ``byte-rate``):
the ``Rate`` of the client quotas (:mod:`pybroker.broker.quotas`) over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``;
each side counts the record bytes of its throttled partitions only, and is exceeded
while that rate is above its bound.

Enforcement, as Kafka's (partitions held back, never an error, never a delay):
- the leader (``fetch`` handler) answers a follower's fetch with no records for a
  throttled partition while its quota is exceeded, unless that follower is in the ISR
  (Kafka's ``shouldLeaderThrottle``); the others are served as usual.
- the follower (``LeaderFetcher``) leaves a throttled partition out of its fetch while
  its quota is exceeded, unless it has caught up with the leader's high watermark
  (Kafka's ``shouldFollowerThrottle``); when that leaves nothing to ask for it waits
  ``replica.fetch.backoff.ms``, as Kafka's fetcher does.
So replicas catching up move at about the rate, and in-sync replicas (acks=all
producers wait for them) never wait for a throttle.

Difference from Kafka: with no rate set (the default) a side counts nothing, so the hot
path asks one flag; its ``byte-rate`` then reads 0 where Kafka measures the listed
replicas anyway.

Not thread-safe: the event loop's.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pybroker.broker.quotas import Rate
from pybroker.config import LONG_MAX
from pybroker.errors import InvalidConfigError

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition
    from pybroker.config import BrokerConfig

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
RATE_KEYS = frozenset({LEADER_RATE, FOLLOWER_RATE})
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNTHROTTLED = LONG_MAX  # Kafka's default rate: Long.MAX_VALUE, no throttle

# Kafka's ThrottledReplicaListValidator: each item of the list (split at commas with the
# blanks around them, empty items kept) is empty or partition:broker, or they join to "*"
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
_COMMA = re.compile(r"\s*,\s*")


def _items(text: str) -> list[str]:
    """Kafka's LIST parsing: trimmed, split at commas and the blanks around them."""
    trimmed = text.strip()
    return _COMMA.split(trimmed) if trimmed else []


def check_throttled_replicas(key: str, text: str) -> None:
    """InvalidConfigError with Kafka 4.1's message for a value its validator refuses."""
    items = _items(text)
    if all(_REPLICA.fullmatch(item) for item in items) or "".join(items) == "*":
        return
    raise InvalidConfigError(
        f"Invalid value [{', '.join(items)}] for configuration {key}: {key} must be the "
        "literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


@functools.lru_cache(maxsize=1024)
def throttled_partitions(text: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a valid ``*.replication.throttled.replicas`` value lists with
    ``broker_id``; None: every partition ("*")."""
    items = _items(text)
    if "".join(items) == "*":
        return None
    return frozenset(int(partition) for partition, _, broker in
                     (item.partition(":") for item in items if item)
                     if int(broker) == broker_id)


class ReplicationQuota:
    """One side's quota: which of this broker's replicas it throttles, its rate and its
    measure."""

    __slots__ = ("kind", "replicas_key", "broker_id", "bound", "active", "_overrides",
                 "_rate")

    def __init__(self, kind: str, replicas_key: str, broker_id: int,
                 overrides: Callable[[str], Mapping[str, str]], samples: int,
                 window_seconds: float) -> None:
        self.kind = kind  # "leader" or "follower"
        self.replicas_key = replicas_key
        self.broker_id = broker_id
        self.bound = float(UNTHROTTLED)
        self.active = False  # a rate is set: the only test the fetch paths make without
        self._overrides = overrides  # topic name -> its config overrides
        self._rate = Rate(samples, window_seconds, time.monotonic())

    def set_rate(self, bytes_per_second: int) -> None:
        self.bound = float(bytes_per_second)
        self.active = bytes_per_second < UNTHROTTLED

    def throttled(self, partition: Partition) -> bool:
        """Whether the topic's config lists this broker's replica of ``partition``."""
        text = self._overrides(partition.topic).get(self.replicas_key)
        if not text:
            return False
        listed = throttled_partitions(text, self.broker_id)
        return listed is None or partition.index in listed

    def exceeded(self) -> bool:
        return self.active and self._rate.measure(time.monotonic())[0] > self.bound

    def record(self, size: int) -> None:
        self._rate.record(size, time.monotonic())

    def rate(self) -> float:
        """Bytes a second measured now (Kafka's ``byte-rate``)."""
        return self._rate.measure(time.monotonic())[0]


class ReplicationQuotas:
    """This broker's two sides, their rates following the dynamic broker config."""

    __slots__ = ("leader", "follower")

    def __init__(self, config: BrokerConfig,
                 overrides: Callable[[str], Mapping[str, str]]) -> None:
        samples = config["replication.quota.window.num"]
        window = config["replication.quota.window.size.seconds"]
        for key, value in (("replication.quota.window.num", samples),
                           ("replication.quota.window.size.seconds", window)):
            if value < 1:  # Kafka's bound too
                raise ValueError(f"{key} must be at least 1, not {value}")
        self.leader = ReplicationQuota("leader", LEADER_REPLICAS, config.broker_id,
                                       overrides, samples, window)
        self.follower = ReplicationQuota("follower", FOLLOWER_REPLICAS, config.broker_id,
                                         overrides, samples, window)
        self.reconfigure(config)

    def reconfigure(self, config: BrokerConfig) -> None:
        self.leader.set_rate(config[LEADER_RATE])
        self.follower.set_rate(config[FOLLOWER_RATE])
