"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), v0-1, as Kafka 4.1
answers them (``pybroker.broker.quotas`` holds the entities, checks and messages).

AlterClientQuotas answers per entity: an entity named twice in a request gets one
INVALID_REQUEST answer ("Ignoring duplicate entity ..."), the others are checked on their
own; those that pass are kept by the control plane together
(``metadata.alter_client_quotas``: durable before the answer, applied here at once and on
the other brokers as they learn), unless ``validate_only``. Removing a key that is not set
is no error. DescribeClientQuotas filters with Kafka's match types (EXACT, DEFAULT,
SPECIFIED) and ``strict`` (no components but the filtered ones); a filter Kafka refuses is
a whole-request error with no entries.

ACLs, as Kafka: describing needs DESCRIBE_CONFIGS on the cluster (else the whole request
is CLUSTER_AUTHORIZATION_FAILED), altering ALTER_CONFIGS on the cluster (else every
entry is).
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.quotas import (
    Entity,
    FilterComponent,
    check_alteration,
    check_filter,
    entity_of,
    entity_text,
)
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.typed import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntryData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType


def _components(entity: Entity) -> list:
    return [{"entity_type": t, "entity_name": name} for t, name in entity]


@handler(api_key=48, versions=(0, 1))
async def describe_client_quotas(ctx: RequestContext, request: DescribeClientQuotasRequest
                                 ) -> DescribeClientQuotasResponse:
    components = [FilterComponent(c["entity_type"], c["match_type"], c["match"])
                  for c in request["components"]]
    try:
        ctx.require(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
        check_filter(components)
    except KafkaError as exc:
        return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": str(exc),
                "entries": None}
    found = ctx.broker.quotas.describe(components, request["strict"])
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": "",
            "entries": [{"entity": _components(entity),
                         "values": [{"key": k, "value": v} for k, v in values.items()]}
                        for entity, values in found]}


@handler(api_key=49, versions=(0, 1))
async def alter_client_quotas(ctx: RequestContext, request: AlterClientQuotasRequest
                              ) -> AlterClientQuotasResponse:
    quotas = ctx.broker.quotas
    answers: dict[Entity, AlterClientQuotasResponseEntryData] = {}
    changed: dict[Entity, dict[str, float]] = {}
    duplicates: set[Entity] = set()
    refused = ctx.refusal(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    for entry in request["entries"]:
        entity = entity_of((c["entity_type"], c["entity_name"]) for c in entry["entity"])
        answer = answers.setdefault(entity, {"error_code": ErrorCode.NONE,
                                             "error_message": None,
                                             "entity": _components(entity)})
        if refused is not None:
            answer["error_code"], answer["error_message"] = refused.code, str(refused)
            continue
        if entity in duplicates or entity in changed or answer["error_code"]:
            duplicates.add(entity)
            changed.pop(entity, None)
            answer["error_code"] = ErrorCode.INVALID_REQUEST
            answer["error_message"] = f"Ignoring duplicate entity {entity_text(entity)}"
            continue
        try:
            changes = check_alteration(entity, ((op["key"], op["value"], op["remove"])
                                                for op in entry["ops"]))
        except KafkaError as exc:
            answer["error_code"], answer["error_message"] = exc.code, str(exc)
            continue
        changed[entity] = quotas.altered(entity, changes)
    if changed and not request["validate_only"]:
        await ctx.broker.metadata.alter_client_quotas(changed)
    return {"throttle_time_ms": 0, "entries": list(answers.values())}
