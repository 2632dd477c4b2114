"""CreateTopics (key 19): partitions, replication factor, validated configs, validate_only.

The topics are created by the control plane (``ctx.broker.metadata.create_topics``, the
one way topics are created), which checks each one and answers its error in its place:
on one node all of a request's topics are recorded together and their logs created a
slice at a time; in a cluster each is written to ZooKeeper and answered once this
broker's metadata shows its leaders (:mod:`pybroker.metadata`). Checked here, before
either: a name twice in one request INVALID_REQUEST, and manual assignments given
together with a partition count or replication factor INVALID_REQUEST. -1 partitions or
replication factor (v4+) take the broker defaults. v5+ answers the effective configs.

Each topic's partitions count against the client's ``controller_mutation_rate`` quota
(KIP-599, ``pybroker.broker.quotas``) before the control plane is asked, and are given
back when it refuses the topic; a topic of a v6+ request asked for while the client is
over its quota is answered THROTTLING_QUOTA_EXCEEDED. A topic that already exists is not
counted.
"""

from __future__ import annotations

import collections

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, InvalidRequestError, KafkaError
from pybroker.metadata import CreatedTopic, NewTopic
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicConfigs,
    CreateTopicsResponseCreatableTopicResult,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType


def _new_topic(item: CreateTopicsRequestCreatableTopic) -> NewTopic:
    """The topic asked for by ``item``."""
    assignment = None
    if item.get("assignments"):
        if item["num_partitions"] != -1 or item["replication_factor"] != -1:
            raise InvalidRequestError("Both numPartitions or replicationFactor and "
                                      "replicasAssignments were set. Both cannot be used at "
                                      "the same time.")
        assignment = [(a["partition_index"], list(a["broker_ids"]))
                      for a in item["assignments"]]
    configs = {c["name"]: c["value"] for c in item.get("configs") or ()}
    return NewTopic(item["name"], item["num_partitions"], item["replication_factor"], configs,
                    assignment)


def _partitions(ctx: RequestContext, new: NewTopic) -> int:
    """The partitions creating ``new`` makes, for the mutation quota (none for a topic
    that exists: the control plane refuses it)."""
    if ctx.broker.metadata.partition_count(new.name):
        return 0
    if new.assignment is not None:
        return len(new.assignment)
    return new.partitions if new.partitions > 0 else ctx.broker.config["num.partitions"]


def _answer(name: str, created: CreatedTopic,
            configs: list[CreateTopicsResponseCreatableTopicConfigs]
            ) -> CreateTopicsResponseCreatableTopicResult:
    return {
        "name": name, "topic_id": created.topic_id, "error_code": ErrorCode.NONE,
        "error_message": None, "num_partitions": created.partitions,
        "replication_factor": created.replication_factor, "configs": configs,
    }


class _ConfigAnswers:
    """The v5+ ``configs`` of created topics, built once per distinct set of overrides
    and shared (the encoder only reads them): 2,000 topics with the defaults took ~50 ms
    of the loop to build one list each. Before v5 there are none to build."""

    def __init__(self, ctx: RequestContext) -> None:
        self._topics = ctx.broker.topics
        self._wanted = ctx.api_version >= 5
        self._built: dict[tuple[tuple[str, str], ...],
                          list[CreateTopicsResponseCreatableTopicConfigs]] = {}

    def __call__(self, overrides: dict[str, str]
                 ) -> list[CreateTopicsResponseCreatableTopicConfigs]:
        if not self._wanted:
            return []
        key = tuple(sorted(overrides.items()))
        configs = self._built.get(key)
        if configs is None:
            configs = self._built[key] = [
                {"name": name, "value": value, "read_only": False, "config_source": source,
                 "is_sensitive": False}
                for name, value, source in self._topics.describe_config(overrides)]
        return configs


def _failed(name: str, exc: KafkaError) -> CreateTopicsResponseCreatableTopicResult:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": exc.code,
            "error_message": str(exc), "num_partitions": -1, "replication_factor": -1,
            "configs": []}


@handler(api_key=19, versions=(0, 7))
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    items = request["topics"] or []
    validate_only = request.get("validate_only", False)
    counts = collections.Counter(item["name"] for item in items)
    results: list[CreateTopicsResponseCreatableTopicResult] = []
    # (slot in results, topic, partitions counted against the quota): created together
    creating: list[tuple[int, NewTopic, int]] = []
    may_create_any = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    quota = ctx.mutation_quota(strict_since=6)
    for item in items:
        try:
            if counts[item["name"]] > 1:
                raise InvalidRequestError(f"Create topics request from client "
                                          f"`{ctx.client_id}` contains multiple entries for "
                                          f"the following topics: {item['name']}")
            refused = None if may_create_any else \
                ctx.refusal(AclOperation.CREATE, ResourceType.TOPIC, item["name"])
            if refused is not None:
                raise refused
            new = _new_topic(item)
            counted = _partitions(ctx, new)
            quota.record(counted)
            creating.append((len(results), new, counted))
            results.append({"name": item["name"], "error_code": ErrorCode.NONE})  # answered below
        except KafkaError as exc:
            results.append(_failed(item["name"], exc))
    if creating:
        created = await ctx.broker.metadata.create_topics([new for _, new, _ in creating],
                                                          validate_only)
        configs = _ConfigAnswers(ctx)
        for (slot, new, counted), outcome in zip(creating, created, strict=True):
            if isinstance(outcome, KafkaError):
                quota.refund(counted)
                results[slot] = _failed(new.name, outcome)
            elif ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, new.name):
                results[slot] = _answer(new.name, outcome, configs(outcome.overrides))
            else:  # created, but its configs are not the client's to see (Kafka's answer)
                results[slot] = _answer(new.name, outcome, [])
                results[slot]["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return {"throttle_time_ms": ctx.mutation_throttle(quota), "topics": results}
