"""InitProducerId (key 22): producer ids and epochs for idempotent and transactional
producers.

Without a transactional id every call gets a fresh producer id at epoch 0 (what Kafka does
for idempotent producers, also when they pass their old id after an error, KIP-360), from
this broker. With one, the transaction coordinator answers (pybroker/txn/coordinator.py):
the id keeps its producer id and gets the next epoch, fencing older instances; its
transaction timeout must be positive and at most ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT otherwise, before any state is touched).
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import InitProducerIdRequest, InitProducerIdResponse
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from pybroker.txn.coordinator import ProducerIdAndEpoch

PRODUCER_FENCED_FIRST_VERSION = 4  # KIP-588: older clients are told INVALID_PRODUCER_EPOCH


@handler(api_key=22, versions=(0, 5))
async def init_producer_id(ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.get("transactional_id")
    if transactional_id:
        ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    elif not (ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
              or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)):
        ctx.require(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
    if not transactional_id:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "producer_id": await ctx.broker.producer_ids.new_id_async(),
                "producer_epoch": 0}
    result = await ctx.broker.txn_coordinator.init_producer(
        transactional_id, request["transaction_timeout_ms"],
        ProducerIdAndEpoch(request.get("producer_id", -1), request.get("producer_epoch", -1)))
    error = result.error
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_FIRST_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return {"throttle_time_ms": 0, "error_code": error, "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch}
